"""Per-job and per-GPU telemetry summaries kept in the Parquet store by `report fetch`, so that figures outlive
Prometheus' retention (shared/gpu-hours-glossary.md names). Read without pandas: `gpuclust job` answers one job
from here.

What is stored, and where
    With [telemetry] prometheus_url set, `report fetch` asks Prometheus (fetch_telemetry: the queries and rules of
    `report build`) for every job execution with GPUs in the fetched days' rows, over its whole window [Start,
    End); one still running at fetch time over [Start, the fetch's time), stored *partial* (a later fetch
    replaces it). Each execution's summary goes with the last fetched day whose rows hold it, beside that day's
    part.parquet (store.py, layout):

        _telemetry_jobs.parquet  one row per execution (JobIDRaw, Start): its window, partial or not, the
                                 settings its figures depend on (SETTINGS), and JobTelemetry's figures
        _telemetry_gpus.parquet  one row per (execution, node, GPU, MIG instance): GpuTelemetry's figures and
                                 profile (version 2 added the MIG instance and profile; a version 1 file reads
                                 them as "", a whole GPU)

    Both are written into the fetch's staged snapshot, so they are replaced with their day in its one swap. A
    re-fetch keeps what Prometheus no longer gives: an execution without a fresh summary keeps its stored one,
    and a fresh summary never replaces a complete one of the same window and settings that covered more GPU time
    (Prometheus lost some of it).

The same figures as `report build` (for_report)
    fetch_telemetry evaluates points on the grid start + i x step of its period; the fetch's period starts at
    the multiple of step at or before the earliest Start (SETTINGS' grid_phase_s: that start modulo step). A
    report whose job Prometheus no longer has takes the stored summary only where all of these hold, and then
    its figures are the ones Prometheus gave while it had the data: the summary is complete; its window is the
    report's ([Start, End) clipped to the period); its grid is the report's (the period start minus the phase is
    a multiple of step); and every setting in SETTINGS is the report's. Otherwise the job stays unknown, and one
    counted warning says why.

Damage
    A file that cannot be read (truncated, corrupt, a newer version, another schema, values gpuclust never
    writes) is a warning naming it and the fetch that writes it again; the jobs it holds stay unknown. Nothing
    here raises on what it finds in the store.
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry, JobWindow, fetch_telemetry
from gpuclust.accounting.history import store, storetree
from gpuclust.atomicfile import fsync_path
from gpuclust.config.telemetry import TelemetryConfig
from gpuclust.errors import InputError

__all__ = ["StoredTelemetry", "TelemetryFetch", "for_report", "load_job_telemetry", "load_stored"]

JOBS_FILE = storetree.TELEMETRY_JOBS_FILE
GPUS_FILE = storetree.TELEMETRY_GPUS_FILE
VERSION_KEY = b"gpuclust.telemetry_version"
VERSION = 2
# Columns a file of an older version lacks, by the version that added them (read as "").
_SINCE = {"instance": 2, "profile": 2}

# The [telemetry] settings a summary's figures depend on: a report with other values cannot take it.
SETTINGS = ("step_s", "gap_factor", "idle_threshold_pct", "idle_min_s", "join", "job_label", "node_label",
            "gpu_label", "metric_util", "metric_fb_used", "metric_fb_free", "metric_power", "metric_temp",
            "metric_xid", "metric_ecc_dbe")
# Settings added later (the MIG instances'): compared only where the stored summary names them (one stored
# before them read no MIG instance apart).
LATER_SETTINGS = ("mig_util_metric", "mig_util_scale", "gpu_instance_label", "gpu_profile_label")

_TIME = pa.timestamp("s", tz="UTC")
JOB_FIGURES = tuple(f.name for f in fields(JobTelemetry) if f.name != "gpus")
GPU_FIGURES = tuple(f.name for f in fields(GpuTelemetry) if f.name not in ("node", "gpu", "util_profile", "instance",
                                                                            "profile"))
_INTS = frozenset({"gpus_seen"})
_NOT_NULL_FIGURES = ("gpus_seen", "held_idle_gpu_s", "covered_gpu_s", "busy_gpu_s")

JOBS_SCHEMA = pa.schema(
    [pa.field("job_id_raw", pa.int64(), nullable=False), pa.field("start", _TIME, nullable=False),
     pa.field("window_start", _TIME, nullable=False), pa.field("window_end", _TIME, nullable=False),
     pa.field("partial", pa.bool_(), nullable=False), pa.field("gpus", pa.int64(), nullable=False),
     pa.field("settings", pa.string(), nullable=False), pa.field("source", pa.string()),
     pa.field("fetched_at", _TIME)]
    + [pa.field(name, pa.int64() if name in _INTS else pa.float64()) for name in JOB_FIGURES])
GPUS_SCHEMA = pa.schema(
    [pa.field("job_id_raw", pa.int64(), nullable=False), pa.field("start", _TIME, nullable=False),
     pa.field("node", pa.string(), nullable=False), pa.field("gpu", pa.string(), nullable=False)]
    + [pa.field(name, pa.float64()) for name in GPU_FIGURES]
    + [pa.field("util_profile", pa.list_(pa.float64())), pa.field("instance", pa.string()),
       pa.field("profile", pa.string())])


@dataclass
class StoredTelemetry:
    """One execution's stored summary: the window its figures cover, and the figures."""
    job: str  # JobIDRaw, decimal
    start: datetime  # the execution's Start (with job: which execution)
    window_start: datetime
    window_end: datetime  # End; for a partial summary the fetch's time
    partial: bool  # the job was still running when fetched
    gpus: int  # allocated
    settings: dict[str, Any]
    telemetry: JobTelemetry
    source: str = ""  # the Prometheus it came from
    fetched_at: datetime | None = None
    path: Path | None = None  # the file it was read from

    @property
    def key(self) -> tuple[int, int]:
        return int(self.job), _epoch(self.start)


