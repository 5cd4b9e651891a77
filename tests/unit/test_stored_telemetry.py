"""Figures that outlive Prometheus (issue 43 item 4): `report fetch` stores each GPU job's telemetry summary with
its day, and a later `report build` whose Prometheus no longer has a job takes the stored one, with the very
figures Prometheus gave. Against a REAL Prometheus (tests/unit/test_telemetry_prometheus.py's harness and data);
the "lost" Prometheus is one with an empty TSDB (past retention) or a dead port.

The jobs (test_telemetry_prometheus's data; P0 = 2024-01-01T00:00Z, step 60 s):
    101 n1/0 0-60 min idle; 102 n1/1,2 0-60 busy; 103 n1/3 0-120 busy then idle; 104 requeued: 0-30 (REQUEUED)
    and 40-100; 105 no series; 106 0-60 with dropped points; 108 (added here) n5/0 from 0 min at 60 %, RUNNING
    at the first fetch (now = 90 min), ended at 120 min by the second.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import storedtelemetry
from gpuclust.accounting.history import store, storetree
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.config.site import SiteConfig, TelemetryConfig
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.test_telemetry_prometheus import (
    P0,
    UTIL,
    OpenMetrics,
    _every_minute,
    _gpu,
    free_port,
    lab_data,
    require_prometheus,
    running_prometheus,
)

DAY = date(2024, 1, 1)
PERIOD = Period(P0, P0 + timedelta(days=1))


def _at(minutes: float) -> str:
    return (P0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S")


BASE = {"JobName": "j", "Comment": "", "Reason": "None", "WCKey": "", "User": "u", "Account": "ml",
        "Partition": "gpu", "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "NNodes": "1"}


def _job(job: str, first: float, last: float | None, gpus: int = 1, node: str = "n1", **kw: str) -> dict[str, str]:
    elapsed = int(((last if last is not None else 90) - first) * 60)
    row = {**BASE, "JobID": job, "JobIDRaw": job, "Submit": _at(first), "Eligible": _at(first), "Start": _at(first),
           "End": _at(last) if last is not None else "Unknown", "Elapsed": f"{elapsed // 3600:02d}:{elapsed // 60 % 60:02d}:00",
           "AllocTRES": f"cpu=4,gres/gpu={gpus},gres/gpu:h100={gpus}", "NodeList": node}
    if last is None:
        row["State"] = "RUNNING"
    return {**row, **kw}


def sacct_text(running: bool) -> str:
    rows = [_job("101", 0, 60), _job("102", 0, 60, gpus=2), _job("103", 0, 120),
            _job("104", 0, 30, node="n2", State="REQUEUED"), _job("104", 40, 100, node="n2"),
            _job("105", 0, 60), _job("106", 0, 60, node="n2"),
            _job("108", 0, None if running else 120, node="n5")]
    lines = [FETCH_DELIMITER.join(FETCH_FIELDS)] + [FETCH_DELIMITER.join(r.get(f, "") for f in FETCH_FIELDS)
                                                     for r in rows]
    return "\n".join(lines) + "\n"


def _data() -> OpenMetrics:
    om = lab_data()
    om.add(UTIL, _gpu("n5", 0, "108"), _every_minute(0, 239, 60.0))
    return om


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_prometheus()
    with running_prometheus(_data(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


@pytest.fixture(scope="module")
def empty_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus that no longer has any of the jobs' series (past its retention)."""
    require_prometheus()
    om = OpenMetrics()
    om.add("up", {"job": "x"}, [(P0.timestamp() + 86400 * 30, 1.0)])
    with running_prometheus(om, tmp_path_factory.mktemp("empty")) as url:
        yield url


def config(state: Path, url: str | None, extra: str = "") -> SiteConfig:
    tel = f"[telemetry]\nprometheus_url = {url}\nstep = 60\nchunk_hours = 6\ntimeout = 20s\n{extra}" if url else ""
    return parse_config(f"[site]\ncluster_name = t\nstate_dir = {state}\n[gpu_type h100]\nprice_per_gpu_hour = 1\n"
                        f"{tel}", "t.conf")


def fetch(state: Path, url: str | None, *, running: bool, now_min: float = 90) -> pipeline.FetchSummary:
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(DAY), sacct_text(running))
    return pipeline.fetch(client, config(state, url), Period(P0, P0 + timedelta(days=1)),
                          now=P0 + timedelta(minutes=now_min))


