"""One job's figures (`gpuclust job`): sacct's rows of a few named jobs, their GPU use from the best source there
is, and what seff and jobstats give. Pure Python, no pandas: it answers one job in a fraction of a second.

Names follow shared/gpu-hours-glossary.md and report.json's `gpu_use` (allocated, covered, busy, held-idle
GPU-hours, coverage = covered / allocated), computed as figures/gpuuse.py computes them per job:

allocated_gpu_hours   GPUs (AllocTRES gres/gpu) x Elapsed; a job of MIG slices, shards or MPS (GpuShare): its
                      GPU-equivalents x Elapsed (glossary "allocated"), its covered, busy and held-idle scaled
                      alike (GPU-equivalents / devices, as figures/gpuuse.py does), gpu_device_hours the devices'
cpu_efficiency        TotalCPU / (Elapsed x AllocCPUS)
mem_efficiency        the peak MaxRSS over the steps / the memory allocated (AllocTRES mem: ReqMem per node x
                      nodes or per CPU x CPUs, as seff computes it; a dump whose ReqMem says n or c is read so)
time_limit_efficiency Elapsed / Timelimit (None for UNLIMITED)

Sources of the GPU figures, in order (each job says which, and why an earlier one did not answer):
prometheus  [telemetry] prometheus_url: one fetch_telemetry call for all the jobs asked, per GPU
store       the summary `report fetch` stored (figures.storedtelemetry.load_job_telemetry), per GPU
usage_tres  sacct's own TRESUsageInAve/Max/Tot gres/gpuutil and gres/gpumem of the steps, by the rules of
            ingest/usage.py (per job only: no GPU or time detail); held-idle: the whole covered time when the
            mean is under the idle threshold and the job ran at least idle_min. Never for a job on MIG slices:
            gres/gpuutil reads 0 on a MIG instance (NVML gives it none), so its use is unknown there
A job of shards or MPS only (no GPU device of its own) shares a GPU with other jobs: no source can tell its use
from theirs, so none is asked (gpu_util_rule shard or mps, as the report says).

A requeued job (several executions with one id, sacct -D) is shown by its latest execution, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry, JobWindow

# ingest/usage.py's rules and rollup in their numpy-free form (importing usage itself loads numpy and pyarrow)
from gpuclust.accounting.ingest.usage_rules import (
    MEM_UNIT_MIB,
    UsageFigures,
    UsageRow,
    rollup,
    suffixed,
)
from gpuclust.accounting.ingest.usage_rules import clock as _clock
from gpuclust.accounting.ingest.usage_rules import rule_for_version as rule_for_version
from gpuclust.config.telemetry import TelemetryConfig
from gpuclust.errors import InputError, SlurmOutputError
from gpuclust.slurm.gpushare import NodeLayout, allocation_equivalents, is_mig_type, type_share
from gpuclust.slurm.parse import (
    gpu_count,
    gpu_type,
    gpu_types,
    parse_memory_mb,
    parse_slurm_duration,
    parse_slurm_time,
    parse_tres,
    tres_count,
)

RULE_MIG, RULE_SHARD, RULE_MPS = "mig", "shard", "mps"  # figures/gpuuse.py's gpu_util_rule values (numpy-free here)


def clock_seconds(text: str) -> float:
    """`[D-][HH:]MM:SS[.mmm]` (TotalCPU) -> seconds."""
    got = _clock(text.strip())
    if got is None:
        raise ValueError(text)
    return got


@dataclass
class JobRecord:
    """One job as `gpuclust job` reads it from sacct: its row's fields, its steps' usage, its GPU share."""

    job_id: str  # JobID as sacct prints it (123, 123_4, 123+1)
    job_id_raw: str
    requested: str  # the id the caller gave that named it
    user: str
    account: str
    partition: str
    qos: str
    state: str
    exit_code: str
    start: datetime | None
    end: datetime | None  # None: still running
    elapsed_s: float
    timelimit_s: float | None  # None: unknown or UNLIMITED
    alloc_cpus: int | None
    gpus: int
    gpu_type: str | None
    mem_mb: float | None
    nodes: tuple[str, ...]
    nnodes: int
    total_cpu_s: float | None
    max_rss_mb: float | None
    usage: UsageFigures
    executions: int = 1
    line: int = 0
    gpu_mix: str | None = None  # every GPU type of AllocTRES: `1g.10gb`, or `1g.10gb=1,h100=2` (its MIG slices)
    alloc_tres: str = ""
    share: GpuShare | None = None  # its GPU-equivalents where it holds slices, shards or MPS (gpu_share); None: whole

    @property
    def holds_gpu(self) -> bool:
        """Whether the job holds GPU devices or a share of one (shards, MPS)."""
        return self.gpus > 0 or self.share is not None

    @property
    def mig(self) -> bool:
        """Whether the job holds a MIG slice (a MIG profile among its GPU types)."""
        return any(is_mig_type(item.partition("=")[0]) for item in (self.gpu_mix or "").split(",") if item)

    @property
    def running(self) -> bool:
        return self.end is None and self.start is not None


@dataclass(frozen=True)
class GpuShare:
    """A job's GPUs as GPU-equivalents (glossary), where it holds MIG slices, shards or MPS (gpuclust.slurm.gpushare
    counts them; figures/shares.py does the same for the report's rows)."""

    gpu_equivalents: float | None  # None: a share unknown (`warnings` say why)
    mig_profiles: dict[str, int]   # MIG type -> slices held
    shards: int
    mps: int
    rule: str | None               # RULE_SHARD / RULE_MPS: shares only, no GPU device of its own
    basis: str                     # how it was counted, for the text view
    warnings: tuple[str, ...] = ()


