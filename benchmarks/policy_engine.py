"""Lua engine time per job for policies of 50 and 500 accounts (issue 18: <= 5 us per job in Lua 5.1).

Policies: the built-in synthetic shapes (--shape big,wide at --accounts N, with hand-written jobs), or any site
config (--config SITE.conf, loaded and validated as `gpuclust config check` does: a bad file exits 2 naming
file:line and field), with jobs derived from its policy: an account and partition that together carry the most
rules, a job accepted after every check they have (typed GPUs of an allowed type within every limit, a time within
max_time, the wckey, every required label in --comment after an unrelated token, values exact or generated from a
glob), with per-task GPUs too, accepted jobs of other pairs for the checks that pair lacks (a wckey partition
without typed GPUs...), the same job rejected at the latest rule one change reaches (untyped_gpu where typed limits
apply, else the latest of the others), and rejected at the last label's value. Before any timing, each derived
job's verdict is checked on the Python twin and on the Lua engine (lupa), which must agree and give the expected
rule; the checks each job runs and those the policy lacks are listed.

Runtime: Debian's lua5.1 binary (the same Lua 5.1 that slurmctld's job_submit_lua.so links), with the 22.05 `slurm`
mock of gpuclust.policy.luasim, whose log functions keep only the last message here (as slurmctld's, which format
and append to one per-job buffer); optionally lupa's bundled Lua 5.1 too (--lupa). The loop runs inside Lua, so
nothing else is timed. CPU time (os.clock), best of --repeats per process; --rounds processes per variant,
alternated, and the median and range over rounds are reported (the machine is shared).

Variants per job shape:
  proxy / plain   job_desc behind a metatable whose __index is a function (as slurmctld's, which is a C call per
                  read) / a plain table (the engine alone).
  hit / cmiss / miss
                  the same job again and again (its GPU strings and comment were seen before: the engine's memos
                  answer) / a new comment per call (GPU strings seen before: a site sends few distinct ones) /
                  a new comment per call and the GPU memo off (every string parsed; the worst case).
  --compare OLD   another engine.lua (e.g. `git show main:gpuclust/policy/engine.lua > /tmp/old.lua`; one older than
                  the `lead`/`suffix` glob lists needs benchmarks/policy_engine_main_tables.lua first), rendered
                  with the same policy tables and timed in the same rounds, alternating.

Usage: python benchmarks/policy_engine.py [--shape big,wide] [--accounts 50,500] [--config SITE.conf]
                                          [--n 100000] [--repeats 5] [--rounds 3] [--distinct 20000]
                                          [--only TEXT] [--plain] [--compare OLD.lua] [--lupa] [--json]
       (--config alone times only that config; add --shape to time the built-in shapes as well)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from gpuclust.config import SiteConfig, load_config, parse_config
from gpuclust.errors import ConfigError
from gpuclust.policy.compile import AccountRule, CompiledPolicy, LabelRule, PartitionRule, compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import _MOCK, JOB_DESC_FIELDS, LuaPolicy
from gpuclust.policy.render import engine_source, render_lua, render_tables
from gpuclust.policy.sbatch import job_desc_from_options

ACCOUNT_COUNTS = (50, 500)


def wide_config(n_accounts: int = 500) -> str:
    """Another site shape (--shape wide): n_accounts accounts, each with a subset of the 4 partitions, a job limit,
    typed GPU limits (two types) and a per-user limit; partitions with allowed_accounts, a wckey rule and a QOS;
    6 required labels, several with many globs (prefix, suffix, infix, ?, several *) besides exact values."""
    accounts = [f"grp-{i:03d}.lab" for i in range(n_accounts)]
    parts = (("h100", "h100"), ("a100", "a100"), ("l40", "l40"), ("cpu", None))
    lines = ["[site]", "cluster_name = bench", ""]
    for name, gtype in parts:
        lines += [f"[partition {name}]", *([f"gpu_type = {gtype}", "require_gpu = yes", "require_typed_gpu = yes",
                                            "gpus_per_node = 8"] if gtype else []),
                  f"max_gpus_per_job = {128 if gtype else 8}", "max_time = 3-00:00:00",
                  f"allowed_accounts = {', '.join(accounts)}", *(["qos = gpuq"] if gtype == "l40" else []), ""]
    for i, acct in enumerate(accounts):
        allowed = [p for j, (p, _) in enumerate(parts) if (i + j) % 4 != 3] + (["h100"] if i % 4 == 0 else [])
        lines += [f"[account {acct}]", f"labels = team=t{i % 40}, project=p{i}",
                  f"allowed_partitions = {', '.join(dict.fromkeys(allowed))}", f"max_gpus_per_job = {64 + i}",
                  f"gpu_limit.h100 = {16 + i % 32}", f"gpu_limit.a100 = {8 + i % 16}", f"max_gpus_per_user = {8 + i % 8}", ""]
    lines += ["[qos gpuq]", "gpu_limit.l40 = 64", "",
              "[policy]", "fail_mode = closed", "require_account = yes", "default_partition = h100",
              "required_labels = team, project, cost, env, model, owner",
              "label.team = " + ", ".join(f"team-{i}" for i in range(40)) + ", ext-*, *-guest",
              "label.project = proj-*, res-*, *-prod, *-dev, lab?-*, x*y*z, p??-*, grant-20??-*, *.exp",
              "label.cost = cc-*, *-cc, ledger-????",
              "label.env = prod, dev, staging, test, ci-*",
              "label.model = *",
              "label.owner = *@*, svc-*",
              "exempt_users = root, slurm", "reject_untyped_gpu_where_typed_limits = yes"]
    return "\n".join(lines) + "\n"


SHAPES = {"big": lambda n: big_config(n), "wide": lambda n: wide_config(n)}


def big_config(n_accounts: int = 50) -> str:
    """A site of n_accounts accounts (each with labels, allowed_partitions and max_gpus_per_job; every 5th with a typed
    GPU limit, every 7th with a per-user limit), 4 partitions that allow every account, 3 required labels."""
    accounts = [f"acct{i:02d}" for i in range(n_accounts)]
    lines = ["[site]", "cluster_name = bench", ""]
    # 4 partitions x 4 rules = 16 partition rules
    for name, gtype in (("h100", "h100"), ("a100", "a100"), ("l40", "l40"), ("debug", None)):
        lines += [f"[partition {name}]", *( [f"gpu_type = {gtype}", "require_gpu = yes", "require_typed_gpu = yes"] if gtype else []),
                  "max_gpus_per_job = 64", "max_time = 2-00:00:00", f"allowed_accounts = {', '.join(accounts)}", ""]
    for i, acct in enumerate(accounts):
        lines += [f"[account {acct}]", f"labels = team=team{i % 10}, project=proj-{i}",
                  "allowed_partitions = h100, a100, l40, debug", f"max_gpus_per_job = {32 + i}",
                  *( [f"gpu_limit.h100 = {8 + i}"] if i % 5 == 0 else []),
                  *( [f"max_gpus_per_user = {4 + i % 8}"] if i % 7 == 0 else []), ""]
    lines += ["[qos normal]", "max_gpus_per_user = 16", "",
              "[policy]", "fail_mode = closed", "require_account = yes", "default_partition = h100",
              "required_labels = team, project, cost",
              "label.team = " + ", ".join(f"team{i}" for i in range(10)),
              "label.project = proj-*, res-*, ?x?", "label.cost = cc-*",
              "exempt_users = root", "reject_untyped_gpu_where_typed_limits = yes"]
    return "\n".join(lines) + "\n"


# Per shape: job label -> sbatch options. "{i}" in the comment is replaced by a number: 0 for every call in the
# memo-hit variant, a different one per call in the memo-miss variant (every comment new to the engine).
JOBS = {
    "big": {
        "accepted (typed, labels, 2 nodes)": ["-A", "acct42", "-p", "h100", "-N", "2", "--gres=gpu:h100:4", "-t", "1-00:00:00",
                                              "--comment", "team=team9 project=res-77{i} cost=cc-1{i}"],
        "accepted (per-task GPUs, 2x4 tasks)": ["-A", "acct123", "-p", "a100", "-N", "2", "--ntasks-per-node", "4",
                                                "--gpus-per-task=a100:1", "-t", "12:00:00",
                                                "--comment", "team=team3 project=proj-9{i} cost=cc-7{i}"],
        "rejected at the last rule (untyped)": ["-A", "acct40", "-p", "debug", "--gpus=2",
                                                "--comment", "team=team9 project=res-77{i} cost=cc-1{i}"],
        "rejected at the first rule (no -A)": ["--gres=gpu:h100:1"],
    },
    "wide": {
        "accepted (typed, 6 labels, globs late)": [
            "-A", "grp-042.lab", "-p", "h100", "-N", "2", "--gres=gpu:h100:4", "-t", "1-00:00:00",
            "--comment", "note=x{i};team=ext-q{i}, project=grant-2026-r{i} cost=ledger-0042 env=ci-{i} model=llama{i} "
                         "owner=al{i}@lab.example"],
        "accepted (per-task GPUs, 2x4 tasks)": [
            "-A", "grp-124.lab", "-p", "a100", "-N", "2", "--ntasks-per-node", "4", "--gpus-per-task=a100:1",
            "-t", "12:00:00", "--comment", "team=team-39 project=run{i}.exp cost=x{i}-cc env=prod model=m{i} owner=svc-{i}"],
        "rejected at the last rule (untyped)": [
            "-A", "grp-041.lab", "-p", "cpu", "--gpus=2",
            "--comment", "team=team-7 project=proj-{i} cost=cc-{i} env=dev model=m{i} owner=a{i}@b"],
        "rejected at a label (owner value)": [
            "-A", "grp-042.lab", "-p", "h100", "--gres=gpu:h100:1",
            "--comment", "team=team-7 project=proj-{i} cost=cc-{i} env=dev model=m{i} owner=nobody{i}"],
    },
}

@dataclass(frozen=True)
class BenchJob:
    """One timed job: sbatch options ("{i}" in the comment: 0 in the hit variant, a new number per call in the
    memo-miss ones), the rule its verdict must give (None: not checked before timing) and the checks it runs."""

    label: str
    argv: tuple[str, ...]
    expect: str | None = None
    checks: tuple[str, ...] = ()

    @property
    def comment(self) -> str | None:
        return next((self.argv[i + 1] for i, a in enumerate(self.argv[:-1]) if a == "--comment"), None)

    def job_desc(self, case: BenchCase, i: int) -> dict[str, Any]:
        return job_desc_from_options([a.replace("{i}", str(i)) for a in self.argv], user=case.user,
                                     default_account=case.default_account)


@dataclass
class BenchCase:
    """A policy and the jobs timed on it: a built-in shape (--shape) or a site config (--config)."""

    shape: str
    accounts: int
    policy: CompiledPolicy
    jobs: list[BenchJob]
    user: str = "alice"
    default_account: str | None = "acct00"
    checks: dict[str, list[str]] | None = None  # --config: the checks the policy has, the jobs run, it lacks
    notes: list[str] = field(default_factory=list)

    @cached_property
    def text(self) -> str:
        return render_lua(self.policy)

    @property
    def tag(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.shape}-{self.accounts}")

    def info(self) -> dict[str, Any]:
        """The policy's size, and the rendered tables' size in bytes (what the engine loads)."""
        out: dict[str, Any] = {"shape": self.shape, "accounts": self.accounts,
                               "partitions": len(self.policy.partitions), "rules": self.policy.rule_count,
                               "labels": len(self.policy.labels), "table_bytes": len(render_tables(self.policy).encode()),
                               "script_bytes": len(self.text.encode())}
        if self.checks is not None:
            out["checks"] = self.checks
            out["jobs"] = {job.label: shlex.join(job.argv) for job in self.jobs}
        if self.notes:
            out["notes"] = self.notes
        return out


def builtin_case(shape: str, n_accounts: int) -> BenchCase:
    policy = compile_policy(parse_config(SHAPES[shape](n_accounts), "bench.conf"))
    return BenchCase(shape, n_accounts, policy, [BenchJob(label, tuple(argv)) for label, argv in JOBS[shape].items()])


# --config: jobs derived from an arbitrary site policy. The rules in the order the engine (and its Python twin)
# applies them; label rules go label by label, in required_labels order.
RULE_ORDER = ("account_missing", "gres_syntax", "label_missing", "label_value", "partition_account", "partition_wckey",
              "partition_gpu", "partition_typed_gpu", "partition_gpu_type", "partition_max_gpus", "partition_max_time",
              "account_partition", "account_max_gpus", "untyped_gpu")
LABEL_SEPARATORS = ",; \t\n\r\v\f"
COMMENT_SEPARATORS = (" ", ";", ", ")  # between the comment's tokens, in turn


def _label_allows(label: LabelRule, value: str) -> bool:
    data = value.encode("utf-8", "surrogateescape")
    return bool(data) and (label.any_value or value in label.exact or any(r.fullmatch(data) for r in label.regexes))


def _label_value(label: LabelRule, preferred: str | None) -> str | None:
    """A value template ("{i}" varies per call) the label allows: the account's own label value where allowed, else
    an exact value, else one generated from the last usable glob (`*` -> q{i}, `?` -> k). None: no value fits."""
    def ok(v: str) -> bool:
        return not any(c in LABEL_SEPARATORS or c == "\0" for c in v) and all(
            _label_allows(label, v.replace("{i}", str(i))) for i in (0, 7, 123456))

    if preferred and ok(preferred):
        return preferred
    if label.any_value:
        return "v{i}"
    if label.exact:
        return sorted(label.exact)[len(label.exact) // 2]
    for glob in reversed(label.pattern_globs):
        value = "".join("q{i}" if c == "*" else "k" if c == "?" else c for c in glob)
        if ok(value):
            return value
    return None


def _bad_label_value(label: LabelRule) -> str | None:
    for value in ("zz-not-allowed{i}", "~{i}", "0", "-"):
        if not any(_label_allows(label, value.replace("{i}", str(i))) for i in (0, 7)):
            return value
    return None


@dataclass
class JobPlan:
    """What a job on one (account, partition) needs to pass every check they carry."""

    account: str
    partition: str | None
    checks: tuple[str, ...]
    gpu_type: str
    limit: int  # the most GPUs every per-job limit allows
    gpus_per_node: int | None
    minutes: int | None
    max_minutes: int | None
    wckey: bool
    qos: str | None
    labels: list[tuple[str, str | None]]  # (key, value template) in required_labels order
    note: str  # the unrelated token that comes first in --comment

    @property
    def nodes(self) -> int:
        return 2 if self.limit >= 2 else 1

    @property
    def per_node(self) -> int:
        return max(1, min(4, self.limit // self.nodes, self.gpus_per_node or 4))

    def argv(self, gpu: str = "node", *, count: int | None = None, gpu_type: str | None = None,
             minutes: int | None = None, wckey: bool | None = None,
             labels: list[tuple[str, str | None]] | None = None) -> tuple[str, ...]:
        a = ["-A", self.account] + (["-p", self.partition] if self.partition else [])
        t = gpu_type or self.gpu_type
        per_node = count or self.per_node
        if gpu == "node":  # --gres: tres_per_node
            a += ["-N", str(self.nodes), f"--gres=gpu:{t}:{per_node}"]
        elif gpu == "untyped":
            a += ["-N", str(self.nodes), f"--gres=gpu:{per_node}"]
        elif gpu == "task":  # --gpus-per-task with -N and --ntasks-per-node: tres_per_task
            a += ["-N", str(self.nodes), "--ntasks-per-node", str(per_node), f"--gpus-per-task={t}:1"]
        elif gpu == "job":  # --gpus: tres_per_job
            a += [f"--gpus={t}:{count}"]
        minutes = minutes or self.minutes
        if minutes:
            a += ["-t", str(minutes)]
        if self.wckey if wckey is None else wckey:
            a += ["--wckey", "bench"]
        if self.qos:
            a += ["--qos", self.qos]
        tokens = [self.note] + [f"{k}={v}" for k, v in (self.labels if labels is None else labels) if v is not None]
        comment = tokens[0] + "".join(COMMENT_SEPARATORS[i % 3] + tok for i, tok in enumerate(tokens[1:]))
        return (*a, "--comment", comment)


def _checks(policy: CompiledPolicy, pr: PartitionRule | None, ar: AccountRule | None, qos_typed: bool) -> tuple[str, ...]:
    """The checks a job of this account on this partition goes through (labels by key)."""
    out = (["account_missing"] if policy.need_account else []) + ["gres_syntax"]
    out += [f"label:{label.key}" for label in policy.labels]
    if pr is not None:
        out += [name for name, on in (("partition_account", pr.allowed_accounts is not None),
                                      ("partition_wckey", pr.need_wckey), ("partition_gpu", pr.need_gpu),
                                      ("partition_typed_gpu", pr.need_typed_gpu),
                                      ("partition_gpu_type", pr.gpu_types is not None),
                                      ("partition_max_gpus", pr.max_gpus is not None),
                                      ("partition_max_time", pr.max_time_s is not None)) if on]
    if ar is not None:
        out += [name for name, on in (("account_partition", ar.allowed_partitions is not None),
                                      ("account_max_gpus", ar.max_gpus is not None)) if on]
    if policy.reject_untyped and ((pr is not None and pr.typed_limits) or (ar is not None and ar.typed_limits) or qos_typed):
        out.append("untyped_gpu")
    return tuple(out)


def _plans(cfg: SiteConfig, policy: CompiledPolicy) -> list[JobPlan]:
    """A plan per (non-exempt account, partition it may use), the ones that carry the most checks first."""
    typed_qos = sorted(policy.qos_typed)
    known_types = [t for p in cfg.partitions.values() if p.gpu_type for t in (p.gpu_type,)] + list(cfg.gpu_type_prices)
    keys = {label.key for label in policy.labels}
    note = "note"
    while note in keys:
        note += "x"
    accounts = [a for a in cfg.accounts if a not in policy.exempt_accounts] or ["bench-acct"]

    def plan_for(acct: str, pname: str | None) -> JobPlan | None:
        ar, ac = policy.accounts.get(acct), cfg.accounts.get(acct)
        # a job that names no partition gets the rules of default_partition (if any)
        rules_of = pname or policy.default_partition
        pr = policy.partitions.get(rules_of) if rules_of else None
        if pr is not None and pr.allowed_accounts is not None and acct not in pr.allowed_accounts:
            return None
        if ar is not None and ar.allowed_partitions is not None and rules_of not in ar.allowed_partitions:
            return None
        own_typed = (pr is not None and pr.typed_limits) or (ar is not None and ar.typed_limits)
        qos = typed_qos[0] if typed_qos and not own_typed else None  # a QOS with typed limits makes them apply
        if pr is not None and pr.gpu_types:
            gpu_type = sorted(pr.gpu_types)[0]
        else:
            by_type = list(ac.limits.gpu_limit_by_type) + list(ac.limits.max_gpus_per_user_by_type) if ac else []
            gpu_type = (by_type + known_types + ["h100"])[0]
        limits = [x for x in (pr.max_gpus if pr else None, ar.max_gpus if ar else None) if x is not None]
        max_minutes = pr.max_time_s // 60 if pr is not None and pr.max_time_s is not None else None
        minutes = (min(max_minutes, 1440) or None) if max_minutes is not None else 60
        own = ac.labels if ac else {}
        return JobPlan(acct, pname, _checks(policy, pr, ar, qos is not None), gpu_type,
                       min(limits) if limits else 8, pr.gpus_per_node if pr else None, minutes, max_minutes,
                       bool(pr and pr.need_wckey), qos,
                       [(label.key, _label_value(label, own.get(label.key))) for label in policy.labels],
                       f"{note}=x{{i}}")

    plans = [plan for a in accounts for p in policy.partitions if (plan := plan_for(a, p)) is not None]
    if not plans:  # no account may use a partition by name: jobs that name none
        plans = [plan for a in accounts if (plan := plan_for(a, None)) is not None]
    plans.sort(key=lambda plan: -len(plan.checks))  # stable: config order among equals
    return plans


def _rule_rank(policy: CompiledPolicy, rule: str, message: str | None) -> tuple[int, int]:
    """How late a rule comes in the engine's order (label rules: by the label's place in required_labels)."""
    if rule not in RULE_ORDER:
        return (-1, 0)
    label_index = 0
    if rule.startswith("label_") and message:
        for k, label in enumerate(policy.labels):
            if f"{label.key}=" in message:
                label_index = k
    return (RULE_ORDER.index(rule), label_index)


def _checks_until(policy: CompiledPolicy, plan: JobPlan, rule: str, rank: tuple[int, int]) -> tuple[str, ...]:
    """The plan's checks up to the one that rejects (plan.checks are in the engine's order)."""
    stop = f"label:{policy.labels[rank[1]].key}" if rule.startswith("label_") else rule
    return plan.checks[:plan.checks.index(stop) + 1] if stop in plan.checks else plan.checks


def _mutations(plan: JobPlan, policy: CompiledPolicy) -> list[tuple[str, tuple[str, ...]]]:
    """The plan's accepted job changed in one way each, to fail at one rule."""
    out = [("untyped GPUs", plan.argv("untyped")), ("GPU type not the partition's", plan.argv(gpu_type="zz9")),
           ("no GPUs", plan.argv("none")), ("no --wckey", plan.argv(wckey=False))]
    pr = policy.partitions.get(plan.partition) if plan.partition else None
    ar = policy.accounts.get(plan.account)
    for limit in (pr.max_gpus if pr else None, ar.max_gpus if ar else None):
        if limit is not None:
            out.append((f"--gpus={limit + 1}", plan.argv("job", count=limit + 1)))
    if plan.max_minutes is not None:
        out.append(("time over max_time", plan.argv(minutes=plan.max_minutes + 1)))
    for k in range(len(plan.labels) - 1, -1, -1):
        key, _ = plan.labels[k]
        bad = _bad_label_value(policy.labels[k])
        if bad is not None:
            out.append((f"{key} value not allowed", plan.argv(labels=[*plan.labels[:k], (key, bad), *plan.labels[k + 1:]])))
            break
    if plan.labels:
        out.append((f"no {plan.labels[-1][0]} label", plan.argv(labels=plan.labels[:-1])))
    return out


