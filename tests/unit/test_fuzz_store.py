"""Issue 42: property tests of the store's tree, as issue 28's fuzz (test_fuzz_inputs.py) does for the older surfaces.

A store of three days whose figures are known by hand (tests/unit/store_trees.py) gets, per case, drawn hostile
changes, and the real commands run through click's CliRunner:

- stray entries (1-5): a drawn name (an admin's `.bak` copy, `day=yesterday`, an impossible date, white space,
  bytes that are no UTF-8, control characters, random text) and kind (directory, file, a copy of a day or of its
  part file, a dangling link, a link loop, a link to a day, a FIFO, nested directories) at a drawn place (the
  snapshot's top, the cluster's directory, inside a day). Asserted: `report build`, `report show` and `report
  fetch` exit 0, every figure is the clean store's, and every stray is named;
- damaged days (1-2 of the 3): the day file truncated at a drawn byte, bytes of it overwritten, emptied, replaced
  by other bytes; rewritten with a column renamed, dropped, added or retyped, a newer version, a negative or null
  count, another day's rows; the entry emptied, made a dangling link, a file or a directory. Asserted: never exit
  70 (`report build` 0/1/2, `report show` and `report fetch` 0/2); a report of a good day exits 0 with that day's
  figures; a refusal is exit 2 and names the day and its re-fetch; then `report fetch --repair` exits 0, after it
  no day is refused and the good days' figures are unchanged. (A byte overwritten inside a data page may go
  unseen: Parquet written without page checksums cannot tell; such a day is not asserted on.)

Deterministic (derandomize=True, the seed of the case counts in the names); GPUCLUST_FUZZ_SCALE=K runs K times
the cases and GPUCLUST_FUZZ_RANDOM=1 other ones, as in test_fuzz_inputs.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.history import store, storetree
from tests.unit.store_trees import (
    DAYS,
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

N_STRAYS, N_DAMAGE = 30, 30


def _settings(n: int) -> Callable[[Any], Any]:
    n *= max(1, int(os.environ.get("GPUCLUST_FUZZ_SCALE", "1")))
    fixed = os.environ.get("GPUCLUST_FUZZ_RANDOM", "") in ("", "0")
    return settings(max_examples=n, deadline=None, derandomize=fixed, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The fetched store and its figures: report.json of the whole period, report show of each day."""
    tmp = tmp_path_factory.mktemp("fuzz-store")
    conf = write_config(tmp)
    fetch_all(conf)
    result = build_all(conf, tmp / "out")
    assert result.exit_code == 0, result.output
    days = {}
    for day in DAYS:
        shown = show_day(conf, day)
        assert shown.exit_code == 0, shown.output
        days[day] = show_figures(shown)
    return {"state": tmp / "state", "report": figures(tmp / "out" / "report.json"), "days": days}


def _copy(clean: dict[str, Any], into: Path) -> Path:
    shutil.copytree(clean["state"], into / "state", symlinks=True)
    return write_config(into)


def _no_crash(result: Result, codes: set[int]) -> None:
    assert result.exit_code in codes, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


# ---- stray entries ---------------------------------------------------------------------------------------------

NAMES = ["day=2026-01-20.bak", "day=yesterday", "day=2026-13-45", "day=2026-02-30", "day=2026-01-20 ", " day=2026-01-20",
         "day=20260120", "day=2026-1-20", "day=", "day", "day=2026-01-20\n", "day=\u0662\u0660\u0662\u0666-01-20",
         "cluster=t.bak", "cluster=", "cluster=t ", ".hidden", "_private", "part.parquet.bak", "part.parquet~",
         "problems.json.bak", "README", "day=2026-01-20=x", "day=2026-01-20/", "\u2028", "day=\x1b[31m",
         "week=2026-01-19.json.bak"]
KINDS = ["dir", "file", "day copy", "part copy", "dangling link", "link loop", "link to a day", "fifo", "nested dirs"]
WHERES = ["top", "cluster", "day"]


