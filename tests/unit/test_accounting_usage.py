"""Usage TRES rolled up from steps to jobs (issue 26), on real recorded lab output and on the rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.accounting.ingest import usage
from gpuclust.accounting.ingest.fast import tres_values
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.pipeline import read_input

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting" / "usage"
HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "AllocTRES|NNodes|NodeList|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot|TRESUsageOutTot|ConsumedEnergyRaw")
JOB = ("{id}|{id}|train|alice|ml|gpu|normal|COMPLETED|0:0|2026-12-02T10:00:00|2026-12-02T10:00:00|"
       "2026-12-02T10:00:00|2026-12-02T11:00:00|01:00:00|billing=8,cpu=8,gres/gpu=4,mem=64G,node=1|1|n1|||||{e}")
STEP = ("{id}.{s}|{id}.{s}|python||ml|||COMPLETED|0:0|2026-12-02T10:00:00|2026-12-02T10:00:00|"
        "2026-12-02T10:00:00|2026-12-02T11:00:00|01:00:00|cpu=8,gres/gpu={g},mem=64G,node=1|1|n1|{ave}|{max}|{tot}||0")


def _by_job(path: Path, **opts: object) -> dict[str, dict[str, object]]:
    result = read_input(str(path), options=ReaderOptions(**opts))  # type: ignore[arg-type]
    rows = result.table.to_pylist()
    return {str(r["job_id"]): r for r in rows}


@pytest.mark.parametrize("fast", [True, False])
def test_lab_22_05_text_and_json_agree(fast: bool) -> None:
    """Real Slurm 22.05.8 (lab, jobacct_gather/linux): the text dump and the --json document of the same jobs give
    the same usage; job 2's step 0 used 29 s of CPU and 218192K resident, and no energy was gathered."""
    text = _by_job(DATA / "lab-22.05-steps-pipe.txt", fast=fast)
    doc = _by_job(DATA / "lab-22.05-steps.json")
    assert set(text) == set(doc) == {"1", "2"}
    assert text["2"]["mem_max_mb"] == pytest.approx(218192 / 1024)
    assert doc["2"]["mem_max_mb"] == pytest.approx(223428608 / 1024 / 1024)
    assert text["2"]["cpu_used_s"] == 29.0  # the text prints whole seconds; JSON has ms
    assert doc["2"]["cpu_used_s"] == pytest.approx(29.93)
    for jobs in (text, doc):
        assert jobs["1"]["cpu_used_s"] is None  # a 4 s job: jacct sampled nothing: unknown, never 0
        assert all(j["energy_j"] is None for j in jobs.values())  # no energy plugin: Slurm prints 0
        assert all(j["gpu_util_gpu_s"] is None for j in jobs.values())  # no NVML: no gres/gpuutil


