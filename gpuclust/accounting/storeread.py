"""The store read for a report, day file by day file, so that memory is bounded by what the report needs.

`store.load` reads every day of the period whole (all columns, plain strings), concatenates them and then
drops the rows latest_state does not keep: at 3M sacct lines over 90 days that peaked at 1 GB, and the
metrics came on top. `load_for_report` gives the same rows in the same order, in two passes over the day
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
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuclust.accounting import store
from gpuclust.accounting.schema import STORE_SCHEMA
from gpuclust.errors import InputError

# Columns no figure of the report reads (metrics, economics, trend): not read at all.
UNUSED_COLUMNS = frozenset({"line", "array_pending", "state_raw", "mem_mb"})
# Strings that repeat from row to row: read as dictionary codes (a few bytes a row, not the text).
# (JobID is nearly unique per row: a dictionary would not save anything there.)
DICTIONARY_COLUMNS = ("job_name", "user", "account", "partition", "qos", "wckey", "comment", "nodelist", "state",
                      "alloc_tres", "gpu_type")
KEY_COLUMNS = ("job_id_raw", "start", "fetched_at", "window")


def report_columns(schema: pa.Schema = STORE_SCHEMA) -> list[str]:
    return [name for name in schema.names if name not in UNUSED_COLUMNS]


class SharedDictionary:
    """One string column of several day tables as codes into one dictionary: a value gets its code where it
    first appears (day order, then row order); null stays null."""

    def __init__(self) -> None:
        self.code_of: dict[str, int] = {}
        self.chunks: list[np.ndarray] = []  # int32 codes, -1 = null

    def add(self, column: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        if not pa.types.is_dictionary(column.type):
            column = pc.dictionary_encode(column)
        assert isinstance(column, pa.DictionaryArray)
        values = column.dictionary.to_pylist()
        local = np.asarray(pc.fill_null(column.indices, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        # The day's codes in order of first appearance (a day's dictionary may hold values no kept row uses,
        # and be in any order): only those get a code, in that order.
        seen, first_at = np.unique(local[local >= 0], return_index=True)
        remap = np.full(len(values) + 1, -1, dtype=np.int32)  # (local -1, null, maps to the last entry: -1)
        for code in seen[np.argsort(first_at, kind="stable")].tolist():
            value = values[code]
            if value is not None:
                remap[code] = self.code_of.setdefault(value, len(self.code_of))
        self.chunks.append(remap[local])

    def array(self) -> pa.DictionaryArray:
        codes = np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=np.int32)
        self.chunks = []
        indices = pa.array(codes, pa.int32(), mask=codes < 0)
        return pa.DictionaryArray.from_arrays(indices, pa.array(list(self.code_of), pa.string()))


def _read_day(path: Path, columns: list[str], dictionary: list[str]) -> pa.Table:
    """`columns` of one day file; a column the file lacks (written before it existed) is null, as
    `pq.read_table(schema=STORE_SCHEMA)` gives it; `dictionary` columns come dictionary-encoded."""
    present = set(pq.read_schema(path).names)
    table = pq.read_table(path, columns=[c for c in columns if c in present],
                          read_dictionary=[c for c in dictionary if c in present], use_threads=False)
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


def _keys(day_files: list[Path]) -> pa.Table:
    """latest_state's keys of all the days, in load order. The window is replaced by its rank among the
    windows read: the same order as the ISO strings (a null one last, where sort_indices puts it)."""
    parts = [_read_day(path, list(KEY_COLUMNS), ["window"]).combine_chunks() for path in day_files]
    windows = [t.column("window").chunk(0) if t.num_rows else pa.array([], pa.dictionary(pa.int32(), pa.string()))
               for t in parts]
    names = sorted({v for w in windows for v in w.dictionary.to_pylist() if v is not None})
    rank_of = {v: i for i, v in enumerate(names)}
    ranks = []
    for w in windows:
        # Rank of each dictionary entry, then of each row (the extra last entry is null's).
        per_entry = np.array([len(names) if v is None else rank_of[v] for v in w.dictionary.to_pylist()]
                             + [len(names)], dtype=np.int32)
        ranks.append(per_entry[pc.fill_null(w.indices, len(per_entry) - 1).to_numpy(zero_copy_only=False)])
    table = pa.concat_tables([t.drop_columns(["window"]) for t in parts]).combine_chunks()
    return table.append_column("window", pa.array(np.concatenate(ranks), pa.int32()))


def load_for_report(root: Path, days: list[date]) -> pa.Table:
    """The stored rows of `days` that `store.load` returns (same rows, same order), without UNUSED_COLUMNS
    and with DICTIONARY_COLUMNS dictionary-encoded; read one day file at a time."""
    snap = store.current_snapshot(root)
    if snap is None:
        raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")
    files = [path for path in (store.day_file(snap, d) for d in days) if path.exists()]
    columns = report_columns()
    if not files:
        return STORE_SCHEMA.empty_table().select(columns)

    keys = _keys(files)
    keep = store.latest_keep(keys)
    del keys

    encoders = {name: SharedDictionary() for name in DICTIONARY_COLUMNS if name in columns}
    plain: dict[str, list[pa.Array]] = {name: [] for name in columns if name not in encoders}
    offset = 0
    for path in files:
        day = _read_day(path, columns, list(encoders))
        n = day.num_rows
        if keep is not None:
            day = day.filter(pa.array(keep[offset : offset + n]))
        offset += n
        for name, encoder in encoders.items():
            encoder.add(day.column(name))
        for name, chunks in plain.items():
            chunks.append(day.column(name).combine_chunks())
        del day
    # One chunk per column (as the metrics read them), built column by column so that only one column is
    # held twice at a time.
    out: dict[str, pa.Array] = {}
    for name in columns:
        if name in encoders:
            out[name] = encoders.pop(name).array()
        else:
            out[name] = pa.concat_arrays(plain.pop(name))
    return pa.table(out)