def _epoch(when: datetime) -> int:
    return int(when.timestamp())


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def settings_of(cfg: TelemetryConfig, grid_origin: float) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(cfg, name) for name in (*SETTINGS, *LATER_SETTINGS)}
    out["grid_phase_s"] = math.fmod(grid_origin, cfg.step_s) if cfg.step_s > 0 else 0.0
    return out


def mismatch(row: StoredTelemetry, cfg: TelemetryConfig, start: float, end: float, period_start: float) -> str | None:
    """Why `row` does not give the figures a report over a period starting at `period_start` computes for the
    window [start, end) (None: it does; module docstring)."""
    if row.partial:
        return f"stored while it ran, up to {row.window_end.isoformat()}"
    have = (row.window_start.timestamp(), row.window_end.timestamp())
    if have != (start, end):
        return (f"stored over [{row.window_start.isoformat()}, {row.window_end.isoformat()}), this report's period "
                f"asks [{_utc(start).isoformat()}, {_utc(end).isoformat()})")
    for name in SETTINGS:
        if row.settings.get(name) != getattr(cfg, name):
            return f"stored with [telemetry] {name} = {row.settings.get(name)!r}, now {getattr(cfg, name)!r}"
    for name in LATER_SETTINGS:
        if name in row.settings and row.settings[name] != getattr(cfg, name):
            return f"stored with [telemetry] {name} = {row.settings[name]!r}, now {getattr(cfg, name)!r}"
    phase = row.settings.get("grid_phase_s")
    step = float(cfg.step_s)
    if not isinstance(phase, (int, float)) or step <= 0:
        return "stored without its query grid"
    off = math.fmod(period_start - float(phase), step)
    if min(abs(off), step - abs(off)) > 1e-6:
        return (f"this report's query grid (period start {_utc(period_start).isoformat()}, step {step:g} s) is not "
                f"the stored one (phase {float(phase):g} s)")
    return None


# ---- writing ---------------------------------------------------------------------------------------------------


def _column(values: list[Any], type_: pa.DataType) -> pa.Array:
    return pa.array(values, type_)


