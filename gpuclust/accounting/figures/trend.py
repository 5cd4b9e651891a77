"""Daily trend over the stored history: GPU-hours, cost per completed run and p90 queue wait per day.

Admins compare days, not one snapshot. The store keeps every fetched UTC day (store.py), so the last 30/90 days
before a report's end are read back and split into the site time zone's calendar days, with the report's own
rules: a run (metrics.assign_runs) counts on the day its last attempt ended, with all its attempts' GPU-hours
and cost; a queue wait counts on the day its attempt started; p90 by linear interpolation (as pandas'
quantile and the report's tables).

Per-day aggregates (issue 31 item 5): the figures of each week (Monday to Sunday, site time zone) are computed once
from the rows and cached in the store (store.AGGREGATES_DIR, written by `report fetch` for the weeks its days
change, else by the first report that needs them); a report then reads 13 small files for a 90-day trend, not 90
days of rows again. What is exact per day and what needs the other days:

* started attempts and p90 wait: over the attempts started that day, a figure of that day alone (p90 is per day:
  no merging of quantiles across days is needed);
* runs, completed runs, GPU-hours and cost: a run counts on the day its last attempt ended, with all its
  attempts, so a week's figures need the runs' earlier attempts (before the week) and the attempts that may
  still continue them (after it). A week is computed from the rows of the week plus `lookback` (retry window + 7
  days, as the report reads) on either side, with the runs assigned over all of them (metrics.assign_runs): a
  retry that spans midnight, or the end of a week, is one run, counted once, on the day of its last attempt. A
  run whose first attempt was submitted within the retry window of the rows read may continue a run before
  them (one that spans weeks or months): the week is then read again from `lookback` earlier, until no such run
  is left or the store's first day is reached. So a week's figures are those of the runs assigned over the whole
  history, as long as no attempt ran (pending and running) longer than the lookback after its run's previous
  attempt ended (the report's own assumption: LOOKBACK_EXTRA).

A cached week names the day files it was read from (store.file_identity) and the config figures it depends on
(time zone, retry window, lookback, prices) and the code that computes them; when any differs (a re-fetched or
newly fetched day, another config, another gpuclust) it is computed again. So the trend from the aggregates is the trend from the rows (tests:
test_accounting_trend_aggregates.py).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import math
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa

import gpuclust
from gpuclust.accounting.figures import catalog, metrics
from gpuclust.accounting.history import store, storeread
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import SiteConfig
from gpuclust.errors import GpuclustError

TREND_DAYS = (30, 90)
DEFINITION = catalog.definitions(catalog.TREND)["trend"]
COLUMNS = ("day", "runs", "completed", "gpu_hours", "cost", "cost_per_completed_run", "started_attempts", "p90_wait_s")


def day_starts(end: datetime, days: int, tz: str) -> list[datetime]:
    """The midnights (site time zone) of the `days` calendar days before `end`, and the one after the last."""
    zone = ZoneInfo(tz)
    local_end = end.astimezone(zone)
    last = local_end.date() if local_end.time() != time() else local_end.date() - timedelta(days=1)
    first = last - timedelta(days=days - 1)
    return [datetime.combine(first + timedelta(days=i), time(), zone) for i in range(days + 1)]


def daily(table: pa.Table, config: SiteConfig, end: datetime, days: int = max(TREND_DAYS)) -> pd.DataFrame:
    """One row per calendar day (site time zone) of the `days` days before `end`; figures of days without data
    are 0 (counts, GPU-hours, cost) or missing (cost per completed run, p90 wait)."""
    return _daily(table, config, day_starts(end, days, config.timezone))[0]


def _daily(table: pa.Table, config: SiteConfig, starts: list[datetime], equivalents: np.ndarray | None = None
           ) -> tuple[pd.DataFrame, float]:
    """daily's frame for the days `starts` bound, and the earliest Submit (else Start) of the first attempt of a
    run counted there (inf: none): a run that may continue one before the rows read (week_figures).
    `equivalents`: each row's GPU-equivalents (figures.shares; None: whole GPUs)."""
    earliest = math.inf
    bounds = np.array([d.timestamp() for d in starts], dtype=np.float64)
    n_days = len(starts) - 1
    runs_n: np.ndarray = np.zeros(n_days, dtype=np.int64)
    completed: np.ndarray = np.zeros(n_days, dtype=np.int64)
    gpu_hours: np.ndarray = np.zeros(n_days)
    cost: np.ndarray = np.zeros(n_days)
    p90: np.ndarray = np.full(n_days, np.nan)
    started_n: np.ndarray = np.zeros(n_days, dtype=np.int64)
    if table.num_rows:
        att = metrics.attempts(table, config, equivalents=equivalents)
        run = metrics.assign_runs(att, float(config.retry_window_s))
        att.price()
        runs = metrics.runs_of(att, run)
        rday = np.searchsorted(bounds, runs.end, side="right") - 1
        ok = (rday >= 0) & (rday < n_days)
        rday = rday[ok]
        if ok.any():
            first = runs.first[ok]
            earliest = float(np.nanmin(np.fmin(att.submit[first], att.start[first])))
        runs_n = np.bincount(rday, minlength=n_days)
        completed = np.bincount(rday, weights=runs.completed[ok].astype(np.float64), minlength=n_days).astype(np.int64)
        gpu_hours = np.bincount(rday, weights=runs.gpu_hours[ok], minlength=n_days)
        cost = np.bincount(rday, weights=np.nan_to_num(runs.cost[ok]), minlength=n_days)
        aday = np.searchsorted(bounds, att.start, side="right") - 1
        started = np.flatnonzero((aday >= 0) & (aday < n_days))
        if len(started):
            waits = att.wait_s(started)
            known = ~np.isnan(waits)
            frame = pd.DataFrame({"day": aday[started][known], "wait": waits[known]})
            started_n = np.bincount(aday[started], minlength=n_days)
            quantiles = frame.groupby("day")["wait"].quantile(0.9)
            p90[quantiles.index.to_numpy(dtype=np.int64)] = np.round(quantiles.to_numpy(dtype=np.float64), 3)
    per_run = np.where(completed > 0, cost / np.maximum(completed, 1), np.nan)
    frame = pd.DataFrame({
        "day": [d.date().isoformat() for d in starts[:-1]],
        "runs": runs_n.astype(np.int64),
        "completed": completed,
        "gpu_hours": np.round(gpu_hours, 9),
        "cost": np.round(cost, 9),
        "cost_per_completed_run": np.round(per_run, 9),
        "started_attempts": started_n.astype(np.int64),
        "p90_wait_s": p90,
    }, columns=list(COLUMNS))
    return frame, earliest