def _fraction(share: Fraction | None) -> str:
    return "?" if share is None else str(share)


def gpu_share(record: JobRecord, layouts: Mapping[str, NodeLayout], shards_per_gpu: Mapping[str, int],
              overrides: Mapping[str, Fraction] | None = None) -> GpuShare | None:
    """The job's GpuShare, or None when it holds whole GPUs only (every figure as before). `layouts`: the nodes'
    layouts (scontrol show node), read where the share depends on the node (shards, MPS, an untyped GPU on a MIG
    node); without its nodes' layouts, [partition] shards_per_gpu; as figures/shares.py reads them."""
    try:
        tres = parse_tres(record.alloc_tres)
    except SlurmOutputError:
        return None  # (_record read it already: only a field it ignores can get here)
    typed = {k[len("gres/gpu:"):]: tres_count(v) for k, v in tres.items() if k.startswith("gres/gpu:")}
    migs = {t: n for t, n in sorted(typed.items()) if n and is_mig_type(t, overrides)}
    shards, mps = tres_count(tres.get("gres/shard", "0") or "0"), tres_count(tres.get("gres/mps", "0") or "0")
    found = [layouts[n] for n in record.nodes if n in layouts]
    if not record.nodes or len(found) != len(record.nodes):
        found = []
    untyped_on_mig = any(lay.slices for lay in found) and record.gpus > sum(typed.values())
    if not migs and not shards and not mps and not untyped_on_mig:
        return None
    where = ",".join(record.nodes)
    if found and found[0].gpu_equivalents is not None:
        lay = found[0]
        where += f" {'has' if len(found) == 1 else 'each have'} {_fraction(lay.gpu_equivalents)} GPU(s)" + \
            (f", {lay.shards} shards" if lay.shards else "") + (f", {lay.mps} MPS" if lay.mps else "")
    per_gpu = shards_per_gpu.get(record.partition)
    if not found and per_gpu:
        found, where = [NodeLayout(whole_gpus=1, shards=per_gpu, gpu_equivalents=Fraction(1))], \
            f"[partition {record.partition}] shards_per_gpu = {per_gpu}"
    answers = [allocation_equivalents(tres, lay, overrides) for lay in found] or \
        [allocation_equivalents(tres, None, overrides)]
    values = {a[0] for a in answers}
    warnings = [str(w) for _, ws in answers for w in ws]
    value = values.pop() if len(values) == 1 else None
    if len(values) > 1 and not warnings:  # (values not emptied: several answers)
        warnings.append("the nodes' layouts give different shares: the allocation's split over them is unknown")
    if value is None and not warnings:
        warnings.append("shards per GPU unknown: give [partition NAME] shards_per_gpu (or scontrol show node)")
    parts = [f"MIG {t} x{n} ({_fraction(type_share(t, overrides)[0])} GPU each)" for t, n in migs.items()]
    parts += [f"{t} x{n} (whole GPUs)" for t, n in sorted(typed.items()) if n and t not in migs]
    if shards:
        unit = found[0].shard_share()[0] if found else None
        parts.append(f"{shards} shard{'s' if shards != 1 else ''} ({_fraction(unit)} GPU each"
                     + (f"; {where})" if found else ")"))
    if mps:
        unit = found[0].mps_share()[0] if found else allocation_equivalents({"gres/mps": "1"})[0]
        parts.append(f"{mps} MPS ({_fraction(unit)} GPU each" + (f"; {where})" if found else ")"))
    if untyped_on_mig:
        parts.append(f"{record.gpus - sum(typed.values())} untyped GPU(s) on MIG nodes ({where})")
    rule = None if record.gpus > 0 else RULE_SHARD if shards else RULE_MPS if mps else None
    return GpuShare(None if value is None else float(value), migs, shards, mps, rule, "; ".join(parts),
                    tuple(warnings))