def write_day(day_dir: Path, rows: Sequence[StoredTelemetry]) -> None:
    """Write the day's summaries (both files; nothing when `rows` is empty), sorted by (JobIDRaw, Start)."""
    if not rows:
        return
    rows = sorted(rows, key=lambda r: r.key)
    job_cols: dict[str, list[Any]] = {name: [] for name in JOBS_SCHEMA.names}
    gpu_cols: dict[str, list[Any]] = {name: [] for name in GPUS_SCHEMA.names}
    for row in rows:
        raw, start = row.key
        job_cols["job_id_raw"].append(raw)
        job_cols["start"].append(start)
        job_cols["window_start"].append(_epoch(row.window_start))
        job_cols["window_end"].append(_epoch(row.window_end))
        job_cols["partial"].append(row.partial)
        job_cols["gpus"].append(row.gpus)
        job_cols["settings"].append(json.dumps(row.settings, sort_keys=True))
        job_cols["source"].append(row.source)
        job_cols["fetched_at"].append(_epoch(row.fetched_at) if row.fetched_at else None)
        for name in JOB_FIGURES:
            job_cols[name].append(getattr(row.telemetry, name))
        for gpu in row.telemetry.gpus:
            gpu_cols["job_id_raw"].append(raw)
            gpu_cols["start"].append(start)
            gpu_cols["node"].append(gpu.node)
            gpu_cols["gpu"].append(gpu.gpu)
            for name in GPU_FIGURES:
                gpu_cols[name].append(getattr(gpu, name))
            gpu_cols["util_profile"].append(list(gpu.util_profile))
            gpu_cols["instance"].append(gpu.instance)
            gpu_cols["profile"].append(gpu.profile)
    import pyarrow.parquet as pq  # (here: a report build that stores nothing never loads the Parquet writer)

    meta = {VERSION_KEY: str(VERSION).encode()}
    for name, schema, cols in ((JOBS_FILE, JOBS_SCHEMA, job_cols), (GPUS_FILE, GPUS_SCHEMA, gpu_cols)):
        arrays = [_column(cols[f.name], pa.int64() if f.type == _TIME else f.type) for f in schema]
        arrays = [a.cast(f.type) if f.type == _TIME else a for a, f in zip(arrays, schema, strict=True)]
        table = pa.Table.from_arrays(arrays, schema=schema.with_metadata(meta))
        path = day_dir / name
        pq.write_table(table, path, compression="zstd")
        fsync_path(path)


# ---- reading ---------------------------------------------------------------------------------------------------


class _Damaged(Exception):
    pass


def _check_schema(schema: pa.Schema, want: pa.Schema) -> None:
    raw = (schema.metadata or {}).get(VERSION_KEY)
    try:
        version = int(raw) if raw is not None else 0
    except ValueError:
        raise _Damaged(f"has an unreadable {VERSION_KEY.decode()} {raw!r}") from None
    if version > VERSION:
        raise _Damaged(f"was written by a newer gpuclust (telemetry version {version}, this one reads up to "
                       f"{VERSION})")
    if version < 1:
        raise _Damaged(f"has no {VERSION_KEY.decode()} gpuclust writes (not a file gpuclust wrote)")
    for f in want:
        if f.name not in schema.names:
            if version < _SINCE.get(f.name, 0):
                continue  # (an older version's file: read as "")
            raise _Damaged(f"has no column {f.name} (another schema)")
        have = schema.field(f.name).type
        if pa.types.is_dictionary(have):
            have = have.value_type
        same = have == f.type or (pa.types.is_timestamp(have) and pa.types.is_timestamp(f.type)
                                  and have.tz == f.type.tz) or (pa.types.is_large_string(have)
                                                                and pa.types.is_string(f.type))
        if not same:
            raise _Damaged(f"has column {f.name} as {have}, not {f.type} (another schema)")


def _int64s(values: Iterable[int]) -> pa.Array:
    """An int64 array made from its bytes: pa.array() of Python values loads pandas (pyarrow's check for pandas
    objects), which a one-job lookup must not."""
    data = array("q", values)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data.tobytes())])


def _read(path: Path, want: pa.Schema, ids: set[int] | None) -> pa.Table | None:
    """The rows of `ids` (None: all) of one telemetry file, only the row groups whose statistics may hold them
    (a file whose statistics rule them all out is not read further: a year of days answers one job quickly)."""
    with open(path, "rb") as handle:  # (a file object: no file-system lookup per day)
        return _read_open(handle, want, ids)


