"""The report: every table and figure put together (build_report), and the sizing figures."""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures.jsonrecords import _plain, records  # noqa: F401  (metrics' names too)
from gpuclust.accounting.figures.metrics.attempts import Attempts, attempts
from gpuclust.accounting.figures.metrics.definitions import (
    DEFAULT_TOP,
    DEFINITIONS,
    GPU_MONTH_HOURS,
    NONE_LABEL,
    PARALLEL_MIN_ATTEMPTS,
    Report,
)
from gpuclust.accounting.figures.metrics.runs import (
    Runs,
    _raw_sums,
    assign_runs,
    group_table,
    label_names,
    run_sums,
    runs_of,
    totals,
)
from gpuclust.accounting.figures.metrics.waits import wait_tables
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import SiteConfig
from gpuclust.errors import InputError

if TYPE_CHECKING:
    from gpuclust.accounting.ingest.normalize import ParseResult


def top_failures(att: Attempts, chosen: np.ndarray, top: int) -> pd.DataFrame:
    """Attempts in `chosen` that are not done, by GPU-hours (then earliest End, then input order)."""
    return failure_table(att, top_failure_picks(att, chosen, top))


def top_failure_picks(att: Attempts, chosen: np.ndarray, top: int, row_order: np.ndarray | None = None
                      ) -> np.ndarray:
    """The attempts (indices) of top_failures, in its order. `row_order`: each table row's place in the
    input order, where the table is a part of the input (a partitioned build's bucket); None: the row."""
    cand = chosen[~att.done[chosen]]
    if len(cand) > top:
        # Only the top GPU-hours can make the list: sort just those (ties at the cut included).
        cut = np.partition(att.gpu_hours[cand], len(cand) - top)[len(cand) - top]
        cand = cand[att.gpu_hours[cand] >= cut]
    rows = att.row[cand] if row_order is None else row_order[att.row[cand]]
    order = np.lexsort((rows, att.end[cand], -att.gpu_hours[cand]))
    return cand[order[:top]]


def failure_table(att: Attempts, pick: np.ndarray) -> pd.DataFrame:
    """The top_failures table of the attempts `pick`, in that order."""
    rows = pa.array(att.row[pick])
    table = att.table

    def values(name: str) -> list[Any]:
        return table.column(name).take(rows).to_pylist()

    job_id = [str(b) if lead else str(j) for j, b, lead in
              zip(values("job_id"), values("job_base"), att.het_lead[pick], strict=True)]
    exit_text = [f"{c}:{s}" if k is not False and c is not None else None for c, s, k in
                 zip(values("exit_code"), values("exit_signal"), values("exit_code_known"), strict=True)]
    return pd.DataFrame(
        {
            "job_id": pd.Series(job_id, dtype=object),
            **{name: pd.Series([v or "" for v in values(name)], dtype=object)
               for name in ("user", "account", "partition", "job_name", "state")},
            "exit_code": pd.Series(exit_text, dtype=object),
            # (an attempt without AllocTRES: its GPU-hours and cost are unknown, NaN -> null, never 0)
            "gpu_hours": np.where(att.gpus_unknown[pick], np.nan, np.round(att.gpu_hours[pick], 9))
            if len(att.gpus_unknown) else np.round(att.gpu_hours[pick], 9),
            "cost": np.where(att.gpus_unknown[pick], np.nan, np.round(att.cost[pick], 9))
            if len(att.gpus_unknown) else np.round(att.cost[pick], 9),
            "node_list": pd.Series([v or "" for v in values("nodelist")], dtype=object),
            "start": pd.Series([_utc_iso(v) for v in att.start[pick]], dtype=object),
        }
    )


def _utc_iso(epoch: float) -> str | None:
    """An epoch second as ISO 8601 in UTC (2026-12-02T10:00:00+00:00); None when unknown."""
    if not math.isfinite(epoch):
        return None
    return datetime.fromtimestamp(int(epoch), timezone.utc).isoformat()


# ---- the report ----------------------------------------------------------------------------------------


