"""`gpuclust job` on MIG slices and shards (issue 44) from the real Slurm 22.05 lab recording
(tests/data/gpushare/lab-22.05/README.md): its GPU-hours are GPU-equivalent hours, as the report counts them.
Every job ran 3 s:

  job  9  -p gpu    --gres=gpu:1          1 GPU-equivalent, 1 device
  job 10  -p mig    --gres=gpu:3g.40gb:1  3/7, 1 device
  job 11  -p mig    --gres=gpu:1g.10gb:2  2/7, 2 devices
  job 12  -p shared --gres=shard:4        4/8 (node6: 2 GPUs / 16 shards), no device: utilisation unknown (shard)
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import jobview as jv
from gpuclust.accounting.jobview import show_jobs
from gpuclust.accounting.output.jobview_render import render_text
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from tests.unit.test_gpu_equivalents_lab_recording import LAB, PERIOD, SITE

H = 3 / 3600
NOW = datetime(2026, 12, 8, tzinfo=timezone.utc)


def _answer(site: str = SITE, nodes: bool = True, ids: tuple[str, ...] = ("9", "10", "11", "12")) -> dict[str, dict]:
    answer = show_jobs(parse_config(site), list(ids), input_text=(LAB / "sacct.txt").read_text(),
                       input_name="sacct.txt", nodes_text=(LAB / "nodes.txt").read_text() if nodes else None,
                       now=NOW)
    assert not answer.errors
    return {j["job_id"]: j for j in answer.jobs}


def test_allocated_in_gpu_equivalent_hours_as_the_report_counts() -> None:
    jobs = _answer()
    report, _ = pipeline.build(parse_config(SITE), PERIOD, input_path=str(LAB / "sacct.txt"),
                               nodes_path=str(LAB / "nodes.txt"), events_path=str(LAB / "events.txt"))
    table = report.tables["gpu_use_jobs"].set_index("job_id")
    for job, eq, devices in (("10", 3 / 7, 1), ("11", 2 / 7, 2), ("12", 4 / 8, 0)):
        j = jobs[job]
        assert j["gpu_equivalents"] == pytest.approx(eq, abs=1e-6)
        assert j["gpu_use"]["allocated_gpu_hours"] == pytest.approx(eq * H, abs=1e-6)
        assert j["gpu_use"]["allocated_gpu_hours"] == pytest.approx(table.loc[job, "allocated_gpu_hours"], abs=1e-6)
        assert j["gpu_use"]["gpu_device_hours"] == pytest.approx(devices * H, abs=1e-6)
    assert jobs["10"]["mig_profiles"] == {"3g.40gb": 1} and jobs["11"]["mig_profiles"] == {"1g.10gb": 2}
    assert jobs["10"]["gpu_share_basis"] == "MIG 3g.40gb x1 (3/7 GPU each)"
    assert jobs["12"]["shards"] == 4 and jobs["12"]["gpu_share_basis"] == \
        "4 shards (1/8 GPU each; node6 has 2 GPU(s), 16 shards)"


def test_whole_gpu_job_is_as_before() -> None:
    whole = _answer()["9"]
    for key in ("gpu_equivalents", "mig_profiles", "shards", "mps", "gpu_share_basis", "gpu_share_warnings"):
        assert key not in whole
    assert "gpu_device_hours" not in whole["gpu_use"] and "gpu_util_rule" not in whole["gpu_use"]
    assert whole["gpu_use"]["allocated_gpu_hours"] == pytest.approx(H, abs=1e-6)


def test_a_shard_job_says_why_its_utilisation_is_unknown() -> None:
    shard = _answer()["12"]
    assert shard["source"] is None and shard["gpu_use"]["gpu_util_rule"] == "shard"
    assert shard["source_notes"] == [f"shard: {jv.SHARED_NOTES['shard']}"]
    assert all(shard["gpu_use"][k] is None for k in ("covered_gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours",
                                                     "coverage", "util_mean_pct"))
    text = render_text(shard, None)
    assert "  GPU-equivalents 0.5: 4 shards (1/8 GPU each; node6 has 2 GPU(s), 16 shards)" in text
    assert "GPU-hours: allocated 0.000, covered n/a (coverage n/a), busy n/a, held-idle n/a" in text
    assert "(in GPU-equivalents; device-hours 0.000, a slice as one; utilisation rule shard)" in text
    assert "cannot be told apart from theirs" in text


def test_shards_without_the_node_layout_are_unknown_unless_configured() -> None:
    shard = _answer(nodes=False)["12"]
    assert shard["gpu_equivalents"] is None and shard["gpu_use"]["allocated_gpu_hours"] is None
    assert shard["gpu_share_warnings"] == [
        "shards per GPU unknown: give [partition NAME] shards_per_gpu (or scontrol show node)"]
    assert "  GPU-equivalents unknown: 4 shards (? GPU each)" in render_text(shard, None)
    configured = _answer(SITE + "\n[partition shared]\nshards_per_gpu = 8\n", nodes=False)["12"]
    assert configured["gpu_equivalents"] == 0.5 and configured["gpu_share_basis"] == \
        "4 shards (1/8 GPU each; [partition shared] shards_per_gpu = 8)"


def test_mig_jobs_read_at_80_columns_on_a_terminal() -> None:
    jobs = _answer()
    for job in ("10", "11", "12"):
        text = render_text(jobs[job], 80)
        assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "  GPU-equivalents 0.286: MIG 1g.10gb x2 (1/7 GPU each)" in render_text(jobs["11"], 80)
    # not a terminal: lines as they are, unfolded
    assert any(len(line) > 80 for line in render_text(jobs["12"], None).splitlines())


def test_telemetry_figures_and_held_idle_cost_per_gpu_equivalent_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus answers each slice idle all along (covered = held-idle = its devices x 3 s). In GPU-equivalents:
    job 10 3/7 H held idle, priced by partition mig's 3.50 per card-hour; job 11 2/7 H, its 1g.10gb's 0.40 per
    slice-hour / (1/7) per GPU-equivalent hour, i.e. 2 devices x H x 0.40, as the report prices it."""
    from gpuclust.accounting.figures import telemetry

    def fake(tel, windows, start, end):  # type: ignore[no-untyped-def]
        jobs = {w.key: telemetry.JobTelemetry(
            gpus_seen=w.gpus, util_mean_pct=0.0, util_max_pct=0.0, fb_used_max_mib=None, fb_total_mib=None,
            power_mean_w=None, energy_j=None, temp_max_c=None, xid_errors=None, ecc_dbe=None,
            held_idle_gpu_s=w.gpus * 3.0, covered_gpu_s=w.gpus * 3.0, busy_gpu_s=0.0) for w in windows}
        return telemetry.TelemetryResult(jobs=jobs, nodes=[], warnings=[], queries=1, source="fake")

    monkeypatch.setattr(telemetry, "fetch_telemetry", fake)
    jobs = _answer(SITE + "\n[telemetry]\nprometheus_url = http://127.0.0.1:9\nidle_min = 1s\n",
                   ids=("9", "10", "11"))
    for job, eq, cost in (("10", 3 / 7, 3 / 7 * H * 3.50), ("11", 2 / 7, 2 * H * 0.40), ("9", 1, H * 2.50)):
        use = jobs[job]["gpu_use"]
        assert jobs[job]["source"] == "prometheus"
        assert use["covered_gpu_hours"] == pytest.approx(eq * H, abs=1e-6) and use["coverage"] == pytest.approx(1)
        assert use["held_idle_gpu_hours"] == pytest.approx(eq * H, abs=1e-6)
        assert use["held_idle_cost"] == pytest.approx(cost, abs=1e-6)
    assert jobs["10"]["gpu_use"]["gpu_util_rule"] is None  # (22.05 recorded no gres/gpuutil)


def test_cli_json_names(tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(SITE)
    sacct = LAB / "sacct.txt"
    out = CliRunner().invoke(cli, ["--config", str(conf), "job", "--input", str(sacct), "--nodes",
                                   str(LAB / "nodes.txt"), "--json", "11"])
    assert out.exit_code == 0, out.output
    [job] = json.loads(out.stdout)["jobs"]
    assert list(job)[list(job).index("gpu_type"):list(job).index("alloc_cpus")] == [
        "gpu_type", "gpu_equivalents", "mig_profiles", "shards", "mps", "gpu_share_basis", "gpu_share_warnings"]
    assert list(job["gpu_use"])[-2:] == ["gpu_device_hours", "gpu_util_rule"]