def apply_shares(records: Sequence[JobRecord], layouts: Mapping[str, NodeLayout],
                 shards_per_gpu: Mapping[str, int], overrides: Mapping[str, Fraction] | None = None) -> None:
    """Each record's `share` (gpu_share)."""
    for r in records:
        r.share = gpu_share(r, layouts, shards_per_gpu, overrides)


def _opt(row: Mapping[str, str], name: str) -> str:
    return (row.get(name) or "").strip()


def _step_of(job_id: str, step_id: str) -> bool:
    return step_id.startswith(job_id + ".")


def _executions(rows: Sequence[Mapping[str, str]]) -> list[tuple[Mapping[str, str], list[Mapping[str, str]]]]:
    """Job rows with their step rows (sacct prints each execution's steps right after it)."""
    out: list[tuple[Mapping[str, str], list[Mapping[str, str]]]] = []
    for row in rows:
        jid = _opt(row, "JobID")
        if "." in jid:
            if out and _step_of(_opt(out[-1][0], "JobID"), jid):
                out[-1][1].append(row)
            continue
        out.append((row, []))
    return out


def _matches(requested: str, job_id: str, raw: str) -> bool:
    if job_id == requested:
        return True
    if "_" not in requested and "+" not in requested:
        return job_id.startswith(requested + "_") or job_id.startswith(requested + "+")
    return False


def _usage_row(row: Mapping[str, str], is_step: bool) -> UsageRow:
    """A row as the rollup reads it: its GPUs and Elapsed as the report's reader reads them (0 where unknown)."""
    try:
        gpus = gpu_count(parse_tres(_opt(row, "AllocTRES")))
    except SlurmOutputError:
        gpus = 0
    try:
        elapsed = float(parse_slurm_duration(_opt(row, "Elapsed")) or 0)
    except SlurmOutputError:
        elapsed = 0.0
    return UsageRow(_opt(row, "_line") or "?", is_step, gpus, elapsed, _opt(row, "TRESUsageInAve"),
                    _opt(row, "TRESUsageInMax"), _opt(row, "TRESUsageInTot"), _opt(row, "ConsumedEnergyRaw"))


