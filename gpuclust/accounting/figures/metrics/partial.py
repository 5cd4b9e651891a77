"""build_report in parts: the figures of one bucket of rows kept in a form that adds up (PartialFigures), and
the report of several buckets merged from them (merge_report).

A partitioned build (gpuclust.accounting.figures.partitioned) splits the rows by user, so that every run lies whole
in one bucket (a run's attempts share their user). Each figure then merges exactly:

* runs by group and the totals are sums over disjoint runs;
* the wait and hold quantiles come from the distinct (group, value) pairs and their counts (ValueCounts):
  exact quantiles, not a sketch;
* top failures are the top of each bucket's top, ordered by the same keys, input order included (each
  bucket row's place in the whole input: `row_order`).

Sums of floats are added in another order than in one table, so a figure may differ from build_report's in
its last (ninth) decimal."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures.metrics.assembly import (
    add_unknown_gpus,
    add_unknown_shares,
    assemble_report,
    check_target,
    failure_table,
    no_gpu_accounted,
    note_no_gpu,
    run_group_sums,
    top_failure_picks,
)
from gpuclust.accounting.figures.metrics.attempts import attempts
from gpuclust.accounting.figures.metrics.definitions import DEFAULT_TOP, Report
from gpuclust.accounting.figures.metrics.runs import (
    SUM_FIELDS,
    add_run_totals,
    finish_totals,
    group_table,
    run_totals,
)
from gpuclust.accounting.figures.metrics.waits import ValueCounts, wait_counts
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import SiteConfig

LEFT_OUT_COUNTS = ("rows", "running", "not_started", "no_allocation", "attempt_rows", "attempt_rows_gpus_unknown",
                   "rows_total")


@dataclass
class PartialFigures:
    """One bucket's figures before merging."""

    group_names: dict[str, list[str]]  # per dimension: the group of each combination of groups
    group_sums: dict[str, np.ndarray]  # SUM_FIELDS per combination
    waits: dict[str, ValueCounts]  # queue_wait_by_* and hold_by_*
    failures: pd.DataFrame  # top_failures of the bucket
    failure_keys: pd.DataFrame  # their order keys: gpu_hours, end, input order
    totals: dict[str, Any]  # run_totals
    attempts_in_period: int
    left_out: dict[str, Any] = field(default_factory=dict)
    gpus_unknown: int = 0
    gpus_seen: bool = False  # some row's AllocTRES names a GPU
    no_gpu_accounted: bool = False  # no_gpu_accounted of the bucket's rows
    shares_unknown: int = 0  # attempts whose GPU share is unknown (figures.shares): apart from gpus_unknown


def partial_figures(table: pa.Table, config: SiteConfig, period: Period, *, top: int = DEFAULT_TOP,
                    row_order: np.ndarray | None = None, equivalents: np.ndarray | None = None) -> PartialFigures:
    """The figures of the rows `table` (whole runs: every attempt of each of its runs), `row_order`: each
    row's place in the whole input (None: the table is the input); `equivalents`: each row's GPU-equivalents
    (figures.shares; None: whole GPUs)."""
    lo, hi = float(period.start_epoch), float(period.end_epoch)
    att = attempts(table, config, equivalents=equivalents)
    started_p = np.flatnonzero((att.start >= lo) & (att.start < hi))
    ended_p = np.flatnonzero((att.end >= lo) & (att.end < hi))
    waits = wait_counts(att, started_p)
    dims, sums, runs_p = run_group_sums(att, config, period)
    pick = top_failure_picks(att, ended_p, top, row_order)
    rows = att.row[pick] if row_order is None else row_order[att.row[pick]]
    return PartialFigures(
        group_names={dim: [names[c] for c in codes.tolist()] for dim, (codes, names) in dims.items()},
        group_sums=sums,
        waits=waits,
        failures=failure_table(att, pick),
        failure_keys=pd.DataFrame({"gpu_hours": att.gpu_hours[pick], "end": att.end[pick], "row": rows}),
        totals=run_totals(runs_p),
        attempts_in_period=len(ended_p),
        left_out=att.left_out,
        gpus_unknown=int(np.count_nonzero(att.gpus_unknown[ended_p] & ~att.share_unknown[ended_p]))
        if len(att.gpus_unknown) else 0,
        shares_unknown=int(np.count_nonzero(att.share_unknown[ended_p])) if len(att.share_unknown) else 0,
        gpus_seen=bool(table.num_rows and pc.max(table.column("gpus")).as_py()),
        no_gpu_accounted=no_gpu_accounted(table),
    )


def merge_report(parts: list[PartialFigures], config: SiteConfig, period: Period, *, target: float | None = None,
                 top: int = DEFAULT_TOP, input_info: dict[str, Any] | None = None) -> Report:
    """build_report's Report from the figures of disjoint buckets of whole runs."""
    check_target(target)
    if not parts:
        raise ValueError("merge_report needs at least one part (an empty table gives one)")
    input_info = dict(input_info or {})
    # (with no GPU in any bucket, each bucket's no_gpu_accounted says whether it had allocations)
    if not any(p.gpus_seen for p in parts) and any(p.no_gpu_accounted for p in parts):
        input_info["notes"] = list(input_info.get("notes", []))
        note_no_gpu(input_info)
    tables: dict[str, pd.DataFrame] = {}
    for key in parts[0].waits:
        tables[key] = ValueCounts.merge([p.waits[key] for p in parts]).table(key.rsplit("_by_", 1)[1])
    for dim in parts[0].group_names:
        names = [name for p in parts for name in p.group_names[dim]]
        sums = {name: np.concatenate([p.group_sums[name] for p in parts]) for name in SUM_FIELDS}
        tables[f"runs_by_{dim}"] = group_table(sums, np.arange(len(names)), names, dim.removeprefix("label_"))
    keys = pd.concat([p.failure_keys for p in parts], ignore_index=True)
    order = np.lexsort((keys["row"].to_numpy(), keys["end"].to_numpy(), -keys["gpu_hours"].to_numpy()))[:top]
    failures = pd.concat([p.failures for p in parts], ignore_index=True)
    tables["top_failures"] = failures.iloc[order].reset_index(drop=True)
    sums_all = reduce(add_run_totals, (p.totals for p in parts))
    report = assemble_report(period, config, tables, finish_totals(sums_all), sums_all,
                             sum(p.attempts_in_period for p in parts), target=target, input_info=input_info)
    left_out = dict(parts[0].left_out)
    for name in LEFT_OUT_COUNTS:
        if name in left_out:
            left_out[name] = sum(int(p.left_out.get(name, 0)) for p in parts)
    report.data["input"]["left_out"] = left_out
    add_unknown_gpus(report.data["input"], sum(p.gpus_unknown for p in parts))
    add_unknown_shares(report.data["input"], sum(p.shares_unknown for p in parts))
    return report
