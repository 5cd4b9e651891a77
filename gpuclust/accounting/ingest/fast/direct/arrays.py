"""Array helpers of the direct reader: pyarrow <-> numpy without copies, and the delimiter's bytes cut off."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast.direct.pieces import Column
from gpuclust.accounting.ingest.fast.direct.records import decode


def to_strings(arr: pa.Array) -> tuple[pa.Array, bool]:
    """A binary array as strings (replacing invalid UTF-8 as the reference does), and whether it was valid."""
    try:
        return pc.cast(arr, pa.string()), True
    except pa.ArrowInvalid:
        text, _ = decode(arr.to_pylist())
        return pa.array(text, pa.string()), False


def ints(arr: pa.Array) -> np.ndarray:
    """The int64 values of a fixed-width column (nulls: whatever lies under them), without a copy."""
    if arr.type != pa.int64() and not pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.int64())
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr)]


def unwrap(arr: pa.Array, col: Column) -> pa.Array:
    """The values of `col` without the delimiter's parts around them."""
    if not col.slen:
        return pc.binary_slice(arr, col.plen, 1 << 30)
    return pc.binary_slice(arr, col.plen, -col.slen)


def starts_with(arr: pa.Array, prefix: bytes) -> np.ndarray:
    """Whether each value of a binary array starts with `prefix`."""
    return fields._mask(pc.starts_with(arr, pattern=prefix))


def lookup(values: pa.Array, rows: np.ndarray) -> pa.Array:
    """values[rows]: one value per distinct value (int64 or float64, possibly null) taken to the rows."""
    kind = values.type
    filled = np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False))
    out = np.take(filled, rows)
    return fields.nullable(out, np.take(fields.valid_mask(values), rows) if values.null_count else None, kind)


def row_mask(per_value: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    return np.take(per_value, rows) if per_value.any() else None


def encoded(values: pa.Array, rows: np.ndarray) -> pa.Array:
    """values[rows] dictionary-encoded (distinct values only; nulls stay null)."""
    enc = pc.dictionary_encode(values)
    idx = enc.indices
    codes = np.take(np.asarray(pc.fill_null(idx, 0).to_numpy(zero_copy_only=False), dtype=np.int32), rows)
    valid = np.take(fields.valid_mask(idx), rows) if idx.null_count else None
    return pa.DictionaryArray.from_arrays(fields.nullable(codes, valid, pa.int32()), enc.dictionary)