def derive_jobs(cfg: SiteConfig, policy: CompiledPolicy, user: str) -> tuple[list[BenchJob], dict[str, list[str]], list[str]]:
    """Jobs that run every check the policy's richest (account, partition) has: accepted after all of them (with
    per-node and per-task GPUs), rejected at the latest rule any one change reaches, and at the last label's value."""
    py = Evaluator(policy)

    def verdict(argv: tuple[str, ...]) -> tuple[str, str | None]:
        v = py.submit(job_desc_from_options([a.replace("{i}", "0") for a in argv], user=user))
        return v.rule, v.message

    plans = _plans(cfg, policy)
    for k, label in enumerate(policy.labels):
        if plans and all(plan.labels[k][1] is None for plan in plans):
            raise SystemExit(f"{cfg.path}: no --comment value can match label.{label.key} = {label.allowed}: "
                             "the policy rejects every job")
    best: JobPlan | None = None
    last: tuple[str, str | None] = ("", None)
    for plan in plans:
        last = verdict(plan.argv())
        if last[0] == "ok":
            best = plan
            break
    if not plans:
        raise SystemExit(f"{cfg.path}: no non-exempt account may use any partition of the policy: no job to time")
    if best is None:
        raise SystemExit(f"{cfg.path}: no job accepted by the policy could be derived "
                         f"(tried {len(plans)} account/partition pairs; the last got {last[0]}: {last[1]})")
    notes = []
    jobs = [BenchJob(f"accepted (every check, {best.nodes} nodes)", best.argv(), "ok", best.checks)]
    task = best.argv("task")
    if verdict(task)[0] == "ok":
        jobs.append(BenchJob(f"accepted (per-task GPUs, {best.nodes}x{best.per_node} tasks)", task, "ok",
                             best.checks))
    else:
        notes.append(f"per-task GPU job not accepted ({verdict(task)[0]}); not timed")
    # checks the richest pair lacks (e.g. one partition needs a wckey, another typed GPUs): accepted jobs of the
    # pairs that carry them, most new checks first, until every check the policy has is run by some job
    has = {c for p in plans for c in p.checks}
    covered = set(best.checks)
    for _ in range(4):
        gains = sorted(((len(set(p.checks) - covered), k) for k, p in enumerate(plans)), reverse=True)
        extra = next((plans[k] for gain, k in gains[:200] if gain and verdict(plans[k].argv())[0] == "ok"), None)
        if extra is None:
            break
        new = [c for c in extra.checks if c not in covered]
        jobs.append(BenchJob(f"accepted (also {', '.join(new)})", extra.argv(), "ok", extra.checks))
        covered |= set(new)
    # rejected at the latest rule: one change to the accepted job; untyped_gpu (the very last rule) may need
    # another pair than the richest (a partition that does not require typed GPUs)
    found: list[tuple[tuple[int, int], str, str, tuple[str, ...], JobPlan]] = []
    for what, argv in _mutations(best, policy):
        rule, msg = verdict(argv)
        if rule not in ("ok", "exempt"):
            found.append((_rule_rank(policy, rule, msg), rule, what, argv, best))
    if not any(f[1] == "untyped_gpu" for f in found) and "untyped_gpu" in {c for p in plans for c in p.checks}:
        untyped_ok = [p for p in plans if "untyped_gpu" in p.checks and "partition_typed_gpu" not in p.checks]
        for plan in untyped_ok[:200]:
            if verdict(plan.argv())[0] == "ok":
                argv = plan.argv("untyped")
                rule, msg = verdict(argv)
                if rule == "untyped_gpu":
                    found.append((_rule_rank(policy, rule, msg), rule, "untyped GPUs", argv, plan))
                    break
    if found:
        rank, rule, what, argv, plan = max(found, key=lambda f: f[0])
        jobs.append(BenchJob(f"rejected at the last rule ({what})", argv, rule, _checks_until(policy, plan, rule, rank)))
        label_jobs = [f for f in found if f[1] == "label_value"]
        if rule != "label_value" and label_jobs:
            lrank, lrule, lwhat, largv, lplan = label_jobs[0]
            jobs.append(BenchJob(f"rejected at a label ({lwhat})", largv, lrule,
                                 _checks_until(policy, lplan, lrule, lrank)))
    else:
        notes.append("no single change to the accepted job makes the policy reject it")
    has_sorted = sorted(has, key=lambda c: (c.startswith("label:"), c))
    present = {c if not c.startswith("label:") else "label" for c in has}
    lacks = [r for r in RULE_ORDER if r not in present and not (r.startswith("label_") and "label" in present)]
    checks = {"policy_has": has_sorted, "accepted_job_runs": list(best.checks),
              "not_run_by_accepted_job": [c for c in has_sorted if c not in best.checks],
              "not_run_by_any_job": [c for c in has_sorted if c not in covered], "policy_lacks": lacks}
    return jobs, checks, notes


