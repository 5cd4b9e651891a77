"""GPU-equivalents on the real lab (issue 44): whole-GPU jobs on partition gpu, MIG jobs on partition mig (node5:
one H100 cut into gpu:1g.10gb:4,gpu:3g.40gb:1), shard jobs on partition shared (node6: gpu:h100:2,shard:16), each
a short sleep; `report fetch` and `report build --format json`; GPU-equivalent hours, device-hours and the
capacity of mig and shared against a hand computation from the jobs' own sacct Elapsed.

The arithmetic (h = a job's Elapsed in hours, as sacct records it):
  whole GPU  --gres=gpu:1          1 x h GPU-equivalent hours, 1 device
  MIG 3g     --gres=gpu:3g.40gb:1  3/7 x h (3 of the card's 7 compute slices), 1 device
  MIG 1g x2  --gres=gpu:1g.10gb:2  2 x 1/7 x h, 2 devices
  shards     --gres=shard:4        4 x 1/8 x h (node6: 2 GPUs / 16 shards = 1/8 GPU per shard), no device
  capacity   mig: node5's slices 4 x 1/7 + 1 x 3/7 = 1 GPU x the window; shared: node6's 2 GPUs x the window
                                   (its shards add nothing)

The README's SQL (store_sql), run by DuckDB over the store the fetch wrote, gives the report's allocated GPU-hours
per partition; a fetch without [costs] stores the node inventory too, so the shard job's share is known from the
store alone (SQL and report).

With GPUCLUST_RECORD_GPUSHARE=DIR it also writes the jobs' `sacct -P` rows (the fetch's fields) and
`scontrol show node -o node5,node6` there (tests/data/gpushare/lab-22.05/: the unit test that needs no lab).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import pytest

from gpuclust.accounting.history import store_sql
from gpuclust.accounting.ingest.schema import FETCH_FIELDS
from tests.integration.labutil import run_cmd, submit, wait_for_sacct, wait_job_done
from tests.unit.store_duckdb import in_window, readme_session

pytestmark = pytest.mark.slurm
REL = 1e-3  # within 0.1%
SLEEP_S = 3

# (partition, --gres, GPU-equivalents per job, GPU GRES devices per job)
JOBS = (
    ("gpu", "gpu:1", Fraction(1), 1),
    ("mig", "gpu:3g.40gb:1", Fraction(3, 7), 1),
    ("mig", "gpu:1g.10gb:2", 2 * Fraction(1, 7), 2),
    ("shared", "shard:4", 4 * Fraction(2, 16), 0),
)


def _site(slurm_lab, state: Path) -> str:
    # ([costs]: `report fetch` stores the node events the capacity reads; the inventory it stores in any case)
    return f"""[site]
