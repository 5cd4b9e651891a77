"""Queue waits and holds: quantiles per group over the attempts that started in the period."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gpuclust.accounting.figures.metrics.attempts import Attempts
from gpuclust.accounting.figures.metrics.definitions import WAIT_COLUMNS
from gpuclust.accounting.figures.metrics.runs import _groups


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


def _per_group(labels: list[str], size_all: np.ndarray, value_at: Callable[[np.ndarray], np.ndarray]
               ) -> tuple[np.ndarray, dict[str, Any]]:
    """Which labels have values (`size_all`: how many each), and per such label (in label order) its jobs,
    median, p90 and max, unrounded; `value_at(positions)` reads the values sorted by (group, value)."""
    present = size_all > 0
    lo = np.r_[0, np.cumsum(size_all)[:-1]][present]
    size = size_all[present]
    return present, {
        "label": [label for label, p in zip(labels, present, strict=True) if p],
        "jobs": size,
        "median": _quantile_sorted(value_at, lo, size, 0.5),
        "p90": _quantile_sorted(value_at, lo, size, 0.9),
        "max": value_at(lo + size - 1),
    }


def _wait_frame(name: str, figures: dict[str, Any] | pd.DataFrame) -> pd.DataFrame:
    """The queue_wait_by_* / hold_by_* table of _per_group's figures: the group column `name`, seconds to 3
    decimals."""
    def seconds(values: Any) -> np.ndarray:  # (what Series.astype(float).round(3) gives, before the frame)
        return np.round(np.asarray(values, dtype=np.float64), 3)

    return pd.DataFrame({name: figures["label"], "jobs": figures["jobs"], "median_s": seconds(figures["median"]),
                         "p90_s": seconds(figures["p90"]), "max_s": seconds(figures["max"])})


def wait_table(labels: list[str], gidx: np.ndarray, values: KnownValues, name: str) -> pd.DataFrame:
    """jobs, median, p90 and max of the known values per group (`gidx`: each known value's index into the
    sorted `labels`)."""
    if len(values.values) == 0:
        return pd.DataFrame(columns=[name, *WAIT_COLUMNS])
    size = np.bincount(gidx, minlength=len(labels)).astype(np.int64)
    return _wait_frame(name, _per_group(labels, size, _sorted_by_group(gidx, len(labels), values))[1])


def _wait_groups(att: Attempts, started: np.ndarray) -> Iterator[tuple[str, list[str], np.ndarray, KnownValues]]:
    """Per table (queue_wait_by_* and hold_by_*: partition, account, qos) over the attempts `started`: the
    sorted group labels, each known value's index into them, and the known values."""
    waits = {"queue_wait": KnownValues.of(att.wait_s(started)), "hold": KnownValues.of(att.hold_s(started))}
    for dim in ("partition", "account", "qos"):
        codes = att.codes(dim, started)
        labels, gidx = _groups(codes.codes, codes.names())  # of every started attempt, once for both
        for col, values in waits.items():
            yield f"{col}_by_{dim}", labels, gidx if values.rows is None else gidx[values.rows], values


def wait_tables(att: Attempts, started: np.ndarray) -> dict[str, pd.DataFrame]:
    """queue_wait_by_* and hold_by_* (partition, account, qos) over the attempts `started`."""
    return {key: wait_table(labels, gidx, values, key.rsplit("_by_", 1)[1])
            for key, labels, gidx, values in _wait_groups(att, started)}


def wait_counts(att: Attempts, started: np.ndarray) -> dict[str, ValueCounts]:
    """wait_tables' values as ValueCounts: what a partitioned build keeps of each bucket."""
    return {key: ValueCounts.of(labels, gidx, values.values) for key, labels, gidx, values in _wait_groups(att, started)}


@dataclass(frozen=True)
class ValueCounts:
    """Known values per group as their distinct (group, value) pairs, sorted, with counts: all an exact
    quantile needs, and they add up over disjoint sets of attempts (a partitioned build's buckets). Waits are
    whole seconds, so a bucket has far fewer pairs than attempts."""

    labels: list[str]  # sorted
    group: np.ndarray  # index into labels
    value: np.ndarray
    count: np.ndarray

    @classmethod
    def of(cls, labels: list[str], gidx: np.ndarray, values: np.ndarray) -> ValueCounts:
        return cls._counted(labels, np.asarray(gidx, dtype=np.int64), np.asarray(values, dtype=np.float64),
                            np.ones(len(values), dtype=np.int64))

    @classmethod
    def _counted(cls, labels: list[str], group: np.ndarray, value: np.ndarray, count: np.ndarray) -> ValueCounts:
        order = np.lexsort((value, group))
        group, value, count = group[order], value[order], count[order]
        if len(order):
            new = np.r_[True, (group[1:] != group[:-1]) | (value[1:] != value[:-1])]
            starts = np.flatnonzero(new)
            group, value, count = group[starts], value[starts], np.add.reduceat(count, starts)
        return cls(labels, group, value, count)

    @classmethod
    def merge(cls, parts: list[ValueCounts]) -> ValueCounts:
        labels = sorted(set().union(*(p.labels for p in parts)))
        at = {label: i for i, label in enumerate(labels)}
        groups = [np.array([at[label] for label in p.labels], dtype=np.int64)[p.group] if len(p.group)
                  else np.zeros(0, dtype=np.int64) for p in parts]
        return cls._counted(labels, np.concatenate([np.zeros(0, dtype=np.int64), *groups]),
                            np.concatenate([np.zeros(0), *(p.value for p in parts)]),
                            np.concatenate([np.zeros(0, dtype=np.int64), *(p.count for p in parts)]))

    def summary(self) -> pd.DataFrame:
        """Per label with values (in label order): jobs, total, median, p90 and max, unrounded."""
        size_all = np.bincount(self.group, weights=self.count, minlength=len(self.labels)).astype(np.int64)
        total = np.bincount(self.group, weights=self.value * self.count, minlength=len(self.labels))
        ends = np.cumsum(self.count)  # pair j holds the sorted positions [ends[j] - count[j], ends[j])

        def value_at(positions: np.ndarray) -> np.ndarray:
            return self.value[np.searchsorted(ends, positions, side="right")]

        present, figures = _per_group(self.labels, size_all, value_at)
        out = pd.DataFrame({**figures, "total": total[present]})
        # A group with an unknown (NaN) value has unknown quantiles, as numpy's (its total is NaN already).
        unknown = np.bincount(self.group, weights=np.isnan(self.value), minlength=len(self.labels))[present] > 0
        if unknown.any():
            out.loc[unknown, ["median", "p90", "max"]] = np.nan
        return out

    def table(self, name: str) -> pd.DataFrame:
        """wait_table's table (jobs, median, p90, max per group) of these values."""
        if not len(self.value):
            return pd.DataFrame(columns=[name, *WAIT_COLUMNS])
        return _wait_frame(name, self.summary())
