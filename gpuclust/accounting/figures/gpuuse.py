"""Use, not only allocation: how much of the allocated GPU time did work (report.json `gpu_use` and the
`gpu_use_*` tables; output/gpuuse_render.py draws them for the page and the textfile).

Names follow shared/gpu-hours-glossary.md, and each is defined once, in figures.catalog (DEFINITIONS here, the
report's definitions table, is made from it):

* allocated: GPUs allocated to a job (GPU-equivalents: a MIG slice, shard or MPS as its share of one GPU) x its
  Elapsed, per job that ended in the period (as the rest of the report counts it);
* coverage: the share of allocated GPU-hours that has utilisation telemetry. A job is covered by the
  Prometheus source (dcgm-exporter series carrying its job id) where one is configured and has its series,
  else by Slurm's usage TRES (a step recorded gres/gpuutil), else not at all: its busy and held-idle figures
  are unknown, counted in `unknown_jobs`, never 0. A job on MIG slices (its GPU type a MIG profile, alone or in
  a mix) has no usage-TRES utilisation: NVML gives a MIG instance none, so gres/gpuutil reads 0 there; its
  figure is unknown (gpu_util_rule `mig`), and only Prometheus (mig_util_metric) covers it. A job of shards or
  MPS only (no GPU device of its own) shares a GPU with other jobs: it counts in allocated (its GPU-equivalents)
  and its utilisation is unknown, from any source (gpu_util_rule `shard` or `mps`), never 0 or held idle;
* busy: covered GPU-hours x measured mean per-GPU utilisation;
* held-idle: covered GPU-hours during which a GPU ran under `idle_threshold` for at least `idle_min`. From
  Prometheus, the idle stretches of each GPU's series; from usage TRES (an average, no time series), the
  job's whole covered time when its mean utilisation is under the threshold and it ran at least `idle_min`.

Per job it also gives what seff/jobstats give: mean and max GPU utilisation, GPU memory peak against the
GPU's memory (Prometheus), energy (kWh: ConsumedEnergyRaw, else the integral of DCGM power), CPU
efficiency (CPU time / (Elapsed x CPUs)) and memory efficiency (peak RSS / allocated memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures import catalog, findings
from gpuclust.accounting.figures.jsonrecords import records
from gpuclust.accounting.figures.lemon import GpuEvents
from gpuclust.slurm import hostlist

if TYPE_CHECKING:
    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.accounting.figures.waste import PartitionShare
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.config import SiteConfig
    from gpuclust.config.telemetry import TelemetryConfig

WORST_JOBS = 20
WORST_COLUMNS = ("job_id", "user", "account", "partition", "gpus", "allocated_gpu_hours", "held_idle_gpu_hours",
                 "util_mean_pct", "telemetry")
DIMENSIONS = ("user", "account", "partition")
DEFINITIONS: dict[str, str] = catalog.definitions(catalog.GPU_USE)  # (report.json: gpu_use.<key>)
FINDING_DEFINITIONS: dict[str, str] = catalog.definitions(catalog.FINDINGS)  # (report.json: findings.<key>)


def _ended_jobs(table: pa.Table, period: Period) -> pd.DataFrame:
    cols = ["job_id", "job_id_raw", "user", "account", "partition", "gpus", "elapsed_s", "start", "end",
            "alloc_tres", "nodelist", "mem_mb", "gpu_util_gpu_s", "gpu_busy_gpu_s", "gpu_util_max_pct", "gpu_mem_max_mb",
            "cpu_used_s", "mem_max_mb", "energy_j", "gpu_util_rule", "state", "exit_code", "exit_signal", "job_name",
            "gpu_type", "timelimit_s", "nnodes"]
    present = [c for c in [*cols, "gpu_equivalents"] if c in table.column_names]
    t = table.select(present)
    lo = pa.scalar(period.start, pa.timestamp("s", tz="UTC"))
    hi = pa.scalar(period.end, pa.timestamp("s", tz="UTC"))
    end = t.column("end")
    if pa.types.is_timestamp(end.type) and end.type.tz is None:
        end = end.cast(pa.timestamp("s", tz="UTC"))
    mask = pc.and_(pc.and_(pc.greater_equal(end, lo), pc.less(end, hi)), pc.is_valid(t.column("start")))
    frame = t.filter(pc.fill_null(mask, False)).to_pandas()
    for c in cols:
        if c not in frame.columns:
            frame[c] = None if c in ("gpu_util_rule", "job_name", "gpu_type") else np.nan
    for c in ("user", "account", "partition", "job_id", "gpu_util_rule", "state", "nodelist", "job_name",
              "gpu_type"):  # (not alloc_tres)
        if isinstance(frame[c].dtype, pd.CategoricalDtype):
            frame[c] = frame[c].astype(object)
    return frame


def _cpus(alloc_tres: pd.Series) -> np.ndarray:
    """The cpu count of each AllocTRES (NaN where it has none): read once per distinct AllocTRES."""
    if isinstance(alloc_tres.dtype, pd.CategoricalDtype):
        codes, distinct = alloc_tres.cat.codes.to_numpy(), alloc_tres.cat.categories.to_numpy(dtype=object)
    else:
        codes, uniques = pd.factorize(alloc_tres)
        distinct = np.asarray(uniques, dtype=object)
    text = pa.array(distinct, pa.string(), from_pandas=True)
    got = pc.struct_field(pc.extract_regex(text, r"(?:^|,)cpu=(?P<n>[0-9]+)"), [0])
    cpus = np.append(np.asarray(pc.cast(got, pa.float64()).to_numpy(zero_copy_only=False), dtype=float), np.nan)
    return cpus[np.asarray(codes)]  # (code -1, no AllocTRES: the NaN last)


@dataclass
class _JobFigures:
    """job_use's per-job columns while its steps work them out, numpy arrays with NaN for unknown: the job's
    Elapsed (s) and GPUs, as read once; GPU-seconds allocated, covered, busy and held idle; mean and max
    utilisation (%); GPU memory peak and total (MiB); energy (J); where the utilisation came from (`source`) and
    the rule that left it unknown (`rules`)."""

    elapsed: np.ndarray
    gpus: np.ndarray
    alloc_s: np.ndarray
    covered: np.ndarray
    busy: np.ndarray
    held: np.ndarray
    mean: np.ndarray
    util_max: np.ndarray
    gmem: np.ndarray
    fb_total: np.ndarray
    energy_j: np.ndarray
    source: np.ndarray
    rules: pd.Series


def job_use(table: pa.Table, config: SiteConfig, period: Period, *, store_root: Path | None = None,
            shares: Mapping[str, PartitionShare] | None = None, equivalents: np.ndarray | None = None
            ) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per job that ended in the period and holds GPUs, with its use figures; and the source info
    (info["findings"]: the waste detectors' findings over those jobs, figures/findings.py, with `shares` the
    partitions' shares per GPU). `store_root`: the store the rows came from, whose telemetry summaries
    (storedtelemetry.for_report) give the jobs Prometheus no longer has their figures. `equivalents`: each
    table row's GPU-equivalents (figures.shares; None: whole GPUs): the allocated basis."""
    if equivalents is not None:
        table = table.append_column("gpu_equivalents", pa.array(equivalents, pa.float64()))
    jobs = _ended_jobs(table, period)
    holds = pd.to_numeric(jobs["gpus"], errors="coerce").fillna(0) > 0
    if "gpu_equivalents" in jobs.columns:  # (a shard or MPS job holds part of a GPU; NaN, unknown: held still)
        holds |= jobs["gpu_equivalents"].astype(float).fillna(1.0) != 0
    jobs = jobs[holds].reset_index(drop=True)
    tel = config.telemetry
    kind = _gpu_kind(jobs, config) if len(jobs) else None
    shared = shared_rules(jobs)
    figures = _usage_tres_figures(jobs, tel)
    _unknown_where_shared(figures, jobs, mig_rows(kind), shared)
    info: dict[str, Any] = {"prometheus": None}
    per_gpu: dict[int, Any] = {}  # row -> its GPUs' telemetry (GpuTelemetry), for the waste detectors
    if tel.prometheus_url and len(jobs):
        info["prometheus"], per_gpu = _prometheus_figures(figures, jobs, shared, config, period, store_root)
    if "gpu_equivalents" in jobs.columns:
        _in_equivalents(figures, jobs)
    clamped = hold_invariants(figures.alloc_s, figures.covered, figures.busy, figures.held)
    if clamped and info["prometheus"] is not None:
        info["prometheus"]["warnings"] += 1
        info["prometheus"]["warning_list"] = (info["prometheus"]["warning_list"] + [
            f"telemetry: {clamped} job(s) had more covered, busy or held-idle GPU-seconds than allocated (Elapsed "
            "shorter than End - Start: a suspended job?): held to held-idle <= covered <= allocated, busy <= "
            "covered"])[:50]
    cpus = _cpus(jobs["alloc_tres"])
    facts = jobs.assign(gpu_mem_max_mb=figures.gmem) if len(jobs) else jobs
    info["findings"] = findings.job_findings(facts, cpus, figures.fb_total, per_gpu, shares or {}, config)
    info["gpu_events"] = _gpu_events(jobs["job_id"], per_gpu)
    return _job_frame(jobs, figures, cpus, config, kind), info