def _usage(job: Mapping[str, str], steps: Sequence[Mapping[str, str]], gpus: int, elapsed: float, rule: str | None,
           source: str) -> UsageFigures:
    """ingest/usage.py's rollup for one execution (usage_rules.rollup)."""
    return rollup([_usage_row(job, False), *(_usage_row(s, True) for s in steps)], gpus, elapsed, rule, source)


def _mem_asked(tres: Mapping[str, str], row: Mapping[str, str], cpus: int | None, nnodes: int) -> float | None:
    if "mem" in tres:
        return parse_memory_mb(tres["mem"])
    req = _opt(row, "ReqMem")
    if not req:
        return None
    mb = parse_memory_mb(req)
    if mb is None:
        return None
    if req.endswith("c"):
        return mb * cpus if cpus else None
    return mb * max(nnodes, 1)


def _record(requested: str, job: Mapping[str, str], steps: Sequence[Mapping[str, str]], executions: int,
            rule: str | None, source: str, now: datetime) -> JobRecord:
    line = _opt(job, "_line") or "?"

    def field_error(name: str, exc: Exception) -> InputError:
        return InputError(f"{source}:{line}: job {_opt(job, 'JobID')}: field {name} {_opt(job, name)!r}: {exc}")

    try:
        tres = parse_tres(_opt(job, "AllocTRES"))
        gpus = gpu_count(tres)
        typ = gpu_type(tres)
        kinds = gpu_types(tres)
    except SlurmOutputError as exc:
        raise field_error("AllocTRES", exc) from None
    try:
        start = parse_slurm_time(_opt(job, "Start"))
    except SlurmOutputError as exc:
        raise field_error("Start", exc) from None
    try:
        end = parse_slurm_time(_opt(job, "End"))
    except SlurmOutputError as exc:
        raise field_error("End", exc) from None
    state = _opt(job, "State")
    try:
        elapsed = parse_slurm_duration(_opt(job, "Elapsed")) if "Elapsed" in job else None
    except SlurmOutputError as exc:
        raise field_error("Elapsed", exc) from None
    if elapsed is None and start is not None:
        elapsed = int(((end or now) - start).total_seconds())
    try:
        limit = parse_slurm_duration(_opt(job, "Timelimit")) if _opt(job, "Timelimit") else None
    except SlurmOutputError as exc:
        raise field_error("Timelimit", exc) from None
    cpus_text = _opt(job, "AllocCPUS") or tres.get("cpu", "")
    if cpus_text and not cpus_text.isdigit():
        raise field_error("AllocCPUS", ValueError("not a whole number"))
    cpus = int(cpus_text) if cpus_text else None
    nnodes_text = _opt(job, "NNodes")
    nnodes = int(nnodes_text) if nnodes_text.isdigit() else 0
    nodelist = _opt(job, "NodeList")
    nodes: tuple[str, ...] = ()
    if nodelist and nodelist not in ("None assigned", "(null)"):
        from gpuclust.slurm import hostlist

        try:
            nodes = tuple(hostlist.expand(nodelist))
        except SlurmOutputError as exc:
            raise field_error("NodeList", exc) from None
    try:
        mem = _mem_asked(tres, job, cpus, nnodes or len(nodes))
    except SlurmOutputError:
        mem = None  # (a pending job's ReqMem can read `16?`: unknown, not an error)
    total_cpu: float | None = None
    if _opt(job, "TotalCPU"):
        try:
            total_cpu = clock_seconds(_opt(job, "TotalCPU"))
        except ValueError:
            raise field_error("TotalCPU", ValueError("not [D-][HH:]MM:SS")) from None
    rss: list[float] = []
    for row in [job, *steps]:
        text = _opt(row, "MaxRSS")
        if text:
            try:
                got = suffixed(text, MEM_UNIT_MIB)
                if got is None:
                    raise ValueError(text)
                rss.append(got)
            except ValueError:
                raise InputError(f"{source}:{_opt(row, '_line') or '?'}: step {_opt(row, 'JobID')}: field MaxRSS "
                                 f"{text!r} is not a size") from None
    usage = _usage(job, steps, gpus, float(elapsed or 0), rule, source)
    return JobRecord(
        job_id=_opt(job, "JobID"), job_id_raw=_opt(job, "JobIDRaw") or _opt(job, "JobID"), requested=requested,
        user=_opt(job, "User"), account=_opt(job, "Account"), partition=_opt(job, "Partition"), qos=_opt(job, "QOS"),
        state=state, exit_code=_opt(job, "ExitCode"), start=start,
        end=end if (end is not None or not state.startswith(("RUNNING", "SUSPENDED", "REQUEUED"))) else None,
        elapsed_s=float(elapsed or 0), timelimit_s=float(limit) if limit is not None and limit > 0 else None,
        alloc_cpus=cpus, gpus=gpus, gpu_type=typ, mem_mb=mem, nodes=nodes, nnodes=nnodes or len(nodes),
        total_cpu_s=total_cpu, max_rss_mb=max(rss) if rss else usage.mem_max_mb, usage=usage,
        executions=executions, line=int(line) if line.isdigit() else 0, alloc_tres=_opt(job, "AllocTRES"),
        gpu_mix=(next(iter(kinds)) if len(kinds) == 1 else ",".join(f"{k}={n}" for k, n in sorted(kinds.items()))
                 if kinds else None))


