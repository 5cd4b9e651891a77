"""MIG on the real lab (issue 44 parts 4-5): node5 is one H100 in MIG mode (Gres=gpu:1g.10gb:4,gpu:3g.40gb:1,
partition mig), node6 shares two H100s as shards (partition shared).

An allreduce acceptance job on a MIG slice of node5 takes its health snapshots, then skips all_reduce with a
note (gpuclust.accept.migskip, from the GPUs Slurm allocated); `accept report` shows the note. node5's nvidia-smi
stand-in answers with the netdata A100 recording (two 3g.20gb MIG devices, `slurm-lab fault node5 nvidia-smi
FILE`), so `audit partition mig` compares Slurm's MIG types with what the node reported and names the mismatch;
all_reduce is not asked of node5. `audit partition shared` reads node6's shards as its layout.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, wait_job_done
from tests.integration.test_accept_lab import Accept

pytestmark = pytest.mark.slurm

MIG_XML = REPO / "tests" / "data" / "accept" / "health" / "nvidia-smi-a100-sxm4-40gb-mig-v11.xml"


@pytest.fixture(scope="module")
def accept(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accept]:
    if not _has_node5():
        pytest.skip("this lab has no MIG node5 (slurm-lab before 'Lab: MIG and shard nodes')")
    root = tmp_path_factory.mktemp("mig")
    os.chmod(root, 0o755)
    yield Accept(slurm_lab, root)


def _has_node5() -> bool:
    cp = subprocess.run(["scontrol", "-o", "show", "node", "node5"], capture_output=True, text=True, timeout=30,
                        stdin=subprocess.DEVNULL)
    return cp.returncode == 0 and "gpu:1g.10gb" in cp.stdout


def fault(accept: Accept, *args: str) -> None:
    subprocess.run([str(SLURM_LAB), "--name", accept.lab.name, "fault", "node5", *args], check=True,
                   capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def audit(accept: Accept, partition: str) -> tuple[int, dict[str, Any]]:
    cp = accept.gpuclust("audit", "partition", partition, "--results-dir", str(accept.results), "--json")
    assert cp.stdout, cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def checks(doc: dict[str, Any], check: str) -> list[tuple[str, str, str]]:
    return [(f["severity"], f["nodes"], f["message"]) for f in doc["findings"] if f["check"] == check]


def test_allreduce_on_a_mig_slice_is_skipped_and_the_audit_compares_the_report(accept: Accept) -> None:
    fault(accept, "nvidia-smi", str(MIG_XML))
    try:
        cp = accept.gpuclust("accept", "submit", "allreduce", "-p", "mig", "-N", "1", "--gpus-per-node", "1",
                             "-A", "ml", "--json", "--set", accept.glob)
        assert cp.returncode == 0, cp.stderr + cp.stdout
        job = str(json.loads(cp.stdout)["jobs"][0]["job_id"])
        assert wait_job_done(job, timeout=240) == "COMPLETED", accept.log(job)
    finally:
        fault(accept, "clear")
    log = accept.log(job)
    assert "all_reduce skipped: the GPUs are MIG slices (1g.10gb); NCCL has no P2P between MIG instances" in log, log
    result = accept.result("allreduce", job)
    assert result.skipped and result.job.passed and not result.sweep
    # the job's health snapshots were taken and read the MIG document
    snap = json.loads((accept.results / "health" / job / "node5-after.json").read_text())
    gpu = snap["sources"]["nvidia_smi"]["gpus"][0]
    assert gpu["mig_mode_current"] == "Enabled" and [m["gpu_instance_id"] for m in gpu["mig_devices"]] == [1, 2]

    code, report = accept.report(job)
    assert code == 0, report
    notes = [f for f in report["findings"] if f["check"] == "skipped"]
    assert [n["message"] for n in notes] == [f"allreduce job {job}: {result.skipped}"]

    code, doc = audit(accept, "mig")
    assert checks(doc, "homogeneity.mig") == [("OK", "node5", "GPU layout MIG 1g.10gb:4,3g.40gb:1 on all 1 nodes")]
    [(sev, nodes, message)] = checks(doc, "gres.mig_report")
    assert (sev, nodes) == ("WARNING", "node5")
    assert f"(acceptance job {job}, after snapshot" in message and "reports MIG devices 20 GB x2" in message
    assert ("OK", "node5", "all_reduce not run: the nodes' GPUs are MIG slices (NCCL has no P2P between MIG "
                           "instances)") in checks(doc, "acceptance.all_reduce")


def test_shared_partition_layout(accept: Accept) -> None:
    code, doc = audit(accept, "shared")
    assert checks(doc, "homogeneity.mig") == [("OK", "node6", "GPU layout 2 whole GPU(s); 16 shards on all 1 nodes")]
    assert checks(doc, "gres.mig_report") == []
    assert not [f for f in doc["findings"] if f["check"].startswith("gres.")]