def _usage_tres_figures(jobs: pd.DataFrame, tel: TelemetryConfig) -> _JobFigures:
    """job_use's step 1: each job's figures as Slurm recorded them (usage TRES, AllocTRES, the job's own
    fields). Held idle: its whole covered time when its mean is under idle_threshold and it ran idle_min."""
    idle_pct, idle_min = float(tel.idle_threshold_pct), float(tel.idle_min_s)
    elapsed = jobs["elapsed_s"].to_numpy(dtype=float)
    gpus = jobs["gpus"].to_numpy(dtype=float)
    # copies: later steps overwrite them in place (an Arrow-backed column's array is read-only)
    covered = jobs["gpu_util_gpu_s"].to_numpy(dtype=float, copy=True)
    busy = jobs["gpu_busy_gpu_s"].to_numpy(dtype=float, copy=True)
    mean = np.where(covered > 0, busy / np.where(covered > 0, covered, 1) * 100, np.nan)
    held = np.where(np.isnan(covered), np.nan,
                    np.where((mean < idle_pct) & (elapsed >= idle_min), covered, 0.0))
    return _JobFigures(
        elapsed=elapsed, gpus=gpus, alloc_s=gpus * elapsed, covered=covered, busy=busy, held=held, mean=mean,
        util_max=jobs["gpu_util_max_pct"].to_numpy(dtype=float, copy=True),
        gmem=jobs["gpu_mem_max_mb"].to_numpy(dtype=float, copy=True), fb_total=np.full(len(jobs), np.nan),
        energy_j=jobs["energy_j"].to_numpy(dtype=float, copy=True), source=np.full(len(covered), None, dtype=object),
        rules=jobs["gpu_util_rule"])