def select_jobs(rows: Sequence[Mapping[str, str]], requested: Sequence[str], *, rule: str | None = None,
                source: str = "sacct", now: datetime | None = None) -> tuple[list[JobRecord], list[str]]:
    """The jobs each requested id names (a whole array: each task; a het job: each component; a requeued job:
    its latest execution), in the order asked; and the ids no row names. A job named twice is shown once."""
    now = now or datetime.now(timezone.utc)
    execs = _executions(rows)
    out: list[JobRecord] = []
    unknown: list[str] = []
    seen: set[str] = set()
    for req in requested:
        found: dict[str, list[tuple[Mapping[str, str], list[Mapping[str, str]]]]] = {}
        for job, steps in execs:
            jid, raw = _opt(job, "JobID"), _opt(job, "JobIDRaw")
            if _matches(req, jid, raw):
                found.setdefault(jid, []).append((job, steps))
        if not found and req.isdigit():  # an array task or het component asked by its own JobIDRaw
            for job, steps in execs:
                if _opt(job, "JobIDRaw") == req:
                    found.setdefault(_opt(job, "JobID"), []).append((job, steps))
        if not found:
            unknown.append(req)
            continue
        for jid, runs in found.items():
            if jid in seen or "[" in jid:  # (an array's pending tasks: no execution)
                continue
            seen.add(jid)
            job, steps = runs[-1]
            out.append(_record(req, job, steps, len(runs), rule, source, now))
    return out, unknown


# ---- GPU figures -------------------------------------------------------------------------------------------

