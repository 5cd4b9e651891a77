"""Lemon nodes from production (issue 46 item 3): which nodes fail production jobs more than their peers, the
fleet's mean time to failure by job size and its effective training time ratio (report.json `lemon_nodes`, the
lemon_nodes table; output/lemon_render.py draws them; `audit partition` names a partition's lemons).

The rule, per node and UTC hour (the hour a job's End falls in), over the GPU jobs that ended in the period on
that node (its NodeList, expanded):

* node_fail: a job of the hour ended NODE_FAIL;
* shared_exit: at least MIN_SHARED_JOBS jobs of at least MIN_SHARED_USERS users ended in the hour, and every one
  of them ended with a non-zero exit (FAILED, or a non-zero ExitCode other than CANCELLED, TIMEOUT, PREEMPTED):
  a cause the node's jobs share, not one program's bug. One user's failing array on a node in an hour is NOT
  node-level (one user: that user's bug), however many of its tasks fail;
* xid / ecc: where telemetry is joined, a job of the hour saw an Xid or an uncorrectable (DBE) ECC error on one of
  the node's GPUs (dcgm-exporter, figures/telemetry.py).

A node's failures are its hours with any of these (a node that dies once kills its four jobs at once: one
failure); its exposure is the GPU-hours allocated on it (a job's GPUs x Elapsed / its nodes). The test: one-sided
Poisson, P(X >= failures) for X ~ Poisson(pooled rate of the node's partition x its GPU-hours), the pooled rate
being the failures / GPU-hours of every node whose partition (the one it gave most GPU-hours to) is the same;
Holm's step-down correction over every node with GPU-hours. A node is named (`suspect`) when its corrected
p-value is under ALPHA, it has at least MIN_FAILURES failures and its rate is above the pooled rate. A node
with more jobs at the same rate expects as many more failures, so it is never named.

MTTF by job size: the run hours (Elapsed) of the GPU jobs of each size bucket (GPUs) / how many of them failed
for a node-level cause (ended NODE_FAIL, or failed in one of a node's failure hours). ETTR as Meta defines it
(Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters", arXiv 2410.21680): productive
run time / wall-clock time; each failure costs the restart (restore) time plus, on average, half a checkpoint
interval of lost work, so E[ETTR] = 1 - (restore + checkpoint_interval / 2) / MTTF (0 at worst). The restore is
the median checkpoint restore the acceptance storage job measured (accept's results), else the partitions'
expect_restore_seconds, else DEFAULT_RESTORE_S.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures import catalog
from gpuclust.slurm import hostlist

if TYPE_CHECKING:
    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.config import SiteConfig

MIN_SHARED_JOBS = 2  # shared_exit: at least this many jobs ended on the node in the hour ...
MIN_SHARED_USERS = 2  # ... of at least this many users
MIN_FAILURES = 3  # a node is named with at least this many failure hours
ALPHA = 0.01  # ... and a Holm-corrected p-value under this
DEFAULT_RESTORE_S = 600.0  # ETTR's restore time when acceptance measured none and no partition expects one
DEFAULT_CHECKPOINT_INTERVAL_S = 3600.0  # ETTR: work lost per failure is half of this
SIZE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 8), (9, 64), (65, 512), (513, None))
TEST = "one-sided Poisson vs the partition's pooled rate, Holm-corrected over nodes"
NOT_NONZERO = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED", "COMPLETED", "RUNNING", "PENDING"})
CAUSES = ("node_fail", "shared_exit", "xid", "ecc")
DEFINITIONS: dict[str, str] = catalog.definitions(catalog.LEMON)  # (report.json: lemon_nodes.<key>)
COLUMNS = ("job_id", "user", "partition", "nodelist", "state", "exit_code", "exit_signal", "gpus", "elapsed_s", "end")


@dataclass(frozen=True)
class JobRow:
    job_id: str
    user: str
    partition: str
    nodes: tuple[str, ...]
    state: str
    nonzero_exit: bool
    gpus: int
    elapsed_s: float
    end: float  # epoch seconds


@dataclass(frozen=True)
class GpuEvents:
    """What telemetry saw on one node during one job: Xid points and DBE ECC increase (telemetry.GpuTelemetry)."""
    node: str
    xid_errors: float = 0.0
    ecc_dbe: float = 0.0


@dataclass
class _Node:
    gpu_s: float = 0.0
    jobs: int = 0
    by_partition: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    hours: dict[str, set[int]] = field(default_factory=lambda: {c: set() for c in CAUSES})


def job_rows(table: pa.Table, period: Period) -> list[JobRow]:
    """The GPU jobs of `table` (normalized or stored rows) that ended in the period, with their nodes."""
    present = [c for c in COLUMNS if c in table.column_names]
    t = table.select(present)
    end = t.column("end")
    if pa.types.is_timestamp(end.type) and end.type.tz is None:
        end = end.cast(pa.timestamp("s", tz="UTC"))
    lo = pa.scalar(period.start, pa.timestamp("s", tz="UTC"))
    hi = pa.scalar(period.end, pa.timestamp("s", tz="UTC"))
    mask = pc.and_(pc.and_(pc.greater_equal(end, lo), pc.less(end, hi)), pc.greater(t.column("gpus"), 0))
    t = t.filter(pc.fill_null(mask, False))
    out = []
    cols = {c: t.column(c).to_pylist() for c in present}
    n = t.num_rows
    empty: list[Any] = [None] * n
    for i in range(n):
        state = str(cols["state"][i] or "")
        code = (cols.get("exit_code") or empty)[i]
        sig = (cols.get("exit_signal") or empty)[i]
        nonzero = state == "FAILED" or (state not in NOT_NONZERO and bool(code or sig))
        ended: datetime = cols["end"][i]
        nodes = tuple(hostlist.expand(str(cols["nodelist"][i]))) if cols.get("nodelist", empty)[i] else ()
        out.append(JobRow(str(cols["job_id"][i]), str((cols.get("user") or empty)[i] or ""),
                          str((cols.get("partition") or empty)[i] or ""), nodes, state, nonzero,
                          int(cols["gpus"][i] or 0), float(cols["elapsed_s"][i] or 0),
                          ended.replace(tzinfo=timezone.utc).timestamp() if ended.tzinfo is None else ended.timestamp()))
    return out


def poisson_sf(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean): 1 - sum_{i<k} e^-mean mean^i / i!, summed in log space."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if k > mean:  # the upper tail directly: no cancellation when it is tiny
        total, i = 0.0, k
        while True:
            term = math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1))
            total += term
            if term < total * 1e-17 or i > k + 10000:
                return min(1.0, total)
            i += 1
    below = sum(math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) for i in range(k))
    return max(0.0, 1.0 - below)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def size_bucket(gpus: int) -> str:
    for lo, hi in SIZE_BUCKETS:
        if gpus >= lo and (hi is None or gpus <= hi):
            return f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}")
    return "0"


def restore_seconds(measured: Mapping[str, float], expected: Mapping[str, float | None]) -> tuple[float, str]:
    """ETTR's restore time and where it came from (the module docstring's order)."""
    if measured:
        values = sorted(measured.values())
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return float(median), "measured (acceptance storage checkpoint restore, median over partitions)"
    given = [float(v) for v in expected.values() if v is not None]
    if given:
        return max(given), "expect_restore_seconds (site config, largest over partitions)"
    return DEFAULT_RESTORE_S, "default (no restore measured or expected)"


def ettr(mttf_hours: float | None, restore_s: float, checkpoint_s: float) -> float | None:
    if mttf_hours is None or mttf_hours <= 0:
        return None
    return max(0.0, 1.0 - (restore_s + checkpoint_s / 2.0) / (mttf_hours * 3600.0))


def compute(jobs: Iterable[JobRow], *, gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None,
            restore_s: float = DEFAULT_RESTORE_S, restore_source: str = "default",
            checkpoint_s: float = DEFAULT_CHECKPOINT_INTERVAL_S, alpha: float = ALPHA,
            min_failures: int = MIN_FAILURES) -> dict[str, Any]:
    """report.json's `lemon_nodes`: per node, the ranking, the named nodes, MTTF and ETTR by job size."""
    nodes: dict[str, _Node] = defaultdict(_Node)
    by_hour: dict[tuple[str, int], list[JobRow]] = defaultdict(list)
    jobs = list(jobs)
    events = gpu_events or {}
    for job in jobs:
        if not job.nodes:
            continue
        share = job.gpus * job.elapsed_s / len(job.nodes)
        hour = int(job.end // 3600)
        seen = {e.node: e for e in events.get(job.job_id, ())}
        for node in job.nodes:
            rec = nodes[node]
            rec.gpu_s += share
            rec.jobs += 1
            rec.by_partition[job.partition] += share
            by_hour[(node, hour)].append(job)
            if job.state == "NODE_FAIL":
                rec.hours["node_fail"].add(hour)
            got = seen.get(node)
            if got is not None and got.xid_errors > 0:
                rec.hours["xid"].add(hour)
            if got is not None and got.ecc_dbe > 0:
                rec.hours["ecc"].add(hour)
    for (node, hour), hour_jobs in by_hour.items():
        if (len(hour_jobs) >= MIN_SHARED_JOBS and len({j.user for j in hour_jobs}) >= MIN_SHARED_USERS
                and all(j.nonzero_exit for j in hour_jobs)):
            nodes[node].hours["shared_exit"].add(hour)
    failed_hours = {n: set().union(*rec.hours.values()) for n, rec in nodes.items()}
    primary = {n: max(sorted(rec.by_partition), key=lambda p: rec.by_partition[p]) for n, rec in nodes.items()}
    pooled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for n, rec in nodes.items():
        pooled[primary[n]][0] += len(failed_hours[n])
        pooled[primary[n]][1] += rec.gpu_s / 3600.0
    rows: list[dict[str, Any]] = []
    for n, rec in sorted(nodes.items()):
        gpu_h = rec.gpu_s / 3600.0
        fails = len(failed_hours[n])
        part_fails, part_h = pooled[primary[n]]
        rate = part_fails / part_h if part_h > 0 else 0.0
        expected = rate * gpu_h
        rows.append({"node": n, "partition": primary[n], "jobs": rec.jobs, "gpu_hours": round(gpu_h, 6),
                     "failures": fails, **{c: len(rec.hours[c]) for c in CAUSES},
                     "failures_per_gpu_hour": fails / gpu_h if gpu_h > 0 else None,
                     "partition_failures_per_gpu_hour": rate, "expected_failures": expected,
                     "p_value": poisson_sf(fails, expected) if gpu_h > 0 else 1.0})
    tested = [i for i, r in enumerate(rows) if r["gpu_hours"] > 0]
    adjusted = holm([rows[i]["p_value"] for i in tested])
    for i, p in zip(tested, adjusted, strict=True):
        rows[i]["p_adjusted"] = p
    for r in rows:
        r.setdefault("p_adjusted", 1.0)
        r["suspect"] = bool(r["failures"] >= min_failures and r["p_adjusted"] < alpha
                            and (r["failures_per_gpu_hour"] or 0) > r["partition_failures_per_gpu_hour"])
    ranked = sorted(rows, key=lambda r: (-(r["failures_per_gpu_hour"] or 0.0), r["p_value"], r["node"]))
    for rank, r in enumerate(ranked, 1):
        r["rank"] = rank
    findings = [finding_text(r) for r in ranked if r["suspect"]]
    # MTTF by job size: a job failed for a node-level cause when it ended NODE_FAIL or failed in a failure hour
    sizes: dict[str, list[float]] = {}
    for lo, _ in SIZE_BUCKETS:
        sizes[size_bucket(lo)] = [0.0, 0.0, 0.0]  # jobs, run hours, failed jobs
    for job in jobs:
        s = sizes[size_bucket(job.gpus)]
        s[0] += 1
        s[1] += job.elapsed_s / 3600.0
        hour = int(job.end // 3600)
        node_level = job.state == "NODE_FAIL" or (
            (job.nonzero_exit or any(e.xid_errors > 0 or e.ecc_dbe > 0 for e in events.get(job.job_id, ())))
            and any(hour in failed_hours.get(n, ()) for n in job.nodes))
        s[2] += node_level
    by_size = []
    total = [0.0, 0.0, 0.0]
    for bucket, (count, hours, failed) in sizes.items():
        total = [total[0] + count, total[1] + hours, total[2] + failed]
        mttf = hours / failed if failed else None
        by_size.append({"job_size": bucket, "jobs": int(count), "run_hours": round(hours, 6),
                        "failed_jobs": int(failed), "mttf_hours": mttf, "ettr": ettr(mttf, restore_s, checkpoint_s)})
    fleet_mttf = total[1] / total[2] if total[2] else None
    return {
        "test": TEST, "alpha": alpha, "min_failures": min_failures, "min_shared_jobs": MIN_SHARED_JOBS,
        "min_shared_users": MIN_SHARED_USERS, "nodes_tested": len(tested), "telemetry_joined": bool(gpu_events),
        "suspects": [r["node"] for r in ranked if r["suspect"]], "findings": findings,
        "nodes": ranked,
        "fleet": {"jobs": int(total[0]), "run_hours": round(total[1], 6), "failed_jobs": int(total[2]),
                  "mttf_hours": fleet_mttf, "ettr": ettr(fleet_mttf, restore_s, checkpoint_s),
                  "restore_seconds": restore_s, "restore_source": restore_source,
                  "checkpoint_interval_seconds": checkpoint_s},
        "by_job_size": by_size,
    }


def finding_text(row: Mapping[str, Any]) -> str:
    causes = ", ".join(f"{row[c]} {c}" for c in CAUSES if row[c])
    return (f"{row['node']}: {row['failures']} failure hour(s) ({causes}) in {row['gpu_hours']:.1f} GPU-hours, "
            f"{row['failures_per_gpu_hour']:.4g}/GPU-hour vs {row['partition_failures_per_gpu_hour']:.4g} pooled "
            f"on {row['partition'] or '(none)'} (expected {row['expected_failures']:.2f}); {TEST}: "
            f"p = {row['p_value']:.3g}, Holm-corrected p = {row['p_adjusted']:.3g}")


def reaccept_lines(section: Mapping[str, Any], last_pass: Mapping[str, datetime] | None, now: datetime,
                   stale_days: int) -> dict[str, Any]:
    """The `gpuclust accept submit` lines for the named nodes (one per partition), and the sweep of this
    period's nodes whose last passing acceptance is older than `stale_days` (or none: never accepted); the sweep
    is left out when no acceptance results were read (`last_pass` None)."""
    def line(part: str, names: Sequence[str]) -> str:
        return (f"gpuclust accept submit allreduce --partition {part} --nodes {len(names)} "
                f"--nodelist {hostlist.fold(names)}")

    suspects: dict[str, list[str]] = defaultdict(list)
    by_part: dict[str, list[str]] = defaultdict(list)
    for r in section.get("nodes", []):
        by_part[r["partition"]].append(r["node"])
        if r["suspect"]:
            suspects[r["partition"]].append(r["node"])
    out: dict[str, Any] = {"suspects": [line(p, n) for p, n in sorted(suspects.items()) if p],
                           "stale_days": stale_days, "stale": None, "sweep": None}
    if last_pass is not None:
        cutoff = now - timedelta(days=stale_days)
        stale = {p: [n for n in names if n not in last_pass or last_pass[n] < cutoff] for p, names in by_part.items()}
        out["stale"] = sorted(n for names in stale.values() for n in names)
        out["sweep"] = [line(p, n) for p, n in sorted(stale.items()) if p and n]
    return out


TABLE_COLUMNS = ("rank", "node", "partition", "jobs", "gpu_hours", "failures", *CAUSES, "failures_per_gpu_hour",
                 "partition_failures_per_gpu_hour", "expected_failures", "p_value", "p_adjusted", "suspect")


def table_rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lemon_nodes table (CSV, Parquet, the page): one row per node, ranked."""
    return [{k: r[k] for k in TABLE_COLUMNS} for r in section.get("nodes", [])]


def last_pass(results_dir: str) -> dict[str, datetime] | None:
    """Per node, its last passing acceptance (accept's public face); None when no results could be read."""
    if not results_dir or not Path(results_dir).is_dir():
        return None
    from gpuclust.accept import last_pass_by_node, scan_results

    try:
        scan = scan_results(results_dir)
    except OSError:
        return None
    return last_pass_by_node(scan.jobs)


def section_for(jobs: Iterable[JobRow], config: SiteConfig, now: datetime, *,
                gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None) -> dict[str, Any]:
    """report.json's `lemon_nodes` for the site: the restore time from the acceptance results, the
    re-acceptance lines as of `now` (the period's end in a report)."""
    from gpuclust.accounting.history.sources import measured_restore_seconds

    measured = measured_restore_seconds(config.results_dir) if config.results_dir else {}
    restore, source = restore_seconds(measured, {p: c.expect_restore_seconds for p, c in config.partitions.items()})
    section = compute(jobs, gpu_events=gpu_events, restore_s=restore, restore_source=source)
    section["reaccept"] = reaccept_lines(section, last_pass(config.results_dir), now, config.acceptance_stale_days)
    return section


def attach(report: Report, jobs: Iterable[JobRow], config: SiteConfig, period: Period, *,
           gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None) -> None:
    """Add `lemon_nodes`, its table and its definitions to a built report."""
    import pandas as pd

    section = section_for(jobs, config, period.end, gpu_events=gpu_events)
    report.data["lemon_nodes"] = section
    report.tables["lemon_nodes"] = pd.DataFrame(table_rows(section), columns=list(TABLE_COLUMNS))
    report.data["definitions"] = {**report.data.get("definitions", {}),
                                  **{f"lemon_nodes.{k}": v for k, v in DEFINITIONS.items()}}