def _dump(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "dump.txt"
    path.write_text("\n".join([HEADER, *lines]) + "\n", encoding="utf-8")
    return path


def test_rules_turn_gpuutil_into_per_gpu_utilisation(tmp_path: Path) -> None:
    """One 4-GPU job, busy 60% per GPU for its hour, one task: Tot = Ave = the task's value summed over its GPUs
    (23.02.x and 24.05.1 on). 23.11.0-24.05.0 kept only the node's last GPU: unknown, counted, never idle."""
    lines = [JOB.format(id=1, e=1800000),
             STEP.format(id=1, s="0", g=4, ave="cpu=00:10:00,gres/gpuutil=240",
                         max="gres/gpuutil=320,gres/gpumem=40960M,mem=2G", tot="cpu=00:10:00,gres/gpuutil=240")]
    for version in ("23.02.7", "24.05.1", "slurm-wlm 24.11.5", "26.05"):
        got = _by_job(_dump(tmp_path, lines), slurm_version=version)["1"]
        assert got["gpu_util_rule"] == usage.RULE_SUMMED, version
        assert got["gpu_util_gpu_s"] == 4 * 3600
        assert got["gpu_busy_gpu_s"] == pytest.approx(0.6 * 4 * 3600)
        assert got["gpu_util_max_pct"] == pytest.approx(80)
        assert got["gpu_mem_max_mb"] == 40960 and got["mem_max_mb"] == 2048 and got["energy_j"] == 1800000
    # Without a version, a value over 100 on several GPUs can only be a sum.
    assert _by_job(_dump(tmp_path, lines))["1"]["gpu_util_rule"] == usage.RULE_SUMMED
    for version in ("23.11.0", "23.11.10", "24.05", "24.05.0"):
        result = read_input(str(_dump(tmp_path, lines)), options=ReaderOptions(slurm_version=version))
        got = result.table.to_pylist()[0]
        assert got["gpu_util_rule"] == usage.RULE_LAST_GPU, version
        assert got["gpu_busy_gpu_s"] is None and got["gpu_util_gpu_s"] is None, version
        assert got["mem_max_mb"] == 2048  # the other usage figures stand
        assert result.usage_warnings == 1 and "last GPU" in result.usage_problems[0], version


def test_sacct_unit_suffix_on_gpuutil_before_23_11_7(tmp_path: Path) -> None:
    """sacct before 23.11.7 puts gpuutil through its unit conversion: a 16-GPU step's Tot 1536 prints `1.50K`."""
    job = JOB.format(id=3, e=0).replace("gres/gpu=4", "gres/gpu=16")
    step = STEP.format(id=3, s="0", g=16, ave="gres/gpuutil=96", max="gres/gpuutil=1K", tot="gres/gpuutil=1.50K")
    got = _by_job(_dump(tmp_path, [job, step]), slurm_version="23.02.6")["3"]
    assert got["gpu_busy_gpu_s"] == pytest.approx(0.96 * 16 * 3600)
    assert got["gpu_util_max_pct"] == pytest.approx(96)  # the step's mean of peaks beats 1024 / 16 = 64


def _usage_rows(name: str) -> dict[str, str]:
    """A real `sacct -p[n]o JobID,<one usage field>` recording (or one with a header) -> {row id: TRES text}."""
    out: dict[str, str] = {}
    for line in (DATA / name).read_text(encoding="utf-8").splitlines():
        cells = line.rstrip("|").split("|")
        if cells[0].startswith("TRESUsage"):
            continue
        out[cells[0] if len(cells) > 1 else "value"] = cells[-1] if len(cells) > 1 else cells[0]
    return out


def test_public_recordings_parse_to_the_figures_their_pages_state() -> None:
    """Real sacct output from other sites (tests/data/accounting/usage/SOURCES.md), each checked against what the
    same page says or against another recording of the same job."""
    # CU Boulder Alpine, job 18194943, one task on .batch: Max (units converted) and Ave (--noconvert, bytes) are
    # the same figures, because Ave = Tot / 1 task and Tot = the task's peak.
    peak = usage.parse_usage(_usage_rows("curc-alpine-18194943-tresusageinmax-pno.txt")["18194943.batch"])
    ave = usage.parse_usage(_usage_rows("curc-alpine-18194943-tresusageinave-pno-noconvert.txt")["18194943.batch"])
    assert peak["gres/gpumem"] == ave["gres/gpumem"] == 38888
    assert peak["mem"] == ave["mem"] == pytest.approx(10372780 / 1024)
    assert peak["gres/gpuutil"] == ave["gres/gpuutil"] == 100 and peak["cpu"] == 56 * 60 + 24
    extern = usage.parse_usage(_usage_rows("curc-alpine-18194943-tresusageinmax-pno.txt")["18194943.extern"])
    assert extern["gres/gpuutil"] == 0 and extern["mem"] == 0.25
    # Aalto Triton: seff on the same page says "GPU Utilized: 10%" and "GPU VRAM Utilized: 15114 MB" (1 V100).
    aalto = usage.parse_usage(_usage_rows("aalto-triton-tresusageinave-p-fragment.txt")["value"])
    assert aalto["gres/gpuutil"] == 10 and aalto["gres/gpumem"] == 15114 and aalto["energy"] == 95240
    # SchedMD's gres docs, step 1277.0: 2 tasks with one A100 each under gpu_burn; Ave = floor(Tot / 2) for every
    # TRES, and the summed rule gives 100 % per GPU.
    tot = usage.parse_usage(_usage_rows("schedmd-gres-doc-1277.0-tresusageintot-p.txt")["value"])
    ave2 = usage.parse_usage(_usage_rows("schedmd-gres-doc-1277.0-tresusageinave-p.txt")["value"])
    for key in ("gres/gpuutil", "fs/disk", "cpu"):
        assert ave2[key] == tot[key] // 2, key
    assert tot["gres/gpuutil"] / 2 == 100


def test_schedmd_step_rolls_up_to_full_use(tmp_path: Path) -> None:
    """The SchedMD step's real usage strings in a job of 2 GPUs: busy = allocated (2 x 100 %) under the summed rule
    of the release that wrote them (>= 24.05.1)."""
    ave = _usage_rows("schedmd-gres-doc-1277.0-tresusageinave-p.txt")["value"]
    tot = _usage_rows("schedmd-gres-doc-1277.0-tresusageintot-p.txt")["value"]
    job = JOB.format(id=1277, e=0).replace("gres/gpu=4", "gres/gpu=2")
    got = _by_job(_dump(tmp_path, [job, STEP.format(id=1277, s="0", g=2, ave=ave, max="", tot=tot)]),
                  slurm_version="25.05.0")["1277"]
    assert got["gpu_busy_gpu_s"] == pytest.approx(2 * 3600) == got["gpu_util_gpu_s"]
    assert got["gpu_mem_max_mb"] is None  # no TRESUsageInMax recorded: the peak is unknown, not guessed from Tot
    assert got["cpu_used_s"] == 22


def test_ambiguous_and_absurd_values_are_unknown_and_counted(tmp_path: Path) -> None:
    path = _dump(tmp_path, [
        JOB.format(id=1, e=0), STEP.format(id=1, s="0", g=4, ave="gres/gpuutil=50", max="", tot="gres/gpuutil=50"),
        JOB.format(id=2, e=0), STEP.format(id=2, s="0", g=1, ave="gres/gpuutil=1e9", max="", tot=""),
        JOB.format(id=3, e=0), STEP.format(id=3, s="0", g=1, ave="gres/gpuutil=-5", max="", tot=""),
        JOB.format(id=4, e=0), STEP.format(id=4, s="0", g=1, ave="gres/gpuutil=abc,mem", max="", tot=""),
        JOB.format(id=5, e=0), STEP.format(id=5, s="0", g=1, ave="gres/gpuutil=40", max="", tot=""),
    ])
    result = read_input(str(path))
    jobs = {str(r["job_id"]): r for r in result.table.to_pylist()}
    assert result.rejected == 0 and len(jobs) == 5  # the allocation report keeps every job
    for jid in ("1", "2", "3", "4"):
        assert jobs[jid]["gpu_busy_gpu_s"] is None and jobs[jid]["gpu_util_gpu_s"] is None, jid
    assert jobs["5"]["gpu_busy_gpu_s"] == pytest.approx(0.4 * 3600)
    assert result.usage_warnings >= 4
    assert any("--slurm-version" in p for p in result.usage_problems)
    assert any("outside 0-100" in p for p in result.usage_problems)


def test_requeued_executions_keep_their_own_steps(tmp_path: Path) -> None:
    first = JOB.format(id=7, e=0).replace("COMPLETED", "REQUEUED")
    path = _dump(tmp_path, [first, STEP.format(id=7, s="batch", g=4, ave="gres/gpuutil=20", max="", tot=""),
                            JOB.format(id=7, e=0), STEP.format(id=7, s="batch", g=4, ave="gres/gpuutil=380",
                                                               max="", tot="")])
    rows = read_input(str(path), options=ReaderOptions(slurm_version="24.11")).table.to_pylist()
    assert [r["gpu_busy_gpu_s"] for r in rows] == [pytest.approx(0.05 * 4 * 3600), pytest.approx(0.95 * 4 * 3600)]


def test_scalar_parser_and_version_rule() -> None:
    got = usage.parse_usage("cpu=1-00:00:01,energy=0,fs/disk=33701,mem=12132K,gres/gpumem=1.5G,gres/gpuutil=7")
    assert got["cpu"] == 86401 and got["mem"] == pytest.approx(12132 / 1024) and got["gres/gpumem"] == 1536
    with pytest.raises(ValueError):
        usage.parse_usage("mem")
    assert usage.parse_usage("energy=2K,gres/gpuutil=1.50K") == {"energy": 2048, "gres/gpuutil": 1536}
    assert usage.rule_for_version("slurm-wlm 22.05.8") == usage.RULE_SUMMED  # nothing gathered: no gpuutil to read
    assert usage.rule_for_version("slurm 23.02.7") == usage.RULE_SUMMED
    assert usage.rule_for_version("slurm 23.11.4") == usage.RULE_LAST_GPU
    assert usage.rule_for_version("slurm 24.05.0") == usage.RULE_LAST_GPU
    assert usage.rule_for_version("slurm 24.05.1") == usage.RULE_SUMMED
    assert usage.rule_for_version("26.05") == usage.RULE_SUMMED
    assert usage.rule_for_version("garbage") is None
    assert usage.parse_release("24.05.1-1") == (24, 5, 1)


def test_economics_utilisation_weighted_beside_the_allocation_view(tmp_path: Path) -> None:
    """[telemetry] weigh_useful: the completed-run term weighted by the measured utilisation of its
    completed jobs, with coverage; the failed job's use does not count, and the allocation view is unchanged."""
    from gpuclust.accounting import pipeline
    from gpuclust.config import parse_config

    lines = [JOB.format(id=1, e=0), STEP.format(id=1, s="0", g=4, ave="gres/gpuutil=240", max="",
                                                tot="gres/gpuutil=240"),  # 60 % per GPU, completed
             JOB.format(id=2, e=0).replace("COMPLETED|0:0", "FAILED|1:0"),
             STEP.format(id=2, s="0", g=4, ave="gres/gpuutil=400", max="", tot="gres/gpuutil=400")]
    dump = _dump(tmp_path, lines)
    base = (f"[site]\ncluster_name = c\ntimezone = UTC\nstate_dir = {tmp_path}/s\nreport_dir = {tmp_path}/r\n\n"
            "[costs]\ncurrency = EUR\nnetwork = 100\n\n[partition gpu]\nprice_per_gpu_hour = 2\n")
    plain, _ = pipeline.build(parse_config(base), None, input_path=str(dump), slurm_version="24.11")
    weighed, _ = pipeline.build(parse_config(base + "\n[telemetry]\nweigh_useful = yes\n"), None,
                                input_path=str(dump), slurm_version="24.11")
    total = weighed.data["economics"]["total"]
    view = total["utilisation_weighted"]
    assert view["completed_run_gpu_hours"] == pytest.approx(4.0) and view["coverage"] == 1.0
    assert view["util_mean_pct"] == pytest.approx(60) and view["completed_run_busy_gpu_hours"] == pytest.approx(2.4)
    # offline without node events and inventory the total cost is unknown, and so is its cost per busy GPU-hour
    assert total["total_cost"] is None and view["total_cost_per_completed_run_busy_gpu_hour"] is None
    assert "utilisation_weighted" not in plain.data["economics"]["total"]
    assert {k: v for k, v in total.items() if k != "utilisation_weighted"} == plain.data["economics"]["total"]


# ---- the parsers' fast paths against their regex definitions ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.text(alphabet="0123456789KMGTP.e+-x", max_size=7), max_size=10))
def test_suffixed_numbers_fast_path_agrees_with_the_regex(values: list[str]) -> None:
    arr = pa.array(values, pa.string())
    fast, fast_bad = usage.counts(arr)
    slow, slow_bad = usage.counts(pa.array(values + [None], pa.string()))  # a null: the regex path
    assert fast_bad.tolist() == slow_bad[:-1].tolist()
    assert [None if v != v else v for v in fast.tolist()] == [None if v != v else v for v in slow[:-1].tolist()]


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.text(alphabet="0123456789.e+-x ", max_size=7), max_size=10))
def test_numbers_fast_path_agrees_with_the_regex(values: list[str]) -> None:
    fast, fast_bad = usage.numbers(pa.array(values, pa.string()))
    slow, slow_bad = usage.numbers(pa.array(values + ["x"], pa.string()))  # one non-number: the regex path
    assert fast_bad.tolist() == slow_bad[:-1].tolist()
    assert [None if v != v else v for v in fast.tolist()] == [None if v != v else v for v in slow[:-1].tolist()]


