"""A partitioned build (rows in buckets by user, figures merged: gpuclust.accounting.figures.partitioned) gives the
one-table build's figures. The oracle is the one-table build over the same store (itself checked against real
recordings and hand figures elsewhere); the rows are the lab's recorded jobs (requeues, arrays, het jobs,
failures, resubmissions) plus the cross-day cases the partitioning must keep whole: a run whose retries span
two months, a retry across midnight, an execution seen by several daily windows."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import partitioned
from gpuclust.accounting.figures.jobfilter import JobFilter
from gpuclust.accounting.figures.metrics.waits import KnownValues, ValueCounts, wait_table
from gpuclust.accounting.history import store, storeread
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import parse_config
from gpuclust.errors import GpuclustError
from tests.reportcompare import assert_same, figures
from tests.unit.test_accounting_storeread import D1, D4, fill_store, rows

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
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
    return {day: with_usage(pa.concat_tables(parts)) for day, parts in out.items()}


def with_usage(table: pa.Table) -> pa.Table:
    """Usage TRES figures (as the readers store them) on every other row: a busy job, an idle one, and rows
    without any (unknown), so that the GPU use has covered, busy, held-idle and unknown jobs to merge."""
    n = table.num_rows
    seconds = [float(v or 0) for v in table.column("elapsed_s").to_pylist()]
    gpus = [float(v or 0) for v in table.column("gpus").to_pylist()]
    util = [None if i % 3 == 2 else (0.95 if i % 3 == 0 else 0.03) for i in range(n)]
    covered = [None if u is None else s * g for u, s, g in zip(util, seconds, gpus, strict=True)]
    values = {
        "gpu_util_gpu_s": covered,
        "gpu_busy_gpu_s": [None if c is None else c * u for c, u in zip(covered, util, strict=True)],
        "gpu_util_max_pct": [None if u is None else 100 * u for u in util],
        "energy_j": [None if u is None else 3.6e6 * (1 + i) for i, u in enumerate(util)],
        "gpu_util_rule": [None if u is None else "summed" for u in util],
    }
    for name, column in values.items():
        field = table.schema.field(name)
        table = table.set_column(table.schema.get_field_index(name), field, pa.array(column, field.type))
    return table


def filled(state_dir: str) -> Path:
    fill_store(state_dir)
    root = store.store_dir(state_dir)
    store.replace_days(root, chain_days(), fetched_at=datetime(2026, 12, 5, tzinfo=timezone.utc))
    return root


SPANS = [
    (date(2026, 9, 1), date(2026, 12, 6)),  # everything: the two-month run and all of the lab
    (date(2026, 11, 1), date(2026, 11, 25)),  # the chain's end and the midnight retry
    (D1, D4 + timedelta(days=1)),
    (date(2020, 1, 1), date(2020, 1, 2)),  # no stored row: every figure empty alike
]


@pytest.mark.parametrize("span", SPANS)
@pytest.mark.parametrize("rows_per_bucket", [1, 7, 100_000])
def test_partitioned_build_gives_the_one_table_figures(tmp_path, config, span, rows_per_bucket):
    filled(str(tmp_path))
    period = Period(*(datetime.combine(d, datetime.min.time(), timezone.utc) for d in span))
    one, _ = pipeline.build(config, period, trend_days=0)
    split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=-1, rows_per_bucket=rows_per_bucket)
    assert_same(figures(one), figures(split))
    assert split.data["input"]["partitioned"]["buckets"] >= 1
    assert "partitioned" not in one.data["input"]
    assert sorted(one.tables) == sorted([*split.tables, "gpu_use_jobs"])
    for name, table in split.tables.items():
        assert list(one.tables[name].columns) == list(table.columns), name


def test_the_two_month_run_is_one_run_whatever_the_buckets(tmp_path, config):
    filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    report, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=1)
    team = {r["project"]: r for r in report.data["runs"]["by_label"]["project"]}
    # (the chain's comment names project p1: one run of CHAIN_DAYS + 1 attempts, completed)
    assert (team["p1"]["runs"], team["p1"]["attempts"], team["p1"]["completed"]) == (1, CHAIN_DAYS + 1, 1)


def test_partitioned_gpu_use_equals_the_one_table_gpu_use(tmp_path):
    text = (DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path))
    config = parse_config(text + "\n[telemetry]\nweigh_useful = yes\n")
    filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    one, _ = pipeline.build(config, period, trend_days=0)
    split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=2)
    use = one.data["gpu_use"]
    assert use["sources"]["usage_tres"] > 0 and use["sources"]["none"] > 0 and use["worst_held_idle"]
    assert use["totals"]["held_idle_gpu_hours"] > 0 and use["totals"]["energy_kwh"] > 0
    assert_same(use, split.data["gpu_use"])
    assert_same(one.data["economics"], split.data["economics"])
    assert "utilisation_weighted" in one.data["economics"]["total"]


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
    assert "buckets by user" in notes and "gpu_use_jobs" in notes
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


def test_users_are_packed_into_buckets_by_their_rows(tmp_path):
    """Light users go whole to the emptiest bucket, largest first: no bucket holds more than rows_per_bucket
    plus one user's rows (a hash of a few users would leave some buckets twice as full)."""
    root = filled(str(tmp_path))
    days = store.stored_days(root)
    files = storeread.day_files(root, days, None)
    rows_by_user: dict[str, int] = {}
    for user in store.load(root, days).column("user").to_pylist():
        rows_by_user[user] = rows_by_user.get(user, 0) + 1
    per_bucket = max(rows_by_user.values()) * 2 + 1  # (every user light)
    plan = partitioned._survey(files, per_bucket)
    assert plan.heavy == 0 and not plan.heavy_users and set(plan.bucket_of_user) == set(rows_by_user)
    fill = [0] * plan.light
    for user, n in rows_by_user.items():
        fill[plan.bucket_of_user[user]] += n
    assert max(fill) <= per_bucket + max(rows_by_user.values())
    assert plan.bucket_of_user == partitioned._survey(files, per_bucket).bucket_of_user  # (the same every run)


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


