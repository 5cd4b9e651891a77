"""The rendered Lua (lupa's runtimes, 22.05 `slurm` mock, field-restricted job_desc) and the Python evaluator
decide identically: same return code, same user message (refusal or warnings) and same slurm.log_info lines
(the gpuclust-policy-reject / -warn lines the report reads), on >= 10,000 hypothesis-generated jobs plus modify
requests under Lua 5.1 (what Debian's slurmctld links) and under Lua 5.4 (RHEL 9's), and fewer under 5.2, 5.3 and
LuaJIT; job_desc numbers are floats where the version makes them so (5.3+), as slurmctld pushes them. Jobs mix
realistic values with nil, NO_VAL sentinels, huge counts and malformed gres. The warn-mode policy (diff-site.conf
with rules in warn mode) runs through the same checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator, MergedView
from gpuclust.policy.luasim import JOB_REC_FIELDS, RUNTIMES, LuaPolicy, runtime_module
from gpuclust.policy.render import render_lua

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
REPO = DATA.parent.parent.parent

NO_VAL, NO_VAL16, NO_VAL64, INFINITE, INFINITE64 = 4294967294, 65534, 2**64 - 2, 4294967295, 2**64 - 1
JOBS_PER_EXAMPLE = 10
SUBMIT_EXAMPLES = 1000  # x 10 jobs = 10,000 jobs
MODIFY_EXAMPLES = 1000

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)
ascii_text = st.text(st.sampled_from(list("gpuh10:,/ =-.*?%()[]ab\t\nx")), max_size=16)

number = st.one_of(
    st.none(),
    st.sampled_from([NO_VAL, NO_VAL16, NO_VAL64, INFINITE, INFINITE64, 0, 1, 2, 4, -1, 2**53 + 1, 10**30]),
    st.integers(0, 64),
    st.integers(-(2**64), 2**64),
)

count = st.one_of(st.integers(0, 40).map(str), st.integers(0, 10**30).map(str),
                  st.sampled_from(["", "2K", "-1", "1.5", "0x10", " 2", "007", "9" * 400]))
gres_item = st.builds(
    lambda prefix, name, gtype, cnt: prefix + name + (":" + gtype if gtype is not None else "") + (":" + cnt if cnt is not None else ""),
    st.sampled_from(["", "gres:", "gres/", "gres:gres:", "gres/gres/", "license/", "bb/", "/", "x y/"]),
    st.sampled_from(["gpu", "gpu", "gpu", "shard", "mps", "GPU", "", "gpu ", "g-p.u", "gres", "cpu", "mem"]),
    # GPU types: real ones, ones no partition has ("-1", "abc": sbatch sends gpu:-1 / gpu:abc as one GPU of that
    # type; H100: types are case-sensitive in slurmctld), and malformed ones
    st.one_of(st.none(), st.sampled_from(["h100", "a100", "0", "12", "h100 ", "x(y)", "", "é", "a=b", "-1", "abc",
                                          "H100", "l40", "h100.x"])),
    st.one_of(st.none(), count, count.map(lambda c: "=" + c)),
)
gres_value = st.one_of(
    st.none(),
    st.sampled_from(["", "gres:gpu:2", "gres:gpu:h100:2", "gpu:2", "gres:gpu:h100:1,gres:shard:1", "gres:gpu",
                     "gres:gpu:h100", "gres/gpu:3", ",", "gres:gpu:99999999999999999999999",
                     # 24.11 / 26.05 forms
                     "gres/gpu:h100:2", "gres/gpu=1", "gres/gpu:h100=1", "cpu=4,gres/gpu=1", "cpu=2,gres/gpu:h100=2",
                     "gres/gpu=", "gres/gpu:1=2", "gres/gpu:h100:2=1", "license/x=1,gres/gpu=2", "gres/=1",
                     "gres/gpu=99999999999999999999", "gpu=3", "gres/shard=1,gres/gpu:h100=1",
                     # types no partition has (issue 13: --gres=gpu:-1, --gpus=abc), 22.05 and 24.11 forms
                     "gres:gpu:-1", "gres/gpu:-1", "gres:gpu:abc", "gres/gpu:abc=1", "gres/gpu:a100:2",
                     "gres:gpu:h100:1,gres:gpu:-1", "gres/gpu:h100=1,gres/gpu:a100=1"]),
    st.lists(gres_item, min_size=1, max_size=3).map(",".join),
    ascii_text,
    text,
)


def names(*known: str) -> st.SearchStrategy[str | None]:
    return st.one_of(st.none(), st.sampled_from(list(known)), ascii_text, text)


label_token = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["team", "project", "cost", "Team", "", "team "]),
              st.sampled_from(["physics", "ml", "bio", "biology", "proj-1", "proj-", "axa", "ax", "a.b", "a.bc",
                               "axb", "100%", "[x]", "éa", "éé", "%d+", "", "x", "1=2"])),
    ascii_text,
)
comment = st.one_of(
    st.none(),
    st.lists(label_token, max_size=5).flatmap(
        lambda toks: st.lists(st.sampled_from([",", " ", ";", "\t", ",,", "\n"]), min_size=len(toks), max_size=len(toks)).map(
            lambda seps: "".join(t + s for t, s in zip(toks, seps, strict=True)))),
    text,
)

wild_job = st.fixed_dictionaries({
    "account": names("physics", "ml", "ops", "bio", "nope", ""),
    "default_account": names("physics", "ml", "ops", "root"),
    "partition": names("gpu", "a100", "debug", "cpu", "gpu,debug", "debug,gpu", "a100,cpu", "x", "", ","),
    "qos": names("gpu-normal", "typed", "plain", "normal"),
    "default_qos": names("normal", "typed"),
    "user_name": names("root", "svc.admin", "alice"),
    "comment": comment,
    "wckey": names("lattice", ""),
    "gres": gres_value,
    "tres_per_node": gres_value,
    "tres_per_job": gres_value,
    "tres_per_socket": gres_value,
    "tres_per_task": gres_value,
    "min_nodes": number,
    "max_nodes": number,
    "num_tasks": number,
    "min_cpus": number,
    "ntasks_per_node": number,
    "sockets_per_node": number,
    "ntasks_per_socket": number,
    "ntasks_per_tres": number,
    "shared": number,
    "time_limit": number,
}, optional={"bogus_field": text, "user_id": number})


def _maybe(values: list, none_weight: int = 1) -> st.SearchStrategy:
    return st.sampled_from([None] * none_weight + values)


valid_gpu = st.one_of(
    st.builds(lambda prefix, body: prefix + body, st.sampled_from(["gres:", "gres:", "", "gres/"]),
              st.sampled_from(["gpu:h100:1", "gpu:h100:2", "gpu:h100:4", "gpu:h100:9", "gpu:h100:16",
                               "gpu:a100:3", "gpu:2", "gpu:1", "gpu", "gpu:h100", "gpu:h100:0",
                               "gpu:h100:2,shard:1", "gpu:a100:1,gpu:h100:1",
                               # types a partition lacks: partition_gpu_type
                               "gpu:-1", "gpu:abc", "gpu:H100:1", "gpu:l40:2", "gpu:h100:1,gpu:abc:1"])),
    # 24.11 / 26.05: '=' forms, and tres_per_task carrying the cpus
    st.sampled_from(["gres/gpu=1", "gres/gpu:h100=1", "gres/gpu:h100=2", "cpu=2,gres/gpu:h100=1", "cpu=4,gres/gpu=1"]),
)
good_comment = st.builds(
    lambda team, project, cost, sep: sep.join(x for x in (team, project, cost) if x),
    _maybe(["team=physics", "team=ml", "team=ops", "team=bio", "team=biology", "team=chem"], 0),
    _maybe(["project=proj-7", "project=axa", "project=a.bc", "project=100%", "project=[x]", "project=éa",
            "project=zzz", "project=ab"], 0),
    _maybe(["cost=1", "cost=cc"], 0),
    st.sampled_from([" ", ",", ";", ", "]),
)
realistic_job = st.fixed_dictionaries({
    "account": _maybe(["physics", "physics", "ml", "ml", "ops", "bio", "nope"]),
    "default_account": _maybe(["physics", "ml", "root"]),
    "partition": _maybe(["gpu", "gpu", "a100", "debug", "cpu", "gpu,debug", "a100,cpu"]),
    "qos": _maybe(["gpu-normal", "typed", "plain"], 3),
    "default_qos": _maybe(["normal", "typed"]),
    "user_name": st.sampled_from(["alice"] * 8 + ["root", "svc.admin"]),
    "comment": st.integers(0, 5).flatmap(lambda i: comment if i == 0 else good_comment),
    "wckey": _maybe(["lattice", ""]),
    "tres_per_node": st.integers(0, 1).flatmap(lambda i: valid_gpu if i else st.none()),
    "tres_per_job": st.integers(0, 3).flatmap(lambda i: valid_gpu if i == 0 else st.none()),
    "tres_per_task": st.integers(0, 5).flatmap(lambda i: valid_gpu if i == 0 else st.none()),
    "tres_per_socket": st.integers(0, 5).flatmap(lambda i: valid_gpu if i == 0 else st.none()),
    "min_nodes": st.sampled_from([NO_VAL, NO_VAL, 1, 2, 4, 0]),
    "max_nodes": st.sampled_from([NO_VAL, NO_VAL, NO_VAL, 1, 2, 4, 64, INFINITE]),
    "num_tasks": st.sampled_from([NO_VAL, NO_VAL, 1, 2, 8]),
    "min_cpus": st.sampled_from([NO_VAL, 1, 2, 8]),
    "ntasks_per_node": st.sampled_from([NO_VAL16, NO_VAL16, 1, 4]),
    "sockets_per_node": st.sampled_from([NO_VAL16, NO_VAL16, 2]),
    "ntasks_per_socket": st.sampled_from([NO_VAL16, NO_VAL16, NO_VAL16, 2]),
    "ntasks_per_tres": st.sampled_from([NO_VAL16, NO_VAL16, NO_VAL16, 2]),
    "shared": st.sampled_from([NO_VAL16, NO_VAL16, NO_VAL16, 0, 1, 2]),
    "time_limit": st.sampled_from([NO_VAL, NO_VAL, 1, 2, 30, 60, 61, 2880, 2881, INFINITE]),
})
# 4 in 5 jobs realistic (so every rule decides some), 1 in 5 wild.
job_desc = st.integers(0, 4).flatmap(lambda i: wild_job if i == 0 else realistic_job)


# Rules in warn mode over diff-site.conf: the whole policy warns but for two rules, with a policy-wide date and one
# rule's own. Jobs then run past failing rules, so later rules decide more often.
WARN_POLICY = """
mode = warn
mode.partition_account = enforce
mode.partition_wckey = enforce
enforce_from = 2026-09-01
enforce_from.label_value = 2026-10-15
"""


def _runtime(version: str) -> str:
    try:
        runtime_module(version)
    except ImportError:
        pytest.skip(f"this lupa wheel has no {RUNTIMES[version]} (lupa >= 2.0 ships it on x86_64 Linux)")
    return version


def _engines(path: Path, version: str = "5.1", extra: str = ""):
    if extra:
        from gpuclust.config import parse_config

        policy = compile_policy(parse_config(path.read_text(encoding="utf-8") + extra, path.name))
    else:
        policy = compile_policy(load_config(str(path)))
    return LuaPolicy(render_lua(policy), _runtime(version)), Evaluator(policy)


@pytest.fixture(scope="module")
def engines():
    """The busy differential policy: every rule kind, globs with odd bytes, typed QOS, exemptions."""
    return _engines(DATA / "diff-site.conf")


@pytest.fixture(scope="module")
def engines54():
    return _engines(DATA / "diff-site.conf", "5.4")


@pytest.fixture(scope="module", params=["5.1", "5.4"])
def warn_engines(request):
    return _engines(DATA / "diff-site.conf", request.param, WARN_POLICY)


@pytest.fixture(scope="module", params=["5.2", "5.3", "luajit"])
def other_engines(request):
    return (_engines(DATA / "diff-site.conf", request.param),
            _engines(DATA / "diff-site.conf", request.param, WARN_POLICY))


@pytest.fixture(scope="module")
def example_engines():
    return _engines(REPO / "site.example.conf")


def _same(lua_result, verdict, job, py=None, op="submit"):
    assert isinstance(lua_result.rc, (int, float)), f"Lua returned {lua_result.rc!r} (nil accepts!) for {job!r}"
    assert int(lua_result.rc) == verdict.rc, (job, lua_result, verdict)
    expected = verdict.user_message
    if expected is None:
        assert lua_result.n_messages == 0, (job, lua_result)
    else:
        assert lua_result.message == expected, (job, lua_result, verdict)
        assert lua_result.n_messages == 1
    assert lua_result.n_errors == 0, (job, lua_result.error)
    if py is not None:
        view = MergedView(*job[:2]) if op == "modify" else job
        assert lua_result.infos == py.log_lines(view, verdict, op=op), (job, lua_result, verdict)


def _agree(engines, jobs):
    lua, py = engines
    for job in jobs:
        verdict = py.submit(job)
        _same(lua.submit(job), verdict, job, py)
        SEEN["rules"].add(verdict.rule)
        SEEN["warned"].update(w.rule for w in verdict.warnings)


SEEN = {"submit": 0, "submit54": 0, "modify": 0, "rules": set(), "warned": set()}

# Rules deep in the engine's order are reached only by jobs that pass every earlier rule, which random jobs
# seldom do; these fixed jobs reach them on every run, so the coverage check below never depends on luck.
_LABELS = "team=physics project=proj-x cost=1"
RARE_RULE_JOBS = {
    "untyped_gpu": {"user_name": "alice", "account": "physics", "partition": "debug", "tres_per_node": "gres:gpu:1",
                    "min_nodes": 1, "time_limit": 10, "comment": _LABELS},
    "account_max_gpus": {"user_name": "alice", "account": "physics", "partition": "gpu",
                         "tres_per_job": "gres:gpu:h100:9", "time_limit": 10, "comment": _LABELS},
    "account_partition": {"user_name": "alice", "account": "ml", "partition": "scratch",
                          "tres_per_node": "gres:gpu:h100:1", "min_nodes": 1, "time_limit": 10,
                          "comment": "team=ml project=proj-x cost=1"},
    "partition_max_time": {"user_name": "alice", "account": "physics", "partition": "gpu",
                           "tres_per_node": "gres:gpu:h100:1", "min_nodes": 1, "time_limit": 5000, "comment": _LABELS},
    "gpu_unbounded": {"user_name": "alice", "account": "physics", "partition": "gpu", "tres_per_node": "gres/gpu:h100:1",
                      "min_nodes": 1, "max_nodes": INFINITE, "time_limit": 10, "comment": _LABELS},
    "partition_gpu_type": {"user_name": "alice", "account": "physics", "partition": "gpu",
                           "tres_per_job": "gres/gpu:h100:1", "tres_per_node": "gres:gpu:-1", "min_nodes": 1,
                           "time_limit": 10, "comment": _LABELS},
    "ok": {"user_name": "alice", "account": "physics", "partition": "gpu", "tres_per_node": "gres:gpu:h100:2",
           "min_nodes": 1, "time_limit": 60, "comment": _LABELS},
}


def test_rare_rule_jobs_reach_their_rule(engines):
    lua, py = engines
    for rule, job in RARE_RULE_JOBS.items():
        verdict = py.submit(job)
        assert verdict.rule == rule, (rule, verdict)
        _same(lua.submit(job), verdict, job, py)


def test_job_numbers_are_floats_from_lua_5_3(engines54):
    """As slurmctld's lua_pushnumber makes them: the float subtype, which tostring writes as 16.0."""
    lua, _ = engines54
    kind = lua.eval("function(t) return math.type(t.n), tostring(t.n) end")
    assert tuple(kind(lua._table({"n": 16}))) == ("float", "16.0")


