"""The pyslurm backend against the CLI backend on the real lab (issue 29 part 4): the same NodeRecords, and the
same `audit partition --json`, clean and with a drained and a down node.

Needs pyslurm built against the lab's Slurm (scripts/test-pyslurm SRC puts it on PYTHONPATH); skipped where it is
not importable, which is CI (it cannot download pyslurm's tags, and PyPI's pyslurm is for Slurm 25.11 only).
pyslurm is only looked up at collection: importing it runs slurm_init, which reads SLURM_CONF, so the import
waits for the lab's environment (the backend imports it on first use).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from gpuclust.audit.collect import collect_snapshot
from gpuclust.slurm.client import CommandSlurmClient
from gpuclust.slurm.pyslurm_backend import PyslurmSlurmClient
from gpuclust.slurm.records import NodeRecord
from tests.integration.labutil import REPO, job_state, run_cmd, submit, wait_job_done

pytestmark = [
    pytest.mark.pyslurm,
    pytest.mark.skipif(importlib.util.find_spec("pyslurm") is None,
                       reason="pyslurm is not importable: build it against this Slurm with scripts/test-pyslurm SRC"),
]

SITE_CONF = str(REPO / "tests" / "data" / "audit" / "site-lab.conf")
READY_ENV = "GPUCLUST_PYSLURM_LAB_READY"


@pytest.fixture
def lab(request: pytest.FixtureRequest) -> Any:
    """The session's lab; under `scripts/test-pyslurm --root` these tests run inside the lab's Debian root, where
    slurm-lab cannot run: the script started the lab outside and exported its SLURM_CONF
    (GPUCLUST_PYSLURM_LAB_READY=1)."""
    if os.environ.get(READY_ENV) == "1":
        assert os.environ.get("SLURM_CONF"), f"{READY_ENV}=1 without SLURM_CONF"
        return None
    return request.getfixturevalue("slurm_lab")


def both() -> tuple[dict[str, NodeRecord], dict[str, NodeRecord], dict[str, NodeRecord], str]:
    cli = CommandSlurmClient()
    text = collect_snapshot(cli, "text", accounting=False).nodes
    js = collect_snapshot(cli, "json", accounting=False).nodes
    snap = collect_snapshot(PyslurmSlurmClient(cli), "auto", accounting=False)
    return text, js, snap.nodes, snap.node_source


def settled_nodes(tries: int = 30) -> tuple[dict[str, NodeRecord], dict[str, NodeRecord], dict[str, NodeRecord]]:
    """The three reads, retried until they agree (a node answering late flips IDLE* between two reads)."""
    for _ in range(tries):
        text, js, ps, source = both()
        assert source == "pyslurm"
        if text == ps == js:
            break
        time.sleep(1)
    return text, js, ps


def test_pyslurm_matches_the_lab(lab):
    import pyslurm  # after the lab's SLURM_CONF is set

    version = str(getattr(pyslurm, "__version__", "") or pyslurm.version())
    slurm = run_cmd(["scontrol", "--version"]).stdout.split()[-1]
    assert version.split(".")[:2] == [str(int(p)) for p in slurm.split(".")[:2]], (version, slurm)


def test_nodes_equal_the_cli_backend(lab):
    text, js, ps = settled_nodes()
    assert sorted(ps) == ["node1", "node2", "node3", "node4"]
    assert ps == text
    assert ps == js


def audit(backend: str, results_dir: str) -> tuple[int, dict[str, Any]]:
    argv = [sys.executable, "-m", "gpuclust.cli.main", "--config", SITE_CONF, "--backend", backend, "audit",
            "partition", "--all", "--json", "--results-dir", results_dir]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert cp.stdout, cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def _stamped(value: Any) -> Any:
    """The document without its generation times, which differ between two runs."""
    if isinstance(value, dict):
        return {k: _stamped(v) for k, v in value.items() if k != "generated_at"}
    if isinstance(value, list):
        return [_stamped(v) for v in value]
    return value


def audits_agree(results_dir: str, tries: int = 20) -> tuple[int, dict[str, Any]]:
    for _ in range(tries):
        code_cli, doc_cli = audit("cli", results_dir)
        code_ps, doc_ps = audit("pyslurm", results_dir)
        if (code_cli, _stamped(doc_cli)) == (code_ps, _stamped(doc_ps)):
            return code_ps, doc_ps
        time.sleep(1)
    assert (code_ps, _stamped(doc_ps)) == (code_cli, _stamped(doc_cli))
    raise AssertionError("unreachable")


def test_audit_json_equals_the_cli_backend(lab, tmp_path):
    code, doc = audits_agree(str(tmp_path))
    assert code in (0, 1), doc  # an empty acceptance store WARNs; nothing else may be wrong on the clean lab
    assert all(f["check"].startswith(("acceptance", "config")) for r in doc["partitions"] for f in r["findings"]
               if f["severity"] != "OK"), doc


def test_gpus_in_use_equal_the_cli_backend(lab, tmp_path):
    """GresUsed with a running GPU job: pyslurm.Nodes of 22.5 loads without detail (allocated_gres empty), so
    this is what proves the backend's GresUsed read."""
    job = submit(["-p", "gpu", "-N2", "--gres=gpu:h100:3", "-o", "/dev/null", "--wrap", "sleep 120"])
    try:
        for _ in range(60):
            if job_state(job) == "RUNNING":
                break
            time.sleep(1)
        assert job_state(job) == "RUNNING"
        text, js, ps = settled_nodes()
        assert sorted(n.name for n in ps.values() if n.gpus_used == 3) == sorted(
            n.name for n in text.values() if n.gpus_used == 3) and sum(n.gpus_used for n in ps.values()) == 6
        assert ps == text
        assert ps == js
        code, doc = audits_agree(str(tmp_path))
        assert doc["partitions"][0]["figures"]["gpus_used"] == 6
    finally:
        run_cmd(["scancel", job], check=False)
        wait_job_done(job)


def test_drained_and_failed_nodes_equal_the_cli_backend(lab, tmp_path):
    """node2 drained, node3 FAIL (a down node: DOWN itself does not last here, ReturnToService=2 revives it)."""
    reason = "GPU 2 ECC double-bit errors, RMA opened, do not resume before swap"
    run_cmd(["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"])
    run_cmd(["scontrol", "update", "NodeName=node3", "State=FAIL", "Reason=PSU failure"])
    try:
        text, js, ps = settled_nodes()
        assert ps["node2"].is_drain and ps["node2"].reason == reason and ps["node2"].reason_user == "root"
        assert ps["node2"].reason_time is not None and ps["node3"].is_down
        assert ps == text
        assert ps == js
        code, doc = audits_agree(str(tmp_path))
        assert code == 2
        checks = {(f["check"], f["nodes"]) for r in doc["partitions"] for f in r["findings"]
                  if f["severity"] != "OK"}
        assert {("node.drain", "node2"), ("node.down", "node3")} <= checks
    finally:
        for node in ("node2", "node3"):
            run_cmd(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
    for _ in range(30):  # RESUME takes a moment to show
        text, _, ps = settled_nodes()
        if not any(n.is_drain or n.is_down for n in ps.values()):
            break
        time.sleep(1)
    assert not any(n.is_drain or n.is_down for n in ps.values()) and ps == text
