"""`report build` reads the store day file by day file (storeread.load_for_report): the same rows, in the same
order, as the single load of every day (store.load), and so every figure of the report is the same."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import store, storeread
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, SCHEMA
from gpuclust.accounting.ingest.text import parse_parsable
from gpuclust.accounting.output.render import to_json
from gpuclust.config import parse_config

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
D1, D2, D3, D4 = (date(2026, 12, 1) + timedelta(days=k) for k in range(4))
BASE = {
    "JobID": "900001", "JobIDRaw": "900001", "JobName": "j", "Comment": "team=ml", "WCKey": "", "User": "u",
    "Account": "ml", "Partition": "gpu", "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0",
    "Submit": "2026-12-02T10:00:00", "Eligible": "2026-12-02T10:00:00", "Start": "2026-12-02T10:05:00",
    "End": "2026-12-02T11:00:00", "Elapsed": "00:55:00", "AllocTRES": "gres/gpu=1,gres/gpu:h100=1",
    "NodeList": "n1", "NNodes": "1", "Reason": "None",
}


def rows(*changes: dict[str, str]) -> pa.Table:
    """Rows as `report fetch` parses sacct's output (BASE changed by each dict)."""
    text = "\n".join([FETCH_DELIMITER.join(FETCH_FIELDS)]
                     + [FETCH_DELIMITER.join({**BASE, **c}.get(f, "") for f in FETCH_FIELDS) for c in changes]) + "\n"
    return parse_parsable(text.encode(), FETCH_DELIMITER, "test").table.cast(SCHEMA)


def lab_rows() -> pa.Table:
    """The lab's recorded jobs (requeues, arrays, het jobs, failures, resubmissions)."""
    return pipeline.read_input(str(DATA / "lab-parsable.txt"), FETCH_DELIMITER).table.cast(SCHEMA)


@pytest.fixture
def config(tmp_path: Path):
    text = (DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path))
    return parse_config(text)


def fill_store(state_dir: str) -> None:
    lab = lab_rows()
    half = lab.num_rows // 2
    first = datetime(2026, 12, 5, tzinfo=timezone.utc)
    tables = {
        # Job 900001 seen running on D1 and ended on D2 (same JobIDRaw and Start: one execution); job 900002
        # pending on D1, started on D2 (the pending row goes); job 900003 requeued (two executions).
        D1: pa.concat_tables([lab.slice(0, half), rows(
            {"State": "RUNNING", "End": "Unknown"},
            {"JobID": "900002", "JobIDRaw": "900002", "State": "PENDING", "Start": "Unknown", "End": "Unknown",
             "AllocTRES": "", "NodeList": "None assigned"},
            {"JobID": "900003", "JobIDRaw": "900003", "JobName": "other name", "State": "REQUEUED",
             "End": "2026-12-02T10:30:00"},
        )]),
        D2: pa.concat_tables([rows(
            {},
            {"JobID": "900002", "JobIDRaw": "900002", "Start": "2026-12-02T12:00:00", "End": "2026-12-02T13:00:00",
             "User": "v", "Comment": "team=physics"},
            {"JobID": "900003", "JobIDRaw": "900003", "JobName": "other name", "Start": "2026-12-02T10:40:00",
             "State": "FAILED", "ExitCode": "1:0"},
        ), lab.slice(half)]),
        D3: rows({"JobID": "900004", "JobIDRaw": "900004", "Partition": "debug", "State": "TIMEOUT",
                  "Start": "2026-12-03T01:00:00", "End": "2026-12-03T05:00:00"}),
        D4: lab.slice(0, 3),  # seen again by a later window
    }
    root = store.store_dir(state_dir)
    store.replace_days(root, tables, fetched_at=first)
    # A later re-fetch of D1 in which job 900001 is already COMPLETED: that fetch wins over D2's.
    store.replace_days(root, {D1: pa.concat_tables([tables[D1], rows({"State": "FAILED", "ExitCode": "2:0"})])},
                       fetched_at=first + timedelta(hours=1))


