"""GPU-equivalents ([policy] count_gpus = equivalents), MIG / shard / MPS requests read as sbatch reads them, and the
per-partition rules partition_cpus_per_gpu, partition_mem_per_gpu and partition_qos: the rendered Lua (every lupa
runtime) and the Python twin agree on random jobs (verdict, message, log lines), and fixed jobs pin the numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.config import parse_config
from gpuclust.errors import ConfigError
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator, fmt_amount
from gpuclust.policy.luasim import RUNTIMES, LuaPolicy, runtime_module
from gpuclust.policy.render import render_lua
from gpuclust.policy.sbatch import SbatchRefusal, job_desc_from_options
from gpuclust.slurm.gpushare import type_share

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
CONF = (DATA / "diff-share-site.conf").read_text(encoding="utf-8")
DEVICES = CONF.replace("count_gpus = equivalents", "count_gpus = devices")
WARN = CONF + "mode = warn\nenforce_from = 2026-09-01\n"
NO_VAL, NO_VAL16, NO_VAL64, INFINITE = 4294967294, 65534, 2**64 - 2, 4294967295
GRES = frozenset({"gpu", "shard", "mps"})


def _policy(text: str = CONF):
    return compile_policy(parse_config(text, "diff-share-site.conf"))


def _runtime(version: str) -> str:
    try:
        runtime_module(version)
    except ImportError:
        pytest.skip(f"this lupa wheel has no {RUNTIMES[version]}")
    return version


_CACHE: dict = {}


def _engines(version: str, text: str = CONF):
    key = (version, text)
    if key not in _CACHE:
        pol = _policy(text)
        _CACHE[key] = (LuaPolicy(render_lua(pol), _runtime(version)), Evaluator(pol))
    return _CACHE[key]


def _same(engines, job):
    lua, py = engines
    verdict = py.submit(job)
    result = lua.submit(job)
    assert int(result.rc) == verdict.rc, (job, result, verdict)
    if verdict.user_message is None:
        assert result.n_messages == 0, (job, result)
    else:
        assert result.message == verdict.user_message, (job, result, verdict)
    assert result.n_errors == 0, (job, result.error)
    assert result.infos == py.log_lines(job, verdict), (job, result, verdict)
    return verdict


def _job(**kw):
    base = {"user_name": "alice", "account": "physics", "partition": "gpu", "min_nodes": 1, "max_nodes": 1}
    base.update(kw)
    return base


# ---------------------------------------------------------------------------------------------------------------
# fixed jobs


def test_equivalents_count_slices_shards_and_mps():
    _, py = _engines("5.1")
    # 3g.40gb is 3/7: one is within mig's 1 GPU, three (9/7) are not
    assert py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:3g.40gb:1")).accepted
    v = py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:3g.40gb:3"))
    assert v.rule == "partition_max_gpus" and "asks for 1.29 GPU-equivalents at most" in v.message
    # seven 1g slices are exactly one GPU: printed as an integer, and accepted at the limit
    assert py.submit(_job(partition="mig", qos="mig", tres_per_job="gres/gpu:1g.10gb:7")).accepted
    # shards: 8 per GPU on `shared`; 9 shards are 1.125 GPUs
    v = py.submit(_job(partition="shared", qos="shared", tres_per_node="gres:shard:9"))
    assert v.rule == "partition_max_gpus" and "asks for 1.12 GPU-equivalents" in v.message
    assert py.submit(_job(partition="shared", qos="shared", tres_per_node="gres:shard:8")).accepted
    # shards on a partition without shards_per_gpu cannot be counted
    v = py.submit(_job(tres_per_node="gres:shard:1"))
    assert v.rule == "gpu_unbounded" and "partition gpu has no shards_per_gpu" in v.message
    # MPS is N/100: 150 MPS + one h100 is 2.5 GPUs on gpu (at most 2)
    v = py.submit(_job(tres_per_node="gres:mps:150,gres:gpu:h100:1"))
    assert v.rule == "partition_max_gpus" and "asks for 2.50 GPU-equivalents" in v.message
    # a site share ([gpu_type site_slice] gpu_share = 1/3): 3 of them are one GPU
    assert py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:site_slice:3")).accepted
    assert py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:site_slice:4")).rule == "partition_max_gpus"


def test_devices_mode_is_unchanged():
    """count_gpus = devices (the default): a slice counts 1, shards and MPS count 0, MIG names are not checked."""
    _, py = _engines("5.1", DEVICES)
    v = py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:3g.40gb:2"))
    assert v.rule == "partition_max_gpus" and "asks for 2 GPUs at most" in v.message
    assert py.submit(_job(partition="mig", qos="mig", tres_per_node="gres:gpu:5g.40gb:1")).accepted
    assert py.submit(_job(partition="shared", qos="shared", tres_per_node="gres:shard:64")).accepted
    assert not _policy(DEVICES).count_eq and _policy(DEVICES).unit == 1


@pytest.mark.parametrize("version", sorted(RUNTIMES))
def test_bad_mig_profiles_named_under_every_lua(version):
    engines = _engines(version)
    v = _same(engines, _job(partition="mig", tres_per_node="gres:gpu:5g.40gb:1"))
    assert v.rule == "mig_profile" and v.rc == 2072
    assert v.message == ("gpuclust policy [mig_profile]: unknown MIG profile '5g.40gb': no MIG profile has 5 of 7 "
                         "compute slices; ask for one of the profiles the cluster's GPUs are cut into")
    v = _same(engines, _job(partition="mig", tres_per_job="gres/gpu:a100_8g.80gb:1"))
    assert v.message == ("gpuclust policy [mig_profile]: MIG profile 'a100_8g.80gb' asks for 8 compute slices and its "
                         "card has 7; ask for a profile of at most 7 slices")
    # A30: 4 slices a card
    v = _same(engines, _job(partition="mig", tres_per_node="gres:gpu:a30_3g.12gb:1"))
    assert v.rule == "mig_profile" and "no MIG profile has 3 of 4" in v.message
    # always enforced, even in warn mode
    assert _same(_engines(version, WARN), _job(partition="mig", tres_per_node="gres:gpu:9g.90gb:1")).rule == "mig_profile"


@pytest.mark.parametrize("version", sorted(RUNTIMES))
def test_ratio_rules_and_qos_under_every_lua(version):
    engines = _engines(version)
    cases = [
        # 4 tasks x 8 CPUs on one h100: 32 CPUs per GPU (at most 16)
        (_job(tres_per_node="gres:gpu:h100:1", num_tasks=4, cpus_per_task=8), "partition_cpus_per_gpu",
         "job asks for 32 CPUs per GPU"),
        (_job(tres_per_node="gres:gpu:h100:2", num_tasks=4, cpus_per_task=8), "ok", None),
        (_job(tres_per_node="gres:gpu:h100:1", cpus_per_tres="gres:gpu:17"), "partition_cpus_per_gpu",
         "job asks for 17 CPUs per GPU"),
        (_job(tres_per_job="gres/gpu:h100:2", num_tasks=3, cpus_per_task=11), "partition_cpus_per_gpu",
         "job asks for 16.50 CPUs per GPU"),
        # --mem is per node; on 64G per GPU a 70000 MB node of one GPU is too much, of two is not
        (_job(tres_per_node="gres:gpu:h100:1", min_mem_per_node=70000), "partition_mem_per_gpu",
         "job asks for 70000 MB of memory per GPU"),
        (_job(tres_per_node="gres:gpu:h100:2", min_mem_per_node=70000), "ok", None),
        (_job(tres_per_node="gres:gpu:h100:1", min_mem_per_node=0), "partition_mem_per_gpu", "(--mem=0)"),
        (_job(tres_per_node="gres:gpu:h100:1", num_tasks=4, min_mem_per_cpu=20000), "partition_mem_per_gpu",
         "job asks for 80000 MB"),
        (_job(tres_per_node="gres:gpu:h100:1", mem_per_tres="gres:gpu:65537"), "partition_mem_per_gpu",
         "job asks for 65537 MB"),
        (_job(tres_per_node="gres:gpu:h100:1", mem_per_tres="gres:gpu:65536"), "ok", None),
        # a 1g slice is 1/7 GPU: 2 CPUs on it are 14 per GPU-equivalent (mig allows 8)
        (_job(partition="mig", qos="mig", tres_per_node="gres:gpu:1g.10gb:1", num_tasks=2), "partition_cpus_per_gpu",
         "job asks for 14 CPUs per GPU"),
        (_job(partition="mig", qos="mig", tres_per_node="gres:gpu:1g.10gb:1"), "ok", None),
        # QOS per partition; neither --qos nor a default QOS seen: Slurm picks the QOS later, judged only with
        # require_qos (shared)
        (_job(partition="mig", tres_per_node="gres:gpu:1g.10gb:1"), "ok", None),
        (_job(partition="mig", qos="shared", tres_per_node="gres:gpu:1g.10gb:1"), "partition_qos",
         "QOS shared may not be used in partition mig; use --qos with one of: mig, normal"),
        (_job(partition="shared", tres_per_node="gres:shard:1"), "partition_qos",
         "QOS (none) may not be used in partition shared; use --qos with one of: shared"),
        (_job(partition="shared", default_qos="shared", tres_per_node="gres:shard:1"), "ok", None),
        (_job(partition="mig", default_qos="normal", tres_per_node="gres:gpu:1g.10gb:1"), "ok", None),
        (_job(partition="shared", qos="mig", tres_per_node="gres:shard:1"), "partition_qos", "QOS mig may not"),
        # a job without GPUs is not judged per GPU
        (_job(partition="cpu", min_mem_per_node=10**6), "ok", None),
    ]
    for job, rule, text in cases:
        v = _same(engines, job)
        assert v.rule == rule, (job, v)
        if text:
            assert text in v.message, (job, v.message)


def test_warn_mode_new_rules_warn_and_log():
    lua, py = _engines("5.4", WARN)
    job = _job(partition="mig", qos="other", tres_per_node="gres:gpu:1g.10gb:1", num_tasks=2)
    v = _same((lua, py), job)
    assert v.accepted and [w.rule for w in v.warnings] == ["partition_cpus_per_gpu", "partition_qos"]
    assert lua.submit(job).infos[0].startswith("gpuclust-policy-warn v1 op=submit rule=partition_cpus_per_gpu ")


def test_fmt_amount():
    assert [fmt_amount(x) for x in (3.0, 9 / 7, 1.125, 0.5)] == ["3", "1.29", "1.12", "0.50"]


def test_share_unit_and_config_errors():
    assert _policy().unit == 4200  # lcm(7, 4, 100, 3 from site_slice, 8 shards)
    assert _policy().share_units == {"site_slice": 1400}
    bad = CONF.replace("shards_per_gpu = 8", "shards_per_gpu = 999983")
    with pytest.raises(ConfigError, match="common denominator"):
        _policy(bad)
    with pytest.raises(ConfigError, match="mig_profile is always enforced"):
        _policy(CONF + "mode.mig_profile = warn\n")
    with pytest.raises(ConfigError, match="gpu_share"):
        _policy(CONF.replace("gpu_share = 1/3", "gpu_share = 3/2"))
    with pytest.raises(ConfigError, match=r"\[partition cpu\] require_qos = yes needs allowed_qos"):
        _policy(CONF.replace("[partition cpu]\n", "[partition cpu]\nrequire_qos = yes\n"))


# ---------------------------------------------------------------------------------------------------------------
# sbatch reads MIG, shard and MPS requests and memory as sbatch does


@pytest.mark.parametrize(("args", "field", "v2205", "v2411"), [
    (["--gres=gpu:3g.40gb:1"], "tres_per_node", "gres:gpu:3g.40gb:1", "gres/gpu:3g.40gb:1"),
    (["--gpus=1g.10gb:2"], "tres_per_job", "gres:gpu:1g.10gb:2", "gres/gpu:1g.10gb:2"),
    (["--gpus-per-node=a100_3g.20gb:1"], "tres_per_node", "gres:gpu:a100_3g.20gb:1", "gres/gpu:a100_3g.20gb:1"),
    (["--gres=shard:2"], "tres_per_node", "gres:shard:2", "gres/shard:2"),
    (["--gres=mps:50"], "tres_per_node", "gres:mps:50", "gres/mps:50"),
    (["--mem=64G"], "min_mem_per_node", 65536, 65536),
    (["--mem=1536K"], "min_mem_per_node", 2, 2),
    (["--mem=2GB"], "min_mem_per_node", 2048, 2048),
    (["--mem-per-cpu=4000"], "min_mem_per_cpu", 4000, 4000),
    # C's wrapped long long, then sbatch's MEM_PER_CPU bit (seen on the 22.05 lab, test_policy_shares_lab.py)
    (["--mem=8796093022208T"], "min_mem_per_cpu", 0, 0),
    (["--mem=9223372036854775807K"], "min_mem_per_cpu", 9214364837600034817, 9214364837600034817),
    (["--mem=18014398509481984G"], "min_mem_per_node", 0, 0),
    (["--mem-per-cpu=8796093022208T"], "min_mem_per_cpu", 0, 0),
    (["--mem-per-gpu=10G", "--gpus=1"], "mem_per_tres", "gres:gpu:10240", "gres/gpu:10240"),
])
def test_sbatch_fields(args, field, v2205, v2411):
    for version, want in (("22.05", v2205), ("24.11", v2411)):
        job = job_desc_from_options(["--wrap=true", *args], version=version, gres_names=GRES)
        assert job[field] == want, (version, job)


@pytest.mark.parametrize("arg", ["--mem=12X", "--mem=-1", "--mem=G", "--mem-per-cpu=1GX", "--mem=1B", "--mem=0B",
                                 "--mem=1GiB", "--mem=1.5G", "--mem=9223372036854775808"])
def test_sbatch_bad_memory(arg):
    with pytest.raises(SbatchRefusal, match=r"Invalid --mem(-per-cpu)? specification"):
        job_desc_from_options(["--wrap=true", arg])


def test_sbatch_shard_needs_the_gres():
    with pytest.raises(SbatchRefusal, match="no GRES named 'shard'"):
        job_desc_from_options(["--wrap=true", "--gres=shard:2"])


def test_policy_check_path_mig_request():
    """What `policy check` does: sbatch's job_desc into the Python twin, agreeing with the Lua."""
    job = job_desc_from_options(["--wrap=true", "-A", "physics", "-p", "mig", "--qos=mig", "--gres=gpu:3g.40gb:3"],
                                user="alice", gres_names=GRES)
    v = _same(_engines("5.1"), job)
    assert v.rule == "partition_max_gpus"