@dataclass
class JobFigures:
    """One job's figures: the gpu_use names, its efficiencies, and per GPU where the source has them."""
    record: JobRecord
    source: str | None  # prometheus, store, usage_tres, None (unknown)
    source_notes: list[str] = field(default_factory=list)  # why an earlier source did not answer
    allocated_gpu_s: float = 0.0
    covered_gpu_s: float | None = None
    busy_gpu_s: float | None = None
    held_idle_gpu_s: float | None = None
    util_mean_pct: float | None = None
    util_max_pct: float | None = None
    gpu_mem_max_mib: float | None = None
    gpu_mem_total_mib: float | None = None
    energy_j: float | None = None
    gpus: list[GpuTelemetry] = field(default_factory=list)
    # a job of slices, shards or MPS (record.share): the figures above are in GPU-equivalents (to_equivalents);
    # device_gpu_s keeps its devices' seconds, and allocated is unknown where its share is
    device_gpu_s: float | None = None
    allocated_known: bool = True

    @property
    def coverage(self) -> float | None:
        if self.covered_gpu_s is None or not self.allocated_known or self.allocated_gpu_s <= 0:
            return None
        return self.covered_gpu_s / self.allocated_gpu_s

    @property
    def gpu_util_rule(self) -> str | None:
        """The report's gpu_util_rule of this job: shard / mps (shares only), mig (a MIG slice whose usage TRES
        was set aside), else the usage rule (None without gres/gpuutil)."""
        share = self.record.share
        if share is not None and share.rule is not None:
            return share.rule
        if self.record.mig and self.record.usage.gpu_util_gpu_s is not None:
            return RULE_MIG
        return self.record.usage.rule

    @property
    def cpu_efficiency(self) -> float | None:
        r = self.record
        used = r.total_cpu_s if r.total_cpu_s is not None else r.usage.cpu_used_s
        if used is None or not r.alloc_cpus or r.elapsed_s <= 0:
            return None
        return used / (r.elapsed_s * r.alloc_cpus)

    @property
    def mem_efficiency(self) -> float | None:
        r = self.record
        if r.max_rss_mb is None or not r.mem_mb:
            return None
        return r.max_rss_mb / r.mem_mb

    @property
    def time_limit_efficiency(self) -> float | None:
        r = self.record
        if r.timelimit_s is None:
            return None
        return r.elapsed_s / r.timelimit_s


SHARED_NOTES = {
    RULE_SHARD: "a job of shards shares its GPU with other jobs: its own utilisation cannot be told apart from "
                "theirs, by any source (gpu_util_rule shard): unknown, not 0",
    RULE_MPS: "a job of MPS shares its GPU with other jobs: its own utilisation cannot be told apart from theirs, "
              "by any source (gpu_util_rule mps): unknown, not 0",
}


def to_equivalents(fig: JobFigures) -> None:
    """A job of slices, shards or MPS in GPU-equivalents: allocated = its GPU-equivalents x Elapsed, its covered,
    busy and held-idle scaled by GPU-equivalents / devices (figures/gpuuse.py), so its utilisation stays what
    its devices showed. An unknown share leaves allocated and those figures unknown."""
    r, share = fig.record, fig.record.share
    if share is None:
        return
    fig.device_gpu_s = r.gpus * r.elapsed_s
    if share.gpu_equivalents is None:
        fig.allocated_known = False
        fig.allocated_gpu_s = 0.0
        fig.covered_gpu_s = fig.busy_gpu_s = fig.held_idle_gpu_s = None
        return
    fig.allocated_gpu_s = share.gpu_equivalents * r.elapsed_s
    scale = share.gpu_equivalents / r.gpus if r.gpus > 0 else 0.0
    if fig.covered_gpu_s is not None:
        fig.covered_gpu_s *= scale
    if fig.busy_gpu_s is not None:
        fig.busy_gpu_s *= scale
    if fig.held_idle_gpu_s is not None:
        fig.held_idle_gpu_s *= scale


MIG_USAGE_NOTE = ("a MIG slice: gres/gpuutil reads 0 on a MIG instance (NVML gives it no utilisation), so its "
                  "GPU use is unknown, not 0")


def window_of(record: JobRecord, key: object, now: datetime, join: str = "hpc_job") -> JobWindow | None:
    """The job's telemetry window: [Start, End), a running job's up to now."""
    if record.start is None or record.gpus <= 0:
        return None
    end = record.end or now
    if end <= record.start:
        return None
    return JobWindow(record.job_id_raw, record.start, end, record.gpus, key=key,
                     nodes=record.nodes if join == "node" else (), gpu_type=record.gpu_mix)


