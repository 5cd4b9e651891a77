"""`policy replay`: the stored jobs' requests through the submit policy, as `policy check` decides one.

Each request is the job_desc slurmctld would have handed job_submit.lua, rebuilt from what accounting kept:

- the submit line (sacct SubmitLine, since Slurm 21.08): sbatch's argv joined by single spaces, so a value that
  held spaces (`--comment="a b"`, `--wrap "sleep 1; true"`, `-J "x y"`) comes back as several words, its quoting
  gone (quotes in it are the value's own characters: shlex would take them away). The words are read with the
  release's own sbatch option table (sbatch.getopt, as `policy check` reads them); a word that cannot be an option
  or the script where it stands is glued back to the value before it, and the reading that agrees with what
  accounting recorded (JobName: -J, else the script's name, else `wrap`; Comment) is kept. The #SBATCH lines of
  the script are not in the line: what the line leaves unset comes from the recorded fields, the GPU request as
  a whole (the line's GPU options, else the recorded request's GPUs).
- else (no line: a day stored before SubmitLine was fetched; a line of srun or salloc; a line no reading of which
  agrees with the record) the recorded fields: Account, Partition, QOS, WCKey, Comment, Timelimit, NNodes, and
  ReqTRES (without it, as in a day stored before ReqTRES was fetched, AllocTRES) for the GPUs and CPUs. Why the
  fields were used is counted by reason.

What the fields cannot say (README.md, "policy replay"): whether -A was given (the recorded account is the one
Slurm used, default included), whether a time limit was asked for (Timelimit is the partition default when none
was), and a GPU type where accounting tracks untyped GPUs only. Where the line cannot say either, the request is
read one way (a Timelimit that is its partition's default: no --time, as with 22.05's 365 days for an unlimited
partition; an account: given) and also the other way; a submission whose verdict depends on it is counted as
uncertain, by reason. A --wrap line without -A used the user's default account: the recorded one.

An array is one submission (its tasks share one submit line): replayed once, its tasks' GPU-hours summed. A het
job is one submission of several components, each replayed (the line split at its `:` words, or each component's
fields), refused when one is. GPU-hours are allocated GPU-hours (glossary: allocated): GPU-equivalents of AllocTRES
(gpuclust.slurm.gpushare) x Elapsed, over every execution (requeues) and array task.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuclust.errors import InputError
from gpuclust.policy.evaluate import Evaluator, MergedView, Verdict
from gpuclust.policy.sbatch import (
    NO_VAL,
    NO_VAL16,
    OptionTable,
    Parsed,
    SbatchRefusal,
    getopt,
    job_desc_from_options,
    option_table,
)
from gpuclust.slurm.gpushare import allocation_equivalents
from gpuclust.slurm.parse import parse_scontrol_oneliners, parse_slurm_duration, parse_tres

# The job_desc fields of a GPU request: taken from the submit line as a whole when it sets any, else from the fields.
GPU_FIELDS = ("tres_per_job", "tres_per_node", "gres", "tres_per_socket", "tres_per_task", "ntasks_per_tres")
_STUB_SCRIPT = b"#!/bin/sh\n"  # the script is not stored: its #SBATCH lines are the fields' part

# Why a request was read from its fields (counted), and why one could not be replayed at all.
NO_LINE = "no submit line (a day stored before SubmitLine was fetched, or sacct --json of 22.05)"
UNPARSEABLE = "submit line unparseable, used fields"
NOT_SBATCH = "submit line of {prog} (not sbatch), used fields"
HET_MISMATCH = "het job's submit line does not split into its components, used fields"
NO_REQUEST = "no GPU request recorded (no ReqTRES, never allocated)"
BAD_TRES = "request TRES unreadable"
NO_USER = "no user recorded"

# Why a verdict is uncertain: the record cannot say what was asked, and the other reading decides otherwise.
TIME_DEFAULT = "Timelimit = partition default, read as no --time"
TIME_UNKNOWN = "Timelimit, partition defaults unknown, read as --time"
ACCOUNT_RECORDED = "account not on the line, read as -A"
INFINITE = 0xFFFFFFFF  # a job_desc's time_limit for --time=UNLIMITED
YEAR_MINUTES = 365 * 24 * 60  # how 22.05's accounting records an unlimited partition's time limit (sacct: 365-00:00:00)


@dataclass
class Tally:
    """Submissions (an array once), jobs (each array task; a requeued job once) and their allocated GPU-hours;
    `gpu_hours_unknown`: jobs whose GPU-equivalents are unknown (a shard without its node's layout), not summed."""

    submissions: int = 0
    jobs: int = 0
    gpu_hours: float = 0.0
    gpu_hours_unknown: int = 0

    def add(self, sub: Submission) -> None:
        self.submissions += 1
        self.jobs += sub.jobs
        self.gpu_hours += sub.gpu_hours
        self.gpu_hours_unknown += sub.gpu_hours_unknown

    def as_dict(self) -> dict[str, Any]:
        return {"submissions": self.submissions, "jobs": self.jobs, "gpu_hours": round(self.gpu_hours, 3),
                "gpu_hours_unknown_jobs": self.gpu_hours_unknown}


@dataclass
class Submission:
    """One replayed submission: its job_desc per component, how it was read, and what it held."""

    job_id: str
    user: str
    account: str
    partition: str
    descs: list[dict[str, Any]]
    source: str  # "submit_line" or "fields"
    why_fields: str | None
    jobs: int
    gpu_hours: float
    gpu_hours_unknown: int


@dataclass
class Summary:
    """What one config decides over the replayed submissions."""

    accepted: Tally = field(default_factory=Tally)
    refused: Tally = field(default_factory=Tally)
    by_rule: dict[str, Tally] = field(default_factory=dict)
    by_account: dict[str, Tally] = field(default_factory=dict)
    by_user: dict[str, Tally] = field(default_factory=dict)
    warned_by_rule: dict[str, Tally] = field(default_factory=dict)  # rules in warn mode an accepted job failed
    uncertain: dict[str, Tally] = field(default_factory=dict)  # reason -> submissions the other reading decides otherwise
    uncertain_ids: dict[str, list[str]] = field(default_factory=dict)

    def add_uncertain(self, sub: Submission, reason: str) -> None:
        self.uncertain.setdefault(reason, Tally()).add(sub)
        self.uncertain_ids.setdefault(reason, []).append(sub.job_id)

    def add(self, sub: Submission, verdict: Verdict) -> None:
        if verdict.accepted:
            self.accepted.add(sub)
            for rule in dict.fromkeys(w.rule for w in verdict.warnings):
                self.warned_by_rule.setdefault(rule, Tally()).add(sub)
            return
        self.refused.add(sub)
        self.by_rule.setdefault(verdict.rule, Tally()).add(sub)
        self.by_account.setdefault(sub.account, Tally()).add(sub)
        self.by_user.setdefault(sub.user, Tally()).add(sub)

    def as_dict(self) -> dict[str, Any]:
        def rows(d: dict[str, Tally], key: str) -> list[dict[str, Any]]:
            ordered = sorted(d.items(), key=lambda kv: (-kv[1].gpu_hours, -kv[1].jobs, kv[0]))
            return [{key: k, **t.as_dict()} for k, t in ordered]

        return {"accepted": self.accepted.as_dict(), "refused": self.refused.as_dict(),
                "refused_by_rule": rows(self.by_rule, "rule"), "refused_by_account": rows(self.by_account, "account"),
                "refused_by_user": rows(self.by_user, "user"), "warned_by_rule": rows(self.warned_by_rule, "rule"),
                "uncertain": [{"reason": r, **t.as_dict(), "job_ids": self.uncertain_ids[r]}
                              for r, t in sorted(self.uncertain.items())]}


@dataclass
class ReplayResult:
    """`policy replay`'s answer: each config's summary, the submissions whose verdict changes, what was left out."""

    since: str
    until: str
    slurm_version: str
    configs: dict[str, Summary]  # "current", and "new" with --config
    changed: list[dict[str, Any]]  # submissions whose verdict differs between current and new
    rows: int = 0
    replayed: Tally = field(default_factory=Tally)
    from_submit_line: int = 0
    from_fields: dict[str, int] = field(default_factory=dict)  # reason -> submissions
    not_replayed: dict[str, Tally] = field(default_factory=dict)  # reason -> what was left out
    partition_defaults: str = "unknown"  # where the partitions' default time limits came from ("scontrol")

    def as_dict(self) -> dict[str, Any]:
        return {
            "since": self.since, "until": self.until, "slurm_version": self.slurm_version, "rows": self.rows,
            "partition_defaults": self.partition_defaults,
            "replayed": {**self.replayed.as_dict(), "from_submit_line": self.from_submit_line,
                         "from_fields": dict(sorted(self.from_fields.items()))},
            "not_replayed": {**_total(self.not_replayed.values()).as_dict(),
                             "reasons": [{"reason": r, **t.as_dict()} for r, t in sorted(self.not_replayed.items())]},
            "configs": {name: s.as_dict() for name, s in self.configs.items()},
            "changed": {"submissions": len(self.changed), "jobs": sum(c["jobs"] for c in self.changed),
                        "gpu_hours": round(sum(c["gpu_hours"] for c in self.changed), 3), "list": self.changed},
        }


def _total(tallies: Any) -> Tally:
    out = Tally()
    for t in tallies:
        out.submissions += t.submissions
        out.jobs += t.jobs
        out.gpu_hours += t.gpu_hours
        out.gpu_hours_unknown += t.gpu_hours_unknown
    return out


# ---- the request from the recorded fields ---------------------------------------------------------------------

def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v != "" else None


def fields_desc(row: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The job_desc the recorded fields give (22.05's field names), or None and why it cannot be had."""
    if not _text(row.get("user")):
        return None, NO_USER
    tres_text = _text(row.get("req_tres")) or _text(row.get("alloc_tres"))
    if tres_text is None:
        return None, NO_REQUEST
    try:
        tres = parse_tres(tres_text)
        typed = {k[len("gres/gpu:"):]: int(v) for k, v in tres.items() if k.startswith("gres/gpu:")}
        total = int(tres["gres/gpu"]) if "gres/gpu" in tres else sum(typed.values())
        other = [f"{k}={int(v)}" for k, v in tres.items() if k.startswith("gres/") and not k.startswith("gres/gpu")]
        cpus = int(tres["cpu"]) if "cpu" in tres else None
    except Exception as exc:  # noqa: BLE001 - any unreadable value (SlurmOutputError, ValueError): counted
        return None, f"{BAD_TRES} ({type(exc).__name__})"
    items = [f"gres/gpu:{t}={n}" for t, n in typed.items()]
    if total > sum(typed.values()):
        items.append(f"gres/gpu={total - sum(typed.values())}")
    items += other
    nnodes = row.get("nnodes")
    limit = row.get("timelimit_s")
    desc: dict[str, Any] = {
        "user_name": row["user"], "account": _text(row.get("account")), "partition": _text(row.get("partition")),
        "qos": _text(row.get("qos")), "wckey": _text(row.get("wckey")), "comment": _text(row.get("comment")),
        "time_limit": limit // 60 if isinstance(limit, int) else NO_VAL,
        "min_nodes": nnodes if isinstance(nnodes, int) and nnodes > 0 else NO_VAL, "max_nodes": NO_VAL,
        "num_tasks": NO_VAL, "tres_per_job": ",".join(items) or None, "default_account": None, "default_qos": None,
    }
    if cpus:
        desc["min_cpus"] = cpus
    return desc, None


# ---- the request from the submit line ---------------------------------------------------------------------------

def _option_value(parsed_options: Sequence[tuple[str, str | None, str]], name: str | None) -> str | None:
    value = None
    for opt, v, _ in parsed_options:
        if opt == name:
            value = v
    return value


def _agrees(parsed: Parsed, table: OptionTable, expect: Mapping[str, Any], check_name: bool) -> bool:
    """Whether `parsed` (getopt's reading of the words) gives what accounting recorded: the job name (-J, else the
    script's file name, else `wrap`, else `sbatch` for a script from stdin) and the comment (when one was
    recorded)."""
    wrap = any(name == table.key.get("wrap") for name, _, _ in parsed.options)
    if wrap and parsed.operands:
        return False
    name = _option_value(parsed.options, table.key.get("job-name"))
    recorded = _text(expect.get("job_name"))
    if check_name and recorded is not None:
        if name is None:
            name = "wrap" if wrap else (parsed.operands[0].rsplit("/", 1)[-1] if parsed.operands else "sbatch")
        if _stored(name) != _stored(recorded):
            return False
    comment = _option_value(parsed.options, table.key.get("comment"))
    recorded_comment = _text(expect.get("comment"))
    return not (comment is not None and recorded_comment is not None and _stored(comment) != _stored(recorded_comment))


def _stored(text: str) -> str:
    """A name as slurmdbd stores it: its quotes become backquotes (recorded: -J 'acct|pipe "q" ü' reads back as
    acct|pipe `q` ü)."""
    return text.replace('"', "`").replace("'", "`")


_ARGUMENT = re.compile(r"argument (\d+) \(")


def split_words(words: list[str], table: OptionTable, expect: Mapping[str, Any], check_name: bool = True, *,
                version: str = "22.05", gres_names: frozenset[str] = frozenset({"gpu"})
                ) -> tuple[list[str], dict[str, Any], bool] | None:
    """The argv whose words joined by spaces are `words` and whose reading agrees with the record, with its
    job_desc and whether it has --wrap (no script: the line is the whole request); None when there is none.

    Read as sbatch does; where a word cannot stand where it is (an operand after --wrap, an option sbatch does
    not have, a value sbatch refuses), or standing as the script disagrees with the record, it is glued to the
    word before it: the two were one value."""
    args = list(words)
    seen = [0]

    def where(i: int) -> str:
        seen[0] = i
        return f"argument {i + 1}"

    for _ in range(len(words) + 1):
        seen[0] = 0
        try:
            parsed = getopt(args, table, where)
        except SbatchRefusal:
            bad = seen[0]
            if bad == 0:
                return None
            args[bad - 1:bad + 1] = [f"{args[bad - 1]} {args[bad]}"]
            continue
        agrees = _agrees(parsed, table, expect, check_name)
        if parsed.operands and parsed.stop > 0 and not agrees:
            s = parsed.stop
            if args[s - 1] == "--":
                return None
            args[s - 1:s + 1] = [f"{args[s - 1]} {args[s]}"]
            continue
        if not agrees:
            return None
        try:
            desc = job_desc_from_options(args, script=_STUB_SCRIPT, version=version, gres_names=gres_names)
        except InputError as exc:
            m = _ARGUMENT.search(str(exc))
            bad = int(m.group(1)) - 1 if m else 0
            if bad <= 0 or bad >= len(args):
                return None
            args[bad - 1:bad + 1] = [f"{args[bad - 1]} {args[bad]}"]
            continue
        wrap = any(name == table.key.get("wrap") for name, _, _ in parsed.options)
        return args, desc, wrap
    return None


def line_descs(line: str, expects: Sequence[Mapping[str, Any]], fields: list[dict[str, Any]], version: str,
               gres_names: frozenset[str]) -> tuple[list[dict[str, Any]] | None, str | None]:
    """One job_desc per component from the submit line, each over its component's fields (with --wrap, the line
    alone: there is no script to have set more); None and why not."""
    descs, why, _ = line_readings(line, expects, fields, version, gres_names)
    return descs, why


# What a component's line sets itself (the rest came from the fields: the script, or Slurm's defaults), or
# None: the line is the whole request (--wrap).
LineSets = frozenset[str] | None


def line_readings(line: str, expects: Sequence[Mapping[str, Any]], fields: list[dict[str, Any]], version: str,
                  gres_names: frozenset[str]) -> tuple[list[dict[str, Any]] | None, str | None, list[LineSets]]:
    """line_descs, and per component which of time_limit and account the line set (None: --wrap, all of it)."""
    words = line.split(" ")
    prog = words[0].rsplit("/", 1)[-1]
    if prog != "sbatch":
        return None, NOT_SBATCH.format(prog=prog or "?"), []
    table = option_table(version)
    parts: list[list[str]] = [[]]
    for word in words[1:]:
        if word == ":" and len(expects) > 1:
            parts.append([])
        else:
            parts[-1].append(word)
    if len(parts) != len(expects):
        return None, HET_MISMATCH, []
    read = []
    for k, (part, expect) in enumerate(zip(parts, expects, strict=True)):
        got = split_words(part, table, expect, check_name=k == 0, version=version, gres_names=gres_names)
        if got is None:
            return None, UNPARSEABLE, []
        read.append(got)
    wrap = any(w for _, _, w in read)
    out = []
    sets: list[LineSets] = []
    for k, ((_, desc, _), base) in enumerate(zip(read, fields, strict=True)):
        if wrap and k == 0:  # (a later het component gives its own options only: over its fields)
            whole = {**desc, "user_name": base["user_name"]}
            if not _set(desc.get("account")) and base.get("account"):
                # no -A and no script: Slurm used the user's default account, the one it recorded
                whole["default_account"] = base["account"]
            out.append(whole)
            sets.append(None)
        else:
            out.append(merge(desc, base))
            sets.append(frozenset(name for name in ("time_limit", "account") if _set(desc.get(name))))
    return out, None, sets


def _set(v: Any) -> bool:
    return v is not None and not (isinstance(v, (int, float)) and v in (NO_VAL, NO_VAL16))


def merge(line: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The line's job_desc over the fields' one: what the line sets wins; the GPU request comes whole from one
    side (the line's GPU options, else the fields' GPUs: the script's or none)."""
    base = dict(fields)
    if any(_set(line.get(k)) for k in GPU_FIELDS):
        for k in GPU_FIELDS:
            base.pop(k, None)
    view = MergedView({k: v for k, v in line.items() if k not in ("user_name", "default_account", "default_qos")},
                      base)
    return {k: view[k] for k in view}


# ---- what the record cannot say ---------------------------------------------------------------------------------

def partition_time_defaults(text: str) -> dict[str, int | None]:
    """The time limit Slurm gives a job without --time, per partition, from `scontrol -o show partition`: its
    DefaultTime, else its MaxTime; in minutes, None for UNLIMITED."""
    out: dict[str, int | None] = {}
    for rec in parse_scontrol_oneliners(text):
        name = rec.get("PartitionName")
        try:
            secs = parse_slurm_duration(rec.get("DefaultTime"))
            if secs is None:
                secs = parse_slurm_duration(rec.get("MaxTime"))
        except Exception:  # noqa: BLE001 - an unreadable value: that partition's default stays unknown
            continue
        if name and secs is not None:
            out[name] = None if secs < 0 else secs // 60
    return out


def readings(descs: list[dict[str, Any]], fields: list[dict[str, Any]], sets: Sequence[LineSets],
             limits: Mapping[str, int | None] | None) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """The request as replayed, and the other readings of what the record cannot say, by reason.

    A time limit the line did not set is the recorded Timelimit: the script's --time, or the partition's default
    when none was asked for. Equal to that default (`limits`, from scontrol; 22.05 records an unlimited
    partition's as 365 days) it is read as no --time; else, with the defaults unknown, as asked. An account the
    line did not set is the script's -A or the user's default: read as given."""
    primary = [dict(d) for d in descs]
    changes: list[tuple[str, int, dict[str, Any]]] = []
    for k, (desc, base, line_set) in enumerate(zip(primary, fields, sets, strict=True)):
        if line_set is None:
            continue
        if "time_limit" not in line_set:
            rec = base.get("time_limit", NO_VAL)
            part = base.get("partition")
            if limits is not None and isinstance(part, str) and part in limits:
                default = limits[part]
                if default is None and rec in (NO_VAL, YEAR_MINUTES):
                    desc["time_limit"] = NO_VAL
                    changes.append((TIME_DEFAULT, k, {"time_limit": INFINITE}))
                elif default is not None and rec == default:
                    desc["time_limit"] = NO_VAL
                    changes.append((TIME_DEFAULT, k, {"time_limit": default}))
            elif rec == YEAR_MINUTES:
                desc["time_limit"] = NO_VAL
                changes.append((TIME_DEFAULT, k, {"time_limit": rec}))
            elif rec != NO_VAL:
                changes.append((TIME_UNKNOWN, k, {"time_limit": NO_VAL}))
        if "account" not in line_set and _text(desc.get("account")):
            changes.append((ACCOUNT_RECORDED, k, {"account": None, "default_account": desc["account"]}))
    other: dict[str, list[dict[str, Any]]] = {}
    for reason, k, values in changes:
        other.setdefault(reason, [dict(d) for d in primary])[k].update(values)
    return primary, other


# ---- the replay ------------------------------------------------------------------------------------------------

def _equivalents(alloc: str | None, cache: dict[str | None, Fraction | None]) -> Fraction | None:
    if alloc in cache:
        return cache[alloc]
    try:
        value, _ = allocation_equivalents(parse_tres(alloc))
    except Exception:  # noqa: BLE001 - an unreadable AllocTRES: its GPU-hours are unknown, counted
        value = None
    cache[alloc] = value
    return value


def replay(table: Any, evaluators: Mapping[str, Evaluator], *, since: str = "", until: str = "",
           version: str = "22.05", gres_names: frozenset[str] = frozenset({"gpu"}),
           partition_limits: Mapping[str, int | None] | None = None) -> ReplayResult:
    """Replay every submission of `table` (the pyarrow table gpuclust.accounting.stored_requests gives) through
    each evaluator ("current", and "new" to compare with). `partition_limits`: the time limit (minutes, None for
    UNLIMITED) of a job without --time per partition (partition_time_defaults); None when unknown."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    result = ReplayResult(since, until, version, {name: Summary() for name in evaluators}, [], rows=table.num_rows,
                          partition_defaults="unknown" if partition_limits is None else "scontrol")
    n = table.num_rows
    if n == 0:
        return result
    base = np.asarray(table.column("job_base").to_numpy(zero_copy_only=False), dtype=np.int64)
    het = pc.fill_null(pc.cast(table.column("het_offset"), pa.int64()), -1).to_numpy(zero_copy_only=False)
    groups, gid = np.unique(base, return_inverse=True)
    # Allocated GPU-hours per row: the GPU-equivalents of each distinct AllocTRES, times Elapsed.
    alloc = table.column("alloc_tres").combine_chunks()
    if not pa.types.is_dictionary(alloc.type):
        alloc = pc.dictionary_encode(alloc)
    cache: dict[str | None, Fraction | None] = {}
    eq = np.array([(lambda e: math.nan if e is None else float(e))(_equivalents(v, cache))
                   for v in alloc.dictionary.to_pylist()] + [0.0])
    codes = pc.fill_null(alloc.indices, len(alloc.dictionary)).to_numpy(zero_copy_only=False)
    elapsed = pc.fill_null(pc.cast(table.column("elapsed_s"), pa.int64()), 0).to_numpy(zero_copy_only=False) \
        .astype(np.float64)
    row_eq = eq[codes]
    unknown_row = np.isnan(row_eq) & (elapsed > 0)
    hours = np.where(np.isnan(row_eq), 0.0, row_eq) * elapsed / 3600.0
    g_hours = np.bincount(gid, weights=hours, minlength=len(groups))
    # Jobs: distinct JobIDs per group (an array task is a job, a requeued job's executions one); unknown likewise.
    job_codes = pc.dictionary_encode(table.column("job_id").combine_chunks()).indices.to_numpy(zero_copy_only=False)
    pairs = np.unique(np.stack([gid, job_codes.astype(np.int64)], axis=1), axis=0)
    g_jobs = np.bincount(pairs[:, 0], minlength=len(groups))
    unknown_pairs = np.unique(np.stack([gid[unknown_row], job_codes[unknown_row].astype(np.int64)], axis=1), axis=0) \
        if unknown_row.any() else np.empty((0, 2), dtype=np.int64)
    g_unknown = np.bincount(unknown_pairs[:, 0], minlength=len(groups)) if len(unknown_pairs) else \
        np.zeros(len(groups), dtype=np.int64)
    # One row per (submission, het component): the first stored.
    order = np.lexsort((np.arange(n), het, gid))
    first = np.ones(n, dtype=bool)
    first[1:] = (gid[order][1:] != gid[order][:-1]) | (het[order][1:] != het[order][:-1])
    reps = order[first]
    cols = ("job_id", "job_base", "het_offset", "job_name", "user", "account", "partition", "qos", "wckey", "comment",
            "nnodes", "alloc_tres", "timelimit_s", "submit_line", "req_tres")
    picked = table.select(cols).take(pa.array(reps))
    values = {c: picked.column(c).to_pylist() for c in cols}
    rep_gid = gid[reps]
    memo: dict[str, dict[Any, Verdict]] = {name: {} for name in evaluators}
    line_memo: dict[Any, tuple[list[dict[str, Any]] | None, str | None, list[LineSets]]] = {}
    start = 0
    while start < len(reps):
        end = start
        while end < len(reps) and rep_gid[end] == rep_gid[start]:
            end += 1
        g = int(rep_gid[start])
        rows = [{c: values[c][i] for c in cols} for i in range(start, end)]
        start = end
        _replay_one(rows, int(g_jobs[g]), float(g_hours[g]), int(g_unknown[g]), evaluators, memo, line_memo,
                    version, gres_names, partition_limits, result)
    return result


def _replay_one(rows: list[dict[str, Any]], jobs: int, hours: float, unknown: int,
                evaluators: Mapping[str, Evaluator], memo: dict[str, dict[Any, Verdict]],
                line_memo: dict[Any, tuple[list[dict[str, Any]] | None, str | None, list[LineSets]]], version: str,
                gres_names: frozenset[str], limits: Mapping[str, int | None] | None, result: ReplayResult) -> None:
    lead = rows[0]
    job_id = str(lead["job_base"]) if len(rows) > 1 or lead["job_id"] != str(lead["job_base"]) else lead["job_id"]
    fields: list[dict[str, Any]] = []
    for row in rows:
        desc, why = fields_desc(row)
        if desc is None:
            result.not_replayed.setdefault(str(why), Tally()).add(
                Submission(job_id, "", "", "", [], "", None, jobs, hours, unknown))
            return
        fields.append(desc)
    line = _text(lead.get("submit_line"))
    why_fields: str | None = NO_LINE
    descs: list[dict[str, Any]] | None = None
    sets: list[LineSets] = [frozenset()] * len(fields)  # from the fields: nothing set by a line
    if line is not None:
        key = (line, tuple(tuple(sorted(f.items())) for f in fields),
               tuple((r.get("job_name"), r.get("comment")) for r in rows))
        if key not in line_memo:
            line_memo[key] = line_readings(line, rows, fields, version, gres_names)
        descs, why_fields, line_sets = line_memo[key]
        if descs is not None:
            sets = line_sets
    primary, other = readings(descs if descs is not None else fields, fields, sets, limits)
    sub = Submission(job_id, lead["user"], lead.get("account") or "", lead.get("partition") or "", primary,
                     "submit_line" if descs is not None else "fields", why_fields if descs is None else None, jobs,
                     hours, unknown)
    result.replayed.add(sub)
    if descs is not None:
        result.from_submit_line += 1
    else:
        result.from_fields[str(why_fields)] = result.from_fields.get(str(why_fields), 0) + 1
    verdicts = {name: _decide(ev, sub.descs, memo[name]) for name, ev in evaluators.items()}
    uncertain: set[str] = set()
    for name, verdict in verdicts.items():
        result.configs[name].add(sub, verdict)
        for reason, alt in other.items():
            if _decide(evaluators[name], alt, memo[name]).accepted != verdict.accepted:
                result.configs[name].add_uncertain(sub, reason)
                uncertain.add(reason)
    if "new" in verdicts and verdicts["new"].accepted != verdicts["current"].accepted:
        result.changed.append({
            "job_id": job_id, "user": sub.user, "account": sub.account, "partition": sub.partition,
            "source": sub.source, "jobs": jobs, "gpu_hours": round(hours, 3),
            "current": _verdict_dict(verdicts["current"]), "new": _verdict_dict(verdicts["new"]),
            "uncertain": sorted(uncertain)})


def _verdict_dict(v: Verdict) -> dict[str, Any]:
    return {"accepted": v.accepted, "rule": v.rule, "message": v.message}


def _decide(ev: Evaluator, descs: list[dict[str, Any]], memo: dict[Any, Verdict]) -> Verdict:
    """The verdict of the submission: its first component the policy refuses, else the first's (warnings of all)."""
    out: list[Verdict] = []
    for desc in descs:
        key = tuple(sorted(desc.items()))
        verdict = memo.get(key)
        if verdict is None:
            verdict = memo[key] = ev.submit(desc)
        if not verdict.accepted:
            return verdict
        out.append(verdict)
    if len(out) == 1:
        return out[0]
    return Verdict(out[0].rc, out[0].rule, None, tuple(w for v in out for w in v.warnings))


# ---- the table --------------------------------------------------------------------------------------------------

WIDTH = 80  # the table fits an 80-column terminal
_LABEL = 40  # the label column; longer labels wrap, the numbers stay on their first line
_NUMBERS = f"{'submissions':>12} {'jobs':>8} {'GPU-hours':>10}"


def _cut(text: str, width: int) -> str:
    """A name cut to `width`, a `+` marking the cut (as sacct and squeue do)."""
    return text if len(text) <= width else text[:width - 1] + "+"


def _numbers(t: Mapping[str, Any]) -> str:
    unknown = f"  ({t['gpu_hours_unknown_jobs']} jobs' GPU-hours unknown)" if t["gpu_hours_unknown_jobs"] else ""
    return f"{t['submissions']:>12} {t['jobs']:>8} {t['gpu_hours']:>10.1f}{unknown}"


def _row(label: str, numbers: str, indent: int = 2) -> list[str]:
    lines = textwrap.wrap(label, _LABEL - indent, subsequent_indent="  ", break_on_hyphens=False) or [""]
    first = " " * indent + f"{lines[0]:<{_LABEL - indent}} {numbers}".rstrip()
    return [first, *(" " * indent + line for line in lines[1:])]


def _counted(n: int, reason: str) -> list[str]:
    return textwrap.wrap(reason, WIDTH, initial_indent=f"{n:>8}  ", subsequent_indent=" " * 10,
                         break_on_hyphens=False)


def render_table(result: ReplayResult, limit: int = 20) -> str:
    """The replay as plain text for an 80-column terminal: what was replayed, then per config the refusals by
    rule, account and user and the uncertain verdicts, then the changed verdicts (the first `limit`), then why
    requests were read from the fields or not replayed."""
    doc = result.as_dict()
    rep, nr = doc["replayed"], doc["not_replayed"]
    since, until = result.since.replace("T", " "), result.until.replace("T", " ")
    zone = since[19:] if since[19:] == until[19:] else ""  # one offset, said once
    defaults = "time limit defaults from scontrol" if doc["partition_defaults"] == "scontrol" else \
        "partitions' default time limits unknown"
    lines = [f"policy replay: jobs submitted {since[:len(since) - len(zone)]} .. {until[:len(until) - len(zone)]}"
             f"{' ' + zone if zone else ''}",
             f"submit lines read as sbatch {result.slurm_version} does; {defaults}", "",
             f"{'':<{_LABEL}} {_NUMBERS}",
             *_row("replayed", _numbers(rep), 0),
             *_row("from their submit line", f"{rep['from_submit_line']:>12}"),
             *_row("from the recorded fields (why: below)", f"{sum(rep['from_fields'].values()):>12}"),
             *_row("not replayed (why: below)", _numbers(nr), 0)]
    for name, s in doc["configs"].items():
        lines += ["", *_row("current config" if name == "current" else "new config (--config)", _NUMBERS, 0),
                  *_row("accepted", _numbers(s["accepted"])), *_row("refused", _numbers(s["refused"]))]
        for section, key, title in (("refused_by_rule", "rule", "refused, by rule"),
                                    ("refused_by_account", "account", "refused, by account"),
                                    ("refused_by_user", "user", "refused, by user"),
                                    ("warned_by_rule", "rule", "accepted with a warning (warn-mode rule)"),
                                    ("uncertain", "reason", "verdict uncertain, by reason (--json lists the job ids)")):
            if not s[section]:
                continue
            lines.append(f"  {title}")
            for r in s[section]:
                lines += _row(str(r[key] or "(none)"), _numbers(r), 4)
    if "new" in doc["configs"]:
        ch = doc["changed"]
        lines += ["", *_row("verdict changed", _NUMBERS, 0),
                  *_row("current -> new", _numbers({**ch, "gpu_hours_unknown_jobs": 0}))]
        if ch["list"]:
            lines.append(f"  {'job':<10} {'user':<12} {'account':<10} {'GPU-hours':>9}  current -> new")
        shown_ = sorted(ch["list"], key=lambda c: -c["gpu_hours"])[:limit]  # the most GPU-hours first
        for c in shown_:
            cur, new = c["current"], c["new"]
            mark = "?" if c["uncertain"] else " "
            verdicts = f"{'accept' if cur['accepted'] else cur['rule']} -> {'accept' if new['accepted'] else new['rule']}"
            lines.append(f"  {_cut(c['job_id'], 10):<10} {_cut(c['user'], 12):<12} {_cut(c['account'], 10):<10} "
                         f"{c['gpu_hours']:>9.1f}{mark} {verdicts}".rstrip())
        if ch["submissions"] > limit:
            lines.append(f"  ... {ch['submissions'] - limit} more (--json lists them)")
        if any(c["uncertain"] for c in shown_):
            lines.append("  ?: the verdict is uncertain (see \"verdict uncertain\" above)")
    if rep["from_fields"]:
        lines += ["", "read from the recorded fields, not the submit line (submissions, why):"]
        for reason, n in rep["from_fields"].items():
            lines += _counted(n, reason)
    if nr["reasons"]:
        lines += ["", "not replayed (submissions, why):"]
        for r in nr["reasons"]:
            lines += _counted(r["submissions"], r["reason"])
    return "\n".join(lines) + "\n"
