"""engine.lua remembers parsed GPU strings and comments that passed the label rules (issue 18). The memos must be
invisible: the same verdict on a repeat, on a miss after the memo is dropped at its bound, and in any order."""

from __future__ import annotations

from pathlib import Path

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import render_lua
from gpuclust.policy.sbatch import job_desc_from_options

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"


def _engines():
    policy = compile_policy(load_config(str(DATA / "diff-site.conf")))
    return LuaPolicy(render_lua(policy)), Evaluator(policy)


def _same(lua, py, job):
    got, want = lua.submit(job), py.submit(job)
    assert (got.rc, got.message) == (want.rc, None if want.accepted else want.message), job
    return want


JOBS = [
    ["-A", "physics", "-p", "gpu", "--gres=gpu:h100:2", "--comment", "team=physics project=proj-1 cost=c1"],
    ["-A", "physics", "-p", "gpu", "--gres=gpu:2", "--comment", "team=physics project=proj-1 cost=c1"],
    ["-A", "physics", "-p", "gpu", "--gres=gpu:a100:2", "--comment", "team=physics project=proj-1 cost=c1"],
    ["-A", "physics", "-p", "gpu", "--gpus=abc", "--comment", "team=physics"],
    ["-A", "physics", "-p", "gpu", "--gres=gpu:h100:2", "--gpus-per-task=h100:1", "-n", "4",
     "--comment", "team=physics project=proj-1 cost=c1"],
    ["-A", "physics", "-p", "gpu", "--gres=gpu:h100:2", "--comment", "team=nobody project=proj-1"],
]


def test_repeats_and_orders_agree_with_python():
    lua, py = _engines()
    jobs = [job_desc_from_options(a, user="alice", default_account="physics") for a in JOBS]
    for job in jobs + jobs[::-1] + jobs:  # first sight (miss), then repeats (hits) in another order
        _same(lua, py, job)


def test_memo_bound_drops_and_refills():
    lua, py = _engines()
    first = job_desc_from_options(JOBS[0], user="alice", default_account="physics")
    _same(lua, py, first)
    for i in range(2100):  # more distinct GPU strings and comments than the memo keeps (1024)
        job = dict(first, tres_per_node=f"gres:gpu:h100:{i % 9}", comment=f"team=physics project=proj-{i} cost=c1")
        if i % 97 == 0:
            _same(lua, py, job)
        else:
            lua.submit(job)
    for args in JOBS:
        _same(lua, py, job_desc_from_options(args, user="alice", default_account="physics"))