def run_tables(
    att: Attempts, config: SiteConfig, period: Period, runs_assigned: Callable[[], Any] | None = None
) -> tuple[dict[str, pd.DataFrame], Runs]:
    """runs_by_account, _partition, _wckey, _label_<key> and _user over the runs attributed to `period`, and
    those runs. `runs_assigned()`, when given, is called once the runs are assigned, and returns once `att`
    is priced (by another thread)."""
    dims, sums, runs_p = run_group_sums(att, config, period, runs_assigned)
    tables = {f"runs_by_{dim}": group_table(sums, codes, names, dim.removeprefix("label_"))
              for dim, (codes, names) in dims.items()}
    return tables, runs_p


def run_group_sums(
    att: Attempts, config: SiteConfig, period: Period, runs_assigned: Callable[[], Any] | None = None
) -> tuple[dict[str, tuple[np.ndarray, list[str]]], dict[str, np.ndarray], Runs]:
    """The runs attributed to `period`, summed (run_sums) per combination of their groups: per dimension
    (account, partition, wckey, label_<key>, user), each combination's code into that dimension's names; the
    sums; the runs. group_table makes a dimension's table of them."""
    run = assign_runs(att, float(config.retry_window_s))
    if runs_assigned is not None:
        runs_assigned()
    att.price()
    runs = runs_of(att, run)
    in_period = (runs.end >= period.start_epoch) & (runs.end < period.end_epoch)
    runs_p = runs if in_period.all() else runs.take(in_period)
    first = runs_p.first  # attempt index of each run's first attempt: its account, partition, labels

    labels = tuple(config.report_labels)
    first_rows = att.row[first]
    account, partition, wckey, user = (att.codes(name, rows=first_rows)
                                       for name in ("account", "partition", "wckey", "user"))
    label_values = label_names(att.codes("comment", rows=first_rows), account, labels, config)
    dims: dict[str, tuple[np.ndarray, list[str]]] = {
        "account": (account.codes, account.names()),
        "partition": (partition.codes, partition.names()),
        "wckey": (wckey.codes, [v or NONE_LABEL for v in [*wckey.values, None]]),
        **{f"label_{key}": label_values[key] for key in labels},
        # per user (every attempt of a run is its user's): what each user spent, beside their GPU use
        "user": (user.codes, user.names()),
    }
    # Sum per combination of the grouping codes first (few of them), then per group of each dimension.
    # (The label dimensions share one code array, the (comment, account) pair: it counts once.)
    code_arrays = list({id(codes): (codes, len(names)) for codes, names in dims.values()}.values())
    if math.prod(size + 1 for _, size in code_arrays) < 2**62:
        combo = np.zeros(len(first), dtype=np.int64)
        for codes, size in code_arrays:
            combo = combo * (size + 1) + codes  # mixed radix: exact, as the product fits
    else:
        combo = np.arange(len(first), dtype=np.int64)
    combo_id, combo_keys = sorting.factorize(combo)
    sums = run_sums(runs_p, combo_id, len(combo_keys))
    representative = np.zeros(len(combo_keys), dtype=np.int64)
    representative[combo_id] = np.arange(len(combo_id))
    return {dim: (codes[representative], names) for dim, (codes, names) in dims.items()}, sums, runs_p


def check_target(target: float | None) -> None:
    """The sizing target: completed runs per month, a finite number >= 0 (None: none)."""
    if target is not None and not 0 <= target < math.inf:
        raise InputError(f"--target must be a finite number of completed runs per month >= 0, got {target}; "
                         "give 0 or more, e.g. --target 500")