def _read_open(handle: Any, want: pa.Schema, ids: set[int] | None) -> pa.Table | None:
    import pyarrow.parquet as pq

    meta = pq.read_metadata(handle)
    groups = list(range(meta.num_row_groups))
    if ids is not None:
        lo, hi = min(ids), max(ids)
        leaf = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == "job_id_raw"), None)
        keep = []
        for g in groups:
            stats = meta.row_group(g).column(leaf).statistics if leaf is not None else None
            if (stats is not None and stats.has_min_max and isinstance(stats.min, int) and isinstance(stats.max, int)
                    and (stats.max < lo or stats.min > hi)):
                continue
            keep.append(g)
        groups = keep
    if not groups:
        return None
    pf = pq.ParquetFile(handle, metadata=meta)
    _check_schema(pf.schema_arrow, want)
    # No threads: a few row groups gain nothing from Arrow's pool, and its workers reading a Python file object
    # can abort or hang the interpreter's exit (apache/arrow#34314, #50482; seen once under load here)
    table = pf.read_row_groups(groups, columns=[name for name in want.names if name in pf.schema_arrow.names],
                               use_threads=False)
    if ids is not None:
        table = table.filter(pc.is_in(table.column("job_id_raw"), value_set=_int64s(sorted(ids))))
    return table


def _seconds(column: pa.ChunkedArray) -> list[int | None]:
    out: list[int | None] = pc.cast(pc.cast(column, _TIME), pa.int64()).to_pylist()
    return out


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _check_values(table: pa.Table, not_null: Iterable[str], not_negative: Iterable[str]) -> None:
    for name in not_null:
        if table.column(name).null_count:
            raise _Damaged(f"has {table.column(name).null_count} row(s) without {name}, which gpuclust always writes")
    for name in not_negative:  # (in Python: the few rows of the jobs asked for; Arrow scalars would load pandas)
        count = sum(1 for v in table.column(name).to_pylist() if v is not None and not v >= 0)
        if count:
            raise _Damaged(f"has {count} row(s) with a negative or NaN {name}: not what gpuclust writes")


def read_day(day_dir: Path, ids: set[int] | None, warnings: list[str] | None = None) -> list[StoredTelemetry]:
    """The summaries one stored day holds (of `ids`; None: all). A file that cannot be read is a warning naming it,
    and none of the day's summaries are given (unknown, never half read)."""
    jobs_path, gpus_path = day_dir / JOBS_FILE, day_dir / GPUS_FILE
    if not os.path.lexists(jobs_path) and not os.path.lexists(gpus_path):
        return []
    path = jobs_path
    try:
        if not jobs_path.is_file() or not gpus_path.is_file():
            missing = gpus_path if jobs_path.is_file() else jobs_path
            path = missing
            raise _Damaged(f"is missing beside {(jobs_path if missing == gpus_path else gpus_path).name} (or is no file)")
        jobs = _read(jobs_path, JOBS_SCHEMA, ids)
        if jobs is None or not jobs.num_rows:
            return []
        _check_values(jobs, ("job_id_raw", "start", "window_start", "window_end", "partial", "gpus", "settings",
                             *_NOT_NULL_FIGURES), ("gpus", *_NOT_NULL_FIGURES))
        path = gpus_path
        gpus = _read(gpus_path, GPUS_SCHEMA, set(jobs.column("job_id_raw").to_pylist()))
        if gpus is None:
            gpus = GPUS_SCHEMA.empty_table()
        _check_values(gpus, ("job_id_raw", "start", "node", "gpu"), ("covered_s", "busy_s"))
        path = jobs_path
        return _rows(jobs, gpus, jobs_path)
    except _Damaged as exc:
        why = str(exc)
    except store.READ_ERRORS as exc:
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        why = f"cannot be read ({text})"
    if warnings is not None:
        day = storetree.entry_day(day_dir.name)
        redo = f"re-fetch that day while Prometheus still holds it: `{storetree.refetch_hint(day)}`" if day else ""
        warnings.append(f"{storetree.shown(path)}: stored telemetry {why}: the telemetry of the jobs it holds stays "
                        f"unknown{'; ' + redo if redo else ''}")
    return []