_clock_text = st.one_of(
    st.builds(lambda h, m, s: f"{h:02d}:{m:02d}:{s:02d}", st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)),
    st.builds(lambda d, h, m, s: f"{d}-{h:02d}:{m:02d}:{s:02d}", st.integers(0, 30), st.integers(0, 23),
              st.integers(0, 59), st.integers(0, 59)),
    st.builds(lambda m, s, ms: f"{m:02d}:{s:02d}.{ms:03d}", st.integers(0, 59), st.integers(0, 59), st.integers(0, 999)),
    st.text(alphabet="0123456789:-. x", min_size=0, max_size=10),
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.lists(_clock_text, min_size=1, max_size=30))
def test_clock_seconds_kernel_agrees_with_the_regex(values):
    """`HH:MM:SS` by Elapsed's byte kernel is what the regex gives; every other shape still goes to the regex."""
    arr = pa.array(values, pa.string())
    got, bad = usage.clock_seconds(arr)
    ref, ref_bad = usage._clock_regex(arr)
    assert bad.tolist() == ref_bad.tolist()
    assert np.allclose(got, ref, equal_nan=True)


_tres_name = st.sampled_from(["cpu", "mem", "gres/gpuutil", "gres/gpumem", "gpuutil", "xmem", "", "mem="])
_tres_value = st.one_of(st.text(alphabet="0123456789KM:.", max_size=6), st.text(max_size=40),
                        st.just("9" * 40), st.text(alphabet="é,= ", max_size=4))