def as_records(frame: pd.DataFrame) -> list[dict[str, object]]:
    return metrics.records(frame)


# ---- per-day aggregates: the trend from the store without reading every row again ------------------------------

AGGREGATE_VERSION = 1  # of the cached week's content: another version is computed again
WEEK_DAYS = 7


def week_of(day: date) -> date:
    """The Monday of `day`'s week: the weeks the aggregates are cached by."""
    return day - timedelta(days=day.weekday())


def _config_key(config: SiteConfig, lookback: timedelta) -> dict[str, Any]:
    """What of the site config the figures depend on (the time zone's days, runs, cost)."""
    return {
        "timezone": config.timezone, "retry_window_s": config.retry_window_s, "lookback_s": lookback.total_seconds(),
        "gpu_type_prices": sorted(config.gpu_type_prices.items()),
        "partitions": sorted((name, p.gpu_type, p.price_per_gpu_hour) for name, p in config.partitions.items()),
        # (GPU-equivalents: only where configured, so that a site without them keeps its cached weeks; the node
        # inventory the shares read is fetched with the day files, whose identities the key holds)
        **({"gpu_shares": [sorted((k, str(v)) for k, v in config.gpu_type_shares.items()),
                           sorted(config.gpu_type_price_units.items()),
                           sorted((n, p.shards_per_gpu) for n, p in config.partitions.items() if p.shards_per_gpu)]}
           if config.gpu_type_shares or config.gpu_type_price_units
           or any(p.shards_per_gpu for p in config.partitions.values()) else {}),
    }


