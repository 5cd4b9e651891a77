"""The value of one TRES in each TRES list of a column (`cpu=00:04:02,...,mem=16616418K`), cut from the column's
bytes: `extract`. Its definition is the regex `extract_regex` (the first entry named KEY), which it gives exactly
(tests/unit/test_accounting_usage.py holds the two equal): one substring search per key instead of a regex pass,
each value cut at its `,` from a window of bytes by 8-byte word arithmetic.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import swar

__all__ = ["extract", "extract_regex"]

# The bytes cut around a value, three 8-byte words: longer values (none of sacct's numbers is) go to the regex.
_VALUE_WINDOW = 24
_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_COMMAS = np.uint64(0x2C2C2C2C2C2C2C2C)
_ONE = np.uint64(1)
_CUT_BLOCK_ROWS = 1 << 16


def extract_regex(text: pa.Array, key: str) -> pa.Array:
    """The value text of `key` in each TRES string (null where absent): its first entry's, as sacct lists
    each TRES once. The definition `extract` keeps."""
    got = pc.extract_regex(text, r"(?:^|,)" + re.escape(key) + r"=(?P<v>[^,]*)")
    return pc.struct_field(got, [0])


def extract(text: pa.Array, key: str) -> tuple[np.ndarray, pa.Array]:
    """(the rows where `key` is, its value text on each): `extract_regex`'s non-null values, found without a
    regex pass per key. A value starts after the list's first `key=` at its start or after a `,` (one
    substring search over the column), and is cut at its next `,` in a window of bytes."""
    n = len(text)
    if n == 0 or text.null_count == n:
        return np.zeros(0, np.int64), pa.array([], pa.string())
    data, offsets = swar.buffers_of(text)
    entry = len(key) + 1  # `key=`
    roomy = fields.valid_mask(text) & (np.diff(offsets) >= entry)
    begin = np.where(fields._mask(pc.starts_with(text, key + "=")), 0, -1)
    rest = np.flatnonzero(roomy & (begin < 0))
    if rest.size:
        whole = rest.size * 4 > n  # most rows: one pass over the column, not a copy of them first
        found = pc.fill_null(pc.find_substring(text if whole else text.take(pa.array(rest)), "," + key + "="), -1)
        at = np.asarray(found.to_numpy(zero_copy_only=False))
        at = at[rest] if whole else at
        begin[rest] = np.where(at >= 0, at + 1, -1)
    rows = np.flatnonzero(begin >= 0)
    start = offsets[rows].astype(np.int64) + begin[rows] + entry
    room = offsets[rows + 1] - start
    width = _VALUE_WINDOW
    long = np.zeros(rows.size, dtype=bool)
    parts = []
    for lo in range(0, rows.size, _CUT_BLOCK_ROWS):  # (in blocks: the word arithmetic's temporaries stay small)
        hi = min(lo + _CUT_BLOCK_ROWS, rows.size)
        windows = _windows(data, start[lo:hi], width)
        size = np.minimum(_first_comma(windows), room[lo:hi])
        too_long = (size >= width) & (room[lo:hi] > width)
        long[lo:hi] = too_long
        parts.append(_cut(windows[~too_long], size[~too_long]) if too_long.any() else _cut(windows, size))
    values = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    if long.any():
        slow = extract_regex(text.take(pa.array(rows[long])), key)
        order = np.argsort(np.concatenate([np.flatnonzero(~long), np.flatnonzero(long)]), kind="stable")
        return rows, pa.concat_arrays([values, slow.cast(pa.string())]).take(pa.array(order))
    return rows, values


def _windows(data: np.ndarray, start: np.ndarray, width: int) -> np.ndarray:
    """`width` bytes of `data` from each of `start`, zero past its end: (len(start), width)."""
    view = np.lib.stride_tricks.sliding_window_view
    inside = start <= data.size - width
    if data.size >= width and inside.all():
        return view(data, width)[start]
    out = np.zeros((start.size, width), dtype=np.uint8)
    if inside.any():
        out[inside] = view(data, width)[start[inside]]
    if inside.all():
        return out
    tail_from = int(start[~inside].min())
    tail = np.concatenate([data[tail_from:], np.zeros(width, dtype=np.uint8)])
    out[~inside] = view(tail, width)[start[~inside] - tail_from]
    return out


def _first_comma(windows: np.ndarray) -> np.ndarray:
    """The index of each window's first `,` (its width where none), by 8-byte words: in a word XORed with
    commas, the lowest byte whose zero test `(x - 1s) & ~x & 0x80s` flags is the first zero byte."""
    words = np.ascontiguousarray(windows).view("<u8")
    x = words ^ _COMMAS
    flags = (x - _ONES) & ~x & _HIGH
    at = np.bitwise_count((flags & (~flags + _ONE)) - _ONE) // 8  # trailing zero bytes; 8: none
    first = at[:, -1] + 8 * (words.shape[1] - 1)
    for k in range(words.shape[1] - 2, -1, -1):
        first = np.where(at[:, k] < 8, at[:, k] + 8 * k, first)
    return first.astype(np.int64)


def _cut(windows: np.ndarray, size: np.ndarray) -> pa.Array:
    """The first `size` bytes of each window, as strings (cut at ASCII `,` or a value's end: UTF-8 stays whole)."""
    keep = np.arange(windows.shape[1]) < size[:, None]
    value_offsets = np.zeros(size.size + 1, dtype=np.int32)
    np.cumsum(size, out=value_offsets[1:])
    return pa.StringArray.from_buffers(size.size, pa.py_buffer(value_offsets), pa.py_buffer(windows[keep]))
