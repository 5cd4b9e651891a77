"""The policy's GPU count is the MOST Slurm may allocate a job, checked against real Slurm.

Oracle: tests/data/policy/alloc-probe-<version>.json, recorded on the lab by record_alloc.py: for each sbatch line,
the job_desc slurmctld handed job_submit.lua and the GPUs Slurm then allocated the running job (AllocTRES).
The engine's bound must never be below a real allocation, on every recorded version; the Lua engine and the
Python twin must give the same bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import INFINITE, Evaluator, gpu_request
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import render_lua
from gpuclust.policy.sbatch import NO_VAL, NO_VAL16

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
RECORDINGS = sorted(DATA.glob("alloc-probe-*.json"))
LAB_GPUS_PER_NODE = 4  # gpu:h100:4 on every lab node


def _cases():
    for path in RECORDINGS:
        data = json.loads(path.read_text())
        for case in data["cases"]:
            if case.get("job_desc") and "gpus" in case.get("alloc", {}):
                yield pytest.param(case, id=f"{path.stem}:{' '.join(case['args'])}")


def _bound(job) -> float:
    req = gpu_request(job)
    total = req.total
    if req.exclusive:
        total = max(total, req.nodes * LAB_GPUS_PER_NODE)
    return total


@pytest.mark.parametrize("case", list(_cases()))
def test_bound_is_never_below_what_slurm_allocated(case):
    job = case["job_desc"]
    assert gpu_request(job).bad is None, case  # every form the version sends is read (24.11: gres/gpu=1, cpu=2)
    assert gpu_request(job).why is None, case
    assert _bound(job) >= case["alloc"]["gpus"], (case["args"], _bound(job), case["alloc"])


def test_recordings_exist_and_cover_the_multiplying_fields():
    assert RECORDINGS
    seen = set()
    for path in RECORDINGS:
        for case in json.loads(path.read_text())["cases"]:
            seen.update(a.split("=")[0] for a in case["args"] if a.startswith("-"))
    assert {"-N", "-n", "--ntasks-per-node", "--gpus-per-task", "--gpus-per-socket", "--sockets-per-node",
            "--ntasks-per-socket", "--ntasks-per-gpu", "--exclusive", "-G", "--gpus", "--gres", "--array"} <= seen


@pytest.fixture(scope="module")
def engines():
    policy = compile_policy(load_config(str(Path(__file__).resolve().parents[2] / "site.example.conf")))
    return LuaPolicy(render_lua(policy)), Evaluator(policy)


LABELS = "team=ops,project=x"


def _job(**fields):
    job = {"user_name": "alice", "account": "ops", "partition": "gpu", "comment": LABELS, "min_nodes": NO_VAL,
           "max_nodes": NO_VAL, "num_tasks": NO_VAL, "ntasks_per_node": NO_VAL16, "sockets_per_node": NO_VAL16,
           "time_limit": 60}
    job.update(fields)
    return job


# site.example.conf: partition gpu allows 16 GPUs per job, 4 per node.
CASES = {
    "issue-13 node range -N 4-64 x 4/node": (_job(tres_per_node="gres:gpu:h100:4", min_nodes=4, max_nodes=64), 256),
    "-N 4 exact": (_job(tres_per_node="gres:gpu:h100:4", min_nodes=4, max_nodes=4), 16),
    "no -N, 8 tasks may spread over 8 nodes": (_job(tres_per_node="gres:gpu:h100:4", num_tasks=8), 32),
    "24.11 per-task '=' form with cpus": (_job(tres_per_task="cpu=2,gres/gpu:h100=1", num_tasks=8), 8),
    "24.11 per-node slash form": (_job(tres_per_node="gres/gpu:h100:2", min_nodes=2, max_nodes=3), 6),
    "per-task with ntasks-per-node over a node range": (
        _job(tres_per_task="gres:gpu:h100:1", num_tasks=2, ntasks_per_node=2, min_nodes=1, max_nodes=4), 8),
    "per-socket": (_job(tres_per_socket="gres:gpu:h100:1", sockets_per_node=2, min_nodes=2, max_nodes=2), 4),
    "ntasks-per-gpu without a GPU field": (_job(ntasks_per_tres=2, num_tasks=5), 3),
    "ntasks-per-socket x sockets": (
        _job(tres_per_task="gres/gpu:h100=1", ntasks_per_socket=3, sockets_per_node=2, min_nodes=2, max_nodes=2), 12),
    "per-job is exact": (_job(tres_per_job="gres/gpu:h100:16", min_nodes=1, max_nodes=16), 16),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bound_cases(engines, name):
    job, expected = CASES[name]
    assert gpu_request(job).total == expected
    lua, py = engines
    verdict = py.submit(job)
    res = lua.submit(job)
    assert res.rc == verdict.rc and res.message == verdict.message
    if expected > 16:
        assert verdict.rule == "partition_max_gpus" and f"job asks for {expected} GPUs at most" in verdict.message


@pytest.mark.parametrize("job, why", [
    (_job(tres_per_node="gres:gpu:h100:1", min_nodes=4, max_nodes=INFINITE), "max_nodes is unlimited"),
    (_job(tres_per_socket="gres:gpu:h100:1", min_nodes=1, max_nodes=1), "--gpus-per-socket needs --sockets-per-node"),
])
def test_unbounded_requests_are_rejected_with_a_clear_message(engines, job, why):
    lua, py = engines
    verdict = py.submit(job)
    assert verdict.rule == "gpu_unbounded" and why in verdict.message
    assert lua.submit(job).message == verdict.message


def test_exclusive_counts_whole_nodes(engines):
    lua, py = engines
    job = _job(tres_per_node="gres:gpu:h100:1", min_nodes=5, max_nodes=5, shared=0)  # 5 nodes x 4 GPUs = 20 > 16
    verdict = py.submit(job)
    assert verdict.rule == "partition_max_gpus" and "job asks for 20 GPUs" in verdict.message
    assert lua.submit(job).message == verdict.message
    assert py.submit({**job, "min_nodes": 4, "max_nodes": 4}).accepted
    assert py.submit({**job, "shared": 2}).accepted  # --exclusive=user: only what was asked (5 GPUs)


def test_policy_check_cli_rejects_the_issue_13_node_range(tmp_path):
    from click.testing import CliRunner

    from gpuclust.cli.main import cli

    conf = Path(__file__).resolve().parents[2] / "site.example.conf"
    res = CliRunner().invoke(cli, ["--config", str(conf), "policy", "check", "--user", "alice", "--", "-A", "ops",
                                    "-p", "gpu", "--gres=gpu:h100:4", "-N", "4-64", "--comment", "team=ops,project=x"])
    assert res.exit_code == 1 and "partition_max_gpus" in res.output and "256 GPUs" in res.output, res.output
