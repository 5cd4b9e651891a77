"""Issue 14 on the real lab, through the CLI: `report fetch` stores the node events and the refusals, and
`report build` splits capacity. A node drained for a measured time shows as unavailable, the refusals
provoked are counted exactly, and idle = capacity - allocated - unavailable, with the terms adding up.

Works on whatever partitions the lab has (the default lab's gpu and debug share node[1-4]: the total counts
each node once)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.render import write_lua
from tests.integration.labutil import run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parent.parent.parent
SLURM_LAB = REPO / "tests" / "slurm_lab" / "slurm-lab"
DRAIN_S = 20


def _site(slurm_lab, state: Path) -> str:
    return f"""[site]
cluster_name = {slurm_lab['cluster_name']}
state_dir = {state}
slurmctld_log = {slurm_lab['log_dir']}/slurmctld.log
[gpu_type h100]
price_per_gpu_hour = 2.50
[partition gpu]
gpu_type = h100
max_gpus_per_job = 2
[account ml]
[account physics]
[policy]
require_account = yes
default_partition = gpu
[costs]
currency = EUR
network = 730
operations = 1460
[baseline api]
kind = unit
price_per_unit = 1
"""


def _gpuclust(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cmd([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), *args], timeout=300)


def _node_gpus(node: str) -> int:
    out = run_cmd(["scontrol", "show", "node", "-o", node]).stdout
    for item in out.split():
        if item.startswith("CfgTRES="):
            for kv in item[len("CfgTRES="):].split(","):
                if kv.startswith("gres/gpu="):
                    return int(kv.split("=")[1])
    return 0


def test_drain_refusals_and_capacity_split(slurm_lab, tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(_site(slurm_lab, tmp_path / "state"))
    lua = write_lua(compile_policy(load_config(str(conf))), tmp_path / "job_submit.lua")
    node = sorted(slurm_lab.nodes)[-1]
    since = datetime.now(timezone.utc).replace(microsecond=0)
    time.sleep(1)
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(lua)], timeout=60)
    time.sleep(1.1)  # slurmctld compares the script's mtime at 1 s granularity
    try:
        refused = [
            run_cmd(["sbatch", "-o", "/dev/null", "-p", "gpu", "--gres=gpu:1", "--wrap", "true"], check=False),
            run_cmd(["sbatch", "-o", "/dev/null", "-A", "ml", "-p", "gpu", "--gres=gpu:3", "--wrap", "true"],
                    check=False),
            run_cmd(["sbatch", "-o", "/dev/null", "-A", "ml", "-p", "gpu", "-J", "has space", "--gres=gpu:5",
                     "--wrap", "true"], check=False),
        ]
        assert [cp.returncode for cp in refused] == [1, 1, 1], [cp.stderr for cp in refused]
        job = submit(["-o", "/dev/null", "-A", "ml", "-p", "gpu", "--gres=gpu:1", "--wrap", "sleep 2"])
        assert wait_job_done(job) == "COMPLETED"
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)
    gpus = _node_gpus(node)
    assert gpus > 0
    run_cmd(["scontrol", "update", f"nodename={node}", "state=drain", "reason=econ14 test drain"])
    t0 = time.time()
    try:
        time.sleep(DRAIN_S)
    finally:
        run_cmd(["scontrol", "update", f"nodename={node}", "state=resume"])
        t1 = time.time()
    time.sleep(2)
    until = datetime.now(timezone.utc).replace(microsecond=0)
    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    fetched = json.loads(_gpuclust(conf, "report", "fetch", *window, "--json").stdout)
    assert not fetched["economics"]["problems"], fetched["economics"]
    out = tmp_path / "out"
    _gpuclust(conf, "report", "build", *window, "--out", str(out), "--format", "json,html,csv,prom")
    econ = json.loads((out / "report.json").read_text())["economics"]
    total = econ["total"]
    assert econ["capacity"] == "known"

    # the drained node, for the time it was drained (slurmdbd keeps whole seconds)
    unavailable = total["terms"]["unavailable"]["gpu_hours"]
    assert abs(unavailable - gpus * (t1 - t0) / 3600) <= gpus * 2.5 / 3600, (unavailable, gpus, t1 - t0)
    # every refusal provoked, by rule
    ref = econ["refusals"]
    assert ref["total"] == 3, ref
    assert {r["rule"]: r["refusals"] for r in ref["by_rule"]} == {"account_missing": 1, "partition_max_gpus": 2}
    # idle = capacity - allocated - unavailable; GPU-hour terms add up to capacity; cost terms to the total
    for row in (*econ["by_partition"], total):
        t = row["terms"]
        assert t["idle"]["gpu_hours"] == pytest.approx(
            row["capacity_gpu_hours"] - row["allocated_gpu_hours"] - t["unavailable"]["gpu_hours"], abs=1e-5)
        assert sum(t[k]["gpu_hours"] for k in ("completed_run", "retries_failures", "in_progress", "idle", "unavailable")) \
            == pytest.approx(row["capacity_gpu_hours"], abs=1e-5)
        assert sum(v["cost"] for v in t.values()) == pytest.approx(row["total_cost"], abs=1e-5)
    assert total["terms"]["completed_run"]["gpu_hours"] >= 2 / 3600
    assert (out / "economics_terms.csv").exists() and "economics_cost" in (out / "gpuclust.prom").read_text()
    # the pending reasons came with the jobs (one sacct call per day, no reasons.txt): the wait split is known
    waits = {w["pending_reason"]: w["jobs"] for w in econ["pending_reason_wait"]}
    assert sum(waits.values()) >= 1, econ["pending_reason_wait"]
    assert not list((tmp_path / "state").rglob("reasons.txt"))
