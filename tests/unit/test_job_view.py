"""`gpuclust job` (issue 43 item 1) over recorded sacct output, the waste detectors with hand-computed
expectations, the renderer and the JSON shape."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accounting.figures import jobview as jv
from gpuclust.accounting.figures import waste
from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry
from gpuclust.accounting.jobview import show_jobs
from gpuclust.accounting.output.jobview_render import render_text, sparkline
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.slurm import sacct_jobs

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
STEPS = DATA / "usage" / "lab-22.05-steps-pipe.txt"  # real 22.05.8, with steps and usage TRES
ARRAYS = DATA / "lab-pipe-steps.txt"  # real 22.05.8: array, het, requeued jobs (line 17 breaks the field count)
HOLES = DATA / "lab-holes-fetch.txt"  # real 22.05.8, gpuclust's delimiter, a running job
CONFIG = parse_config("[site]\ncluster_name = t\nstate_dir = /nonexistent\n")
NOW = datetime(2026, 12, 8, tzinfo=timezone.utc)


def _answer(path: Path, *ids: str):  # type: ignore[no-untyped-def]
    return show_jobs(CONFIG, ids, input_text=path.read_text(), input_name=str(path), now=NOW)


def test_cpu_and_memory_efficiency_as_seff_from_the_recorded_steps():
    (job,) = _answer(STEPS, "2").jobs
    # TotalCPU is not in this dump: TRESUsageInTot cpu of the steps, 00:00:29 + 0 over Elapsed 40 s x 1 CPU;
    # MaxRSS not either: TRESUsageInMax mem, 218192K = 213.078 MiB of AllocTRES mem=1000M
    assert job["gpu_use"]["cpu_efficiency"] == pytest.approx(29 / 40)
    assert job["gpu_use"]["mem_efficiency"] == pytest.approx(218192 / 1024 / 1000, abs=1e-6)
    assert job["gpu_use"]["allocated_gpu_hours"] == pytest.approx(2 * 40 / 3600, abs=1e-6)
    assert job["gpu_count"] == 2 and job["gpu_type"] == "h100" and job["nodes"] == ["node1"]
    assert job["source"] is None and job["gpu_use"]["busy_gpu_hours"] is None  # 22.05: no gres/gpuutil
    assert any("no step recorded gres/gpuutil" in n for n in job["source_notes"])


def test_arrays_het_components_and_requeued_jobs_from_the_recorded_dump():
    answer = _answer(ARRAYS, "6", "7+1", "5", "13", "99")
    assert [j["job_id"] for j in answer.jobs] == ["6_0", "6_1", "6_2", "7+1", "5"]  # 13 is 6_1's JobIDRaw: shown
    requeued = answer.jobs[-1]
    assert requeued["executions"] == 2 and requeued["state"] == "COMPLETED"
    assert answer.jobs[3]["job_id_raw"] == "8" and answer.jobs[3]["gpu_count"] == 2
    assert answer.errors == [{"job_id": "99", "error": f"job 99: sacct knows no such job in {ARRAYS}"}]
    assert any(":17: expected 19 fields, got 20" in w for w in answer.warnings)  # job 10's `|` in its name


def test_a_running_job_has_no_end_and_no_time_limit_finding():
    rows = sacct_jobs.read_rows(HOLES.read_text())
    running = [r for r in rows if r["End"] == "Unknown"]
    assert running, "the recording has a running job"
    (job,) = _answer(HOLES, running[0]["JobID"]).jobs
    assert job["running"] is True and job["end"] is None


def test_bad_job_ids_and_bad_fields_are_named():
    with pytest.raises(Exception, match="job id '12x'"):
        sacct_jobs.check_job_id("12x")
    text = "JobID|State|Start|End|AllocTRES\n1|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|gres/gpu=x\n"
    with pytest.raises(Exception, match="field AllocTRES"):
        show_jobs(CONFIG, ["1"], input_text=text, input_name="d.txt", now=NOW)
    with pytest.raises(Exception, match="header with JobID"):
        sacct_jobs.read_rows("1|2|3\n")


def test_sacct_args_ask_the_het_job_and_every_execution():
    args = sacct_jobs.sacct_args(["7+1", "7+0", "6_2"])
    assert args[:2] == ["-D", "--parsable2"] and args[args.index("-j") + 1] == "7,6_2"
    assert "-a" not in args  # sacct's own permissions: a user sees their own jobs


def test_the_usage_rule_equals_the_ingest_rule():
    from gpuclust.accounting.ingest import usage

    for v in ("22.05.8", "23.02.1", "23.11.0", "24.05", "24.05.1", "slurm 25.05.0", "nonsense", None):
        assert jv.rule_for_version(v) == usage.rule_for_version(v), v
    # one definition (ingest/usage_rules.py), not a copy; test_usage_rules_equivalence.py holds the rollups equal
    assert jv.rule_for_version is usage.rule_for_version


def test_a_bad_usage_value_is_a_warning_not_an_unknown_utilisation():
    """As the report reads it: a value that is not a number counts as none, with a warning; the GPU figures of
    the same list stay (before, jobview dropped the whole list and called the utilisation unknown)."""
    header = "JobID|JobIDRaw|State|Start|End|Elapsed|AllocTRES|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot"
    rows = [header,
            "9|9|COMPLETED|2026-01-01T00:00:00|2026-01-01T02:00:00|02:00:00|cpu=2,gres/gpu=1,mem=4G,node=1|||",
            "9.0|9.0|COMPLETED|2026-01-01T00:00:00|2026-01-01T02:00:00|02:00:00|cpu=2,gres/gpu=1,mem=4G,node=1|"
            "gres/gpuutil=50|gres/gpuutil=50|cpu=soon,gres/gpuutil=50"]
    answer = show_jobs(CONFIG, ["9"], input_text="\n".join(rows) + "\n", input_name="d.txt", now=NOW)
    (job,) = answer.jobs
    assert job["source"] == "usage_tres" and job["gpu_use"]["util_mean_pct"] == pytest.approx(50.0)
    assert answer.warnings == ["d.txt:3: TRESUsageInTot cpu='soon' is not a value"]


def test_usage_tres_gives_busy_and_held_idle_by_the_ingest_rules():
    header = "JobID|JobIDRaw|State|Start|End|Elapsed|AllocTRES|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot"
    rows = [header,
            "9|9|COMPLETED|2026-01-01T00:00:00|2026-01-01T02:00:00|02:00:00|cpu=2,gres/gpu=2,mem=4G,node=1|||",
            # a real 24.05.1+ style step (schedmd gres doc 1277.0): Tot 200 over 2 GPUs = 100% each
            "9.0|9.0|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00|01:00:00|cpu=2,gres/gpu=2,mem=4G,node=1|"
            "gres/gpumem=36266M,gres/gpuutil=100|gres/gpumem=36266M,gres/gpuutil=100|"
            "cpu=00:00:22,gres/gpumem=72532M,gres/gpuutil=200,mem=1257496K"]
    answer = show_jobs(CONFIG, ["9"], input_text="\n".join(rows) + "\n", slurm_version="25.05", now=NOW)
    (job,) = answer.jobs
    use = job["gpu_use"]
    # busy = 100% x 2 GPUs x 3600 s of the step; covered = 2 GPUs x 7200 s of the job
    assert job["source"] == "usage_tres"
    assert use["busy_gpu_hours"] == pytest.approx(2.0) and use["covered_gpu_hours"] == pytest.approx(4.0)
    assert use["util_mean_pct"] == pytest.approx(50.0) and use["held_idle_gpu_hours"] == 0
    assert use["gpu_mem_max_mib"] == 36266


# ---- the detectors -----------------------------------------------------------------------------------------

def _facts(**kw):  # type: ignore[no-untyped-def]
    base = dict(job_id="1", running=False, elapsed_s=3600.0, timelimit_s=None, gpus=4, nodes=1, alloc_cpus=8,
                mem_mb=64000.0, idle_threshold_pct=10.0, idle_min_s=600.0)
    base.update(kw)
    return waste.JobFacts(**base)


def test_idle_gpu_says_how_long_and_how_many_gpus_to_ask_for_with_the_cost():
    busy = waste.GpuFacts("node2", "0", 7800.0, 90.0, 0.0)
    idle = waste.GpuFacts("node2", "3", 7800.0, 1.0, 7800.0)
    (f,) = waste.idle_gpus(_facts(gpu_facts=(busy, busy, busy, idle), price_per_gpu_hour=2.5, currency="EUR"))
    # 7800 s = 2 h 10 min; 4 GPUs less 1 idle = 3; cost 7800/3600 x 2.5 = 5.4167
    assert f.message == "GPU 3 on node2 was idle for 2 h 10 min (cost 5.42 EUR at the site's price): ask for 3 GPUs"
    assert f.evidence["cost"] == pytest.approx(5.416667, abs=1e-6) and f.advice == "ask for 3 GPUs"
    half = waste.GpuFacts("node2", "1", 7800.0, 50.0, 3900.0)  # idle half the time: not an idle GPU
    assert waste.idle_gpus(_facts(gpu_facts=(half,))) == []


def test_gpu_too_large_from_the_memory_peak():
    g = waste.GpuFacts("n", "0", 100.0, 90.0, 0.0, fb_used_max_mib=9 * 1024, fb_total_mib=80 * 1024)
    (f,) = waste.gpu_too_large(_facts(gpu_facts=(g,)))
    assert f.message == "peak GPU memory 9.0 GB of 80: a smaller GPU or a MIG slice would do"
    assert f.evidence["share"] == pytest.approx(9 / 80)
    big = waste.GpuFacts("n", "0", 100.0, 90.0, 0.0, fb_used_max_mib=21 * 1024, fb_total_mib=80 * 1024)
    assert waste.gpu_too_large(_facts(gpu_facts=(big,))) == []  # 21/80 >= 0.25


def test_time_limit_over_ask():
    (f,) = waste.time_limit(_facts(elapsed_s=1200.0, timelimit_s=86400.0))
    # 20 min x 2 = 40 min, rounded up to whole hours: 1 h
    assert f.message == "used 20 min of a 24 h limit: --time=01:00:00 starts sooner"
    assert f.evidence["time_limit_efficiency"] == pytest.approx(1200 / 86400, abs=1e-6)
    assert waste.time_limit(_facts(elapsed_s=1200.0, timelimit_s=3600.0)) == []  # under an hour of slack
    assert waste.time_limit(_facts(elapsed_s=1200.0, timelimit_s=86400.0, running=True)) == []


def test_cpu_and_memory_share_and_multi_node():
    share = waste.PartitionShare("gpu", cpus_per_gpu=8.0, mem_mb_per_gpu=64000.0, gpus_per_node=4, cpus_per_node=32)
    found = waste.shares(_facts(gpus=1, alloc_cpus=32, mem_mb=256000.0, share=share))
    assert [f.kind for f in found] == ["cpu_share", "mem_share"]
    assert found[0].evidence["cpus_per_gpu"] == 32 and "ask for at most 8 CPUs" in found[0].advice
    assert waste.shares(_facts(gpus=1, alloc_cpus=10, mem_mb=64000.0, share=share)) == []  # 10 <= 8 x 1.25
    (m,) = waste.multi_node(_facts(gpus=4, nodes=2, alloc_cpus=16, share=share))
    assert m.message.startswith("2 nodes for 4 GPUs: one node of partition gpu holds 4")
    assert waste.multi_node(_facts(gpus=8, nodes=2, share=share)) == []


def test_idle_stretch_in_a_job_whose_mean_looks_fine_names_the_node_figures_that_rose():
    start = 1_800_000_000.0
    g = waste.GpuFacts("node2", "1", 36000.0, 72.0, 1500.0, longest_idle_s=1500.0, longest_idle_start=start)
    node = waste.NodeDuring("node2", start, start + 1500, {"disk_read_latency_ms": 40.0, "net_receive_errs": 12.0},
                            {"disk_read_latency_ms": 4.0, "net_receive_errs": 12.0})
    (f,) = waste.idle_stretches(_facts(gpu_facts=(g,), node_during=(node,)))
    assert f.message.startswith("GPU 1 on node2 averaged 72% but sat under 10% for 25 min from 2027-01-15")
    assert "disk read latency 40.0 ms against 4.0 ms over the job" in f.message
    assert f.evidence["node_during_stretch"]["disk_read_latency_ms"] == {"during": 40.0, "whole_job": 4.0}
    low = waste.GpuFacts("node2", "1", 36000.0, 30.0, 1500.0, longest_idle_s=1500.0, longest_idle_start=start)
    assert waste.idle_stretches(_facts(gpu_facts=(low,))) == []  # the mean does not look fine


# ---- rendering -----------------------------------------------------------------------------------------------

def test_sparkline_resamples_and_shows_gaps():
    profile = [0.0] * 60 + [None] * 30 + [100.0] * 30
    assert sparkline(profile, 4) == "▁▁ █"
    assert sparkline(profile, 500) == "▁" * 60 + " " * 30 + "█" * 30  # never wider than the profile
    assert sparkline([50.0], 10) == "▅"


def _doc_with_prometheus() -> dict:
    text = STEPS.read_text()
    rows = sacct_jobs.read_rows(text)
    (record,), _ = jv.select_jobs(rows, ["2"], now=NOW)
    gpu = GpuTelemetry("node1", "0", covered_s=40.0, busy_s=20.0, util_mean_pct=50.0, util_max_pct=90.0, idle_s=0.0,
                       under_threshold_s=20.0, longest_idle_s=20.0, longest_idle_start=None, trailing_idle_s=0.0,
                       util_profile=tuple([90.0] * 60 + [0.0] * 60))
    tel = JobTelemetry(gpus_seen=1, util_mean_pct=50.0, util_max_pct=90.0, fb_used_max_mib=None, fb_total_mib=None,
                       power_mean_w=None, energy_j=None, temp_max_c=None, xid_errors=None, ecc_dbe=None,
                       held_idle_gpu_s=0.0, covered_gpu_s=40.0, busy_gpu_s=20.0, gpus=[gpu])
    (fig,) = jv.job_figures([record], CONFIG.telemetry, prometheus={0: tel}, prometheus_note=None, store_root=None,
                            now=NOW)
    from gpuclust.accounting.output.jobview_render import job_document

    return job_document(fig, [], None, "")


def test_json_shape_is_stable():
    doc = _doc_with_prometheus()
    assert list(doc) == ["job_id", "job_id_raw", "requested", "user", "account", "partition", "qos", "state",
                         "exit_code", "running", "start", "end", "elapsed_s", "timelimit_s", "executions", "nodes",
                         "node_count", "gpu_count", "gpu_type", "alloc_cpus", "mem_mb", "source", "source_notes",
                         "gpu_use", "gpus", "findings"]
    assert list(doc["gpu_use"]) == ["allocated_gpu_hours", "covered_gpu_hours", "coverage", "busy_gpu_hours",
                                    "held_idle_gpu_hours", "util_mean_pct", "util_max_pct", "gpu_mem_max_mib",
                                    "gpu_mem_total_mib", "energy_kwh", "cpu_efficiency", "mem_efficiency",
                                    "time_limit_efficiency", "held_idle_cost", "currency"]
    assert doc["source"] == "prometheus" and doc["gpu_use"]["coverage"] == pytest.approx(40 / 80)
    assert len(doc["gpus"][0]["util_profile"]) == 120
    json.dumps(doc)


def test_text_has_a_sparkline_on_a_terminal_only_fitted_to_its_width():
    doc = _doc_with_prometheus()
    plain = render_text(doc, None)
    assert "util |" not in plain and "node1 GPU 0: util mean 50.0% max 90%" in plain
    for width in (40, 80, 200):
        line = next(x for x in render_text(doc, width).splitlines() if "util |" in x)
        assert len(line) <= max(width, 10 + 11), (width, line)
        assert line.strip().startswith("util |█") and line.endswith("▁|")


def test_cli_json_and_unknown_job_exit_code(tmp_path):
    runner = CliRunner()
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\nstate_dir = {tmp_path}\n")
    got = runner.invoke(cli, ["--config", str(conf), "job", "--json", "--input", str(STEPS), "2", "77"])
    assert got.exit_code == 2, got.output
    doc = json.loads(got.stdout)
    assert [j["job_id"] for j in doc["jobs"]] == ["2"] and doc["errors"][0]["job_id"] == "77"
    assert "error: job 77: sacct knows no such job" in got.stderr
    bad = runner.invoke(cli, ["--config", str(conf), "job", "--input", str(STEPS), "2x"])
    assert bad.exit_code == 2 and "job id '2x'" in bad.output


def test_a_store_this_user_cannot_read_leaves_the_next_source_to_answer(tmp_path: Path) -> None:
    # A user's own `gpuclust job` may not read the site's store (seen on the lab: state_dir under a root-only
    # directory): that is a note on the source, never an error. A path that cannot be listed stands in here.
    state = tmp_path / "state"
    state.mkdir()
    (state / "accounting").write_text("not a directory")
    config = parse_config(f"[site]\ncluster_name = t\nstate_dir = {state}\n")
    answer = show_jobs(config, ["2"], input_text=STEPS.read_text(), input_name=str(STEPS), now=NOW)
    assert answer.errors == []
    (job,) = answer.jobs
    assert job["source"] is None, job  # (this job's steps recorded no gres/gpuutil: unknown, not 0)
    assert any(n.startswith("store: cannot read") and "next source" in n for n in job["source_notes"]), job
    assert any(n.startswith("usage_tres:") for n in job["source_notes"]), job
