"""The store's tree: what `report fetch` writes under a snapshot, the one rule by which every reader and the fetch
tell it from anything else there, and how a fetch carries the rest into its new snapshot (gpuclust.accounting.history.store).

gpuclust reads only what it wrote: `cluster=<name>` (a name the site config accepts as cluster_name) holding
`day=YYYY-MM-DD` directories (a real date, nothing before or after it) that hold a regular `part.parquet`, and
`_problems.json` (version 1: `problems.json`) and the telemetry summaries (`_telemetry_jobs.parquet`,
`_telemetry_gpus.parquet`); beside them `_daily/` (the trend's cache) and, at the top,
`_gpuclust_store.json`. Anything else (`day=2026-11-02.bak` an admin copied, `day=yesterday`, `day=2026-13-45`,
a name with a trailing space, a stray file) is a stray: named (report.json input.problems, stderr), never read,
and never removed: a fetch carries it into the new snapshot as it is. A day entry without a readable file (an
empty directory, a dangling link) is broken: named, and refused by a report that needs the day (its re-fetch
named; `report fetch --repair` writes it again). Nothing here raises on what it finds.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

SCHEMA_FILE = "_gpuclust_store.json"
PART_FILE = "part.parquet"
# Rows sacct printed that did not parse, beside their day. A leading "_": Hive, Spark, Trino and pyarrow.dataset
# skip such files (version 1 called it problems.json: renamed when its day is linked into a new snapshot).
PROBLEMS_FILE = "_problems.json"
OLD_PROBLEMS_FILE = "problems.json"
# Per-day aggregates (a cache of figures computed from the rows; gpuclust.accounting.figures.trend): one JSON file per week
# of the site time zone's days, beside the cluster's days. A leading "_": engines reading the store skip it.
AGGREGATES_DIR = "_daily"
# The day's per-job and per-GPU telemetry summaries (gpuclust.accounting.figures.storedtelemetry: `report fetch` with
# [telemetry] prometheus_url), replaced with the day. A leading "_": engines reading the day files skip them.
TELEMETRY_JOBS_FILE = "_telemetry_jobs.parquet"
TELEMETRY_GPUS_FILE = "_telemetry_gpus.parquet"


def refetch_hint(day: date, last: date | None = None) -> str:
    """The command that writes `day` (to `last`) again."""
    return f"gpuclust report fetch --since {day.isoformat()} --until {((last or day) + timedelta(days=1)).isoformat()}"


REPAIR_HINT = "`gpuclust report fetch --repair` re-fetches every stored day that cannot be read"


def shown(path: Path) -> str:
    """A path as a warning names it: a name with a byte that is no UTF-8, a control character or white space at
    either end is quoted with escapes (a stray's name is anybody's: it must not break the line or the terminal)."""
    name = path.name
    plain = name.isprintable() and name == name.strip()
    text = name if plain else ascii(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
    parent = str(path.parent)
    if not parent.isprintable():
        parent = parent.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        parent = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in parent)
    return f"{parent}/{text}"


def kind(path: Path) -> str:
    return "directory" if path.is_dir() else "file" if path.is_file() else "special file"


# What gpuclust writes, and so all it reads (one rule for every reader and the fetch): `day=YYYY-MM-DD` with a real
# date, `cluster=<name>` with a name the site config accepts as cluster_name (config.values.parse_slurm_name).
_DAY_ENTRY = re.compile(r"day=([0-9]{4}-[0-9]{2}-[0-9]{2})")
_CLUSTER_ENTRY = re.compile(r"cluster=([A-Za-z0-9_][A-Za-z0-9_.\-]*)")


def entry_day(name: str) -> date | None:
    """The day a `day=` entry stands for: exactly `day=YYYY-MM-DD` of a real date, as gpuclust writes it; None for
    any other name (`day=2026-11-02.bak`, `day=yesterday`, `day=2026-13-45`, a trailing space, `day=20261102`)."""
    match = _DAY_ENTRY.fullmatch(name)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


def entry_cluster(name: str) -> str | None:
    """The cluster a `cluster=` entry stands for (None: no name gpuclust writes)."""
    match = _CLUSTER_ENTRY.fullmatch(name)
    return match.group(1) if match else None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # (a name the system refuses, too long a path)
        return False


def _entries(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:  # (not a directory, gone, not readable: its days are named by the caller, or there are none)
        return []


@dataclass
class DayScan:
    """What one cluster's directory of a snapshot holds (scan_days): the days gpuclust wrote, the day entries it
    wrote that cannot be read (named, refused by a report that needs them), and entries gpuclust did not write
    (named, skipped)."""

    where: Path
    days: dict[date, Path] = field(default_factory=dict)  # day -> its part.parquet, a regular file
    broken: dict[date, str] = field(default_factory=dict)  # day -> why it cannot be read
    strays: list[str] = field(default_factory=list)  # "<path>: why it is skipped"

    def warnings(self) -> list[str]:
        """One line per stray and per broken day, as report.json's problems and stderr's warnings say them."""
        return [*self.strays, *(broken_message(self.where, d, why) for d, why in sorted(self.broken.items()))]


DAY_FILES = frozenset({PART_FILE, PROBLEMS_FILE, OLD_PROBLEMS_FILE, TELEMETRY_JOBS_FILE, TELEMETRY_GPUS_FILE})
STRAY = "not an entry gpuclust writes: not read, left as it is"


def as_current(line: str, snapshot: Path, root: Path) -> str:
    """A warning about an entry of `snapshot` (the one `current` resolved to), naming it under `current/`: where
    the admin sees it, and where it stays (a fetch carries it into the next snapshot)."""
    prefix = str(snapshot)
    return str(root / "current") + line[len(prefix):] if line.startswith(prefix) else line


def scan_days(where: Path, *, inside: bool = True) -> DayScan:
    """The day entries of a cluster's directory (or of a version-1 snapshot), by the one rule of what gpuclust
    writes: `day=YYYY-MM-DD` (entry_day), a directory holding a regular `part.parquet`. Other names are strays;
    a day entry without a readable file (empty, a dangling link, not a directory) is broken. Never raises.
    `inside` False: the strays inside the days are not looked for (a reader that only wants the days: one stat
    a day, no listing)."""
    scan = DayScan(where)
    for entry in _entries(where):
        name = entry.name
        day = entry_day(name)
        if day is None:
            # (the cluster's trend cache; the schema file of a snapshot without clusters: an empty fetch)
            if name not in (AGGREGATES_DIR, SCHEMA_FILE):
                scan.strays.append(f"{shown(entry)}: {STRAY}")
            continue
        why = unreadable_day(entry)
        if why is not None:
            scan.broken[day] = why
        else:
            scan.days[day] = entry / PART_FILE
        if inside:
            for item in _entries(entry):
                if item.name not in DAY_FILES:
                    scan.strays.append(f"{shown(item)}: {STRAY}")
    return scan


def unreadable_day(entry: Path) -> str | None:
    """Why a `day=` entry holds no day file to read (None: it holds one, a regular file). Never raises."""
    try:
        if stat.S_ISREG(os.stat(entry / PART_FILE).st_mode):
            return None  # (the day of nearly every entry: one stat)
    except OSError:
        pass
    try:
        return _why_unreadable(entry)
    except OSError as exc:  # (a directory this user may not look into)
        return f"cannot be looked into ({exc.strerror or exc})"


def is_entry(path: Path) -> bool:
    """Whether anything (a dangling link too) is at `path`."""
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


def _why_unreadable(entry: Path) -> str | None:
    if not _is_dir(entry):
        dangling = entry.is_symlink() and not entry.exists()
        return f"is {'a dangling link' if dangling else 'not a directory'} (no {PART_FILE})"
    part = entry / PART_FILE
    if part.is_symlink() and not part.exists():
        return f"has {PART_FILE} as a dangling link (to {ascii(readlink(part))})"
    if not part.exists():
        return f"has no {PART_FILE} ({'other files only' if _entries(entry) else 'an empty directory'})"
    if not part.is_file():
        return f"has {PART_FILE} as a {kind(part)}, not a file"
    return None


def readlink(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def broken_message(where: Path, day: date, why: str) -> str:
    return (f"{where / ('day=' + day.isoformat())}: stored day {day.isoformat()} {why}: it cannot be read; re-fetch "
            f"that day: `{refetch_hint(day)}` (or {REPAIR_HINT})")


def clusters(snapshot: Path) -> list[str]:
    """The clusters a snapshot holds (none in a version-1 snapshot): its `cluster=<name>` directories."""
    return sorted(name for e in _entries(snapshot) if (name := entry_cluster(e.name) or "") and _is_dir(e))


def snapshot_strays(snapshot: Path) -> list[str]:
    """The entries at the top of a snapshot with clusters that gpuclust did not write (one without clusters,
    version 1, is scanned whole by scan_days)."""
    return [f"{shown(entry)}: {STRAY}" for entry in top_strays(snapshot)]


def top_strays(snapshot: Path) -> list[Path]:
    if not clusters(snapshot):
        return []
    return [entry for entry in _entries(snapshot)
            if entry.name != SCHEMA_FILE and not (entry_cluster(entry.name) and _is_dir(entry))]


def link_day(source: Path, target: Path, warnings: list[str]) -> None:
    """A day gpuclust wrote, into a new snapshot: its files hard-linked (a link to one: that file; version 1's
    problems.json as PROBLEMS_FILE); anything else in it carried as it is (carry)."""
    target.mkdir(parents=True)
    items = _entries(source)
    names = {item.name for item in items}
    for item in items:
        name = item.name
        if name == OLD_PROBLEMS_FILE and PROBLEMS_FILE not in names:
            name = PROBLEMS_FILE
        if item.name in DAY_FILES and item.is_file():
            try:
                os.link(item, target / name)
                continue
            except OSError:
                pass  # (a link to a file on another file system: carried as a link)
        carry(item, target / name, warnings)


CARRY_DEPTH = 32  # (a tree deeper than this under a stray entry is not one anybody made by hand: left out, named)


def carry(source: Path, target: Path, warnings: list[str], depth: int = 0) -> None:
    """Put `source`, an entry gpuclust did not write (or a broken day), into a new snapshot as it is: files
    hard-linked, directories made again, symbolic links copied as links (never followed: no loop, and a dangling
    one stays dangling). Where that fails, the entry is left out and named in `warnings`; never raises."""
    try:
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            if depth >= CARRY_DEPTH:
                warnings.append(f"{shown(source)}: more than {CARRY_DEPTH} directories deep: not carried into the new "
                                "snapshot (left out)")
                return
            target.mkdir(parents=True, exist_ok=True)
            for item in _entries(source):
                carry(item, target / item.name, warnings, depth + 1)
        else:
            os.link(source, target)
    except OSError as exc:
        warnings.append(f"{shown(source)}: could not be carried into the new snapshot ({exc.strerror or exc}): left out")


def carry_snapshot(current: Path, new: Path, cluster: str, days: list[date]) -> list[str]:
    """Everything of `current` into `new` but `cluster`'s `days` (which the fetch writes): the days gpuclust wrote
    hard-linked (a version-1 snapshot's under `cluster=<cluster>/`, the migration), everything else carried as it
    is (carry). Returns the warnings: the entries gpuclust did not write, the days that cannot be read (both
    named, never read, never removed)."""
    warnings: list[str] = []
    replaced = {f"day={d.isoformat()}" for d in days}
    names = clusters(current)
    if names:
        for entry in top_strays(current):
            warnings.append(f"{shown(entry)}: {STRAY}")
            carry(entry, new / entry.name, warnings)
        sources = [(current / f"cluster={name}", new / f"cluster={name}", name) for name in names]
    else:  # version 1 (or no day yet): its days become `cluster`'s
        sources = [(current, new / f"cluster={cluster}", cluster)]
    for source_dir, target_dir, name in sources:
        scan = scan_days(source_dir)
        warnings += scan.strays
        warnings += [broken_message(source_dir, d, why) for d, why in sorted(scan.broken.items())
                     if not (name == cluster and d in days)]
        for entry in _entries(source_dir):
            if entry.name == SCHEMA_FILE and source_dir == current:
                continue  # (written anew)
            day = entry_day(entry.name)
            if day is not None and name == cluster and entry.name in replaced:
                continue
            if day is None and source_dir == current:  # (version 1: what is not a day stays at the top)
                carry(entry, new / entry.name, warnings)
            elif day in scan.days:
                link_day(entry, target_dir / entry.name, warnings)
            else:
                target_dir.mkdir(parents=True, exist_ok=True)
                carry(entry, target_dir / entry.name, warnings)
    return warnings


def carry_replaced_strays(current: Path, new: Path, cluster: str, days: list[date], warnings: list[str]) -> None:
    """What a day the fetch replaced held beside gpuclust's files (an admin's copy of its part file): carried
    into the new day, as it is."""
    names = clusters(current)
    if names and cluster not in names:
        return
    source_dir = current / f"cluster={cluster}" if names else current
    for day in days:
        entry = source_dir / f"day={day.isoformat()}"
        if not _is_dir(entry) or entry.is_symlink():
            continue
        for item in _entries(entry):
            if item.name not in DAY_FILES:
                warnings.append(f"{shown(item)}: {STRAY}")
                carry(item, new / f"cluster={cluster}" / entry.name / item.name, warnings)