def _unknown_where_shared(figures: _JobFigures, jobs: pd.DataFrame, mig: np.ndarray,
                          shared: np.ndarray | None) -> None:
    """job_use's step 2: utilisation unknown, never 0 or held idle, where the device is not the job's alone
    (gpu_util_rule mig; shard or mps, `shared`: shared_rules); then `source` usage_tres where a figure is left."""
    f = figures
    if mig.any():  # (usage TRES on a MIG slice reads 0 whatever it did: unknown, never held idle)
        f.covered[mig] = f.busy[mig] = f.held[mig] = f.mean[mig] = f.util_max[mig] = np.nan
        f.rules = f.rules.astype(object).where(~(mig & jobs["gpu_util_gpu_s"].notna().to_numpy()), RULE_MIG)
    # A shard or MPS job (no GPU device of its own) shares a GPU with others: its utilisation cannot be told
    # apart from theirs, by usage TRES or by telemetry: unknown, never 0 or held idle (gpu_util_rule shard, mps).
    if shared is not None:
        at = shared != None  # noqa: E711 (an object array: elementwise)
        f.covered[at] = f.busy[at] = f.held[at] = f.mean[at] = f.util_max[at] = np.nan
        f.rules = f.rules.astype(object).where(~at, shared)
    f.source[~np.isnan(f.covered)] = "usage_tres"


def _prometheus_figures(figures: _JobFigures, jobs: pd.DataFrame, shared: np.ndarray | None, config: SiteConfig,
                        period: Period, store_root: Path | None) -> tuple[dict[str, Any], dict[int, Any]]:
    """job_use's step 3: where Prometheus (or the store's telemetry summaries) has a job's series, its figures
    replace Slurm's. Returns report.json's gpu_use.prometheus, and each covered row's GPUs (GpuTelemetry)."""
    from gpuclust.accounting.figures.telemetry import JobWindow, fetch_telemetry

    tel = config.telemetry
    windows = []
    for i, row in enumerate(jobs.itertuples(index=False)):
        if shared is not None and shared[i] is not None:
            continue
        nodes = tuple(hostlist.expand(str(row.nodelist))) if tel.join == "node" and row.nodelist else ()
        typed = row.gpu_type if isinstance(row.gpu_type, str) and row.gpu_type else None
        windows.append(JobWindow(str(row.job_id_raw), _utc(row.start), _utc(row.end), int(str(row.gpus)), key=i,
                                 nodes=nodes, gpu_type=typed))
    result = fetch_telemetry(tel, windows, period.start, period.end)
    with_series = len(result.jobs)
    stored: dict[object, Any] = {}
    if store_root is not None:
        from gpuclust.accounting.figures.storedtelemetry import for_report

        absent = [w for w in windows if w.key not in result.jobs]
        if absent:
            stored, notes = for_report(store_root, config.cluster_name, absent, tel, period.start, period.end)
            result.jobs.update(stored)
            result.warnings += notes
    prometheus = {"url": result.source, "queries": result.queries, "jobs_with_series": with_series,
                  "jobs_from_store": len(stored), "warnings": len(result.warnings),
                  "warning_list": result.warnings[:50], "nodes": result.nodes}
    f = figures
    per_gpu: dict[int, Any] = {}
    for key, got in result.jobs.items():
        i = int(key)  # type: ignore[call-overload]
        if got.gpus:
            per_gpu[i] = got.gpus
        f.covered[i] = got.covered_gpu_s
        f.busy[i] = got.busy_gpu_s
        f.held[i] = got.held_idle_gpu_s
        f.mean[i] = got.util_mean_pct if got.util_mean_pct is not None else np.nan
        f.util_max[i] = got.util_max_pct if got.util_max_pct is not None else np.nan
        if got.fb_used_max_mib is not None:
            f.gmem[i] = got.fb_used_max_mib
        if got.fb_total_mib is not None:
            f.fb_total[i] = got.fb_total_mib
        if np.isnan(f.energy_j[i]) and got.energy_j is not None:
            f.energy_j[i] = got.energy_j
        f.source[i] = "prometheus"
    return prometheus, per_gpu


