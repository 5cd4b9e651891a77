"""The store's SQL figures in GPU-equivalents (issue 44): `report fetch` stores each row's share of one physical GPU
(columns alloc_gpu_equivalents, gpu_share_unknown; store layout 5) as the report computes it, and the README's SQL
(gpuclust.accounting.history.store_sql), run by DuckDB, gives the report's figures on a store with MIG slices,
shards, MPS and whole GPUs: the hand-made dump of tests/data/gpushare/ and the lab's 22.05 recording
(tests/data/gpushare/lab-22.05/). A day written before layout 5 reads its whole GPUs from `gpus` and a slice, shard
or MPS as unknown, never as a whole GPU; the fetch stores the node inventory with or without [costs]."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import events as events_mod
from gpuclust.accounting.history import store, store_sql
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER
from gpuclust.config import parse_config
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.store_duckdb import in_window, readme_session

duckdb = pytest.importorskip("duckdb")  # (the `test` extra installs it)

DATA = Path(__file__).resolve().parents[1] / "data" / "gpushare"
LAB = DATA / "lab-22.05"
# The recordings' day (2026-12-07) moved to a day in the past: the economics' window ends when the events were
# fetched (the clock), and the SQL figures are compared with it.
RECORDED, DAY, NEXT = "2026-12-07", date(2026, 11, 30), date(2026, 12, 1)
PERIOD = Period(datetime(2026, 11, 30, tzinfo=timezone.utc), datetime(2026, 12, 1, tzinfo=timezone.utc))
# What the fixtures fetch: DAY and NEXT, a day without jobs (so that a test can make DAY a day of layout 4 while the
# store keeps a day of layout 5: an engine reads the new columns from it, union_by_name).
FETCHED = Period(PERIOD.start, datetime(2026, 12, 2, tzinfo=timezone.utc))
NODES = ("scontrol", *events_mod.NODES_ARGS)
EVENTS = ("sacctmgr", *events_mod.day_event_args(DAY))
# The hand-made dump by hand (tests/unit/test_gpu_equivalents_report.py): GPU-equivalent hours per partition and
# account; 107 (5g.50gb: no such profile, partition mig) and 108 (shards on node9, no layout) are unknown.
BY_PARTITION = {"gpu": 2.0, "mig": 1 / 7 + 3 / 7 * 0.5 + 2 / 7 * 1.5, "shared": 0.5 + 0.5, "sharedcfg": 1.0}
BY_ACCOUNT = {"ml": 2 + 1 / 7 + 3 / 14 + 0.5 + 1.0, "phys": 3 / 7 + 0.5}


def _window(sql: str) -> str:
    """The README's SQL with its window (the two literals of `params`) set to DAY."""
    return in_window(sql, "2026-11-30 00:00:00", "2026-12-01 00:00:00")


def sql_figures(current: Path) -> dict[str, dict]:
    con = readme_session(current)
    by_account: dict[str, float] = {}
    unknown_by_account: dict[str, int] = {}
    for _, account, _, hours, unknown in con.sql(_window(store_sql.ALLOCATED_BY_ACCOUNT_DAY)).fetchall():
        if hours is not None:
            by_account[account] = by_account.get(account, 0.0) + hours
        unknown_by_account[account] = unknown_by_account.get(account, 0) + unknown
    rows = con.sql(_window(store_sql.ALLOCATED_BY_PARTITION)).fetchall()
    return {"by_account": by_account, "unknown_by_account": unknown_by_account,
            "by_partition": {p: h for _, p, h, _ in rows}, "unknown_by_partition": {p: u for _, p, _, u in rows}}


def _moved(text: str) -> str:
    return text.replace(RECORDED, DAY.isoformat())


def _fetch_text(path: Path) -> str:
    """A `|` recording as `report fetch` asks sacct for it (its delimiter; no value here holds a `|`), on DAY."""
    return _moved(path.read_text(encoding="utf-8")).replace("|", FETCH_DELIMITER)


def _config(tmp: Path, text: str) -> object:
    return parse_config(text.replace("/tmp/gpuclust-gpushare-unused", str(tmp))
                        .replace("/tmp/gpuclust-gpushare-lab-unused", str(tmp)))


