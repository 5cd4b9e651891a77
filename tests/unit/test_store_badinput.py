"""Bad input to the store: a day of an older layout (read, then migrated without losing a day), a day of another
schema version or a newer gpuclust (refused, naming the day and the re-fetch), a truncated or corrupt day file
(named; the other days unaffected) and two fetches of one store at once (the second fails clearly)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import store, storeread
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, SCHEMA
from gpuclust.accounting.ingest.text import parse_parsable
from gpuclust.config import parse_config
from gpuclust.slurm.replay import ReplaySlurmClient

D1, D2, D3 = date(2026, 1, 10), date(2026, 1, 11), date(2026, 1, 12)
BASE = {
    "JobID": "1", "JobIDRaw": "1", "JobName": "j", "Comment": "", "Reason": "None", "WCKey": "", "User": "u",
    "Account": "ml", "Partition": "gpu", "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0",
    "Submit": "2026-01-10T10:00:00", "Eligible": "2026-01-10T10:00:00", "Start": "2026-01-10T10:00:00",
    "End": "2026-01-10T11:00:00", "Elapsed": "01:00:00", "AllocTRES": "gres/gpu=1,gres/gpu:h100=1",
    "NodeList": "n1", "NNodes": "1",
}


def out(*rows: dict) -> str:
    lines = [FETCH_DELIMITER.join(FETCH_FIELDS)]
    lines += [FETCH_DELIMITER.join({**BASE, **r}.get(f, "") for f in FETCH_FIELDS) for r in rows]
    return "\n".join(lines) + "\n"


def config(tmp: Path):
    return parse_config(f"[site]\ncluster_name = t\nstate_dir = {tmp}\n[gpu_type h100]\nprice_per_gpu_hour = 1\n")


def period(*days: date) -> Period:
    start = datetime.combine(days[0], datetime.min.time(), timezone.utc)
    end = datetime.combine(days[-1], datetime.min.time(), timezone.utc).replace(hour=23, minute=59, second=59)
    return Period(start, end)


def fetch(tmp: Path, outputs: dict[date, str]) -> Path:
    client = ReplaySlurmClient()
    for day, text in outputs.items():
        client.add("sacct", sacct_args(day), text)
    client.add("sacct", ["--version"], "slurm 24.11.1\n")
    pipeline.fetch(client, config(tmp), period(*outputs))
    return store.store_dir(str(tmp))


def three_days(tmp: Path) -> Path:
    return fetch(tmp, {D1: out({}), D2: out({"JobID": "2", "JobIDRaw": "2", "Start": "2026-01-11T10:00:00",
                                           "End": "2026-01-11T11:00:00"}),
                       D3: out({"JobID": "3", "JobIDRaw": "3", "Start": "2026-01-12T10:00:00",
                                "End": "2026-01-12T11:00:00"})})


def make_version_1(root: Path) -> None:
    """Turn the current snapshot into what gpuclust wrote before layout version 2: `day=` directly under the
    snapshot, no schema file, no version key, problems.json."""
    snap = store.current_snapshot(root)
    assert snap is not None
    for day_dir in list((snap / "cluster=t").iterdir()):
        if day_dir.name == store.AGGREGATES_DIR:  # (version 1 had no per-day aggregates)
            shutil.rmtree(day_dir)
            continue
        path = day_dir / "part.parquet"
        table = pq.read_table(path)
        pq.write_table(table.replace_schema_metadata({k: v for k, v in (table.schema.metadata or {}).items()
                                                      if k != store.VERSION_KEY}), path)
        if (day_dir / store.PROBLEMS_FILE).exists():
            (day_dir / store.PROBLEMS_FILE).rename(day_dir / store.OLD_PROBLEMS_FILE)
        day_dir.rename(snap / day_dir.name)
    (snap / "cluster=t").rmdir()
    (snap / store.SCHEMA_FILE).unlink()


def test_a_version_1_store_is_read_and_the_next_fetch_migrates_it_without_losing_a_day(tmp_path):
    root = fetch(tmp_path, {D1: out({}, {"JobID": "x2", "JobIDRaw": "2"}),
                            D2: out({"JobID": "2", "JobIDRaw": "2", "Start": "2026-01-11T10:00:00"})})
    before = store.load(root).to_pylist()
    make_version_1(root)
    snap = store.current_snapshot(root)
    assert snap is not None and sorted(p.name for p in snap.iterdir()) == ["day=2026-01-10", "day=2026-01-11"]
    assert store.load(root, cluster="t").to_pylist() == before  # read as it is
    assert storeread.load_for_report(root, [D1, D2], "t").num_rows == 2
    assert store.stored_problems(root, [D1], "t")  # (problems.json of version 1)
    inode = (snap / "day=2026-01-11" / "part.parquet").stat().st_ino
    fetch(tmp_path, {D3: out({"JobID": "3", "JobIDRaw": "3", "Start": "2026-01-12T10:00:00"})})
    snap = store.current_snapshot(root)
    assert snap is not None
    assert sorted(p.name for p in snap.iterdir()) == ["_gpuclust_store.json", "cluster=t"]
    assert store.stored_days(root, "t") == [D1, D2, D3]
    assert (snap / "cluster=t" / "day=2026-01-11" / "part.parquet").stat().st_ino == inode  # the same file
    assert store.stored_problems(root, [D1], "t")
    assert store.load(root, [D1, D2], "t").to_pylist() == before


def test_a_day_of_a_newer_store_version_is_refused_naming_the_day(tmp_path):
    root = three_days(tmp_path)
    path = store.day_file(store.current_snapshot(root), D2, "t")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, store.VERSION_KEY: str(store.LAYOUT_VERSION + 1).encode()}), path)
    with pytest.raises(store.StoreError) as err:
        storeread.load_for_report(root, [D1, D2, D3], "t")
    message = str(err.value)
    assert str(path) in message and "2026-01-11" in message and "newer gpuclust" in message
    assert "gpuclust report fetch --since 2026-01-11 --until 2026-01-12" in message
    assert storeread.load_for_report(root, [D1, D3], "t").num_rows == 2  # the other days


def test_a_day_of_another_schema_is_refused_not_mixed(tmp_path):
    root = three_days(tmp_path)
    path = store.day_file(store.current_snapshot(root), D1, "t")
    table = pq.read_table(path)
    at = table.schema.get_field_index("gpus")
    pq.write_table(table.set_column(at, "gpus", table.column("gpus").cast(pa.string())), path)
    for read in (lambda: store.load(root, [D1], "t"), lambda: storeread.load_for_report(root, [D1, D2], "t")):
        with pytest.raises(store.StoreError, match=r"day 2026-01-10 has column gpus as string, not int64.*"
                                                   r"gpuclust report fetch --since 2026-01-10 --until 2026-01-11"):
            read()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_day_file_names_the_day_and_the_refetch_and_the_other_days_read(tmp_path, damage):
    root = three_days(tmp_path)
    path = store.day_file(store.current_snapshot(root), D2, "t")
    data = path.read_bytes()
    path.unlink()  # (never write through a hard link: a day file may be shared with another snapshot)
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"\x00not parquet" * 50, "empty": b""}[damage])
    for read in (lambda: store.load(root, [D1, D2, D3], "t"), lambda: storeread.load_for_report(root, [D1, D2, D3], "t")):
        with pytest.raises(store.StoreError) as err:
            read()
        message = str(err.value)
        assert str(path) in message and "stored day 2026-01-11 cannot be read" in message
        assert "gpuclust report fetch --since 2026-01-11 --until 2026-01-12" in message
    assert storeread.load_for_report(root, [D1, D3], "t").num_rows == 2
    # The fix the message names: re-fetching the day replaces the file; no other day is touched.
    fetch(tmp_path, {D2: out({"JobID": "2", "JobIDRaw": "2", "Start": "2026-01-11T10:00:00"})})
    assert storeread.load_for_report(root, [D1, D2, D3], "t").num_rows == 3


def test_a_damaged_day_reaches_the_cli_as_an_error_naming_it(tmp_path):
    from click.testing import CliRunner

    from gpuclust.cli.main import cli

    root = three_days(tmp_path)
    path = store.day_file(store.current_snapshot(root), D2, "t")
    path.write_bytes(b"PAR1 truncated")
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\nstate_dir = {tmp_path}\nreport_dir = {tmp_path / 'r'}\n")
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--since", "2026-01-11",
                                      "--until", "2026-01-12", "--out", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "stored day 2026-01-11" in result.output and "--since 2026-01-11 --until 2026-01-12" in result.output


def _hold_the_store(state_dir: str, entered, release) -> None:  # type: ignore[no-untyped-def]
    """A fetch that writes D3 and waits inside the lock until told to finish."""
    root = store.store_dir(state_dir)
    table = parse_parsable(out({"JobID": "3", "JobIDRaw": "3"}).encode(), FETCH_DELIMITER, "t").table.cast(SCHEMA)
    with store.staged(root, [D3], cluster="t") as stage:
        stage.write_day(D3, table)
        entered.set()
        release.wait(60)


def test_two_fetches_of_one_store_the_second_fails_clearly_and_nothing_is_lost(tmp_path):
    root = fetch(tmp_path, {D1: out({})})
    ctx = multiprocessing.get_context("fork")
    entered, release = ctx.Event(), ctx.Event()
    writer = ctx.Process(target=_hold_the_store, args=(str(tmp_path), entered, release))
    writer.start()
    try:
        assert entered.wait(60), "the first writer never took the lock"
        table = parse_parsable(out({"JobID": "2", "JobIDRaw": "2"}).encode(), FETCH_DELIMITER, "t").table
        with pytest.raises(store.StoreError) as err:
            store.replace_days(root, {D2: table.cast(SCHEMA)}, cluster="t")
        assert str(root / ".lock") in str(err.value) and "another `gpuclust report fetch`" in str(err.value)
    finally:
        release.set()
        writer.join(60)
    assert writer.exitcode == 0
    assert store.stored_days(root, "t") == [D1, D3]  # the first writer's day, and the day stored before
    # Run again after the first: both are kept.
    store.replace_days(root, {D2: table.cast(SCHEMA)}, cluster="t")
    assert store.stored_days(root, "t") == [D1, D2, D3]
    assert len(os.listdir(root / "snapshots")) == 1


def test_a_store_holds_several_clusters_and_reads_each_apart(tmp_path):
    root = three_days(tmp_path)
    table = parse_parsable(out({"JobID": "7", "JobIDRaw": "7"}).encode(), FETCH_DELIMITER, "o").table.cast(SCHEMA)
    store.replace_days(root, {D1: table}, cluster="other")
    assert store.stored_days(root, "t") == [D1, D2, D3] and store.stored_days(root, "other") == [D1]
    assert store.load(root, [D1], "other").column("job_id").to_pylist() == ["7"]
    assert store.load(root, [D1], "t").column("job_id").to_pylist() == ["1"]
    with pytest.raises(store.StoreError, match="holds clusters other, t"):
        store.load(root, [D1])


def test_a_fetch_while_a_report_reads_leaves_the_snapshot_it_reads(tmp_path):
    root = three_days(tmp_path)
    with store.reading(root):
        snap = store.current_snapshot(root)
        fetch(tmp_path, {D2: out({"JobID": "2", "JobIDRaw": "2", "Start": "2026-01-11T10:00:00"})})
        assert store.current_snapshot(root) != snap
        assert snap is not None and pq.read_table(store.day_file(snap, D3, "t")).num_rows == 1  # still there
    fetch(tmp_path, {D3: out({"JobID": "3", "JobIDRaw": "3", "Start": "2026-01-12T10:00:00"})})
    assert not snap.exists() and len(os.listdir(root / "snapshots")) == 1  # the next fetch removed it
    assert store.stored_days(root, "t") == [D1, D2, D3]


def test_store_errors_are_bad_input_never_a_bug(tmp_path):
    # a locked store and a store holding several clusters (none named) are the caller's to fix: exit 2, not 70
    from gpuclust.cli.main import exit_code_for
    from gpuclust.exitcodes import EXIT_INPUT

    root = three_days(tmp_path)
    table = parse_parsable(out({"JobID": "7", "JobIDRaw": "7"}).encode(), FETCH_DELIMITER, "o").table.cast(SCHEMA)
    store.replace_days(root, {D1: table}, cluster="other")
    with pytest.raises(store.StoreError) as err:
        store.load(root, [D1])
    assert exit_code_for(err.value) == EXIT_INPUT and "holds clusters other, t" in str(err.value)
    with open(root / ".lock", "w") as held:
        import fcntl

        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(store.StoreError) as locked:
            store.replace_days(root, {D2: table}, cluster="other")
    assert exit_code_for(locked.value) == EXIT_INPUT and str(root / ".lock") in str(locked.value)
