"""A report over more stored rows than memory holds (a year of a large site): the rows split by user into
buckets, each bucket's figures computed alone and merged (metrics.partial).

Every run lies whole in one bucket: a run's attempts share their user (a requeue keeps it, a resubmission
is matched within one user, account and name), and so do the rows of one execution that several daily
windows saw (store.latest_keep). So the run logic is as exact as over one table, however long a run lasts:
a retry across midnight, a chain of retries over months. The one rule of latest_keep that crosses users,
a pending row dropped once any fetch shows its JobIDRaw started, is applied across buckets (the pending ids
are collected first: few). Each bucket needs its rows only, so memory is bounded by the largest bucket, not
the period.

Two passes over the days, each linear in the rows:

1. Spill: each day file in turn (only the report's columns), its rows appended to their bucket's Arrow
   stream (zstd) in a scratch directory beside the store; a row keeps its place in the whole input
   (`_order`), which top failures break ties on.
2. Per bucket: its stream read back, store.latest_keep applied (the rule load_for_report applies to all
   days), the bucket's figures computed (metrics.partial.partial_figures) and the bucket freed.

A user with more than half a bucket of rows (a pipeline account) is split further, by resubmission group
(user, account, job name, array task: what runs are matched within), so memory stays bounded by about a
bucket (BENCHMARKS.md, "Issue 31 item 3"); only one group larger than a bucket makes its bucket larger. The
one case that split is not exact for: a job of such a user requeued under another name or account (scontrol
update between its attempts) has its attempts in two buckets, and counts as two runs."""

from __future__ import annotations

import heapq
import math
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from gpuclust.accounting.figures import economics, findings, gpuuse, lemon
from gpuclust.accounting.figures.jobfilter import JobFilter
from gpuclust.accounting.figures.metrics import Report
from gpuclust.accounting.figures.metrics.attempts import coded
from gpuclust.accounting.figures.metrics.partial import PartialFigures, merge_report, partial_figures
from gpuclust.accounting.figures.shares import PeriodShares, inventory, note
from gpuclust.accounting.history import sources, store, storeread
from gpuclust.accounting.ingest.fast import memory, sorting
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import STORE_SCHEMA
from gpuclust.config import SiteConfig
from gpuclust.errors import InputError

if TYPE_CHECKING:
    from gpuclust.accounting.history.events import EventSource
    from gpuclust.accounting.history.refusals import RefusalSource

# From this many stored rows of the period on (latest_state not yet applied), `report build` partitions, so
# that a build's memory stays bounded however long the period (BENCHMARKS.md, "Issue 31 item 3").
ROWS_IN_MEMORY = 1_000_000
ROWS_PER_BUCKET = 500_000
ORDER_COLUMN = "_order"
SPILL_COMPRESSION: str | None = "zstd"  # of the bucket streams (BENCHMARKS.md, "Issue 31 item 3, built")
SCRATCH_PREFIX = ".report-buckets-"


def buckets(root: Path, days: list[date], cluster: str | None, *,
            rows_per_bucket: int = ROWS_PER_BUCKET) -> Iterator[pa.Table]:
    """The stored rows of `days` in buckets by user, one at a time, each with ORDER_COLUMN (split_order takes
    it off). `store.reading` is held throughout, so a fetch meanwhile leaves this snapshot's files in place.
    The rows of all buckets together are those of storeread.load_for_report."""
    with store.reading(root):
        files = storeread.day_files(root, days, cluster)
        plan = _survey(files, rows_per_bucket)
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=root.parent) as scratch:
            paths, started = _spill(files, plan, Path(scratch))
            if not paths:  # (no row: one empty bucket, so that every figure is there, empty)
                empty = STORE_SCHEMA.empty_table().select(storeread.report_columns())
                yield empty.append_column(ORDER_COLUMN, pa.array([], pa.int64()))
            for path in paths:
                yield _read_bucket(path, started)
                path.unlink()


