"""The waste detectors over the report's jobs (issue 43 item 5): report.json `findings`, the `findings` and
`findings_by_kind` tables (findings.csv, the page's findings table) and `report show --rows findings`.

The verdicts are figures/waste.py's, the same detectors `gpuclust job` runs: each job's JobFacts is made of the
report's per-job figures (figures/gpuuse.py: per-GPU telemetry where Prometheus or the store has it, the job's
usage TRES otherwise), its Timelimit, AllocTRES CPUs and memory, NNodes and the partition's share per GPU (the
node records: `--nodes` with --input, the inventory `report fetch` stored otherwise; without them, only the
configured gpus_per_node). A vectorised prefilter (pandas/numpy) picks the jobs a detector could flag, with the
detectors' own thresholds; only those get a JobFacts, so a million-job period stays fast.

Each finding is priced where it has a GPU-hour figure: the held-idle GPU-hours of an idle GPU or of an idle
stretch x the site's price per GPU-hour of the job's GPU type or partition (held_idle_cost); the other kinds
(over-asks: time limit, CPUs, memory, nodes, GPU size) carry their evidence and advice, and no price.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from gpuclust.accounting.figures import waste
from gpuclust.accounting.figures.jsonrecords import records
from gpuclust.accounting.figures.metrics.attempts import card_price

if TYPE_CHECKING:
    from gpuclust.config import SiteConfig

COLUMNS = ("job_id", "user", "account", "partition", "kind", "held_idle_gpu_hours", "held_idle_cost", "message",
           "advice", "evidence")
BY_KIND_COLUMNS = ("kind", "findings", "jobs", "held_idle_gpu_hours", "held_idle_cost")
KINDS = ("idle_gpu", "idle_stretch", "gpu_too_large", "time_limit", "cpu_share", "mem_share", "multi_node")
LISTED = 1000  # findings listed in report.json (the most costly first); findings.csv holds them all


def empty() -> pd.DataFrame:
    # (from empty arrays of the final dtypes: the same frame as empty Series cast, at a tenth of the cost)
    return pd.DataFrame({c: np.empty(0, dtype=float if c in ("held_idle_gpu_hours", "held_idle_cost") else object)
                         for c in COLUMNS})


def partition_shares(config: SiteConfig, nodes_text: str | None) -> tuple[dict[str, waste.PartitionShare], str]:
    """Each partition's share per GPU from `scontrol show node -o` text (jobview.share_of, as `gpuclust job`);
    without node records, the configured gpus_per_node (the multi-node finding only). And where they came from."""
    shares: dict[str, waste.PartitionShare] = {}
    if nodes_text:
        # (imported with node records only: jobview loads the telemetry reader)
        from gpuclust.accounting.figures.jobview import share_of
        from gpuclust.errors import SlurmOutputError
        from gpuclust.slurm.records import parse_nodes_text

        try:
            nodes = parse_nodes_text(nodes_text)
        except SlurmOutputError:  # (the economics' reading of the same records names the file and the fault)
            nodes = []
        names = sorted({p for n in nodes for p in n.partitions})
        for name in names:
            got = share_of(name, nodes)
            if got is not None:
                shares[name] = got
        if shares:
            return shares, "nodes"
    for name, part in config.partitions.items():
        if part.gpus_per_node:
            shares[name] = waste.PartitionShare(name, None, None, part.gpus_per_node, None)
    return shares, "config" if shares else "none"


def stored_nodes_text(state_dir: str, days: Sequence[Any]) -> str | None:
    """The node inventory `report fetch` stored for the latest of `days` that has one."""
    from gpuclust.accounting.history.events import NODES_FILE, day_dir

    for day in sorted(days, reverse=True):
        path = Path(day_dir(state_dir, day)) / NODES_FILE
        if path.exists():
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                return None
    return None


def _col(jobs: pd.DataFrame, name: str) -> np.ndarray:
    if name not in jobs.columns:
        return np.full(len(jobs), np.nan)
    return pd.to_numeric(jobs[name], errors="coerce").to_numpy(dtype=float)


def _by_partition(partitions: np.ndarray, shares: Mapping[str, waste.PartitionShare], attr: str) -> np.ndarray:
    values = {name: getattr(s, attr) for name, s in shares.items()}
    return np.array([np.nan if (v := values.get(p)) is None else float(v) for p in partitions], dtype=float)


def candidates(jobs: pd.DataFrame, cpus: np.ndarray, per_gpu: Mapping[int, Any],
               shares: Mapping[str, waste.PartitionShare]) -> np.ndarray:
    """The rows some detector could flag (a superset: the detectors decide), by their own thresholds."""
    n = len(jobs)
    if not n:
        return np.zeros(0, dtype=bool)
    elapsed, gpus = _col(jobs, "elapsed_s"), _col(jobs, "gpus")
    limit = _col(jobs, "timelimit_s")
    with np.errstate(invalid="ignore", divide="ignore"):
        flag = (limit > 0) & (elapsed > 0) & (elapsed < waste.TIME_LIMIT_USE * limit) \
            & (limit - elapsed >= waste.TIME_LIMIT_SLACK_S)
        peak, total = _col(jobs, "gpu_mem_max_mb"), _col(jobs, "gpu_mem_total_mib")
        flag |= (total > 0) & (peak < waste.GPU_MEM_SMALL_SHARE * total)
        if shares:
            parts = jobs["partition"].astype(object).to_numpy()
            cpg, mpg = _by_partition(parts, shares, "cpus_per_gpu"), _by_partition(parts, shares, "mem_mb_per_gpu")
            gpn = _by_partition(parts, shares, "gpus_per_node")
            tol = 1 + waste.SHARE_TOLERANCE
            flag |= (gpus > 0) & (cpus / gpus > cpg * tol)
            flag |= (gpus > 0) & (_col(jobs, "mem_mb") / gpus > mpg * tol)
            flag |= (_col(jobs, "nnodes") > 1) & (gpus <= gpn)
    if per_gpu:
        flag[np.fromiter(per_gpu.keys(), dtype=np.int64, count=len(per_gpu))] = True
    return np.asarray(flag, dtype=bool)


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(v) else v


def job_findings(jobs: pd.DataFrame, cpus: np.ndarray, gpu_mem_total: np.ndarray, per_gpu: Mapping[int, Any],
                 shares: Mapping[str, waste.PartitionShare], config: SiteConfig) -> pd.DataFrame:
    """One row per finding (COLUMNS) over `jobs` (gpuuse's ended jobs with GPUs: one row each, by position),
    `cpus` their AllocTRES CPUs, `gpu_mem_total` their GPUs' memory where telemetry has it, `per_gpu` the
    per-GPU telemetry (GpuTelemetry lists) by position."""
    tel = config.telemetry
    frame = jobs.assign(gpu_mem_total_mib=gpu_mem_total) if len(jobs) else jobs
    rows = np.flatnonzero(candidates(frame, cpus, per_gpu, shares))
    if not len(rows):
        return empty()
    sub = frame.iloc[rows]
    out: list[tuple[Any, ...]] = []
    prices: dict[tuple[Any, Any], float | None] = {}
    cols = {c: sub[c].to_numpy(dtype=object) if c in sub.columns else np.full(len(sub), None, dtype=object)
            for c in ("job_id", "user", "account", "partition", "gpu_type", "gpus", "elapsed_s", "timelimit_s",
                      "nnodes", "mem_mb", "gpu_mem_max_mb", "gpu_mem_total_mib", "gpu_equivalents")}
    for k, i in enumerate(rows):
        gtype = cols["gpu_type"][k] if isinstance(cols["gpu_type"][k], str) and cols["gpu_type"][k] else None
        part = str(cols["partition"][k])
        key = (gtype, part)
        if key not in prices:
            prices[key] = card_price(config, gtype, part)
        # (one GPU device's GPU-equivalents: a slice's idle hour is its share of a GPU-hour; unknown: no figure)
        n_gpus, eq = _num(cols["gpus"][k]), cols["gpu_equivalents"][k]
        share = 1.0 if eq is None or not n_gpus else (float(eq) / n_gpus)
        limit, nnodes, cpu = _num(cols["timelimit_s"][k]), _num(cols["nnodes"][k]), _num(cpus[i])
        facts = waste.JobFacts(
            job_id=str(cols["job_id"][k]), running=False, elapsed_s=_num(cols["elapsed_s"][k]) or 0.0,
            timelimit_s=limit if limit and limit > 0 else None, gpus=int(_num(cols["gpus"][k]) or 0),
            nodes=int(nnodes) if nnodes is not None else 1, alloc_cpus=int(cpu) if cpu is not None else None,
            mem_mb=_num(cols["mem_mb"][k]), gpu_type=gtype, idle_threshold_pct=tel.idle_threshold_pct,
            idle_min_s=tel.idle_min_s,
            gpu_facts=tuple(waste.GpuFacts(g.node, g.name, g.covered_s, g.util_mean_pct, g.idle_s, g.longest_idle_s,
                                           g.longest_idle_start, g.fb_used_max_mib, g.fb_total_mib)
                            for g in per_gpu.get(int(i), ())),
            gpu_mem_max_mib=_num(cols["gpu_mem_max_mb"][k]), gpu_mem_total_mib=_num(cols["gpu_mem_total_mib"][k]),
            share=shares.get(part), price_per_gpu_hour=None if math.isnan(share) else prices[key],
            currency=config.currency or "", gpu_share=share)
        for f in waste.findings(facts):
            idle_s = f.evidence.get("held_idle_s", f.evidence.get("longest_idle_s")) \
                if f.kind in ("idle_gpu", "idle_stretch") else None
            out.append((facts.job_id, cols["user"][k], cols["account"][k], cols["partition"][k], f.kind,
                        np.nan if idle_s is None else idle_s * share / 3600,
                        f.evidence.get("cost", np.nan) if idle_s is not None else np.nan,
                        f.message, f.advice, json.dumps(f.evidence, sort_keys=True, default=str)))
    if not out:
        return empty()
    return rank(pd.DataFrame(out, columns=list(COLUMNS)))


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """The most costly findings first (then the most held-idle GPU-hours; then by job and kind)."""
    if not len(frame):
        return frame
    return frame.sort_values(["held_idle_cost", "held_idle_gpu_hours", "job_id", "kind"],
                             ascending=[False, False, True, True], na_position="last",
                             kind="stable").reset_index(drop=True)


def by_kind(frame: pd.DataFrame) -> pd.DataFrame:
    """Per kind (KINDS order, the kinds found only): findings, distinct jobs, held-idle GPU-hours and cost (NaN
    where no finding of the kind has them)."""
    rows = []
    found = set(frame["kind"]) if len(frame) else set()  # (no finding, the usual small period: no pandas step)
    for kind in KINDS:
        if kind not in found:
            continue
        sub = frame[frame["kind"] == kind]
        if not len(sub):
            continue
        rows.append((kind, len(sub), int(sub["job_id"].nunique()), sub["held_idle_gpu_hours"].sum(min_count=1),
                     sub["held_idle_cost"].sum(min_count=1)))
    return pd.DataFrame(rows, columns=list(BY_KIND_COLUMNS)).astype(
        {"held_idle_gpu_hours": float, "held_idle_cost": float})


def section(frame: pd.DataFrame, jobs_checked: int, shares_source: str, currency: str | None) -> dict[str, Any]:
    """report.json `findings`."""
    listed = []
    for rec in records(frame.head(LISTED)) if len(frame) else ():
        rec["evidence"] = json.loads(rec["evidence"])
        listed.append(rec)
    return {"jobs_checked": int(jobs_checked), "findings": int(len(frame)),
            "jobs": int(frame["job_id"].nunique()) if len(frame) else 0, "partition_shares": shares_source,
            "currency": currency, "by_kind": records(by_kind(frame)) if len(frame) else [], "listed": listed,
            "listed_limit": LISTED}