def _client(sacct: str, nodes: str | None, events: str | None) -> ReplaySlurmClient:
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(DAY), sacct)
    client.add("sacct", sacct_args(NEXT), sacct.split("\n")[0] + "\n")
    if nodes is not None:
        client.add(*NODES[:1], NODES[1:], nodes)
    if events is not None:
        client.add(*EVENTS[:1], EVENTS[1:], events)
        client.add("sacctmgr", events_mod.day_event_args(NEXT), events)
    return client


def _fetched(tmp: Path, site: str, *, events: str | None = None, sacct: Path = DATA / "sacct.txt",
             nodes: Path = DATA / "nodes.txt") -> tuple[Path, dict, ReplaySlurmClient, pipeline.FetchSummary, object]:
    config = _config(tmp, site)
    client = _client(_fetch_text(sacct), nodes.read_text(), _moved(events if events is not None
                                                                   else (DATA / "events.txt").read_text()))
    summary = pipeline.fetch(client, config, FETCHED)  # type: ignore[arg-type]
    report, _ = pipeline.build(config, PERIOD, trend_days=0)  # type: ignore[arg-type]
    return store.store_dir(config.state_dir) / "current", report.data, client, summary, config  # type: ignore[attr-defined]


def _stored(current: Path) -> dict[int, tuple[float | None, str | None]]:
    table = pq.read_table(next(current.rglob(f"day={DAY.isoformat()}/part.parquet")))
    return {r["job_id_raw"]: (r["alloc_gpu_equivalents"], r["gpu_share_unknown"])
            for r in table.select(["job_id_raw", "alloc_gpu_equivalents", "gpu_share_unknown"]).to_pylist()}


def _assert_sql_is_the_report(sql: dict, report: dict) -> None:
    econ = report["economics"]
    parts = {r["partition"]: r["allocated_gpu_hours"] for r in econ["by_partition"]}
    for name, hours in sql["by_partition"].items():
        assert (hours or 0.0) == pytest.approx(parts.get(name, 0.0), abs=1e-6), name
    assert sum(h or 0.0 for h in sql["by_partition"].values()) == pytest.approx(econ["total"]["allocated_gpu_hours"],
                                                                                 abs=1e-6)
    ended = {r["account"]: r["gpu_hours"] for r in report["runs"]["by_account"]}  # (every attempt here ended)
    assert sql["by_account"] == {a: pytest.approx(h, abs=1e-6) for a, h in ended.items() if h}
    unknown = sum(u["count"] for u in report["input"].get("unknown", []) if u["missing"] == "GPU share")
    assert sum(sql["unknown_by_partition"].values()) == unknown


# ---- a sliced store: the SQL gives the report's GPU-equivalent figures ------------------------------------------

def test_sql_on_a_sliced_store_gives_the_report_figures(tmp_path):
    current, report, _, summary, _ = _fetched(tmp_path, (DATA / "site.conf").read_text())
    sql = sql_figures(current)
    _assert_sql_is_the_report(sql, report)
    # and the figures by hand: slices by profile, shards by node6's layout or sharedcfg's shards_per_gpu, MPS per 100
    assert sql["by_partition"] == {**{p: pytest.approx(h, abs=1e-6) for p, h in BY_PARTITION.items()}, "other": None}
    assert sql["unknown_by_partition"] == {"gpu": 0, "mig": 1, "shared": 0, "sharedcfg": 0, "other": 1}
    assert sql["by_account"] == {a: pytest.approx(h, abs=1e-6) for a, h in BY_ACCOUNT.items()}
    assert sql["unknown_by_account"] == {"ml": 2, "phys": 0}
    assert report["totals"]["gpu_hours"] == pytest.approx(sum(BY_PARTITION.values()), abs=1e-6)
    # Each row as stored: its share, or why it is unknown (never a whole GPU)
    assert _stored(current) == {101: (2.0, None), 102: (pytest.approx(1 / 7), None),
                                103: (pytest.approx(3 / 7), None), 104: (pytest.approx(2 / 7), None),
                                105: (0.5, None), 106: (0.5, None), 107: (None, "unknown_mig_profile"),
                                108: (None, "shard_layout_unknown"), 109: (1.0, None)}
    assert summary.gpu_shares is not None and summary.gpu_shares["unknown_rows"] == 2
    assert {w["code"] for w in summary.gpu_shares["warnings"]} == {"unknown_mig_profile", "shard_layout_unknown"}


