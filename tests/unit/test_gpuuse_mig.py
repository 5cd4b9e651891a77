"""Usage TRES on MIG slices (issue 44): gres/gpuutil reads 0 on a MIG instance (NVML gives it no utilisation),
so a job on MIG slices has no usage-TRES figure: unknown (gpu_util_rule `mig`), counted against coverage, never
held idle; in `report build` and in `gpuclust job`. A job on whole GPUs keeps its figure exactly."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import gpuuse
from gpuclust.accounting.jobview import show_jobs
from gpuclust.config import parse_config
from tests.unit.test_accounting_usage import HEADER, JOB, STEP

WHOLE = "billing=8,cpu=8,gres/gpu=4,mem=64G,node=1"
MIG = "billing=8,cpu=8,gres/gpu:1g.10gb=1,gres/gpu=1,mem=64G,node=1"
MIXED = "billing=8,cpu=8,gres/gpu:1g.10gb=1,gres/gpu:h100=2,gres/gpu=3,mem=64G,node=1"


def _lines() -> list[str]:
    out = []
    for job, tres, gpus in ((1, WHOLE, 4), (2, MIG, 1), (3, MIXED, 3)):
        out.append(JOB.format(id=job, e=0).replace(WHOLE, tres))
        out.append(STEP.format(id=job, s="0", g=gpus, ave="gres/gpuutil=0", max="gres/gpuutil=0",
                               tot="gres/gpuutil=0").replace(f"gres/gpu={gpus}", tres.split(",", 2)[2]))
    return out


def _config(tmp_path: Path) -> str:
    return (f"[site]\ncluster_name = c\ntimezone = UTC\nstate_dir = {tmp_path}/s\nreport_dir = {tmp_path}/r\n")


def test_usage_tres_of_a_mig_slice_is_unknown_never_held_idle(tmp_path: Path) -> None:
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join([HEADER, *_lines()]) + "\n")
    report, _ = pipeline.build(parse_config(_config(tmp_path)), None, input_path=str(dump), slurm_version="24.11")
    jobs = report.tables["gpu_use_jobs"].set_index("job_id")
    whole = jobs.loc["1"]
    assert whole["telemetry"] == "usage_tres" and whole["gpu_util_rule"] == "summed"
    assert whole["held_idle_gpu_hours"] == pytest.approx(4.0)  # 0 % for an hour on whole GPUs: held idle
    for job in ("2", "3"):  # a MIG slice alone, and one beside whole GPUs
        row = jobs.loc[job]
        assert row["telemetry"] is None or np.isnan(row["telemetry"])
        assert row["gpu_util_rule"] == gpuuse.RULE_MIG
        assert np.isnan(row["covered_gpu_hours"]) and np.isnan(row["held_idle_gpu_hours"])
        assert np.isnan(row["busy_gpu_hours"]) and np.isnan(row["util_mean_pct"])
    use = report.data["gpu_use"]
    assert use["totals"]["unknown_jobs"] == 2 and use["totals"]["held_idle_gpu_hours"] == pytest.approx(4.0)
    # the slices' hours count against coverage, in GPU-equivalents (issue 44): job 1 4 GPUs covered; job 2 1/7 and
    # job 3 1/7 + 2 not: 4 / (4 + 1/7 + 2 + 1/7)
    assert use["totals"]["coverage"] == pytest.approx(4.0 / (4 + 1 / 7 + 2 + 1 / 7))
    assert use["gpu_util_rules"] == ["mig", "summed"] and use["sources"]["none"] == 2
    assert [r["job_id"] for r in use["worst_held_idle"]] == ["1"]


def test_mig_rows_by_type_and_by_the_partitions_configured_type(tmp_path: Path) -> None:
    import pandas as pd

    config = parse_config(_config(tmp_path) + "\n[partition mig]\ngpu_type = 3g.40gb\n")
    jobs = pd.DataFrame({"gpu_type": ["h100", "1g.10gb", "a100=1,nvidia_h100_80gb_hbm3_2g.20gb=2", None, None],
                         "partition": ["gpu", "gpu", "gpu", "gpu", "mig"]})
    assert gpuuse.mig_rows(gpuuse._gpu_kind(jobs, config)).tolist() == [False, True, True, False, True]


def test_gpuclust_job_says_why_a_mig_slice_has_no_usage_tres_figure() -> None:
    rows = [HEADER, *_lines()]
    answer = show_jobs(parse_config("[site]\ncluster_name = t\nstate_dir = /nonexistent\n"), ["1", "2"],
                       input_text="\n".join(rows) + "\n", input_name="d.txt", slurm_version="24.11",
                       now=datetime(2026, 12, 8, tzinfo=timezone.utc))
    whole, mig = answer.jobs
    assert whole["source"] == "usage_tres" and whole["gpu_use"]["held_idle_gpu_hours"] == pytest.approx(4.0)
    assert mig["source"] is None and mig["gpu_use"]["held_idle_gpu_hours"] is None
    assert any("a MIG slice: gres/gpuutil reads 0 on a MIG instance" in n and "1g.10gb" in n
               for n in mig["source_notes"])


def test_the_definitions_table_names_every_utilisation_rule() -> None:
    """report.json's definitions (and the page's table) say what each gpu_util_rule value means."""
    from gpuclust.accounting.figures import catalog
    from gpuclust.accounting.ingest.usage_rules import RULES_OUT

    text = catalog.definitions(catalog.GPU_USE)["gpu_util_rule"]
    assert text == (
        "How Slurm's gres/gpuutil became per-GPU utilisation: summed (23.02.x and 24.05.1 on: the step's Tot, summed "
        "over its GPUs, divided by its GPUs) or last-gpu (23.11.0 to 24.05.0 recorded only the node's last GPU: "
        "utilisation unknown, counted in usage_warnings). Three more name why a job's utilisation is unknown, never 0 "
        "or held idle: mig (a job on MIG slices: gres/gpuutil reads 0 on a MIG instance, so there is no trustworthy "
        "per-slice value; only Prometheus' mig_util_metric covers it), shard and mps (a job of shards or MPS only "
        "shares a GPU with other jobs: no trustworthy per-shard value, from any source).")
    for rule in (*RULES_OUT, gpuuse.RULE_MIG, gpuuse.RULE_SHARD, gpuuse.RULE_MPS):
        assert f" {rule} (" in text or f" {rule} and " in text, rule
