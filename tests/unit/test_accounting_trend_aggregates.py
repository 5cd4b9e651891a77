"""The daily trend from the store's per-day aggregates (trend.from_store, issue 31 item 5) is the trend from the
rows: runs assigned over the whole stored history (trend.daily of every stored row), day by day, in the site
time zone, with retries across midnight and across the end of a cached week, and a run of retries that spans
longer than the lookback. The aggregates are a cache: computed once, reused while their day files and the config
are the same, computed again when a day is re-fetched; a store without them, or one that cannot be written, reads
the same figures."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import trend
from gpuclust.accounting.history import store, storeread
from gpuclust.config import load_config

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
TIMES = ("submit", "eligible", "start", "end")
MONDAY = datetime(2026, 10, 5, tzinfo=timezone.utc)  # (a Monday)
COPIES = 40


def _config(tmp: Path, tz: str):
    conf = tmp / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp / "state"))
                    .replace("timezone = UTC", f"timezone = {tz}"))
    return load_config(str(conf))


def _recorded() -> pa.Table:
    """The recorded lab corpus (a failure then its resubmission, a requeue, a het job, an array)."""
    return pipeline.read_input(str(DATA / "lab-parsable.txt"), "\x1f|\x1e").table


def _placed(table: pa.Table, at: datetime, scale: float, id_offset: int, tag: str) -> pa.Table:
    """`table` with its times stretched by `scale` around its first Submit and moved to `at`, and its job ids
    moved by `id_offset`: another copy of the same jobs (seconds of the recording become `scale` seconds)."""
    base = pc.min(table.column("submit")).as_py().timestamp()
    out = table
    for name in TIMES:
        col = table.column(name)
        secs = pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False).astype(np.float64)
        moved = (at.timestamp() + (secs - base) * scale).astype(np.int64)
        out = out.set_column(out.column_names.index(name), name,
                             pa.array(moved, mask=np.asarray(col.is_null())).cast(col.type))
    for name in ("job_id_raw", "job_base"):
        out = out.set_column(out.column_names.index(name), name, pc.add(out.column(name), id_offset))
    out = out.set_column(out.column_names.index("job_id"), "job_id",
                         pa.array([f"{tag}{v}" for v in out.column("job_id").to_pylist()]))
    elapsed = pc.multiply(pc.cast(out.column("elapsed_s"), pa.float64()), scale)
    return out.set_column(out.column_names.index("elapsed_s"), "elapsed_s", pc.cast(pc.round(elapsed), pa.int64()))


def _chain(template: pa.Table, first_end: datetime, attempts: int, id_base: int) -> pa.Table:
    """A run of `attempts` resubmissions (each failed, resubmitted 20 h after it ended, within the 24 h retry
    window) of the recorded failed job, the last one completed: one run spanning `attempts` days."""
    failed = template.filter(pc.equal(template.column("job_id_raw"), 4))
    done = template.filter(pc.equal(template.column("job_id_raw"), 14))
    parts, end = [], first_end
    for i in range(attempts):
        row = failed if i < attempts - 1 else done
        start = end - timedelta(hours=2) if i == 0 else end + timedelta(hours=20, minutes=30)
        end = start + timedelta(hours=2)
        recorded_start = row.column("submit")[0].as_py()
        parts.append(_placed(row, start, 1.0, id_base + i - int(row.column("job_id_raw")[0].as_py()), "c")
                     .set_column(row.column_names.index("end"), "end", pa.array([end], row.schema.field("end").type))
                     .set_column(row.column_names.index("elapsed_s"), "elapsed_s", pa.array([7200]))
                     .set_column(row.column_names.index("job_name"), "job_name",
                                 pa.array(["long-chain"]).dictionary_encode()))
        assert recorded_start is not None
    return pa.concat_tables(parts, promote_options="permissive")


def _store(tmp: Path, config) -> tuple[Path, list[date]]:
    """A store of COPIES copies of the recorded corpus, one every 25 hours (stretched to 6 hours: some across
    midnight, some across the end of a week), and a 12-day run of retries; every row in each UTC day file its
    Start..End touches, as sacct's windows list it."""
    recorded = _recorded()
    pieces = [_placed(recorded, MONDAY + timedelta(hours=25 * k), 3600.0, 1000 * (k + 1), f"{k}-")
              for k in range(COPIES)]
    pieces.append(_chain(recorded, MONDAY + timedelta(days=9, hours=6), 12, 900000))
    table = pa.concat_tables([p.cast(pieces[0].schema) for p in pieces])
    start = pc.cast(table.column("start"), pa.int64()).to_numpy()
    end = pc.cast(table.column("end"), pa.int64()).to_numpy()
    first, last = MONDAY.date(), datetime.fromtimestamp(int(end.max()), timezone.utc).date()
    days: dict[date, pa.Table] = {}
    day = first
    while day <= last:
        lo = datetime.combine(day, time(), timezone.utc).timestamp()
        on = (start < lo + 86400) & (end >= lo)
        days[day] = table.filter(pa.array(on))
        day += timedelta(days=1)
    root = store.store_dir(config.state_dir)
    store.replace_days(root, days, cluster=config.cluster_name)
    return root, sorted(days)


