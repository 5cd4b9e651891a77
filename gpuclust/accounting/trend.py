"""Daily trend over the stored history: GPU-hours, cost per completed run and p90 queue wait per day.

Admins compare days, not one snapshot. The store keeps every fetched UTC day (store.py), so the last 30/90 days
before a report's end are read back and split into the site time zone's calendar days, with the report's own
rules: a run (metrics.assign_runs) counts on the day its last attempt ended, with all its attempts' GPU-hours
and cost; a queue wait counts on the day its attempt started; p90 by linear interpolation (as pandas'
quantile and the report's tables).
"""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuclust.accounting import metrics
from gpuclust.config import SiteConfig

TREND_DAYS = (30, 90)
DEFINITION = ("Daily trend (site time zone), from the stored history: a run counts on the day its last attempt "
              "ended (runs, completed, GPU-hours, cost, cost per completed run); p90 wait is over the attempts "
              "started that day.")
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
    starts = day_starts(end, days, config.timezone)
    bounds = np.array([d.timestamp() for d in starts], dtype=np.float64)
    n_days = len(starts) - 1
    runs_n: np.ndarray = np.zeros(n_days, dtype=np.int64)
    completed: np.ndarray = np.zeros(n_days, dtype=np.int64)
    gpu_hours: np.ndarray = np.zeros(n_days)
    cost: np.ndarray = np.zeros(n_days)
    p90: np.ndarray = np.full(n_days, np.nan)
    started_n: np.ndarray = np.zeros(n_days, dtype=np.int64)
    if table.num_rows:
        att = metrics.attempts(table, config)
        run = metrics.assign_runs(att, float(config.retry_window_s))
        att.price()
        runs = metrics.runs_of(att, run)
        rday = np.searchsorted(bounds, runs.end, side="right") - 1
        ok = (rday >= 0) & (rday < n_days)
        rday = rday[ok]
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
    return pd.DataFrame({
        "day": [d.date().isoformat() for d in starts[:-1]],
        "runs": runs_n.astype(np.int64),
        "completed": completed,
        "gpu_hours": np.round(gpu_hours, 9),
        "cost": np.round(cost, 9),
        "cost_per_completed_run": np.round(per_run, 9),
        "started_attempts": started_n.astype(np.int64),
        "p90_wait_s": p90,
    }, columns=list(COLUMNS))


def as_records(frame: pd.DataFrame) -> list[dict[str, object]]:
    return metrics.records(frame)