def config_case(path: str) -> BenchCase:
    """A site config, loaded and validated by the project's loader (ConfigError: file:line, field)."""
    cfg = load_config(path)
    policy = compile_policy(cfg)
    user = "alice"
    while user in policy.exempt_users:
        user += "x"
    jobs, checks, notes = derive_jobs(cfg, policy, user)
    return BenchCase(Path(path).name, len(policy.accounts), policy, jobs, user, None, checks, notes)


def verify_case(case: BenchCase, distinct: int, engines: dict[str, str] | None = None) -> None:
    """Before timing: the Python twin and the Lua engine (lupa's Lua 5.1; each of `engines`, e.g. --compare's, with
    the same tables) agree on every job, also with the comments the miss variants feed it, and give the expected
    rule."""
    py = Evaluator(case.policy)
    luas = {name: LuaPolicy(case.text.replace(engine_source(), source)) for name, source in
            (engines or {"current": engine_source()}).items()}
    for bench_job in case.jobs:
        for i in (0, 1, max(2, distinct)):
            job = bench_job.job_desc(case, i)
            v = py.submit(job)
            for name, lua in luas.items():
                got = lua.submit(job)
                agree = got.accepted == v.accepted and (v.accepted or (got.rc == v.rc and got.message == v.message))
                if not agree:
                    raise SystemExit(f"{case.shape}: {bench_job.label}: Lua ({name}: rc={got.rc}, {got.message!r}) "
                                     f"and Python ({v.rc}, {v.message!r}) disagree")
            if bench_job.expect is not None and v.rule != bench_job.expect:
                raise SystemExit(f"{case.shape}: {bench_job.label}: gives {v.rule} ({v.message}), not {bench_job.expect}")



