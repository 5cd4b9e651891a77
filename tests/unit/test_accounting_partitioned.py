"""A partitioned build (rows in buckets by user, figures merged: gpuclust.accounting.partitioned) gives the
one-table build's figures. The oracle is the one-table build over the same store (itself checked against real
recordings and hand figures elsewhere); the rows are the lab's recorded jobs (requeues, arrays, het jobs,
failures, resubmissions) plus the cross-day cases the partitioning must keep whole: a run whose retries span
two months, a retry across midnight, an execution seen by several daily windows."""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpuclust.accounting import partitioned, pipeline, store
from gpuclust.accounting.jobfilter import JobFilter
from gpuclust.accounting.metrics.waits import KnownValues, ValueCounts, wait_table
from gpuclust.accounting.period import Period
from gpuclust.config import parse_config
from gpuclust.errors import GpuclustError
from tests.unit.test_accounting_storeread import D1, D4, fill_store, rows

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
FIGURES = ("totals", "sizing", "runs", "queue_wait", "hold", "top_failures")
CHAIN_DAYS = 60


@pytest.fixture
def config(tmp_path: Path):
    text = (DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path))
    return parse_config(text)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def chain_days() -> dict[date, pa.Table]:
    """User `chain`: one job a day that fails and is resubmitted 20 h later (within the 24 h retry window), for
    CHAIN_DAYS days, then completes: one run over two months. User `night`: a job that fails at 23:50 and is
    resubmitted at 00:20 the next day, completing then (a retry across midnight), and another job that runs
    across midnight (RUNNING in the first day's window, COMPLETED in the next)."""
    out: dict[date, list[pa.Table]] = {}
    first = datetime(2026, 10, 1, 2, 0, tzinfo=timezone.utc)
    for k in range(CHAIN_DAYS + 1):
        submit = first + timedelta(hours=20 * k)
        start, end = submit + timedelta(minutes=5 + k % 7), submit + timedelta(hours=2)
        done = k == CHAIN_DAYS
        out.setdefault(end.date(), []).append(rows({
            "JobID": str(800000 + k), "JobIDRaw": str(800000 + k), "JobName": "long", "User": "chain",
            "Account": "physics", "Comment": "project=p1", "State": "COMPLETED" if done else "FAILED",
            "ExitCode": "0:0" if done else "1:0", "Submit": _iso(submit), "Eligible": _iso(submit),
            "Start": _iso(start), "End": _iso(end), "Elapsed": "01:55:00" if k % 7 == 0 else "01:50:00",
            "AllocTRES": f"gres/gpu={1 + k % 4},gres/gpu:h100={1 + k % 4}"}))
    night = datetime(2026, 11, 20, 23, 0, tzinfo=timezone.utc)
    out.setdefault(night.date(), []).append(rows(
        {"JobID": "810001", "JobIDRaw": "810001", "User": "night", "JobName": "n", "State": "FAILED",
         "ExitCode": "2:0", "Submit": _iso(night), "Eligible": _iso(night), "Start": _iso(night),
         "End": _iso(night + timedelta(minutes=50)), "Elapsed": "00:50:00"},
        {"JobID": "810003", "JobIDRaw": "810003", "User": "night", "JobName": "x", "State": "RUNNING",
         "Submit": _iso(night), "Eligible": _iso(night), "Start": _iso(night), "End": "Unknown"}))
    out.setdefault(night.date() + timedelta(days=1), []).append(rows(
        {"JobID": "810002", "JobIDRaw": "810002", "User": "night", "JobName": "n",
         "Submit": _iso(night + timedelta(minutes=80)), "Eligible": _iso(night + timedelta(minutes=80)),
         "Start": _iso(night + timedelta(minutes=85)), "End": _iso(night + timedelta(hours=3)),
         "Elapsed": "01:35:00"},
        {"JobID": "810003", "JobIDRaw": "810003", "User": "night", "JobName": "x", "Submit": _iso(night),
         "Eligible": _iso(night), "Start": _iso(night), "End": _iso(night + timedelta(hours=5)),
         "Elapsed": "05:00:00"}))
    return {day: pa.concat_tables(parts) for day, parts in out.items()}


def filled(state_dir: str) -> Path:
    fill_store(state_dir)
    root = store.store_dir(state_dir)
    store.replace_days(root, chain_days(), fetched_at=datetime(2026, 12, 5, tzinfo=timezone.utc))
    return root


