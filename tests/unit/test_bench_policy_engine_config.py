"""benchmarks/policy_engine.py --config: jobs derived from an arbitrary site policy (issue 18's check: a 500-account
policy not seen before, with jobs that run every check). No timing is asserted: tiny --n/--repeats/--rounds."""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "policy_engine.py"

pytest.importorskip("lupa")
needs_lua = pytest.mark.skipif(shutil.which("lua5.1") is None, reason="lua5.1 not installed")


def _bench() -> ModuleType:
    name = "policy_engine_bench"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def site_config(n_accounts: int = 500, seed: int = 18) -> str:
    """A site policy unlike the benchmark's built-in shapes: 5 partitions (one carries every partition rule: allowed
    accounts, wckey, GPU, typed GPU, GPU type, max GPUs, max time and a QOS with typed limits; one allows untyped
    requests where typed limits apply), accounts in departments with random partition subsets, limits and typed
    limits, an exempt account, and 5 required labels mixing exact values, globs (prefix, suffix, infix, ?) and any."""
    rng = random.Random(seed)
    depts = ("chem", "phys", "bio", "cs", "math", "astro", "med", "geo")
    accounts = [f"{depts[i % len(depts)]}-{i:03d}" for i in range(n_accounts)]
    parts = {
        "gpu-h": ["gpu_type = h100", "gpus_per_node = 8", "require_gpu = yes", "require_typed_gpu = yes",
                  "require_wckey = yes", "max_gpus_per_job = 64", "max_time = 2-00:00:00", "qos = hq"],
        "gpu-a": ["gpu_type = a100", "gpus_per_node = 4", "require_gpu = yes", "max_gpus_per_job = 16",
                  "max_time = 12:00:00"],
        "inf": ["gpu_type = l40s", "require_gpu = yes", "max_gpus_per_job = 4", "max_time = 4h"],
        "cpu": ["max_time = 7d"],
        "debug": ["max_gpus_per_job = 1", "max_time = 30m"],
    }
    lines = ["[site]", "cluster_name = unseen", ""]
    for name, keys in parts.items():
        allowed = [a for a in accounts if rng.random() < 0.85] if name != "cpu" else []
        lines += [f"[partition {name}]", *keys, *([f"allowed_accounts = admin, {', '.join(allowed)}"] if allowed else []), ""]
    lines += ["[account admin]", "allowed_partitions = gpu-h, gpu-a, inf, cpu, debug", ""]
    for i, acct in enumerate(accounts):
        subset = [p for p in parts if rng.random() < 0.6]
        keys = [f"labels = cc=cc{i % 30:02d}, team={acct.split('-')[0]}"]
        if subset and rng.random() < 0.9:
            keys.append(f"allowed_partitions = {', '.join(subset)}")
        if rng.random() < 0.8:
            keys.append(f"max_gpus_per_job = {rng.choice((4, 8, 16, 32, 48))}")
        if rng.random() < 0.5:
            keys.append(f"gpu_limit.h100 = {rng.randint(4, 64)}")
        if rng.random() < 0.3:
            keys.append(f"max_gpus_per_user = {rng.randint(2, 16)}")
        lines += [f"[account {acct}]", *keys, ""]
    lines += ["[qos hq]", "gpu_limit.h100 = 256", "", "[qos normal]", "max_gpus_per_user = 8", "",
              "[policy]", "fail_mode = closed", "require_account = yes", "default_partition = gpu-a",
              "required_labels = cc, team, project, env, run",
              "label.cc = " + ", ".join(f"cc{i:02d}" for i in range(30)) + ", cc-????",
              "label.team = " + ", ".join(depts) + ", guest-*",
              "label.project = prj-*-*, *.run, x?y*, ticket-[0-9]*, *-202?",
              "label.env = prod, dev, sandbox-*",
              "exempt_users = root, slurm", "exempt_accounts = admin", "reject_untyped_gpu_where_typed_limits = yes"]
    return "\n".join(lines) + "\n"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(params=["site.example.conf", "unseen-500", "wide-500"])