def test_counts_are_integers_under_every_lua():
    """The issue's case: 4 nodes x 4 GPUs refused under 5.4 logs gpus=16, not 16.0, and says 16 to the user."""
    job = {"user_name": "alice", "account": "physics", "partition": "gpu", "tres_per_node": "gres:gpu:h100:4",
           "min_nodes": 4, "time_limit": 10, "comment": _LABELS}
    for version in RUNTIMES:
        lua, py = _engines(DATA / "diff-site.conf", version)
        result = lua.submit(job)
        assert result.infos[-1] == ("gpuclust-policy-reject v1 op=submit rule=account_max_gpus account=physics "
                                    "user=alice partition=gpu gpus=16"), version
        assert "asks for 16 GPUs" in result.message, version
        _same(result, py.submit(job), job, py)


def test_warn_mode_accepts_tells_and_logs():
    lua, py = _engines(DATA / "diff-site.conf", "5.4", WARN_POLICY)
    job = dict(RARE_RULE_JOBS["account_max_gpus"], comment="team=physics project=nope cost=1")
    verdict = py.submit(job)
    assert verdict.accepted and [w.rule for w in verdict.warnings] == ["label_value", "account_max_gpus"]
    assert verdict.user_message == (
        "gpuclust policy [label_value] warning: accepted now, refused from 2026-10-15: project=nope is not allowed; "
        "use project=<one of: proj-*, ?x?, a.b*, 100%, [x], é?, %d+> in --comment\n"
        "gpuclust policy [account_max_gpus] warning: accepted now, refused from 2026-09-01: job asks for 9 GPUs at "
        "most (per-node and per-task requests count at the largest node and task counts Slurm may give it); account "
        "physics allows at most 8 per job; fix the counts with -N <nodes> and -n <tasks>, or ask with --gpus=<total>")
    result = lua.submit(job)
    assert result.rc == 0
    assert result.infos == [
        "gpuclust-policy-warn v1 op=submit rule=label_value account=physics user=alice partition=gpu gpus=9",
        "gpuclust-policy-warn v1 op=submit rule=account_max_gpus account=physics user=alice partition=gpu gpus=9"]
    _same(result, verdict, job, py)
    # an enforced rule still refuses, and only the refusal is shown and logged
    job = dict(job, account="bio")
    verdict = py.submit(job)
    assert verdict.rule == "partition_account" and not verdict.warnings
    _same(lua.submit(job), verdict, job, py)