def build(state: Path, url: str | None, period: Period = PERIOD, extra: str = "") -> Any:
    report, _ = pipeline.build(config(state, url, extra), period, trend_days=0)
    return report


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def fetched(prometheus: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pipeline.FetchSummary]:
    state = tmp_path_factory.mktemp("state")
    return state, fetch(state, prometheus, running=True)


@pytest.fixture(scope="module")
def with_prometheus(fetched: tuple[Path, pipeline.FetchSummary], prometheus: str) -> Any:
    return build(fetched[0], prometheus)


def _figures(report: Any) -> dict[str, Any]:
    use = dict(report.data["gpu_use"])
    use.pop("prometheus")  # (its queries, warnings and node figures are the source's, not the jobs' figures)
    return use


# ---- the same figures after Prometheus lost the data ----------------------------------------------------------


@pytest.mark.parametrize("lost", ["empty TSDB", "dead port"])
def test_build_after_prometheus_lost_the_jobs_gives_the_same_figures(
        lost: str, fetched: tuple[Path, pipeline.FetchSummary], with_prometheus: Any, empty_prometheus: str) -> None:
    state, _ = fetched
    before = with_prometheus
    assert before.data["gpu_use"]["sources"]["prometheus"] == 6  # 101, 102, 103, 104 twice, 106 (105: no series)
    assert before.data["gpu_use"]["prometheus"]["jobs_from_store"] == 0
    after = build(state, empty_prometheus if lost == "empty TSDB" else dead_url())
    prom = after.data["gpu_use"]["prometheus"]
    assert prom["jobs_with_series"] == 0 and prom["jobs_from_store"] == 6
    assert _figures(after) == _figures(before)  # every gpu_use figure: totals, by_*, worst, histogram, sources
    pd.testing.assert_frame_equal(after.tables["gpu_use_jobs"], before.tables["gpu_use_jobs"], check_exact=True)
    line = next(w for w in prom["warning_list"] if "took the summary `report fetch` stored" in w)
    assert "6 job window(s)" in line and "103" in line and str(store.store_dir(str(state))) in line
    # the figures are real ones, not unknowns on both sides
    jobs = before.tables["gpu_use_jobs"].set_index("job_id")
    assert jobs.loc["103", "held_idle_gpu_hours"] == pytest.approx(1.0)
    assert jobs.loc["101", "util_mean_pct"] == pytest.approx(2.0)
    assert math.isnan(jobs.loc["105", "covered_gpu_hours"])


def test_fetch_summary_counts_the_summaries(fetched: tuple[Path, pipeline.FetchSummary], prometheus: str) -> None:
    tel = fetched[1].as_dict()["telemetry"]
    # 8 executions with GPUs: 105 has no series; 108 runs (partial)
    assert (tel["gpu_jobs"], tel["summaries"], tel["partial"], tel["unknown"], tel["kept"]) == (8, 7, 1, 1, 0)
    assert tel["source"] == prometheus and tel["queries"] > 0
    day = store.day_file(store.snapshot_to_read(store.store_dir(str(fetched[0]))), DAY, "t").parent
    assert (day / storetree.TELEMETRY_JOBS_FILE).is_file() and (day / storetree.TELEMETRY_GPUS_FILE).is_file()
    assert "telemetry" not in pipeline.FetchSummary("x").as_dict()  # [telemetry] off: the summary as before