def config_path(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "site.example.conf":
        return REPO / "site.example.conf"
    if request.param == "unseen-500":
        return _write(tmp_path, "unseen-500.conf", site_config(500))
    return _write(tmp_path, "wide-500.conf", _bench().wide_config(500))


def test_derived_jobs_run_every_check_and_agree(config_path: Path) -> None:
    bench = _bench()
    case = bench.config_case(str(config_path))
    bench.verify_case(case, 2000)  # Lua (lupa) and Python agree and give each job's expected rule
    assert case.checks["not_run_by_accepted_job"] == [], case.checks
    accepted = [job for job in case.jobs if job.expect == "ok"]
    assert accepted and set(accepted[0].checks) == set(case.checks["policy_has"])
    labels = [f"label:{label.key}" for label in case.policy.labels]
    assert all(c in accepted[0].checks for c in labels)
    comment = accepted[0].comment
    assert comment.startswith("note=x{i}")  # the labels come after an unrelated token
    rejected = [job for job in case.jobs if job.label.startswith("rejected at the last rule")]
    assert len(rejected) == 1
    has_untyped_rule = "untyped_gpu" in case.checks["policy_has"]
    expected_last = {"site.example.conf": "account_max_gpus"}.get(config_path.name, "untyped_gpu")
    assert rejected[0].expect == expected_last and (has_untyped_rule or expected_last != "untyped_gpu")
    if rejected[0].expect != "label_value" and case.policy.labels:
        assert any(job.expect == "label_value" for job in case.jobs)


def test_generated_policy_labels_come_from_globs(tmp_path: Path) -> None:
    bench = _bench()
    case = bench.config_case(str(_write(tmp_path, "unseen.conf", site_config(60, seed=3))))
    comment = case.jobs[0].comment
    assert "project=" in comment and "q{i}" in comment  # a glob-only label got a generated value
    py = bench.Evaluator(case.policy)
    for i in (0, 5, 99_999):  # every call's comment in the miss variants keeps the verdict
        assert py.submit(case.jobs[0].job_desc(case, i)).rule == "ok"


def test_policy_without_labels_or_typed_limits_lists_what_it_lacks(tmp_path: Path) -> None:
    bench = _bench()
    text = "[site]\ncluster_name = small\n\n[partition cpu]\nmax_time = 1h\n\n[account a]\n\n[policy]\nrequire_account = no\n"
    case = bench.config_case(str(_write(tmp_path, "small.conf", text)))
    bench.verify_case(case, 10)
    assert {"label_missing", "label_value", "untyped_gpu", "partition_gpu_type", "account_max_gpus"} <= set(
        case.checks["policy_lacks"])
    assert [job.expect for job in case.jobs if job.label.startswith("rejected")] == ["partition_max_time"]


def test_builtin_shapes_still_verify() -> None:
    bench = _bench()
    for shape in ("big", "wide"):
        bench.verify_case(bench.builtin_case(shape, 12), 40)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=600)