@dataclass(frozen=True)
class Plan:
    """Where each row goes: a user with at most half a bucket of rows goes whole to one of `light` buckets; a
    heavier user's rows go by resubmission group (user, account, job name, array task: what runs are matched
    within) to one of `heavy` buckets, so that no bucket holds much more than rows_per_bucket."""

    light: int
    heavy: int
    heavy_users: frozenset[str]
    pending: np.ndarray  # JobIDRaw of the rows not started (sorted, distinct): few, the jobs pending at a fetch
    # Each light user's bucket, the users packed by their rows (largest first, into the emptiest bucket): a
    # hash of a few hundred users would leave some buckets twice as full as others. (Absent, as null: 0.)
    bucket_of_user: dict[str, int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return self.light + self.heavy


def _survey(files: list[Path], rows_per_bucket: int) -> Plan:
    """One pass over three columns of every day: the rows per user and the pending jobs."""
    ids = [np.zeros(0, dtype=np.int64)]
    rows_by_user: dict[str | None, int] = {}
    for path in files:
        day = storeread.read_day(path, ["job_id_raw", "start", "user"], ["user"])
        pending = np.asarray(day.column("start").is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if pending.any():
            raw = np.asarray(day.column("job_id_raw").to_numpy(zero_copy_only=False))
            ids.append(raw[pending].astype(np.int64))
        users = day.column("user").combine_chunks()
        counts = pc.value_counts(users.cast(pa.string()) if users.null_count else users)
        for value, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True):
            rows_by_user[value] = rows_by_user.get(value, 0) + n
    heavy_users = frozenset(u for u, n in rows_by_user.items() if u is not None and n > rows_per_bucket // 2)
    heavy_rows = sum(rows_by_user[u] for u in heavy_users)
    light_rows = sum(rows_by_user.values()) - heavy_rows
    light = max(1, math.ceil(light_rows / rows_per_bucket))
    fill = [(0, i) for i in range(light)]  # (rows, bucket): a heap, the emptiest first
    bucket_of_user: dict[str, int] = {}
    for user, n in sorted(((u, n) for u, n in rows_by_user.items() if u is not None and u not in heavy_users),
                          key=lambda un: (-un[1], un[0])):
        rows, bucket = heapq.heappop(fill)
        bucket_of_user[user] = bucket
        heapq.heappush(fill, (rows + n, bucket))
    return Plan(light=light, heavy=math.ceil(heavy_rows / rows_per_bucket), heavy_users=heavy_users,
                pending=np.unique(np.concatenate(ids)), bucket_of_user=bucket_of_user)


def _crc(value: str | None) -> int:
    """crc32 of a value's UTF-8 (null: 0): the same in every run and every day."""
    return zlib.crc32(value.encode("utf-8", "surrogateescape")) if value is not None else 0


def _route(day: pa.Table, plan: Plan) -> np.ndarray:
    """Each row's bucket."""
    user = coded(day.column("user"))
    bucket = user.per_value(lambda u: plan.bucket_of_user.get(u, 0), np.int64)[user.codes]
    if plan.heavy:
        at = np.flatnonzero(user.per_value(lambda u: u in plan.heavy_users, bool)[user.codes])
        if len(at):
            h = user.per_value(_crc, np.uint64)[user.codes[at]]
            for name in ("account", "job_name"):
                column = day.column(name).combine_chunks()
                codes = np.asarray(pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
                codes = codes[at]
                # (the crc of the values these rows use only, not coded's whole dictionary: a day may hold a
                # hundred thousand job names; a null, code -1, reads the 0 appended last)
                used = np.unique(codes)
                used = used[used >= 0]
                crc = np.zeros(len(column.dictionary) + 1, dtype=np.uint64)
                crc[used] = [_crc(v) for v in column.dictionary.take(pa.array(used)).to_pylist()]
                h = h * np.uint64(0x9E3779B97F4A7C15) + crc[codes]
            task = np.asarray(pc.fill_null(day.column("array_task"), -1).to_numpy(), dtype=np.int64)[at]
            h = h * np.uint64(0x9E3779B97F4A7C15) + (task + 1).astype(np.uint64)
            h ^= h >> np.uint64(31)
            bucket[at] = plan.light + (h % np.uint64(plan.heavy)).astype(np.int64)
    return bucket


def _spill(files: list[Path], plan: Plan, scratch: Path) -> tuple[list[Path], np.ndarray]:
    """Each day's rows into their bucket's stream; also the pending jobs (JobIDRaw) that some row shows
    started: latest_keep drops their pending rows, wherever that row's bucket is (sorted, distinct)."""
    pending, count = plan.pending, plan.count
    started: list[np.ndarray] = [np.zeros(0, dtype=np.int64)]
    columns = list(dict.fromkeys([*storeread.report_columns(), *storeread.KEY_COLUMNS]))
    dictionary = list(storeread.DICTIONARY_COLUMNS)  # (window stays text: latest_keep sorts it)
    paths = [scratch / f"bucket-{i:04d}.arrows" for i in range(count)]
    writers: list[ipc.RecordBatchStreamWriter | None] = [None] * count
    sinks: list[pa.NativeFile | None] = [None] * count
    order_base = 0
    try:
        for path in files:
            day = storeread.read_day(path, columns, dictionary)
            n = day.num_rows
            day = day.append_column(ORDER_COLUMN, pa.array(np.arange(order_base, order_base + n, dtype=np.int64)))
            order_base += n
            bucket = _route(day, plan)
            if len(pending):
                raw = np.asarray(day.column("job_id_raw").to_numpy(zero_copy_only=False)).astype(np.int64)
                ran = ~np.asarray(day.column("start").is_null().to_numpy(zero_copy_only=False), dtype=bool)
                started.append(raw[ran & sorting.in_sorted(raw, pending)])
            order = np.argsort(bucket, kind="stable")
            bounds = np.r_[0, np.cumsum(np.bincount(bucket, minlength=count))]
            day = day.take(pa.array(order))
            for i in np.flatnonzero(np.diff(bounds)).tolist():
                part = day.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
                if writers[i] is None:
                    sinks[i] = pa.OSFile(str(paths[i]), "wb")
                    writers[i] = ipc.new_stream(sinks[i], part.schema,
                                                options=ipc.IpcWriteOptions(compression=SPILL_COMPRESSION))
                writers[i].write_table(part)  # type: ignore[union-attr]
            del day
    finally:
        for writer, sink in zip(writers, sinks, strict=True):
            if writer is not None:
                writer.close()
            if sink is not None:
                sink.close()
    return [p for p, w in zip(paths, writers, strict=True) if w is not None], np.unique(np.concatenate(started))


def _read_bucket(path: Path, started: np.ndarray) -> pa.Table:
    """A bucket's rows that latest_state keeps (`started`: the pending jobs that started, in any bucket)."""
    with pa.memory_map(str(path)) as source:
        table = ipc.open_stream(source).read_all()
    table = table.unify_dictionaries().combine_chunks()
    keep = store.latest_keep(table)
    if len(started):
        raw = np.asarray(table.column("job_id_raw").to_numpy(zero_copy_only=False)).astype(np.int64)
        gone = sorting.in_sorted(raw, started) & np.asarray(table.column("start").is_null().to_numpy(zero_copy_only=False),
                                                 dtype=bool)
        if gone.any():
            keep = ~gone if keep is None else keep & ~gone
    if keep is not None:
        table = table.filter(pa.array(keep))
    return table.select([*storeread.report_columns(), ORDER_COLUMN])


def split_order(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """A bucket's table without ORDER_COLUMN, and that column: each row's place in the whole input."""
    order = np.asarray(table.column(ORDER_COLUMN).to_numpy(), dtype=np.int64)
    return table.drop_columns([ORDER_COLUMN]), order


def _events(config: SiteConfig, period: Period, stored: tuple[EventSource | None, RefusalSource | None] | None
            ) -> EventSource | None:
    """The period's node events (read again only for a filtered build, which reads no economics)."""
    if stored is not None:
        return stored[0]
    try:
        return sources.stored_sources(config, period)[0]
    except InputError:
        return None


def build_report(root: Path, days: list[date], config: SiteConfig, period: Period, *, only: JobFilter,
                 target: float | None, top: int, rows_per_bucket: int = ROWS_PER_BUCKET) -> Report:
    """The report of the stored `days` over `period`, bucket by bucket: the figures of metrics.build_report,
    the unit economics (economics.RowSums) and the GPU use (gpuuse.UseSums) merged from the buckets; the per-job
    table gpu_use_jobs is left out (the report says so)."""
    parts: list[PartialFigures] = []
    # The unit economics sum rows, not runs: any split adds up; not for a filtered report (pipeline.build).
    stored = None if only else sources.stored_sources(config, period)
    nodes_text = findings.stored_nodes_text(config.state_dir, period.utc_days())
    shares = findings.partition_shares(config, nodes_text)
    # (each bucket's GPU-equivalents from the one inventory and node events: the in-memory build's shares)
    gpu_shares = PeriodShares(config, inventory(nodes_text), lambda: _events(config, period, stored))
    econ_sums: economics.RowSums | None = None
    use: gpuuse.UseSums | None = None
    rows = filtered_out = 0
    lemon_jobs: list[pd.DataFrame] = []  # (lemon.job_rows of each bucket: a few fields per GPU job)
    known = True
    sizes: list[int] = []
    for bucket in buckets(root, days, config.cluster_name, rows_per_bucket=rows_per_bucket):
        rows += bucket.num_rows
        sizes.append(bucket.num_rows)
        known = known and storeread.exit_codes_known(bucket)
        if only:
            kept = only.apply(bucket)
            filtered_out += bucket.num_rows - kept.num_rows
            bucket = kept
        table, order = split_order(bucket)
        del bucket
        eq = gpu_shares.equivalents(table)
        parts.append(partial_figures(table, config, period, top=top, row_order=order, equivalents=eq))
        if stored is not None:
            sums = economics.row_sums(table, config, period, stored[0], eq)
            econ_sums = sums if econ_sums is None else economics.add_row_sums(econ_sums, sums)
        lemon_jobs.append(lemon.job_rows(table, period, eq))
        bucket_use = gpuuse.use_sums(table, config, period, keep_jobs=False, store_root=root, shares=shares,
                                     equivalents=eq)
        del eq
        use = bucket_use if use is None else gpuuse.merge_use_sums(use, bucket_use)
        del table, order
        memory.release_freed()
    info = storeread.store_info(root, days, config.cluster_name, rows, known)
    info["partitioned"] = {"buckets": len(sizes), "rows_per_bucket": rows_per_bucket,
                           "largest_bucket_rows": max(sizes, default=0)}
    info["notes"].append(
        f"The period's {rows:,} stored rows are more than one build holds in memory: they were read in "
        f"{len(sizes)} buckets by user, each run whole in one bucket, and the figures merged (exact). The "
        "one-row-per-job table of GPU use (gpu_use_jobs) is left out at this size: build a shorter period for it "
        "(e.g. --since 30d).")
    if only:
        only.note(info, filtered_out)
    report = merge_report(parts, config, period, target=target, top=top, input_info=info)
    if gpu_shares.used:
        note(report.data["input"], gpu_shares.warning_list(), config)
    if stored is not None:
        economics.attach_sums(report, econ_sums or economics.RowSums(), config, period, *stored, target=target)
        economics.note_unknown_allocations(report)
    assert use is not None  # (there is always a bucket, if an empty one)
    gpuuse.attach_sums(report, use, config)
    lemon.attach(report, pd.concat(lemon_jobs, ignore_index=True) if lemon_jobs else lemon.frame_of([]), config,
                 period,
                 gpu_events=use.gpu_events if use is not None and config.telemetry.prometheus_url else None)
    return report
