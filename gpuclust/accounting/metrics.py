"""Metrics over normalized accounting rows: attempts, runs, queue wait, cost, sizing.

The definitions (``DEFINITIONS``) are printed on the report page; this module implements them exactly.

A million rows must take well under a second, so the row-level work is numpy over integer codes: string
columns become dictionary codes once, groups are sorts and ``reduceat``/``bincount`` over those codes, and
strings are only looked at per distinct value. The results are pandas DataFrames (one per report table).
The only Python loop is the resubmission matcher for the rare groups of same-named jobs that overlap in
time (``_exact_runs``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting import fields, sorting
from gpuclust.accounting.period import Period
from gpuclust.config import SiteConfig
from gpuclust.errors import InputError

GPU_MONTH_HOURS = 730.0  # 365 * 24 / 12: one GPU allocated for an average month
DEFAULT_TOP = 20

DEFINITIONS: dict[str, str] = {
    "rows": "Input rows are job allocation records (no steps). With sacct -D, earlier executions of a requeued "
    "job are their own rows, in state REQUEUED. One row is kept per execution (JobIDRaw + Start), in its latest state.",
    "gpus": "A row's GPUs are the count of the untyped gres/gpu key in AllocTRES; without it, the sum of the typed "
    "gres/gpu:<type> keys (sacct 24.11 can record those alone); 0 if neither. Its GPU type is the <type> of its "
    "typed keys when they name one type, else the partition's configured gpu_type; GPUs of several types "
    "(gres/gpu:a100=1,gres/gpu:h100=3) are a mix, and GPUs of the untyped total beyond the typed ones are of "
    "the partition's type.",
    "gpu_hours": "GPU-hours = Elapsed seconds x GPUs / 3600.",
    "attempt": "An allocation row that started and ended. The components of a het job (123+0, 123+1) form one "
    "attempt: GPU-hours and cost are summed; times, state and name come from component +0.",
    "queue_wait": "queue wait = Start - Eligible, or Start - Submit where Eligible is unknown; over attempts that "
    "started in the period. Median and p90 use linear interpolation (pandas quantile).",
    "hold": "hold = Eligible - Submit, over attempts that started in the period and have a known Eligible.",
    "run": "The unit of work a user wants done. Its attempts are (a) all rows of one job: one JobID and user, "
    "each execution submitted at most 1 h after the previous one ended (a requeue resubmits at once; a JobID "
    "that Slurm reused after a database reset or counter wrap, for another user or a later Submit, is "
    "another job) "
    "and (b) resubmissions: attempts by the same user, account and job name (array tasks: name plus task index) "
    "where the run's latest attempt did not complete, the new attempt's Submit comes after that attempt's End, "
    "and within the retry window.",
    "completed": "A run is completed when its last attempt is COMPLETED with ExitCode 0:0. retries = attempts - 1.",
    "attribution": "A run belongs to the account, partition and labels of its first attempt, and to the period in "
    "which its last attempt ended; all its attempts, GPU-hours and cost count there.",
    "cost": "Cost of an attempt = GPU-hours x the price per GPU-hour of its GPU type (site config [gpu_type]), "
    "falling back to the partition's price_per_gpu_hour. A mix of types is priced type by type: each type's "
    "share of the GPUs at its own price (a100=1,h100=3 for 1 h: 1 x a100 + 3 x h100). GPU-hours without any "
    "price are reported as unpriced_gpu_hours and add nothing to cost.",
    "useful_gpu_hours": "GPU-hours of the completing attempt of each completed run.",
    "cost_per_completed_run": "cost (all attempts, failed and retried included) / completed runs; null when 0.",
    "labels": "Report dimensions: account, wckey, and key=value pairs in --comment for the configured keys "
    "(site report_labels); a key missing from the comment takes the account's configured label, else '(none)'.",
    "top_failures": "Attempts that ended in the period and are not COMPLETED 0:0, ranked by GPU-hours (then "
    "earliest End, then input order), with their NodeList and Start (UTC).",
    "sizing": "effective unit cost = all cost / completed runs; useful ratio = useful / allocated GPU-hours; "
    "completed runs per GPU-month = completed runs / (GPU-hours / 730); required GPUs = target completed runs "
    "per month / completed runs per GPU-month.",
}

GROUP_COLUMNS = ("runs", "completed", "attempts", "retries", "gpu_hours", "useful_gpu_hours", "cost",
                 "cost_per_completed_run", "unpriced_gpu_hours")
WAIT_COLUMNS = ("jobs", "median_s", "p90_s", "max_s")
NONE_LABEL = "(none)"
PARALLEL_MIN_ATTEMPTS = 20_000  # rows; below this a second thread costs more than it saves


@dataclass
class Report:
    period: Period
    data: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


# ---- columns as codes and numbers ----------------------------------------------------------------------


@dataclass(frozen=True)
class Coded:
    """A string column as integer codes into `values` (distinct, in first-appearance order); the code
    ``len(values)`` stands for null, so every code indexes a per-value array built by `per_value`."""

    codes: np.ndarray
    values: list[Any]

    def take(self, rows: np.ndarray) -> Coded:
        return Coded(self.codes[rows], self.values)

    def per_value(self, func: Callable[[Any], Any], dtype: Any = object) -> np.ndarray:
        """``func`` of each distinct value, then ``func(None)`` for null: index it with the codes."""
        return np.array([*(func(v) for v in self.values), func(None)], dtype=dtype)

    def names(self, null: str = "") -> list[str]:
        """One name per code (null -> `null`), for `_groups`."""
        return [*(null if v is None else str(v) for v in self.values), null]


def coded(col: pa.Array | pa.ChunkedArray) -> Coded:
    """Dictionary codes of a string column (dictionary-encoded already, or plain)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    assert isinstance(col, pa.DictionaryArray)
    values = col.dictionary.to_pylist()
    indices = col.indices
    codes = np.asarray((pc.fill_null(indices, len(values)) if indices.null_count else indices).to_numpy(
        zero_copy_only=False))
    if len(set(values)) != len(values) or None in values:
        # A dictionary may repeat values (or hold a null): map each code to its first equal value.
        first: dict[Any, int] = {}
        unique: list[Any] = []
        targets: list[int] = []
        for value in values:
            if value is not None and value not in first:
                first[value] = len(unique)
                unique.append(value)
            targets.append(-1 if value is None else first[value])
        remap = np.array([len(unique) if t < 0 else t for t in [*targets, -1]], dtype=np.int64)
        codes, values = remap[codes], unique
    return Coded(codes, values)


