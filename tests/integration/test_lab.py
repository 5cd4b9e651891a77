"""The lab itself works: multi-node steps land on distinct hosts, and GPU GRES reaches accounting."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.labutil import run_cmd, submit, wait_for_sacct, wait_job_done

pytestmark = pytest.mark.slurm


def test_srun_two_nodes_prints_two_different_hostnames(slurm_lab):
    cp = run_cmd(
        ["srun", "-N2", "--gres=gpu:h100:1", "-J", f"labtest-{uuid.uuid4().hex[:8]}", "hostname"], timeout=60
    )
    hosts = cp.stdout.split()
    assert len(hosts) == 2, cp.stdout
    assert hosts[0] != hosts[1]
    assert set(hosts) <= set(slurm_lab.nodes)


def test_two_node_gres_job_has_gres_gpu_in_alloctres(slurm_lab):
    job_id = submit(["-N2", "--gres=gpu:h100:1", "-o", "/dev/null", "--wrap", "srun hostname"])
    assert wait_job_done(job_id, timeout=60) == "COMPLETED"
    row = wait_for_sacct(job_id, timeout=30)
    assert "gres/gpu=2" in row["AllocTRES"], row
    out = run_cmd(["sacct", "-a", "-X", "-j", job_id, "-o", "JobID,AllocTRES%80"]).stdout
    assert "gres/gpu" in out, out
