"""Attempts: the allocation rows that started and ended (het components merged), as numpy arrays over
integer codes, and their prices."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures.prices import card_price, price_unit  # noqa: F401 (their old home)
from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.config import SiteConfig
from gpuclust.slurm import gpushare

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


# The NodeList sacct prints for a job that never got nodes (cancelled while pending), and for none at all.
NO_NODES = frozenset({"", "None assigned"})


# States only a job that ran can end in (CANCELLED is not one: a job may be cancelled while pending).
RAN_STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "RUNNING",
                        "SUSPENDED", "REQUEUED"})


def ran_mask(table: pa.Table) -> np.ndarray:
    """Rows that show the job ran, whatever AllocTRES says: Elapsed > 0, a NodeList, or a state only a job that
    ran can have. A job cancelled while pending has none of them (Elapsed 0, NodeList "None assigned"); a job
    that ran but whose dump has no AllocTRES (a site whose sacct leaves it empty, a narrow --format) has them,
    and is an attempt whose GPUs are unknown."""
    ran = _ints(table.column("elapsed_s"), 0) > 0
    nodes = coded(table.column("nodelist"))
    ran |= nodes.per_value(lambda v: v is not None and v.strip() not in NO_NODES, dtype=bool)[nodes.codes]
    state = coded(table.column("state"))
    ran |= state.per_value(lambda v: v in RAN_STATES, dtype=bool)[state.codes]
    return ran


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
    # Attempts whose GPUs the input cannot give (no AllocTRES): their GPU-hours and cost are unknown (held
    # as 0 in gpu_hours/cost so that sums stay sums of what is known; counted and named wherever shown).
    gpus_unknown: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    pricing: Callable[[], None] | None = None  # while gpu_hours, cost and unpriced_gpu_hours are not computed
    # GPU GRES devices x elapsed (a slice counts 1: glossary "device-hours"); gpu_hours itself where every GPU is
    # whole
    device_hours: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Attempts with an AllocTRES whose share of a GPU is unknown (figures.shares): part of gpus_unknown
    share_unknown: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
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
    "Rows that are no attempt and count nowhere else: running = ran (an AllocTRES, a NodeList, Elapsed > 0 or a "
    "state only a run can have) and started but End Unknown (still running, or suspended, when sacct was read: counted once they end); "
    "not_started = no Start (pending); no_allocation = a Start but never ran (cancelled while pending: no "
    "AllocTRES, no NodeList, Elapsed 0; End given or Unknown)."
)


def row_buckets(ran: np.ndarray, started: np.ndarray, ended: np.ndarray) -> dict[str, np.ndarray]:
    """The one bucket of each row: `attempt` (ran, started and ended), `running`, `not_started`,
    `no_allocation`. The masks are disjoint and cover every row (tests assert it on every recorded corpus)."""
    return {
        "attempt": ran & started & ended,
        "running": ran & started & ~ended,
        "not_started": ~started,
        "no_allocation": ~ran & started,
    }


def left_out_counts(ran: np.ndarray, started: np.ndarray, ended: np.ndarray,
                    gpus_unknown: int = 0) -> dict[str, Any]:
    """How many rows `attempts` leaves out, and why (report.json input.left_out); `attempt_rows` (rows that
    are attempts, het components apart) and `rows_total` close the count: rows_total = attempt_rows + rows."""
    counts = {name: int(np.count_nonzero(mask)) for name, mask in row_buckets(ran, started, ended).items()}
    left = counts["running"] + counts["not_started"] + counts["no_allocation"]
    return {"rows": left, "running": counts["running"], "not_started": counts["not_started"],
            "no_allocation": counts["no_allocation"], "attempt_rows": counts["attempt"],
            "attempt_rows_gpus_unknown": gpus_unknown, "rows_total": left + counts["attempt"], "why": LEFT_OUT_WHY}


def attempts(table: pa.Table, config: SiteConfig, pool: ThreadPoolExecutor | None = None,
             equivalents: np.ndarray | None = None) -> Attempts:
    """The attempts of `table` (normalized schema; string columns plain or dictionary-encoded). With a
    `pool`, its thread takes the time columns meanwhile, and GPU-hours and cost are left to `Attempts.price`
    (for that thread to compute while the runs are assigned, which needs neither). `equivalents`: each row's
    GPU-equivalents (figures.shares; NaN: unknown); None: each row's GPUs are whole GPUs."""
    start_all = _numbers(table.column("start"))
    end_all = _numbers(table.column("end"))
    allocated = allocated_mask(table)
    ran = allocated | ran_mask(table)
    started, ended = ~np.isnan(start_all), ~np.isnan(end_all)
    rows = np.flatnonzero(ran & started & ended)
    unknown_all = ~allocated  # (an attempt without AllocTRES: its GPUs are unknown)
    left_out = left_out_counts(ran, started, ended, int(np.count_nonzero(unknown_all[rows])))
    share_unknown_all = np.zeros(len(allocated), dtype=bool)
    if equivalents is not None:  # (a share the input cannot give: unknown as an AllocTRES missing, named apart)
        share_unknown_all = np.isnan(equivalents) & allocated
        unknown_all = unknown_all | share_unknown_all
        equivalents = np.nan_to_num(equivalents)
    partition_all = coded(table.column("partition"))
    gtype_all = coded(table.column("gpu_type"))

    prices, unpriced_share = price_table(config, gtype_all.values, partition_all.values)
    partial = bool(((unpriced_share > 0) & (unpriced_share < 1)).any())
    job_base_all = _ints(table.column("job_base"), 0)

    def money(at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """gpu_hours, cost (NaN = unpriced) and unpriced GPU-hours of the rows `at`."""
        gpu_hours = _numbers(table.column("elapsed_s"), 0.0, rows=at)
        gpu_hours *= _numbers(table.column("gpus"), 0.0, rows=at) if equivalents is None else equivalents[at]
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
    gpus_unknown = unknown_all[rows]
    if merged is not None:
        het_lead[merged[0]] = True
        # A het execution's GPUs are unknown when any component's are (het rows are few: a dict will do).
        execution_unknown: dict[tuple[int, float], bool] = {}
        for r in het_rows.tolist():
            k = (int(job_base_all[r]), float(start_all[r]))
            execution_unknown[k] = execution_unknown.get(k, False) or bool(unknown_all[r])
        gpus_unknown[merged[0]] = [execution_unknown[(int(job_base_all[r]), float(start_all[r]))]
                                   for r in lead_rows.tolist()]

    def device_hours(at: np.ndarray) -> np.ndarray:
        hours = _numbers(table.column("elapsed_s"), 0.0, rows=at)
        hours *= _numbers(table.column("gpus"), 0.0, rows=at)
        hours /= 3600.0
        return hours

    def pricing() -> None:
        gpu_hours, cost, unpriced = money(rows)
        if merged is not None:
            at, hours_sum, cost_sum, unpriced_sum = merged
            gpu_hours[at], cost[at], unpriced[at] = hours_sum, cost_sum, unpriced_sum
        att.gpu_hours, att.cost, att.unpriced_gpu_hours = gpu_hours, cost, unpriced
        if equivalents is None:  # (whole GPUs: the device-hours are the GPU-hours)
            att.device_hours = gpu_hours
            return
        devices = device_hours(rows)
        if merged is not None and len(het_rows):
            zeros = np.zeros(len(het_rows))
            _, (device_sum, _, _) = _merge_het(job_base_all[het_rows], het_offset_all[het_rows],
                                               start_all[het_rows], device_hours(het_rows), zeros, zeros)
            devices[merged[0]] = device_sum
        att.device_hours = devices

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
        left_out=left_out, gpus_unknown=gpus_unknown, share_unknown=share_unknown_all[rows],
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
        if mix is not None:  # (slices in a mix weigh by their GPU-equivalents, whole GPUs by their count)
            mix = {name: count * mix_weight(config, None if name == fields.MIX_OTHER else name)
                   for name, count in mix.items()}
        for p, part in enumerate(parts):
            if mix is None:
                price = card_price(config, own_type or config.partition_gpu_type(part), part)
                prices[t, p] = np.nan if price is None else price
                unpriced[t, p] = 1.0 if price is None else 0.0
                continue
            total = sum(mix.values())
            if not total:  # (every type of the mix a slice of unknown share)
                unpriced[t, p] = 1.0
                continue
            priced_cost, priced_share = 0.0, 0.0
            for name, count in mix.items():
                kind = config.partition_gpu_type(part) if name == fields.MIX_OTHER else name
                price = card_price(config, kind, part)
                if price is not None:
                    priced_cost += price * count / total
                    priced_share += count / total
            prices[t, p] = priced_cost if priced_share > 0 else np.nan
            unpriced[t, p] = 0.0 if priced_share >= 1 else 1.0 - priced_share
    return prices, unpriced


def mix_weight(config: SiteConfig, gpu_type: str | None) -> Any:
    """A GPU type's weight in a mix: its share of one GPU (a whole GPU: the int 1, so whole-GPU weights stay
    integers; a slice of unknown share: 0)."""
    if gpu_type is None or not gpushare.is_mig_type(gpu_type, config.gpu_type_shares):
        return 1
    share, _ = gpushare.type_share(gpu_type, config.gpu_type_shares)
    return 0 if share is None else float(share)


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