def test_a_layout_changed_in_the_fetched_days_is_unknown_in_the_store_as_in_the_report(tmp_path):
    events = (DATA / "events.txt").read_text() + (
        "Node|node6|2026-12-07T10:20:00|2026-12-07T10:40:00|DRAIN|root(0)|billing=8,cpu=8,gres/gpu:h100=1,"
        "gres/gpu=1,mem=16000M|re-cut\n")
    current, report, _, _, _ = _fetched(tmp_path, (DATA / "site.conf").read_text(), events=events)
    sql = sql_figures(current)
    _assert_sql_is_the_report(sql, report)
    stored = _stored(current)
    assert stored[105] == (None, "node_layout_changed") and stored[106] == (None, "node_layout_changed")
    assert sql["unknown_by_partition"]["shared"] == 2 and sql["by_partition"]["shared"] is None


def test_sql_on_the_lab_recording_gives_the_report_figures(tmp_path):
    """Real 22.05 rows (steps included: the fetch drops them) of a whole GPU, a 3g.40gb and two 1g.10gb slices on
    node5 and 4 shards on node6 (2 GPUs / 16 shards), 3 s each."""
    site = (Path(__file__).parent / "test_gpu_equivalents_lab_recording.py").read_text().split('SITE = """')[1] \
        .split('"""')[0]
    current, report, _, _, _ = _fetched(tmp_path, site, sacct=LAB / "sacct.txt", nodes=LAB / "nodes.txt",
                                        events=(LAB / "events.txt").read_text())
    sql = sql_figures(current)
    _assert_sql_is_the_report(sql, report)
    h = 3 / 3600
    assert sql["by_partition"] == {"gpu": pytest.approx(h), "mig": pytest.approx(5 / 7 * h),
                                   "shared": pytest.approx(4 / 8 * h)}
    assert set(sql["unknown_by_partition"].values()) == {0}


# ---- whole GPUs: today's figures, exactly ------------------------------------------------------------------------

# The figure queries before GPU-equivalents (store layout 4), verbatim: on whole GPUs the new ones give exactly
# their figures.
BEFORE_BY_ACCOUNT_DAY = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
),
days AS (
  SELECT DISTINCT day, CAST(day AS TIMESTAMP) AS day_start,
         CAST(day AS TIMESTAMP) + INTERVAL '1' DAY AS day_end
  FROM store, params
  WHERE CAST(day AS TIMESTAMP) >= params.since AND CAST(day AS TIMESTAMP) < params.until
),
spans AS (
  SELECT l.cluster, l.account, d.day, l.gpus,
         greatest(l.start, d.day_start) AS span_start,
         least(coalesce(l."end", p.until), d.day_end, p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  JOIN days d ON l.start < d.day_end AND coalesce(l."end", p.until) > d.day_start
  WHERE l.gpus > 0
)
SELECT cluster, account, day,
       sum(gpus * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours
FROM spans
WHERE span_end > span_start
GROUP BY cluster, account, day
ORDER BY cluster, account, day"""
BEFORE_BY_PARTITION = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
),
spans AS (
  SELECT l.cluster, l.partition, l.gpus,
         greatest(l.start, p.since) AS span_start,
         least(coalesce(l."end", p.until), p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  WHERE l.gpus > 0 AND l.start < p.until AND coalesce(l."end", p.until) > p.since
)
SELECT cluster, partition,
       sum(gpus * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours
FROM spans
GROUP BY cluster, partition
ORDER BY cluster, partition"""


def _whole_gpu_store(tmp: Path) -> Path:
    """The lab's recorded whole-GPU day (tests/data/accounting), fetched for 2026-12-02 and 2026-12-03."""
    accounting = Path(__file__).resolve().parents[1] / "data" / "accounting"
    config = parse_config((accounting / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp)))
    text = (accounting / "lab-parsable.txt").read_text()
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(date(2026, 12, 2)), text)
    client.add("sacct", sacct_args(date(2026, 12, 3)), text.split("\n")[0] + "\n")
    client.add("scontrol", list(events_mod.NODES_ARGS), "NodeName=n1 Gres=gpu:h100:4 State=IDLE Partitions=gpu\n")
    pipeline.fetch(client, config, Period(datetime(2026, 12, 2, tzinfo=timezone.utc),
                                          datetime(2026, 12, 4, tzinfo=timezone.utc)))
    return store.store_dir(config.state_dir) / "current"