ECON = Path(__file__).resolve().parents[1] / "data" / "economics"


def test_partitioned_unit_economics_equal_the_one_table_ones(tmp_path):
    """The economics lab recording (real Slurm 22.05: node events, a drain while a job ran, the inventory,
    pending reasons; tests/data/economics/README.md) stored as `report fetch` stores it."""
    from gpuclust.accounting.history import events
    from gpuclust.accounting.ingest.schema import SCHEMA

    text = (ECON / "site.conf").read_text()
    text = "\n".join(f"state_dir = {tmp_path}" if line.startswith("state_dir") else line
                     for line in text.splitlines())
    config = parse_config(text)
    day = date(2026, 12, 3)
    table = pipeline.read_input(str(ECON / "sacct.txt")).table.cast(SCHEMA)
    # One user ran the lab's jobs: give each job a user of its own (the resubmission 7 keeps failed job 3's), so
    # that the jobs fall in several buckets.
    users = [f"u{raw}" if raw not in (3, 7) else "u3" for raw in table.column("job_id_raw").to_pylist()]
    table = table.set_column(table.schema.get_field_index("user"), "user", pa.array(users, pa.string()))
    store.replace_days(store.store_dir(str(tmp_path)), {day: table},
                       fetched_at=datetime(2026, 12, 3, 10, 1, tzinfo=timezone.utc))
    target = events.day_dir(str(tmp_path), day)
    target.mkdir(parents=True)
    for name, source in ((events.EVENTS_FILE, "events.txt"), (events.NODES_FILE, "nodes.txt"),
                         (events.REASONS_FILE, "reasons.txt")):
        (target / name).write_text((ECON / source).read_text())
    (target / events.META_FILE).write_text('{"fetched_at": "2026-12-03T10:01:00+00:00"}')
    period = Period(datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc),
                    datetime(2026, 12, 3, 9, 20, tzinfo=timezone.utc))
    one, _ = pipeline.build(config, period, trend_days=0)
    for rows_per_bucket in (1, 4):
        split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=-1, rows_per_bucket=rows_per_bucket)
        assert split.data["input"]["partitioned"]["buckets"] > 1
        assert_same(one.data["economics"], split.data["economics"])
        assert_same(figures(one), figures(split))
    econ = one.data["economics"]
    # (what makes this recording a test of the merge: unavailable GPU-hours net of a job held on a draining
    # node, and per-partition terms)
    assert econ["capacity"] == "known" and econ["total"]["terms"]["unavailable"]["gpu_hours"] > 0
    assert len(econ["by_partition"]) == 2
    assert sum(row["jobs"] for row in econ["pending_reason_wait"]) > 0