def _in_equivalents(figures: _JobFigures, jobs: pd.DataFrame) -> None:
    """job_use's step 4: allocated in GPU-equivalents (an unknown share: none, as in the totals); the device-based
    use figures scaled alike, so that a job's utilisation stays what its devices showed."""
    gpus = figures.gpus
    eq = np.nan_to_num(jobs["gpu_equivalents"].to_numpy(dtype=float))
    scale = np.where(gpus > 0, eq / np.where(gpus > 0, gpus, 1.0), 0.0)
    figures.alloc_s = eq * figures.elapsed
    figures.covered, figures.busy, figures.held = figures.covered * scale, figures.busy * scale, figures.held * scale


def _job_frame(jobs: pd.DataFrame, figures: _JobFigures, cpus: np.ndarray, config: SiteConfig,
               kind: pd.Series | None) -> pd.DataFrame:
    """job_use's last step: the per-job table (gpu_use_jobs), its figures in hours and kWh, with the job's CPU
    and memory efficiency and whether it is a completed run."""
    f = figures
    elapsed = f.elapsed
    cpu_eff = jobs["cpu_used_s"].to_numpy(dtype=float) / (elapsed * cpus)
    mem_eff = jobs["mem_max_mb"].to_numpy(dtype=float) / jobs["mem_mb"].to_numpy(dtype=float)
    return pd.DataFrame({
        "job_id": jobs["job_id"], "user": jobs["user"], "account": jobs["account"], "partition": jobs["partition"],
        "gpus": f.gpus.astype(int), "elapsed_s": elapsed,
        "allocated_gpu_hours": f.alloc_s / 3600, "covered_gpu_hours": f.covered / 3600,
        "busy_gpu_hours": f.busy / 3600, "held_idle_gpu_hours": f.held / 3600,
        "util_mean_pct": f.mean, "util_max_pct": f.util_max,
        "gpu_mem_max_mib": f.gmem, "gpu_mem_total_mib": f.fb_total,
        "energy_kwh": f.energy_j / 3.6e6, "cpu_efficiency": np.where(np.isfinite(cpu_eff), cpu_eff, np.nan),
        "mem_efficiency": np.where(np.isfinite(mem_eff), mem_eff, np.nan),
        "telemetry": f.source, "gpu_util_rule": f.rules,
        # completed-run (the economics' term): COMPLETED with exit 0:0, or an exit code the input cannot know
        "completed": (jobs["state"].astype(str).str.startswith("COMPLETED")
                      & (pd.to_numeric(jobs["exit_code"], errors="coerce").fillna(0) == 0)
                      & (pd.to_numeric(jobs["exit_signal"], errors="coerce").fillna(0) == 0)).to_numpy(),
        **job_identity(jobs, config, kind),
    })


RULE_MIG = "mig"  # gpu_util_rule of a job on MIG slices whose usage TRES was not read (module docstring)
RULE_SHARD = "shard"  # gpu_util_rule of a job of shards only: its utilisation unknown (module docstring)
RULE_MPS = "mps"  # and of a job of MPS only


def shared_rules(jobs: pd.DataFrame) -> np.ndarray | None:
    """Per job, RULE_SHARD or RULE_MPS where it holds shards or MPS and no GPU device (else None); None where
    the jobs carry no GPU-equivalents (whole GPUs only)."""
    if "gpu_equivalents" not in jobs.columns or not len(jobs):
        return None
    out = np.full(len(jobs), None, dtype=object)
    none = np.flatnonzero(pd.to_numeric(jobs["gpus"], errors="coerce").fillna(0).to_numpy() <= 0)
    for i in none.tolist():
        tres = str(jobs["alloc_tres"].iat[i] or "")
        out[i] = RULE_SHARD if "gres/shard" in tres else RULE_MPS if "gres/mps" in tres else None
    return out


def mig_rows(kind: pd.Series | None) -> np.ndarray:
    """Which jobs hold a MIG slice: a MIG profile in their GPU type (`_gpu_kind`: AllocTRES's, alone or in a mix
    `1g.10gb=1,h100=2`; else the partition's configured type), read once per distinct type (slurm.gpushare)."""
    from gpuclust.slurm.gpushare import is_mig_type

    if kind is None or not len(kind):
        return np.zeros(0, dtype=bool)
    codes, uniques = pd.factorize(kind.astype(object))
    mig = np.array([any(is_mig_type(part.partition("=")[0].strip()) for part in str(u).split(","))
                    for u in uniques] + [False], dtype=bool)
    return mig[np.asarray(codes)]  # (code -1, no type: the False last)


