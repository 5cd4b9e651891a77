"""`gpuclust accept report --drain` on the real lab: a tbf-throttled node is named by a pairwise run and drained
(reason `gpuclust:bandwidth:outlier ...`); a drain an admin set on another node is never touched; with the throttle
lifted, a re-test (`accept submit --retest-drained`) passes and --drain resumes the node. Audit shows the drain
as gpuclust's own. Also: the topology the lab config announces (1 NIC at 10000 Mb/s, the veth) against what
the job saw."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclust.slurm.records import NodeRecord, parse_nodes_text
from tests.integration.labutil import lab_exec, run_cmd
from tests.integration.test_accept_lab import Accept, cpu_load, outlier_nodes

pytestmark = pytest.mark.slurm

ADMIN_REASON = "admin: disk"


@pytest.fixture(scope="module")
def accept(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accept]:
    root = tmp_path_factory.mktemp("drain")
    os.chmod(root, 0o755)
    yield Accept(slurm_lab, root)


def nodes() -> dict[str, NodeRecord]:
    return {n.name: n for n in parse_nodes_text(run_cmd(["scontrol", "-o", "show", "node"]).stdout)}


def report_drain(accept: Accept, *args: str) -> tuple[int, dict[str, Any]]:
    cp = accept.gpuclust("accept", "report", "--drain", "--json", *args)
    assert cp.stdout, cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def actions(doc: dict[str, Any]) -> dict[str, str]:
    return {a["node"]: a["action"] for a in doc["drain"]["actions"]}


def test_drain_then_resume_never_touching_an_admin_drain(accept: Accept) -> None:
    """GPUCLUST_THROTTLE_NODE picks the throttled node (default node3); GPUCLUST_DRAIN_CPU_LOAD=1 runs the
    whole scenario under the busy-loop CPU load of test_pairwise_under_cpu_load_one_verdict."""
    if os.environ.get("GPUCLUST_DRAIN_CPU_LOAD") == "1":
        with cpu_load():
            _drain_scenario(accept)
    else:
        _drain_scenario(accept)


def _drain_scenario(accept: Accept) -> None:
    name = accept.lab.name
    throttled = os.environ.get("GPUCLUST_THROTTLE_NODE", "node3")
    admin = "node1" if throttled != "node1" else "node4"
    try:
        lab_exec(throttled, ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit", "burst",
                             "64kbit", "latency", "400ms"], name=name)
        try:
            job = accept.submit("pairwise", 4, "ACCEPT_PAIR_BUDGET=2")
            assert accept.finish(job, timeout=400) == "FAILED", accept.log(job)
        finally:
            lab_exec(throttled, ["tc", "qdisc", "del", "dev", "eth0", "root"], name=name, check=False)
        code, doc = accept.report(job)
        assert code == 2 and outlier_nodes(doc) == [throttled], doc
        run_cmd(["scontrol", "update", f"NodeName={admin}", "State=DRAIN", f"Reason={ADMIN_REASON}"])

        # --dry-run: the commands, nothing changed
        code, doc = report_drain(accept, "--job", job, "--dry-run")
        assert code == 2 and doc["drain"]["dry_run"] and doc["drain"]["applied"] == []
        assert actions(doc) == {throttled: "drain", admin: "untouched"}
        [cmd] = [a["command"] for a in doc["drain"]["actions"] if a["command"]]
        # the tbf's drops and the retransmits they cause are the cause (link), the slow pairs the symptom
        cause = re.compile(rf"gpuclust:(link:[a-z0-9._-]+|bandwidth:outlier) job {job} \(pairwise\): ")
        assert cmd.startswith(f"scontrol update NodeName={throttled} State=DRAIN 'Reason="), cmd
        assert cause.match(cmd.split("'Reason=", 1)[1]), cmd
        assert not nodes()[throttled].is_drain
        text = accept.gpuclust("accept", "report", "--job", job, "--drain", "--dry-run").stdout
        assert cmd in text

        # --drain: the failed node drained with gpuclust's reason; the admin's drain as it was
        code, doc = report_drain(accept, "--job", job)
        assert code == 2 and actions(doc) == {throttled: "drain", admin: "untouched"}, doc["drain"]
        now = nodes()
        assert now[throttled].is_drain and cause.match(now[throttled].reason or ""), now[throttled].reason
        assert now[admin].is_drain and now[admin].reason == ADMIN_REASON
        # again: nothing new (ours kept, the admin's untouched)
        code, doc = report_drain(accept, "--job", job)
        assert actions(doc) == {throttled: "keep", admin: "untouched"} and doc["drain"]["applied"] == []

        # audit: gpuclust's drain shown as its own, the admin's as a plain drain
        cp = accept.gpuclust("audit", "partition", "gpu", "--json", "--results-dir", str(accept.results))
        audit = json.loads(cp.stdout)
        ours = [f for f in audit["findings"] if f["check"] == "acceptance.drain"]
        assert [f["node_list"] for f in ours] == [[throttled]] and ours[0]["details"]["owner"] == "gpuclust"
        drains = {f["nodes"]: f["details"]["reason"] for f in audit["findings"] if f["check"] == "node.drain"}
        assert drains[admin] == ADMIN_REASON

        # node-status (what the NHC check runs): FAILED for the throttled node
        cp = accept.gpuclust("accept", "node-status", throttled)
        assert cp.returncode == 1 and cp.stdout.startswith("FAILED:"), cp.stdout + cp.stderr

        # throttle lifted: re-test on the three usable nodes (the admin's stays drained), then --drain resumes
        cp = accept.gpuclust("accept", "submit", "pairwise", "-p", "gpu", "-N", "3", "--gpus-per-node", "1",
                             "-A", "ml", "--comment", "team=ml project=acceptance", "--json", "--retest-drained",
                             "--set", accept.glob, "--set", "ACCEPT_PAIR_BUDGET=2", timeout=300)
        assert cp.returncode == 0, cp.stderr
        retest = str(json.loads(cp.stdout)["jobs"][0]["job_id"])
        assert f"resumed {throttled}" in cp.stderr and f"drained {throttled} again" in cp.stderr
        assert nodes()[throttled].is_drain  # drained again while the re-test runs
        assert accept.finish(retest, timeout=400) == "COMPLETED", accept.log(retest)
        res = accept.result("pairwise", retest)
        assert throttled in res.nodes and admin not in res.nodes and res.job.passed
        code, doc = report_drain(accept)  # the nightly form: latest result of each kind
        assert actions(doc).get(throttled) == "resume", doc["drain"]
        # the healthy re-test drains nobody (a loaded host's spurious retransmits once drained node4 here)
        assert [n for n, a in actions(doc).items() if a == "drain"] == [], doc["drain"]
        now = nodes()
        assert not now[throttled].is_drain
        assert now[admin].is_drain and now[admin].reason == ADMIN_REASON
        cp = accept.gpuclust("accept", "node-status", throttled)
        assert cp.returncode == 0 and cp.stdout.startswith("OK:"), cp.stdout + cp.stderr
    finally:  # the lab is shared by the next tests: no node left drained, gpuclust's or the admin's
        from gpuclust.accept.drain import is_ours

        leftover = {n for n, rec in nodes().items() if is_ours(rec)}
        for node in sorted({throttled, admin} | leftover):
            run_cmd(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


def test_topology_announced_vs_seen(accept: Accept, tmp_path: Path) -> None:
    """The lab config announces 4 GPUs and one 10000 Mb/s NIC per node (the veth): the job records what it saw,
    the report keeps the comparison; a config announcing 25000 Mb/s makes every node CRITICAL."""
    job = accept.submit("allreduce", 2, "ACCEPT_MAX_SIZE=64K", "ACCEPT_ITERS=2", "ACCEPT_WARMUP=0")
    assert accept.finish(job) == "COMPLETED", accept.log(job)
    res = accept.result("allreduce", job)
    topo = [r.extra["topology"] for r in res.ranks if "topology" in r.extra]
    assert len(topo) == 2
    for t in topo:
        assert t["nics"] == {"eth0": 10000} and t["nic_speed_source"] == "ethtool"
    code, doc = accept.report(job)
    assert code in (0, 1), doc  # WARNING: a 64 KiB sweep is below the lab's busbw_min_size, not gated
    assert not [r for v in doc["nodes"].values() for r in v["reasons"] if r["check"] == "topology"], doc
    table = doc["topology"][job]
    for node in res.nodes:
        assert table[node]["match"] is True
        assert table[node]["seen"]["gpus_per_node"] == 4 and table[node]["seen"]["nic_speeds_mbps"] == {"eth0": 10000}
    text = accept.config.read_text().replace("nic_speed_mbps = 10000", "nic_speed_mbps = 25000")
    other = tmp_path / "site.conf"
    other.write_text(text)
    cp = accept.gpuclust("--config", str(other), "accept", "report", "--job", job, "--json")
    doc = json.loads(cp.stdout)
    assert cp.returncode == 2
    for node in res.nodes:
        [finding] = [r for r in doc["nodes"][node]["reasons"] if r["check"] == "topology"]
        assert "eth0 10000 Mb/s, 25000 Mb/s announced" in finding["message"]