@st.composite
def stray_names(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(NAMES))
    raw = draw(st.binary(min_size=1, max_size=24))
    name = raw.replace(b"/", b"_").replace(b"\x00", b"_").decode("utf-8", "surrogateescape")
    return draw(st.sampled_from(["", "day=", "cluster="])) + name


def _ours(name: str, where: str) -> bool:
    """A name gpuclust writes at that place (then it is no stray: left out of the draw)."""
    if where == "top":
        return name in (store.SCHEMA_FILE,) or storetree.entry_cluster(name) is not None
    if where == "cluster":
        return name in (store.AGGREGATES_DIR, store.SCHEMA_FILE) or storetree.entry_day(name) is not None
    return name in storetree.DAY_FILES


def _place(base: Path, name: str, kind: str, day_dir: Path, rnd: bytes) -> Path:
    path = base / name
    if kind == "dir":
        path.mkdir()
    elif kind == "file":
        path.write_bytes(rnd)
    elif kind == "day copy":
        shutil.copytree(day_dir, path)
    elif kind == "part copy":
        shutil.copyfile(day_dir / store.PART_FILE, path)
    elif kind == "dangling link":
        path.symlink_to("/nonexistent/" + str(len(rnd)))
    elif kind == "link loop":
        path.symlink_to(name)
    elif kind == "link to a day":
        path.symlink_to(day_dir)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        (path / "a" / "b").mkdir(parents=True)
        (path / "a" / "b" / "part.parquet").write_bytes(rnd)
    return path


@_settings(N_STRAYS)
@given(data=st.data())
def test_store_stray_entries_fuzz_30_cases(clean: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        conf = _copy(clean, tmp)
        days = cluster_dir(tmp)
        bases = {"top": days.parent, "cluster": days, "day": days / f"day={data.draw(st.sampled_from(DAYS)).isoformat()}"}
        placed: list[str] = []
        for _ in range(data.draw(st.integers(1, 5))):
            where = data.draw(st.sampled_from(WHERES))
            name = data.draw(stray_names())
            base = bases[where]
            if _ours(name, where) or (base / name).exists() or (base / name).is_symlink():
                continue
            kind = data.draw(st.sampled_from(KINDS))
            source_day = days / f"day={data.draw(st.sampled_from(DAYS)).isoformat()}"
            try:
                _place(base, name, kind, source_day, data.draw(st.binary(max_size=64)))
            except OSError:
                continue  # (a name this file system refuses: nobody can make it either)
            placed.append(storetree.shown(base / name).rsplit("/", 1)[-1])

        result = build_all(conf, tmp / "out")
        _no_crash(result, {0})
        assert figures(tmp / "out" / "report.json") == clean["report"]
        for name in placed:
            assert name in result.stderr, (name, result.stderr)
        day = data.draw(st.sampled_from(DAYS))
        shown = show_day(conf, day)
        _no_crash(shown, {0})
        assert show_figures(shown) == clean["days"][day]
        client = Sacct()
        fetched = run(conf, "fetch", "--since", day.isoformat(), "--until", until(day), client=client)
        _no_crash(fetched, {0})
        assert client.asked == [day]
        for name in placed:
            assert name in fetched.stderr, (name, fetched.stderr)
        result = build_all(conf, tmp / "out")
        _no_crash(result, {0})
        assert figures(tmp / "out" / "report.json") == clean["report"]


# ---- damaged days ----------------------------------------------------------------------------------------------

def _set(table: pa.Table, name: str, values: list[Any], type_: pa.DataType | None = None) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, pa.array(values, type_))


# (how a table is rewritten: every one is another schema or breaks what gpuclust writes, so always refused)
REWRITES: dict[str, Callable[[pa.Table], pa.Table]] = {
    "rename": lambda t: t.rename_columns(["n_gpus" if n == "gpus" else n for n in t.column_names]),
    "drop": lambda t: t.drop_columns(["job_name"]),
    "add": lambda t: t.append_column("day", pa.array(["x"] * t.num_rows)),
    "retype": lambda t: _set(t, "start", [str(v) for v in t.column("start").to_pylist()]),
    "newer": lambda t: t.replace_schema_metadata({**(t.schema.metadata or {}), store.VERSION_KEY: b"99"}),
    "negative": lambda t: _set(t, "gpus", [-(2**62), 1]),
    "null": lambda t: _set(t, "job_id_raw", [None, 1], pa.int64()),
    "other day": lambda t: _set(t, "window", ["2026-01-01"] * t.num_rows),
}
BYTES = ["truncate", "overwrite", "empty", "other bytes"]
ENTRIES = ["empty dir", "dangling part", "dangling day", "day file", "part dir"]


