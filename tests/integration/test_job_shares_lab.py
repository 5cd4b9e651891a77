"""`gpuclust job` on the lab's MIG node5 and shard node6 (issue 44): a job on a 3g.40gb slice and one of 4 shards,
read through the real sacct and scontrol. Their GPU-hours are GPU-equivalent hours (3/7 and 4/16 x 2 GPUs = 1/2 of
a GPU), the slice's profile is named, and the shard job says why its utilisation is unknown. No telemetry: quick."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.labutil import REPO, submit, wait_for_sacct, wait_job_done

pytestmark = pytest.mark.slurm


def _has_sliced_nodes() -> bool:
    cp = subprocess.run(["scontrol", "-o", "show", "node", "node5,node6"], capture_output=True, text=True,
                        timeout=30, stdin=subprocess.DEVNULL)
    return cp.returncode == 0 and "gpu:1g.10gb" in cp.stdout and "shard" in cp.stdout


def test_mig_and_shard_jobs_in_gpu_equivalents(slurm_lab: Any, tmp_path: Path) -> None:
    if not _has_sliced_nodes():
        pytest.skip("this lab has no MIG node5 and shard node6 (slurm-lab before 'Lab: MIG and shard nodes')")
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\ntimezone = UTC\nstate_dir = {tmp_path / 'state'}\n")
    mig = submit(["-p", "mig", "--gres=gpu:3g.40gb:1", "-A", "ml", "-o", "/dev/null", "--wrap", "sleep 1"])
    shard = submit(["-p", "shared", "--gres=shard:4", "-A", "ml", "-o", "/dev/null", "--wrap", "sleep 1"])
    for job in (mig, shard):
        assert wait_job_done(job, timeout=60) == "COMPLETED"
        wait_for_sacct(job)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    cp = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), "job", "--json", mig,
                         shard], capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr
    by = {j["job_id"]: j for j in json.loads(cp.stdout)["jobs"]}
    m, s = by[mig], by[shard]
    assert m["gpu_type"] == "3g.40gb" and m["mig_profiles"] == {"3g.40gb": 1}
    assert m["gpu_equivalents"] == pytest.approx(3 / 7, abs=1e-6)
    assert m["gpu_use"]["allocated_gpu_hours"] == pytest.approx(3 / 7 * m["elapsed_s"] / 3600, abs=1e-6)
    assert m["gpu_use"]["gpu_device_hours"] == pytest.approx(m["elapsed_s"] / 3600, abs=1e-6)
    assert s["gpu_count"] == 0 and s["shards"] == 4 and s["gpu_equivalents"] == pytest.approx(0.5)
    assert s["gpu_share_basis"] == "4 shards (1/8 GPU each; node6 has 2 GPU(s), 16 shards)"
    assert s["gpu_use"]["allocated_gpu_hours"] == pytest.approx(0.5 * s["elapsed_s"] / 3600, abs=1e-6)
    assert s["gpu_use"]["gpu_util_rule"] == "shard" and s["source"] is None
    assert s["gpu_use"]["held_idle_gpu_hours"] is None and s["gpu_use"]["busy_gpu_hours"] is None
    text = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), "job", shard],
                          capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL).stdout
    assert "GPU-equivalents 0.5: 4 shards" in text and "cannot be told apart from theirs" in text, text