@settings(max_examples=SUBMIT_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_desc, min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
@example(jobs=list(RARE_RULE_JOBS.values()))
def test_submit_lua_and_python_agree(engines, jobs):
    _agree(engines, jobs)
    SEEN["submit"] += len(jobs)


@settings(max_examples=SUBMIT_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_desc, min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
@example(jobs=list(RARE_RULE_JOBS.values()))
def test_submit_agree_under_lua_5_4(engines54, jobs):
    _agree(engines54, jobs)
    SEEN["submit54"] += len(jobs)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_desc, min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
@example(jobs=list(RARE_RULE_JOBS.values()))
def test_submit_agree_in_warn_mode(warn_engines, jobs):
    _agree(warn_engines, jobs)


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_desc, min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
def test_submit_agree_under_lua_5_2_5_3_and_luajit(other_engines, jobs):
    enforce, warn = other_engines
    _agree(enforce, jobs)
    _agree(warn, jobs)


@settings(max_examples=100, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(job_desc, min_size=JOBS_PER_EXAMPLE, max_size=JOBS_PER_EXAMPLE))
def test_submit_agree_on_site_example(example_engines, jobs):
    _agree(example_engines, jobs)


modify_desc = st.fixed_dictionaries({}, optional={
    "account": names("physics", "ml", "bio"), "partition": names("gpu", "debug", "a100"),
    "comment": comment, "time_limit": number, "tres_per_node": gres_value, "tres_per_job": gres_value,
    "tres_per_task": gres_value, "min_nodes": number, "max_nodes": number, "num_tasks": number, "shared": number,
    "wckey": names("lattice", ""), "qos": names("typed", "plain"),
})


@settings(max_examples=MODIFY_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(desc=modify_desc, rec=st.one_of(st.none(), job_desc), uid=st.sampled_from([0, 1000]))
def test_modify_lua_and_python_agree(engines, desc, rec, uid):
    _modify_agree(engines, desc, rec, uid)
    SEEN["modify"] += 1


def _modify_agree(engines, desc, rec, uid):
    lua, py = engines
    if rec is not None:  # slurmctld exposes only the job record's own fields
        rec = {k: v for k, v in rec.items() if k in JOB_REC_FIELDS}
    verdict = py.modify(desc, rec, uid)
    _same(lua.modify(desc, rec, uid), verdict, (desc, rec, uid), py, "modify")


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(desc=modify_desc, rec=st.one_of(st.none(), job_desc), uid=st.sampled_from([0, 1000]))
def test_modify_agree_under_lua_5_4_and_warn_mode(engines54, warn_engines, desc, rec, uid):
    _modify_agree(engines54, desc, rec, uid)
    _modify_agree(warn_engines, desc, rec, uid)


def test_differential_volume():
    """Runs after the two property tests (file order): proves the volume and that every rule was exercised."""
    if SEEN["submit"] == 0:
        pytest.skip("run together with the property tests")
    assert SEEN["submit"] >= 10_000 and SEEN["submit54"] >= 10_000
    expected = {"ok", "exempt", "account_missing", "gres_syntax", "label_missing", "label_value", "partition_account",
                "partition_wckey", "partition_gpu", "partition_typed_gpu", "partition_gpu_type", "partition_max_gpus",
                "partition_max_time", "account_partition", "account_max_gpus", "untyped_gpu", "gpu_unbounded"}
    assert expected <= SEEN["rules"], expected - SEEN["rules"]
    warnable = expected - {"ok", "exempt", "gres_syntax", "partition_account", "partition_wckey", "account_missing"}
    assert warnable <= SEEN["warned"], warnable - SEEN["warned"]