def _from_rows(root: Path, config, end: datetime, n: int, days: list[date]) -> pd.DataFrame:
    """The reference: runs assigned over every stored row at once."""
    return trend.daily(storeread.load_for_report(root, days, config.cluster_name), config, end, n)


@pytest.mark.parametrize("tz", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_trend_from_aggregates_equals_trend_from_rows(tmp_path, tz):
    config = _config(tmp_path, tz)
    root, days = _store(tmp_path, config)
    end = datetime.combine(days[-1] + timedelta(days=2), time(), timezone.utc)
    lookback = pipeline.lookback_of(config)
    n = (days[-1] - days[0]).days + 4
    expected = _from_rows(root, config, end, n, days)
    assert expected["runs"].sum() > COPIES * 8  # (the recorded corpus holds 11 runs)
    got = trend.from_store(root, config, end, n, lookback)
    pd.testing.assert_frame_equal(got, expected)
    # The 12-day run of retries counts once, on the day its last attempt ended, with all 12 attempts' GPU-hours.
    chain_end = (MONDAY + timedelta(days=9, hours=6) + 11 * timedelta(hours=22, minutes=30)).astimezone(
        trend.ZoneInfo(tz)).date().isoformat()
    assert got.loc[got["day"] == chain_end, "gpu_hours"].item() >= 12 * 2 * 2  # (2 GPUs, 2 h each)
    # Cached now: a second read computes nothing and gives the same frame.
    with store.reading(root):
        again = trend.Aggregates(root, store.current_snapshot(root), config, lookback)
        pd.testing.assert_frame_equal(again.days(date.fromisoformat(got["day"][0]),
                                                 date.fromisoformat(got["day"].iloc[-1])), expected)
    assert again.computed == 0 and again.cached > 0


def test_refetched_day_recomputes_only_the_weeks_that_read_it(tmp_path):
    config = _config(tmp_path, "UTC")
    root, days = _store(tmp_path, config)
    lookback = pipeline.lookback_of(config)
    end = datetime.combine(days[-1] + timedelta(days=1), time(), timezone.utc)
    n = (days[-1] - days[0]).days + 1
    trend.from_store(root, config, end, n, lookback)
    # Re-fetch one day: without the first copy's rows that ended on it (they are gone from the store).
    day = days[3]
    snap = store.current_snapshot(root)
    assert snap is not None
    table = store.read_day_table(store.day_file(snap, day, config.cluster_name))
    store.replace_days(root, {day: table.slice(0, 3).select(store.SCHEMA.names)}, cluster=config.cluster_name)
    # The weeks whose rows include that day: its own, the next (the lookback), and the one of the 12-day run's end
    # (read further back). The others are current.
    assert trend.refresh(root, config, lookback) == 3
    with store.reading(root):
        agg = trend.Aggregates(root, store.current_snapshot(root), config, lookback)
        got = agg.days(days[0], days[-1])
    assert agg.computed == 0  # (refresh cached them)
    expected = _from_rows(root, config, end, n, days)
    pd.testing.assert_frame_equal(got, expected)
    assert got.loc[got["day"] == day.isoformat(), "runs"].item() < 11  # (fewer rows that day: fewer runs)


def test_fetch_writes_the_aggregates_and_a_store_without_them_reads_the_same(tmp_path, monkeypatch):
    config = _config(tmp_path, "Europe/Berlin")
    root, days = _store(tmp_path, config)
    lookback = pipeline.lookback_of(config)
    end = datetime.combine(days[-1], time(), timezone.utc)
    # A store that cannot be written (read-only, a fetch holding the lock): the figures, just not cached.
    monkeypatch.setattr(store, "write_aggregate", lambda *a, **k: False)
    uncached = trend.from_store(root, config, end, 30, lookback)
    snap = store.current_snapshot(root)
    assert snap is not None and not (store.days_dir(snap, config.cluster_name) / store.AGGREGATES_DIR).exists()
    monkeypatch.undo()
    pd.testing.assert_frame_equal(trend.from_store(root, config, end, 30, lookback), uncached)
    cached = sorted((store.days_dir(snap, config.cluster_name) / store.AGGREGATES_DIR).iterdir())
    assert cached and all(p.name.startswith("week=") for p in cached)
    doc = json.loads(cached[0].read_text())
    assert doc["version"] == trend.AGGREGATE_VERSION and doc["columns"] == list(trend.COLUMNS)
    # Another config (prices): computed again, not read from the cache.
    cheaper = _config(tmp_path, "Europe/Berlin")
    object.__setattr__(cheaper, "gpu_type_prices", {"h100": 1.0})
    with store.reading(root):
        agg = trend.Aggregates(root, snap, cheaper, lookback)
        agg.week(date.fromisoformat(doc["week"]))
    assert agg.computed == 1
    # A fetch links the cached weeks into its new snapshot (hard links, like the days it does not touch).
    store.replace_days(root, {days[-1] + timedelta(days=30): store.SCHEMA.empty_table()}, cluster=config.cluster_name)
    new = store.current_snapshot(root)
    assert new != snap and new is not None
    assert sorted(p.name for p in (store.days_dir(new, config.cluster_name) / store.AGGREGATES_DIR).iterdir()) == \
        [p.name for p in cached]


def test_a_fetch_in_progress_means_no_cache(tmp_path):
    import fcntl

    config = _config(tmp_path, "UTC")
    root, days = _store(tmp_path, config)
    snap = store.current_snapshot(root)
    assert snap is not None
    with open(root / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert not store.write_aggregate(root, snap, "week=2026-10-05", {"x": 1}, config.cluster_name)
    assert store.write_aggregate(root, snap, "week=2026-10-05", {"x": 1}, config.cluster_name)
    assert store.read_aggregate(snap, "week=2026-10-05", config.cluster_name) == {"x": 1}


def test_a_damaged_day_leaves_its_weeks_uncached_and_the_fetch_done(tmp_path):
    config = _config(tmp_path, "UTC")
    root, days = _store(tmp_path, config)
    snap = store.current_snapshot(root)
    assert snap is not None
    path = store.day_file(snap, days[10], config.cluster_name)
    path.write_bytes(path.read_bytes()[:100])  # (truncated)
    lookback = pipeline.lookback_of(config)
    assert trend.refresh(root, config, lookback) >= 1  # (the weeks that do not read that day)
    with pytest.raises(store.StoreError, match=days[10].isoformat()):
        trend.from_store(root, config, datetime.combine(days[-1], time(), timezone.utc), 30, lookback)


def test_report_fetch_writes_the_weeks_it_changes(tmp_path):
    from gpuclust.accounting.history.fetch import sacct_args
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.slurm.replay import ReplaySlurmClient

    config = _config(tmp_path, "UTC")
    client = ReplaySlurmClient()
    text = (DATA / "lab-parsable.txt").read_text()
    day = date(2026, 12, 2)
    client.add("sacct", sacct_args(day), text)
    client.add("sacct", ["--version"], "slurm 24.11.1\n")
    start = datetime.combine(day, time(), timezone.utc)
    pipeline.fetch(client, config, Period(start, start + timedelta(days=1)))
    root = store.store_dir(config.state_dir)
    snap = store.current_snapshot(root)
    assert snap is not None
    monday = trend.week_of(day)
    doc = store.read_aggregate(snap, f"week={monday.isoformat()}", config.cluster_name)
    assert doc is not None and doc["week"] == monday.isoformat()
    row = next(r for r in doc["days"] if r[0] == day.isoformat())
    expected = _from_rows(root, config, start + timedelta(days=1), 1, [day])
    assert row[1] == expected["runs"].item() > 0  # (the recorded corpus's runs, on the day they ended)
    # The report reads it, and computes nothing.
    with store.reading(root):
        agg = trend.Aggregates(root, snap, config, pipeline.lookback_of(config))
        agg.days(day, day)
    assert (agg.computed, agg.cached) == (0, 1)