# ---------------------------------------------------------------------------------------------------------------
# random jobs

SHARE_TYPES = ["1g.10gb", "3g.40gb", "7g.80gb", "2g.20gb", "4g.40gb", "5g.50gb", "6g.60gb", "8g.80gb", "0g.5gb",
               "a100_3g.20gb", "nvidia_h100_80gb_hbm3_1g.10gb", "a30_2g.12gb", "a30_3g.12gb", "1g.6gb", "4g.24gb",
               "1G.10GB", "1g.10gb-me", "x1g.10gb", "a_1_2g.10gb", "_1g.5gb", "007g.80gb", "99999999999g.1gb",
               "1g.0010gb", "1g.10gbx", "site_slice", "h100", "a100", "-1", "abc", "1g", "1g.10", "3g.40gb.x"]
count = st.one_of(st.integers(0, 20).map(str), st.sampled_from(["99999999999999999999", "007", "0"]))
gres_item = st.builds(
    lambda prefix, name, gtype, cnt: prefix + name + (":" + gtype if gtype is not None else "") + (cnt or ""),
    st.sampled_from(["gres:", "gres/", "", "gres:"]),
    st.sampled_from(["gpu", "gpu", "gpu", "shard", "mps", "cpu"]),
    st.one_of(st.none(), st.sampled_from(SHARE_TYPES)),
    st.one_of(st.none(), count.map(lambda c: ":" + c), count.map(lambda c: "=" + c)),
)
gres_value = st.one_of(st.none(), st.lists(gres_item, min_size=1, max_size=3).map(",".join))
per_gpu = st.one_of(st.none(), st.builds(lambda p, n: f"{p}gpu{n}", st.sampled_from(["gres:", "gres/", "", "x"]),
                                         st.sampled_from([":4", ":16", ":17", "=8", ":99999999999999999999", ":x"])))