def _numbers(col: pa.Array | pa.ChunkedArray, null: float = np.nan, rows: np.ndarray | None = None) -> np.ndarray:
    """A numeric or timestamp column as float64 (times: epoch seconds), `null` where missing; only the
    `rows` given (all when None)."""
    return _values(col, np.float64, null, rows)


def _ints(col: pa.Array | pa.ChunkedArray, null: int, rows: np.ndarray | None = None) -> np.ndarray:
    return _values(col, np.int64, null, rows)


_BUFFER_TYPES = {pa.int64(): np.int64, pa.float64(): np.float64}


def _values(col: pa.Array | pa.ChunkedArray, dtype: Any, null: Any, rows: np.ndarray | None) -> np.ndarray:
    """Column values as `dtype` (at `rows`), `null` where missing. Read straight from the Arrow buffers:
    the rows are taken before any conversion, and no filled copy of the whole column is made."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    kind = np.int64 if pa.types.is_timestamp(col.type) else _BUFFER_TYPES.get(col.type)
    if kind is None or len(col) == 0:  # (bool, int32...: the general way)
        if pa.types.is_timestamp(col.type):
            col = pc.cast(col, pa.int64())
        if col.null_count:
            col = pc.fill_null(col.cast(pa.float64()) if np.dtype(dtype).kind == "f" else col, null)
        out = np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)
        return out if rows is None else out[rows]
    data = np.frombuffer(col.buffers()[1], dtype=kind)[col.offset : col.offset + len(col)]
    picked = data if rows is None else data[rows]
    fresh = rows is not None or picked.dtype != np.dtype(dtype)
    out = picked.astype(dtype, copy=False)
    if col.null_count:
        if not fresh:
            out = out.copy()
        valid = fields.valid_mask(col)
        out[~(valid if rows is None else valid[rows])] = null
    return out


def allocated_mask(table: pa.Table) -> np.ndarray:
    """Rows that got an allocation. sacct gives a job cancelled while pending Start = End = the cancel time,
    but no allocation (AllocTRES empty, NodeList "None assigned", in text and JSON alike): it never started,
    so it is no attempt, and its "queue wait" would be a fiction."""
    col = table.column("alloc_tres")
    if pa.types.is_dictionary(col.type):
        tres = coded(col)
        return tres.per_value(lambda v: bool(v), dtype=bool)[tres.codes]
    return np.asarray(pc.fill_null(pc.greater(pc.binary_length(col), 0), False).to_numpy(zero_copy_only=False), dtype=bool)


# ---- attempts ------------------------------------------------------------------------------------------


@dataclass
class Attempts:
    """One entry per attempt (het components merged), as parallel numpy arrays; `row` is the table row of
    the attempt (for a het job: component +0). String columns are read from `table` on demand, as codes,
    only for the attempts that need them (`codes`)."""

    table: pa.Table
    row: np.ndarray
    key: np.ndarray  # the JobID as an integer: rows of one JobID share it (rule a)
    array_task: np.ndarray  # -1 = not an array task
    submit: np.ndarray
    eligible: np.ndarray
    start: np.ndarray
    end: np.ndarray
    gpu_hours: np.ndarray
    cost: np.ndarray  # NaN where unpriced
    unpriced_gpu_hours: np.ndarray
    done: np.ndarray
    het_lead: np.ndarray  # True for a merged het job
    coded_columns: dict[str, Coded] = field(default_factory=dict)
    pricing: Callable[[], None] | None = None  # while gpu_hours, cost and unpriced_gpu_hours are not computed
    left_out: dict[str, Any] = field(default_factory=dict)  # rows that are no attempt, counted by reason

    def price(self) -> None:
        """Compute gpu_hours, cost and unpriced_gpu_hours, where attempts(pool=...) left them."""
        if self.pricing is not None:
            self.pricing()
            self.pricing = None

    def __len__(self) -> int:
        return len(self.row)

    def codes(self, name: str, at: np.ndarray | None = None, *, rows: np.ndarray | None = None) -> Coded:
        """String column `name` as codes, for the attempts `at` (all when None), or for the table's `rows`
        (``self.row[at]``, taken once for several columns)."""
        column = self.coded_columns.get(name)
        if column is None:  # (two threads may both compute it: harmless)
            column = self.coded_columns[name] = coded(self.table.column(name))
        if rows is None:
            rows = self.row if at is None else self.row[at]
        return column.take(rows)

    def wait_s(self, at: np.ndarray) -> np.ndarray:
        since = self.eligible[at]  # (in place from here: fresh arrays are costly)
        unknown = np.isnan(since)
        if unknown.any():
            since[unknown] = self.submit[at[unknown]]
        np.subtract(self.start[at], since, out=since)
        return since

    def hold_s(self, at: np.ndarray) -> np.ndarray:
        hold = self.eligible[at]
        hold -= self.submit[at]
        return hold


LEFT_OUT_WHY = (
    "Rows that are no attempt and count nowhere else: running = allocated and started but End Unknown (still "
    "running, or suspended, when sacct was read: counted once they end); not_started = no Start (pending); "
    "no_allocation = ended without an allocation (cancelled while pending: no AllocTRES)."
)


def left_out_counts(allocated: np.ndarray, started: np.ndarray, ended: np.ndarray) -> dict[str, Any]:
    """How many rows `attempts` leaves out, and why (report.json input.left_out)."""
    running = int(np.count_nonzero(allocated & started & ~ended))
    not_started = int(np.count_nonzero(~started))
    no_allocation = int(np.count_nonzero(~allocated & started & ended))
    return {"rows": running + not_started + no_allocation, "running": running, "not_started": not_started,
            "no_allocation": no_allocation, "why": LEFT_OUT_WHY}


def attempts(table: pa.Table, config: SiteConfig, pool: ThreadPoolExecutor | None = None) -> Attempts:
    """The attempts of `table` (normalized schema; string columns plain or dictionary-encoded). With a
    `pool`, its thread takes the time columns meanwhile, and GPU-hours and cost are left to `Attempts.price`
    (for that thread to compute while the runs are assigned, which needs neither)."""
    start_all = _numbers(table.column("start"))
    end_all = _numbers(table.column("end"))
    allocated = allocated_mask(table)
    started, ended = ~np.isnan(start_all), ~np.isnan(end_all)
    rows = np.flatnonzero(allocated & started & ended)
    left_out = left_out_counts(allocated, started, ended)
    partition_all = coded(table.column("partition"))
    gtype_all = coded(table.column("gpu_type"))

    prices, unpriced_share = price_table(config, gtype_all.values, partition_all.values)
    partial = bool(((unpriced_share > 0) & (unpriced_share < 1)).any())
    job_base_all = _ints(table.column("job_base"), 0)

    def money(at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """gpu_hours, cost (NaN = unpriced) and unpriced GPU-hours of the rows `at`."""
        gpu_hours = _numbers(table.column("elapsed_s"), 0.0, rows=at)
        gpu_hours *= _numbers(table.column("gpus"), 0.0, rows=at)
        gpu_hours /= 3600.0
        pair = gtype_all.codes[at].astype(np.int64)
        pair *= prices.shape[1]
        pair += partition_all.codes[at]
        price = prices.ravel()[pair]
        if partial:  # a mix of GPU types, some priced and some not
            unpriced = gpu_hours * unpriced_share.ravel()[pair]
        else:
            unpriced = np.where(np.isnan(price), gpu_hours, 0.0)
        price *= gpu_hours
        return gpu_hours, price, unpriced

    # Het jobs (few): the components of one execution become one attempt, component +0.
    het_offset_all = _ints(table.column("het_offset"), -1)
    het_rows = rows[het_offset_all[rows] >= 0]
    merged: tuple[np.ndarray, ...] | None = None
    if len(het_rows):
        lead, sums = _merge_het(job_base_all[het_rows], het_offset_all[het_rows], start_all[het_rows],
                                *money(het_rows))
        lead_rows = het_rows[lead]
        keep = np.ones(len(rows), dtype=bool)  # rows is sorted (flatnonzero): positions by searchsorted
        keep[np.searchsorted(rows, het_rows)] = False
        keep[np.searchsorted(rows, lead_rows)] = True
        rows = rows[keep]
        merged = (np.searchsorted(rows, lead_rows), *sums)

    het_lead = np.zeros(len(rows), dtype=bool)
    if merged is not None:
        het_lead[merged[0]] = True

    def pricing() -> None:
        gpu_hours, cost, unpriced = money(rows)
        if merged is not None:
            at, hours_sum, cost_sum, unpriced_sum = merged
            gpu_hours[at], cost[at], unpriced[at] = hours_sum, cost_sum, unpriced_sum
        att.gpu_hours, att.cost, att.unpriced_gpu_hours = gpu_hours, cost, unpriced

    def ints(name: str, null: int) -> np.ndarray:
        return _ints(table.column(name), null, rows)

    def times() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return (_numbers(table.column("submit"), rows=rows), _numbers(table.column("eligible"), rows=rows),
                start_all[rows], end_all[rows])

    times_future = pool.submit(times) if pool is not None else None
    state = coded(table.column("state"))
    completed_state = state.per_value(lambda v: v == "COMPLETED", dtype=bool)[state.codes[rows]]
    exit_known = np.asarray(pc.fill_null(table.column("exit_code_known"), True).to_numpy(zero_copy_only=False),
                            dtype=bool)[rows]
    exit_ok = (ints("exit_code", -1) == 0) & (ints("exit_signal", -1) == 0)
    array_task = ints("array_task", -1)
    key = _job_key(job_base_all[rows], array_task)
    submit, eligible, start, end = times() if times_future is None else times_future.result()
    unset = np.zeros(0)
    att = Attempts(
        table=table, row=rows, key=key, array_task=array_task, submit=submit, eligible=eligible,
        start=start, end=end, gpu_hours=unset, cost=unset, unpriced_gpu_hours=unset,
        done=completed_state & (exit_ok | ~exit_known), het_lead=het_lead,
        coded_columns={"partition": partition_all, "gpu_type": gtype_all, "state": state}, pricing=pricing,
        left_out=left_out,
    )
    if pool is None:
        att.price()
    return att


def price_table(
    config: SiteConfig, gpu_types: Sequence[str | None], partitions: Sequence[str | None]
) -> tuple[np.ndarray, np.ndarray]:
    """Per (GPU type, partition) pair, the type codes ``0..len(gpu_types)`` (the last: null) by the
    partition codes likewise: the priced cost of one GPU-hour (NaN when nothing is priced) and the share of
    the GPU-hours that has no price.

    A single type (or none: the partition's configured type) is priced at its rate, falling back to the
    partition's price. A mix (``a100=1,h100=3``, see fields.gpu_facts) is priced type by type: each type's
    share of the GPUs at its own rate; the ``*`` share (GPUs of no stated type) as an untyped row."""
    parts: list[str | None] = [*partitions, None]
    prices = np.full((len(gpu_types) + 1, len(parts)), np.nan, dtype=np.float64)
    unpriced = np.zeros(prices.shape, dtype=np.float64)
    for t, own_type in enumerate([*gpu_types, None]):
        mix = fields.gpu_mix(own_type)
        for p, part in enumerate(parts):
            if mix is None:
                price = config.price_per_gpu_hour(own_type or config.partition_gpu_type(part), part)
                prices[t, p] = np.nan if price is None else price
                unpriced[t, p] = 1.0 if price is None else 0.0
                continue
            total = sum(mix.values())
            priced_cost, priced_share = 0.0, 0.0
            for name, count in mix.items():
                kind = config.partition_gpu_type(part) if name == fields.MIX_OTHER else name
                price = config.price_per_gpu_hour(kind, part)
                if price is not None:
                    priced_cost += price * count / total
                    priced_share += count / total
            prices[t, p] = priced_cost if priced_share > 0 else np.nan
            unpriced[t, p] = 0.0 if priced_share >= 1 else 1.0 - priced_share
    return prices, unpriced


def _job_key(job_base: np.ndarray, array_task: np.ndarray) -> np.ndarray:
    """The JobID (``base``, ``base_task``; array_task -1 = none) as one integer, as dense as the ranges
    allow, so that sorting by it is cheap."""
    if len(job_base) == 0:
        return np.zeros(0, dtype=np.int64)
    key = job_base - int(job_base.min())  # (in place from here: fresh arrays are costly)
    key *= int(array_task.max()) + 2
    key += array_task
    key += 1
    return key


def _merge_het(
    job_base: np.ndarray, het_offset: np.ndarray, start: np.ndarray, gpu_hours: np.ndarray, cost: np.ndarray,
    unpriced: np.ndarray,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Het components: one execution = same leader id and Start. Returns the index of each execution's
    component +0 (the lowest offset; its JobID key is already the leader's, a het component being no array
    task) and the execution's summed GPU-hours, cost (NaN when no component is priced) and unpriced hours."""
    order = sorting.lex_order([job_base, start, het_offset])
    starts = sorting.group_starts([job_base[order], start[order]])
    priced = ~np.isnan(cost[order])
    cost_sum = np.add.reduceat(np.where(priced, cost[order], 0.0), starts)
    any_priced = np.add.reduceat(priced.astype(np.int64), starts) > 0
    sums = (np.add.reduceat(gpu_hours[order], starts), np.where(any_priced, cost_sum, np.nan),
            np.add.reduceat(unpriced[order], starts))
    return order[starts], sums


# ---- runs ----------------------------------------------------------------------------------------------


def assign_runs(att: Attempts, retry_window_s: float) -> np.ndarray:
    """Run id of every attempt: the index of the run's first unit (a JobID's attempts; units are numbered
    in JobID order), so the ids follow the input order and later steps read their arrays sequentially."""
    n = len(att)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # Units: the attempts of one JobID (rule a), in Start order.
    order, first_i = sorting.group_order(att.key, [att.start])
    if len(first_i) < n:
        first_i = _split_reused_ids(att, order, first_i)
    m = len(first_i)
    sizes = np.diff(np.r_[first_i, n])
    first, last = order[first_i], order[first_i + sizes - 1]
    if m == n:  # no requeued job: every unit is one attempt
        unit_submit = np.where(np.isnan(att.submit[first]), att.start[first], att.submit[first])
    else:
        # Earliest known Submit of the unit (pandas min skips NaN), else its first Start.
        submit_sorted = att.submit[order]
        any_submit = np.add.reduceat((~np.isnan(submit_sorted)).astype(np.int64), first_i) > 0
        unit_submit = np.where(any_submit, np.fmin.reduceat(submit_sorted, first_i), att.start[first])
    unit_run = np.arange(m, dtype=np.int64)

    # Resubmission groups: same user, account, name and array task index (-1 when none).
    first_rows = att.row[first]
    names = [att.codes(name, rows=first_rows).codes for name in ("user", "account", "job_name")]
    group = sorting.group_ids([*names, att.array_task[first]])
    # In each group the units by Submit, then JobID: the units are numbered in JobID order and the sort is
    # stable, so Submit alone orders them. A unit alone in its group is a run of its own: only the groups of
    # several units are chained.
    g_order, g_starts = sorting.group_order(group, [unit_submit])
    g_sizes = np.diff(np.r_[g_starts, m])
    multi = np.repeat(g_sizes > 1, g_sizes)
    if multi.any():
        units = g_order[multi]
        gid = np.repeat(np.arange(int((g_sizes > 1).sum())), g_sizes[g_sizes > 1])
        submit = unit_submit[units]
        end = att.end[last[units]]
        done = att.done[last[units]]
        k = len(units)
        same = np.zeros(k, dtype=bool)
        same[1:] = gid[1:] == gid[:-1]
        prev_end = np.r_[np.nan, end[:-1]]
        prev_done = np.r_[True, done[:-1]]
        with np.errstate(invalid="ignore"):
            cont = same & ~prev_done & (submit > prev_end) & (submit - prev_end <= retry_window_s)
            # Overlap: a unit submitted before an earlier unit of its group ended. There the previous unit
            # need not be the run's latest attempt, so those groups go through the exact matcher.
            latest_end = pd.Series(end).groupby(gid).cummax().to_numpy()
            overlap = same & (submit <= np.r_[np.nan, latest_end[:-1]])
        chain = np.cumsum(~cont) - 1  # chain number of each unit; each chain is one run
        if overlap.any():
            gstart = np.flatnonzero(~same)
            next_id = int(chain.max()) + 1
            for g in np.unique(gid[overlap]).tolist():
                lo, hi = int(gstart[g]), int(gstart[g + 1]) if g + 1 < len(gstart) else k
                chain[lo:hi], next_id = _exact_runs(submit[lo:hi], end[lo:hi], done[lo:hi], retry_window_s, next_id)
        # A run is named by its first unit (the first in Submit order of its chain).
        chains, head_at = np.unique(chain, return_index=True)
        heads = np.zeros(int(chains.max()) + 1, dtype=np.int64)
        heads[chains] = units[head_at]
        unit_run[units] = heads[chain]
    runs = np.empty(n, dtype=np.int64)
    runs[order] = np.repeat(unit_run, sizes)
    return runs


REQUEUE_GAP_S = 3600.0


def _split_reused_ids(att: Attempts, order: np.ndarray, first_i: np.ndarray) -> np.ndarray:
    """The units of JobIDs with several attempts (`order`: attempts by JobID key then Start; `first_i`: where
    each JobID starts), split where one JobID holds several jobs: Slurm reuses ids after a database reset or
    a counter wrap. An attempt continues the job of the one before it (a requeue) only with the same user
    and a Submit no later than REQUEUE_GAP_S after that attempt's End (a requeue resubmits at once: Submit
    is the requeue time); otherwise it starts a job of its own."""
    n = len(order)
    sizes = np.diff(np.r_[first_i, n])
    pos = np.flatnonzero(np.repeat(sizes > 1, sizes))  # positions (in `order`) of JobIDs with several attempts
    at = order[pos]
    gid = np.repeat(np.arange(len(first_i)), sizes)[pos]
    user = att.codes("user", at).codes
    submit, end = att.submit[at], att.end[at]
    with np.errstate(invalid="ignore"):
        new = (gid[1:] == gid[:-1]) & ((user[1:] != user[:-1]) | (submit[1:] > end[:-1] + REQUEUE_GAP_S))
    if not new.any():
        return first_i
    return np.union1d(first_i, pos[1:][new]).astype(first_i.dtype)


def _exact_runs(
    submit: np.ndarray, end: np.ndarray, done: np.ndarray, window: float, next_id: int
) -> tuple[np.ndarray, int]:
    """Units of one group (sorted by submit): join the open run whose latest attempt ended most recently
    before this submit, within the window; else start a new run."""
    open_runs: dict[int, float] = {}  # run id -> end of its latest attempt (runs whose latest did not complete)
    ids = np.empty(len(submit), dtype=np.int64)
    for i in range(len(submit)):
        best, best_end = None, -math.inf
        for rid, rend in open_runs.items():
            if rend < submit[i] and submit[i] - rend <= window and rend > best_end:
                best, best_end = rid, rend
        if best is None:
            best = next_id
            next_id += 1
        else:
            del open_runs[best]
        ids[i] = best
        if not done[i]:
            open_runs[best] = end[i]
    return ids, next_id


@dataclass
class Runs:
    """One entry per run: the attempt indices of its first and last attempts, and its sums."""

    first: np.ndarray
    last: np.ndarray
    attempts: np.ndarray
    gpu_hours: np.ndarray
    cost: np.ndarray  # NaN when no attempt was priced
    unpriced_gpu_hours: np.ndarray
    completed: np.ndarray
    useful_gpu_hours: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.first)