def _gpu_kind(jobs: pd.DataFrame, config: SiteConfig) -> pd.Series:
    """Each job's GPU type: its AllocTRES type, else its partition's configured one."""
    values = jobs["gpu_type"]
    kind = values.where(values.notna() & (values != ""))
    configured = {name: part.gpu_type for name, part in config.partitions.items() if part.gpu_type}
    missing = kind.isna()
    if configured and missing.any():  # (the partition's configured type where AllocTRES names none)
        kind = kind.astype(object).where(~missing, jobs["partition"].map(configured))
    return kind


def job_identity(jobs: pd.DataFrame, config: SiteConfig, kind: pd.Series | None = None) -> dict[str, Any]:
    """Which job held which GPUs, where and when (the jobs table's last columns): its name, NodeList, GPU type
    (its AllocTRES type, else its partition's configured one) and Start and End (UTC timestamps)."""
    def text(column: str) -> pd.Series:
        values = jobs[column]  # (as Arrow gave it: 300,000 Python strings would cost more than the table)
        return values.where(values.notna() & (values != ""))

    def utc(column: str) -> pd.Series:
        # timestamps, not text: formatting a million of them costs a json build 0.5 s for a table it never writes
        # (the files and views that show it format them: jsonrecords.iso_utc)
        return pd.to_datetime(jobs[column], utc=True, errors="coerce")

    if kind is None:
        kind = _gpu_kind(jobs, config)
    return {"job_name": text("job_name"), "node_list": text("nodelist"), "gpu_type": kind,
            "start": utc("start"), "end": utc("end")}


def hold_invariants(allocated: np.ndarray, covered: np.ndarray, busy: np.ndarray, held: np.ndarray) -> int:
    """Per job, in place: held-idle <= covered <= allocated and busy <= covered (so coverage <= 1), the
    glossary's definitions, whatever a source gave; unknown (NaN) stays unknown. Returns the jobs changed."""
    before = np.stack([covered, busy, held])
    with np.errstate(invalid="ignore"):
        np.minimum(covered, allocated, out=covered, where=~np.isnan(covered))
        for figure in (busy, held):
            np.minimum(figure, covered, out=figure, where=~np.isnan(figure) & ~np.isnan(covered))
            np.maximum(figure, 0.0, out=figure, where=~np.isnan(figure))
        np.maximum(covered, 0.0, out=covered, where=~np.isnan(covered))
    after = np.stack([covered, busy, held])
    changed = ~((before == after) | (np.isnan(before) & np.isnan(after)))
    return int(changed.any(axis=0).sum())


def _utc(value: Any) -> datetime:
    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize(timezone.utc)
    return ts.to_pydatetime()


SUMMED = ("jobs", "allocated_gpu_hours", "covered_gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours",
          "energy_kwh", "unknown_jobs")