def _rows(jobs: pa.Table, gpus: pa.Table, path: Path) -> list[StoredTelemetry]:
    per_gpu: dict[tuple[Any, Any], list[GpuTelemetry]] = {}
    g = {name: gpus.column(name).to_pylist() for name in ("job_id_raw", "node", "gpu", *GPU_FIGURES, "util_profile")}
    for name in _SINCE:
        g[name] = gpus.column(name).to_pylist() if name in gpus.column_names else [""] * gpus.num_rows
    g_start = _seconds(gpus.column("start"))
    for k in range(gpus.num_rows):
        profile = g["util_profile"][k]
        per_gpu.setdefault((g["job_id_raw"][k], g_start[k]), []).append(GpuTelemetry(
            node=g["node"][k], gpu=g["gpu"][k], **{name: _float(g[name][k]) for name in GPU_FIGURES},  # type: ignore[arg-type]
            util_profile=tuple(_float(v) for v in profile) if profile is not None else (),
            instance=g["instance"][k] or "", profile=g["profile"][k] or ""))
    j = {name: jobs.column(name).to_pylist() for name in ("job_id_raw", "partial", "gpus", "settings", "source",
                                                          *JOB_FIGURES)}
    times = {name: _seconds(jobs.column(name)) for name in ("start", "window_start", "window_end", "fetched_at")}
    out: list[StoredTelemetry] = []
    for k in range(jobs.num_rows):
        raw, start = j["job_id_raw"][k], times["start"][k]
        assert raw is not None and start is not None  # (_check_values)
        try:
            settings = json.loads(j["settings"][k])
        except ValueError:
            settings = None
        if not isinstance(settings, dict):
            raise _Damaged(f"has settings that are no JSON object for job {raw}")
        figures = {name: (int(j[name][k]) if name in _INTS else _float(j[name][k])) for name in JOB_FIGURES}
        gpu_rows = sorted(per_gpu.get((raw, start), []), key=lambda x: (x.node, x.gpu, x.instance))
        if len(gpu_rows) != figures["gpus_seen"]:
            raise _Damaged(f"holds {len(gpu_rows)} GPU row(s) of job {raw}, which saw {figures['gpus_seen']}")
        fetched = times["fetched_at"][k]
        out.append(StoredTelemetry(
            job=str(raw), start=_utc(start), window_start=_utc(times["window_start"][k] or 0),
            window_end=_utc(times["window_end"][k] or 0), partial=bool(j["partial"][k]), gpus=int(j["gpus"][k]),
            settings=settings, telemetry=JobTelemetry(**figures, gpus=gpu_rows),  # type: ignore[arg-type]
            source=j["source"][k] or "", fetched_at=_utc(fetched) if fetched is not None else None, path=path))
    return out


def _day_dirs(where: Path, days: Collection[date] | None) -> list[Path]:
    if days is not None:
        return [where / f"day={d.isoformat()}" for d in sorted(set(days))]
    try:
        names = sorted(entry.name for entry in os.scandir(where))
    except OSError:
        return []
    return [where / name for name in names if storetree.entry_day(name) is not None]


def load_stored(store_root: Path, job_ids: Collection[str], *, days: Collection[date] | None = None,
                cluster: str | None = None, warnings: list[str] | None = None) -> dict[str, list[StoredTelemetry]]:
    """Every stored summary of these jobs (JobIDRaw as a decimal string), by id: each execution, and each day that
    holds one. `days`: only those days' (None: every stored day); `cluster`: None for the one cluster the store
    holds. What cannot be read is named in `warnings`; nothing raises for what the store holds."""
    ids = {int(j) for j in (str(x).strip() for x in job_ids) if j.isascii() and j.isdecimal()}
    out: dict[str, list[StoredTelemetry]] = {}
    if not ids:
        return out
    with store.reading(store_root):
        try:
            snap = store.snapshot_to_read(store_root)
            where = store.days_dir(snap, cluster)
        except store.StoreError as exc:  # damaged, or several clusters and none named: say so
            if warnings is not None:
                warnings.append(f"{exc} (no stored telemetry read)")
            return out
        except InputError:  # (no store yet: nothing stored)
            return out
        for day_dir in _day_dirs(where, days):
            for row in read_day(day_dir, ids, warnings):
                out.setdefault(row.job, []).append(row)
    return out


