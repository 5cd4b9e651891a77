"""Queue waits and holds: quantiles per group over the attempts that started in the period."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuclust.accounting.metrics.attempts import Attempts
from gpuclust.accounting.metrics.definitions import WAIT_COLUMNS
from gpuclust.accounting.metrics.runs import _groups


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
