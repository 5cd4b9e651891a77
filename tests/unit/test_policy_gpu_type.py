"""partition_gpu_type (issue 13): a typed GPU request whose type the partition does not have is refused.

Real sbatch and slurmctld (22.05, 24.11, 26.05; tests/data/policy/sbatch-grammar-*.json) take `--gres=gpu:-1`,
`--gpus=-1` and `--gpus=abc` as ONE GPU of a type named "-1" / "abc"; slurmctld queues such a job when it is held
(and refuses it only later, at node selection, when it is not), and it can never run. The rule applies where the
site config gives the partition's `gpu_type`; both engines decide it alike (Lua via lupa, and the Python twin).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.config import load_config, parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import RC_INVALID_GRES, Evaluator, gpu_request, scan_gpus
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import render_lua
from gpuclust.policy.sbatch import job_desc_from_options

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = str(REPO / "site.example.conf")
DATA = REPO / "tests" / "data" / "policy"
LABELS = "team=ops,project=x"


@pytest.fixture(scope="module")
def engines():
    policy = compile_policy(load_config(EXAMPLE))
    return LuaPolicy(render_lua(policy)), Evaluator(policy)


def _both(engines, job):
    lua, py = engines
    verdict = py.submit(job)
    got = lua.submit(job)
    assert int(got.rc) == verdict.rc, (job, got, verdict)
    assert (got.message if not verdict.accepted else None) == verdict.message, (job, got, verdict)
    return verdict


def _job(**fields):
    return {"user_name": "alice", "account": "ops", "partition": "gpu", "comment": LABELS, **fields}


def _msg(asked: str) -> str:
    return (f"gpuclust policy [partition_gpu_type]: partition gpu has no GPUs of type '{asked}' (its GPU types: h100); "
            "use --gres=gpu:<type>:<count> or --gpus=<type>:<count> with one of those types")


def test_the_issue_line_is_rejected_by_policy_check():
    res = CliRunner().invoke(cli, ["--config", EXAMPLE, "policy", "check", "--user", "alice", "--", "-A", "ops", "-p",
                                   "gpu", "--gres=gpu:-1", "--comment", LABELS])
    assert res.exit_code == 1, res.output
    assert "[partition_gpu_type]" in res.output and "rc=2072" in res.output and "'-1'" in res.output
    assert "h100" in res.output


@pytest.mark.parametrize(("argv", "asked"), [
    (["--gres=gpu:-1"], "-1"),
    (["--gpus=-1"], "-1"),
    (["--gpus=abc"], "abc"),
    (["-G", "abc"], "abc"),
    (["--gres=gpu:abc:2"], "abc"),
    (["--gres=gpu:a100:2"], "a100"),  # a real type, but not this partition's
    (["--gpus-per-node=a100:1"], "a100"),
    (["--gpus-per-task=a100:1", "-n", "2"], "a100"),
    (["--gres=gpu:H100:1"], "H100"),  # slurmctld matches types case-sensitively (the lab refuses gpu:H100 on h100)
    (["--gres=gpu:h100:1,gpu:-1"], "-1"),  # mixed typed items: any foreign type rejects
    (["--gres=gpu:h100:1", "--gpus=a100:1"], "a100"),
])
def test_foreign_types_rejected_from_sbatch_lines(engines, argv, asked):
    job = job_desc_from_options(["-A", "ops", "-p", "gpu", "--comment", LABELS, *argv], user="alice")
    verdict = _both(engines, job)
    assert verdict.rule == "partition_gpu_type" and verdict.rc == RC_INVALID_GRES == 2072
    assert verdict.message == _msg(asked)


@pytest.mark.parametrize("field", ["tres_per_node", "gres", "tres_per_job", "tres_per_socket", "tres_per_task"])
@pytest.mark.parametrize(("value", "asked"), [
    ("gres:gpu:-1", "-1"),  # 22.05
    ("gres:gpu:abc", "abc"),
    ("gres:gpu:a100:2", "a100"),
    ("gres/gpu:-1", "-1"),  # 24.11 / 26.05
    ("gres/gpu:abc=1", "abc"),
    ("gres/gpu:a100:2", "a100"),
    ("cpu=2,gres/gpu:a100=1", "a100"),
    ("gpu:l40:1", "l40"),  # bare (modify requests)
    ("gres:gpu:h100:1,gres:gpu:-1", "-1"),
    ("gres/gpu:h100=1,gres/gpu:abc=1,gres/gpu:a100=1", "abc"),  # the first foreign type is named
])
def test_foreign_types_in_every_field_and_form(engines, field, value, asked):
    job = _job(**{field: value, "min_nodes": 1, "num_tasks": 1, "sockets_per_node": 1, "time_limit": 10})
    verdict = _both(engines, job)
    assert verdict.rule == "partition_gpu_type" and verdict.message == _msg(asked)


@pytest.mark.parametrize("value", ["gres:gpu:h100:2", "gres/gpu:h100:2", "gres/gpu:h100=1", "gres:gpu:h100",
                                   "gres:gpu:h100:1,gres:gpu:h100:1", "gres/shard:x:1,gres/gpu:h100=1"])
def test_the_partitions_own_type_is_accepted(engines, value):
    verdict = _both(engines, _job(tres_per_node=value, min_nodes=1, time_limit=10))
    assert verdict.accepted, verdict


def test_scan_gpus_reports_each_type_once_in_order():
    types: list[str] = []
    assert scan_gpus("gres/gpu:h100=1,gres/gpu:-1,gres:gpu:h100:2,gpu:abc:1,gpu:2,shard:x:1", types) == (7.0, 2.0, None)
    assert types == ["h100", "-1", "abc"]
    assert scan_gpus("gres:gpu:2") == (2.0, 2.0, None)  # types is optional
    req = gpu_request({"tres_per_job": "gres:gpu:a100:1", "tres_per_node": "gres:gpu:h100:1",
                       "tres_per_task": "gres:gpu:a100:1", "num_tasks": 2})
    assert req.types == ["a100", "h100"]


def _policy(text: str) -> tuple[LuaPolicy, Evaluator]:
    policy = compile_policy(parse_config(text, "t.conf"))
    return LuaPolicy(render_lua(policy)), Evaluator(policy)


def test_no_gpu_type_in_the_config_means_no_check():
    eng = _policy("[site]\ncluster_name = t\n[partition gpu]\nrequire_gpu = yes\n[partition b]\ngpu_type = a100\n")
    assert _both(eng, _job(tres_per_job="gres:gpu:abc")).accepted
    # every partition of a -p list is checked, as for the other partition rules
    verdict = _both(eng, _job(partition="gpu,b", tres_per_job="gres:gpu:abc"))
    assert verdict.rule == "partition_gpu_type" and "partition b has no GPUs of type 'abc' (its GPU types: a100)" in (
        verdict.message or "")


def test_default_partition_and_untyped_requests():
    eng = _policy("[site]\ncluster_name = t\n[partition gpu]\ngpu_type = h100\n[policy]\ndefault_partition = gpu\n")
    verdict = _both(eng, {"user_name": "alice", "tres_per_job": "gres:gpu:-1"})
    assert verdict.rule == "partition_gpu_type"
    assert _both(eng, {"user_name": "alice", "tres_per_job": "gres:gpu:2"}).accepted  # untyped: another rule's job


def test_modify_is_checked_the_same_way(engines):
    lua, py = engines
    rec = _job(tres_per_node="gres:gpu:h100:1", min_nodes=1, time_limit=10)
    for desc in ({"tres_per_node": "gpu:-1"}, {"tres_per_job": "gres/gpu:abc=1"},
                 {"tres_per_node": "gres/gpu:a100=1"}):
        verdict = py.modify(desc, rec, 1000)
        got = lua.modify(desc, rec, 1000)
        assert verdict.rule == "partition_gpu_type" and int(got.rc) == verdict.rc and got.message == verdict.message
        assert py.modify(desc, rec, 0).accepted  # root is never blocked
    assert py.modify({"comment": "team=ml,project=y"}, rec, 1000).accepted


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_recorded_job_descs_of_real_slurmctld(engines, version):
    """The job_desc each real slurmctld handed job_submit.lua for `--gres=gpu:-1`, `--gpus=-1` and `--gpus=abc`
    (it queued every one of them, held): with an account, labels and the gpu partition, both engines refuse it."""
    cases = json.loads((DATA / f"sbatch-grammar-{version}.json").read_text())["cases"]
    seen = set()
    for case in cases:
        argv = case["argv"]
        bad = [a for a in argv if a in ("--gres=gpu:-1", "--gpus=-1", "--gpus=abc")]
        if len(argv) != 3 or len(bad) != 1 or not case.get("queued"):
            continue
        asked = bad[0].rsplit(":", 1)[-1].rsplit("=", 1)[-1]
        desc = {k: v for k, v in case["job_desc"].items() if v is not None}
        verdict = _both(engines, {**desc, "user_name": "alice", "account": "ops", "partition": "gpu",
                                  "comment": LABELS})
        assert verdict.rule == "partition_gpu_type" and verdict.message == _msg(asked), (version, argv)
        seen.add(bad[0])
    assert seen == {"--gres=gpu:-1", "--gpus=-1", "--gpus=abc"}, seen