@needs_lua
def test_config_end_to_end_json(tmp_path: Path) -> None:
    path = _write(tmp_path, "unseen-500.conf", site_config(500))
    out = _run("--config", str(path), "--n", "60", "--repeats", "1", "--rounds", "1", "--distinct", "50", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    (info,) = result["policies"]
    assert info["shape"] == "unseen-500.conf" and info["accounts"] == 501 and info["table_bytes"] > 10_000
    verdicts = {row["job"]: row["verdict"] for row in result["rows"]}
    assert list(verdicts.values())[:2] == ["ok", "ok"] and "untyped_gpu" in verdicts.values()
    assert "label_value" in verdicts.values()
    for row in result["rows"]:
        assert row["accounts"] == 501 and set(row["lua5.1"]) == {"current/hit proxy", "current/cmiss proxy",
                                                                 "current/miss proxy"}


@needs_lua
def test_config_and_shape_together_text(tmp_path: Path) -> None:
    out = _run("--config", str(REPO / "site.example.conf"), "--shape", "big", "--accounts", "5", "--n", "20",
               "--repeats", "1", "--rounds", "1", "--distinct", "20")
    assert out.returncode == 0, out.stderr
    assert "site.example.conf: 3 accounts" in out.stdout and "rendered tables" in out.stdout
    assert "policy lacks: partition_wckey" in out.stdout and "big      5 accounts" in out.stdout


def test_bad_config_exits_2_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.conf"
    out = _run("--config", str(missing))
    assert out.returncode == 2 and str(missing) in out.stderr
    bad = _write(tmp_path, "bad.conf", "[site]\ncluster_name = x\n\n[partition gpu]\nmax_gpus_per_job = -3\n")
    out = _run("--config", str(bad), "--shape", "big")
    assert out.returncode == 2, out.stderr
    assert f"{bad}:5:" in out.stderr and "max_gpus_per_job" in out.stderr


def test_checks_no_single_pair_carries_get_their_own_accepted_job() -> None:
    bench = _bench()
    case = bench.config_case(str(REPO / "tests" / "data" / "policy" / "diff-site.conf"))
    bench.verify_case(case, 50)
    assert case.checks["not_run_by_accepted_job"] == ["partition_wckey"]
    assert case.checks["not_run_by_any_job"] == []
    assert any(job.label == "accepted (also partition_wckey)" and "--wckey" in job.argv for job in case.jobs)


_GLOBS = ("*", "a*", "*b", "x?y*", "p-*-*", "??", "*@*", "exact1", "exact2", "a b", "*.*", "ü*", "[x]*")


def _random_site(rng: random.Random) -> str:
    accts = [f"a{i}" for i in range(rng.randint(0, 8))]
    parts = [f"p{j}" for j in range(rng.randint(0, 4))]
    lines = ["[site]", "cluster_name = r", ""]
    for p in parts:
        opts = [rng.choice(("gpu_type = h100", "gpu_type = a100", "")), "require_gpu = yes", "require_typed_gpu = yes",
                "require_wckey = yes", f"max_gpus_per_job = {rng.choice((1, 2, 8, 64))}", "gpus_per_node = 4",
                f"max_time = {rng.choice(('30m', '2-00:00:00', '90s'))}", "qos = tq"]
        if accts:
            opts.append("allowed_accounts = " + ", ".join(rng.sample(accts, rng.randint(1, len(accts)))))
        lines += [f"[partition {p}]", *[o for o in opts if o and rng.random() < 0.5], ""]
    for a in accts:
        opts = [f"max_gpus_per_job = {rng.choice((1, 4, 16))}", f"gpu_limit.{rng.choice(('h100', 'a100'))} = 8"]
        if parts:
            opts.append("allowed_partitions = " + ", ".join(rng.sample(parts, rng.randint(1, len(parts)))))
        lines += [f"[account {a}]", *[o for o in opts if rng.random() < 0.5], ""]
    labels = [f"k{i}" for i in range(rng.randint(0, 4))]
    lines += ["[qos tq]", "gpu_limit.h100 = 4", "", "[policy]", f"require_account = {rng.choice(('yes', 'no'))}",
              f"reject_untyped_gpu_where_typed_limits = {rng.choice(('yes', 'no'))}"]
    if labels:
        lines.append("required_labels = " + ", ".join(labels))
        lines += [f"label.{k} = " + ", ".join(rng.sample(_GLOBS, rng.randint(1, 4))) for k in labels if rng.random() < 0.8]
    if accts and rng.random() < 0.3:
        lines.append(f"exempt_accounts = {accts[0]}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(40))
def test_random_policies_derive_jobs_that_verify(seed: int, tmp_path: Path) -> None:
    bench = _bench()
    path = _write(tmp_path, f"r{seed}.conf", _random_site(random.Random(seed)))
    try:
        case = bench.config_case(str(path))
    except SystemExit as exc:  # only where no non-exempt job can use the policy's partitions
        assert "no non-exempt account may use any partition" in str(exc)
        return
    bench.verify_case(case, 50)
    assert case.checks["not_run_by_any_job"] == [] and case.jobs[0].expect == "ok"