def _from_telemetry(fig: JobFigures, tel: JobTelemetry, source: str) -> None:
    # held to the glossary's order (gpuuse.hold_invariants): held-idle <= covered <= allocated, busy <= covered
    covered = max(0.0, min(tel.covered_gpu_s, fig.allocated_gpu_s)) if fig.allocated_gpu_s > 0 else tel.covered_gpu_s
    fig.source = source
    fig.covered_gpu_s = covered
    fig.busy_gpu_s = max(0.0, min(tel.busy_gpu_s, covered))
    fig.held_idle_gpu_s = max(0.0, min(tel.held_idle_gpu_s, covered))
    fig.util_mean_pct = tel.util_mean_pct
    fig.util_max_pct = tel.util_max_pct
    fig.gpu_mem_max_mib = tel.fb_used_max_mib
    fig.gpu_mem_total_mib = tel.fb_total_mib
    if fig.energy_j is None:
        fig.energy_j = tel.energy_j
    fig.gpus = list(tel.gpus)


def _from_usage(fig: JobFigures, tel: TelemetryConfig) -> bool:
    u, r = fig.record.usage, fig.record
    if u.gpu_util_gpu_s is None or u.gpu_busy_gpu_s is None or r.mig:
        return False
    covered = min(u.gpu_util_gpu_s, fig.allocated_gpu_s)
    busy = min(u.gpu_busy_gpu_s, covered)
    mean = busy / covered * 100 if covered > 0 else None
    fig.source = "usage_tres"
    fig.covered_gpu_s = covered
    fig.busy_gpu_s = busy
    fig.held_idle_gpu_s = covered if (mean is not None and mean < tel.idle_threshold_pct
                                      and r.elapsed_s >= tel.idle_min_s) else 0.0
    fig.util_mean_pct = mean
    fig.util_max_pct = u.gpu_util_max_pct
    fig.gpu_mem_max_mib = u.gpu_mem_max_mb
    return True


def _unreadable(store_root: Path) -> str | None:
    """Why the store cannot be read (none there, or not readable by this user), or None when it can be."""
    try:
        if not store_root.exists():
            return f"none at {store_root} (`gpuclust report fetch` writes it)"
        os.listdir(store_root)
    except OSError as exc:
        return f"cannot read {store_root} ({exc.strerror or exc}): the next source answers"
    return None


def _days_of(record: JobRecord, now: datetime) -> list[date]:
    """The UTC days whose stored rows can hold this job's summary: `report fetch` stores it under a day its rows
    were fetched for, from its start through its end (or now)."""
    if record.start is None:
        return []
    first = record.start.astimezone(timezone.utc).date()
    last = (record.end or now).astimezone(timezone.utc).date()
    if (last - first).days > 366:  # (a window this long: search every stored day instead)
        return []
    return [first + timedelta(days=k) for k in range((last - first).days + 1)]