_tres_list = st.one_of(
    st.lists(st.tuples(_tres_name, _tres_value), max_size=6).map(lambda es: ",".join(f"{k}={v}" for k, v in es)),
    st.text(alphabet="cpumem=,/gres9é ", max_size=30),
    st.none(),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(values=st.lists(_tres_list, max_size=25), key=st.sampled_from(["cpu", "mem", "gres/gpuutil", "gres/gpumem"]),
       sliced=st.integers(0, 3))
def test_extract_by_search_is_the_regex(values, key, sliced):
    """A value found by substring search and cut from a window of bytes is the regex's first match: keys inside
    other names, empty values, values longer than the window, commas and `=` in odd places, non-ASCII text,
    nulls, a slice of a larger array, a value that ends the column's buffer."""
    arr = pa.array(["mem=1,cpu=2"] * sliced + values, pa.string())[sliced:]
    rows, got = tres_values.extract(arr, key)
    ref = tres_values.extract_regex(arr, key)
    where = np.flatnonzero(pc.is_valid(ref).to_numpy(zero_copy_only=False))
    assert rows.tolist() == where.tolist()
    assert got.to_pylist() == ref.take(pa.array(where, pa.int64())).to_pylist()


_usage_entry = st.tuples(st.sampled_from(["cpu", "mem", "gres/gpuutil", "gres/gpumem", "energy", "vmem"]),
                         st.sampled_from(["00:01:02", "1-00:00:01", "55", "400", "1.50K", "74116M", "x", "", "-3",
                                          "1e9", "9" * 30]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(steps=st.lists(st.tuples(st.lists(_usage_entry, max_size=5, unique_by=lambda e: e[0]), st.booleans(),
                                st.booleans(), st.sampled_from([None, "oops", "a b=1", ""])), min_size=1, max_size=12))
def test_a_list_printed_as_its_twins_is_read_once(steps):
    """A step whose Tot is its Max's very text is read once (from Max), and its Ave where it is its Tot's (from
    Tot): the figures and the warnings (count, lines) are those of lists that give the same entries in other
    orders, each read on its own."""
    n = 1 + len(steps)
    is_step = np.array([False] + [True] * len(steps))
    cols = {"job_id": pa.array(["7"] + [f"7.{i}" for i in range(len(steps))]), "gpus": pa.array([4] * n),
            "elapsed_s": pa.array([3600] * n)}
    same, other = {"max": [""], "tot": [""], "ave": [""]}, {"max": [""], "tot": [""], "ave": [""]}
    for entries, tot_differs, ave_differs, junk in steps:  # junk: an entry that makes the list malformed
        listed = [f"{k}={v}" for k, v in entries] + ([] if junk is None else [junk])
        text = ",".join(listed)
        for name in same:
            same[name].append(text)
        other["max"].append(text)
        other["tot"].append(",".join(listed[::-1]) if tot_differs else text)
        other["ave"].append(",".join(listed[1:] + listed[:1]) if ave_differs else other["tot"][-1])

    def run(lists):
        columns = dict(cols)
        warnings = usage.UsageWarnings()
        text = {"TRESUsageInAve": pa.array(lists["ave"]), "TRESUsageInMax": pa.array(lists["max"]),
                "TRESUsageInTot": pa.array(lists["tot"])}
        usage.add_usage_columns(columns, text, is_step, np.arange(n) + 2, "f", rule="summed", warnings=warnings)
        figures = {name: columns[name].to_pylist() for name, _ in usage.COLUMNS if name in columns}
        return figures, warnings.count, sorted(w.split(":")[1] for w in warnings.listed)

    assert run(same) == run(other)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(steps=st.lists(st.tuples(st.lists(_usage_entry, max_size=5, unique_by=lambda e: e[0]),
                                st.booleans(), st.sampled_from([None, "oops", ""])), min_size=1, max_size=12),
       seed=st.integers(0, 2**16), jobs=st.integers(1, 3))
def test_usage_text_in_another_row_order_reads_the_same(steps, seed, jobs):
    """The direct reader hands the usage text over in source order (records joined across lines last) with
    each row's place in it: the figures and every warning are those of the text in the table's order."""
    rows = [("7", False, "")]
    for i, (entries, tot_differs, junk) in enumerate(steps):
        if i % max(1, len(steps) // jobs) == 0 and i:
            rows.append((f"{7 + i}", False, ""))
        listed = [f"{k}={v}" for k, v in entries] + ([] if junk is None else [junk])
        rows.append((f"{rows[-1][0].split('.')[0]}.{i}", tot_differs, ",".join(listed)))
    n = len(rows)
    is_step = np.array(["." in r[0] for r in rows])
    maxes = [r[2] for r in rows]
    tots = [",".join(r[2].split(",")[::-1]) if r[1] else r[2] for r in rows]
    permutation = np.random.default_rng(seed).permutation(n)

    def run(text_rows):
        columns = {"job_id": pa.array([r[0] for r in rows]), "gpus": pa.array([2] * n),
                   "elapsed_s": pa.array([600] * n)}
        warnings = usage.UsageWarnings()
        text = {"TRESUsageInAve": maxes, "TRESUsageInMax": maxes, "TRESUsageInTot": tots,
                "ConsumedEnergyRaw": ["" if not r[2] else "12" for r in rows]}
        if text_rows is not None:  # row i's text at text_rows[i]
            text = {name: [values[j] for j in np.argsort(text_rows)] for name, values in text.items()}
        usage.add_usage_columns(columns, {k: pa.array(v, pa.string()) for k, v in text.items()}, is_step, np.arange(n) + 2,
                     "f", rule=None, warnings=warnings, text_rows=text_rows)
        return {name: columns[name].to_pylist() for name, _ in usage.COLUMNS if name in columns}, \
            warnings.count, warnings.listed

    assert run(permutation) == run(None)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(steps=st.lists(st.tuples(st.integers(0, 2), st.lists(_usage_entry, max_size=5, unique_by=lambda e: e[0]),
                                st.sampled_from([None, "oops", ""])), min_size=1, max_size=12),
       kept=st.lists(st.booleans(), min_size=16, max_size=16))
def test_usage_figures_for_the_kept_rows_are_those_of_every_row(steps, kept):
    """`keep` (the rows finish keeps: its job rows, less the bad ones) makes the figures for those rows alone:
    they are the figures made for every row, filtered by `keep`; the warnings are the same."""
    rows = [("7", "")]
    for job, entries, junk in steps:  # job: a new job row before this step (0), else the step of the last job
        if job == 0:
            rows.append((f"{8 + len(rows)}", ""))
        listed = [f"{k}={v}" for k, v in entries] + ([] if junk is None else [junk])
        rows.append((f"{rows[-1][0].split('.')[0]}.{len(rows)}", ",".join(listed)))
    n = len(rows)
    is_step = np.array(["." in r[0] for r in rows])
    keep = ~is_step & np.resize(np.array(kept), n)

    def run(keep_rows):
        columns = {"job_id": pa.array([r[0] for r in rows]), "gpus": pa.array([2] * n),
                   "elapsed_s": pa.array([600] * n)}
        warnings = usage.UsageWarnings()
        text = {"TRESUsageInMax": [r[1] for r in rows], "TRESUsageInTot": [r[1] for r in rows],
                "ConsumedEnergyRaw": ["" if not r[1] else "12" for r in rows]}
        done = usage.add_usage_columns(columns, {k: pa.array(v, pa.string()) for k, v in text.items()}, is_step,
                            np.arange(n) + 2, "f", rule="summed", warnings=warnings, keep=keep_rows)
        figures = {name: columns[name].to_pylist() for name, _ in usage.COLUMNS if name in columns}
        return done, figures, warnings.count, warnings.listed

    done, figures, count, listed = run(None)
    kept_done, kept_figures, kept_count, kept_listed = run(keep)
    assert (kept_done, kept_count, kept_listed) == (done, count, listed)
    assert kept_figures == {name: [v for v, k in zip(values, keep, strict=True) if k]
                            for name, values in figures.items()}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(steps=st.lists(st.tuples(st.booleans(), st.lists(_usage_entry, max_size=5, unique_by=lambda e: e[0])),
                      min_size=1, max_size=12),
       seed=st.integers(0, 2**16))
def test_usage_figures_of_a_dump_out_of_sacct_order(steps, seed):
    """Each job's figures are the same whatever the order of the dump's rows (a dump sorted or merged by hand:
    steps away from their job row, or before it), as in sacct's order (each job's steps right after it)."""
    rows = [("7", "")]
    for new_job, entries in steps:
        if new_job:
            rows.append((f"{8 + len(rows)}", ""))
        rows.append((f"{rows[-1][0].split('.')[0]}.{len(rows)}", ",".join(f"{k}={v}" for k, v in entries)))

    def figures(order):
        got = [rows[i] for i in order]
        n = len(got)
        columns = {"job_id": pa.array([r[0] for r in got]), "gpus": pa.array([2] * n),
                   "elapsed_s": pa.array([600] * n)}
        text = {"TRESUsageInMax": [r[1] for r in got], "TRESUsageInTot": [r[1] for r in got]}
        usage.add_usage_columns(columns, {k: pa.array(v, pa.string()) for k, v in text.items()},
                     np.array(["." in r[0] for r in got]), np.arange(n) + 2, "f", rule="summed",
                     warnings=usage.UsageWarnings())
        return {r[0]: tuple(columns[name][i].as_py() for name, _ in usage.COLUMNS if name in columns)
                for i, r in enumerate(got) if "." not in r[0]}

    assert figures(np.random.default_rng(seed).permutation(len(rows))) == figures(np.arange(len(rows)))


def test_allocated_cpus_for_cpu_efficiency():
    """`cpu_efficiency` divides by the job's allocated CPUs, read from AllocTRES (NaN where it has none)."""
    import pandas as pd

    from gpuclust.accounting.figures import gpuuse

    alloc = pd.Series(["billing=8,cpu=8,gres/gpu=1,mem=64G,node=1", "cpu=16,mem=64G", "mem=1G", None, "",
                       "xcpu=3,cpu=4", "cpu=x,cpu=2"], dtype=object)
    got = gpuuse._cpus(alloc)
    np.testing.assert_array_equal(got, [8, 16, np.nan, np.nan, np.nan, 4, 2])


def test_a_max_without_tot_or_ave_gives_no_peak(tmp_path: Path) -> None:
    """gres/gpuutil in TRESUsageInMax alone (no Tot, no Ave: a hand-cut dump) is no utilisation: it passed none of
    the rules' checks (400% on one GPU was kept as the job's peak before; usage_rules.rollup never kept it)."""
    lines = [JOB.format(id=1, e=""), STEP.format(id=1, s=0, g=1, ave="", max="gres/gpuutil=400", tot="cpu=00:01:00")]
    got = _by_job(_dump(tmp_path, lines))["1"]
    assert got["gpu_util_max_pct"] is None and got["gpu_util_gpu_s"] is None and got["cpu_used_s"] == 60.0
