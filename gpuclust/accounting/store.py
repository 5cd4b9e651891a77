"""The local columnar store: Parquet partitioned by UTC day, under <state_dir>/accounting/.

Layout::

    accounting/
      current -> snapshots/<id>          (symlink, swapped atomically)
      snapshots/<id>/day=YYYY-MM-DD/part.parquet
      .lock

A fetch builds a new snapshot beside the current one (hard links for the days it does not touch, fresh
files for the days it fetched), then replaces the `current` symlink with one rename. Readers resolve
`current` once. So a re-fetched window replaces its days completely (no duplicates, no gaps), and a crash
at any point leaves `current` as it was; leftover staging snapshots are removed by the next fetch.

A job that runs across several windows appears in each window's sacct output; `load` keeps one row per
execution (JobIDRaw + Start) in its latest state (the most recently fetched, then the latest window).
`report build` reads the same rows day file by day file, with less memory: gpuclust.accounting.storeread.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpuclust.accounting import sorting
from gpuclust.accounting.schema import SCHEMA, STORE_SCHEMA, UTC_SECONDS
from gpuclust.atomicfile import fsync_path
from gpuclust.errors import GpuclustError, InputError


class StoreError(GpuclustError):
    """The accounting store is missing, locked or damaged."""


def store_dir(state_dir: str) -> Path:
    return Path(state_dir) / "accounting"


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"another `gpuclust report fetch` holds {root / '.lock'}") from None
        yield


def current_snapshot(root: Path) -> Path | None:
    """The snapshot directory `current` points to (None before the first fetch)."""
    link = root / "current"
    return link.resolve() if link.is_symlink() else None


def day_file(snapshot: Path, day: date) -> Path:
    return snapshot / f"day={day.isoformat()}" / "part.parquet"


def stored_days(root: Path) -> list[date]:
    snap = current_snapshot(root)
    if snap is None or not snap.is_dir():
        return []
    days = []
    for entry in snap.iterdir():
        if entry.name.startswith("day=") and (entry / "part.parquet").exists():
            days.append(date.fromisoformat(entry.name[4:]))
    return sorted(days)


def replace_days(
    root: Path,
    tables: dict[date, pa.Table],
    fetched_at: datetime | None = None,
    problems: dict[date, list[str]] | None = None,
) -> Path:
    """Make `tables` the content of their days, atomically; returns the new snapshot directory.

    `problems` (rows sacct printed that could not be parsed) are kept beside each day as problems.json,
    so a report built later still says they exist.
    """
    with staged(root, list(tables), fetched_at) as stage:
        for day, table in tables.items():
            stage.write_day(day, table, (problems or {}).get(day))
    return stage.snapshot


class Stage:
    """A snapshot being built: the days it does not replace are already linked in; `write_day` writes one
    replaced day (so a fetch holds one day in memory, not the period)."""

    def __init__(self, snapshot: Path, days: list[date], fetched: datetime) -> None:
        self.snapshot = snapshot
        self.days = set(days)
        self.fetched = fetched
        self.written: set[date] = set()

    def write_day(self, day: date, table: pa.Table, problems: list[str] | None = None) -> None:
        if day not in self.days or day in self.written:
            raise ValueError(f"day {day} is not one this stage replaces, or is written twice")
        path = day_file(self.snapshot, day)
        path.parent.mkdir()
        pq.write_table(_stamp(table, self.fetched, day), path, compression="zstd")
        fsync_path(path)
        if problems:
            (path.parent / "problems.json").write_text(json.dumps(problems, ensure_ascii=False), encoding="utf-8")
            fsync_path(path.parent / "problems.json")
        self.written.add(day)


@contextmanager
def staged(root: Path, days: list[date], fetched_at: datetime | None = None) -> Iterator[Stage]:
    """Replace `days` in the store, atomically: the caller writes each (Stage.write_day) while the store is
    locked; when the block ends without an error the new snapshot becomes `current` in one rename (a day
    not written is then empty). On an error the staging is removed and `current` stays as it was."""
    fetched = fetched_at or datetime.now(timezone.utc).replace(microsecond=0)
    with _locked(root):
        snapshots = root / "snapshots"
        snapshots.mkdir(exist_ok=True)
        current = current_snapshot(root)
        for old in snapshots.iterdir():  # staging left by a crashed fetch
            if old != current:
                shutil.rmtree(old, ignore_errors=True)
        new = snapshots / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{time.monotonic_ns()}"
        new.mkdir()
        wanted = set(days)
        if current is not None and current.is_dir():
            for entry in current.iterdir():
                if entry.name.startswith("day=") and date.fromisoformat(entry.name[4:]) not in wanted:
                    (new / entry.name).mkdir()
                    for item in entry.iterdir():
                        os.link(item, new / entry.name / item.name)
        stage = Stage(new, days, fetched)
        try:
            yield stage
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        for day in days:
            if day not in stage.written:
                stage.write_day(day, SCHEMA.empty_table())
        fsync_path(new)
        tmp_link = root / f".current.{os.getpid()}"
        if tmp_link.is_symlink():
            tmp_link.unlink()
        tmp_link.symlink_to(Path("snapshots") / new.name)
        os.replace(tmp_link, root / "current")
        fsync_path(root)
        if current is not None and current != new:
            shutil.rmtree(current, ignore_errors=True)


def _stamp(table: pa.Table, fetched: datetime, day: date) -> pa.Table:
    n = table.num_rows
    table = table.select(SCHEMA.names).cast(SCHEMA)
    table = table.append_column("fetched_at", pa.array(np.full(n, int(fetched.timestamp()), dtype=np.int64)).cast(UTC_SECONDS))
    table = table.append_column("window", pa.array([day.isoformat()] * n, pa.string()))
    return table.cast(STORE_SCHEMA)


def load(root: Path, days: list[date] | None = None) -> pa.Table:
    """The stored rows of `days` (all days when None), one row per execution in its latest state."""
    snap = current_snapshot(root)
    if snap is None:
        raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")
    wanted = stored_days(root) if days is None else [d for d in days if day_file(snap, d).exists()]
    tables = [pq.read_table(day_file(snap, d), schema=STORE_SCHEMA) for d in wanted]
    if not tables:
        return STORE_SCHEMA.empty_table()
    return latest_state(pa.concat_tables(tables))


def stored_problems(root: Path, days: list[date]) -> list[str]:
    snap = current_snapshot(root)
    out: list[str] = []
    for day in days:
        path = snap / f"day={day.isoformat()}" / "problems.json" if snap else None
        if path is not None and path.exists():
            out += json.loads(path.read_text(encoding="utf-8"))
    return out


def latest_state(table: pa.Table) -> pa.Table:
    """One row per (JobIDRaw, Start): the one fetched last (then from the latest window, then latest line).

    A row that never started (pending) is dropped when a later fetch shows the same JobIDRaw started.
    """
    keep = latest_keep(table)
    return table if keep is None else table.filter(pa.array(keep))


def latest_keep(table: pa.Table) -> np.ndarray | None:
    """Which rows latest_state keeps, as a mask (None: all of them). It reads only the columns job_id_raw,
    start and, where present, fetched_at and window (any type that sorts as the stored one)."""
    n = table.num_rows
    if n == 0:
        return None
    raw = np.asarray(table.column("job_id_raw").to_numpy(), dtype=np.int64)
    # Only rows whose JobIDRaw occurs more than once can be dropped (requeued executions, a job seen by
    # several windows): only those are sorted (JobIDRaw is not in row order: array tasks get theirs when they
    # start). Its range usually allows a count table, so finding them takes no sort either.
    ids, _ = sorting.factorize(raw)
    rows = np.flatnonzero(np.bincount(ids)[ids] > 1)
    del ids
    if len(rows) == 0:
        return None
    keep = np.ones(n, dtype=bool)
    keys = table.select([c for c in ("job_id_raw", "start", "fetched_at", "window") if c in table.column_names])
    keep[rows] = _latest_mask(keys.take(pa.array(rows)), raw[rows])
    return None if keep.all() else keep


def _latest_mask(table: pa.Table, raw_all: np.ndarray) -> np.ndarray:
    """Which rows of `table` latest_state keeps (`raw_all`: its JobIDRaw)."""
    order_cols = [c for c in ("fetched_at", "window") if c in table.column_names]
    n = table.num_rows
    # Work on a permutation (the row order the keys are ranked in) instead of sorting the whole table twice:
    # one filter of the original table gives the same rows in the same (original) order.
    perm_np: np.ndarray | None = None
    if order_cols:
        keys_table = table.select(order_cols).append_column("_i", pa.array(np.arange(n)))
        perm_np = pc.sort_indices(
            keys_table, sort_keys=[*[(c, "ascending") for c in order_cols], ("_i", "ascending")]
        ).to_numpy()
    start_col = pc.cast(table.column("start"), pa.int64())
    start_all = (pc.fill_null(start_col, -1) if start_col.null_count else start_col).to_numpy()
    start = start_all if perm_np is None else start_all[perm_np]
    raw = raw_all if perm_np is None else raw_all[perm_np]
    # Keep the last occurrence of each key: the last of its group in a stable sort by the keys.
    pending = start == -1
    # Start as a compact key (0 = never started): a narrow key packs with JobIDRaw into one sort word.
    start_key = start - (int(start[~pending].min()) - 1) if not pending.all() else start.copy()
    if pending.any():
        start_key[pending] = 0
    order = sorting.lex_perm([raw, start_key])
    sorted_raw = raw if order is None else raw[order]
    sorted_start = start if order is None else start[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = (sorted_raw[1:] != sorted_raw[:-1]) | (sorted_start[1:] != sorted_start[:-1])
    if order is None:
        keep = last
    else:
        keep = np.zeros(n, dtype=bool)
        keep[order[last]] = True
    if pending.any():
        started_ids = np.sort(raw[~pending])
        at = np.searchsorted(started_ids, raw[pending])
        started = started_ids[np.minimum(at, max(len(started_ids) - 1, 0))] == raw[pending] if len(started_ids) \
            else np.zeros(int(pending.sum()), dtype=bool)
        keep[pending] &= ~started
    if perm_np is not None:
        keep_orig = np.empty(n, dtype=bool)
        keep_orig[perm_np] = keep
        keep = keep_orig
    return keep
