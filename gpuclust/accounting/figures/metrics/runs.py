"""Runs: attempts grouped into the units of work users want done (requeues, resubmissions), and their sums
by group."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics.attempts import Attempts, Coded
from gpuclust.accounting.figures.metrics.definitions import GROUP_COLUMNS, NONE_LABEL
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.config import SiteConfig


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


# The run figures that are the sums of their attempts' own (report.json `totals` and `runs.by_*`): each figure's
# name and the Attempts array it sums. A new one is a line here, its array in attempts.py, its column in
# GROUP_COLUMNS and its Figure in the catalog; runs, run_sums, group_table and the totals follow.
ATTEMPT_SUMS: dict[str, str] = {
    "gpu_hours": "gpu_hours",
    "unpriced_gpu_hours": "unpriced_gpu_hours",
    "gpu_device_hours": "device_hours",  # a slice counts as 1 device
}


@dataclass
class Runs:
    """One entry per run: the attempt indices of its first and last attempts, its cost (NaN when no attempt
    was priced), whether it completed, its completed-run GPU-hours, its end, and its ATTEMPT_SUMS."""

    first: np.ndarray
    last: np.ndarray
    attempts: np.ndarray
    cost: np.ndarray
    completed: np.ndarray
    completed_run_gpu_hours: np.ndarray
    end: np.ndarray
    sums: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.first)

    @property
    def gpu_hours(self) -> np.ndarray:
        return self.sums["gpu_hours"]

    def take(self, keep: np.ndarray) -> Runs:
        """The runs where `keep` holds."""
        return Runs(**{name: getattr(self, name)[keep] for name in _ARRAYS},
                    sums={name: values[keep] for name, values in self.sums.items()})


# Runs' per-run arrays (every field but `sums`).
_ARRAYS = tuple(f.name for f in fields(Runs) if f.name != "sums")


def runs_of(att: Attempts, run: np.ndarray) -> Runs:
    """The runs of the attempts (`run`: each attempt's run id, below len(att)); attempts of a run ordered
    by Start. Most runs are one attempt: those are taken as they are, only the others are sorted."""
    n = len(run)
    alone = np.bincount(run, minlength=n)[run] == 1 if n else np.zeros(0, dtype=bool)
    single = np.flatnonzero(alone)
    parts = [Runs(
        first=single, last=single, attempts=np.ones(len(single), dtype=np.int64), cost=att.cost[single],
        completed=att.done[single], completed_run_gpu_hours=np.where(att.done[single], att.gpu_hours[single], 0.0),
        end=att.end[single], sums={name: getattr(att, per)[single] for name, per in ATTEMPT_SUMS.items()},
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
            cost=np.where(any_priced, np.add.reduceat(np.where(priced, cost, 0.0), starts), np.nan),
            completed=completed, completed_run_gpu_hours=np.where(completed, att.gpu_hours[last], 0.0),
            end=att.end[last],
            sums={name: np.add.reduceat(getattr(att, per)[order], starts) for name, per in ATTEMPT_SUMS.items()},
        ))
    if len(parts) == 1:
        return parts[0]
    return Runs(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAYS},
                sums={name: np.concatenate([p.sums[name] for p in parts]) for name in ATTEMPT_SUMS})



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


# The group table's figures report.json rounds (figures.catalog: their decimals).
ROUNDED = tuple(f for f in catalog.figures(catalog.RUNS) if f.decimals is not None)
SUM_FIELDS = ("runs", "completed", "attempts", "completed_run_gpu_hours", "cost", "priced", *ATTEMPT_SUMS)


def run_sums(runs: Runs, ids: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per id (0..k-1) of the runs: the SUM_FIELDS (cost summed over priced runs; priced = their count)."""
    priced = ~np.isnan(runs.cost)
    weights = {
        "completed": runs.completed, "attempts": runs.attempts, "completed_run_gpu_hours": runs.completed_run_gpu_hours,
        "cost": np.where(priced, runs.cost, 0.0), "priced": priced, **runs.sums,
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
    figures = {**total, "runs": count, "completed": completed, "attempts": attempts_n, "retries": attempts_n - count,
               "cost": cost, "cost_per_completed_run": per_run}
    columns: dict[str, Any] = {name: [label for label, p in zip(labels, present, strict=True) if p],
                               **{column: figures[column][present] for column in GROUP_COLUMNS}}
    for f in ROUNDED:  # (rounded before the frame is made: what Series.astype(float).round gives, one step less)
        columns[f.name] = np.round(np.asarray(columns[f.name], dtype=np.float64), f.decimals or 0)
    return pd.DataFrame(columns)


def run_totals(runs: Runs) -> dict[str, Any]:
    """The unrounded sums behind `totals`: they add up over disjoint sets of runs (a partitioned build's
    buckets) before `finish_totals` rounds them."""
    sums = _raw_sums(runs)
    sums.update(runs=len(runs), attempts=int(runs.attempts.sum()))
    return sums


def add_run_totals(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The run_totals of two disjoint sets of runs (cost: None while neither has a priced run)."""
    out = {name: a[name] + b[name] for name in a if name != "cost"}
    out["cost"] = b["cost"] if a["cost"] is None else a["cost"] if b["cost"] is None else a["cost"] + b["cost"]
    return out


def finish_totals(sums: dict[str, Any]) -> dict[str, Any]:
    """report.json `totals` from run_totals."""
    completed, cost, attempts_n = sums["completed"], sums["cost"], sums["attempts"]
    figures = {
        **{name: round(sums[name], 9) for name in (*ATTEMPT_SUMS, "completed_run_gpu_hours")},
        "runs": sums["runs"],
        "completed": completed,
        "attempts": attempts_n,
        "retries": attempts_n - sums["runs"],
        "cost": None if cost is None else round(cost, 9),
        "cost_per_completed_run": None if cost is None or not completed else round(cost / completed, 9),
    }
    return {column: figures[column] for column in GROUP_COLUMNS}


def totals(runs: Runs) -> dict[str, Any]:
    return finish_totals(run_totals(runs))


def _raw_sums(runs: Runs) -> dict[str, Any]:
    """Unrounded totals, so ratios are not computed from rounded figures."""
    priced = ~np.isnan(runs.cost)
    return {
        "completed": int(runs.completed.sum()),
        **{name: float(values.sum()) for name, values in runs.sums.items()},
        "completed_run_gpu_hours": float(runs.completed_run_gpu_hours.sum()),
        "cost": float(runs.cost[priced].sum()) if priced.any() else None,
    }
