"""Usage TRES rolled up from steps to jobs (issue 26), on real recorded lab output and on the rules."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuclust.accounting import usage
from gpuclust.accounting.normalize import ReaderOptions
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
    # One 4-GPU job, busy 60% per GPU for its hour, as each rule prints it.
    before = _dump(tmp_path, [JOB.format(id=1, e=0),
                              STEP.format(id=1, s="batch", g=4, ave="cpu=00:10:00,gres/gpuutil=60",
                                          max="gres/gpuutil=90,gres/gpumem=40960M,mem=2G",
                                          tot="cpu=00:10:00,gres/gpuutil=60")])
    got = _by_job(before, slurm_version="23.11.10")["1"]
    assert got["gpu_util_rule"] == usage.RULE_PER_GPU
    assert got["gpu_util_gpu_s"] == 4 * 3600
    assert got["gpu_busy_gpu_s"] == pytest.approx(0.6 * 4 * 3600)
    assert got["gpu_util_max_pct"] == 90 and got["gpu_mem_max_mb"] == 40960 and got["mem_max_mb"] == 2048
    after = _dump(tmp_path, [JOB.format(id=1, e=1800000),
                             STEP.format(id=1, s="0", g=4, ave="gres/gpuutil=240", max="gres/gpuutil=320",
                                         tot="gres/gpuutil=240")])
    got = _by_job(after, slurm_version="24.05.3")["1"]
    assert got["gpu_util_rule"] == usage.RULE_SUMMED
    assert got["gpu_busy_gpu_s"] == pytest.approx(0.6 * 4 * 3600)
    assert got["gpu_util_max_pct"] == pytest.approx(80)
    assert got["energy_j"] == 1800000
    # Without a version, a value over 100 on several GPUs can only be the summed rule.
    assert _by_job(after)["1"]["gpu_util_rule"] == usage.RULE_SUMMED


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
    path = _dump(tmp_path, [first, STEP.format(id=7, s="batch", g=4, ave="gres/gpuutil=5", max="", tot=""),
                            JOB.format(id=7, e=0), STEP.format(id=7, s="batch", g=4, ave="gres/gpuutil=95",
                                                               max="", tot="")])
    rows = read_input(str(path), options=ReaderOptions(slurm_version="22.05")).table.to_pylist()
    assert [r["gpu_busy_gpu_s"] for r in rows] == [pytest.approx(0.05 * 4 * 3600), pytest.approx(0.95 * 4 * 3600)]


def test_scalar_parser_and_version_rule() -> None:
    got = usage.parse_usage("cpu=1-00:00:01,energy=0,fs/disk=33701,mem=12132K,gres/gpumem=1.5G,gres/gpuutil=7")
    assert got["cpu"] == 86401 and got["mem"] == pytest.approx(12132 / 1024) and got["gres/gpumem"] == 1536
    with pytest.raises(ValueError):
        usage.parse_usage("mem")
    assert usage.rule_for_version("slurm-wlm 22.05.8") == usage.RULE_PER_GPU
    assert usage.rule_for_version("slurm 24.05.0") == usage.RULE_SUMMED
    assert usage.rule_for_version("26.05") == usage.RULE_SUMMED
    assert usage.rule_for_version("garbage") is None
    assert not math.isnan(usage.SUMMED_SINCE[0])