def runs_of(att: Attempts, run: np.ndarray) -> Runs:
    """The runs of the attempts (`run`: each attempt's run id, below len(att)); attempts of a run ordered
    by Start. Most runs are one attempt: those are taken as they are, only the others are sorted."""
    n = len(run)
    alone = np.bincount(run, minlength=n)[run] == 1 if n else np.zeros(0, dtype=bool)
    single = np.flatnonzero(alone)
    parts = [Runs(
        first=single, last=single, attempts=np.ones(len(single), dtype=np.int64), gpu_hours=att.gpu_hours[single],
        cost=att.cost[single], unpriced_gpu_hours=att.unpriced_gpu_hours[single], completed=att.done[single],
        useful_gpu_hours=np.where(att.done[single], att.gpu_hours[single], 0.0), end=att.end[single],
    )]
    shared = np.flatnonzero(~alone)
    if len(shared):
        order, starts = sorting.group_order(run[shared], [att.start[shared], att.key[shared]])
        order = shared[order]
        k = len(order)
        first = order[starts]
        last = order[np.r_[starts[1:], k] - 1]
        cost = att.cost[order]
        priced = ~np.isnan(cost)
        any_priced = np.add.reduceat(priced.astype(np.int64), starts) > 0
        completed = att.done[last]
        parts.append(Runs(
            first=first, last=last, attempts=np.diff(np.r_[starts, k]).astype(np.int64),
            gpu_hours=np.add.reduceat(att.gpu_hours[order], starts),
            cost=np.where(any_priced, np.add.reduceat(np.where(priced, cost, 0.0), starts), np.nan),
            unpriced_gpu_hours=np.add.reduceat(att.unpriced_gpu_hours[order], starts), completed=completed,
            useful_gpu_hours=np.where(completed, att.gpu_hours[last], 0.0), end=att.end[last],
        ))
    return Runs(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in Runs.__dataclass_fields__})