def test_load_job_telemetry_reads_one_job_per_gpu(fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    root = store.store_dir(str(fetched[0]))
    got = storedtelemetry.load_job_telemetry(root, ["103", "104", "105", "108", "999", "x1"])
    assert set(got) == {"103", "104", "108"}
    job = got["103"]
    assert job.held_idle_gpu_s == pytest.approx(3600) and job.covered_gpu_s == pytest.approx(7200)
    assert job.xid_errors == 1 and job.ecc_dbe == pytest.approx(3)
    (gpu,) = job.gpus
    assert (gpu.node, gpu.gpu) == ("n1", "3") and len(gpu.util_profile) == 120
    assert gpu.longest_idle_s == pytest.approx(3600) and gpu.util_profile[0] == pytest.approx(80)
    assert got["104"].covered_gpu_s == pytest.approx(3600)  # the latest execution (40-100 min)
    stored = storedtelemetry.load_stored(root, ["108"], days=[DAY])["108"]
    assert len(stored) == 1 and stored[0].partial
    assert stored[0].window_end == P0 + timedelta(minutes=90)
    assert stored[0].telemetry.util_mean_pct == pytest.approx(60)


def test_a_period_that_clips_a_job_leaves_it_unknown_and_says_why(fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    report = build(fetched[0], dead_url(), Period(P0 + timedelta(minutes=30), P0 + timedelta(days=1)))
    jobs = report.tables["gpu_use_jobs"].set_index("job_id")
    prom = report.data["gpu_use"]["prometheus"]
    assert math.isnan(jobs.loc["103", "covered_gpu_hours"])  # stored over 0-120 min; the period asks 30-120
    assert prom["jobs_from_store"] == 1  # 104's second execution (40-100 min) lies whole in the period
    line = next(w for w in prom["warning_list"] if "does not give this report's figures" in w)
    assert "103 (stored over [2024-01-01T00:00:00+00:00, 2024-01-01T02:00:00+00:00), this report's period asks " \
           "[2024-01-01T00:30:00+00:00, 2024-01-01T02:00:00+00:00))" in line


def test_other_settings_leave_the_jobs_unknown(fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    report = build(fetched[0], dead_url(), extra="idle_min = 10m\n")
    prom = report.data["gpu_use"]["prometheus"]
    assert prom["jobs_from_store"] == 0
    assert any("[telemetry] idle_min_s = 1800.0, now 600.0" in w for w in prom["warning_list"])


def test_the_store_is_read_only_from_the_store(fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    """--input builds read no store; [telemetry] off reads none either (the figures as before)."""
    report = build(fetched[0], None)
    assert report.data["gpu_use"]["prometheus"] is None
    assert report.data["gpu_use"]["sources"]["prometheus"] == 0


# ---- re-fetch ---------------------------------------------------------------------------------------------------


def _copy_state(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def test_refetch_without_prometheus_keeps_the_summaries(fetched: tuple[Path, pipeline.FetchSummary],
                                                         tmp_path: Path, with_prometheus: Any) -> None:
    state = _copy_state(fetched[0], tmp_path / "state")
    summary = fetch(state, dead_url(), running=True)
    tel = summary.as_dict()["telemetry"]
    assert (tel["summaries"], tel["kept"]) == (0, 7)
    assert any("unreachable" in w for w in tel["warning_list"]), tel["warning_list"]
    after = build(state, dead_url())
    assert _figures(after) == _figures(with_prometheus)
    # 108 has ended since: its summary, stored while it ran, covers only part of it: unknown, said why
    fetch(state, dead_url(), running=False)
    prom = build(state, dead_url()).data["gpu_use"]["prometheus"]
    assert prom["jobs_from_store"] == 6
    assert any("108 (stored while it ran, up to 2024-01-01T01:30:00+00:00)" in w for w in prom["warning_list"])


def test_refetch_replaces_a_partial_summary(fetched: tuple[Path, pipeline.FetchSummary], tmp_path: Path,
                                            prometheus: str) -> None:
    state = _copy_state(fetched[0], tmp_path / "state")
    tel = fetch(state, prometheus, running=False, now_min=200).as_dict()["telemetry"]
    assert (tel["summaries"], tel["partial"], tel["kept"]) == (7, 0, 0)  # (105: no series)
    (row,) = storedtelemetry.load_stored(store.store_dir(str(state)), ["108"])["108"]
    assert not row.partial and row.window_end == P0 + timedelta(minutes=120)
    assert row.telemetry.covered_gpu_s == pytest.approx(7200)


def test_refetch_never_replaces_a_summary_with_one_that_covers_less(tmp_path: Path) -> None:
    old = _row(covered=7200.0)
    less = _row(covered=3600.0)
    by_day, kept, written = storedtelemetry._merge({old.key: less}, {DAY: [old]}, {old.key: DAY})
    assert by_day[DAY] == [old] and kept == 1 and written == set()
    more = _row(covered=7200.0)
    by_day, kept, written = storedtelemetry._merge({old.key: more}, {DAY: [_row(covered=3600.0)]}, {old.key: DAY})
    assert by_day[DAY] == [more] and kept == 0 and written == {old.key}


def _row(covered: float) -> storedtelemetry.StoredTelemetry:
    from gpuclust.accounting.figures.telemetry import JobTelemetry

    tel = JobTelemetry(0, None, None, None, None, None, None, None, None, None, 0.0, covered, 0.0)
    return storedtelemetry.StoredTelemetry("7", P0, P0, P0 + timedelta(hours=2), False, 1, {"step_s": 60.0}, tel)


# ---- damage: a warning naming the file, the jobs unknown, never a crash -----------------------------------------


def _damaged_state(fetched: tuple[Path, pipeline.FetchSummary], tmp_path: Path) -> tuple[Path, Path]:
    state = tmp_path / "state"
    _copy_state(fetched[0], state)
    root = store.store_dir(str(state))
    day = store.day_file(store.snapshot_to_read(root), DAY, "t").parent
    return state, day


@pytest.mark.parametrize("damage", ["truncated", "garbage", "wrong schema", "gpus file gone", "negative covered",
                                    "newer version"])
def test_damaged_telemetry_is_a_warning_and_the_jobs_stay_unknown(
        damage: str, fetched: tuple[Path, pipeline.FetchSummary], tmp_path: Path) -> None:
    state, day = _damaged_state(fetched, tmp_path)
    path = day / storetree.TELEMETRY_JOBS_FILE
    data = path.read_bytes()
    path.unlink()  # (a hard link shared with the fixture's snapshot: write a new file)
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"PAR1" + b"\x00" * 100 + b"PAR1")
    else:
        table = pq.read_table(__import__("io").BytesIO(data))
        if damage == "wrong schema":
            table = table.set_column(table.schema.get_field_index("covered_gpu_s"), "covered_gpu_s",
                                     table.column("covered_gpu_s").cast("string"))
        elif damage == "negative covered":
            import pyarrow as pa

            table = table.set_column(table.schema.get_field_index("covered_gpu_s"), "covered_gpu_s",
                                     pa.array([-1.0] * table.num_rows))
        elif damage == "newer version":
            table = table.replace_schema_metadata({storedtelemetry.VERSION_KEY: b"99"})
        pq.write_table(table, path)
        if damage == "gpus file gone":
            (day / storetree.TELEMETRY_GPUS_FILE).unlink()
    report = build(state, dead_url())
    prom = report.data["gpu_use"]["prometheus"]
    assert prom["jobs_from_store"] == 0
    named = day / (storetree.TELEMETRY_GPUS_FILE if damage == "gpus file gone" else storetree.TELEMETRY_JOBS_FILE)
    line = next((w for w in prom["warning_list"] if str(named) in w), None)
    assert line is not None and "stored telemetry" in line and "unknown" in line, prom["warning_list"]
    assert "gpuclust report fetch --since 2024-01-01 --until 2024-01-02" in line
    warnings: list[str] = []
    assert storedtelemetry.load_job_telemetry(store.store_dir(str(state)), ["103"], warnings=warnings) == {}
    assert warnings and str(named) in warnings[0]


def test_load_without_a_store_is_empty(tmp_path: Path) -> None:
    assert storedtelemetry.load_job_telemetry(tmp_path / "nothing", ["1"]) == {}


# ---- the CLI ----------------------------------------------------------------------------------------------------


def test_fetch_cli_says_how_many_jobs_got_summaries(tmp_path: Path, prometheus: str) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\nstate_dir = {tmp_path / 'state'}\n[telemetry]\nprometheus_url = "
                    f"{prometheus}\nstep = 60\nchunk_hours = 6\n")
    for as_json in (False, True):
        client = ReplaySlurmClient()
        client.add("sacct", sacct_args(DAY), sacct_text(running=False))
        args = ["--config", str(conf), "report", "fetch", "--since", "2024-01-01", "--until", "2024-01-02",
                *(["--json"] if as_json else [])]
        result = CliRunner().invoke(cli, args, obj=AppContext(client=client))
        assert result.exit_code == 0, result.output
        if as_json:
            tel = json.loads(result.stdout)["telemetry"]
            assert (tel["gpu_jobs"], tel["summaries"], tel["partial"]) == (8, 7, 0)
        else:
            assert "telemetry: 7 of 8 GPU job(s) got a stored summary (0 still running: partial)" in result.stdout
            assert "warning: " in result.stderr and "105" in result.stderr


def test_stored_row_round_trips(tmp_path: Path, fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    root = store.store_dir(str(fetched[0]))
    rows = storedtelemetry.load_stored(root, ["102"])["102"]
    storedtelemetry.write_day(tmp_path, rows)
    again = storedtelemetry.read_day(tmp_path, None)
    assert [asdict(r.telemetry) for r in again] == [asdict(r.telemetry) for r in rows]


def test_one_job_is_read_without_pandas(fetched: tuple[Path, pipeline.FetchSummary]) -> None:
    """`gpuclust job` answers from here: pyarrow loads pandas on pa.array() of Python values, so the reader builds
    no such array (a fresh interpreter shows it)."""
    import subprocess
    import sys

    root = store.store_dir(str(fetched[0]))
    code = ("import sys; from pathlib import Path; from datetime import date\n"
            "from gpuclust.accounting.figures.storedtelemetry import load_job_telemetry\n"
            f"a = load_job_telemetry(Path({str(root)!r}), ['103', '104'])\n"
            f"b = load_job_telemetry(Path({str(root)!r}), ['103'], days=[date(2024, 1, 1)])\n"
            "assert set(a) == {'103', '104'} and set(b) == {'103'}, (a, b)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


# ---- MIG instances (issue 44): stored per (node, GPU, instance); a version 1 file reads them as whole GPUs ------


def _mig_summary() -> storedtelemetry.StoredTelemetry:
    from datetime import datetime, timezone

    from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry

    def gpu(instance: str, profile: str, busy: float) -> GpuTelemetry:
        return GpuTelemetry(node="node5", gpu="0", covered_s=600.0, busy_s=busy, util_mean_pct=busy / 6,
                            util_max_pct=busy / 6, idle_s=0.0, under_threshold_s=0.0, longest_idle_s=0.0,
                            longest_idle_start=None, trailing_idle_s=0.0, instance=instance, profile=profile)

    gpus = [gpu("7", "1g.10gb", 540.0), gpu("2", "3g.40gb", 60.0)]
    tel = JobTelemetry(gpus_seen=2, util_mean_pct=50.0, util_max_pct=90.0, fb_used_max_mib=None, fb_total_mib=None,
                       power_mean_w=None, energy_j=None, temp_max_c=None, xid_errors=None, ecc_dbe=None,
                       held_idle_gpu_s=0.0, covered_gpu_s=1200.0, busy_gpu_s=600.0, gpus=gpus)
    start = datetime(2026, 12, 1, tzinfo=timezone.utc)
    return storedtelemetry.StoredTelemetry(job="42", start=start, window_start=start,
                                           window_end=start + timedelta(minutes=10), partial=False, gpus=2,
                                           settings={"step_s": 60.0}, telemetry=tel)


def test_mig_instances_are_stored_apart(tmp_path: Path) -> None:
    storedtelemetry.write_day(tmp_path, [_mig_summary()])
    (row,) = storedtelemetry.read_day(tmp_path, None)
    assert [(g.gpu, g.instance, g.profile, g.busy_s) for g in row.telemetry.gpus] == [
        ("0", "2", "3g.40gb", 60.0), ("0", "7", "1g.10gb", 540.0)]  # two slices of one card, never merged


def test_a_version_1_file_reads_as_whole_gpus(tmp_path: Path) -> None:
    summary = _mig_summary()
    summary.telemetry.gpus = summary.telemetry.gpus[:1]
    summary.telemetry.gpus[0].instance = summary.telemetry.gpus[0].profile = ""
    summary.telemetry.gpus_seen = 1
    storedtelemetry.write_day(tmp_path, [summary])
    (fresh,) = storedtelemetry.read_day(tmp_path, None)
    for name in (storedtelemetry.JOBS_FILE, storedtelemetry.GPUS_FILE):  # as gpuclust wrote them before issue 44
        table = pq.read_table(tmp_path / name)
        if name == storedtelemetry.GPUS_FILE:
            table = table.drop_columns(["instance", "profile"])
        pq.write_table(table.replace_schema_metadata({storedtelemetry.VERSION_KEY: b"1"}), tmp_path / name)
    warnings: list[str] = []
    (old,) = storedtelemetry.read_day(tmp_path, None, warnings)
    assert warnings == [] and old.telemetry == fresh.telemetry and old.telemetry.gpus[0].instance == ""
    # a setting added with the MIG instances is compared only where the summary names it
    cfg = TelemetryConfig(step_s=60.0)
    old.settings = storedtelemetry.settings_of(cfg, 0.0)
    for name in storedtelemetry.LATER_SETTINGS:
        del old.settings[name]
    s, e = old.window_start.timestamp(), old.window_end.timestamp()
    assert storedtelemetry.mismatch(old, cfg, s, e, s) is None
    old.settings["mig_util_metric"] = "DCGM_FI_PROF_SM_ACTIVE"
    assert "mig_util_metric" in (storedtelemetry.mismatch(old, cfg, s, e, s) or "")