@functools.cache
def _code() -> str:
    """The figures' code (this module, the attempts and the run rules): a change to them, even within one gpuclust
    version, is a new cache key."""
    digest = hashlib.sha256()
    for name in (__name__, "gpuclust.accounting.figures.metrics.attempts", "gpuclust.accounting.figures.metrics.runs",
                 "gpuclust.accounting.figures.shares", "gpuclust.slurm.gpushare"):
        source = importlib.import_module(name).__file__
        digest.update(Path(source).read_bytes() if source else name.encode())
    return digest.hexdigest()


def _key(config: SiteConfig, lookback: timedelta, week: date, sources: list[list[Any]]) -> str:
    doc = {"version": AGGREGATE_VERSION, "gpuclust": gpuclust.__version__, "code": _code(), "week": week.isoformat(),
           "config": _config_key(config, lookback), "sources": sources}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _to_json(frame: pd.DataFrame) -> list[list[Any]]:
    return [[None if isinstance(v, float) and math.isnan(v) else v for v in row]
            for row in frame.astype(object).itertuples(index=False, name=None)]


def _from_json(rows: list[list[Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for name in ("runs", "completed", "started_attempts"):
        frame[name] = frame[name].astype(np.int64)
    for name in ("gpu_hours", "cost", "cost_per_completed_run", "p90_wait_s"):
        frame[name] = frame[name].astype(np.float64)  # (None: NaN, as daily gives it)
    return frame


class Aggregates:
    """The per-day figures of one snapshot's cluster, week by week: from the cache where it is current, else from
    the rows (then cached). `computed` / `cached` count the weeks of each kind (for tests and benchmarks)."""

    def __init__(self, root: Path, snapshot: Path, config: SiteConfig, lookback: timedelta, *, cache: bool = True):
        self.root, self.snapshot, self.config, self.lookback, self.cache = root, snapshot, config, lookback, cache
        self.cluster = config.cluster_name
        self.zone = ZoneInfo(config.timezone)
        days = store.snapshot_days(snapshot, self.cluster)
        self.first_day = days[0] if days else None
        self.computed = 0
        self.cached = 0

    def _sources(self, days: list[date]) -> list[list[Any]]:
        return [[d.isoformat(), store.file_identity(store.day_file(self.snapshot, d, self.cluster))] for d in days]

    def week(self, monday: date) -> pd.DataFrame:
        """The figures of the 7 days from `monday` (site time zone)."""
        name = f"week={monday.isoformat()}"
        starts = [datetime.combine(monday + timedelta(days=i), time(), self.zone) for i in range(WEEK_DAYS + 1)]
        doc = store.read_aggregate(self.snapshot, name, self.cluster)
        if doc and doc.get("version") == AGGREGATE_VERSION and isinstance(doc.get("since"), str):
            try:
                since = datetime.fromisoformat(doc["since"])
                days = Period(since, starts[-1] + self.lookback).utc_days()
                if doc.get("key") == _key(self.config, self.lookback, monday, self._sources(days)):
                    self.cached += 1
                    return _from_json(doc["days"])
            except (ValueError, TypeError, KeyError):
                pass  # (damaged: computed again)
        frame, since, days = self._compute(starts)
        self.computed += 1
        if self.cache:
            store.write_aggregate(self.root, self.snapshot, name, {
                "version": AGGREGATE_VERSION, "week": monday.isoformat(), "since": since.isoformat(),
                "key": _key(self.config, self.lookback, monday, self._sources(days)),
                "columns": list(COLUMNS), "days": _to_json(frame)}, self.cluster)
        return frame

    def _compute(self, starts: list[datetime]) -> tuple[pd.DataFrame, datetime, list[date]]:
        back = self.lookback
        while True:
            since = (starts[0] - back).astimezone(timezone.utc)
            days = Period(since, starts[-1] + self.lookback).utc_days()
            # (the rows start at the first UTC day read: a run may continue one submitted before that)
            read_from = datetime.combine(days[0], time(), timezone.utc)
            table = storeread.load_for_report(self.root, days, self.cluster, snapshot=self.snapshot)
            frame, earliest = _daily(table, self.config, starts, self._equivalents(table, days))
            del table
            truncated = earliest <= read_from.timestamp() + self.config.retry_window_s
            if not truncated or self.first_day is None or days[0] <= self.first_day:
                return frame, since, days
            back += self.lookback  # a run may go on before the rows read: read further back

    def _equivalents(self, table: pa.Table, days: list[date]) -> np.ndarray | None:
        """The rows' GPU-equivalents as the report reads them (figures.shares.PeriodShares): the latest stored
        node inventory of `days` and their node events."""
        from gpuclust.accounting.figures.findings import stored_nodes_text
        from gpuclust.accounting.figures.shares import PeriodShares, inventory
        from gpuclust.accounting.history import sources

        period = Period(datetime.combine(days[0], time(), timezone.utc),
                        datetime.combine(days[-1] + timedelta(days=1), time(), timezone.utc))

        def events() -> Any:
            try:
                return sources.stored_sources(self.config, period)[0]
            except GpuclustError:
                return None

        nodes = inventory(stored_nodes_text(self.config.state_dir, days))
        return PeriodShares(self.config, nodes, events).equivalents(table)

    def days(self, first: date, last: date) -> pd.DataFrame:
        """The figures of the days `first`..`last` (site time zone), week by week."""
        frames = [self.week(monday) for monday in _mondays(first, last)]
        frame = pd.concat(frames, ignore_index=True)
        keep = (frame["day"] >= first.isoformat()) & (frame["day"] <= last.isoformat())
        return frame[keep].reset_index(drop=True)


def _mondays(first: date, last: date) -> Iterable[date]:
    monday = week_of(first)
    while monday <= last:
        yield monday
        monday += timedelta(days=WEEK_DAYS)


def from_store(root: Path, config: SiteConfig, end: datetime, days: int, lookback: timedelta) -> pd.DataFrame:
    """daily() of the `days` days before `end`, from the per-day aggregates (computed and cached where missing or
    outdated) instead of every row: the same figures, as long as runs hold to the lookback (module docstring)."""
    starts = day_starts(end, days, config.timezone)
    with store.reading(root):
        snapshot = store.current_snapshot(root)
        if snapshot is None:
            return daily(pa.table({}), config, end, days)
        return Aggregates(root, snapshot, config, lookback).days(starts[0].date(), starts[-2].date())


def add_to_report(report: metrics.Report, root: Path, config: SiteConfig, days: int, lookback: timedelta) -> None:
    """The daily trend of the `days` days before the report's end, from the store's per-day aggregates
    (from_store: computed and cached where missing; report.json `trend`, the trend_daily table, the HTML
    trend view)."""
    frame = from_store(root, config, report.period.end, days, lookback)
    report.tables["trend_daily"] = frame
    report.data["trend"] = {"days": days, "daily": as_records(frame)}
    report.data["definitions"] = {**report.data["definitions"], "trend": DEFINITION}


def refresh(root: Path, config: SiteConfig, lookback: timedelta, horizon_days: int = max(TREND_DAYS)) -> int:
    """After a fetch: make the cached weeks of the `horizon_days` before the store's last day current (those
    whose day files changed are computed again; older weeks are computed when a report first needs them).
    Returns the number of weeks computed. A damaged day leaves its weeks uncached (the fetch has done its work; the
    report that reads the day names it and its re-fetch)."""
    with store.reading(root):
        snapshot = store.current_snapshot(root)
        if snapshot is None:
            return 0
        stored = store.snapshot_days(snapshot, config.cluster_name)
        if not stored:
            return 0
        agg = Aggregates(root, snapshot, config, lookback)
        # (from the week of the first stored day, in the site time zone: a week before it has no run of its own)
        first = datetime.combine(stored[0], time(), timezone.utc).astimezone(ZoneInfo(config.timezone)).date()
        for monday in _mondays(max(first, stored[-1] - timedelta(days=horizon_days)), stored[-1]):
            try:
                agg.week(monday)  # (a current one: its key checked, nothing read)
            except store.StoreError:
                continue
        return agg.computed