def test_load_for_report_has_the_rows_of_the_single_load(tmp_path, config):
    fill_store(str(tmp_path))
    root = store.store_dir(str(tmp_path))
    days = [D1 - timedelta(days=1), D1, D2, D3, D4]  # (a day not in the store is skipped by both)
    single = store.load(root, days)
    by_day = storeread.load_for_report(root, days)
    assert by_day.column_names == storeread.report_columns()
    assert by_day.to_pylist() == single.select(by_day.column_names).to_pylist()
    assert all(pa.types.is_dictionary(by_day.column(c).type) for c in storeread.DICTIONARY_COLUMNS)
    # The cases: one row per execution, the latest fetch wins (900001: D1 fetched again, FAILED), the pending
    # row is gone once the job started (900002), a requeued job keeps both executions (900003); the lab's
    # rows seen again on D4 are kept once.
    assert [(r["job_id_raw"], r["state"]) for r in by_day.to_pylist() if r["job_id_raw"] >= 900001] == [
        (900003, "REQUEUED"), (900001, "FAILED"), (900002, "COMPLETED"), (900003, "FAILED"), (900004, "TIMEOUT")]
    assert by_day.num_rows == lab_rows().num_rows + 5


def test_load_for_report_of_no_stored_day_is_empty(tmp_path, config):
    fill_store(str(tmp_path))
    table = storeread.load_for_report(store.store_dir(str(tmp_path)), [date(2020, 1, 1)])
    assert table.num_rows == 0 and table.column_names == storeread.report_columns()


@pytest.mark.parametrize("span", [(D1, D4 + timedelta(days=1)), (D2, D3), (D1 - timedelta(days=3), D3)])
def test_report_from_the_day_files_equals_the_report_from_the_single_load(tmp_path, config, monkeypatch, span):
    fill_store(str(tmp_path))
    period = Period(*(datetime.combine(d, datetime.min.time(), timezone.utc) for d in span))
    by_day, _ = pipeline.build(config, period)
    monkeypatch.setattr(storeread, "load_for_report", lambda root, days, cluster=None: store.load(root, days, cluster))
    single, _ = pipeline.build(config, period)
    assert by_day.data["totals"]["attempts"]
    for report in (by_day, single):
        report.data.pop("generated_at", None)
    assert to_json(by_day.data) == to_json(single.data)
    assert sorted(by_day.tables) == sorted(single.tables)
    for name, frame in by_day.tables.items():
        assert frame.to_csv(index=False) == single.tables[name].to_csv(index=False), name


def test_a_day_file_without_a_newer_column_reads_as_null(tmp_path, config):
    """A store written before a column existed: the column is null on those days, as store.load gives it."""
    import pyarrow.parquet as pq

    fill_store(str(tmp_path))
    root = store.store_dir(str(tmp_path))
    path = store.day_file(store.current_snapshot(root), D3)
    pq.write_table(pq.read_table(path).drop_columns(["wckey", "comment"]), path)
    single = store.load(root, [D1, D2, D3])
    by_day = storeread.load_for_report(root, [D1, D2, D3])
    assert by_day.to_pylist() == single.select(by_day.column_names).to_pylist()
    assert by_day.column("comment").null_count == 1


def test_a_day_file_from_before_timelimit_reads_it_as_unknown(tmp_path, config):
    """Issue 43: Timelimit is a store column (timelimit_s) since; a day written before it has it null (unknown,
    never 0), whichever reader reads it."""
    import pyarrow.parquet as pq

    fill_store(str(tmp_path))
    root = store.store_dir(str(tmp_path))
    path = store.day_file(store.current_snapshot(root), D3)
    before = pq.read_table(path)
    assert "timelimit_s" in before.column_names
    pq.write_table(before.drop_columns(["timelimit_s"]), path)
    single = store.load(root, [D1, D2, D3])
    by_day = storeread.load_for_report(root, [D1, D2, D3])
    assert by_day.to_pylist() == single.select(by_day.column_names).to_pylist()
    assert by_day.column("timelimit_s").null_count >= 1
