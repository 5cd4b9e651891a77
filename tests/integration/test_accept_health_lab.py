"""Hardware-health counters on the real lab (issue 27): a fault injected on one node we pick is named alone, with
the right class, by `accept report`, and `--drain` drains only it; healthy nodes stay OK under CPU load.

Faults (`slurm-lab fault`, tests/slurm_lab/README.md "Faults"): packet loss on a node's link (nftables `numgen
random` drop inside its network namespace; this kernel has no netem), and a fake GPU whose nvidia-smi -q -x
(the lab's documented stand-in on PATH, tests/slurm_lab/gpu-bin/nvidia-smi) shows a pending row remap.
GPUCLUST_FAULT_NODE picks the node (default node3).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, run_cmd
from tests.integration.test_accept_lab import SMALL, Accept, cpu_load

pytestmark = pytest.mark.slurm

REMAP_XML = REPO / "tests" / "data" / "accept" / "health" / "lab" / "nvidia-smi-rtx-4000-sff-ada-v13-remap-pending.xml"


@pytest.fixture(scope="module")
def accept(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accept]:
    root = tmp_path_factory.mktemp("health")
    os.chmod(root, 0o755)
    yield Accept(slurm_lab, root)


def fault(accept: Accept, node: str, *args: str) -> None:
    subprocess.run([str(SLURM_LAB), "--name", accept.lab.name, "fault", node, *args], check=True,
                   capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def health(doc: dict[str, Any], *, at_least: str = "WARNING") -> dict[str, set[str]]:
    """{node: {check:detail, ...}} of the health findings at WARNING or worse (or CRITICAL only)."""
    wanted = {"WARNING", "CRITICAL"} if at_least == "WARNING" else {"CRITICAL"}
    out: dict[str, set[str]] = {}
    for node, verdict in doc["nodes"].items():
        for r in verdict["reasons"]:
            if r["check"].startswith("health-") and r["status"] in wanted:
                out.setdefault(node, set()).add(f"{r['check']}:{r.get('details', {}).get('detail')}")
    return out


def drained(node: str) -> str | None:
    out = run_cmd(["scontrol", "-o", "show", "node", node]).stdout
    if "DRAIN" not in out.split("State=", 1)[1].split()[0]:
        return None
    return out.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in out else ""


def test_healthy_run_names_nobody_under_cpu_load(accept: Accept) -> None:
    """Every node snapshots before and after; with the CPUs loaded, no health finding above OK anywhere, and the
    sources that this lab has (net, snmp, qdisc, nvidia-smi stand-in) are read, not 'unavailable'."""
    with cpu_load():
        job = accept.submit("allreduce", 4, *SMALL)
        assert accept.finish(job) == "COMPLETED", accept.log(job)
    code, doc = accept.report(job)
    assert health(doc) == {}, json.dumps(doc["nodes"], indent=1)[:4000]
    snaps = sorted((accept.results / "health" / job).glob("*.json"))
    assert [p.name for p in snaps] == [f"node{i}-{ph}.json" for i in range(1, 5) for ph in ("after", "before")]
    snap = json.loads(snaps[0].read_text())
    for source in ("net", "snmp", "qdisc", "nvidia_smi"):
        assert snap["sources"][source]["status"] == "ok", (source, snap["sources"][source])
    assert snap["sources"]["nvidia_smi"]["gpus"][0]["product_name"].startswith("NVIDIA RTX 4000")


def test_packet_loss_names_the_node_by_its_counters_with_the_link_class(accept: Accept) -> None:
    node = os.environ.get("GPUCLUST_FAULT_NODE", "node3")
    for direction in ("in", "out"):
        fault(accept, node, "loss", "5", "--direction", direction)
        try:
            with cpu_load():
                job = accept.submit("allreduce", 4, *SMALL)
                accept.finish(job, timeout=400)
        finally:
            fault(accept, node, "clear")
        code, doc = accept.report(job)
        named = health(doc, at_least="CRITICAL")
        assert set(named) == {node}, (direction, named, accept.log(job))
        assert any(c.startswith("health-link:") for c in named[node]), named
        assert health(doc).keys() == {node}, health(doc)  # no healthy node even at WARNING
        assert code == 2
        # whatever the bandwidth verdict (a job-wide gate goes to the node the counters name), only it is named
        assert {n for n, v in doc["nodes"].items() if v["status"] != "OK"} == {node}, doc["nodes"]
        cp = accept.gpuclust("accept", "report", "--job", job, "--drain", "--dry-run", "--json")
        plan = json.loads(cp.stdout)["drain"]
        assert [a["node"] for a in plan["actions"] if a["action"] == "drain"] == [node], plan
        [reason] = [a["reason"] for a in plan["actions"] if a["action"] == "drain"]
        assert reason.startswith(f"gpuclust:link:ip-lost-{direction} CHECK_MECHANICALS job {job} (allreduce): "), reason


def test_pending_row_remap_is_named_and_drained_alone(accept: Accept) -> None:
    node = os.environ.get("GPUCLUST_FAULT_NODE", "node3")
    assert drained(node) is None, f"{node} is drained before the test: {drained(node)}"
    fault(accept, node, "nvidia-smi", str(REMAP_XML))
    try:
        job = accept.submit("allreduce", 4, *SMALL)
        assert accept.finish(job) == "COMPLETED", accept.log(job)  # the run itself works: remap is latent
        code, doc = accept.report(job)
        assert code == 2 and health(doc, at_least="CRITICAL") == {node: {"health-remap:pending"}}, health(doc)
        assert health(doc).keys() == {node}
        assert {n for n, v in doc["nodes"].items() if v["status"] != "OK"} == {node}, doc["nodes"]
        cp = accept.gpuclust("accept", "report", "--job", job, "--drain", "--json")
        plan = json.loads(cp.stdout)["drain"]
        assert [a["node"] for a in plan["actions"] if a["action"] == "drain"] == [node], plan
        reason = drained(node)
        assert reason is not None and reason.startswith(f"gpuclust:remap:pending RESET_GPU job {job} (allreduce): "), reason
        assert all(drained(n) is None for n in ("node1", "node2", "node3", "node4") if n != node)
    finally:
        fault(accept, node, "clear")
        run_cmd(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)