def test_a_whole_gpu_store_gives_exactly_the_figures_before(tmp_path):
    current = _whole_gpu_store(tmp_path)
    con = readme_session(current)
    assert con.execute("SELECT count(*) FROM latest WHERE alloc_gpu_equivalents IS NULL OR gpu_equivalents <> gpus").fetchall() == [(0,)]
    now = con.sql(store_sql.ALLOCATED_BY_ACCOUNT_DAY).fetchall()
    assert now and [r[:4] for r in now] == con.sql(BEFORE_BY_ACCOUNT_DAY).fetchall()  # (==: exactly)
    assert {r[4] for r in now} == {0}
    now = con.sql(store_sql.ALLOCATED_BY_PARTITION).fetchall()
    assert now and [r[:3] for r in now] == con.sql(BEFORE_BY_PARTITION).fetchall()
    # A day of layout 4 (no share columns) gives the same figures too
    _as_layout_4(current, ("2026-12-02",))
    con = readme_session(current)
    assert con.execute("SELECT count(*) FROM store WHERE alloc_gpu_equivalents IS NOT NULL").fetchall() == [(0,)]
    assert [r[:4] for r in con.sql(store_sql.ALLOCATED_BY_ACCOUNT_DAY).fetchall()] == \
        con.sql(BEFORE_BY_ACCOUNT_DAY).fetchall()


# ---- a day written before layout 5 ------------------------------------------------------------------------------

def _as_layout_4(current: Path, days: tuple[str, ...] | None = None) -> None:
    """Rewrite the day files (those of `days`) as layout 4 wrote them: without the share columns, version key 4."""
    for path in current.rglob("part.parquet"):
        if days is not None and path.parent.name[4:] not in days:
            continue
        table = pq.read_table(path)
        table = table.drop_columns(["alloc_gpu_equivalents", "gpu_share_unknown"])
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), store.VERSION_KEY: b"4"})
        path.unlink()  # (a hard link shared with an older snapshot: a new file)
        pq.write_table(table, path)


def test_a_day_of_layout_4_reads_whole_gpus_and_never_a_slice_as_one(tmp_path):
    current, report, _, _, config = _fetched(tmp_path, (DATA / "site.conf").read_text())
    _as_layout_4(current, (DAY.isoformat(),))
    # gpuclust reads it as it is: the same report (the report computes the shares from the rows)
    again, _ = pipeline.build(config, PERIOD, trend_days=0)  # type: ignore[arg-type]
    assert again.data["totals"] == report["totals"]
    assert again.data["economics"]["by_partition"] == report["economics"]["by_partition"]
    # SQL: whole GPUs from `gpus`; a row with a MIG profile, shards or MPS is unknown (counted), never one GPU
    sql = sql_figures(current)
    assert sql["by_partition"] == {"gpu": pytest.approx(2.0), "mig": None, "shared": None, "sharedcfg": None,
                                   "other": None}
    assert sql["unknown_by_partition"] == {"gpu": 0, "mig": 4, "shared": 2, "sharedcfg": 1, "other": 1}


def test_a_store_no_layout_5_fetch_wrote_into_names_the_column(tmp_path):
    """Only a store that no gpuclust of layout 5 fetched into lacks the columns in every day: the engine names the
    column (never a figure without it); the next fetch of any day gives it."""
    current, _, _, _, _ = _fetched(tmp_path, (DATA / "site.conf").read_text())
    _as_layout_4(current)
    with pytest.raises(duckdb.BinderException, match="alloc_gpu_equivalents"):
        readme_session(current)


def test_a_store_of_both_layouts_reads_each_day_by_its_own(tmp_path):
    config = _config(tmp_path, (DATA / "site.conf").read_text())
    sacct = _fetch_text(DATA / "sacct.txt")
    header, *rows = sacct.split("\n")
    next_day = "\n".join([header, *(r.replace(DAY.isoformat(), NEXT.isoformat()) for r in rows if r)]) + "\n"
    client = _client(sacct, (DATA / "nodes.txt").read_text(), _moved((DATA / "events.txt").read_text()))
    client.add("sacct", sacct_args(NEXT), next_day)  # (the same jobs a day later: other executions)
    pipeline.fetch(client, config, FETCHED)  # type: ignore[arg-type]
    current = store.store_dir(config.state_dir) / "current"  # type: ignore[attr-defined]
    _as_layout_4(current, (DAY.isoformat(),))
    con = readme_session(current)
    rows = con.sql(in_window(store_sql.ALLOCATED_BY_PARTITION, "2026-11-30 00:00:00", "2026-12-02 00:00:00")).fetchall()
    got = {p: (h, u) for _, p, h, u in rows}
    # mig: day 1 (layout 4) unknown, 4 rows; day 2 (layout 5) its shares, 107 unknown
    assert got["mig"] == (pytest.approx(BY_PARTITION["mig"]), 4 + 1)
    assert got["gpu"] == (pytest.approx(2 * 2.0), 0)