def best(rows: Iterable[StoredTelemetry]) -> StoredTelemetry | None:
    """The summary that says most of a job: its latest execution; of that, a complete one before a partial one,
    then the longest window, then the latest fetch."""
    def rank(r: StoredTelemetry) -> tuple[float, bool, float, float]:
        return (r.start.timestamp(), not r.partial, r.window_end.timestamp(),
                r.fetched_at.timestamp() if r.fetched_at else 0.0)
    return max(rows, key=rank, default=None)


def load_job_telemetry(store_root: Path, job_ids: Collection[str], *, days: Collection[date] | None = None,
                       cluster: str | None = None, warnings: list[str] | None = None) -> dict[str, JobTelemetry]:
    """The stored summaries of these jobs (JobIDRaw as a decimal string, a het component's own id), by id;
    a job without one is absent. A requeued job: its latest execution's (best). `days`, `cluster`, `warnings`:
    load_stored's."""
    out: dict[str, JobTelemetry] = {}
    for job, rows in load_stored(store_root, job_ids, days=days, cluster=cluster, warnings=warnings).items():
        chosen = best(rows)
        if chosen is not None:
            out[job] = chosen.telemetry
    return out


# ---- report build: the jobs Prometheus no longer has ------------------------------------------------------------


SHOWN = 10


def _utc_days(a: datetime, b: datetime) -> list[date]:
    first, last = a.astimezone(timezone.utc).date(), b.astimezone(timezone.utc).date()
    return [first + timedelta(days=k) for k in range((last - first).days + 1)]


def for_report(store_root: Path, cluster: str | None, windows: Sequence[JobWindow], cfg: TelemetryConfig,
               period_start: datetime, period_end: datetime) -> tuple[dict[object, JobTelemetry], list[str]]:
    """The stored summaries that give these job windows (those Prometheus gave no figures for) the figures a report
    over [period_start, period_end) computes (module docstring), by JobWindow.key; and the warnings: which jobs
    came from the store, which stay unknown and why, what could not be read."""
    warnings: list[str] = []
    t0, t1 = period_start.timestamp(), period_end.timestamp()
    days: set[date] = set()
    for w in windows:
        days.update(_utc_days(w.start, w.end))
    stored = load_stored(store_root, {w.job for w in windows}, days=days, cluster=cluster, warnings=warnings)
    got: dict[object, JobTelemetry] = {}
    used: list[str] = []
    refused: list[str] = []
    for w in windows:
        s, e = max(w.start.timestamp(), t0), min(w.end.timestamp(), t1)
        rows = [r for r in stored.get(w.job, ()) if r.start.timestamp() == w.start.timestamp()]
        if s >= e or not rows:
            continue
        why: str | None = None
        chosen: StoredTelemetry | None = None
        for row in sorted(rows, key=lambda r: r.fetched_at.timestamp() if r.fetched_at else 0.0, reverse=True):
            reason = mismatch(row, cfg, s, e, t0)
            if reason is None and row.gpus == w.gpus:
                chosen = row
                break
            why = why or reason or f"stored with {row.gpus} GPUs allocated, now {w.gpus}"
        if chosen is None:
            refused.append(f"{w.job} ({why})")
            continue
        got[w.key] = chosen.telemetry
        used.append(w.job)
    if used:
        warnings.append(f"telemetry: {len(used)} job window(s) that Prometheus gave no figures for (past its "
                        f"retention, or it failed) took the summary `report fetch` stored in {store_root} (the figures "
                        f"Prometheus gave then): {', '.join(used[:SHOWN])}{', ...' if len(used) > SHOWN else ''}")
    if refused:
        warnings.append(f"telemetry: {len(refused)} job window(s) that Prometheus gave no figures for have a stored "
                        f"summary that does not give this report's figures, so stay unknown: "
                        f"{'; '.join(refused[:SHOWN])}{'; ...' if len(refused) > SHOWN else ''}")
    return got, warnings


# ---- report fetch ------------------------------------------------------------------------------------------------


# The longest a window reaches back before the first fetched day (a job that ran longer is stored over the last
# MAX_BEFORE of it, its window_start saying so).
MAX_BEFORE = timedelta(days=31)