mem = st.one_of(st.none(), st.sampled_from([0, 1, 1000, 20000, 65536, 70000, 10**6, NO_VAL64, 2**63, -1, 0.5]))
n = st.sampled_from([None, NO_VAL, 0, 1, 2, 3, 4, 8, INFINITE])
n16 = st.sampled_from([None, NO_VAL16, 0, 1, 2, 4, 7])
random_job = st.fixed_dictionaries({
    "user_name": st.just("alice"),
    "account": st.sampled_from([None, "physics", "ml", "nope"]),
    "partition": st.sampled_from([None, "gpu", "mig", "shared", "cpu", "mig,shared", "gpu,cpu", "other"]),
    "qos": st.sampled_from([None, "", "mig", "normal", "shared", "other"]),
    "default_qos": st.sampled_from([None, "normal"]),
    "tres_per_node": gres_value, "tres_per_job": gres_value, "tres_per_task": gres_value,
    "tres_per_socket": st.one_of(st.none(), gres_value),
    "min_nodes": n, "max_nodes": n, "num_tasks": n, "min_cpus": n,
    "ntasks_per_node": n16, "sockets_per_node": n16, "ntasks_per_socket": n16, "ntasks_per_tres": n16,
    "cpus_per_task": n16, "shared": st.sampled_from([None, NO_VAL16, 0, 1]),
    "cpus_per_tres": per_gpu, "mem_per_tres": per_gpu, "min_mem_per_node": mem, "min_mem_per_cpu": mem,
})

SEEN: set[str] = set()


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(random_job, min_size=10, max_size=10))
@pytest.mark.parametrize("version", sorted(RUNTIMES))
@pytest.mark.parametrize("config", ["equivalents", "devices", "warn"])
def test_random_jobs_agree(version, config, jobs):
    text = {"equivalents": CONF, "devices": DEVICES, "warn": WARN}[config]
    engines = _engines(version, text)
    for job in jobs:
        SEEN.add(_same(engines, job).rule)


def test_random_jobs_reach_the_new_rules():
    if not SEEN:
        pytest.skip("run together with the property test")
    assert {"mig_profile", "partition_max_gpus", "partition_cpus_per_gpu", "partition_mem_per_gpu", "partition_qos",
            "gpu_unbounded", "ok"} <= SEEN, SEEN


def test_python_shares_come_from_gpushare():
    """The twin reads gpushare; the Lua's MIG name reading agrees with it on every name above (random test)."""
    pol = _policy()
    for name in SHARE_TYPES:
        share, _ = type_share(name, pol.share_overrides)
        units, bad = Evaluator(pol)._type_units(name)
        assert (share is None) == (bad is not None)
        if share is not None:
            assert units == share * pol.unit