# ---- the fetch stores the node inventory with or without [costs] ------------------------------------------------

NO_COSTS = (DATA / "site.conf").read_text().split("[costs]")[0]


def test_without_costs_the_fetch_stores_the_inventory_and_the_shares_are_known(tmp_path):
    current, report, client, summary, config = _fetched(tmp_path, NO_COSTS)
    assert not config.economics.enabled  # type: ignore[attr-defined]
    assert client.calls.count(NODES) == 1 and client.calls.count(EVENTS) == 1
    day = events_mod.day_dir(config.state_dir, DAY)  # type: ignore[attr-defined]
    assert (day / events_mod.NODES_FILE).read_text() == (DATA / "nodes.txt").read_text()
    assert (day / events_mod.EVENTS_FILE).read_text() == _moved((DATA / "events.txt").read_text())  # (the check's)
    assert not (day / events_mod.SREPORT_FILE).exists()
    assert _stored(current)[105] == (0.5, None)  # node6's shards: 2 GPUs / 16
    by = {r["partition"]: r["gpu_hours"] for r in report["runs"]["by_partition"]}
    assert by["shared"] == pytest.approx(1.0)  # the report reads the stored inventory: the shards' share is known
    sql = sql_figures(current)
    assert sql["by_partition"]["shared"] == pytest.approx(by["shared"])
    assert not [p for p in summary.problems if "inventory" in str(p)]


def test_a_whole_gpu_fetch_without_costs_reads_the_inventory_once_and_no_events(tmp_path):
    config = _config(tmp_path, NO_COSTS)
    client = _client(_fetch_text(DATA / "sacct.txt").split("\n")[0] + "\n" + "\n".join(
        r for r in _fetch_text(DATA / "sacct.txt").split("\n")[1:] if r.startswith("101")) + "\n",
        "NodeName=node1 Gres=gpu:h100:4 State=IDLE Partitions=gpu\n", None)
    summary = pipeline.fetch(client, config, FETCHED)  # type: ignore[arg-type]
    assert client.calls == [NODES, ("sacct", *sacct_args(DAY)), ("sacct", *sacct_args(NEXT))]
    assert summary.gpu_shares is None and "gpu_shares" not in summary.as_dict()
    day = events_mod.day_dir(config.state_dir, DAY)  # type: ignore[attr-defined]
    assert (day / events_mod.NODES_FILE).exists() and not (day / events_mod.EVENTS_FILE).exists()


def test_an_inventory_that_cannot_be_read_is_named_and_shards_are_unknown(tmp_path):
    config = _config(tmp_path, NO_COSTS)
    client = _client(_fetch_text(DATA / "sacct.txt"), None, _moved((DATA / "events.txt").read_text()))
    client.fail("scontrol", list(events_mod.NODES_ARGS), 1, "slurm_load_node error: Unable to contact slurm controller")
    summary = pipeline.fetch(client, config, FETCHED)  # type: ignore[arg-type]
    assert any("node inventory (scontrol show node -o) not read" in str(p) for p in summary.problems)
    current = store.store_dir(config.state_dir) / "current"  # type: ignore[attr-defined]
    stored = _stored(current)
    assert stored[105] == (None, "shard_layout_unknown") and stored[109] == (1.0, None)  # (sharedcfg: configured)
    assert not (events_mod.day_dir(config.state_dir, DAY) / events_mod.NODES_FILE).exists()  # type: ignore[attr-defined]


def test_stored_columns_and_version():
    assert store.LAYOUT_VERSION >= 5  # (5 added alloc_gpu_equivalents and gpu_share_unknown)
    table = pa.table({"alloc_gpu_equivalents": pa.array([0.5, None, -1.0])})
    with pytest.raises(store.StoreDamaged, match="negative alloc_gpu_equivalents"):
        store.check_day_values(Path("/s/cluster=c/day=2026-12-07/part.parquet"), table)
