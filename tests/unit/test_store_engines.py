"""The store is read by other engines: pyarrow.dataset and DuckDB read `report fetch`'s files with Hive
partitioning and get the report's figures; the README's SQL (gpuclust.accounting.history.store_sql) is run as it is."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import store, store_sql
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, STORE_SCHEMA
from gpuclust.config import parse_config
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.store_duckdb import readme_session

duckdb = pytest.importorskip("duckdb")  # (the `test` extra installs it)

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
REPO = Path(__file__).resolve().parents[2]
D2, D3 = date(2026, 12, 2), date(2026, 12, 3)
# The window the SQL's `params` name: the report's period.
PERIOD = Period(datetime(2026, 12, 2, tzinfo=timezone.utc), datetime(2026, 12, 4, tzinfo=timezone.utc))
# A job still running at the window's end (1 hour before it, 2 GPUs): allocated counts it up to the end.
RUNNING = {"JobID": "900001", "JobIDRaw": "900001", "JobName": "long", "User": "root", "Account": "physics",
           "Partition": "gpu", "QOS": "normal", "State": "RUNNING", "ExitCode": "0:0",
           "Submit": "2026-12-03T23:00:00", "Eligible": "2026-12-03T23:00:00", "Start": "2026-12-03T23:00:00",
           "End": "Unknown", "Elapsed": "00:30:00", "AllocTRES": "billing=2,cpu=2,gres/gpu=2,node=1",
           "NNodes": "1", "NodeList": "n1", "Comment": "", "WCKey": "", "Reason": "None"}


@pytest.fixture
def lab_store(tmp_path: Path):
    """The store `report fetch` writes from the lab's recorded sacct output (tests/data/accounting) for
    2026-12-02, and for 2026-12-03 job 1 again (a job seen by two windows: kept once) and a running job."""
    config = parse_config((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path)))
    text = (DATA / "lab-parsable.txt").read_text()
    header, *lines = text.split("\n")
    job1 = [line for line in lines if line.startswith("1" + FETCH_DELIMITER)]
    running = FETCH_DELIMITER.join(RUNNING.get(f, "") for f in header.split(FETCH_DELIMITER))  # (its fields)
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(D2), text)
    client.add("sacct", sacct_args(D3), "\n".join([header, *job1, running]) + "\n")
    client.add("sacct", ["--version"], "slurm 22.05.8\n")
    pipeline.fetch(client, config, PERIOD)
    report, _ = pipeline.build(config, PERIOD, trend_days=0)
    return store.store_dir(config.state_dir) / "current", report.data


def test_the_layout_is_hive_partitioned_with_a_schema_file_and_a_version_in_each_file(lab_store):
    current, _ = lab_store
    files = sorted(str(p.relative_to(current)) for p in current.rglob("*.parquet"))
    assert files == ["cluster=acct/day=2026-12-02/part.parquet", "cluster=acct/day=2026-12-03/part.parquet"]
    doc = json.loads((current / store.SCHEMA_FILE).read_text())
    assert doc["layout_version"] == store.LAYOUT_VERSION
    assert [(c["name"], c["type"]) for c in doc["columns"]] == [(f.name, str(f.type)) for f in STORE_SCHEMA]
    assert {c["name"] for c in doc["partition_columns"]} == {"cluster", "day"}
    meta = pq.read_schema(current / files[0]).metadata
    assert meta[store.VERSION_KEY] == str(store.LAYOUT_VERSION).encode()


def test_duckdb_runs_the_readme_sql_and_gets_the_report_figures(lab_store):
    current, report = lab_store
    con = readme_session(current)
    by_day = con.sql(store_sql.ALLOCATED_BY_ACCOUNT_DAY).fetchall()
    by_account: dict[str, float] = {}
    for cluster, account, day, hours, unknown in by_day:
        assert cluster == "acct" and day in (D2, D3) and unknown == 0  # (whole GPUs: every share known)
        by_account[account] = by_account.get(account, 0.0) + hours
    economics = report["economics"]
    assert sum(by_account.values()) == pytest.approx(economics["total"]["allocated_gpu_hours"], abs=1e-6)
    # The running job: 2 GPUs x the hour up to the window's end, on 2026-12-03, account physics.
    assert ("acct", "physics", D3, pytest.approx(2.0), 0) in by_day
    ended = {r["account"]: r["gpu_hours"] for r in report["runs"]["by_account"]}  # (attempts that ended)
    assert by_account == {"ml": pytest.approx(ended["ml"], abs=1e-6),
                          "physics": pytest.approx(ended["physics"] + 2.0, abs=1e-6)}
    rows = con.sql(store_sql.ALLOCATED_BY_PARTITION).fetchall()
    assert {unknown for *_, unknown in rows} == {0}
    by_partition = {p: h for _, p, h, _ in rows}
    assert by_partition == {r["partition"]: pytest.approx(r["allocated_gpu_hours"], abs=1e-6)
                            for r in economics["by_partition"]}
    assert con.sql(store_sql.ATTEMPTS).fetchall() == [("acct", report["totals"]["attempts"])]
    # Job 1 is stored on both days: `latest` keeps it once, as the report does.
    assert con.execute("SELECT count(*) FROM store WHERE job_id_raw = 1").fetchone() == (2,)
    assert con.execute("SELECT count(*) FROM latest WHERE job_id_raw = 1").fetchone() == (1,)


def test_pyarrow_dataset_reads_the_store_and_gets_the_report_totals(lab_store):
    current, report = lab_store
    table = ds.dataset(current, format="parquet", partitioning="hive").to_table()
    assert {"cluster", "day"} <= set(table.column_names)
    assert set(table.column("cluster").to_pylist()) == {"acct"}
    latest = store.latest_state(table)  # (gpuclust's rule over the engine's rows)
    ended = latest.filter(pc.and_(pc.is_valid(latest.column("end")), pc.greater(latest.column("gpus"), 0)))
    gpu_s = np.asarray(ended.column("gpus").to_numpy()) * np.asarray(ended.column("elapsed_s").to_numpy())
    assert gpu_s.sum() / 3600 == pytest.approx(report["totals"]["gpu_hours"], abs=1e-6)
    assert latest.num_rows == table.num_rows - 1  # job 1, stored twice
    assert pa.types.is_timestamp(table.schema.field("start").type)


def test_the_readme_quotes_the_sql_the_test_runs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for name, sql in {"LATEST": store_sql.LATEST, **store_sql.FIGURES}.items():
        assert sql in readme, f"README.md does not quote store_sql.{name} verbatim"