DRIVER = r"""
local src, n, repeats, mode, comments_file = arg[1], tonumber(arg[2]), tonumber(arg[5]), arg[6], arg[7]
local known = {}
for name in string.gmatch(arg[3], "[^,]+") do known[name] = true end
local fields = {}
for kv in string.gmatch(arg[4], "[^\1]+") do
  local k, t, v = string.match(kv, "^([^=]+)=(.)(.*)$")
  if t == "n" then fields[k] = tonumber(v) else fields[k] = v end
end
-- memo miss: the comments of the calls, made before the clock starts (string creation is not timed)
local C, nc = {}, 0
if comments_file ~= "" then
  for line in io.lines(comments_file) do nc = nc + 1; C[nc] = line end
end
dofile(src)
local last_msg, last_log
slurm.user_msg = function(msg) last_msg = msg end -- one message kept, as slurmctld's per-job buffer
slurm.log = function(level, msg) last_log = msg end
slurm.error = function(msg) last_log = msg end
local reads = 0
local counting = setmetatable({}, {__index = function(_, k) reads = reads + 1; if known[k] then return fields[k] end end})
local rc = slurm_job_submit(counting, {}, 0)
local job = fields
if mode ~= "plain" then job = setmetatable({}, {__index = function(_, k) if known[k] then return fields[k] end end}) end
local times = {}
for r = 1, repeats do
  local t0 = os.clock()
  if nc > 0 then
    local j = 0
    for i = 1, n do
      j = j + 1
      if j > nc then j = 1 end
      fields.comment = C[j]
      rc = slurm_job_submit(job, {}, 0)
    end
  else
    for i = 1, n do rc = slurm_job_submit(job, {}, 0) end
  end
  times[r] = (os.clock() - t0) / n * 1e6
end
table.sort(times)
print(string.format("%.6f %s %d", times[1], tostring(rc), reads))
"""