cluster_name = {slurm_lab['cluster_name']}
timezone = UTC
state_dir = {state}
[gpu_type h100]
price_per_gpu_hour = 2.50
[gpu_type 1g.10gb]
price_per_gpu_hour = 0.40
[partition gpu]
gpu_type = h100
[costs]
currency = EUR
"""


def _sql_by_partition(state: Path, since: datetime, until: datetime) -> dict[str, tuple[float | None, int]]:
    """store_sql.ALLOCATED_BY_PARTITION over the store under `state`, its window since..until: partition ->
    (allocated GPU-hours, rows of unknown share)."""
    pytest.importorskip("duckdb")
    con = readme_session(state / "accounting" / "current")
    sql = in_window(store_sql.ALLOCATED_BY_PARTITION, since, until)
    return {part: (hours, unknown) for _, part, hours, unknown in con.sql(sql).fetchall()}


def _gpuclust(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cmd([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), *args], timeout=300)


def _record(directory: Path, job_ids: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    sacct = run_cmd(["sacct", "-a", "-D", "-P", "-j", ",".join(job_ids), "-o", ",".join(FETCH_FIELDS)]).stdout
    (directory / "sacct.txt").write_text(sacct)
    nodes = run_cmd(["scontrol", "show", "node", "-o", "node5,node6"]).stdout
    (directory / "nodes.txt").write_text(nodes)


def test_gpu_equivalents_from_the_lab(slurm_lab, tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(_site(slurm_lab, tmp_path / "state"))
    since = datetime.now(timezone.utc).replace(microsecond=0)
    time.sleep(1.1)  # (a job's Start is a whole second at or after `since`)
    ids = [submit(["-o", "/dev/null", "-p", part, f"--gres={gres}", "--wrap", f"sleep {SLEEP_S}"])
           for part, gres, _, _ in JOBS]
    states = [wait_job_done(job, timeout=90) for job in ids]
    assert states == ["COMPLETED"] * len(JOBS), states
    rows = [wait_for_sacct(job, timeout=60, fields=("JobID", "JobName", "Partition", "State", "ElapsedRaw",
                                                        "AllocTRES", "NodeList")) for job in ids]
    time.sleep(1.1)
    until = datetime.now(timezone.utc).replace(microsecond=0)
    if os.environ.get("GPUCLUST_RECORD_GPUSHARE"):
        _record(Path(os.environ["GPUCLUST_RECORD_GPUSHARE"]), ids)

    # the hand computation, from the jobs' own Elapsed
    hours = [int(r["ElapsedRaw"]) / 3600 for r in rows]
    assert all(h > 0 for h in hours), rows
    assert [r["NodeList"] for r in rows[1:]] == ["node5", "node5", "node6"], rows
    expect: dict[str, list[float]] = {}
    for (part, _, eq, devices), h in zip(JOBS, hours, strict=True):
        got = expect.setdefault(part, [0.0, 0.0])
        got[0] += float(eq) * h
        got[1] += devices * h
    window_h = (until - since).total_seconds() / 3600

    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    _gpuclust(conf, "report", "fetch", *window)
    out = tmp_path / "out"
    _gpuclust(conf, "report", "build", *window, "--out", str(out), "--format", "json")
    data = json.loads((out / "report.json").read_text())
    by_part = {r["partition"]: r for r in data["runs"]["by_partition"]}
    for part, (eq_h, dev_h) in expect.items():
        assert by_part[part]["gpu_hours"] == pytest.approx(eq_h, rel=REL), (part, by_part[part], rows)
        assert by_part[part]["gpu_device_hours"] == pytest.approx(dev_h, rel=REL), (part, by_part[part])
    assert data["totals"]["gpu_hours"] == pytest.approx(sum(v[0] for v in expect.values()), rel=REL)
    assert data["totals"]["gpu_device_hours"] == pytest.approx(sum(v[1] for v in expect.values()), rel=REL)
    assert "gpu_share_warnings" not in data["input"], data["input"].get("gpu_share_warnings")
    econ = data["economics"]
    assert econ["capacity"] == "known", econ["notes"]
    cap = {r["partition"]: r for r in econ["by_partition"]}
    assert cap["mig"]["capacity_gpu_hours"] == pytest.approx(1 * window_h, rel=REL)
    assert cap["shared"]["capacity_gpu_hours"] == pytest.approx(2 * window_h, rel=REL)
    assert cap["mig"]["allocated_gpu_hours"] == pytest.approx(expect["mig"][0], rel=REL)
    assert cap["shared"]["allocated_gpu_hours"] == pytest.approx(expect["shared"][0], rel=REL)
    # the shard job in the GPU use tables: allocated, its utilisation unknown (rule shard)
    assert data["gpu_use"]["totals"]["allocated_gpu_hours"] == pytest.approx(data["totals"]["gpu_hours"], rel=REL)
    assert "shard" in data["gpu_use"]["gpu_util_rules"]
    # 1g.10gb priced per slice-hour by default: the report says which unit applied
    assert data["input"]["gpu_price_units"] == {"1g.10gb": "slice", "h100": "card"}

    # The README's SQL over the store gives the report's allocated GPU-hours per partition (GPU-equivalents)
    sql = _sql_by_partition(tmp_path / "state", since, until)
    for part in expect:
        assert sql[part][0] == pytest.approx(cap[part]["allocated_gpu_hours"], rel=REL, abs=1e-9), (part, sql, cap)
        assert sql[part][1] == 0, sql
    assert sql["shared"][0] == pytest.approx(expect["shared"][0], rel=REL)

    # Without [costs] the fetch stores the node inventory all the same: the shards' share is known from the store
    bare = tmp_path / "bare.conf"
    bare.write_text(_site(slurm_lab, tmp_path / "bare").split("[costs]")[0])
    _gpuclust(bare, "report", "fetch", *window)
    assert list((tmp_path / "bare" / "economics").glob("day=*/nodes.txt"))
    _gpuclust(bare, "report", "build", *window, "--out", str(tmp_path / "bare-out"), "--format", "json")
    plain = json.loads((tmp_path / "bare-out" / "report.json").read_text())
    plain_by = {r["partition"]: r["gpu_hours"] for r in plain["runs"]["by_partition"]}
    assert plain_by["shared"] == pytest.approx(expect["shared"][0], rel=REL), plain_by
    assert "gpu_share_warnings" not in plain["input"], plain["input"].get("gpu_share_warnings")
    bare_sql = _sql_by_partition(tmp_path / "bare", since, until)
    assert bare_sql["shared"][0] == pytest.approx(expect["shared"][0], rel=REL) and bare_sql["shared"][1] == 0
