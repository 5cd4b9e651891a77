"""The store read for a report, day file by day file, so that memory is bounded by what the report needs.

`store.load` reads every day of the period whole (all columns, plain strings), concatenates them and then
drops the rows latest_state does not keep, so its peak grew with every row ever fetched, and the metrics
came on top. `load_for_report` gives the same rows in the same order, in two passes over the day
files:

1. Only the four columns of latest_state (JobIDRaw, Start, fetched_at, window), for every day: which rows
   survive. It is `store.latest_keep` over the concatenated days, the very rule `store.load` applies: an
   execution (JobIDRaw, Start) seen on several days keeps its latest fetch (then latest window, then
   latest row), and a pending row goes once any fetch shows the job started.
2. Each day again: only the columns the report reads (`UNUSED_COLUMNS` are left out: any other column,
   a new one too, is read), only the kept rows, and the repetitive strings as codes into one dictionary
   per column shared by all days. Codes are given in order of first appearance, which is what
   `pc.dictionary_encode` of the whole column gives, so the metrics see the very same codes and values
   and every figure is the same as from `store.load`.

Numbers, times and codes (of both passes) are copied day by day into arrays allocated at their final size:
a concatenation at the end would hold every column twice, and the freed day pieces would leave holes in
the heap that `memory.keep_freed_memory` keeps (BENCHMARKS.md, "Report build from the store, day by day").
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.history import store
from gpuclust.accounting.ingest import schema
from gpuclust.accounting.ingest.schema import STORE_SCHEMA

# Columns no figure of the report reads (metrics, economics, trend): not in the table. (fetched_at and window
# order the executions for latest_state: the first pass reads them; submit_line and req_tres are `policy
# replay`'s: load_columns; alloc_gpu_equivalents and gpu_share_unknown are for other engines: the report computes the
# shares from the rows, figures.shares.)
UNUSED_COLUMNS = frozenset({"line", "array_pending", "state_raw", "fetched_at", "window", "submit_line", "req_tres",
                            "alloc_gpu_equivalents", "gpu_share_unknown"})
# Strings that repeat from row to row (the registry's dictionary fields): read as dictionary codes, a few bytes
# a row, not the text.
DICTIONARY_COLUMNS = tuple(name for name in schema.DICTIONARY_COLUMNS if name not in UNUSED_COLUMNS)
KEY_COLUMNS = ("job_id_raw", "start", "fetched_at", "window")


def report_columns(schema: pa.Schema = STORE_SCHEMA) -> list[str]:
    return [name for name in schema.names if name not in UNUSED_COLUMNS]


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    """An Arrow validity bitmap (None when every value is valid)."""
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


class FixedWidthColumn:
    """A numeric, time or bool column of several day tables, copied day by day into one array allocated
    at its final size: no concatenation at the end, and no holes of freed day pieces between the others."""

    def __init__(self, arrow_type: pa.DataType, rows: int) -> None:
        self.type = arrow_type
        storage = np.bool_ if pa.types.is_boolean(arrow_type) else np.float64 if arrow_type == pa.float64() \
            else np.int64  # (int64, and timestamps: int64 seconds)
        self.values: np.ndarray = np.zeros(rows, dtype=storage)
        self.valid = np.ones(rows, dtype=bool)
        self.filled = 0

    @staticmethod
    def fits(arrow_type: pa.DataType) -> bool:
        return (pa.types.is_boolean(arrow_type) or pa.types.is_timestamp(arrow_type)
                or arrow_type in (pa.int64(), pa.float64()))

    def add(self, column: pa.Array | pa.ChunkedArray) -> None:
        n = len(column)
        at = slice(self.filled, self.filled + n)
        if pa.types.is_timestamp(column.type):
            column = pc.cast(column, pa.int64())
        if column.null_count:
            self.valid[at] = np.asarray(pc.is_valid(column).to_numpy(zero_copy_only=False), dtype=bool)
            column = pc.fill_null(column, False if pa.types.is_boolean(column.type) else 0)
        self.values[at] = np.asarray(column.to_numpy(zero_copy_only=False))
        self.filled += n

    def array(self) -> pa.Array:
        if pa.types.is_boolean(self.type):
            data = pa.py_buffer(np.packbits(self.values, bitorder="little"))
        else:
            data = pa.py_buffer(self.values)  # (zero-copy: the array keeps `values` alive)
        nulls = int(len(self.valid) - np.count_nonzero(self.valid))
        return pa.Array.from_buffers(self.type, len(self.values), [_bitmap(self.valid), data], null_count=nulls)


class SharedDictionary:
    """A string column of several day tables as codes into one dictionary: a value gets its code where it
    first appears (day order, then row order); null stays null. The codes go straight into one array
    allocated at its final size."""

    def __init__(self, rows: int) -> None:
        self.dictionary: pa.Array = pa.array([], pa.string())  # the values so far; code = position
        self.codes = np.zeros(rows, dtype=np.int32)
        self.valid = np.ones(rows, dtype=bool)
        self.filled = 0

    def add(self, column: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        assert isinstance(column, pa.DictionaryArray)
        values = column.dictionary.cast(pa.string())
        local = np.asarray(pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        # The day's codes in order of first appearance (a day's dictionary may hold values no kept row uses,
        # and be in any order): only those get a code, in that order. (Looked up in Arrow, not a Python loop:
        # tens of thousands of distinct names a day.)
        seen, first_at = np.unique(local[local >= 0], return_index=True)
        ordered = seen[np.argsort(first_at, kind="stable")]
        wanted = values.take(pa.array(ordered, pa.int64()))
        code = np.array(pc.fill_null(pc.index_in(wanted, value_set=self.dictionary), -1).to_numpy(
            zero_copy_only=False), dtype=np.int32)
        new = (code < 0) & np.asarray(wanted.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if new.any():
            fresh = wanted.filter(pa.array(new))
            distinct = pc.unique(fresh)  # (in first-appearance order)
            code[new] = len(self.dictionary) + np.asarray(
                pc.index_in(fresh, value_set=distinct).to_numpy(zero_copy_only=False), dtype=np.int32)
            self.dictionary = pa.concat_arrays([self.dictionary, distinct])
        remap = np.full(len(values) + 1, -1, dtype=np.int32)  # (local -1, null, maps to the last entry: -1)
        remap[ordered] = code  # (a null value keeps -1)
        codes = remap[local]
        at = slice(self.filled, self.filled + len(codes))
        self.valid[at] = codes >= 0
        self.codes[at] = np.maximum(codes, 0)
        self.filled += len(codes)

    def array(self) -> pa.DictionaryArray:
        nulls = int(len(self.valid) - np.count_nonzero(self.valid))
        indices = pa.Array.from_buffers(pa.int32(), len(self.codes), [_bitmap(self.valid), pa.py_buffer(self.codes)],
                                        null_count=nulls)
        return pa.DictionaryArray.from_arrays(indices, self.dictionary)


def read_day(path: Path, columns: list[str], dictionary: list[str]) -> pa.Table:
    """`columns` of one day file; a column the file lacks (written before it existed) is null, as
    `pq.read_table(schema=STORE_SCHEMA)` gives it; `dictionary` columns come dictionary-encoded."""
    # (ParquetFile, not read_table: one small file needs none of the dataset machinery, which costs more
    # than the read itself here.)
    import pyarrow.parquet as pq  # (here and in day_rows: a build from --input never loads Parquet)

    present = set(store.read_schema(path).names)  # (checked: version, column types; damage names the day)
    try:
        with pq.ParquetFile(path, read_dictionary=[c for c in dictionary if c in present]) as parquet:
            table = parquet.read(columns=[c for c in columns if c in present], use_threads=False)
    except store.READ_ERRORS as exc:
        raise store.damaged(path, f"cannot be read ({store._reason(exc)})") from None
    store.check_day_values(path, table)  # (the columns read: a negative GPU count refuses the day)
    out = []
    for name in columns:
        field = STORE_SCHEMA.field(name)
        if name not in present:
            out.append(pa.nulls(table.num_rows, field.type))
            continue
        col = table.column(name)
        if not pa.types.is_dictionary(col.type) and col.type != field.type:
            col = col.cast(field.type)
        out.append(col)
    return pa.table(out, names=columns)


def day_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    store.read_schema(path)
    try:
        rows = int(pq.read_metadata(path).num_rows)
    except store.READ_ERRORS as exc:
        raise store.damaged(path, f"cannot be read ({store._reason(exc)})") from None
    if rows < 0:
        raise store.damaged(path, f"cannot be read (its footer says {rows} rows)")
    return rows


def _keys(day_files: list[Path]) -> tuple[pa.Table, list[int]]:
    """latest_state's keys of all the days, in load order, and each day's number of rows. The window is
    replaced by its rank among the windows read: the same order as the ISO strings (a null one last, where
    sort_indices puts it). Each key is copied day by day into one array of the final size."""
    per_file = [day_rows(path) for path in day_files]
    rows = sum(per_file)
    numbers = {name: FixedWidthColumn(STORE_SCHEMA.field(name).type, rows) for name in KEY_COLUMNS if name != "window"}
    window = SharedDictionary(rows)
    for path in day_files:
        day = read_day(path, list(KEY_COLUMNS), ["window"])
        for name, builder in numbers.items():
            builder.add(day.column(name))
        window.add(day.column("window"))
    names = window.dictionary.to_pylist()
    rank_of_code = np.empty(len(names) + 1, dtype=np.int32)
    rank_of_code[np.argsort(np.array(names, dtype=object), kind="stable")] = np.arange(len(names), dtype=np.int32)
    rank_of_code[-1] = len(names)  # null
    codes = np.where(window.valid, window.codes, len(names))
    keys = pa.table({name: builder.array() for name, builder in numbers.items()})
    return keys.append_column("window", pa.array(rank_of_code[codes], pa.int32())), per_file


def load_for_report(root: Path, days: list[date], cluster: str | None = None, *,
                    snapshot: Path | None = None) -> pa.Table:
    """The stored rows of `days` of `cluster` (None: the store's one cluster) that `store.load` returns (same
    rows, same order), without UNUSED_COLUMNS and with DICTIONARY_COLUMNS dictionary-encoded; read one day file
    at a time. A damaged day, or one of another schema version, is a StoreError naming it (store.read_schema).
    The snapshot is held (store.reading): a fetch that replaces it meanwhile leaves its files in place.
    `snapshot`: read that one (resolved by a caller holding store.reading), not `current` again."""
    with store.reading(root):
        return _load_for_report(root, days, cluster, snapshot)


def day_files(root: Path, days: list[date], cluster: str | None, snapshot: Path | None = None) -> list[Path]:
    """The stored day files of `days` in `snapshot` (None: the current one; call under store.reading). Only the day
    entries gpuclust wrote (store.scan_days); a day of `days` whose entry cannot be read, or a `current` that points
    nowhere, is store.StoreDamaged naming it and its re-fetch."""
    snap = snapshot or store.snapshot_to_read(root, days)
    return store.day_paths(snap, days, cluster)


def stored_rows(files: list[Path]) -> int:
    """The rows of the day files, from their footers (no row is read)."""
    return sum(day_rows(path) for path in files)


def load_columns(root: Path, days: list[date], columns: list[str], cluster: str | None = None, *,
                 dictionary: tuple[str, ...] = DICTIONARY_COLUMNS) -> pa.Table:
    """`columns` of the rows load_for_report gives (same rows, same order, the same day-by-day read), the
    `dictionary` ones among them dictionary-encoded: for a reader of a few columns (`policy replay`)."""
    with store.reading(root):
        return _load_for_report(root, days, cluster, None, columns, dictionary)


def _load_for_report(root: Path, days: list[date], cluster: str | None, snap: Path | None = None,
                     columns: list[str] | None = None,
                     dictionary: tuple[str, ...] = DICTIONARY_COLUMNS) -> pa.Table:
    files = day_files(root, days, cluster, snap)
    columns = report_columns() if columns is None else columns
    if not files:
        return STORE_SCHEMA.empty_table().select(columns)

    keys, per_file = _keys(files)
    keep = store.latest_keep(keys)
    rows = len(keys) if keep is None else int(np.count_nonzero(keep))
    del keys

    types = {name: STORE_SCHEMA.field(name).type for name in columns}
    encoders = {name: SharedDictionary(rows) for name in dictionary if name in columns}
    fixed = {name: FixedWidthColumn(types[name], rows) for name in columns
             if name not in encoders and FixedWidthColumn.fits(types[name])}
    other: dict[str, list[pa.Array]] = {name: [] for name in columns if name not in encoders and name not in fixed}
    offset = 0
    for path, n in zip(files, per_file, strict=True):
        day = read_day(path, columns, list(encoders))
        if keep is not None:
            day = day.filter(pa.array(keep[offset : offset + n]))
        offset += n
        for name, encoder in encoders.items():
            encoder.add(day.column(name))
        for name, builder in fixed.items():
            builder.add(day.column(name))
        for name, chunks in other.items():  # (JobID, and a column of a type not foreseen here)
            chunks.append(day.column(name).combine_chunks())
        del day
    out: dict[str, pa.Array] = {}
    for name in columns:
        if name in encoders:
            out[name] = encoders.pop(name).array()
        elif name in fixed:
            out[name] = fixed.pop(name).array()
        else:
            chunks = other.pop(name)
            out[name] = pa.concat_arrays(chunks) if chunks else pa.array([], types[name])
    return pa.table(out)


PROBLEMS_IN_REPORT = 50  # rejected rows named in report.json (the count is whole)


def store_info(root: Path, days: list[date], cluster: str | None, rows: int, known: bool) -> dict[str, Any]:
    """The report's input section for a build from the store: `rows` read, exit codes `known` for all. Its
    problems begin with what the store holds that was not read (store_warnings), then the rejected rows."""
    warnings = store_warnings(root, cluster)
    stored_problems = store.stored_problems(root, days, cluster, warnings)
    stored = set(store.stored_days(root, cluster))
    return {
        "source": str(root),
        "rows": rows,
        "days_read": [d.isoformat() for d in days if d in stored],
        "steps_dropped": 0,
        "rejected_rows": len(stored_problems),
        "problems": [*warnings, *stored_problems[:PROBLEMS_IN_REPORT]],
        "exit_codes_known": known,
        "notes": [] if known else [
            "Some stored rows came from sacct --json (22.05), which cannot know exit codes: they are "
            "null, and COMPLETED counts as success for them."
        ],
    }


def store_warnings(root: Path, cluster: str | None) -> list[str]:
    """What the current snapshot holds for `cluster` that a report does not read (store.store_warnings: entries
    gpuclust did not write, day entries that cannot be read), at most PROBLEMS_IN_REPORT lines and a count."""
    snap = store.current_snapshot(root)
    if snap is None or not snap.is_dir():
        return []
    lines = [store.as_current(line, snap, root) for line in store.store_warnings(snap, cluster)]
    if len(lines) > PROBLEMS_IN_REPORT:
        lines = [*lines[:PROBLEMS_IN_REPORT], f"{root}: and {len(lines) - PROBLEMS_IN_REPORT} more entries not read"]
    return lines


def exit_codes_known(table: pa.Table) -> bool:
    return bool(pc.all(table.column("exit_code_known")).as_py()) if table.num_rows else True


# What `policy replay` reads of each stored execution: who, the request (submit line, its fields), its allocation
# and how long it held it (gpuclust.accounting.stored_requests).
REQUEST_COLUMNS = ("job_id", "job_id_raw", "job_base", "array_task", "het_offset", "job_name", "user", "account",
                   "partition", "qos", "wckey", "comment", "state", "submit", "elapsed_s", "nnodes", "alloc_tres",
                   "timelimit_s", "submit_line", "req_tres")
REQUEST_DICTIONARY = ("user", "account", "partition", "qos", "wckey", "comment", "state", "alloc_tres", "req_tres")


def requests_submitted(root: Path, since: Any, until: Any, cluster: str | None = None) -> pa.Table:
    """REQUEST_COLUMNS of the stored executions (latest state, as load_for_report keeps them) of the jobs
    submitted in since..until (aware datetimes), read from the UTC days of the period. A day stored before
    submit_line or req_tres existed reads them as null."""
    from gpuclust.accounting.ingest.period import Period

    period = Period(since, until)
    table = load_columns(root, period.utc_days(), list(REQUEST_COLUMNS), cluster, dictionary=REQUEST_DICTIONARY)
    if table.num_rows == 0:
        return table
    submit = pc.cast(table.column("submit"), pa.int64())
    inside = pc.and_(pc.greater_equal(submit, int(period.start_epoch)), pc.less(submit, int(period.end_epoch)))
    return table.filter(pc.fill_null(inside, False))