def _group_sums(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """summarise's sums per `by` (None: one row), before its ratios: they add up over disjoint sets of jobs.
    (energy stays NaN where no job of the group has it, as sum(min_count=1).)"""
    f = frame.assign(_unknown=frame["covered_gpu_hours"].isna().astype(int), _one=1)
    keys = [by] if by else []
    if by is None:
        f = f.assign(_all="all")
        keys = ["_all"]
    g = f.groupby(keys, sort=True, dropna=False)
    out = pd.DataFrame({
        "jobs": g["_one"].sum(),
        "allocated_gpu_hours": g["allocated_gpu_hours"].sum(),
        "covered_gpu_hours": g["covered_gpu_hours"].sum(min_count=0),
        "busy_gpu_hours": g["busy_gpu_hours"].sum(min_count=0),
        "held_idle_gpu_hours": g["held_idle_gpu_hours"].sum(min_count=0),
        "energy_kwh": g["energy_kwh"].sum(min_count=1),
        "unknown_jobs": g["_unknown"].sum(),
    }).reset_index()
    return out.drop(columns=["_all"]) if by is None else out


def _merge_group_sums(a: pd.DataFrame, b: pd.DataFrame, by: str | None) -> pd.DataFrame:
    if not len(b):
        return a
    if not len(a):
        return b
    both = pd.concat([a, b], ignore_index=True)
    if by is None:
        both = both.assign(_all="all")
        by = "_all"
    g = both.groupby(by, sort=True, dropna=False)
    out = g[[name for name in SUMMED if name != "energy_kwh"]].sum()
    out["energy_kwh"] = g["energy_kwh"].sum(min_count=1)
    out = out[list(SUMMED)].reset_index()
    return out.drop(columns=["_all"]) if by == "_all" else out


def _finish_summary(out: pd.DataFrame) -> pd.DataFrame:
    """The sums with their ratios: coverage after covered_gpu_hours, util_mean_pct last. (On numpy arrays, one
    frame made at the end: the same values as the Series steps, at a fraction of their cost on these few rows.)"""
    allocated = out["allocated_gpu_hours"].to_numpy(dtype=np.float64)
    covered = out["covered_gpu_hours"].to_numpy(dtype=np.float64)
    coverage = np.where(allocated > 0, covered / np.where(allocated > 0, allocated, np.nan), np.nan)
    util = np.where(covered > 0, out["busy_gpu_hours"].to_numpy(dtype=np.float64)
                    / np.where(covered > 0, covered, np.nan) * 100, np.nan)
    # Without any covered job, busy and held-idle are unknown, not 0.
    none = covered <= 0
    any_none = bool(none.any())
    columns: dict[str, Any] = {}
    for name in out.columns:
        columns[name] = out[name]
        if any_none and name in ("busy_gpu_hours", "held_idle_gpu_hours"):
            columns[name] = np.where(none, np.nan, out[name].to_numpy(dtype=np.float64))
        if name == "covered_gpu_hours":
            columns["coverage"] = coverage
    columns["util_mean_pct"] = util
    return pd.DataFrame(columns, index=out.index)


def summarise(frame: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """Allocated, covered, busy, held-idle GPU-hours, coverage, mean utilisation and unknown jobs, per `by`
    (None: one row for the whole period)."""
    return _finish_summary(_group_sums(frame, by))


def _completed_sums(jobs: pd.DataFrame) -> dict[str, list[float]]:
    """Per partition (as text) of the completed jobs with GPUs: allocated, covered and busy GPU-hours (unknown
    ones left out of the sums: 0 where none is known)."""
    done = jobs[jobs["completed"] & (jobs["gpus"] > 0)]
    names = ["allocated_gpu_hours", "covered_gpu_hours", "busy_gpu_hours"]
    sums = done[names].groupby(done["partition"].astype(str), sort=True).sum()
    return {str(part): [float(v) for v in row] for part, row in zip(sums.index, sums.to_numpy(), strict=True)}


def weigh_economics(economics: dict[str, Any], completed: dict[str, list[float]]) -> None:
    """[telemetry] weigh_useful: beside each economics row's completed-run term (allocated GPU-hours of completed
    runs), the same GPU-hours weighted by the measured mean utilisation of the completed jobs that have telemetry
    (busy completed-run GPU-hours), with that coverage; and the total cost per busy completed-run GPU-hour. The
    allocation view is left as it is. `completed`: _completed_sums of the jobs."""
    rows = [(row, False) for row in economics.get("by_partition", [])] + [(economics.get("total") or {}, True)]
    for row, whole in rows:
        if not row or "terms" not in row:
            continue
        allocated, covered, busy = [sum(v[i] for v in completed.values()) for i in range(3)] if whole else \
            completed.get(str(row.get("partition")), [0.0] * 3)
        ratio = busy / covered if covered > 0 else None
        completed_run = row["terms"]["completed_run"]["gpu_hours"]
        weighted = completed_run * ratio if ratio is not None and completed_run is not None else None
        cost = row.get("total_cost")
        row["utilisation_weighted"] = {
            "completed_run_gpu_hours": completed_run,
            "coverage": round(covered / allocated, 6) if allocated > 0 else None,
            "util_mean_pct": round(ratio * 100, 4) if ratio is not None else None,
            "completed_run_busy_gpu_hours": round(weighted, 6) if weighted is not None else None,
            "total_cost_per_completed_run_busy_gpu_hour": round(cost / weighted, 6) if cost and weighted else None,
        }


def _worst(jobs: pd.DataFrame) -> pd.DataFrame:
    return jobs[jobs["held_idle_gpu_hours"] > 0].sort_values(
        ["held_idle_gpu_hours", "job_id"], ascending=[False, True], kind="stable").head(WORST_JOBS)[
        list(WORST_COLUMNS)].reset_index(drop=True)


@dataclass
class UseSums:
    """The use figures of a set of jobs in a form that adds up over disjoint sets (a partitioned build's
    buckets; one table is one set): merge_use_sums merges two, attach_sums finishes them."""

    groups: dict[str | None, pd.DataFrame]  # _group_sums per dimension (None: the totals)
    worst: pd.DataFrame
    completed: dict[str, list[float]]  # _completed_sums
    histogram: dict[str, tuple[np.ndarray, np.ndarray]]  # partition -> (jobs, covered GPU-hours) per 10% bin
    rules: set[str]
    sources: dict[str, int]
    prometheus: dict[str, Any] | None
    jobs: pd.DataFrame | None = None  # the per-job table (gpu_use_jobs): a one-table build's only
    findings: pd.DataFrame = field(default_factory=findings.empty)  # figures/findings.py, every finding
    jobs_checked: int = 0  # the jobs the detectors looked at (ended, with GPUs)
    shares_source: str = "none"  # where the partitions' shares came from (findings.partition_shares)
    # What telemetry saw per job (JobID) and node: Xid points and DBE ECC increase, for the lemon nodes
    gpu_events: dict[str, list[GpuEvents]] = field(default_factory=dict)


def use_sums(table: pa.Table, config: SiteConfig, period: Period, *, keep_jobs: bool = True,
             store_root: Path | None = None, shares: tuple[Mapping[str, PartitionShare], str] | None = None,
             equivalents: np.ndarray | None = None) -> UseSums:
    """The use figures of the table's jobs; `shares`: findings.partition_shares' answer (None: none known);
    `equivalents`: each row's GPU-equivalents (None: whole GPUs)."""
    jobs, info = job_use(table, config, period, store_root=store_root, shares=shares[0] if shares else None,
                         equivalents=equivalents)
    # Per partition (sorted; jobs without one left out, as groupby leaves them), on numpy arrays: the known
    # utilisations clipped to 0..100, counted and weighted by covered GPU-hours in ten bins.
    histogram = {}
    codes, names = pd.factorize(jobs["partition"], sort=True)
    util = jobs["util_mean_pct"].to_numpy(dtype=np.float64)
    covered = jobs["covered_gpu_hours"].to_numpy(dtype=np.float64)
    known_util = ~np.isnan(util)
    for code, part in enumerate(names):
        at = (codes == code) & known_util
        known = np.clip(util[at], 0, 100)
        counts, _ = np.histogram(known, bins=10, range=(0, 100))
        hours, _ = np.histogram(known, bins=10, range=(0, 100), weights=covered[at])
        histogram[str(part)] = (counts, hours)
    return UseSums(
        groups={dim: _group_sums(jobs, dim) for dim in (None, *DIMENSIONS)},
        worst=_worst(jobs),
        completed=_completed_sums(jobs),
        histogram=histogram,
        rules={str(r) for r in jobs["gpu_util_rule"].dropna().unique()},
        sources={"usage_tres": int((jobs["telemetry"] == "usage_tres").sum()),
                 "prometheus": int((jobs["telemetry"] == "prometheus").sum()),
                 "none": int(jobs["telemetry"].isna().sum())},
        prometheus=info["prometheus"],
        jobs=jobs if keep_jobs else None,
        findings=info["findings"],
        jobs_checked=len(jobs),
        shares_source=shares[1] if shares else "none",
        gpu_events=info["gpu_events"],
    )


def _gpu_events(job_ids: pd.Series, per_gpu: Mapping[int, Any]) -> dict[str, list[GpuEvents]]:
    """Per job (JobID) and node: the Xid points and DBE ECC increase its GPUs' series showed (telemetry.GpuTelemetry;
    a GPU whose series had neither metric adds 0)."""
    out: dict[str, list[GpuEvents]] = {}
    for row, gpus in per_gpu.items():
        by_node: dict[str, list[float]] = {}
        for gpu in gpus:
            sums = by_node.setdefault(str(gpu.node), [0.0, 0.0])
            sums[0] += gpu.xid_errors or 0.0
            sums[1] += gpu.ecc_dbe or 0.0
        out[str(job_ids.iloc[row])] = [GpuEvents(node, xid, ecc) for node, (xid, ecc) in sorted(by_node.items())]
    return out


def merge_use_sums(a: UseSums, b: UseSums) -> UseSums:
    """The UseSums of two disjoint sets of jobs (without the per-job table)."""
    histogram = dict(a.histogram)
    for part, (counts, hours) in b.histogram.items():
        have = histogram.get(part)
        histogram[part] = (counts, hours) if have is None else (have[0] + counts, have[1] + hours)
    completed = {k: list(v) for k, v in a.completed.items()}
    for part, sums in b.completed.items():
        completed[part] = [x + y for x, y in zip(completed.get(part, [0.0] * len(sums)), sums, strict=True)]
    prometheus = a.prometheus
    if a.prometheus is not None and b.prometheus is not None:
        prometheus = {**a.prometheus,
                      **{k: a.prometheus[k] + b.prometheus[k] for k in ("queries", "jobs_with_series", "warnings",
                                                                        "jobs_from_store")},
                      "warning_list": (a.prometheus["warning_list"] + b.prometheus["warning_list"])[:50]}
    elif a.prometheus is None:
        prometheus = b.prometheus
    worst = pd.concat([a.worst, b.worst], ignore_index=True) if len(b.worst) else a.worst
    return UseSums(
        groups={dim: _merge_group_sums(a.groups[dim], b.groups[dim], dim) for dim in a.groups},
        worst=_worst(worst) if len(b.worst) else a.worst,
        completed=completed,
        histogram=histogram,
        rules=a.rules | b.rules,
        sources={k: a.sources[k] + b.sources[k] for k in a.sources},
        prometheus=prometheus,
        findings=findings.rank(pd.concat([a.findings, b.findings], ignore_index=True)) if len(b.findings)
        else a.findings,
        jobs_checked=a.jobs_checked + b.jobs_checked,
        shares_source=a.shares_source,
        gpu_events={**a.gpu_events, **b.gpu_events},
    )


def attach(report: Report, table: pa.Table, config: SiteConfig, period: Period,
           *, usage_warnings: int = 0, usage_problems: list[str] | None = None) -> None:
    """Add the use figures to `report` (tables gpu_use_*, report.json `gpu_use`, definitions)."""
    attach_sums(report, use_sums(table, config, period), config, usage_warnings=usage_warnings,
                usage_problems=usage_problems)


def attach_sums(report: Report, sums: UseSums, config: SiteConfig, *, usage_warnings: int = 0,
                usage_problems: list[str] | None = None) -> None:
    """attach, from the jobs' UseSums."""
    tel = config.telemetry
    totals = _finish_summary(sums.groups[None])
    tables = {f"gpu_use_by_{dim}": _finish_summary(sums.groups[dim]) for dim in DIMENSIONS}
    worst = sums.worst
    report.tables["gpu_use_totals"] = totals
    report.tables.update(tables)
    report.tables["gpu_use_worst_held_idle"] = worst.reset_index(drop=True)
    if sums.jobs is not None:
        report.tables["gpu_use_jobs"] = sums.jobs
    node_rows = (sums.prometheus or {}).get("nodes") or []
    if node_rows:  # node_exporter per node over the period: storage latency, network errors and drops
        report.tables["telemetry_nodes"] = pd.DataFrame(node_rows)
    if tel.weigh_useful and isinstance(report.data.get("economics"), dict):
        weigh_economics(report.data["economics"], sums.completed)
    histogram = {part: {"bins_pct": list(range(0, 101, 10)), "jobs": [int(c) for c in counts],
                        "covered_gpu_hours": [float(h) for h in hours]}
                 for part, (counts, hours) in sorted(sums.histogram.items())}
    report.data["gpu_use"] = {
        "idle_threshold_pct": tel.idle_threshold_pct,
        "idle_min_s": tel.idle_min_s,
        "gpu_util_rules": sorted(sums.rules),
        "sources": dict(sums.sources),
        "prometheus": sums.prometheus,
        "usage_warnings": int(usage_warnings),
        "usage_problems": list(usage_problems or [])[:50],
        "totals": records(totals)[0] if len(totals) else {},
        **{f"by_{dim}": records(tables[f"gpu_use_by_{dim}"]) for dim in DIMENSIONS},
        "worst_held_idle": records(worst),
        "histogram_by_partition": histogram,
    }
    report.data["definitions"] = {**report.data.get("definitions", {}),
                                  **{f"gpu_use.{k}": v for k, v in DEFINITIONS.items()}}
    report.tables["findings"] = sums.findings
    report.tables["findings_by_kind"] = findings.by_kind(sums.findings)
    report.data["findings"] = findings.section(sums.findings, sums.jobs_checked, sums.shares_source,
                                               config.currency)
    report.data["definitions"].update({f"findings.{k}": v for k, v in FINDING_DEFINITIONS.items()})


SOURCE_WARNINGS_SHOWN = 10


def source_warnings(data: dict[str, Any]) -> tuple[list[str], str | None]:
    """What report.json's `gpu_use` says went wrong with the use sources, for stderr: the telemetry warnings
    (the first SOURCE_WARNINGS_SHOWN, then how many more), the usage-TRES warnings as one counted line, and
    the summary line that ends the run (None when there is nothing to say)."""
    use = data.get("gpu_use") or {}
    prom = use.get("prometheus") or {}
    lines: list[str] = []
    listed = list(prom.get("warning_list") or [])
    total = int(prom.get("warnings") or 0)
    lines += [f"warning: {w}" for w in listed[:SOURCE_WARNINGS_SHOWN]]
    if total > min(len(listed), SOURCE_WARNINGS_SHOWN):
        lines.append(f"warning: telemetry: {total - min(len(listed), SOURCE_WARNINGS_SHOWN)} more warning(s) "
                     "(report.json gpu_use.prometheus.warning_list)")
    usage = int(use.get("usage_warnings") or 0)
    if usage:
        problems = list(use.get("usage_problems") or [])
        example = f", e.g. {problems[0]}" if problems else ""
        lines.append(f"warning: usage TRES: {usage} warning(s): those jobs' utilisation is unknown, not 0{example} "
                     "(report.json gpu_use.usage_problems)")
    parts = [f"{n} {what} warning(s)" for n, what in ((total, "telemetry"), (usage, "usage TRES")) if n]
    summary = f"summary: {', '.join(parts)} (report.json gpu_use)" if parts else None
    return lines, summary
