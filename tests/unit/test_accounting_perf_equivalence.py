"""The optimised paths of the reference text reader give exactly the results of the plain paths they replace.

(The direct reader is tested against the reference in test_accounting_ingest_fast.py, the numpy metrics
against the pandas oracle in test_accounting_metrics_equivalence.py.)

Each optimisation keeps its reference next to it: pyarrow.csv tokenising of the whole lines (reference: split
each line on the separator), joined records spliced back into that read (reference: merge them in afterwards),
one parse per distinct value (reference: parse every row), field parsers in threads (reference: one after
the other), the permutation-based latest_state (reference: the sort/filter/sort it replaced), the numpy
fixed-width time parser (reference: strptime + shape regex) and the blocked line scans (reference: one
compare over the whole body). Top failures tied on GPU-hours and End keep the input order.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.figures import metrics
from gpuclust.accounting.history import store
from gpuclust.accounting.ingest import fields, text
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, SCHEMA
from gpuclust.config import parse_config
from tests.unit.test_accounting_text import ROW, dump

REPO = Path(__file__).resolve().parents[2]

def _bench():  # the benchmark's generator: arrays, requeues, het jobs, odd names with newlines and `|`
    spec = importlib.util.spec_from_file_location("accounting_bench", REPO / "benchmarks" / "accounting_bench.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def reference_paths(monkeypatch: pytest.MonkeyPatch) -> Iterator[ReaderOptions]:
    """Every optimisation off: the code paths the optimised ones must agree with (the options to read with;
    the direct reader is compared with them in tests/unit/test_accounting_ingest_fast.py)."""
    with monkeypatch.context() as m:
        m.setattr(text, "_read_spliced", lambda *a, **k: None)
        m.setattr(text, "_read_lines", lambda *a, **k: None)
        m.setattr(fields, "v_time", fields._v_time_ref)
        yield ReaderOptions(fast=False, by_unique=False, parallel_min_rows=10**12)


def _parse_both(data: bytes, delimiter: str, monkeypatch: pytest.MonkeyPatch):
    """(the optimised reference path, the reference path with every optimisation off). The direct reader
    (ReaderOptions.fast) is off in both: it is compared with them in test_accounting_ingest_fast.py."""
    with monkeypatch.context() as m:
        m.setattr(fields, "FIXED_TIME_MIN_ROWS", 0)  # the numpy time parser even for small inputs
        # threads even for small inputs; many blocks in the line scans
        fast = text.parse_parsable(data, delimiter, "x",
                                   options=ReaderOptions(fast=False, parallel_min_rows=0, scan_block=4096))
    with reference_paths(monkeypatch) as options:
        ref = text.parse_parsable(data, delimiter, "x", options=options)
    return fast, ref


def _assert_same(fast, ref) -> None:
    assert fast.table.schema.equals(ref.table.schema)
    assert fast.table.equals(ref.table)
    assert [str(p) for p in fast.problems] == [str(p) for p in ref.problems]
    assert (fast.rejected, fast.steps_dropped, fast.exit_codes_known, fast.notes) == (
        ref.rejected, ref.steps_dropped, ref.exit_codes_known, ref.notes)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("bench") / "sacct.txt"
    _bench().generate(path, 4000, seed=11)
    return path.read_bytes()


def _mutate(data: bytes, seed: int) -> bytes:
    """Bad values, steps, blank lines, a \\r and invalid UTF-8 in names, a record cut short."""
    rng = random.Random(seed)
    d = FETCH_DELIMITER.encode()
    lines = data.split(b"\n")
    out = [lines[0]]
    for line in lines[1:]:
        f = line.split(d)
        if len(f) == len(FETCH_FIELDS) and rng.random() < 0.05:
            k = rng.randrange(9)
            if k == 0:
                f[11] = b"2026-12-01 00:00:00"  # (month 13 is covered by test_impossible_time_is_reported_with_its_line_not_a_crash)
            elif k == 1:
                f[16] = b"cpu=1,gres/gpu:a100=2,gres/gpu:h100=4,gres/gpu=6,mem=3T"
            elif k == 2:
                f[0] += b".batch"
            elif k == 3:
                f[16] = b"gres/gpu=x,mem=1.5K"
            elif k == 4:
                out.append(b"")
            elif k == 5:
                f[2] = b"bad\xff\xfeutf8"
            elif k == 6:
                f[2] = b"cr\rname"
            elif k == 7:
                f[3] = b"multi\nline\ncomment"
            elif k == 8:
                f = f[:7]
            line = d.join(f)
        out.append(line)
    return b"\n".join(out)


@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|"])
def test_generated_dump_same_table_and_problems(generated, delimiter, monkeypatch):
    data = generated if delimiter == FETCH_DELIMITER else generated.replace(FETCH_DELIMITER.encode(), b"|")
    used: list[bool] = []
    real = text._read_spliced

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        used.append(out is not None)
        return out

    monkeypatch.setattr(text, "_read_spliced", spy)
    fast, ref = _parse_both(data, delimiter, monkeypatch)
    assert fast.table.num_rows > 3000
    # The fetch format takes the spliced single read (the merge path is covered by the `|` dumps below).
    assert used[0] or delimiter != FETCH_DELIMITER
    _assert_same(fast, ref)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|"])
def test_mutated_dump_same_table_and_problems(generated, delimiter, seed, monkeypatch):
    data = _mutate(generated, seed)
    if delimiter != FETCH_DELIMITER:
        data = data.replace(FETCH_DELIMITER.encode(), b"|")
    fast, ref = _parse_both(data, delimiter, monkeypatch)
    assert fast.rejected > 0
    _assert_same(fast, ref)


def test_crlf_and_clean_dumps_same(generated, monkeypatch):
    clean = b"\n".join(line for line in generated.split(b"\n") if line.count(FETCH_DELIMITER.encode()) in (0, len(FETCH_FIELDS) - 1))
    for data in (clean, clean.replace(b"\n", b"\r\n"), clean + b"\n\n", clean.rstrip(b"\n")):
        fast, ref = _parse_both(data, FETCH_DELIMITER, monkeypatch)
        _assert_same(fast, ref)


_free_text = st.lists(
    st.one_of(st.sampled_from(list("|\n\r\"' ,;=:\x1f\x1e\x1d\x1c") + ["\x1f|\x1e", "é", "名", "\ufeff", "team=ml"]),
              st.characters(blacklist_categories=("Cs",))),
    max_size=10,
).map("".join)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_free_text, _free_text), min_size=1, max_size=10),
       delimiter=st.sampled_from([FETCH_DELIMITER, "|", ";"]))
def test_any_names_same_result(monkeypatch, pairs, delimiter):
    rows = [dict(ROW, JobID=str(1000 + i), JobIDRaw=str(1000 + i), JobName=n, Comment=c)
            for i, (n, c) in enumerate(pairs)]
    fast, ref = _parse_both(dump(rows, delimiter), delimiter, monkeypatch)
    _assert_same(fast, ref)


def test_line_counts_match_count_substring(generated):
    body = _mutate(generated, 5).replace(FETCH_DELIMITER.encode(), b"\x1d")
    for data in (body, body + b"\n\n", b"\n" + body, b"x", b"\x1d\n\x1d\x1d"):
        lines = text._Lines(data, b"\x1d")
        physical = data.split(b"\n")
        if physical and physical[-1] == b"":
            physical.pop()
        expect = pc.count_substring(pa.array(physical, pa.binary()), "\x1d").to_numpy(zero_copy_only=False)
        assert lines.counts().tolist() == expect.tolist()
        assert [lines[i] for i in range(len(lines))] == physical


def test_by_unique_equals_row_by_row():
    rng = random.Random(4)
    tres = ["", "cpu=1", "gres/gpu=2,mem=1G", "gres/gpu:a100=1,gres/gpu=1", "mem=,x", "gres/gpu=a", "cpu=1, mem=1G"]
    arr = pa.array([rng.choice(tres) for _ in range(500)])
    for func in (fields.v_alloc_tres, fields.v_int, fields.v_state, fields.v_elapsed):
        got, want = fields.by_unique(func, arr), func(arr)
        for g, w in zip(got, want, strict=True):
            if isinstance(w, np.ndarray):
                assert np.array_equal(g, w)
            else:
                assert g.equals(w)


# ---- metrics ---------------------------------------------------------------------------------------------


def _latest_state_reference(table: pa.Table) -> pa.Table:
    """The implementation latest_state had before it worked on a permutation."""
    if table.num_rows == 0:
        return table
    order_cols = [c for c in ("fetched_at", "window") if c in table.column_names]
    table = table.append_column("_i", pa.array(np.arange(table.num_rows)))
    table = table.sort_by([*[(c, "ascending") for c in order_cols], ("_i", "ascending")])
    start = pc.fill_null(pc.cast(table.column("start"), pa.int64()), -1).to_numpy()
    raw = table.column("job_id_raw").to_numpy()
    keys = (raw.astype(np.int64) << 32) + (start.astype(np.int64) + 1)
    _, first = np.unique(keys[::-1], return_index=True)
    keep = np.zeros(len(start), dtype=bool)
    keep[len(start) - 1 - first] = True
    started_ids = np.unique(raw[start != -1])
    keep &= ~((start == -1) & np.isin(raw, started_ids))
    return table.filter(pa.array(keep)).sort_by([("_i", "ascending")]).drop_columns(["_i"])


@pytest.mark.parametrize("wide_ids", [False, True])
@pytest.mark.parametrize("with_store_columns", [False, True])
def test_latest_state_same_as_reference(generated, with_store_columns, wide_ids, monkeypatch):
    table = text.parse_parsable(generated, FETCH_DELIMITER).table
    rng = np.random.default_rng(3)
    # Duplicate executions (a job seen in several windows/fetches), some of them still pending.
    dup = table.take(pa.array(rng.integers(0, table.num_rows, 800)))
    pending = dup.slice(0, 100).set_column(SCHEMA.get_field_index("start"), "start",
                                           pa.nulls(100, SCHEMA.field("start").type))
    table = pa.concat_tables([table, dup, pending])
    if with_store_columns:
        n = table.num_rows
        table = table.append_column("fetched_at", pa.array(rng.integers(0, 3, n) + 1_700_000_000).cast(pa.timestamp("s", tz="UTC")))
        table = table.append_column("window", pa.array([f"2026-11-{d:02d}" for d in rng.integers(1, 4, n)]))
    if wide_ids:  # JobIDRaws too far apart for a count table: every row goes through the sort
        i = table.column_names.index("job_id_raw")
        table = table.set_column(i, "job_id_raw", pc.multiply(table.column("job_id_raw"), 1_000_003))
    got, want = store.latest_state(table), _latest_state_reference(table)
    assert got.num_rows < table.num_rows
    assert got.equals(want)


@pytest.mark.parametrize("with_het", [False, True])
def test_top_failures_ties_keep_the_input_order(with_het):
    """Equal GPU-hours and End: input order decides, with or without het jobs in the table."""
    from gpuclust.accounting.ingest.period import Period

    ids = ["30", "100", "20"]
    rows = [dict(ROW, JobID=i, JobIDRaw=i, JobName=f"n{i}", State="FAILED", ExitCode="1:0") for i in ids]
    if with_het:
        rows.append(dict(ROW, JobID="500+0", JobIDRaw="500"))
    table = text.parse_parsable(dump(rows, FETCH_DELIMITER), FETCH_DELIMITER).table
    config = parse_config("[site]\ncluster_name = t\n")
    start = pd.Timestamp("2026-12-02", tz="UTC").to_pydatetime()
    report = metrics.build_report(table, config, Period(start, start + pd.Timedelta(days=1)))
    assert [r["job_id"] for r in report.data["top_failures"]] == ids


@pytest.mark.parametrize("data", [b"", b"a\x1f|\x1eb", b"\n" * 10, b"x\x1f|\x1e\n" * 5000,
                                  b"no newline " * 3000 + b"\x1f|\x1e", "¦\n¦¦\x1f|\x1e\n".encode() * 999])
def test_parallel_replace_equals_bytes_replace(data, monkeypatch):
    options = ReaderOptions(parallel_replace_bytes=0, workers=2)
    for old in (FETCH_DELIMITER.encode(), "¦".encode()):
        assert text._replace(data, old, b"\x1d", options) == data.replace(old, b"\x1d")


def test_job_id_plain_number_path_equals_regex():
    rng = random.Random(9)
    odd = ["123_4", "123_[1-5]", "123_[]", "123+1", "123.batch", "123_4.0", "x", "", "12a", "1_2_3", "007", "5+x"]
    arr = pa.array([rng.choice(odd) if rng.random() < 0.2 else str(rng.randrange(10**9)) for _ in range(30_000)])
    got, want = fields.v_job_id(arr), fields._v_job_id_regex(arr)
    for name in want[0]:
        assert got[0][name].equals(want[0][name]), name
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])


# ---- second pass: numpy time parser, blocked line scans, lazy job_id_order ------------------------------


def _time_values(rng: random.Random, n: int) -> list[str]:
    """Valid times (1970..2200, leap days), impossible ones (month 13, Feb 29 of 2100, 24:00, second 60),
    years outside the fast range, unknowns, and valid strings with one byte changed."""
    out: list[str] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.5:
            out.append(pd.Timestamp(rng.randrange(0, 7_258_118_400), unit="s").strftime("%Y-%m-%dT%H:%M:%S"))
        elif r < 0.8:
            y = rng.choice([0, 1, 1900, 1969, 1970, 2000, 2024, 2100, 2200, 2201, 9999])
            out.append(f"{y:04d}-{rng.randrange(0, 14):02d}-{rng.randrange(0, 33):02d}T"
                       f"{rng.randrange(0, 25):02d}:{rng.randrange(0, 61):02d}:{rng.randrange(0, 62):02d}")
        elif r < 0.9:
            out.append(rng.choice(["", "(null)", "0", "N/A", "NONE", "None", "Unknown"]))
        else:
            chars = list("2026-02-28T23:59:59")
            chars[rng.randrange(19)] = rng.choice(" xT:-/+9\x00é")
            out.append("".join(chars))
    return out


def _assert_time_same(arr: pa.Array | pa.ChunkedArray) -> None:
    got, got_bad = fields.v_time(arr)
    want, want_bad = fields._v_time_ref(arr)
    assert got.type == want.type
    assert got.equals(want)
    assert np.array_equal(got_bad, want_bad)


@pytest.mark.parametrize("seed", range(3))
def test_fixed_width_time_parser_equals_strptime(seed, monkeypatch):
    monkeypatch.setattr(fields, "FIXED_TIME_MIN_ROWS", 0)
    rng = random.Random(seed)
    arr = pa.array(_time_values(rng, 20_000))
    _assert_time_same(arr)
    _assert_time_same(arr.slice(777, 12_345))
    _assert_time_same(pa.chunked_array([arr.slice(0, 5000), arr.slice(5000, 3), arr.slice(5003)]))
    valid = pa.array([pd.Timestamp(rng.randrange(0, 7_258_118_400), unit="s").strftime("%Y-%m-%dT%H:%M:%S")
                      for _ in range(5000)])
    _assert_time_same(valid)  # every row on the fast path
    _assert_time_same(pa.array(["", "Unknown"] * 50))  # no row on it
    _assert_time_same(pa.array([], pa.string()))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.text(alphabet="0123456789-T: x", min_size=19, max_size=19),
                          st.datetimes().map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S")),
                          st.text(max_size=21)), max_size=40))
def test_fixed_width_time_parser_any_strings(values, monkeypatch):
    monkeypatch.setattr(fields, "FIXED_TIME_MIN_ROWS", 0)
    _assert_time_same(pa.array(values, pa.string()))


@pytest.mark.parametrize("block", [1, 7, 4096, 1 << 22])
def test_blocked_scans_equal_whole_buffer(generated, block, monkeypatch):
    body = _mutate(generated, 6).replace(FETCH_DELIMITER.encode(), b"\x1d")
    for data in (body[:3000] if block < 100 else body, b"", b"\n", b"\x1d", b"\x1d\n\n\x1d\x1d", b"ab\n" * 9):
        buf = np.frombuffer(data, dtype=np.uint8)
        for byte in (0x0A, 0x1D):
            hits = np.flatnonzero(buf == byte)
            assert np.array_equal(text._positions(buf, byte, block), hits)
            nl = np.flatnonzero(buf == 0x0A)
            bounds = np.concatenate([[0], nl + 1, [len(data)]]).astype(np.int64)
            assert np.array_equal(text._counts_between(buf, byte, bounds, block),
                                  np.diff(np.searchsorted(hits, bounds)))
