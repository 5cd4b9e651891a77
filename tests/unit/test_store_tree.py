"""Issue 42 classes 2-4, the store: gpuclust reads only what it wrote, through the real CLI.

- Entries gpuclust did not write (an admin's `cp -a day=X day=X.bak`, `day=yesterday`, `day=2026-13-45`, a
  trailing space, stray files) are named on stderr and in report.json's input.problems and skipped: the figures
  are those without them, and `report build`, `report show` and `report fetch` all work (a fetch carries them over
  as they are). One rule (storetree.entry_day) decides what a day entry is.
- A dangling `current`, a dangling part link, an empty day directory: named, never an empty report or a day
  dropped in silence.
- A day file of other columns, of a newer version, truncated, empty, not Parquet, retyped, with a negative GPU
  count or copied under another day's name: refused by name, exit 2 (bad input), never 70, never mixed in.
- `report fetch --repair` fetches those days again, and only those.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuclust.accounting.history import store, storetree
from gpuclust.accounting.ingest.schema import STORE_SCHEMA
from tests.unit.store_trees import (
    CLUSTER,
    DAYS,
    GPU_HOURS_PER_DAY,
    RUNS_PER_DAY,
    Sacct,
    build_all,
    cluster_dir,
    fetch_all,
    figures,
    root_of,
    run,
    show_day,
    show_figures,
    until,
    write_config,
)

A, B, C = DAYS


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of DAYS, fetched once; each test works on a copy."""
    tmp = tmp_path_factory.mktemp("store")
    fetch_all(write_config(tmp))
    return tmp