def figures(report: Any) -> dict[str, Any]:
    data = report.data
    out = {name: data[name] for name in FIGURES}
    out["input"] = {k: data["input"].get(k) for k in ("rows", "attempts_in_period", "left_out", "unknown",
                                                      "filtered_out", "rejected_rows", "days_read")}
    return out


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Equal, floats to 1e-9 relative (sums are added in another order)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, (path, a, b)


SPANS = [
    (date(2026, 9, 1), date(2026, 12, 6)),  # everything: the two-month run and all of the lab
    (date(2026, 11, 1), date(2026, 11, 25)),  # the chain's end and the midnight retry
    (D1, D4 + timedelta(days=1)),
]


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("rows_per_bucket", [1, 7, 100_000])
def test_partitioned_build_gives_the_one_table_figures(tmp_path, config, span, rows_per_bucket):
    filled(str(tmp_path))
    period = Period(*(datetime.combine(d, datetime.min.time(), timezone.utc) for d in span))
    one, _ = pipeline.build(config, period, trend_days=0)
    split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=rows_per_bucket)
    assert one.data["totals"]["attempts"]
    assert_same(figures(one), figures(split))
    assert split.data["input"]["partitioned"]["buckets"] >= 1
    assert "partitioned" not in one.data["input"]
    for name in ("top_failures", "runs_by_account", "runs_by_label_team", "queue_wait_by_partition", "totals"):
        assert list(one.tables[name].columns) == list(split.tables[name].columns), name


def test_the_two_month_run_is_one_run_whatever_the_buckets(tmp_path, config):
    filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    report, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=1)
    team = {r["project"]: r for r in report.data["runs"]["by_label"]["project"]}
    # (the chain's comment names project p1: one run of CHAIN_DAYS + 1 attempts, completed)
    assert (team["p1"]["runs"], team["p1"]["attempts"], team["p1"]["completed"]) == (1, CHAIN_DAYS + 1, 1)


def test_a_user_filter_gives_the_one_table_figures(tmp_path, config):
    filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    only = JobFilter(users=("chain", "night"))
    one, _ = pipeline.build(config, period, trend_days=0, only=only)
    split, _ = pipeline.build(config, period, trend_days=0, only=only, rows_in_memory=0, rows_per_bucket=3)
    assert_same(figures(one), figures(split))
    assert split.data["input"]["filtered_out"] == one.data["input"]["filtered_out"] > 0


def test_the_report_says_it_was_partitioned_and_what_it_left_out(tmp_path, config):
    root = filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    report, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=5)
    notes = " ".join(report.data["input"]["notes"])
    assert "buckets by user" in notes and "unit economics" in notes and "GPU use" in notes
    info = report.data["input"]["partitioned"]
    assert info["rows_per_bucket"] == 5 and info["buckets"] > 1 and info["largest_bucket_rows"] >= 5
    # The scratch directory beside the store is gone.
    assert not [p for p in root.parent.iterdir() if p.name.startswith(partitioned.SCRATCH_PREFIX)]


def test_a_damaged_day_is_named_and_the_scratch_is_removed(tmp_path, config):
    root = filled(str(tmp_path))
    path = store.day_file(store.current_snapshot(root), date(2026, 11, 21))
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    with pytest.raises(GpuclustError, match="2026-11-21"):
        pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=5)
    assert not [p for p in root.parent.iterdir() if p.name.startswith(partitioned.SCRATCH_PREFIX)]


def test_the_bucket_of_a_user_is_the_same_in_every_run():
    users = pa.array(["alice", "bob", None, "ünïcode", "alice"])
    first = partitioned.bucket_of_users(users, 7)
    assert first.tolist() == partitioned.bucket_of_users(users, 7).tolist()
    assert first[0] == first[4] and first[2] == 0 and ((first >= 0) & (first < 7)).all()


@pytest.mark.parametrize("seed", range(40))
def test_wait_quantiles_from_merged_value_counts_equal_the_one_table_quantiles(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(0, 400)), int(rng.integers(1, 6))
    labels = [f"p{i}" for i in range(k)]
    group = rng.integers(0, k, n)
    values = rng.integers(0, 90, n).astype(float) + (rng.random(n) if seed % 3 == 0 else 0.0)
    one = wait_table(labels, group, KnownValues.of(values), "partition")
    cuts = np.sort(rng.integers(0, n + 1, 3))
    parts = [ValueCounts.of(labels, group[a:b], values[a:b]) for a, b in zip(np.r_[0, cuts], np.r_[cuts, n],
                                                                                 strict=True)]
    merged = ValueCounts.merge(parts).table("partition")
    assert one.reset_index(drop=True).to_dict("list") == merged.reset_index(drop=True).to_dict("list")