def _damage(day_dir: Path, data: st.DataObject) -> bool:
    """Damage one day; True when a report must refuse it (else the damage may go unseen: bytes inside a page)."""
    part = day_dir / store.PART_FILE
    how = data.draw(st.sampled_from(["bytes", "rewrite", "entry"]))
    if how == "rewrite":
        table = pq.read_table(part)
        part.unlink()
        pq.write_table(REWRITES[data.draw(st.sampled_from(sorted(REWRITES)))](table), part)
        return True
    if how == "entry":
        kind = data.draw(st.sampled_from(ENTRIES))
        shutil.rmtree(day_dir)
        if kind == "empty dir":
            day_dir.mkdir()
        elif kind == "dangling part":
            day_dir.mkdir()
            part.symlink_to("/nonexistent/part.parquet")
        elif kind == "dangling day":
            day_dir.symlink_to("/nonexistent/day")
        elif kind == "day file":
            day_dir.write_bytes(b"x")
        else:
            part.mkdir(parents=True)
        return True
    raw = part.read_bytes()
    kind = data.draw(st.sampled_from(BYTES))
    part.unlink()
    if kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif kind == "overwrite":
        at = data.draw(st.integers(0, len(raw) - 1))
        patch = data.draw(st.binary(min_size=1, max_size=16))
        raw = raw[:at] + patch + raw[at + len(patch):]
        part.write_bytes(raw)
        return False
    elif kind == "empty":
        raw = b""
    else:
        raw = data.draw(st.binary(max_size=2048))
        if raw.startswith(b"PAR1") and raw.endswith(b"PAR1"):
            raw = raw[1:]
    part.write_bytes(raw)
    return True


@_settings(N_DAMAGE)
@given(data=st.data())
def test_store_damaged_days_fuzz_30_cases(clean: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        conf = _copy(clean, tmp)
        days = cluster_dir(tmp)
        damaged = data.draw(st.lists(st.sampled_from(DAYS), min_size=1, max_size=2, unique=True))
        refused: set[date] = {d for d in damaged if _damage(days / f"day={d.isoformat()}", data)}

        _no_crash(build_all(conf, tmp / "out"), {0, 1, 2})
        for day in DAYS:
            shown = show_day(conf, day)
            _no_crash(shown, {0, 2})
            if day not in damaged:
                assert shown.exit_code == 0 and show_figures(shown) == clean["days"][day]
            elif day in refused or shown.exit_code == 2:
                assert shown.exit_code == 2, shown.output
                assert day.isoformat() in shown.output
                assert f"gpuclust report fetch --since {day.isoformat()} --until {until(day)}" in shown.output

        client = Sacct()
        repaired = run(conf, "fetch", "--repair", client=client)
        _no_crash(repaired, {0})
        assert refused <= set(client.asked) <= set(damaged)
        assert (root_of(tmp) / "current").is_symlink()
        for day in DAYS:
            shown = show_day(conf, day)
            _no_crash(shown, {0})  # (after the repair no day is refused)
            if day not in damaged or day in client.asked:
                assert show_figures(shown) == clean["days"][day]


def test_case_counts_in_the_names() -> None:
    scale = max(1, int(os.environ.get("GPUCLUST_FUZZ_SCALE", "1")))
    tests = {name: fn for name, fn in globals().items() if name.startswith("test_") and name.endswith("_cases")}
    assert len(tests) == 2
    for name, fn in tests.items():
        assert fn._hypothesis_internal_use_settings.max_examples == int(name.split("_")[-2]) * scale, name
