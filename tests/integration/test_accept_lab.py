"""Acceptance jobs on the real Slurm lab (CPU, gloo): all_reduce on 4 nodes, a real slow-link fault found by
the pairwise sweep, a checkpoint restored on another node, and a node whose declared GRES differs from what
its jobs see. Sizes are small so the whole module runs in a few minutes on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpuclust.accept import results as R
from tests.integration.labutil import REPO, lab_exec, run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm

SMALL = ["ACCEPT_MAX_SIZE=16M", "ACCEPT_ITERS=3", "ACCEPT_WARMUP=1"]


class Accept:
    """The lab, a private results dir and a site config pointing at it; runs `gpuclust accept ...`."""

    def __init__(self, lab: Any, root: Path):
        self.lab = lab
        self.results = root / "results"
        self.results.mkdir(parents=True)
        self.config = root / "site.conf"
        text = (REPO / "tests" / "slurm_lab" / "lab-site.conf").read_text()
        text = "\n".join(f"results_dir = {self.results}" if line.startswith("results_dir") else line
                         for line in text.splitlines())
        self.config.write_text(text + "\n")
        state = lab.env["SLURM_LAB_STATE"]
        self.glob = f"ACCEPT_GPU_DEVICE_GLOB={state}/dev/nvidia[0-9]*"
        self.local = f"ACCEPT_LOCAL_DIR={state}/nodes/%n/tmp"

    def gpuclust(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, GPUCLUST_CONFIG=str(self.config))
        return subprocess.run([sys.executable, "-m", "gpuclust.cli.main", *args], capture_output=True, text=True,
                              env=env, timeout=timeout, stdin=subprocess.DEVNULL)

    def submit(self, kind: str, nodes: int, *settings: str) -> str:
        args = ["accept", "submit", kind, "-p", "gpu", "-N", str(nodes), "--gpus-per-node", "1", "-A", "ml",
                "--comment", "team=ml project=acceptance", "--json"]
        for item in (self.glob, *settings):
            args += ["--set", item]
        cp = self.gpuclust(*args)
        assert cp.returncode == 0, cp.stderr + cp.stdout
        return str(json.loads(cp.stdout)["jobs"][0]["job_id"])

    def finish(self, job: str, timeout: float = 240) -> str:
        state = wait_job_done(job, timeout=timeout)
        return state

    def log(self, job: str) -> str:
        logs = list((self.results / "logs").glob(f"*-{job}.out"))
        return logs[0].read_text() if logs else "(no log)"

    def result(self, kind: str, job: str) -> R.JobResult:
        [res] = [r for r in R.load_results(self.results, job=job) if r.kind == kind]
        return res

    def report(self, job: str) -> tuple[int, dict[str, Any]]:
        cp = self.gpuclust("accept", "report", "--job", job, "--json")
        return cp.returncode, json.loads(cp.stdout)


@pytest.fixture(scope="module")
def accept(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accept]:
    root = tmp_path_factory.mktemp("accept")
    os.chmod(root, 0o755)
    yield Accept(slurm_lab, root)


def outlier_nodes(doc: dict[str, Any]) -> list[str]:
    return sorted(n for n, v in doc["nodes"].items() if any(r["check"] == "outlier" for r in v["reasons"]))


def test_allreduce_four_nodes(accept: Accept) -> None:
    job = accept.submit("allreduce", 4, *SMALL)
    assert accept.finish(job) == "COMPLETED", accept.log(job)
    res = accept.result("allreduce", job)
    assert res.job.passed and res.job.backend == "gloo" and res.job.world_size == 4
    assert sorted(r.node for r in res.ranks) == ["node1", "node2", "node3", "node4"]
    assert [s.size for s in res.sweep][-1] == 16 * 1024**2
    assert all(s.wrong == 0 for s in res.sweep) and res.sweep[-1].busbw_gbps > 0
    assert res.sweep[-1].busbw_gbps == pytest.approx(res.sweep[-1].algbw_gbps * 1.5)
    for r in res.ranks:  # per-rank capture: what Slurm bound and declared
        assert r.gpus_bound == 1 and r.cuda_visible_devices == "0" and r.slurm_job_gpus is not None
        assert r.declared_gres == "gpu:h100:1(IDX:0)" and r.devices_found == 4 and r.versions.torch
    assert res.job.node_gres == {n: "gpu:h100:4" for n in ("node1", "node2", "node3", "node4")}
    code, doc = accept.report(job)
    assert code == 0, doc
    assert {v["status"] for v in doc["nodes"].values()} == {"OK"}


def test_plain_sbatch_works(accept: Accept) -> None:
    """No gpuclust in the submission path: sbatch TEMPLATE with parameters in the environment."""
    env = dict(os.environ, GPUCLUST_PYTHON=sys.executable, ACCEPT_RESULTS_DIR=str(accept.results),
               ACCEPT_MAX_SIZE="64K", ACCEPT_ITERS="2", ACCEPT_WARMUP="0")
    job = submit(["-N2", "-A", "ml", "-o", str(accept.results / "logs" / "plain-%j.out"),
                  str(REPO / "sbatch_templates" / "allreduce.sbatch")], env=env)
    assert wait_job_done(job, timeout=120) == "COMPLETED", accept.log(job)
    res = accept.result("allreduce", job)
    assert res.job.passed and len(res.ranks) == 2 and res.sweep[-1].size == 64 * 1024


def test_pairwise_names_exactly_the_throttled_node_then_clears(accept: Accept) -> None:
    name = accept.lab.name
    lab_exec("node3", ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit", "burst", "64kbit",
                       "latency", "400ms"], name=name)
    try:
        job = accept.submit("pairwise", 4, "ACCEPT_PAIR_BUDGET=2")
        state = accept.finish(job, timeout=300)
    finally:
        lab_exec("node3", ["tc", "qdisc", "del", "dev", "eth0", "root"], name=name, check=False)
    assert state == "FAILED", accept.log(job)  # the job itself exits 1 when it names an outlier
    res = accept.result("pairwise", job)
    assert res.job.failed_nodes == ("node3",) and len(res.pairs) == 6
    code, doc = accept.report(job)
    assert code == 2
    assert outlier_nodes(doc) == ["node3"]
    assert doc["nodes"]["node3"]["status"] == "CRITICAL"
    assert all(doc["nodes"][n]["status"] == "OK" for n in ("node1", "node2", "node4")), doc
    # the fault removed, the same sweep is clean
    qdisc = lab_exec("node3", ["tc", "qdisc", "show", "dev", "eth0"], name=name).stdout
    assert "tbf" not in qdisc
    job = accept.submit("pairwise", 4, "ACCEPT_PAIR_BUDGET=2")
    assert accept.finish(job, timeout=300) == "COMPLETED", accept.log(job)
    code, doc = accept.report(job)
    assert outlier_nodes(doc) == [] and code == 0, doc


@contextmanager
def cpu_load(workers: int = 3, limit_s: int = 900) -> Iterator[None]:
    """Busy-loop Python processes for the duration (CPU contention on the lab's shared cores). Each one also
    ends by itself after limit_s, so nothing outlives the test even if it is killed."""
    code = f"import time\nend = time.monotonic() + {limit_s}\nwhile time.monotonic() < end:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL) for _ in range(workers)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(timeout=30)


def test_pairwise_under_cpu_load_one_verdict(accept: Accept) -> None:
    """With the CPUs loaded, the tbf-throttled node (GPUCLUST_THROTTLE_NODE, default node2) is named alone, by
    the job and by `accept report` alike; the same sweep without the throttle names nobody."""
    name = accept.lab.name
    node = os.environ.get("GPUCLUST_THROTTLE_NODE", "node2")
    with cpu_load():
        lab_exec(node, ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "50mbit", "burst", "64kbit",
                        "latency", "400ms"], name=name)
        try:
            job = accept.submit("pairwise", 4, "ACCEPT_PAIR_BUDGET=2")
            state = accept.finish(job, timeout=400)
        finally:
            lab_exec(node, ["tc", "qdisc", "del", "dev", "eth0", "root"], name=name, check=False)
        assert state == "FAILED", accept.log(job)
        res = accept.result("pairwise", job)
        assert res.job.failed_nodes == (node,), (res.job.reasons, accept.log(job))
        assert all(len(p.attempts) == 2 for p in res.pairs if node in p.nodes)  # confirmed before naming
        code, doc = accept.report(job)
        assert code == 2 and outlier_nodes(doc) == [node], doc
        assert all(v["status"] == "OK" for n, v in doc["nodes"].items() if n != node), doc
        job = accept.submit("pairwise", 4, "ACCEPT_PAIR_BUDGET=2")
        assert accept.finish(job, timeout=400) == "COMPLETED", accept.log(job)
    res = accept.result("pairwise", job)
    assert res.job.failed_nodes == () and res.job.passed, res.job.reasons
    code, doc = accept.report(job)
    # the load slows the whole run below the unloaded history: the report may say so once, naming no node
    assert outlier_nodes(doc) == [] and all(v["status"] == "OK" for v in doc["nodes"].values()), doc
    warned = [r for r in doc["findings"] if r["status"] != "OK"]
    assert all(r["check"] == "baseline" and not r["node_list"] for r in warned), doc
    assert code == (1 if warned else 0), doc


def test_storage_restores_on_another_node(accept: Accept) -> None:
    job = accept.submit("storage", 2, accept.local, "ACCEPT_STAGE_SIZE=16M", "ACCEPT_CKPT_SIZE=16M",
                        "ACCEPT_AGG_SIZE=8M")
    assert accept.finish(job) == "COMPLETED", accept.log(job)
    res = accept.result("storage", job)
    assert res.job.passed, res.job.reasons
    by = {r.metric: r for r in res.storage}
    assert set(by) == set(R.STORAGE_METRICS)
    assert by["checkpoint_read"].write_node != by["checkpoint_read"].read_node
    assert by["checkpoint_read"].ok and by["dcp_load"].ok and by["aggregate_read"].ok
    assert {r.node for r in res.storage if r.metric == "staging"} == set(res.nodes)
    assert by["aggregate_write"].ranks == 2  # mpi4py saw SLURM_NTASKS ranks
    mpi = res.job.extra["mpi"]  # the plugin srun offered (26.05: pmi2 only) and the library that ran with it
    assert mpi["plugin"] in mpi["listed"] and mpi["world_size"] == 2, mpi
    assert (mpi["plugin"], mpi["abi"]) in {("pmix", "openmpi"), ("pmi2", "mpich")}, mpi
    assert mpi["library"] and mpi["launcher"] == f"srun --mpi={mpi['plugin']}", mpi
    code, doc = accept.report(job)
    assert code == 0, doc


def _set_node2_gpus(conf_dir: Path, count: int, original: dict[str, str]) -> None:
    slurm_conf, gres_conf = conf_dir / "slurm.conf", conf_dir / "gres.conf"
    lines = []
    for line in original["slurm.conf"].splitlines():
        if line.startswith("NodeName=node2 "):
            line = line.replace("Gres=gpu:h100:4", f"Gres=gpu:h100:{count}")
        lines.append(line)
    slurm_conf.write_text("\n".join(lines) + "\n")
    lines = []
    for line in original["gres.conf"].splitlines():
        if line.startswith("NodeName=node2 "):
            line = line.replace("nvidia[0-3]", f"nvidia[0-{count - 1}]")
        lines.append(line)
    gres_conf.write_text("\n".join(lines) + "\n")


def test_declared_gres_differs_from_what_jobs_see(accept: Accept) -> None:
    """node2 declares gpu:h100:2 in Slurm while the node has 4 GPU device files: flagged, and only node2."""
    conf_dir = Path(accept.lab.conf_dir)
    original = {name: (conf_dir / name).read_text() for name in ("slurm.conf", "gres.conf")}
    lab = [str(REPO / "tests" / "slurm_lab" / "slurm-lab"), "--name", accept.lab.name, "restart"]
    try:
        _set_node2_gpus(conf_dir, 2, original)
        run_cmd(lab, timeout=300)
        job = accept.submit("allreduce", 4, "ACCEPT_MAX_SIZE=64K", "ACCEPT_ITERS=2", "ACCEPT_WARMUP=0")
        assert accept.finish(job) == "COMPLETED", accept.log(job)
    finally:
        for name, text in original.items():
            (conf_dir / name).write_text(text)
        run_cmd(lab, timeout=300)
    res = accept.result("allreduce", job)
    assert res.job.node_gres["node2"] == "gpu:h100:2"
    code, doc = accept.report(job)
    assert code == 2
    flagged = sorted(n for n, v in doc["nodes"].items() if any(r["check"] == "gres" for r in v["reasons"]))
    assert flagged == ["node2"], doc
    text = " ".join(r["message"] for r in doc["nodes"]["node2"]["reasons"])
    assert "the node has 4 GPU devices" in text