# The memo-miss variant renders the GPU-string memo off (every GPU string is parsed, as when each is new; a site
# cannot send thousands of distinct ones that mean the same job) and feeds every call a comment not seen before
# (the label memo misses, and takes its insertions and drops as in slurmctld).
MEMO_LINE = "local GPU_CACHE_LEN = CACHE_LEN"
MISS_LINE = "local GPU_CACHE_LEN = -1"
OLD_MEMO_LINE = "local CACHE_MAX, CACHE_LEN = 1024, 512"
OLD_MISS_LINE = "local CACHE_MAX, CACHE_LEN = 1024, -1"


def lua51_script(text: str, tmp: Path, tag: str) -> Path:
    script = tmp / f"job_submit-{tag}.lua"
    script.write_text(_MOCK.split("local function proxy")[0] + "\n" + text)  # the mock's slurm table + the script
    return script


def run_lua51(exe: str, script: Path, driver: Path, job: dict, n: int, repeats: int, plain: bool,
              comments: Path | None) -> tuple[float, str, int]:
    encoded = "\1".join(f"{k}={'n' if isinstance(v, (int, float)) else 's'}{v}" for k, v in job.items() if v is not None)
    out = subprocess.run([exe, str(driver), str(script), str(n), ",".join(sorted(JOB_DESC_FIELDS)), encoded, str(repeats),
                          "plain" if plain else "proxy", str(comments) if comments else ""],
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1], int(out[2])