@dataclass
class _Execution:
    """One GPU job execution of the fetched days' rows (JobIDRaw, start): the window its summary is fetched for."""
    raw: int
    start: int  # epoch seconds
    end: int | None  # None: running when fetched
    gpus: int
    nodelist: str
    day: date  # the last fetched day whose rows hold it
    gpu_type: str | None = None  # AllocTRES's GPU type or mix (tells its MIG slices)


@dataclass
class TelemetryFetch:
    """`report fetch`'s telemetry: add_day collects the GPU job executions of each fetched day's rows; store_into
    fetches their summaries from Prometheus and writes them into the staged snapshot's days (module docstring).
    Never raises: what fails is a warning, and the accounting fetch goes on."""
    cfg: TelemetryConfig
    executions: dict[tuple[int, int], _Execution] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add_day(self, day: date, table: pa.Table) -> None:
        try:
            self._add_day(day, table)
        except Exception as exc:  # noqa: BLE001 (telemetry never fails the accounting fetch)
            self.warnings.append(f"telemetry: the GPU jobs of {day.isoformat()} could not be listed ({type(exc).__name__}: "
                                 f"{exc}): their summaries are not fetched")

    def _add_day(self, day: date, table: pa.Table) -> None:
        names = table.column_names
        if not all(c in names for c in ("job_id_raw", "start", "end", "gpus")) or not table.num_rows:
            return
        mask = pc.and_(pc.greater(pc.fill_null(table.column("gpus"), 0), 0), pc.is_valid(table.column("start")))
        rows = table.select([c for c in ("job_id_raw", "start", "end", "gpus", "nodelist", "gpu_type")
                             if c in names]).filter(pc.fill_null(mask, False))
        raws = rows.column("job_id_raw").to_pylist()
        starts = _seconds(rows.column("start"))
        ends = _seconds(rows.column("end"))
        gpus = rows.column("gpus").to_pylist()
        nodes = rows.column("nodelist").cast(pa.string()).to_pylist() if "nodelist" in names else [""] * len(raws)
        kinds = rows.column("gpu_type").cast(pa.string()).to_pylist() if "gpu_type" in names else [None] * len(raws)
        for raw, start, end, n, nodelist, kind in zip(raws, starts, ends, gpus, nodes, kinds, strict=True):
            if raw is None or start is None:
                continue
            # (days come in order: the later day's row is the execution's latest state, as latest_state keeps)
            self.executions[(int(raw), int(start))] = _Execution(int(raw), int(start), end, int(n), nodelist or "",
                                                                 day, kind or None)

    def store_into(self, stage: store.Stage, previous: Path | None, now: datetime) -> dict[str, Any]:
        """Fetch and write the summaries of the fetched days (`stage.days`) into `stage`; `previous`: the cluster
        directory of the snapshot being replaced (its summaries of these days are kept where Prometheus gives none
        now). Returns the fetch summary's `telemetry` part."""
        now = now.astimezone(timezone.utc).replace(microsecond=0)
        fresh: dict[tuple[int, int], StoredTelemetry] = {}
        queries = 0
        try:
            fresh, queries = self._fetch(now, stage.fetched)
        except Exception as exc:  # noqa: BLE001 (telemetry never fails the accounting fetch)
            self.warnings.append(f"telemetry: fetching the summaries failed ({type(exc).__name__}: {exc}): none "
                                 "stored this time")
        days = sorted(stage.days)
        old: dict[date, list[StoredTelemetry]] = {}
        if previous is not None:
            for day in days:
                old[day] = read_day(previous / f"day={day.isoformat()}", None, self.warnings)
        by_day, kept, written = _merge(fresh, old, {k: e.day for k, e in self.executions.items()})
        for day in days:
            rows = by_day.get(day, [])
            if not rows or day not in stage.written:
                continue
            target = stage.day_dir(day)
            try:
                write_day(target, rows)
            except Exception as exc:  # noqa: BLE001 (telemetry never fails the accounting fetch)
                for name in (JOBS_FILE, GPUS_FILE):
                    (target / name).unlink(missing_ok=True)
                self.warnings.append(f"telemetry: {target}: the day's summaries could not be written "
                                     f"({type(exc).__name__}: {exc}): none stored for that day")
                written -= {k for k in written if any(r.key == k for r in rows)}
        partial = sum(1 for k in written if fresh[k].partial)
        return {
            "source": self.cfg.prometheus_url,
            "gpu_jobs": len(self.executions),
            "summaries": len(written),
            "partial": partial,
            "kept": kept,
            "unknown": len(self.executions) - len(written),
            "queries": queries,
            "warnings": len(self.warnings),
            "warning_list": self.warnings[:50],
        }

    def _fetch(self, now: datetime, fetched_at: datetime) -> tuple[dict[tuple[int, int], StoredTelemetry], int]:
        from gpuclust.slurm import hostlist

        cfg = self.cfg
        now_s = _epoch(now)
        earliest = _epoch(datetime.combine(min(e.day for e in self.executions.values()), datetime.min.time(),
                                           timezone.utc) - MAX_BEFORE) if self.executions else now_s
        windows: list[JobWindow] = []
        for key, e in self.executions.items():
            end = e.end if e.end is not None else now_s
            if end <= e.start:
                continue
            # (a job that started longer ago, e.g. one slurmdbd never saw end: its window starts at the cap, and
            # says so; it never makes every fetch ask Prometheus for months)
            start = max(e.start, earliest)
            nodes: tuple[str, ...] = ()
            if cfg.join == "node" and e.nodelist:
                try:
                    nodes = tuple(hostlist.expand(e.nodelist))
                except Exception:  # noqa: BLE001 (a NodeList that does not parse: unknown under join = node)
                    nodes = ()
            windows.append(JobWindow(str(e.raw), _utc(start), _utc(end), e.gpus, key=key, nodes=nodes,
                                     gpu_type=e.gpu_type))
        if not windows:
            return {}, 0
        step = float(cfg.step_s)
        first = min(w.start.timestamp() for w in windows)
        origin = math.floor(first / step) * step if step > 0 else first
        last = max(w.end.timestamp() for w in windows)
        result = fetch_telemetry(cfg, windows, _utc(origin), _utc(last))
        self.warnings += result.warnings
        settings = settings_of(cfg, origin)
        out: dict[tuple[int, int], StoredTelemetry] = {}
        for w in windows:
            tel = result.jobs.get(w.key)
            if tel is None:
                continue
            execution = self.executions[w.key]  # type: ignore[index]  # (the keys are the executions')
            running = execution.end is None
            out[(execution.raw, execution.start)] = StoredTelemetry(
                job=w.job, start=_utc(execution.start), window_start=w.start, window_end=w.end,
                partial=running, gpus=w.gpus, settings=settings, telemetry=tel, source=result.source,
                fetched_at=fetched_at)
        return out, result.queries