def build_report(
    table: pa.Table,
    config: SiteConfig,
    period: Period,
    *,
    target: float | None = None,
    top: int = DEFAULT_TOP,
    input_info: dict[str, Any] | None = None,
    parallel_min_attempts: int = PARALLEL_MIN_ATTEMPTS,
    equivalents: np.ndarray | None = None,
) -> Report:
    """The report of `table` over `period`. From `parallel_min_attempts` rows on, pricing, waits and top
    failures run on a second thread. `equivalents`: each row's GPU-equivalents (figures.shares; None: whole
    GPUs)."""
    check_target(target)
    lo, hi = float(period.start_epoch), float(period.end_epoch)
    if table.num_rows < parallel_min_attempts:
        att = attempts(table, config, equivalents=equivalents)
        started_p = np.flatnonzero((att.start >= lo) & (att.start < hi))
        ended_p = np.flatnonzero((att.end >= lo) & (att.end < hi))
        waits = wait_tables(att, started_p)
        run_part, runs_p = run_tables(att, config, period)
        top_table = top_failures(att, ended_p, top)
    else:
        # numpy releases the GIL in its sorts, gathers and arithmetic, so a second core takes what needs no
        # runs: the time columns, pricing and the top failures while this thread assigns the runs (the
        # memory-bound run assignment is quickest alone), then the waits while it sums the runs.
        with ThreadPoolExecutor(max_workers=1) as pool:
            att = attempts(table, config, pool, equivalents)
            started_p = np.flatnonzero((att.start >= lo) & (att.start < hi))
            ended_p = np.flatnonzero((att.end >= lo) & (att.end < hi))
            priced = pool.submit(att.price)
            top_future = pool.submit(top_failures, att, ended_p, top)
            waits_future: Future[dict[str, pd.DataFrame]] | None = None

            def runs_assigned() -> None:
                nonlocal waits_future
                waits_future = pool.submit(wait_tables, att, started_p)
                priced.result()

            run_part, runs_p = run_tables(att, config, period, runs_assigned)
            assert waits_future is not None
            waits = waits_future.result()
            top_table = top_future.result()

    tables: dict[str, pd.DataFrame] = {}
    for dim in ("partition", "account", "qos"):
        tables[f"queue_wait_by_{dim}"] = waits[f"queue_wait_by_{dim}"]
        tables[f"hold_by_{dim}"] = waits[f"hold_by_{dim}"]
    tables.update(run_part)
    tables["top_failures"] = top_table
    report = assemble_report(period, config, tables, totals(runs_p), _raw_sums(runs_p), len(ended_p),
                             target=target, input_info=input_info)
    report.data["input"]["left_out"] = att.left_out
    add_unknown_gpus(report.data["input"],
                     int(np.count_nonzero(att.gpus_unknown[ended_p] & ~att.share_unknown[ended_p]))
                     if len(att.gpus_unknown) else 0)
    if equivalents is not None:
        add_unknown_shares(report.data["input"], int(np.count_nonzero(att.share_unknown[ended_p])))
    return report


def add_unknown_shares(info: dict[str, Any], count: int) -> None:
    """Name the `count` attempts of the period whose share of a GPU is unknown (figures.shares), if any."""
    if count:
        add_unknown(info, "GPU share", count,
                    "GPU-hours and cost of attempts whose AllocTRES has a GPU share the input cannot give (an "
                    "unknown MIG profile, shards without a known node layout, a node whose layout changed; "
                    "input.gpu_share_warnings names each): totals gpu_hours, completed_run_gpu_hours and cost sum "
                    "the other attempts; gpu_device_hours counts their devices")


def add_unknown_gpus(info: dict[str, Any], count: int) -> None:
    """Name the `count` attempts of the period whose GPUs are unknown (no AllocTRES), if any."""
    if count:
        add_unknown(info, "AllocTRES", count,
                    "GPU-hours and cost of attempts that ran (a NodeList, Elapsed > 0 or a state only a run can "
                    "have) without an AllocTRES: totals gpu_hours, completed_run_gpu_hours and cost sum the other "
                    "attempts; these count in runs, attempts and waits")


BUCKETS = ("rejected", "steps_dropped", "superseded", "filtered_out", "attempt_rows", "running", "not_started",
           "no_allocation")


def rows_accounted(parsed: ParseResult, info: dict[str, Any]) -> dict[str, Any]:
    """Where every record read went (report.json input.rows_accounted): each lands in exactly one bucket, and
    `read` = the sum of the buckets (`balanced`). Attempts ending outside the period are attempt rows too.
    `info` is the report's input section: build_report has put the metrics' buckets (`left_out`) there."""
    left = info.get("left_out") or {}
    buckets = {
        "rejected": parsed.rejected, "steps_dropped": parsed.steps_dropped,
        "superseded": int(info.get("superseded", 0)), "filtered_out": int(info.get("filtered_out", 0)),
        **{name: int(left.get(name, 0)) for name in ("attempt_rows", "running", "not_started", "no_allocation")},
    }
    read = parsed.table.num_rows + parsed.rejected + parsed.steps_dropped
    return {"read": read, **buckets, "balanced": read == sum(buckets.values())}


def add_unknown(info: dict[str, Any], column: str, count: int | None, what: str) -> None:
    """Name a figure the input cannot give (report.json input.unknown): never 0, always counted and named.
    `count`: how many attempts it concerns (None: every one, the dump has no such column)."""
    info.setdefault("unknown", []).append({"missing": column, "unknown": what, "count": count})