# ---- labels --------------------------------------------------------------------------------------------


def label_names(
    comment: Coded, account: Coded, keys: Sequence[str], config: SiteConfig
) -> dict[str, tuple[np.ndarray, list[str]]]:
    """Per row (of the given codes) and label key: the key's value in the comment, else the account's
    configured label, else NONE_LABEL; computed once per distinct comment and account."""
    comments = pa.array(comment.names(), pa.string())
    accounts: list[Any] = [*account.values, None]
    out: dict[str, tuple[np.ndarray, list[str]]] = {}
    width = len(accounts)
    # One value per distinct (comment, account) pair; each row gets the index of its pair.
    inverse, uniq = sorting.factorize(comment.codes.astype(np.int64) * width + account.codes)
    for key in keys:
        found = pc.struct_field(pc.extract_regex(comments, rf"(?:^|[\s,;]){re.escape(key)}=(?P<v>[^\s,;]*)"), "v")
        per_comment = found.to_pylist()
        by_account = {name: acc.labels.get(key) for name, acc in config.accounts.items()}
        per_account = [by_account.get(a) if isinstance(a, str) else None for a in accounts]
        values = []
        for p in uniq.tolist():
            value = per_comment[p // width] or per_account[p % width]
            values.append(value if value else NONE_LABEL)
        out[key] = (inverse, values)
    return out


# ---- tables --------------------------------------------------------------------------------------------


def _groups(codes: np.ndarray, names: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Rows given as `codes` into `names` (names may repeat): the sorted distinct names, and each row's
    index into them. Work per distinct name, then one integer take."""
    distinct = sorted(set(names))
    at = {name: i for i, name in enumerate(distinct)}
    remap = np.array([at[name] for name in names], dtype=np.int64)
    return distinct, remap[codes] if len(codes) else np.zeros(0, dtype=np.int64)


SUM_FIELDS = ("runs", "completed", "attempts", "gpu_hours", "useful_gpu_hours", "unpriced_gpu_hours", "cost", "priced")


def run_sums(runs: Runs, ids: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per id (0..k-1) of the runs: the SUM_FIELDS (cost summed over priced runs; priced = their count)."""
    priced = ~np.isnan(runs.cost)
    weights = {
        "completed": runs.completed, "attempts": runs.attempts, "gpu_hours": runs.gpu_hours,
        "useful_gpu_hours": runs.useful_gpu_hours, "unpriced_gpu_hours": runs.unpriced_gpu_hours,
        "cost": np.where(priced, runs.cost, 0.0), "priced": priced,
    }
    out: dict[str, np.ndarray] = {"runs": np.bincount(ids, minlength=k).astype(np.float64)}
    out.update({name: np.bincount(ids, weights=w, minlength=k) for name, w in weights.items()})
    return out


def group_table(sums: dict[str, np.ndarray], codes: np.ndarray, names: Sequence[str], name: str) -> pd.DataFrame:
    """Per group name (entry i of `sums` belongs to names[codes[i]]): the GROUP_COLUMNS, sorted by name."""
    if len(codes) == 0 or not sums["runs"].sum():
        return pd.DataFrame(columns=[name, *GROUP_COLUMNS])
    labels, gidx = _groups(codes, names)
    k = len(labels)
    total = {field: np.bincount(gidx, weights=sums[field], minlength=k) for field in SUM_FIELDS}
    count = np.rint(total["runs"]).astype(np.int64)
    completed = np.rint(total["completed"]).astype(np.int64)
    attempts_n = np.rint(total["attempts"]).astype(np.int64)
    cost = np.where(total["priced"] > 0, total["cost"], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_run = np.where(completed > 0, cost / np.maximum(completed, 1), np.nan)
    present = count > 0
    out = pd.DataFrame({
        name: [label for label, p in zip(labels, present, strict=True) if p],
        "runs": count[present],
        "completed": completed[present],
        "attempts": attempts_n[present],
        "retries": (attempts_n - count)[present],
        "gpu_hours": total["gpu_hours"][present],
        "useful_gpu_hours": total["useful_gpu_hours"][present],
        "cost": cost[present],
        "cost_per_completed_run": per_run[present],
        "unpriced_gpu_hours": total["unpriced_gpu_hours"][present],
    })
    for col in ("gpu_hours", "useful_gpu_hours", "cost", "cost_per_completed_run", "unpriced_gpu_hours"):
        out[col] = out[col].astype(float).round(9)
    return out


def totals(runs: Runs) -> dict[str, Any]:
    sums = _raw_sums(runs)
    completed, cost = sums["completed"], sums["cost"]
    attempts_n = int(runs.attempts.sum())
    return {
        "runs": len(runs),
        "completed": completed,
        "attempts": attempts_n,
        "retries": attempts_n - len(runs),
        "gpu_hours": round(sums["gpu_hours"], 9),
        "useful_gpu_hours": round(sums["useful_gpu_hours"], 9),
        "cost": None if cost is None else round(cost, 9),
        "cost_per_completed_run": None if cost is None or not completed else round(cost / completed, 9),
        "unpriced_gpu_hours": round(float(runs.unpriced_gpu_hours.sum()), 9),
    }


def _raw_sums(runs: Runs) -> dict[str, Any]:
    """Unrounded totals, so ratios are not computed from rounded figures."""
    priced = ~np.isnan(runs.cost)
    return {
        "completed": int(runs.completed.sum()),
        "gpu_hours": float(runs.gpu_hours.sum()),
        "useful_gpu_hours": float(runs.useful_gpu_hours.sum()),
        "cost": float(runs.cost[priced].sum()) if priced.any() else None,
    }


def _quantile_sorted(value_at: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, size: np.ndarray,
                     q: float) -> np.ndarray:
    """Linear-interpolated quantile (as pandas) of each group [lo, lo + size) of values sorted within their
    groups; `value_at(positions)` reads them."""
    pos = q * (size - 1)
    below = np.floor(pos).astype(np.int64)
    frac = pos - below
    above = np.minimum(below + 1, size - 1)
    a, b = value_at(lo + below), value_at(lo + above)
    return a + (b - a) * frac


@dataclass(frozen=True)
class KnownValues:
    """The known (non-NaN) values of a column: their rows (None: every row), and the values as integers
    where all are whole numbers of a moderate range (times in seconds always are), for packed sorting."""

    rows: np.ndarray | None
    values: np.ndarray
    as_int: np.ndarray | None

    @classmethod
    def of(cls, values: np.ndarray) -> KnownValues:
        unknown = np.isnan(values)
        rows = np.flatnonzero(~unknown) if unknown.any() else None
        known = values if rows is None else values[rows]
        as_int = None
        if len(known) and np.abs(known).max() < 2**52:
            ints = known.astype(np.int64)
            if (ints == known).all():
                ints -= ints.min()
                as_int = ints
        return cls(rows, known, as_int)


def _sorted_by_group(groups: np.ndarray, k: int, values: KnownValues) -> Callable[[np.ndarray], np.ndarray]:
    """The values sorted by (group, value), as a reader of positions: one np.sort of packed integers where
    they fit (only the positions read are unpacked), else a lexsort."""
    if values.as_int is not None:
        width = max(1, int(values.as_int.max()).bit_length())
        if width + max(1, k.bit_length()) <= 63:
            packed = groups.astype(np.int64)
            packed <<= width
            packed |= values.as_int
            packed.sort()
            base = float(values.values.min())
            mask = (1 << width) - 1
            return lambda at: (packed[at] & mask).astype(np.float64) + base
    ordered = values.values[np.lexsort((values.values, groups))]
    return lambda at: ordered[at]


def wait_table(labels: list[str], gidx: np.ndarray, values: KnownValues, name: str) -> pd.DataFrame:
    """jobs, median, p90 and max of the known values per group (`gidx`: each known value's index into the
    sorted `labels`)."""
    if len(values.values) == 0:
        return pd.DataFrame(columns=[name, *WAIT_COLUMNS])
    size = np.bincount(gidx, minlength=len(labels)).astype(np.int64)
    value_at = _sorted_by_group(gidx, len(labels), values)
    present = size > 0
    lo = np.r_[0, np.cumsum(size)[:-1]][present]
    size = size[present]
    out = pd.DataFrame({
        name: [label for label, p in zip(labels, present, strict=True) if p],
        "jobs": size,
        "median_s": _quantile_sorted(value_at, lo, size, 0.5),
        "p90_s": _quantile_sorted(value_at, lo, size, 0.9),
        "max_s": value_at(lo + size - 1),
    })
    for c in ("median_s", "p90_s", "max_s"):
        out[c] = out[c].astype(float).round(3)
    return out


def wait_tables(att: Attempts, started: np.ndarray) -> dict[str, pd.DataFrame]:
    """queue_wait_by_* and hold_by_* (partition, account, qos) over the attempts `started`."""
    waits = {"queue_wait": KnownValues.of(att.wait_s(started)), "hold": KnownValues.of(att.hold_s(started))}
    tables: dict[str, pd.DataFrame] = {}
    for dim in ("partition", "account", "qos"):
        codes = att.codes(dim, started)
        labels, gidx = _groups(codes.codes, codes.names())  # of every started attempt, once for both
        for col, values in waits.items():
            tables[f"{col}_by_{dim}"] = wait_table(labels, gidx if values.rows is None else gidx[values.rows],
                                                   values, dim)
    return tables


def top_failures(att: Attempts, chosen: np.ndarray, top: int) -> pd.DataFrame:
    """Attempts in `chosen` that are not done, by GPU-hours (then earliest End, then input order)."""
    cand = chosen[~att.done[chosen]]
    if len(cand) > top:
        # Only the top GPU-hours can make the list: sort just those (ties at the cut included).
        cut = np.partition(att.gpu_hours[cand], len(cand) - top)[len(cand) - top]
        cand = cand[att.gpu_hours[cand] >= cut]
    order = np.lexsort((att.row[cand], att.end[cand], -att.gpu_hours[cand]))
    pick = cand[order[:top]]
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
            "gpu_hours": np.round(att.gpu_hours[pick], 9),
            "cost": np.round(att.cost[pick], 9),
            "node_list": pd.Series([v or "" for v in values("nodelist")], dtype=object),
            "start": pd.Series([_utc_iso(v) for v in att.start[pick]], dtype=object),
        }
    )


def _utc_iso(epoch: float) -> str | None:
    """An epoch second as ISO 8601 in UTC (2026-12-02T10:00:00+00:00); None when unknown."""
    if not math.isfinite(epoch):
        return None
    return datetime.fromtimestamp(int(epoch), timezone.utc).isoformat()


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in df.to_dict(orient="records"):
        out.append({str(k): _plain(v) for k, v in row.items()})
    return out


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


# ---- the report ----------------------------------------------------------------------------------------


def run_tables(
    att: Attempts, config: SiteConfig, period: Period, runs_assigned: Callable[[], Any] | None = None
) -> tuple[dict[str, pd.DataFrame], Runs]:
    """runs_by_account, _partition, _wckey and _label_<key> over the runs attributed to `period`, and
    those runs. `runs_assigned()`, when given, is called once the runs are assigned, and returns once `att`
    is priced (by another thread)."""
    run = assign_runs(att, float(config.retry_window_s))
    if runs_assigned is not None:
        runs_assigned()
    att.price()
    runs = runs_of(att, run)
    in_period = (runs.end >= period.start_epoch) & (runs.end < period.end_epoch)
    runs_p = runs if in_period.all() else Runs(**{name: value[in_period] for name, value in runs.__dict__.items()})
    first = runs_p.first  # attempt index of each run's first attempt: its account, partition, labels

    labels = tuple(config.report_labels)
    first_rows = att.row[first]
    account, partition, wckey = (att.codes(name, rows=first_rows) for name in ("account", "partition", "wckey"))
    label_values = label_names(att.codes("comment", rows=first_rows), account, labels, config)
    dims: dict[str, tuple[np.ndarray, list[str]]] = {
        "account": (account.codes, account.names()),
        "partition": (partition.codes, partition.names()),
        "wckey": (wckey.codes, [v or NONE_LABEL for v in [*wckey.values, None]]),
        **{f"label_{key}": label_values[key] for key in labels},
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
    tables = {f"runs_by_{dim}": group_table(sums, codes[representative], names, dim.removeprefix("label_"))
              for dim, (codes, names) in dims.items()}
    return tables, runs_p


def check_target(target: float | None) -> None:
    """The sizing target: completed runs per month, a finite number >= 0 (None: none)."""
    if target is not None and not 0 <= target < math.inf:
        raise InputError(f"--target must be a finite number of completed runs per month >= 0, got {target}")


def build_report(
    table: pa.Table,
    config: SiteConfig,
    period: Period,
    *,
    target: float | None = None,
    top: int = DEFAULT_TOP,
    input_info: dict[str, Any] | None = None,
) -> Report:
    check_target(target)
    lo, hi = float(period.start_epoch), float(period.end_epoch)
    if table.num_rows < PARALLEL_MIN_ATTEMPTS:
        att = attempts(table, config)
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
            att = attempts(table, config, pool)
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
    return report


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
    completed = tot["completed"]
    gpu_hours = tot["gpu_hours"]
    cost = tot["cost"]
    per_gpu_month = completed / (gpu_hours / GPU_MONTH_HOURS) if gpu_hours > 0 else None
    required = target / per_gpu_month if target is not None and per_gpu_month else None
    days = (period.end - period.start).total_seconds() / 86400
    return {
        "effective_unit_cost": round(cost / completed, 9) if cost is not None and completed else None,
        "useful_ratio": round(tot["useful_gpu_hours"] / gpu_hours, 9) if gpu_hours > 0 else None,
        "completed_runs_per_gpu_month": None if per_gpu_month is None else round(per_gpu_month, 9),
        "target_completed_runs_per_month": target,
        "target_source": target_source if target is not None else None,
        "required_gpus": None if required is None else float(f"{required:.9g}"),
        "gpus_used_on_average": round(gpu_hours / (days * 24), 9) if days > 0 else None,
        "gpu_month_hours": GPU_MONTH_HOURS,
    }