def _merge(fresh: dict[tuple[int, int], StoredTelemetry], old: dict[date, list[StoredTelemetry]],
           day_of: dict[tuple[int, int], date]) -> tuple[dict[date, list[StoredTelemetry]], int, set[tuple[int, int]]]:
    """The rows each fetched day holds after the fetch: each fresh summary under its execution's day, unless a
    complete stored one of the same window and settings covered more GPU time (then that one, there); every stored
    summary of an execution without a fresh one, where it was. Returns them, how many stored ones were kept, and the
    fresh ones written."""
    by_day: dict[date, list[StoredTelemetry]] = {}
    kept = 0
    written: set[tuple[int, int]] = set()
    old_of: dict[tuple[int, int], list[StoredTelemetry]] = {}
    for rows in old.values():
        for row in rows:
            old_of.setdefault(row.key, []).append(row)
    for key, row in fresh.items():
        chosen = row
        for prior in old_of.get(key, ()):
            if (not prior.partial and not row.partial and prior.window_start == row.window_start
                    and prior.window_end == row.window_end and prior.settings == row.settings and prior.gpus == row.gpus
                    and prior.telemetry.covered_gpu_s > row.telemetry.covered_gpu_s):
                chosen = prior
        by_day.setdefault(day_of[key], []).append(chosen)
        if chosen is row:
            written.add(key)
        else:
            kept += 1
    for day, rows in old.items():
        for row in rows:
            if row.key not in fresh:
                by_day.setdefault(day, []).append(row)
                kept += 1
    return by_day, kept, written