def test_a_heavy_user_is_split_by_resubmission_group_and_a_group_stays_whole():
    """A pipeline account with most of the rows: its rows spread over the heavy buckets by (user, account, job
    name, array task); every row of one group lands in one bucket, and light users go whole by user."""
    n = 3000
    names = [f"sweep-{i % 300}" for i in range(n)]
    day = pa.table({
        "user": pa.array(["pipeline"] * n + ["alice", "bob"] * 50).dictionary_encode(),
        "account": pa.array(["ml"] * (n + 100)).dictionary_encode(),
        "job_name": pa.array(names + ["a"] * 100).dictionary_encode(),
        "array_task": pa.array([i % 3 if i % 2 else None for i in range(n + 100)], pa.int64()),
    })
    plan = partitioned.Plan(light=2, heavy=6, heavy_users=frozenset({"pipeline"}), pending=np.zeros(0, np.int64),
                            bucket_of_user={"alice": 1, "bob": 0})
    bucket = partitioned._route(day, plan)
    heavy = bucket[:n]
    assert set(heavy.tolist()) == set(range(2, 8))  # (300 names x 3 tasks: every heavy bucket gets some)
    assert np.bincount(heavy).max() < n / 3
    groups: dict[tuple[str, Any], set[int]] = {}
    for name, task, b in zip(names, day.column("array_task").to_pylist()[:n], heavy.tolist(), strict=True):
        groups.setdefault((name, task), set()).add(b)
    assert all(len(b) == 1 for b in groups.values())
    light = bucket[n:]
    assert set(light[0::2].tolist()) == {1} and set(light[1::2].tolist()) == {0}


def test_report_show_jobs_rows_of_a_partitioned_build_are_refused_by_name(tmp_path, config):
    from gpuclust.accounting.output import show
    from gpuclust.errors import InputError

    filled(str(tmp_path))
    period = Period(datetime(2026, 9, 1, tzinfo=timezone.utc), datetime(2026, 12, 6, tzinfo=timezone.utc))
    report, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=5)
    with pytest.raises(InputError, match="shorter period"):
        show.row_records(report, "jobs")
    assert show.row_records(report, "findings")


def test_the_cli_builds_partitioned_above_the_threshold_and_writes_every_output(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from gpuclust.cli.main import cli

    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path)))
    filled(str(tmp_path))
    args = ["--config", str(conf), "report", "build", "--since", "2026-09-01", "--until", "2026-12-06"]
    one = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "one")])
    monkeypatch.setattr(partitioned, "ROWS_IN_MEMORY", 10)
    monkeypatch.setattr(partitioned, "ROWS_PER_BUCKET", 6)
    split = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "split")])
    assert one.exit_code == 0 and split.exit_code == 0, (one.output, split.output)
    written = {p.name for p in (tmp_path / "one").iterdir()}
    assert {p.name for p in (tmp_path / "split").iterdir()} == written - {"gpu_use_jobs.csv"}
    assert {"report.json", "report.html", "totals.csv", "runs_by_account.csv"} <= written
    data = {name: json.loads((tmp_path / name / "report.json").read_text()) for name in ("one", "split")}
    assert data["split"]["input"]["partitioned"]["rows_per_bucket"] == 6
    assert_same(data["one"]["totals"], data["split"]["totals"])
    assert_same(data["one"]["runs"], data["split"]["runs"])
