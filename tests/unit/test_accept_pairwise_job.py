"""The pairwise job's own steps without Slurm: a real 2-rank gloo pair (two local processes, CPU torch) writes
its measurement with per-iteration samples; `suspects` plans the second measurements from the same judgement
the report uses; `collect` merges attempts (a planned one that never wrote counts as failed) and writes the
verdict the report then reaches too. No GPU here: the NCCL branch of run_pair (cuda device, synchronize) is
not reached; launch's CUDA helpers are covered with fakes in test_accept_launch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuclust.accept import launch, pairwise, verdict
from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.config import parse_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_one_real_pair_writes_samples(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    parts = tmp_path / "parts"
    port = _free_port()
    procs = []
    for rank, node in enumerate(("nodeA", "nodeB")):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "ACCEPT_", "MASTER_"))}
        env.update(SLURM_JOB_ID="42", SLURM_STEP_ID="3", SLURM_PROCID=str(rank), SLURM_NTASKS="2", SLURM_LOCALID="0",
                   SLURMD_NODENAME=node, SLURM_STEP_NODELIST="nodeA,nodeB", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), ACCEPT_BACKEND="gloo", ACCEPT_PAIR_SIZE="64K", ACCEPT_PAIR_ITERS="4",
                   ACCEPT_PAIR_BUDGET="10", ACCEPT_GPU_DEVICE_GLOB=str(tmp_path / "nvidia[0-9]*"))
        procs.append(subprocess.Popen([sys.executable, "-m", "gpuclust.accept.pairwise", "run", "--parts", str(parts),
                                       "--attempt", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    part = parts / pairwise.part_name("nodeA", "nodeB", 1)
    result, problems = R.parse_result_text(json.dumps(R.record_to_dict(pairwise._placeholder_job("42"))) + "\n"
                                           + part.read_text(), str(part))
    assert not problems and result is not None
    [pair] = result.pairs
    [attempt] = pair.attempts
    assert attempt.attempt == 1 and attempt.status == "ok" and pair.wrong == 0
    assert len(attempt.samples_gbps) == attempt.iters == pair.iters >= 1
    assert attempt.busbw_gbps == pair.busbw_gbps and all(s > 0 for s in attempt.samples_gbps)
    assert {r.node for r in result.ranks} == {"nodeA", "nodeB"}


def _part(parts: Path, a: str, b: str, attempt: int, busbw: float) -> None:
    rec = pairwise.pair_measurement("42", (a, b), 4 << 20, [4e6 / 1e9 / busbw] * 2, [4e6 / 1e9 / busbw] * 3, 0,
                                    attempt)
    parts.mkdir(parents=True, exist_ok=True)
    (parts / pairwise.part_name(a, b, attempt)).write_text(json.dumps(R.record_to_dict(rec)) + "\n")


def test_suspects_then_collect_one_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    parts, results = tmp_path / "parts", tmp_path / "results"
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("ACCEPT_RESULTS_DIR", str(results))
    monkeypatch.setattr(launch, "slurm_declared", lambda job, nodes: ({}, {}, []))
    nodes = ["node1", "node2", "node3", "node4"]
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if (a, b) != ("node1", "node4"):  # this step failed: no part file
                _part(parts, a, b, 1, 0.006 if "node3" in (a, b) else (0.05 if (a, b) == ("node2", "node4") else 0.9))
    assert pairwise.suspects(str(parts), "node[1-4]", 2) == 0
    planned = capsys.readouterr().out.split()
    flat = {tuple(p.split(",")) for line in planned for p in line.split()}
    # node3's pairs, and the failed one; node2-node4 is slow too, but with node3 out only 3 nodes are left,
    # too few to judge a link, so it is not measured again
    assert flat == {("node1", "node3"), ("node2", "node3"), ("node3", "node4"), ("node1", "node4")}
    for a, b in sorted(flat):
        if (a, b) != ("node1", "node4"):  # it fails again
            _part(parts, a, b, 2, 0.006)
    assert pairwise.collect(str(parts), "node[1-4]") == 1
    res = R.load_results(results)[0]
    by = {p.nodes: p for p in res.pairs}
    assert [a.status for a in by[("node1", "node4")].attempts] == ["failed", "failed"]
    assert [a.busbw_gbps for a in by[("node2", "node4")].attempts] == pytest.approx([0.05], rel=0.1)
    judged = verdict.judge(res.pairs)
    assert res.job.failed_nodes == judged.nodes == ("node3",)
    assert not res.job.passed  # node1-node4 never measured
    report = rep.evaluate(R.scan_results(results), parse_config("[site]\ncluster_name = x\nresults_dir = /x\n", "t"))
    assert rep.nodes_with(report, "outlier", rep.Nagios.CRITICAL) == ["node3"]
