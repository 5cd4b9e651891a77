"""The Parquet store: re-fetch replaces (no duplicates, no gaps), a crash leaves it as it was, and a job
seen in several windows is kept once in its latest state."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import store
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS
from gpuclust.config import parse_config
from gpuclust.errors import SlurmCommandError
from gpuclust.slurm.replay import ReplaySlurmClient

D1, D2 = date(2026, 1, 10), date(2026, 1, 11)
BASE = {
    "JobID": "1", "JobIDRaw": "1", "JobName": "j", "Comment": "", "Reason": "None", "WCKey": "", "User": "u", "Account": "ml",
    "Partition": "gpu", "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "Submit": "2026-01-10T10:00:00",
    "Eligible": "2026-01-10T10:00:00", "Start": "2026-01-10T10:00:00", "End": "2026-01-10T11:00:00",
    "Elapsed": "01:00:00", "AllocTRES": "gres/gpu=1,gres/gpu:h100=1", "NodeList": "n1", "NNodes": "1",
}


def out(*rows: dict) -> str:
    lines = [FETCH_DELIMITER.join(FETCH_FIELDS)] + [FETCH_DELIMITER.join({**BASE, **r}.get(f, "") for f in FETCH_FIELDS) for r in rows]
    return "\n".join(lines) + "\n"


def config(tmp: Path):
    return parse_config(f"[site]\ncluster_name = t\nstate_dir = {tmp}\n[gpu_type h100]\nprice_per_gpu_hour = 1\n")


def period(*days: date) -> Period:
    start = datetime.combine(days[0], datetime.min.time(), timezone.utc)
    end = datetime.combine(days[-1], datetime.min.time(), timezone.utc).replace(hour=23, minute=59, second=59)
    return Period(start, end)


def client(day_outputs: dict[date, str]) -> ReplaySlurmClient:
    c = ReplaySlurmClient()
    for day, text in day_outputs.items():
        c.add("sacct", sacct_args(day), text)
    return c


def test_refetch_replaces_window_without_duplicates(tmp_path):
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    running = {"State": "RUNNING", "End": "Unknown", "Elapsed": "00:30:00"}
    pipeline.fetch(client({D1: out(running, {"JobID": "2", "JobIDRaw": "2"})}), cfg, period(D1))
    assert store.load(root).num_rows == 2
    pipeline.fetch(client({D1: out({}, {"JobID": "2", "JobIDRaw": "2"})}), cfg, period(D1))
    rows = store.load(root).to_pylist()
    assert len(rows) == 2 and {r["state"] for r in rows} == {"COMPLETED"}
    # Fetching another day keeps the first.
    pipeline.fetch(client({D2: out({"JobID": "3", "JobIDRaw": "3"})}), cfg, period(D2))
    assert store.stored_days(root) == [D1, D2] and store.load(root).num_rows == 3


def test_job_across_windows_kept_once_in_latest_state(tmp_path):
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    running = {"State": "RUNNING", "End": "Unknown", "Elapsed": "14:00:00"}
    done = {"End": "2026-01-11T02:00:00", "Elapsed": "16:00:00"}
    pipeline.fetch(client({D1: out(running), D2: out(done)}), cfg, period(D1, D2))
    rows = store.load(root).to_pylist()
    assert len(rows) == 1 and rows[0]["state"] == "COMPLETED" and rows[0]["elapsed_s"] == 16 * 3600
    # The order does not matter: the later window (and, across fetches, the later fetch) wins.
    table = store.load(root)
    assert store.latest_state(table.take([0])).num_rows == 1


def test_pending_row_dropped_once_job_started(tmp_path):
    cfg = config(tmp_path)
    pending = {"State": "PENDING", "Start": "Unknown", "End": "Unknown", "Elapsed": "00:00:00"}
    pipeline.fetch(client({D1: out(pending), D2: out({})}), cfg, period(D1, D2))
    assert [r["state"] for r in store.load(store.store_dir(str(tmp_path))).to_pylist()] == ["COMPLETED"]


def test_crash_mid_fetch_leaves_store_as_it_was(tmp_path):
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    pipeline.fetch(client({D1: out({}), D2: out({"JobID": "2", "JobIDRaw": "2"})}), cfg, period(D1, D2))
    before = store.load(root).to_pylist()
    failing = client({D1: out({"JobID": "9", "JobIDRaw": "9"})})
    failing.fail("sacct", sacct_args(D2), 1, "sacct: error: slurmdbd unreachable")
    with pytest.raises(SlurmCommandError):
        pipeline.fetch(failing, cfg, period(D1, D2))
    assert store.load(root).to_pylist() == before


def test_interrupted_swap_staging_is_cleaned_and_current_intact(tmp_path):
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    pipeline.fetch(client({D1: out({})}), cfg, period(D1))
    stale = root / "snapshots" / "crashed-staging"
    (stale / "day=2026-01-10").mkdir(parents=True)
    (stale / "day=2026-01-10" / "part.parquet").write_bytes(b"garbage")
    assert store.load(root).num_rows == 1
    pipeline.fetch(client({D2: out({"JobID": "2", "JobIDRaw": "2"})}), cfg, period(D2))
    assert not stale.exists() and store.load(root).num_rows == 2
    assert len(list((root / "snapshots").iterdir())) == 1


def test_rejected_rows_are_kept_with_the_day_and_reach_the_report(tmp_path):
    cfg = config(tmp_path)
    pipeline.fetch(client({D1: out({}, {"JobID": "x2", "JobIDRaw": "2"})}), cfg, period(D1))
    report, _ = pipeline.build(cfg, period(D1))
    assert report.data["input"]["rejected_rows"] == 1
    assert "JobID" in report.data["input"]["problems"][0]


def test_build_without_fetch_says_so(tmp_path):
    with pytest.raises(Exception, match="report fetch"):
        pipeline.build(config(tmp_path), period(D1))