def run_lupa(text: str, job: dict, n: int, repeats: int, plain: bool) -> float:
    lua = LuaPolicy(text)
    lua.bench(job, 100, plain=plain)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()  # CPU time: the machine is shared, wall time would count other work
        lua.bench(job, n, plain=plain)
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "rounds": [round(v, 3) for v in values]}


def comments_file(tmp: Path, tag: str, template: str, count: int) -> Path:
    path = tmp / f"comments-{tag}.txt"
    path.write_text("".join(template.replace("{i}", str(i)) + "\n" for i in range(1, count + 1)))
    return path


def time_case(args: argparse.Namespace, exe: str, tmp: Path, driver: Path, engines: dict[str, str],
              case: BenchCase) -> list[dict]:
    policy, text = case.policy, case.text
    py = Evaluator(policy)
    scripts: dict[str, Path] = {}
    texts: dict[str, str] = {}
    for name, source in engines.items():
        t = text.replace(engine_source(), source)
        texts[name] = t
        tag = f"{case.tag}-{name}"
        if MEMO_LINE in source:
            scripts[f"{name}/hit"] = lua51_script(t, tmp, f"{tag}-hit")
            scripts[f"{name}/cmiss"] = scripts[f"{name}/hit"]  # the same script, fed a new comment per call
            scripts[f"{name}/miss"] = lua51_script(t.replace(MEMO_LINE, MISS_LINE), tmp, f"{tag}-miss")
        elif OLD_MEMO_LINE in source:  # an engine from before the GPU memo had its own switch: both memos off
            scripts[f"{name}/hit"] = lua51_script(t, tmp, f"{tag}-hit")
            scripts[f"{name}/cmiss"] = scripts[f"{name}/hit"]
            scripts[f"{name}/miss"] = lua51_script(t.replace(OLD_MEMO_LINE, OLD_MISS_LINE), tmp, f"{tag}-miss")
        else:
            scripts[f"{name}"] = lua51_script(t, tmp, tag)
    rows = []
    for k, bench_job in enumerate(case.jobs):
        label = bench_job.label
        if args.only not in label:
            continue
        job = bench_job.job_desc(case, 0)
        verdict = py.submit(job)
        comment = bench_job.comment
        miss_comments = None
        if comment and "{i}" in comment:
            count = min(args.n, args.distinct)  # > the memo's 1024 entries: every call misses
            miss_comments = comments_file(tmp, f"{case.tag}-{k}", comment, count)
            for i in (1, 2, count):  # the varied comments must not change the verdict
                v = py.submit({**job, "comment": comment.replace("{i}", str(i))})
                if v.rule != verdict.rule:
                    raise SystemExit(f"{label}: comment {i} gives {v.rule}, not {verdict.rule}")
        t0 = time.process_time()
        for _ in range(20_000):
            py.submit(job)
        py_us = (time.process_time() - t0) / 20_000 * 1e6
        row: dict = {"shape": case.shape, "accounts": case.accounts, "job": label, "verdict": verdict.rule,
                     "python_evaluator_us": round(py_us, 2), "lua5.1": {}}
        if case.checks is not None:
            row["checks"] = bench_job.checks
        times: dict[str, list[float]] = {}
        reads: dict[str, int] = {}
        for r in range(args.rounds):
            keys = [(key, plain) for key in scripts for plain in ((False, True) if args.plain else (False,))]
            if r % 2:
                keys.reverse()
            for key, plain in keys:
                cf = miss_comments if key.endswith("miss") else None
                us, rc, nreads = run_lua51(exe, scripts[key.replace("/cmiss", "/hit")], driver, job, args.n, args.repeats,
                                           plain, cf)
                if (rc == "0") != verdict.accepted:
                    raise SystemExit(f"{key}: Lua verdict rc={rc} differs from Python's {verdict.rule}")
                variant = f"{key} {'plain' if plain else 'proxy'}"
                times.setdefault(variant, []).append(us)
                reads[key] = nreads
        row["lua5.1"] = {v: summary(t) for v, t in times.items()}
        row["field_reads"] = reads
        if args.lupa:
            row["lupa_proxy_us"] = {name: round(run_lupa(t, job, args.n, args.repeats, False), 3)
                                    for name, t in texts.items()}
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="50,500", help="comma-separated account counts (--shape)")
    parser.add_argument("--shape", help="comma-separated policy shapes: big (big_config), wide (wide_config); "
                                        "default big, or none when --config is given")
    parser.add_argument("--config", action="append", default=[], metavar="SITE.conf",
                        help="a site config to time, with jobs derived from its policy (repeatable)")
    parser.add_argument("--n", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per process (best is kept)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant, alternated (median reported)")
    parser.add_argument("--compare", type=Path, help="another engine.lua timed alongside (before/after)")
    parser.add_argument("--distinct", type=int, default=20_000,
                        help="distinct comments cycled in the miss variants (> 1024, the memo's bound)")
    parser.add_argument("--plain", action="store_true", help="also time a plain-table job_desc (the engine alone)")
    parser.add_argument("--only", default="", help="time only the jobs whose label contains this text")
    parser.add_argument("--lupa", action="store_true", help="also time lupa's Lua 5.1 (slower to run)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    cases: list[BenchCase] = []
    for path in args.config:  # every config is loaded and checked before anything is timed
        try:
            cases.append(config_case(path))
        except ConfigError as exc:
            print(f"policy_engine: invalid site config:\n{exc}", file=sys.stderr)
            sys.exit(2)
    shapes = args.shape if args.shape is not None else ("" if args.config else "big")
    for shape in filter(None, shapes.split(",")):
        if shape not in SHAPES:
            parser.error(f"--shape {shape}: not one of {', '.join(SHAPES)}")
        cases += [builtin_case(shape, int(x)) for x in args.accounts.split(",")]
    exe = shutil.which("lua5.1")
    if not exe:
        raise SystemExit("lua5.1 not found (apt-get install lua5.1)")
    engines = {"current": engine_source()}
    if args.compare:
        engines["compare"] = args.compare.read_text()
    for case in cases:
        verify_case(case, min(args.n, args.distinct), engines)
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        driver = tmp / "driver.lua"
        driver.write_text(DRIVER)
        for case in cases:
            results += time_case(args, exe, tmp, driver, engines, case)
    result = {"n": args.n, "repeats": args.repeats, "rounds": args.rounds, "machine": platform.platform(),
              "cpus": os.cpu_count(), "loadavg_end": os.getloadavg(), "python": platform.python_version(),
              "policies": [case.info() for case in cases], "rows": results}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for info in result["policies"]:
        print(f"{info['shape']}: {info['accounts']} accounts, {info['partitions']} partitions, {info['labels']} labels, "
              f"{info['rules']} rules; rendered tables {info['table_bytes']} bytes (job_submit.lua {info['script_bytes']})")
        for what, names in info.get("checks", {}).items():
            print(f"  {what.replace('_', ' ')}: {', '.join(names) or '-'}")
        for label, argv in info.get("jobs", {}).items():
            print(f"  {label}: sbatch {argv}")
        for note in info.get("notes", []):
            print(f"  note: {note}")
    print("us per job, lua5.1, median [min-max] over rounds (best of repeats within each)")
    for row in results:
        print(f"{row['shape']:<5} {row['accounts']:>4} accounts  {row['job']:<38} {row['verdict']:<16} python {row['python_evaluator_us']:.1f} us"
              f"  field reads {row['field_reads']}")
        for variant, st in row["lua5.1"].items():
            print(f"        {variant:<22} {st['median']:7.3f}  [{st['min']:.3f}-{st['max']:.3f}]")
        if "lupa_proxy_us" in row:
            print(f"        lupa proxy {row['lupa_proxy_us']}")
    print(f"load average at the end: {result['loadavg_end']}")


if __name__ == "__main__":
    main()