def job_figures(records: Sequence[JobRecord], tel: TelemetryConfig, *, prometheus: Mapping[int, JobTelemetry] | None,
                prometheus_note: str | None, store_root: Path | None, now: datetime,
                cluster: str | None = None) -> list[JobFigures]:
    """Each job's figures from the first source that has them (module docstring). `prometheus`: fetch_telemetry's
    jobs by the record's index (None: not asked, `prometheus_note` says why)."""
    figs = []
    for r in records:
        fig = JobFigures(record=r, source=None, allocated_gpu_s=r.gpus * r.elapsed_s, energy_j=r.usage.energy_j)
        figs.append(fig)
    gpu_jobs = [f for f in figs if f.record.gpus > 0]
    for f in figs:
        share = f.record.share
        if share is not None and share.rule is not None:
            f.source_notes.append(f"{share.rule}: {SHARED_NOTES[share.rule]}")
        elif f.record.gpus <= 0:
            f.source_notes.append("no GPUs allocated (AllocTRES has no gres/gpu)")
    missing = []
    for i, f in enumerate(figs):
        if f.record.gpus <= 0:
            continue
        got = prometheus.get(i) if prometheus is not None else None
        if got is not None:
            _from_telemetry(f, got, "prometheus")
            continue
        if prometheus is None:
            f.source_notes.append(f"prometheus: {prometheus_note or 'not asked'}")
        else:
            f.source_notes.append("prometheus: no utilisation series for this job in its window (past the "
                                  "retention, or no job label on its GPUs)")
        missing.append(f)
    unreadable = _unreadable(store_root) if missing and store_root is not None else None
    if missing and store_root is not None and unreadable is not None:
        # (a user's own `gpuclust job` may not read the site's store: then the next source answers)
        for f in missing:
            f.source_notes.append(f"store: {unreadable}")
    elif missing and store_root is not None:
        # (imported here: the store's reader loads pyarrow, which a job Prometheus answered never needs)
        from gpuclust.accounting.figures.storedtelemetry import load_job_telemetry

        days = {d for f in missing for d in _days_of(f.record, now)}
        warned: list[str] = []
        try:
            stored = load_job_telemetry(store_root, [f.record.job_id_raw for f in missing], days=days or None,
                                        cluster=cluster, warnings=warned)
        except OSError as exc:
            stored, warned = {}, [f"cannot read {store_root} ({exc.strerror or exc})"]
        for f in missing:
            f.source_notes.extend(f"store: {w}" for w in warned)
            got = stored.get(f.record.job_id_raw)
            if got is not None:
                _from_telemetry(f, got, "store")
            else:
                f.source_notes.append(f"store: no stored telemetry summary for job {f.record.job_id_raw} under "
                                      f"{store_root}")
    elif missing:
        for f in missing:
            f.source_notes.append("store: no store configured")
    for f in gpu_jobs:
        if f.source is not None:
            continue
        if not _from_usage(f, tel):
            u = f.record.usage
            if f.record.mig and u.problem is None:
                f.source_notes.append(f"usage_tres: {MIG_USAGE_NOTE} (GPU type {f.record.gpu_mix})")
                continue
            f.source_notes.append(f"usage_tres: {u.problem}" if u.problem else
                                  "usage_tres: no step recorded gres/gpuutil (Slurm before 23.02, or no gpu/nvml "
                                  "plugin): GPU use unknown, not 0")
    for f in figs:
        to_equivalents(f)
    return figs


def whole_window(records: Sequence[JobRecord], now: datetime) -> tuple[datetime, datetime] | None:
    """The period covering every job's window (for one fetch_telemetry call)."""
    wins = [(r.start, r.end or now) for r in records if r.start is not None and r.gpus > 0]
    if not wins:
        return None
    return min(s for s, _ in wins), max(e for _, e in wins)


def as_utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


def share_of(partition: str, nodes: Sequence[Any]) -> Any:
    """The partition's CPUs and memory per GPU and its largest GPU node, from NodeRecords (waste.PartitionShare);
    None when none of its nodes has GPUs."""
    from gpuclust.accounting.figures.waste import PartitionShare

    cpus = mem = gpus = 0
    best: tuple[int, int] = (0, 0)
    mem_known = True
    for node in nodes:
        if partition not in node.partitions:
            continue
        n_gpus = sum(g.count for g in node.gres if g.name == "gpu") if node.gres else 0
        if not n_gpus and node.cfg_tres:
            try:
                n_gpus = gpu_count(parse_tres(node.cfg_tres))
            except SlurmOutputError:
                n_gpus = 0
        if n_gpus <= 0:
            continue
        gpus += n_gpus
        cpus += node.cpus or 0
        if node.real_memory_mb:
            mem += node.real_memory_mb
        else:
            mem_known = False
        best = max(best, (n_gpus, node.cpus or 0))
    if gpus <= 0:
        return None
    return PartitionShare(partition, cpus / gpus if cpus else None, mem / gpus if mem and mem_known else None,
                          best[0], best[1] or None)
