"""`gpuclust audit partition` on the real Slurm lab. Every test that changes the lab restores it in `finally`.

The acceptance store is a temporary results_dir holding passing results for node[1-4] written with
gpuclust.accept.results (the acceptance jobs themselves are the accept plane's to prove), so the clean lab
audits OK and each injected fault is the only thing reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuclust.accept.results import JobRecord, JobResult, RankRecord, Versions, write_result
from tests.integration.labutil import REPO, SLURM_LAB, run_cmd, wait_job_done

pytestmark = pytest.mark.slurm

SITE_CONF = str(REPO / "tests" / "data" / "audit" / "site-lab.conf")
NODES = ["node1", "node2", "node3", "node4"]


def cluster_name() -> str:
    for line in run_cmd(["scontrol", "show", "config"]).stdout.splitlines():
        if line.startswith("ClusterName"):
            return line.split("=", 1)[1].strip()
    raise AssertionError("no ClusterName")


@pytest.fixture(scope="module")
def results_dir(slurm_lab, tmp_path_factory) -> str:
    rdir = tmp_path_factory.mktemp("audit-results")
    now = datetime.now(timezone.utc)
    for job_id, kind in (("9001", "allreduce"), ("9002", "storage")):
        job = JobRecord(job_id=job_id, kind=kind, cluster=cluster_name(), partition="gpu", nodes=tuple(NODES),
                        started=now - timedelta(hours=1, minutes=5), finished=now - timedelta(hours=1), passed=True)
        ranks = tuple(RankRecord(job_id=job_id, kind=kind, rank=i, local_rank=0, world_size=4, hostname=n, node=n,
                                 versions=Versions(torch="2.13.0")) for i, n in enumerate(NODES))
        write_result(rdir, JobResult("", job, ranks))
    return str(rdir)


def audit(results_dir: str, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    argv = [sys.executable, "-m", "gpuclust.cli.main", "--config", SITE_CONF, "audit", "partition", "gpu",
            "--json", "--results-dir", results_dir, *extra]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert cp.stdout, cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def problems(doc: dict) -> list[tuple[str, str, str]]:
    return [(f["check"], f["severity"], f["nodes"]) for f in doc["findings"] if f["severity"] != "OK"]


def wait_until_clean(results_dir: str, tries: int = 60) -> dict:
    """After a restart nodes answer late (IDLE* for a few seconds): poll the audit until it settles."""
    for _ in range(tries):
        code, doc = audit(results_dir)
        if code == 0:
            return doc
        time.sleep(1)
    raise AssertionError(f"lab did not audit clean again: {problems(doc)}")


def test_clean_partition_exits_0(results_dir):
    doc = wait_until_clean(results_dir)
    assert doc["status"] == "OK" and doc["exit_code"] == 0
    assert sorted(doc["nodes"]) == NODES
    for source in ("text", "json"):  # both node sources on the live cluster
        code, again = audit(results_dir, "--source", source)
        assert code == 0, problems(again)


def test_long_drain_reason_reported_in_full(results_dir):
    reason = "GPU 2 ECC double-bit errors, RMA opened, do not resume before swap"
    assert len(reason) > 20
    run_cmd(["scontrol", "update", "NodeName=node2", "State=DRAIN", f"Reason={reason}"])
    try:
        for source in ("text", "json"):
            code, doc = audit(results_dir, "--source", source)
            assert code == 1, problems(doc)
            drains = [f for f in doc["findings"] if f["check"] == "node.drain"]
            assert [(f["severity"], f["nodes"]) for f in drains] == [("WARNING", "node2")]
            assert reason in drains[0]["message"]
            assert drains[0]["details"]["reason"] == reason
            assert drains[0]["details"]["reason_user"] == "root"
            assert problems(doc) == [("node.drain", "WARNING", "node2")]
    finally:
        run_cmd(["scontrol", "update", "NodeName=node2", "State=RESUME"])
    wait_until_clean(results_dir)


def test_qos_gpu_limit_above_partition_total(results_dir):
    old = run_cmd(["sacctmgr", "-n", "-P", "show", "qos", "gpu-normal", "format=GrpTRES"]).stdout.strip()
    run_cmd(["sacctmgr", "-i", "modify", "qos", "gpu-normal", "set", "GrpTRES=gres/gpu=999"])
    try:
        code, doc = audit(results_dir)
        assert code == 1, problems(doc)
        limits = [f for f in doc["findings"] if f["check"] == "limits.gpu" and f["severity"] == "WARNING"]
        assert len(limits) == 1
        assert "QOS gpu-normal: GrpTRES gres/gpu=999 is above the 16 GPUs" in limits[0]["message"]
        assert problems(doc) == [("limits.gpu", "WARNING", "")]
    finally:
        restore = old if old else "gres/gpu=-1"
        run_cmd(["sacctmgr", "-i", "modify", "qos", "gpu-normal", "set", f"GrpTRES={restore}"])
    assert audit(results_dir)[0] == 0


def test_inhomogeneous_gres_names_node4(results_dir, slurm_lab):
    conf_dir = Path(slurm_lab.conf_dir)
    slurm_conf, gres_conf = conf_dir / "slurm.conf", conf_dir / "gres.conf"
    orig_slurm, orig_gres = slurm_conf.read_text(), gres_conf.read_text()

    def node4(text: str, old: str, new: str) -> str:
        lines = text.splitlines(keepends=True)
        hits = [i for i, line in enumerate(lines) if line.startswith("NodeName=node4 ") and old in line]
        assert len(hits) == 1, f"no single node4 line with {old!r}"
        lines[hits[0]] = lines[hits[0]].replace(old, new)
        return "".join(lines)

    def restart() -> None:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "restart"], timeout=300)

    try:
        slurm_conf.write_text(node4(orig_slurm, "Gres=gpu:h100:4", "Gres=gpu:h100:2"))
        gres_conf.write_text(node4(orig_gres, "nvidia[0-3]", "nvidia[0-1]"))
        restart()
        for _ in range(60):  # wait for node4 to register its new GRES and the others to answer
            code, doc = audit(results_dir)
            if doc["nodes"]["node4"]["gres"] == "gpu:h100:2" and not any(
                    f["check"] in ("node.down", "node.drain") for f in doc["findings"]):
                break
            time.sleep(1)
        assert code == 2, problems(doc)
        gres = [f for f in doc["findings"] if f["check"] == "homogeneity.gres" and f["severity"] == "CRITICAL"]
        assert [f["nodes"] for f in gres] == ["node4"]
        assert "gpu:h100:2 on node4, but node[1-3] (majority) have gpu:h100:4" in gres[0]["message"]
        assert ("config.gpus", "CRITICAL", "node4") in problems(doc)
    finally:
        slurm_conf.write_text(orig_slurm)
        gres_conf.write_text(orig_gres)
        restart()
    doc = wait_until_clean(results_dir)
    assert doc["nodes"]["node4"]["gres"] == "gpu:h100:4"


def test_unreachable_slurm_is_unknown(results_dir, slurm_lab, tmp_path):
    text = Path(slurm_lab.slurm_conf).read_text()
    # port 9 (discard) on the controller address: nothing listens, so scontrol fails fast with connect failure
    conf = tmp_path / "slurm.conf"
    conf.write_text("".join(("SlurmctldPort=9\n" if line.startswith("SlurmctldPort=") else line)
                            for line in text.splitlines(keepends=True)))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    code, doc = audit(results_dir, env=env)
    assert code == 3 and doc["status"] == "UNKNOWN"
    assert "Unable to contact slurm controller" in doc["findings"][0]["message"]


def test_real_acceptance_jobs_make_the_audit_fresh(slurm_lab, tmp_path):
    """End to end with the accept plane: real (small) all_reduce and storage jobs write the results store,
    and the audit reads it through gpuclust.accept.results."""
    rdir = tmp_path / "results"
    conf = tmp_path / "site.conf"
    conf.write_text(Path(SITE_CONF).read_text().replace("state_dir = /tmp/gpuclust-audit-test",
                                                         f"state_dir = {tmp_path}\nresults_dir = {rdir}"))
    env = {**os.environ, "GPUCLUST_CONFIG": str(conf)}
    gpuclust = [sys.executable, "-m", "gpuclust.cli.main"]
    common = ["-p", "gpu", "-N", "4", "-A", "ml", "--comment", "team=ml,project=audit"]
    jobs = []
    for kind, sets in (("allreduce", ["ACCEPT_MAX_SIZE=1M"]),
                       ("storage", ["ACCEPT_STAGE_SIZE=8M", "ACCEPT_CKPT_SIZE=8M", "ACCEPT_STORAGE_TESTS=staging,checkpoint"])):
        argv = [*gpuclust, "accept", "submit", kind, *common]
        for s in sets:
            argv += ["--set", s]
        jobs.append(run_cmd(argv, env=env, timeout=60).stdout.split()[-1])
    for job in jobs:
        assert wait_job_done(job, timeout=300) == "COMPLETED"
    code, doc = audit(str(rdir))
    accept = {(f["check"], f["severity"], f["nodes"]) for f in doc["findings"] if f["check"].startswith("acceptance")}
    assert ("acceptance.all_reduce", "OK", "node[1-4]") in accept
    assert ("acceptance.storage", "OK", "node[1-4]") in accept
    assert code == 0, problems(doc)
