"""The local columnar store: Hive-partitioned Parquet by cluster and UTC day, under <state_dir>/accounting/.

Layout (version LAYOUT_VERSION; README.md, "The store")::

    accounting/
      current -> snapshots/<id>          (symlink, swapped atomically)
      snapshots/<id>/_gpuclust_store.json                       (SCHEMA_FILE: version, columns, meanings)
      snapshots/<id>/cluster=<ClusterName>/day=YYYY-MM-DD/part.parquet
      snapshots/<id>/cluster=<ClusterName>/day=YYYY-MM-DD/_problems.json  (rows sacct printed that did not parse)
      snapshots/<id>/cluster=<ClusterName>/day=YYYY-MM-DD/_telemetry_{jobs,gpus}.parquet  (per-job and per-GPU
                                          telemetry summaries: gpuclust.accounting.figures.storedtelemetry)
      snapshots/<id>/cluster=<ClusterName>/_daily/week=YYYY-MM-DD.json   (AGGREGATES_DIR: the daily trend's
                                          per-day figures of one week, a cache: gpuclust.accounting.figures.trend)
      .lock                               (held by a fetch: one at a time)
      .read.lock                          (held shared by readers: READ_LOCK)

`current/` is what other engines read (DuckDB, pyarrow.dataset, Spark, Trino: `hive_partitioning`, the
partition columns `cluster` and `day`); the headline SQL is gpuclust.accounting.history.store_sql. Each day file carries
its layout version in the Parquet key-value metadata (VERSION_KEY). Version 1 (the layout before: no cluster
level, `snapshots/<id>/day=…/part.parquet`, no version key) has the same columns (or fewer: a column added since
reads as null, as in any older day): it is read as it is, and the next fetch moves its days under
`cluster=<ClusterName>/` (hard links, in the same atomic swap). A day file of a newer version, with a column
STORE_SCHEMA does not have, without one of REQUIRED_COLUMNS, or with a column whose type differs from
STORE_SCHEMA's, is refused naming the day, the file and the re-fetch command: the store never mixes schemas
silently. So is a day whose rows break what gpuclust writes (check_day_values: a negative GPU count, rows of
another day's window), a truncated or corrupt day file, a day directory without its file (empty, a dangling
link): all are bad input (StoreDamaged, exit 2), other days still read, and `report fetch --repair` writes them
again (unreadable_days).

Only what gpuclust writes is read (gpuclust.accounting.history.storetree: one rule, entry_day, for every reader
and the fetch): `day=YYYY-MM-DD` with a real date under a `cluster=<name>` the site config could name. Anything
else in the tree (`day=2026-11-02.bak` an admin copied, `day=yesterday`, a name with a trailing space, a stray
file) is named (store_warnings: warnings of the report and the fetch) and skipped; a fetch carries it into the
new snapshot as it is (storetree.carry), never reads or removes it.

A fetch builds a new snapshot beside the current one (hard links for the days it does not touch, fresh
files for the days it fetched), then replaces the `current` symlink with one rename. Readers resolve
`current` once, holding READ_LOCK: a fetch leaves the snapshot it replaced while a report reads it. So a
re-fetched window replaces its days completely (no duplicates, no gaps), and a crash at any point leaves
`current` as it was; leftover staging snapshots are removed by the next fetch. Two fetches never interleave:
the second fails at once, naming the lock file, and changes nothing.

A job that runs across several windows appears in each window's sacct output; `load` keeps one row per
execution (JobIDRaw + Start) in its latest state (the most recently fetched, then the latest window).
`report build` reads the same rows day file by day file, with less memory: gpuclust.accounting.history.storeread.

The daily trend reads per-day aggregates (AGGREGATES_DIR), not every row again: `report fetch` writes those of the
weeks its days change, a report computes a missing or outdated one once and caches it (under the fetch lock,
non-blocking: a fetch in progress just means no cache this time). Each names the day files it was computed from
(their inode, size and mtime: a hard-linked, unchanged day keeps them, a re-fetched day does not) and the site
config figures it depends on, so it is used only while it equals what the rows give. A store without them (written
before, or read-only) works as it is. They leave the layout version as it is: older readers ignore `_daily/`
(Hive readers skip names starting with `_`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.history import storetree
from gpuclust.accounting.history.storepath import store_dir as store_dir  # (re-exported: its old home)
from gpuclust.accounting.history.storetree import (
    AGGREGATES_DIR,
    OLD_PROBLEMS_FILE,
    PART_FILE,
    PROBLEMS_FILE,
    REPAIR_HINT,
    SCHEMA_FILE,
    as_current,
    broken_message,
    clusters,
    refetch_hint,
    scan_days,
    snapshot_strays,
)
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.accounting.ingest.schema import SCHEMA, STORE_SCHEMA, UTC_SECONDS
from gpuclust.atomicfile import fsync_path
from gpuclust.errors import InputError


class StoreError(InputError):
    """The accounting store is missing, locked, damaged or ambiguous (several clusters, none named): the command
    cannot read what it was given, which is bad input (exit 2) and never a bug (exit 70). The message says what
    to do."""


class StoreDamaged(StoreError):
    """A stored day (or the store's `current` link) that cannot be read as gpuclust wrote it: bad input (exit 2),
    never a bug; the message names it and the fetch that writes it again."""


# Version of the layout and of the day files' columns. 1: `snapshots/<id>/day=…` (no cluster level, no version
# key); 2: `cluster=<name>/day=…`, the schema file, the version key in every day file; 3: the column timelimit_s
# (sacct's Timelimit); 4: the columns submit_line and req_tres (SubmitLine, ReqTRES: `policy replay`); 5: the
# columns alloc_gpu_equivalents and gpu_share_unknown (what `report fetch` computed of each row's GPUs: store_sql's
# figures; both null in an older day, which store_sql reads by its AllocTRES). A day file's columns are those of
# version 1 plus, possibly, columns added since (read as null where missing: STORE_SCHEMA).
LAYOUT_VERSION = 5
# The columns no day file may lack, in any version: an execution's identity and latest state, what its runs are
# matched on, and its allocated GPU-hours. Without one a day would give other figures, silently: it is refused.
# Any other STORE_SCHEMA column a day lacks (written before the column existed: reason, the usage columns) reads
# as null, unknown. A column STORE_SCHEMA does not have is another schema: refused (a new column comes with a new
# LAYOUT_VERSION, so that an older gpuclust refuses the day by its version instead).
REQUIRED_COLUMNS = ("job_id", "job_id_raw", "job_base", "array_task", "het_offset", "job_name", "user", "account",
                    "partition", "state", "exit_code", "submit", "start", "end", "elapsed_s", "alloc_tres", "gpus",
                    "fetched_at", "window")
VERSION_KEY = b"gpuclust.store_version"
# The Hive partition keys of the layout (cluster=<name>/day=<date>): an engine reads them as columns, so no
# STORE_SCHEMA column may bear their names.
PARTITION_COLUMNS = (("cluster", "string"), ("day", "date (UTC)"))
# The cluster a write goes to when the caller names none and the store holds none yet (library callers and
# tests; `report fetch` always names the site config's cluster_name). Alone in a store, it is read for any
# name, as a version-1 store is.
DEFAULT_CLUSTER = "default"


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"{root / '.lock'}: another `gpuclust report fetch` is writing this store; nothing was changed. "
                "Run this fetch again once that one has finished (the store then holds both).") from None
        yield


# Readers hold it shared while they read a snapshot; a fetch removes a replaced snapshot only when it can take it
# exclusively (else the next fetch does): a `report build` never loses the files under it to a fetch's swap.
READ_LOCK = ".read.lock"


@contextmanager
def reading(root: Path) -> Iterator[None]:
    """Hold while reading the snapshot `current` points to (resolve it inside): no fetch removes it meanwhile."""
    handle = None
    for mode in ("a", "r"):  # (a reader without write access to the store: a lock file a fetch made)
        try:
            handle = open(root / READ_LOCK, mode)
            break
        except OSError:
            continue
    if handle is None:  # (no store yet, or none this reader may lock: nothing to protect)
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        yield


def _remove_unread(root: Path, snapshots: list[Path]) -> None:
    """Remove replaced (or crashed staging) snapshots, unless a reader holds READ_LOCK: then the next fetch does."""
    if not snapshots:
        return
    with open(root / READ_LOCK, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        for path in snapshots:
            shutil.rmtree(path, ignore_errors=True)


def current_snapshot(root: Path) -> Path | None:
    """The snapshot directory `current` points to (None before the first fetch). It may not exist (a dangling
    link): snapshot_to_read names that."""
    link = root / "current"
    if not link.is_symlink():
        return None
    try:
        return link.resolve()
    except (OSError, RuntimeError):  # (a link loop: no directory, named by snapshot_to_read)
        return link


def snapshot_to_read(root: Path, days: Sequence[date] = ()) -> Path:
    """The snapshot `current` points to (call under `reading`): an InputError before the first fetch, StoreDamaged
    when `current` is no link to a directory (dangling: its days are not readable; never read as an empty store).
    `days`: the days the caller wants, for the re-fetch the message names."""
    link = root / "current"
    snap = current_snapshot(root)
    if snap is not None and snap.is_dir():
        return snap
    redo = (f"re-fetch the days you need (`{refetch_hint(min(days), max(days))}`)" if days
            else "re-fetch the days you need (`gpuclust report fetch --since YYYY-MM-DD --until YYYY-MM-DD`)")
    if snap is not None:
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        raise StoreDamaged(f"{link}: points to {target}, which is {'not a directory' if snap.exists() else 'gone'}: "
                           f"the stored days cannot be read; {redo}")
    if link.exists() or link.is_symlink():
        raise StoreDamaged(f"{link}: is not the symlink `gpuclust report fetch` writes (a {storetree.kind(link)}): move it "
                           f"away, then {redo}")
    raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")


def days_dir(snapshot: Path, cluster: str | None = None) -> Path:
    """The directory that holds the `day=` directories of `cluster` (None: the one cluster the store holds).
    A version-1 snapshot (no `cluster=` level) holds one unnamed cluster: its days are read for any name."""
    names = clusters(snapshot)
    if not names:
        return snapshot  # version 1, or empty
    if names == [DEFAULT_CLUSTER] and cluster not in names:
        cluster = None  # written by a caller that named no cluster: like version 1, read for any name
    if cluster is None:
        if len(names) > 1:
            raise StoreError(f"{snapshot}: the store holds clusters {', '.join(names)}: name the one to read "
                             "(the site config's cluster_name)")
        cluster = names[0]
    return snapshot / f"cluster={cluster}"


def store_warnings(snapshot: Path, cluster: str | None) -> list[str]:
    """What a reader of `cluster` names and skips: strays at the snapshot's top and in the cluster's directory,
    and its day entries that cannot be read."""
    return [*snapshot_strays(snapshot), *scan_days(days_dir(snapshot, cluster)).warnings()]


def day_file(snapshot: Path, day: date, cluster: str | None = None) -> Path:
    return days_dir(snapshot, cluster) / f"day={day.isoformat()}" / PART_FILE


def day_paths(snapshot: Path, days: Sequence[date] | None, cluster: str | None = None) -> list[Path]:
    """The day files of `days` (None: every day entry) that `snapshot` holds for `cluster`, in day order; a wanted
    day whose entry cannot be read (DayScan.broken: empty, a dangling link) is StoreDamaged, naming it. A day the
    store does not hold is no error (never fetched)."""
    where = days_dir(snapshot, cluster)
    if days is None:
        scan = scan_days(where, inside=False)
        broken, files = scan.broken, scan.days
        wanted = sorted({*files, *broken})
    else:  # (only the entries of `days`, named as gpuclust writes them: a year of days is not listed per week)
        broken, files, wanted = {}, {}, list(days)
        for day in wanted:
            entry = where / f"day={day.isoformat()}"
            if storetree.is_entry(entry):
                why = storetree.unreadable_day(entry)
                if why is None:
                    files[day] = entry / PART_FILE
                else:
                    broken[day] = why
    for day in wanted:
        if day in broken:
            raise StoreDamaged(broken_message(where, day, broken[day]))
    return [files[d] for d in wanted if d in files]


def stored_days(root: Path, cluster: str | None = None) -> list[date]:
    snap = current_snapshot(root)
    if snap is None or not snap.is_dir():
        return []
    return snapshot_days(snap, cluster)


def snapshot_days(snap: Path, cluster: str | None = None) -> list[date]:
    """The days a snapshot holds for `cluster` (stored_days of one resolved snapshot): its day entries with a
    file (scan_days; a broken one is not among them, a reader that wants it names it)."""
    return sorted(scan_days(days_dir(snap, cluster), inside=False).days)


def aggregate_path(snapshot: Path, name: str, cluster: str | None = None) -> Path:
    return days_dir(snapshot, cluster) / AGGREGATES_DIR / f"{name}.json"


def file_identity(path: Path) -> list[int] | None:
    """What tells a day file from any other: inode, size and mtime (ns); None when the day is not stored. A day
    a fetch did not touch is hard-linked into the new snapshot (the same identity); a re-fetched day is a new file."""
    try:
        st = path.stat()
    except OSError:  # (gone; a day entry that is no directory, a link loop: not a day that reads either)
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def read_aggregate(snapshot: Path, name: str, cluster: str | None = None) -> dict[str, Any] | None:
    """A cached aggregate, or None (absent, unreadable: the caller computes it from the rows)."""
    try:
        doc = json.loads(aggregate_path(snapshot, name, cluster).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_aggregate(root: Path, snapshot: Path, name: str, doc: dict[str, Any], cluster: str | None = None) -> bool:
    """Cache `doc` in `snapshot` if it is still `current`, holding the fetch lock (non-blocking: while a fetch runs
    nothing is written, and no fetch links a half-written file). False when not written (a fetch in progress,
    a replaced snapshot, a store this process may not write): the figures are the same, only not cached."""
    try:
        with open(root / ".lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            if current_snapshot(root) != snapshot:
                return False
            path = aggregate_path(snapshot, name, cluster)
            path.parent.mkdir(exist_ok=True)
            tmp = path.parent / f".{path.name}.{os.getpid()}"
            tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n", encoding="utf-8")
            os.replace(tmp, path)
            return True
    except OSError:
        return False


# What the columns the headline figures read mean (figure names: the GPU-hours glossary,
# shared/gpu-hours-glossary.md); every column is described in gpuclust/accounting/ingest/schema.py.
MEANINGS = {
    "job_id_raw": "JobIDRaw: one job; every execution of a requeued job shares it",
    "job_base": "the number before _ or + of JobID (array master, het leader)",
    "het_offset": "het component (123+1 -> 1); null if none: the components of one het job are one attempt",
    "account": "Account", "partition": "Partition",
    "submit_line": "SubmitLine: the submitting command's argv joined by spaces (its quoting lost); null: not fetched",
    "req_tres": "ReqTRES: the TRES the job asked for (cpu, mem, node, gres/gpu...); null: not fetched",
    "start": "Start (UTC); null: never started (pending)",
    "end": "End (UTC); null: still running when fetched",
    "elapsed_s": "Elapsed in seconds",
    "alloc_tres": "AllocTRES as printed; empty: no allocation (cancelled while pending)",
    "gpus": "GPU GRES devices of AllocTRES (gres/gpu), a MIG slice counting as one (glossary: device-hours)",
    "alloc_gpu_equivalents": "the row's GPU GRES in GPU-equivalents (MIG slices, shards, MPS as shares of one physical GPU), "
                       "as `report fetch` computed them from the node inventory and the site config: allocated = "
                       "alloc_gpu_equivalents x the time held (glossary: GPU-equivalent, allocated); null: unknown (named "
                       "by gpu_share_unknown), or a day written before store version 5",
    "gpu_share_unknown": "why alloc_gpu_equivalents is unknown: a warning code of report.json input.gpu_share_warnings; "
                         "null where it is known, or in a day written before store version 5 (both null: read "
                         "the row's AllocTRES, store_sql.LATEST)",
    "fetched_at": "when `report fetch` read the row (UTC): the latest wins",
    "window": "the UTC day of the sacct window the row came from (= the partition day)",
}


def schema_document() -> dict[str, Any]:
    """The content of SCHEMA_FILE: what an engine reading the store needs (README.md, "The store")."""
    return {
        "layout_version": LAYOUT_VERSION,
        "written_by": "gpuclust report fetch",
        "layout": "cluster=<ClusterName>/day=<YYYY-MM-DD>/part.parquet (Hive partitioning: columns cluster, day)",
        "version_key": VERSION_KEY.decode(),
        "row": "one sacct allocation record of the day's window (sacct -a -D -X); an execution seen by several "
               "windows or fetches is kept once: the row with the latest fetched_at, then window (store_sql.LATEST)",
        "columns": [{"name": f.name, "type": str(f.type), "nullable": f.nullable,
                     "meaning": MEANINGS.get(f.name, "gpuclust/accounting/ingest/schema.py")} for f in STORE_SCHEMA],
        "partition_columns": [{"name": name, "type": kind} for name, kind in PARTITION_COLUMNS],
        "figures": {
            "allocated": "GPU-equivalents x the part of start..end inside the window (a row still running: up to "
                         "its end); GPU-hours = GPU-seconds / 3600 (glossary: allocated). GPU-equivalents: "
                         "alloc_gpu_equivalents; in a day written before version 5, gpus where AllocTRES names no MIG "
                         "slice, shard or MPS, else unknown (store_sql.LATEST, column gpu_equivalents)",
            "completed-run, retry / failure": "need gpuclust's run logic (resubmissions, requeues, arrays): "
                                               "report.json, not SQL",
        },
        "glossary": "figure names as in the GPU-hours glossary (shared/gpu-hours-glossary.md)",
        "sql": "gpuclust/accounting/history/store_sql.py (README.md, The store)",
        "aggregates": f"cluster=<ClusterName>/{AGGREGATES_DIR}/week=<YYYY-MM-DD>.json: the daily trend's figures per "
                      "site-time-zone day of one week (Monday first), a cache gpuclust keeps in step with the day "
                      "files it names (gpuclust/accounting/figures/trend.py); not needed to read the store",
        "telemetry": f"cluster=<ClusterName>/day=<YYYY-MM-DD>/{storetree.TELEMETRY_JOBS_FILE} and "
                     f"{storetree.TELEMETRY_GPUS_FILE}: per job execution and per GPU, the Prometheus telemetry "
                     "figures `report fetch` stored with the day (gpuclust/accounting/figures/storedtelemetry.py)",
    }


def write_schema_file(snapshot: Path) -> None:
    path = snapshot / SCHEMA_FILE
    path.write_text(json.dumps(schema_document(), indent=1) + "\n", encoding="utf-8")
    fsync_path(path)


def replace_days(
    root: Path,
    tables: dict[date, pa.Table],
    fetched_at: datetime | None = None,
    problems: dict[date, list[str]] | None = None,
    cluster: str | None = None,
) -> Path:
    """Make `tables` the content of their days, atomically; returns the new snapshot directory.

    `problems` (rows sacct printed that could not be parsed) are kept beside each day (PROBLEMS_FILE),
    so a report built later still says they exist.
    """
    with staged(root, list(tables), fetched_at, cluster=cluster) as stage:
        for day, table in tables.items():
            stage.write_day(day, table, (problems or {}).get(day))
    return stage.snapshot


class Stage:
    """A snapshot being built: the days it does not replace are already linked in; `write_day` writes one
    replaced day (so a fetch holds one day in memory, not the period)."""

    def __init__(self, snapshot: Path, days: list[date], fetched: datetime, cluster: str = DEFAULT_CLUSTER) -> None:
        self.snapshot = snapshot
        self.cluster = cluster
        self.days = set(days)
        self.fetched = fetched
        self.written: set[date] = set()
        # Entries of the replaced snapshot gpuclust did not write, and its days that cannot be read: carried over as
        # they are, named here (`report fetch` warns of them).
        self.warnings: list[str] = []

    def day_dir(self, day: date) -> Path:
        """Where this snapshot holds `day` (write_day makes it; what else belongs to the day goes in it after)."""
        return self.snapshot / f"cluster={self.cluster}" / f"day={day.isoformat()}"

    def write_day(self, day: date, table: pa.Table, problems: list[str] | None = None,
                  shares: RowShares | None = None) -> None:
        """`shares`: each row's GPU-equivalents, as the fetch computed them (None: the columns are null, not
        computed; store_sql then reads the row's AllocTRES, as in a day of an older version)."""
        if day not in self.days or day in self.written:
            raise ValueError(f"day {day} is not one this stage replaces, or is written twice")
        path = self.day_dir(day) / PART_FILE
        path.parent.mkdir(parents=True)
        stamped = _stamp(table, self.fetched, day, shares)
        stamped = stamped.replace_schema_metadata({**(stamped.schema.metadata or {}),
                                                   VERSION_KEY: str(LAYOUT_VERSION).encode()})
        import pyarrow.parquet as pq  # (here and below: a build from --input never loads Parquet)

        pq.write_table(stamped, path, compression="zstd")
        fsync_path(path)
        if problems:
            (path.parent / PROBLEMS_FILE).write_text(json.dumps(problems, ensure_ascii=False), encoding="utf-8")
            fsync_path(path.parent / PROBLEMS_FILE)
        self.written.add(day)


@contextmanager
def staged(root: Path, days: list[date], fetched_at: datetime | None = None, *,
           cluster: str | None = None) -> Iterator[Stage]:
    """Replace `days` of `cluster` in the store, atomically: the caller writes each (Stage.write_day) while the
    store is locked; when the block ends without an error the new snapshot becomes `current` in one rename (a
    day not written is then empty). On an error the staging is removed and `current` stays as it was.

    `cluster` None: the one cluster the store holds (DEFAULT_CLUSTER in an empty store). Every other day and
    cluster is linked into the new snapshot unchanged; a version-1 snapshot's days move under this cluster
    (the migration: the same files, hard-linked, in the same swap). What gpuclust did not write, and days that
    cannot be read, are carried over as they are and named in Stage.warnings (_carry_snapshot)."""
    fetched = fetched_at or datetime.now(timezone.utc).replace(microsecond=0)
    with _locked(root):
        snapshots = root / "snapshots"
        snapshots.mkdir(exist_ok=True)
        link = root / "current"
        if link.exists() and not link.is_symlink() and link.is_dir():
            raise StoreDamaged(f"{link}: is not the symlink `gpuclust report fetch` writes (a directory): move it "
                               "away (its days are not read), then fetch again")
        current = current_snapshot(root)
        warnings: list[str] = []
        if current is not None and not current.is_dir():
            warnings.append(f"{link}: pointed to {storetree.readlink(link)}, which is gone: the store held no day that could "
                            "be read; this fetch writes only its own days (re-fetch the others you need)")
        # Staging left by a crashed fetch, and snapshots a reader held when their fetch replaced them.
        _remove_unread(root, [old for old in snapshots.iterdir() if old != current])
        if cluster is None:
            names = clusters(current) if current is not None else []
            if len(names) > 1:
                raise StoreError(f"{current}: the store holds clusters {', '.join(names)}: name the one to write")
            cluster = names[0] if names else DEFAULT_CLUSTER
        new = snapshots / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{time.monotonic_ns()}"
        new.mkdir()
        try:
            if current is not None and current.is_dir():
                warnings += [as_current(line, current, root) for line in storetree.carry_snapshot(current, new, cluster, days)]
            write_schema_file(new)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        stage = Stage(new, days, fetched, cluster)
        stage.warnings = warnings
        try:
            yield stage
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            raise
        for day in days:
            if day not in stage.written:
                stage.write_day(day, SCHEMA.empty_table())
        if current is not None and current.is_dir():
            carried: list[str] = []
            storetree.carry_replaced_strays(current, new, cluster, days, carried)
            stage.warnings += [as_current(line, current, root) for line in carried]
        fsync_path(new)
        tmp_link = root / f".current.{os.getpid()}"
        if tmp_link.is_symlink():
            tmp_link.unlink()
        tmp_link.symlink_to(Path("snapshots") / new.name)
        os.replace(tmp_link, root / "current")
        fsync_path(root)
        if current is not None and current != new:
            _remove_unread(root, [current])


@dataclass(frozen=True)
class RowShares:
    """What a fetch computed of each row's GPUs (gpuclust.accounting.figures.shares, in row order): its
    GPU-equivalents (NaN: unknown) and, where unknown, the warning code that says why (None elsewhere; `unknown`
    None: every share known)."""

    equivalents: np.ndarray
    unknown: Sequence[str | None] | None = None


def _stamp(table: pa.Table, fetched: datetime, day: date, shares: RowShares | None = None) -> pa.Table:
    n = table.num_rows
    table = table.select(SCHEMA.names).cast(SCHEMA)
    table = table.append_column("fetched_at", pa.array(np.full(n, int(fetched.timestamp()), dtype=np.int64)).cast(UTC_SECONDS))
    table = table.append_column("window", pa.array([day.isoformat()] * n, pa.string()))
    if shares is None or n == 0:  # (not computed: null, as in a day written before the columns)
        equivalents = pa.nulls(n, pa.float64())
        unknown = pa.nulls(n, pa.string())
    else:
        values = np.asarray(shares.equivalents, dtype=np.float64)
        if len(values) != n or (shares.unknown is not None and len(shares.unknown) != n):
            raise ValueError(f"shares of {len(values)} rows for a day of {n}")
        equivalents = pa.array(values, pa.float64(), mask=np.isnan(values))
        unknown = pa.nulls(n, pa.string()) if shares.unknown is None else pa.array(list(shares.unknown), pa.string())
    table = table.append_column("alloc_gpu_equivalents", equivalents).append_column("gpu_share_unknown", unknown)
    return table.cast(STORE_SCHEMA)


def day_of(path: Path) -> date | None:
    """The day of a day file's path (`…/day=YYYY-MM-DD/part.parquet`)."""
    name = path.parent.name
    try:
        return date.fromisoformat(name[4:]) if name.startswith("day=") else None
    except ValueError:
        return None


def damaged(path: Path, what: str, fix: str = "") -> StoreDamaged:
    """The error for a day file that cannot be read as it is: the file, its day, why, and the fetch that
    writes the day again (`fix`: a remedy to name first). Bad input (exit 2), never a bug."""
    day = day_of(path)
    redo = f"re-fetch that day: `{refetch_hint(day)}`" if day else "re-fetch its day"
    return StoreDamaged(f"{path}: stored day {day.isoformat() if day else '?'} {what}; {fix}{redo} (the other days "
                        f"are not affected; {REPAIR_HINT})")


def check_day_schema(path: Path, schema: pa.Schema) -> None:
    """Refuse a day file this gpuclust cannot read exactly: written by a newer layout version, with a column
    STORE_SCHEMA does not have, without one of REQUIRED_COLUMNS, or with a column whose type is not the stored
    one's (another schema). A day may lack any other column (written before it existed): it reads as null."""
    meta = schema.metadata or {}
    raw = meta.get(VERSION_KEY)
    try:
        version = int(raw) if raw is not None else 1
    except ValueError:
        raise damaged(path, f"has an unreadable {VERSION_KEY.decode()} {raw!r}") from None
    if version > LAYOUT_VERSION:
        raise damaged(path, f"was written by a newer gpuclust (store version {version}, this one reads up to "
                             f"{LAYOUT_VERSION})", "upgrade gpuclust, or ")
    if version < 1:
        raise damaged(path, f"has {VERSION_KEY.decode()} {version}: no store version gpuclust wrote")
    names = list(schema.names)
    other = [n for n in dict.fromkeys(names) if n not in STORE_SCHEMA.names]
    twice = [n for n in dict.fromkeys(names) if names.count(n) > 1]
    lacking = [n for n in REQUIRED_COLUMNS if n not in names]
    if other or twice or lacking:
        what = [f"column{'s' if len(other) > 1 else ''} {', '.join(map(repr, other))} that no store version has"] \
            if other else []
        what += [f"column{'s' if len(twice) > 1 else ''} {', '.join(map(repr, twice))} twice"] if twice else []
        if lacking:
            what.append(f"no column{'s' if len(lacking) > 1 else ''} {', '.join(lacking)}")
        raise damaged(path, f"has {' and '.join(what)} (store version {version}: another schema, not mixed in)")
    for field_ in schema:
        want = STORE_SCHEMA.field(field_.name).type
        have = field_.type.value_type if pa.types.is_dictionary(field_.type) else field_.type
        if not _same_kind(have, want):
            raise damaged(path, f"has column {field_.name} as {have}, not {want} (store version {version}: "
                                 "another schema, not mixed in)")


# What every row gpuclust writes holds (check_day_values): these are never null, and these never negative.
NOT_NULL = ("job_id_raw", "elapsed_s", "gpus", "fetched_at", "window")
NOT_NEGATIVE = ("elapsed_s", "gpus", "nnodes", "alloc_gpu_equivalents")


def check_day_values(path: Path, table: pa.Table) -> None:
    """Refuse a day whose rows (the columns of `table`, those a reader read) break what gpuclust writes: a null
    where NOT_NULL, a negative value where NOT_NEGATIVE (a negative GPU count would be summed into the GPU-hours),
    a row of another window than the day of its directory (a day copied under another day's name). Such a file is
    not the one gpuclust wrote: the day is refused as a damaged one, never read in part (its re-fetch is exact)."""
    names = table.column_names
    for name in NOT_NULL:
        if name in names and table.column(name).null_count:
            raise damaged(path, f"has {table.column(name).null_count} row(s) without {name}, which gpuclust always "
                                "writes (not the file gpuclust wrote)")
    for name in NOT_NEGATIVE:
        if name in names and table.num_rows:
            col = table.column(name)
            if pa.types.is_dictionary(col.type):
                continue  # (not a numeric column: check_day_schema refused it)
            low = pc.min(col).as_py()
            if low is not None and low < 0:
                count = pc.sum(pc.less(col, 0)).as_py()
                raise damaged(path, f"has {count} row(s) with a negative {name} (as low as {low}): not what gpuclust "
                                    "writes, so not read in part")
    day = day_of(path)
    if day is not None and "window" in names and table.num_rows:
        col = table.column("window")
        seen: set[Any] = set()
        for chunk in col.chunks:
            values = pc.unique(chunk)
            if isinstance(values, pa.DictionaryArray):
                values = values.dictionary_decode()
            seen.update(values.to_pylist())
        others = sorted(str(v) for v in seen - {day.isoformat()})
        if others:
            raise damaged(path, f"holds rows of window {', '.join(others[:3])}, not of its own day (a day copied "
                                "under another day's name?): not read")


def _same_kind(have: pa.DataType, want: pa.DataType) -> bool:
    """A stored type that reads as `want` without loss (Parquet keeps second timestamps as milliseconds)."""
    if have == want:
        return True
    if pa.types.is_timestamp(have) and pa.types.is_timestamp(want):
        return bool(have.tz == want.tz)
    return bool(pa.types.is_large_string(have) and pa.types.is_string(want))


# What reading a damaged Parquet file raises (pyarrow's own errors; OSError for a file that vanished or a thrift
# footer that does not decode; ValueError and friends for metadata that decodes to nonsense).
READ_ERRORS = (pa.ArrowException, OSError, ValueError, TypeError, IndexError, KeyError, OverflowError, MemoryError)


def read_schema(path: Path) -> pa.Schema:
    """A day file's schema, checked (check_day_schema); a truncated or corrupt file is StoreDamaged: it names
    its day and the fetch that writes it again."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except READ_ERRORS as exc:
        raise damaged(path, f"cannot be read ({_reason(exc)})") from None
    check_day_schema(path, schema)
    return schema


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return (text[:300] + "...") if len(text) > 300 else text or type(exc).__name__


def read_day_table(path: Path, **kwargs: Any) -> pa.Table:
    """pq.read_table of one day file, with read_schema's checks and errors, and its values checked
    (check_day_values)."""
    import pyarrow.parquet as pq

    read_schema(path)
    try:
        table = pq.read_table(path, **kwargs)
    except READ_ERRORS as exc:
        raise damaged(path, f"cannot be read ({_reason(exc)})") from None
    check_day_values(path, table)
    return table


def unreadable_days(root: Path, cluster: str | None = None, days: Sequence[date] | None = None) -> dict[date, str]:
    """The stored days of `cluster` (those of `days`; None: all) that a report would refuse, each with why (the
    message a report gives): a day entry without its file, a file that does not read whole (read_day_table: its
    schema, every page, its values), a list of rejected rows that does not read. What `report fetch --repair`
    fetches again. Reads one day file at a time. StoreDamaged when `current` points nowhere."""
    out: dict[date, str] = {}
    with reading(root):
        snap = snapshot_to_read(root, days or ())
        where = days_dir(snap, cluster)
        scan = scan_days(where)
        wanted = set(days) if days is not None else None
        for day, why in scan.broken.items():
            if wanted is None or day in wanted:
                out[day] = broken_message(where, day, why)
        for day, path in sorted(scan.days.items()):
            if wanted is not None and day not in wanted:
                continue
            try:
                read_day_table(path)
            except StoreDamaged as exc:
                out[day] = str(exc)
                continue
            unread: list[str] = []
            stored_problems(root, [day], cluster, unread)
            if unread:
                out[day] = unread[0]
    return dict(sorted(out.items()))


def load(root: Path, days: list[date] | None = None, cluster: str | None = None) -> pa.Table:
    """The stored rows of `days` (all days when None), one row per execution in its latest state."""
    with reading(root):
        return _load(root, days, cluster)


def _load(root: Path, days: list[date] | None, cluster: str | None) -> pa.Table:
    snap = snapshot_to_read(root, days or ())
    tables = [read_day_table(path, schema=STORE_SCHEMA) for path in day_paths(snap, days, cluster)]
    if not tables:
        return STORE_SCHEMA.empty_table()
    return latest_state(pa.concat_tables(tables))


def stored_problems(root: Path, days: list[date], cluster: str | None = None,
                    warnings: list[str] | None = None) -> list[str]:
    """The rows sacct printed that did not parse, kept beside `days`. A problems file that cannot be read (not a
    list of strings: damaged) is named in `warnings` and its rows are not counted."""
    snap = current_snapshot(root)
    out: list[str] = []
    if snap is None or not snap.is_dir():
        return out
    where = days_dir(snap, cluster)
    for day in days:
        for name in (PROBLEMS_FILE, OLD_PROBLEMS_FILE):  # (version 1: problems.json)
            path = where / f"day={day.isoformat()}" / name
            if not (path.exists() or path.is_symlink()):
                continue
            listed = read_problems(path)
            if listed is None:
                if warnings is not None:
                    warnings.append(f"{path}: stored day {day.isoformat()}'s list of rejected rows cannot be read "
                                    f"(not what gpuclust writes): its rows are not counted; re-fetch that day: "
                                    f"`{refetch_hint(day)}`")
                continue
            out += listed
    return out


def read_problems(path: Path) -> list[str] | None:
    """A day's problems file (a JSON list of strings), or None when it is not one (damaged, not a regular file)."""
    try:
        if not path.is_file():
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, list) and all(isinstance(p, str) for p in doc) else None


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
        keep[pending] &= ~sorting.in_sorted(raw[pending], np.sort(raw[~pending]))
    if perm_np is not None:
        keep_orig = np.empty(n, dtype=bool)
        keep_orig[perm_np] = keep
        keep = keep_orig
    return keep