@pytest.fixture(scope="module")
def baseline(fetched: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The figures of the clean store: report.json of the whole period, and report show of each day."""
    tmp = tmp_path_factory.mktemp("baseline")
    conf = write_config(fetched)
    result = build_all(conf, tmp / "out")
    assert result.exit_code == 0, result.output
    report = figures(tmp / "out" / "report.json")
    assert report["totals"]["runs"] == RUNS_PER_DAY * 3 and report["totals"]["gpu_hours"] == GPU_HOURS_PER_DAY * 3
    days = {}
    for day in DAYS:
        shown = show_day(conf, day)
        assert shown.exit_code == 0, shown.output
        days[day] = show_figures(shown)
    return {"report": report, "days": days}


@pytest.fixture
def tmp_store(fetched: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of the store's state directory with its config, the config)."""
    shutil.copytree(fetched / "state", tmp_path / "state", symlinks=True)
    return tmp_path, write_config(tmp_path)


def _part(tmp: Path, day: date) -> Path:
    return cluster_dir(tmp) / f"day={day.isoformat()}" / "part.parquet"


def _rewrite(path: Path, table: pa.Table | None = None, data: bytes | None = None) -> None:
    """Replace a day file (never write through it: it is hard-linked into other snapshots)."""
    path.unlink()
    if table is not None:
        pq.write_table(table, path)
    else:
        path.write_bytes(data or b"")


def _refused(result, day: date) -> None:
    """Exit 2 (bad input, never 70), naming the day and the fetch that writes it again."""
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    assert day.isoformat() in result.output
    assert f"gpuclust report fetch --since {day.isoformat()} --until {until(day)}" in result.output


# ---- one rule for what a day entry is -------------------------------------------------------------------------

@pytest.mark.parametrize("name, day", [
    ("day=2026-11-02", date(2026, 11, 2)), ("day=2024-02-29", date(2024, 2, 29)),
    ("day=2026-11-02.bak", None), ("day=yesterday", None), ("day=2026-13-45", None), ("day=2026-11-02 ", None),
    (" day=2026-11-02", None), ("day=20261102", None), ("day=2026-1-02", None), ("day=2025-02-29", None),
    ("day=\u0662\u0660\u0662\u0666-11-02", None), ("day=2026-11-02\n", None), ("Day=2026-11-02", None), ("day=", None),
    ("day=2026-11-02T00:00", None), ("day=+2026-11-02", None),
])
def test_a_day_entry_is_exactly_what_gpuclust_writes(name, day):
    assert storetree.entry_day(name) == day


@pytest.mark.parametrize("name, cluster", [("cluster=t", "t"), ("cluster=gpu-a.b_1", "gpu-a.b_1"), ("cluster=", None),
                                           ("cluster=t ", None), ("cluster=a/b", None), ("cluster=-x", None)])
def test_a_cluster_entry_is_a_name_the_site_config_accepts(name, cluster):
    assert storetree.entry_cluster(name) == cluster


# ---- stray entries: named, skipped, carried over -------------------------------------------------------------

def _make_strays(tmp: Path) -> list[str]:
    """The stray entries of the issue and their siblings; returns the names a warning must carry."""
    days = cluster_dir(tmp)
    subprocess.run(["cp", "-a", str(days / f"day={B.isoformat()}"), str(days / f"day={B.isoformat()}.bak")], check=True)
    shutil.copytree(days / f"day={A.isoformat()}", days / "day=yesterday")  # (a whole day's rows, under no date)
    (days / "day=2026-13-45").mkdir()
    shutil.copytree(days / f"day={C.isoformat()}", days / f"day={C.isoformat()} ")
    (days / "notes.txt").write_text("admin notes\n")
    (days / f"day={A.isoformat()}" / "part.parquet.orig").write_bytes(b"not read")
    (days / "day=loop").symlink_to("day=loop")
    (days.parent / "README").write_text("x")
    (days.parent / "cluster=t ").mkdir()
    return [f"day={B.isoformat()}.bak", "day=yesterday", "day=2026-13-45", f"'day={C.isoformat()} '", "notes.txt",
            "part.parquet.orig", "day=loop", "README", "'cluster=t '"]


def test_stray_entries_are_named_and_skipped_and_the_figures_are_the_same(tmp_store, baseline):
    tmp, conf = tmp_store
    names = _make_strays(tmp)
    result = build_all(conf, tmp / "out")
    assert result.exit_code == 0, result.output
    assert figures(tmp / "out" / "report.json") == baseline["report"]  # not one row of a stray is read
    problems = json.loads((tmp / "out" / "report.json").read_text())["input"]["problems"]
    for name in names:
        assert any(f"warning: {p}" in result.stderr for p in problems if name in p), name
        assert any(name in p and "not an entry gpuclust writes" in p for p in problems), name
    assert all(str(root_of(tmp) / "current") in p for p in problems)  # (named where the admin sees them)
    for day in DAYS:
        shown = show_day(conf, day)
        assert shown.exit_code == 0, shown.output
        assert show_figures(shown) == baseline["days"][day]
        assert "day=yesterday" in shown.stderr


def test_a_fetch_names_the_strays_and_carries_them_over_as_they_are(tmp_store, baseline):
    tmp, conf = tmp_store
    names = _make_strays(tmp)
    client = Sacct()
    result = run(conf, "fetch", "--since", A.isoformat(), "--until", until(A), client=client)
    assert result.exit_code == 0, result.output
    assert client.asked == [A]
    for name in names:
        assert name in result.stderr, name
    days = cluster_dir(tmp)  # (the new snapshot)
    assert (days / f"day={B.isoformat()}.bak" / "part.parquet").is_file()
    assert (days / f"day={A.isoformat()}" / "part.parquet.orig").read_bytes() == b"not read"  # (in a replaced day)
    assert (days / "day=loop").is_symlink() and (days / "notes.txt").is_file()
    assert (days.parent / "cluster=t ").is_dir()
    assert len(os.listdir(root_of(tmp) / "snapshots")) == 1
    result = build_all(conf, tmp / "out")
    assert result.exit_code == 0, result.output
    assert figures(tmp / "out" / "report.json") == baseline["report"]


# ---- what points nowhere is named ----------------------------------------------------------------------------

def test_a_dangling_current_link_is_named_never_an_empty_report(tmp_store, baseline):
    tmp, conf = tmp_store
    root = root_of(tmp)
    snap = (root / "current").resolve()
    snap.rename(snap.parent / "moved-away")
    for result in (build_all(conf, tmp / "out"), show_day(conf, B)):
        assert result.exit_code == 2, result.output
        assert f"{root / 'current'}: points to snapshots/{snap.name}, which is gone" in result.output
        assert "gpuclust report fetch --since" in result.output
    result = run(conf, "fetch", "--repair")
    assert result.exit_code == 2 and "give --repair a period" in result.output
    client = Sacct()
    result = run(conf, "fetch", "--repair", "--since", B.isoformat(), "--until", until(B), client=client)
    assert result.exit_code == 0, result.output
    assert client.asked == [B] and "which is gone" in result.stderr
    shown = show_day(conf, B)
    assert shown.exit_code == 0 and show_figures(shown) == baseline["days"][B]


@pytest.mark.parametrize("damage", ["dangling part link", "empty day directory", "part is a directory",
                                    "day is a file", "day is a dangling link"])
def test_a_day_without_its_file_is_named_and_refused_where_read(tmp_store, baseline, damage):
    tmp, conf = tmp_store
    entry = cluster_dir(tmp) / f"day={B.isoformat()}"
    shutil.rmtree(entry)
    if damage == "dangling part link":
        entry.mkdir()
        (entry / "part.parquet").symlink_to("/nonexistent/part.parquet")
    elif damage == "empty day directory":
        entry.mkdir()
    elif damage == "part is a directory":
        (entry / "part.parquet").mkdir(parents=True)
    elif damage == "day is a file":
        entry.write_text("x")
    else:
        entry.symlink_to("/nonexistent/day")
    for result in (build_all(conf, tmp / "out"), show_day(conf, B)):
        _refused(result, B)
        assert "cannot be read" in result.output and "--repair" in result.output
    shown = show_day(conf, A)  # (another day: read, the broken one named)
    assert shown.exit_code == 0 and show_figures(shown) == baseline["days"][A]
    assert f"stored day {B.isoformat()}" in shown.stderr
    client = Sacct()
    result = run(conf, "fetch", "--since", C.isoformat(), "--until", until(C), client=client)  # (never blocked)
    assert result.exit_code == 0 and f"stored day {B.isoformat()}" in result.stderr
    _repaired(tmp, conf, baseline, [B])


# ---- day files of another schema, damaged, or breaking what gpuclust writes: refused, exit 2 --------------------

def _table(tmp: Path, day: date) -> pa.Table:
    return pq.read_table(_part(tmp, day))


DAMAGE = {
    # the example: other columns (a renamed, a dropped, an added one), read as if they fitted
    "renamed column": (lambda t: t.rename_columns(["GPUs" if n == "gpus" else n for n in t.column_names]),
                       "'GPUs' that no store version has and no column gpus"),
    "dropped column": (lambda t: t.drop_columns(["start"]), "no column start"),
    "added column": (lambda t: t.append_column("cluster", pa.array([CLUSTER] * t.num_rows)),
                     "'cluster' that no store version has"),
    "retyped column": (lambda t: t.set_column(t.schema.get_field_index("gpus"), "gpus", t.column("gpus").cast(pa.string())),
                       "has column gpus as string, not int64"),
    "newer version": (lambda t: t.replace_schema_metadata({**t.schema.metadata, store.VERSION_KEY: str(store.LAYOUT_VERSION + 1).encode()}),
                      "written by a newer gpuclust"),
    "unreadable version": (lambda t: t.replace_schema_metadata({**t.schema.metadata, store.VERSION_KEY: b"two"}),
                           "unreadable gpuclust.store_version"),
    "negative gpus": (lambda t: t.set_column(t.schema.get_field_index("gpus"), "gpus", pa.array([-4, 1])),
                      "negative gpus"),
    "negative elapsed": (lambda t: t.set_column(t.schema.get_field_index("elapsed_s"), "elapsed_s", pa.array([-1, 1])),
                         "negative elapsed_s"),
    "null gpus": (lambda t: t.set_column(t.schema.get_field_index("gpus"), "gpus", pa.array([None, 1], pa.int64())),
                  "without gpus"),
    "another day's rows": (lambda t: t.set_column(t.schema.get_field_index("window"), "window",
                                                  pa.array([A.isoformat()] * t.num_rows)), "rows of window"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_day_of_another_schema_or_broken_values_is_refused_by_name(tmp_store, baseline, damage):
    tmp, conf = tmp_store
    change, said = DAMAGE[damage]
    _rewrite(_part(tmp, B), change(_table(tmp, B)))
    for result in (build_all(conf, tmp / "out"), show_day(conf, B)):
        _refused(result, B)
        assert said in result.output, result.output
    assert not (tmp / "out" / "report.json").exists()  # (never a report that mixed it in)
    shown = show_day(conf, A)
    assert shown.exit_code == 0 and show_figures(shown) == baseline["days"][A]
    _repaired(tmp, conf, baseline, [B])


@pytest.mark.parametrize("damage", ["truncated", "empty", "not parquet", "footer only"])
def test_a_damaged_day_file_is_bad_input_not_a_bug(tmp_store, baseline, damage):
    tmp, conf = tmp_store
    data = _part(tmp, B).read_bytes()
    _rewrite(_part(tmp, B), data={"truncated": data[: len(data) // 2], "empty": b"", "not parquet": b"\x00junk" * 99,
                                  "footer only": b"PAR1" + data[-2000:]}[damage])
    for result in (build_all(conf, tmp / "out"), show_day(conf, B)):
        _refused(result, B)
        assert f"stored day {B.isoformat()} cannot be read" in result.output
    _repaired(tmp, conf, baseline, [B])


def test_a_damaged_list_of_rejected_rows_is_named(tmp_store, baseline):
    tmp, conf = tmp_store
    problems = _part(tmp, B).parent / store.PROBLEMS_FILE
    problems.write_text("{not json")
    shown = show_day(conf, B)
    assert shown.exit_code == 0 and show_figures(shown) == baseline["days"][B]
    assert "list of rejected rows cannot be read" in shown.stderr
    _repaired(tmp, conf, baseline, [B])
    assert not problems.exists()


def test_a_current_that_is_a_directory_is_named(tmp_store):
    tmp, conf = tmp_store
    root = root_of(tmp)
    (root / "current").unlink()
    (root / "current").mkdir()
    for result in (build_all(conf, tmp / "out"), run(conf, "fetch", "--since", A.isoformat(), "--until", until(A))):
        assert result.exit_code == 2, result.output
        assert "is not the symlink `gpuclust report fetch` writes (a directory)" in result.output


# ---- report fetch --repair ------------------------------------------------------------------------------------

def _repaired(tmp: Path, conf: Path, baseline: dict, days: list[date]) -> None:
    """`report fetch --repair` fetches exactly `days` again, and the figures are the clean store's."""
    client = Sacct()
    result = run(conf, "fetch", "--repair", "--json", client=client)
    assert result.exit_code == 0, result.output
    assert client.asked == days
    assert sorted(json.loads(result.stdout)["repaired"]) == [d.isoformat() for d in days]
    for day in days:
        assert "repair: " in result.stderr and day.isoformat() in result.stderr
    result = build_all(conf, tmp / "out")
    assert result.exit_code == 0, result.output
    assert figures(tmp / "out" / "report.json") == baseline["report"]
    nothing = run(conf, "fetch", "--repair", client=(client := Sacct()))
    assert nothing.exit_code == 0 and "nothing to repair" in nothing.stdout and client.asked == []


def test_repair_fetches_only_the_unreadable_days_of_the_period(tmp_store, baseline):
    tmp, conf = tmp_store
    _rewrite(_part(tmp, A), data=b"")
    _rewrite(_part(tmp, C), data=b"garbage")
    client = Sacct()
    result = run(conf, "fetch", "--repair", "--since", C.isoformat(), "--until", until(C), client=client)
    assert result.exit_code == 0 and client.asked == [C]
    _refused(show_day(conf, A), A)  # (outside the period: not repaired)
    _repaired(tmp, conf, baseline, [A])


def test_repair_on_a_clean_store_fetches_nothing(tmp_store):
    tmp, conf = tmp_store
    client = Sacct()
    result = run(conf, "fetch", "--repair", "--json", client=client)
    assert result.exit_code == 0 and client.asked == [] and json.loads(result.stdout)["repaired"] == {}


# ---- the schema rule ------------------------------------------------------------------------------------------

def test_store_version_3_columns_and_the_required_ones():
    """A day of version 5 has exactly these columns (3 added timelimit_s, 4 submit_line and req_tres, 5 alloc_gpu_equivalents
    and gpu_share_unknown). A new STORE_SCHEMA column makes a day
    written before it lack the column: give it a new store.LAYOUT_VERSION (an older gpuclust then refuses the new
    days by their version), and update this list."""
    assert store.LAYOUT_VERSION == 5
    known = [
        "line", "job_id", "job_id_raw", "job_base", "array_task", "array_pending", "het_offset", "job_name", "user",
        "account", "partition", "qos", "wckey", "comment", "nodelist", "state", "state_raw", "reason", "exit_code",
        "exit_signal", "exit_code_known", "submit", "eligible", "start", "end", "elapsed_s", "nnodes", "alloc_tres",
        "gpus", "gpu_type", "mem_mb", "gpu_util_gpu_s", "gpu_busy_gpu_s", "gpu_util_max_pct", "gpu_mem_max_mb",
        "cpu_used_s", "mem_max_mb", "energy_j", "gpu_util_rule", "submit_line", "timelimit_s", "req_tres", "fetched_at", "window",
        "alloc_gpu_equivalents", "gpu_share_unknown"]
    new, gone = sorted(set(STORE_SCHEMA.names) - set(known)), sorted(set(known) - set(STORE_SCHEMA.names))
    assert not new, (f"new store columns {new}: raise store.LAYOUT_VERSION (an older gpuclust then refuses the new "
                     "days by their version), say what it added in its comment and in README's store section, and "
                     "add the columns to this list")
    assert not gone, f"store columns {gone} are gone: days written with them are another schema"
    assert STORE_SCHEMA.names == known
    clash = sorted({name for name, _ in store.PARTITION_COLUMNS} & set(STORE_SCHEMA.names))
    assert not clash, (f"store columns {clash} bear the names of the store's partition keys (cluster=<name>/day=...), "
                       "which engines read as columns: name the new column otherwise (e.g. cluster_name)")
    assert set(store.REQUIRED_COLUMNS) <= set(STORE_SCHEMA.names)
    assert set(store.NOT_NULL) | set(store.NOT_NEGATIVE) <= set(STORE_SCHEMA.names)
