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

A user whose rows alone exceed a bucket makes that bucket larger: memory is bounded by the largest
user's rows of the period (BENCHMARKS.md, "Issue 31 item 3")."""

from __future__ import annotations

import math
import tempfile
import zlib
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from gpuclust.accounting import store, storeread
from gpuclust.errors import InputError

# From this many stored rows of the period on (latest_state not yet applied), `report build` partitions:
# the one-table build peaks at about 0.75-1 GB per million rows (BENCHMARKS.md, "Issue 31 item 3").
ROWS_IN_MEMORY = 1_500_000
ROWS_PER_BUCKET = 500_000
ORDER_COLUMN = "_order"
SCRATCH_PREFIX = ".report-buckets-"


def stored_rows(files: list[Path]) -> int:
    """The rows of the day files, from their footers (no row is read)."""
    return sum(storeread.day_rows(path) for path in files)


def day_files(root: Path, days: list[date], cluster: str | None) -> list[Path]:
    """The stored day files of `days` in the current snapshot (call under store.reading)."""
    snap = store.current_snapshot(root)
    if snap is None:
        raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")
    return [path for path in (store.day_file(snap, d, cluster) for d in days) if path.exists()]


def bucket_of_users(users: pa.Array, buckets: int) -> np.ndarray:
    """Each distinct user name's bucket (crc32 of its UTF-8: the same in every run and every day)."""
    return np.array([zlib.crc32(u.encode("utf-8", "surrogateescape")) % buckets if u is not None else 0
                     for u in users.to_pylist()], dtype=np.int64)


def buckets(root: Path, days: list[date], cluster: str | None, *,
            rows_per_bucket: int = ROWS_PER_BUCKET) -> Iterator[pa.Table]:
    """The stored rows of `days` in buckets by user, one at a time, each with ORDER_COLUMN (split_order takes
    it off). `store.reading` is held throughout, so a fetch meanwhile leaves this snapshot's files in place.
    The rows of all buckets together are those of storeread.load_for_report."""
    with store.reading(root):
        files = day_files(root, days, cluster)
        count = max(1, math.ceil(stored_rows(files) / rows_per_bucket))
        with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=root.parent) as scratch:
            paths, started = _spill(files, count, Path(scratch))
            for path in paths:
                yield _read_bucket(path, started)
                path.unlink()


def _pending_ids(files: list[Path]) -> np.ndarray:
    """The JobIDRaw of every row that has not started (sorted, distinct): few, the jobs pending at a fetch."""
    ids = [np.zeros(0, dtype=np.int64)]
    for path in files:
        day = storeread.read_day(path, ["job_id_raw", "start"], [])
        pending = np.asarray(day.column("start").is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if pending.any():
            raw = np.asarray(day.column("job_id_raw").to_numpy(zero_copy_only=False))
            ids.append(raw[pending].astype(np.int64))
    return np.unique(np.concatenate(ids))


def _among(values: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    if not len(sorted_ids):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, values), len(sorted_ids) - 1)
    return sorted_ids[at] == values


def _spill(files: list[Path], count: int, scratch: Path) -> tuple[list[Path], np.ndarray]:
    """Each day's rows into their bucket's stream; also the pending jobs (JobIDRaw) that some row shows
    started: latest_keep drops their pending rows, wherever that row's bucket is (sorted, distinct)."""
    pending = _pending_ids(files)
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
            users = day.column("user").combine_chunks()
            assert isinstance(users, pa.DictionaryArray)
            codes = np.asarray(pc.fill_null(users.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
            # (a null user, code -1, takes the last entry: bucket 0)
            bucket = np.r_[bucket_of_users(users.dictionary, count), 0][codes]
            if len(pending):
                raw = np.asarray(day.column("job_id_raw").to_numpy(zero_copy_only=False)).astype(np.int64)
                ran = ~np.asarray(day.column("start").is_null().to_numpy(zero_copy_only=False), dtype=bool)
                started.append(raw[ran & _among(raw, pending)])
            order = np.argsort(bucket, kind="stable")
            bounds = np.r_[0, np.cumsum(np.bincount(bucket, minlength=count))]
            day = day.take(pa.array(order))
            for i in np.flatnonzero(np.diff(bounds)).tolist():
                part = day.slice(int(bounds[i]), int(bounds[i + 1] - bounds[i]))
                if writers[i] is None:
                    sinks[i] = pa.OSFile(str(paths[i]), "wb")
                    writers[i] = ipc.new_stream(sinks[i], part.schema,
                                                options=ipc.IpcWriteOptions(compression="zstd"))
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
        gone = _among(raw, started) & np.asarray(table.column("start").is_null().to_numpy(zero_copy_only=False),
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