def assemble_report(
    period: Period,
    config: SiteConfig,
    tables: dict[str, pd.DataFrame],
    tot: dict[str, Any],
    raw_sums: dict[str, Any],
    attempts_in_period: int,
    *,
    target: float | None = None,
    input_info: dict[str, Any] | None = None,
) -> Report:
    """The Report from its computed tables (waits, runs by group, top failures) and the period's totals:
    report.json's layout, and the totals and sizing tables."""
    labels = tuple(config.report_labels)
    tables["totals"] = pd.DataFrame([tot])
    data: dict[str, Any] = {
        "period": period.as_dict(),
        "queue_wait": {f"by_{d}": records(tables[f"queue_wait_by_{d}"]) for d in ("partition", "account", "qos")},
        "hold": {f"by_{d}": records(tables[f"hold_by_{d}"]) for d in ("partition", "account", "qos")},
        "runs": {
            "by_account": records(tables["runs_by_account"]),
            "by_partition": records(tables["runs_by_partition"]),
            "by_wckey": records(tables["runs_by_wckey"]),
            "by_label": {key: records(tables[f"runs_by_label_{key}"]) for key in labels},
            "by_user": records(tables["runs_by_user"]),
        },
        "totals": tot,
        "top_failures": records(tables["top_failures"]),
        "sizing": sizing(raw_sums, period, target if target is not None else config.target_completed_runs_per_month,
                         "--target" if target is not None else "site target_completed_runs_per_month"),
        "input": dict(input_info or {}),
        "definitions": DEFINITIONS,
    }
    data["input"]["attempts_in_period"] = int(attempts_in_period)
    tables["sizing"] = pd.DataFrame([data["sizing"]])
    return Report(period, data, tables)


def sizing(tot: dict[str, Any], period: Period, target: float | None, target_source: str) -> dict[str, Any]:
    """report.json `sizing` from the unrounded totals. The cost per completed run is not repeated here: it is
    totals.cost_per_completed_run (one figure, one place)."""
    completed = tot["completed"]
    gpu_hours = tot["gpu_hours"]
    per_gpu_month = completed / (gpu_hours / GPU_MONTH_HOURS) if gpu_hours > 0 else None
    required = target / per_gpu_month if target is not None and per_gpu_month else None
    days = period.seconds / 86400  # (the true length: a 25-hour DST day is 25 hours)
    return {
        "completed_run_share_of_allocated": round(tot["completed_run_gpu_hours"] / gpu_hours, 9)
        if gpu_hours > 0 else None,
        "completed_runs_per_gpu_month": None if per_gpu_month is None else round(per_gpu_month, 9),
        "target_completed_runs_per_month": target,
        "target_source": target_source if target is not None else None,
        "required_gpus": None if required is None else float(f"{required:.9g}"),
        "gpus_used_on_average": round(gpu_hours / (days * 24), 9) if days > 0 else None,
        "gpu_month_hours": GPU_MONTH_HOURS,
    }


def no_gpu_accounted(table: pa.Table) -> bool:
    """Whether jobs ran with an AllocTRES but none names a GPU: a cluster whose AccountingStorageTRES lacks
    gres/gpu (its GPU jobs look like CPU jobs to sacct), or a CPU-only dump."""
    if not table.num_rows or "gpus" not in table.column_names or "alloc_tres" not in table.column_names:
        return False
    if pc.max(table.column("gpus")).as_py():
        return False
    tres = table.column("alloc_tres")
    if pa.types.is_dictionary(tres.type):
        tres = tres.cast(pa.string())
    return bool(pc.sum(pc.greater(pc.utf8_length(pc.fill_null(tres, "")), 0)).as_py())


def note_no_gpu(info: dict[str, Any]) -> None:
    """Say in the report's input section that no attempt's AllocTRES names a GPU (no_gpu_accounted)."""
    info.setdefault("notes", []).append(
        "No job here has a GPU in its AllocTRES, though jobs ran with allocations: if they had GPUs, Slurm did "
        "not record them (add gres/gpu to AccountingStorageTRES in slurm.conf, `gpuclust audit partition` "
        "checks it); the GPU-hours are 0 as recorded, not as used.")
