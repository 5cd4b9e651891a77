"""The direct text reader (gpuclust.accounting.ingest.text: pyarrow.csv over the input split on the delimiter's first
byte, no delimiter swap) gives exactly the reference's result, or hands the input to the reference.

Every comparison: ``direct.table.cast(SCHEMA)`` equals the reference table, and the problems, rejected rows,
dropped steps, exit-code verdict and notes are the same. The reference is the pre-existing path with every
optimisation off (``reference_paths``). The direct reader runs strict (an unexpected error is raised, not
hidden by its fallback) and, where it says so, with many small pieces, chunks, groups and blocks, so that
records broken over lines fall on piece and chunk boundaries.
"""

from __future__ import annotations

import contextlib
import mmap
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting import pipeline
from gpuclust.accounting.ingest import fields, text
from gpuclust.accounting.ingest.fast import swar
from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.schema import (
    DICTIONARY_COLUMNS,
    FETCH_DELIMITER,
    FETCH_FIELDS,
    RAW_FIELDS,
    SCHEMA,
)
from gpuclust.errors import InputError
from tests.unit.test_accounting_perf_equivalence import ROW, _bench, _mutate, dump, reference_paths

D = FETCH_DELIMITER.encode()
# String columns the direct reader dictionary-encodes (the others keep exactly their SCHEMA type).
DICT_COLUMNS = set(DICTIONARY_COLUMNS)


@contextlib.contextmanager
def small_pieces(monkeypatch: pytest.MonkeyPatch, pieces: int = 7,
                 read_block: int | None = 1 << 12) -> Iterator[dict[str, int]]:
    """Many pieces, chunks, groups and SWAR blocks (read_block must exceed the longest line): the options."""
    yield {"pieces": pieces, "min_piece_bytes": 1, "group_rows": 5, "swar_block_rows": 3,
           **({"read_block": read_block} if read_block else {})}


def parse_direct(data, delimiter: str, monkeypatch: pytest.MonkeyPatch, *, workers: int = 2, **options: Any):
    result = text.parse_parsable(data, delimiter, "x",
                                 options=ReaderOptions(fast=True, strict=True, workers=workers, **options))
    return result, result.reader


def parse_reference(data, delimiter: str, monkeypatch: pytest.MonkeyPatch):
    with reference_paths(monkeypatch) as options:
        return text.parse_parsable(bytes(data), delimiter, "x", options=options)


def assert_same(direct, ref) -> None:
    assert ref.table.schema.equals(SCHEMA)
    assert direct.table.num_rows == ref.table.num_rows
    assert direct.table.cast(SCHEMA).equals(ref.table)
    assert [str(p) for p in direct.problems] == [str(p) for p in ref.problems]
    assert (direct.rejected, direct.steps_dropped, direct.exit_codes_known, direct.notes) == (
        ref.rejected, ref.steps_dropped, ref.exit_codes_known, ref.notes)
    assert_types(direct.table)


def assert_types(table: pa.Table) -> None:
    assert table.column_names == SCHEMA.names
    for field in table.schema:
        if pa.types.is_dictionary(field.type):
            assert field.name in DICT_COLUMNS, field.name
            assert field.type == pa.dictionary(pa.int32(), pa.string())
            for chunk in table.column(field.name).chunks:
                values = chunk.dictionary.to_pylist()
                assert len(set(values)) == len(values), field.name  # distinct values only
                assert None not in values
        else:
            assert field.type == SCHEMA.field(field.name).type, field.name


def check(data: bytes, delimiter: str, monkeypatch: pytest.MonkeyPatch, *, expect: str | None = "direct",
          pieces: bool = False, read_block: int | None = 1 << 12, **options: Any):
    """Direct (with the given piece setup and options) vs reference; `expect`: the path the direct call must
    take."""
    if pieces:
        with small_pieces(monkeypatch, read_block=read_block) as small:
            direct, path = parse_direct(data, delimiter, monkeypatch, **small, **options)
    else:
        direct, path = parse_direct(data, delimiter, monkeypatch, **options)
    ref = parse_reference(data, delimiter, monkeypatch)
    if expect:
        assert path == expect
    assert_same(direct, ref)
    return direct


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("bench") / "sacct.txt"
    _bench().generate(path, 4000, seed=23)
    return path.read_bytes()


def _header_and_rows(data: bytes) -> tuple[bytes, list[bytes]]:
    lines = data.split(b"\n")
    return lines[0], lines[1:]


# ---- whole dumps ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|", "|#|"])
def test_generated_dump(generated, delimiter, pieces, monkeypatch):
    data = generated if delimiter == FETCH_DELIMITER else generated.replace(D, delimiter.encode())
    result = check(data, delimiter, monkeypatch, pieces=pieces)
    assert result.table.num_rows > 3000
    assert pa.types.is_dictionary(result.table.schema.field("job_name").type)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|"])
def test_mutated_dump(generated, delimiter, seed, monkeypatch):
    """Bad values, steps, blank lines, invalid UTF-8 in names, multi-line comments, short records; a \\r
    (pyarrow ends a line there, the reference does not) sends the input to the reference."""
    data = _mutate(generated, seed)
    if delimiter != FETCH_DELIMITER:
        data = data.replace(D, b"|")
    has_cr = b"\r" in data.split(b"\n", 1)[1]
    ref_path = check(data, delimiter, monkeypatch, expect="reference" if has_cr else "direct", pieces=True)
    assert ref_path.rejected > 0
    without_cr = data.replace(b"\r", b"")
    check(without_cr, delimiter, monkeypatch, pieces=True)
    check(without_cr, delimiter, monkeypatch, pieces=False)


def _more_mutations(data: bytes, seed: int, delimiter: bytes) -> bytes:
    """Odd lines of every kind the line-level pass knows, spread over the dump (no \\r)."""
    rng = random.Random(seed)
    header, rows = _header_and_rows(data)
    out = [header]
    for line in rows:
        f = line.split(delimiter)
        if len(f) == len(FETCH_FIELDS) and rng.random() < 0.06:
            k = rng.randrange(12)
            if k == 0:
                # A lone split byte of the delimiter: pyarrow sees one field too many.
                f[2] = b"stray#sep" if delimiter == b"|#|" else b"stray\x1fsep"
            elif k == 1:
                f[2] = b"has" + delimiter + b"delim"  # the whole delimiter: a record with a field too many
            elif k == 2:
                f[3] = b"multi\n\nline"  # a blank line inside a record
            elif k == 3:
                f[2] = b"\n"
            elif k == 4:
                f = f[:3]  # a short record: joined with the following (good) lines
            elif k == 5:
                f[13] = b"Unknown"
            elif k == 6:
                f[11] = b"2026-02-30T00:00:00"
            elif k == 7:
                f[16] = b"cpu=1,,mem=2G"
            elif k == 8:
                f[0] += b".extern"
            elif k == 9:
                f[2] = b"\xc3(\xff"  # invalid UTF-8 in a whole line
            elif k == 10:
                f[15] = b"1-02:03:04"
            elif k == 11:
                out.append(b"   ")  # a line of spaces: blank
            line = delimiter.join(f)
        out.append(line)
    return b"\n".join(out)


@pytest.mark.parametrize("seed", [5, 6, 7])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|", "|#|"])
def test_more_mutations(generated, delimiter, seed, monkeypatch):
    data = generated if delimiter == FETCH_DELIMITER else generated.replace(D, delimiter.encode())
    data = _more_mutations(data, seed, delimiter.encode())
    check(data, delimiter, monkeypatch, pieces=True)
    check(data, delimiter, monkeypatch)


def test_every_record_broken_and_many_pieces(generated, monkeypatch):
    """Every record spans two lines: each piece boundary falls inside a record or between two."""
    header, rows = _header_and_rows(generated)
    broken = [r.replace(D + b"train-", D + b"tr\nain-", 1) for r in rows]
    data = b"\n".join([header, *broken])
    for pieces in (2, 13, 50):
        with small_pieces(monkeypatch, pieces=pieces) as small:
            direct, path = parse_direct(data, FETCH_DELIMITER, monkeypatch, **small)
        assert path == "direct"
        assert_same(direct, parse_reference(data, FETCH_DELIMITER, monkeypatch))


def test_one_worker(generated, monkeypatch):
    with small_pieces(monkeypatch) as small:
        direct, path = parse_direct(_more_mutations(generated, 8, D), FETCH_DELIMITER, monkeypatch, workers=1,
                                    **small)
    assert path == "direct"
    assert_same(direct, parse_reference(_more_mutations(generated, 8, D), FETCH_DELIMITER, monkeypatch))


# ---- blank lines: a record of empty fields in the reference's single pass, skipped in its line pass ----------


def _clean(generated: bytes) -> bytes:
    """Only whole records (no name with a newline or the delimiter)."""
    header, rows = _header_and_rows(generated)
    return b"\n".join([header, *(r for r in rows if r.count(D) == len(FETCH_FIELDS) - 1)]) + b"\n"


def test_blank_lines_in_a_clean_dump_are_empty_records(generated, monkeypatch):
    header, rows = _header_and_rows(_clean(generated))
    data = b"\n".join([header, *rows[:50], b"", *rows[50:100], b"", b""])
    result = check(data, FETCH_DELIMITER, monkeypatch, pieces=True)
    assert any("cannot parse JobID ''" in str(p) for p in result.problems)


@pytest.mark.parametrize("other", [b"short line", b"bad\xffutf8" + D + b"x"])
def test_blank_lines_with_an_odd_line_or_invalid_utf8_are_skipped(generated, other, monkeypatch):
    header, rows = _header_and_rows(_clean(generated))
    if other.startswith(b"bad"):  # invalid UTF-8 inside a whole record
        fields_ = rows[10].split(D)
        fields_[2] = b"bad\xffname"
        rows[10] = D.join(fields_)
        other = rows[11]
    data = b"\n".join([header, *rows[:50], b"", other, *rows[50:100], b""])
    result = check(data, FETCH_DELIMITER, monkeypatch, pieces=True)
    assert not any("cannot parse JobID ''" in str(p) for p in result.problems)


def test_double_spaced_dump(generated, monkeypatch):
    """A blank line after every line (broken records included); with too many, the reference reads it."""
    header, rows = _header_and_rows(generated)
    data = header + b"\n" + b"\n\n".join(rows)
    check(data, FETCH_DELIMITER, monkeypatch, pieces=True)
    check(_clean(generated).replace(b"\n", b"\n\n"), FETCH_DELIMITER, monkeypatch)
    check(data, FETCH_DELIMITER, monkeypatch, expect="reference", max_blank_candidates=10)


def test_line_of_separator_bytes_next_to_blank_lines_goes_to_the_reference(generated, monkeypatch):
    header, rows = _header_and_rows(_clean(generated))
    only_d0 = b"\x1f" * (len(FETCH_FIELDS) - 1)  # pyarrow reads it as the blank line reads
    data = b"\n".join([header, *rows[:20], b"", b"short", only_d0, *rows[20:40], b""])
    check(data, FETCH_DELIMITER, monkeypatch, expect="reference")
    # With no blank line around, the same line is a plain short record.
    data = b"\n".join([header, *rows[:20], only_d0, *rows[20:40], b""])
    check(data, FETCH_DELIMITER, monkeypatch, expect="reference")


def test_pipe_line_of_empty_fields_is_a_record(generated, monkeypatch):
    header, rows = _header_and_rows(_clean(generated).replace(D, b"|"))
    data = b"\n".join([header, *rows[:20], b"|" * (len(FETCH_FIELDS) - 1), *rows[20:40], b""])
    result = check(data, "|", monkeypatch)
    assert result.rejected == 1


# ---- edges ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"", b"\n", b"\n\n\n", b" \n", b"\x1f\n", b"x"])
def test_tiny_bodies(body, monkeypatch):
    data = D.join(f.encode() for f in FETCH_FIELDS) + b"\n" + body
    direct, _ = parse_direct(data, FETCH_DELIMITER, monkeypatch)
    assert_same(direct, parse_reference(data, FETCH_DELIMITER, monkeypatch))


def test_header_only_and_last_line_without_newline(generated, monkeypatch):
    header, rows = _header_and_rows(_clean(generated))
    parse_direct(header, FETCH_DELIMITER, monkeypatch)  # no body: the reference's empty result
    assert_same(parse_direct(header, FETCH_DELIMITER, monkeypatch)[0],
                parse_reference(header, FETCH_DELIMITER, monkeypatch))
    data = b"\n".join([header, *rows[:30]]).rstrip(b"\n")
    check(data, FETCH_DELIMITER, monkeypatch, pieces=True)
    broken_last = data + b"\nabc" + D + b"def"
    check(broken_last, FETCH_DELIMITER, monkeypatch, pieces=True)


def test_carriage_return_and_byte_order_mark(generated, monkeypatch):
    """CRLF line ends: the direct reader (CRLF reads as LF); a lone carriage return (pyarrow ends a line
    there) or a byte-order mark inside: the reference."""
    clean = _clean(generated)
    header, rows = _header_and_rows(clean)
    crlf = check(clean.replace(b"\n", b"\r\n"), FETCH_DELIMITER, monkeypatch, pieces=True)
    assert crlf.rejected == 0 and crlf.table.num_rows == check(clean, FETCH_DELIMITER, monkeypatch).table.num_rows
    lone = b"\n".join([header, *rows[:10], rows[10][:5] + b"\r" + rows[10][5:], *rows[11:40]]) + b"\n"
    check(lone.replace(b"\n", b"\r\n"), FETCH_DELIMITER, monkeypatch, expect="reference")
    check(clean.replace(b"\n", b"\r\n") + b"\r", FETCH_DELIMITER, monkeypatch, expect="reference")
    check(b"\n".join([header, b"\xef\xbb\xbf" + rows[0], *rows[1:]]), FETCH_DELIMITER, monkeypatch,
          expect="reference")
    # A byte-order mark starting a line further in: never the start of a piece.
    data = b"\n".join([header, *rows[:10], b"\xef\xbb\xbf" + rows[10], *rows[11:60]])
    check(data, FETCH_DELIMITER, monkeypatch, pieces=True, expect=None)


def test_invalid_utf8_in_a_broken_line_falls_back_quietly(generated, monkeypatch):
    """pyarrow decodes a line it cannot split strictly; invalid UTF-8 there fails its read (the reference then
    runs) without an 'unraisable' error on stderr."""
    header, rows = _header_and_rows(_clean(generated))
    data = b"\n".join([header, *rows[:10], b"short\xff line", *rows[10:20], b""])
    seen: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    check(data, FETCH_DELIMITER, monkeypatch, expect="reference")
    assert seen == []


@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|", ";", "\t", "#|", "|#|", "||#", "::", "¦", " \t"])
def test_delimiters(generated, delimiter, monkeypatch):
    data = _clean(generated).replace(D, delimiter.encode())
    # Split on a byte that occurs once in the delimiter (`|#|`: the `#`; the pipes around it are checked).
    # Not split on directly: no byte occurs once in it, a non-ASCII one (pyarrow), a delimiter of only blanks
    # (a line of it would be blank for one path and not the other).
    expect = "reference" if delimiter in ("::", "¦", " \t") else "direct"
    check(data, delimiter, monkeypatch, expect=expect, pieces=True)
    check(_more_mutations(data, 9, delimiter.encode()), delimiter, monkeypatch, expect=expect, pieces=True)


def test_other_field_orders_ignored_and_missing_fields(monkeypatch):
    rows = [dict(ROW, JobID=str(100 + i), JobIDRaw=str(100 + i), JobName=n, Comment=c, WCKey="w")
            for i, (n, c) in enumerate([("a", "x"), ("b\nc", "y"), ("d|e", "z|q"), ("", ""), ("f", "g\nh")] * 5)]
    orders = [
        ("Cluster", *RAW_FIELDS),  # an ignored first column
        tuple(reversed(RAW_FIELDS)),  # JobID last (with a prefix), NNodes first
        tuple(f for f in RAW_FIELDS if f not in ("WCKey", "Comment")),  # optional fields absent
        (*RAW_FIELDS, "Extra"),  # an extra column
        (*RAW_FIELDS, "JobName", "Extra"),  # a repeated name: rejected (issue 13; it was read, first wins)
    ]
    for order in orders:
        for delimiter in (FETCH_DELIMITER, "|"):
            lines = [delimiter.join(order)] + [delimiter.join(dict(r, Cluster="c1", Extra="e").get(f, "") for f in order)
                                               for r in rows]
            data = ("\n".join(lines) + "\n").encode()
            if len(set(order)) < len(order):
                with pytest.raises(InputError, match="duplicate column 'JobName'"):
                    text.parse_parsable(data, delimiter, "x")
                continue
            check(data, delimiter, monkeypatch, pieces=True)
            check(data, delimiter, monkeypatch)


def test_record_swallows_good_lines(generated, monkeypatch):
    """A short line is joined with the following whole lines until it has every field (then reported)."""
    header, rows = _header_and_rows(_clean(generated))
    data = b"\n".join([header, *rows[:10], b"1" + D + b"2", *rows[10:40], b""])
    result = check(data, FETCH_DELIMITER, monkeypatch, pieces=True)
    assert result.rejected >= 1
    with_ignored = b"\n".join([header + D + b"Extra", *(r + D + b"e" for r in rows[:10]), b"1" + D + b"2",
                               *(r + D + b"e" for r in rows[10:40]), b""])
    check(with_ignored, FETCH_DELIMITER, monkeypatch, expect=None)  # cannot rebuild the line: either path, same result


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview, pa.py_buffer, "mmap"])
def test_input_buffers(generated, kind, tmp_path, monkeypatch):
    data = _more_mutations(generated, 10, D)
    ref = parse_reference(data, FETCH_DELIMITER, monkeypatch)
    if kind == "mmap":
        path = tmp_path / "d.txt"
        path.write_bytes(data)
        with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            direct, where = parse_direct(mm, FETCH_DELIMITER, monkeypatch)
            assert_same(direct, ref)
            del direct
    else:
        direct, where = parse_direct(kind(data), FETCH_DELIMITER, monkeypatch)
        assert_same(direct, ref)
    assert where == "direct"
    assert_same(parse_input(kind(data) if kind != "mmap" else data, FETCH_DELIMITER, "x"), ref)


@pytest.mark.parametrize("mmap_from", [0, 1 << 40])
def test_read_input_maps_or_reads(generated, tmp_path, mmap_from, monkeypatch):
    path = tmp_path / "dump.txt"
    path.write_bytes(generated)
    got = pipeline.read_input(str(path), FETCH_DELIMITER, mmap_min_bytes=mmap_from)
    ref = parse_reference(generated, FETCH_DELIMITER, monkeypatch)
    assert got.table.cast(SCHEMA).equals(ref.table.cast(SCHEMA).cast(SCHEMA))
    assert [str(p).replace(str(path), "x") for p in got.problems] == [str(p) for p in ref.problems]
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(Exception, match="empty input"):
        pipeline.read_input(str(empty), FETCH_DELIMITER)


# ---- property: any names and comments ---------------------------------------------------------------------------

_free_text = st.lists(
    st.one_of(st.sampled_from(list("|\n\"' ,;=:\x1f\x1e\x1d\x1c\t") + ["\x1f|\x1e", "é", "名", "\ufeff", "team=ml", "\n\n"]),
              st.characters(blacklist_categories=("Cs",), blacklist_characters="\r")),
    max_size=10,
).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_free_text, _free_text), min_size=1, max_size=12),
       delimiter=st.sampled_from([FETCH_DELIMITER, "|", ";", "|#|"]), pieces=st.sampled_from([0, 1, 2, 5]),
       tail=st.sampled_from([b"\n", b"", b"\n\n"]))
def test_any_names_same_result(monkeypatch, pairs, delimiter, pieces, tail):
    rows = [dict(ROW, JobID=str(1000 + i), JobIDRaw=str(1000 + i), JobName=n, Comment=c)
            for i, (n, c) in enumerate(pairs)]
    data = dump(rows, delimiter).rstrip(b"\n") + tail
    small = {"pieces": pieces, "min_piece_bytes": 1, "group_rows": 2, "swar_block_rows": 2} if pieces else {}
    direct, _ = parse_direct(data, delimiter, monkeypatch, **small)
    assert_same(direct, parse_reference(data, delimiter, monkeypatch))


# ---- the fixed-width parsers ------------------------------------------------------------------------------------

_time_text = st.one_of(
    st.text(alphabet="0123456789-T: x", min_size=19, max_size=19),
    st.datetimes().map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S")),
    st.builds(lambda y, mo, d, h, mi, s: f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}",
              st.integers(1995, 2105), st.integers(0, 13), st.integers(0, 32), st.integers(0, 25),
              st.integers(0, 61), st.integers(0, 61)),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_time_text, min_size=1, max_size=40), prefix=st.sampled_from([b"", b"|\x1e", b"|", b"abcdefgh"]))
def test_fixed_times_agree_with_the_reference(values, prefix):
    raw = [prefix + v.encode() for v in values]
    ok_len = [len(r) == len(prefix) + 19 for r in raw]
    rows = [r for r, ok in zip(raw, ok_len, strict=True) if ok]
    if not rows:
        return
    epoch, ok = swar.fixed_times(np.frombuffer(b"".join(rows), dtype=np.uint8), 0, len(rows), prefix)
    ref, bad = fields._v_time_ref(pa.array([r[len(prefix):].decode() for r in rows]))
    ref_values = ref.cast(pa.int64()).to_pylist()
    for i in np.flatnonzero(ok):
        assert not bad[i] and ref_values[i] == epoch[i]
    # Every plain valid time of 2000..2099 takes the fast path.
    for i, r in enumerate(rows):
        v = r[len(prefix):].decode()
        if not bad[i] and ref_values[i] is not None and v.startswith("20") and v[10] == "T":
            year, month, day = int(v[:4]), int(v[5:7]), int(v[8:10])
            hour, minute, second = int(v[11:13]), int(v[14:16]), int(v[17:19])
            import calendar
            plain = (1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1] and hour < 24
                     and minute < 60 and second < 60)
            assert ok[i] or not plain, v
    wrong = b"".join(b"x" * len(prefix) + r[len(prefix):] for r in rows)
    if prefix:
        assert not swar.fixed_times(np.frombuffer(wrong, dtype=np.uint8), 0, len(rows), prefix)[1].any()


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.text(alphabet="0123456789:x-", min_size=8, max_size=8), min_size=1, max_size=30))
def test_fixed_clock_agrees_with_v_elapsed(values):
    secs, ok = swar.fixed_clock(np.frombuffer("".join(values).encode(), dtype=np.uint8), 0, len(values), b"")
    ref, bad = fields.v_elapsed(pa.array(values))
    for i in np.flatnonzero(ok):
        assert not bad[i] and ref[i].as_py() == secs[i]
    for i, v in enumerate(values):
        if v[2] == v[5] == ":" and (v[:2] + v[3:5] + v[6:]).isdigit():
            assert ok[i]


_job_text = st.one_of(
    st.text(alphabet="0123456789_+.[]-x", max_size=18),
    st.builds(lambda a, b: f"{a}_{b}", st.integers(0, 10**12), st.integers(0, 10**8)),
    st.integers(0, 10**17).map(str),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_job_text, min_size=1, max_size=40), lead=st.integers(0, 18))
def test_job_ids_swar_agrees_with_the_regex(values, lead):
    raw = pa.array(["9" * lead] + values, pa.string()).cast(pa.binary())  # a first value of any length
    data = np.frombuffer(raw.buffers()[2], dtype=np.uint8) if raw.buffers()[2] is not None else np.zeros(0, np.uint8)
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32)[: len(raw) + 1]
    base, task, has_task, ok = swar.job_ids_swar(data, offsets)
    ids, step, bad = fields._v_job_id_regex(raw.cast(pa.string()))
    for i in np.flatnonzero(ok):
        assert not bad[i] and not step[i]
        assert ids["het_offset"][i].as_py() is None and ids["array_pending"][i].as_py() is None
        assert base[i] == ids["job_base"][i].as_py()
        assert (task[i] if has_task[i] else None) == ids["array_task"][i].as_py()


_step_text = st.one_of(
    _job_text,
    st.builds(lambda job, step: f"{job}.{step}", _job_text, st.sampled_from(
        ["batch", "extern", "0", "12", "", ".", "a.b", "interactive", "é", "0+1"])),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_step_text, min_size=1, max_size=40), lead=st.integers(0, 18))
def test_step_ids_agree_with_the_regex(values, lead):
    """The direct reader's step ids (`123.batch`: the job part by the kernel) are what the regex gives."""
    from gpuclust.accounting.ingest.fast.direct.columns import _step_ids

    raw = pa.array(["9" * lead] + values, pa.string()).cast(pa.binary())
    data = np.frombuffer(raw.buffers()[2], dtype=np.uint8) if raw.buffers()[2] is not None else np.zeros(0, np.uint8)
    offsets = np.frombuffer(raw.buffers()[1], dtype=np.int32)[: len(raw) + 1]
    rows = np.arange(len(raw))
    found = _step_ids(raw, data, offsets, rows, 4)
    ids, step, bad = fields._v_job_id_regex(raw.cast(pa.string()))
    if found is None:
        return
    at, base, task, has_task = found
    for k, i in enumerate(at):
        assert not bad[i] and step[i], values
        assert ids["het_offset"][i].as_py() is None and ids["array_pending"][i].as_py() is None
        assert base[k] == ids["job_base"][i].as_py()
        assert (task[k] if has_task[k] else None) == ids["array_task"][i].as_py()
    # every plain step id of the usual shapes is taken
    for i, v in enumerate(raw.cast(pa.string()).to_pylist()):
        job, dot, name = v.partition(".")
        if dot and name and "." not in name and job.replace("_", "", 1).isdigit() and len(job) <= 16 \
                and not job.startswith("_") and not job.endswith("_") and job.count("_") <= 1 \
                and (("_" not in job) or len(job.split("_")[1]) <= 7) and i >= 1 and offsets[i] >= 16:
            assert i in set(at.tolist()), v


def test_rows_equal():
    a = np.frombuffer(b"abcdefghijklmnopqrstu" * 3, dtype=np.uint8)
    b = np.frombuffer(b"abcdefghijklmnopqrstu" + b"abcdefghijklmnopqrstX" + b"Xbcdefghijklmnopqrstu", dtype=np.uint8)
    assert swar.rows_equal(a, 0, b, 0, 3, 21).tolist() == [True, False, False]


def test_json_input_still_detected(tmp_path):
    path = tmp_path / "d.json"
    path.write_bytes(b'  \n {"jobs": []}')
    assert pipeline.read_input(str(path)).table.num_rows == 0


def test_extend_mixes_dictionary_and_plain_tables(generated, monkeypatch):
    direct, _ = parse_direct(_clean(generated), FETCH_DELIMITER, monkeypatch)
    plain = parse_reference(_clean(generated), FETCH_DELIMITER, monkeypatch)
    direct.extend(plain)
    assert direct.table.num_rows == 2 * plain.table.num_rows
    assert direct.table.cast(SCHEMA).equals(pa.concat_tables([plain.table, plain.table]))


# ---- column orders of users' dumps (issue 31) -------------------------------------------------------------------

_FREE = ("JobName", "Comment")
ORDERS = {
    "text-last": tuple(f for f in FETCH_FIELDS if f not in _FREE) + _FREE,  # as `--format ...,Comment` lines end
    "comment-last": tuple(f for f in FETCH_FIELDS if f != "Comment") + ("Comment",),
    "text-first": ("Comment", "JobName") + tuple(f for f in FETCH_FIELDS if f not in _FREE),
}


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|", "|#|"])
def test_messy_dump_in_any_column_order_takes_the_direct_reader(order, delimiter, tmp_path, monkeypatch):
    """Free text last (a newline there continues the record on the next lines) or first: the direct reader,
    not the line-level reference, and the reference's result exactly."""
    path = tmp_path / "sacct.txt"
    _bench().generate(path, 3000, seed=31, messy=True, delimiter=delimiter, order=order.replace("comment-last", "text-last"))
    data = path.read_bytes()
    if order == "comment-last":  # JobName back in its place: only Comment last
        header, rows = _header_and_rows(data)
        data = data.replace(header, delimiter.join(ORDERS["text-last"]).encode(), 1)
    for pieces in (False, True):
        check(data, delimiter, monkeypatch, pieces=pieces, read_block=1 << 14)
    # Saved with CRLF line ends (a dump passed through Windows): the same records, by the direct reader.
    crlf = check(data.replace(b"\n", b"\r\n"), delimiter, monkeypatch, pieces=True, read_block=1 << 14)
    assert crlf.table.cast(SCHEMA).equals(check(data, delimiter, monkeypatch).table.cast(SCHEMA))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(_free_text, _free_text), min_size=1, max_size=10),
       delimiter=st.sampled_from([FETCH_DELIMITER, "|", "|#|"]), order=st.sampled_from(sorted(ORDERS)),
       pieces=st.sampled_from([0, 1, 3]), tail=st.sampled_from([b"\n", b"", b"\n\n", b"\n\nx\n"]),
       crlf=st.booleans())
def test_any_names_in_any_column_order_same_result(monkeypatch, pairs, delimiter, order, pieces, tail, crlf):
    rows = [dict(ROW, JobID=str(1000 + i), JobIDRaw=str(1000 + i), JobName=n, Comment=c)
            for i, (n, c) in enumerate(pairs)]
    data = dump(rows, delimiter, fields=ORDERS[order]).rstrip(b"\n") + tail
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    small = {"pieces": pieces, "min_piece_bytes": 1, "group_rows": 2, "swar_block_rows": 2} if pieces else {}
    direct, _ = parse_direct(data, delimiter, monkeypatch, **small)
    assert_same(direct, parse_reference(data, delimiter, monkeypatch))


@pytest.mark.parametrize("order", ["text-last", "text-first"])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|#|"])
def test_newline_in_a_free_text_edge_value_keeps_its_row(order, delimiter, monkeypatch):
    """A record of one whole line and lines of free text before or after it (a newline in a first or last
    Comment) stays that line's row, its first or last value patched (records.Patch): the reference's result,
    without reading the line's values back. Blank lines inside the value, and a record with a `|`-free
    newline in JobName beside it, too."""
    from gpuclust.accounting.ingest.fast.direct import records

    comments = ["a\nb", "x\n\ny\nz", "plain", "", "team=ml\nproject=p1", "ünï\ncodé"]
    rows = [dict(ROW, JobID=str(500 + i), JobIDRaw=str(500 + i), JobName="n\nm" if i == 3 else f"n{i}", Comment=c)
            for i, c in enumerate(comments)]
    data = dump(rows, delimiter, fields=ORDERS[order])
    found: list[records.Records] = []
    real = records.locate_records

    def spy(*args: Any, **kwargs: Any) -> records.Records:
        found.append(real(*args, **kwargs))
        return found[-1]

    monkeypatch.setattr("gpuclust.accounting.ingest.fast.direct.locate_records", spy)
    direct = check(data, delimiter, monkeypatch)
    assert len(found[0].patches) == 4  # the rows whose Comment holds a newline
    assert direct.table.column("comment").to_pylist() == comments
    assert direct.table.column("job_name").to_pylist()[3] == "n\nm"


@pytest.mark.parametrize("block", [1, 2, 3, 5, 64])
def test_source_find_in_blocks_finds_the_first_match(block):
    """`_Source.find` searches bytes and mmaps block by block (the GIL is free between blocks): a match across
    a block's end is found, and the first one."""
    from gpuclust.accounting.ingest.textcommon import _Source

    data = b"xxabcxxabcabc" * 3
    src = _Source(data, scan_block=block)
    for sub in (b"abc", b"cab", b"xabcxx", b"a", b"zz", b""):
        for start in range(len(data) + 2):
            for end in (None, len(data), len(data) - 2, start + 3):
                assert src.find(sub, start, end) == data.find(sub, start, len(data) if end is None else end), (
                    sub, start, end)


# ---- narrow dumps: a site's own --format (issue 31) -------------------------------------------------------------

_ESSENTIAL = ("JobID", "State", "Start", "End")
_OPTIONAL = tuple(f for f in FETCH_FIELDS if f not in _ESSENTIAL)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(dropped=st.sets(st.sampled_from(_OPTIONAL)), pairs=st.lists(st.tuples(_free_text, _free_text), min_size=1, max_size=8),
       delimiter=st.sampled_from([FETCH_DELIMITER, "|", "|#|"]), shuffle=st.randoms(use_true_random=False),
       odd=st.sampled_from(["", "Unknown", "x", "01:00", "2026-13-40T00:00:00"]))
def test_narrow_dump_in_any_order_same_result(monkeypatch, dropped, pairs, delimiter, shuffle, odd):
    """A dump with fewer fields, in any order (JobIDRaw, JobName, ExitCode, Elapsed, NNodes, the times...
    absent): the direct reader, and the reference's result exactly, derived and unknown columns included."""
    fields = [f for f in FETCH_FIELDS if f not in dropped]
    shuffle.shuffle(fields)
    rows = [dict(ROW, JobID=f"{1000 + i}" if i % 3 else f"{1000 + i}.batch", JobIDRaw=str(1000 + i), JobName=n,
                 Comment=c, Eligible=odd if i == 1 else ROW["Eligible"]) for i, (n, c) in enumerate(pairs)]
    data = dump(rows, delimiter, fields=fields)
    direct, path = parse_direct(data, delimiter, monkeypatch)
    ref = parse_reference(data, delimiter, monkeypatch)
    assert_same(direct, ref)
    assert direct.missing_columns == ref.missing_columns
    assert path in ("direct", "reference")


def test_narrow_dump_whose_one_record_is_refused_knows_its_exit_codes(monkeypatch):
    """No ExitCode column, and the one record refused for its field count (a delimiter and a newline in its
    free text): no record reached the fields, so no exit code is unknown, in both readers. (A randomised run of
    the test above found the direct reader counting the blank line the refused record leaves.)"""
    data = b"JobID|JobName|Comment|State|Start|End\n1000|||\n\n|COMPLETED|2026-12-02T10:00:05|2026-12-02T11:00:05\n"
    direct, path = parse_direct(data, "|", monkeypatch)
    ref = parse_reference(data, "|", monkeypatch)
    assert path == "direct" and (direct.rejected, direct.exit_codes_known) == (1, True)
    assert_same(direct, ref)


@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|#|"])
def test_narrow_messy_dump_takes_the_direct_reader(delimiter, tmp_path, monkeypatch):
    """A generated messy dump cut down to a short --format (no JobIDRaw, QOS, Eligible, Elapsed, NNodes,
    ExitCode, Reason, usage): the direct reader, with JobIDRaw and Elapsed derived as the reference does."""
    path = tmp_path / "sacct.txt"
    _bench().generate(path, 3000, seed=5, messy=True, delimiter=delimiter, order="text-last")
    full = parse_reference(path.read_bytes(), delimiter, monkeypatch)
    short = ["JobID", "JobName", "User", "Account", "Partition", "State", "Submit", "Start", "End", "AllocTRES",
             "NodeList", "Comment"]
    rows = [{f: "" if v is None else str(v) for f, v in r.items()} for r in _raw_rows(path, delimiter)]
    data = dump(rows, delimiter, fields=short)
    direct = check(data, delimiter, monkeypatch, pieces=True, read_block=1 << 14)
    assert direct.missing_columns and "JobIDRaw" in direct.missing_columns
    assert direct.exit_codes_known is False
    assert direct.table.num_rows == full.table.num_rows


def _raw_rows(path, delimiter: str) -> list[dict[str, str]]:
    """The generated dump's records as field -> text (read by the reference's line-level rules)."""
    result = parse_reference(path.read_bytes(), delimiter, pytest.MonkeyPatch())
    table = result.table
    out = []
    for r in table.to_pylist():
        out.append({"JobID": r["job_id"], "JobName": r["job_name"], "User": r["user"], "Account": r["account"],
                    "Partition": r["partition"], "State": r["state_raw"],
                    "Submit": _iso(r["submit"]), "Start": _iso(r["start"]), "End": _iso(r["end"]),
                    "AllocTRES": r["alloc_tres"], "NodeList": r["nodelist"], "Comment": r["comment"]})
    return out


def _iso(value) -> str:
    return "Unknown" if value is None else value.strftime("%Y-%m-%dT%H:%M:%S")


@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|#|"])
@pytest.mark.parametrize("edge", ["Submit-last", "Submit-first", "Eligible-last"])
def test_eligible_like_submit_at_a_line_edge(delimiter, edge, monkeypatch):
    """Eligible is read beside Submit (a row whose bytes equal Submit's takes its value): where one of them is a
    line's first or last column its values carry the delimiter's bytes on one side only, and the rows are not
    compared (hypothesis found the strided view over the wrong width)."""
    name, where = edge.split("-")
    fields = [f for f in FETCH_FIELDS if f != name]
    fields = [name, *fields] if where == "first" else [*fields, name]
    rows = [dict(ROW, JobID=str(300 + i), JobIDRaw=str(300 + i), Submit=f"2026-12-02T10:0{i % 10}:00",
                 Eligible=f"2026-12-02T10:0{i % 10}:00" if i % 3 else "2026-12-02T11:00:00") for i in range(40)]
    data = dump(rows, delimiter, fields=tuple(fields))
    for pieces in (False, True):
        check(data, delimiter, monkeypatch, pieces=pieces)


def test_recorded_narrow_dump_takes_the_direct_reader(monkeypatch):
    """A real narrow dump: Aalto Triton's 51-column export recorded by slurm2sql (no QOS, Eligible, AllocTRES,
    Reason; tests/data/accounting/public/SOURCES.md). The direct reader reads it, with the reference's result
    exactly and the same unknowns named."""
    from pathlib import Path

    recorded = Path(__file__).resolve().parent.parent / "data" / "accounting" / "public" / "slurm2sql-test-data1.txt"
    data = recorded.read_bytes()
    direct = check(data, "|", monkeypatch)
    assert direct.missing_columns
    assert direct.missing_columns == parse_reference(data, "|", monkeypatch).missing_columns


def _usage_mutations(data: bytes, delimiter: bytes, seed: int) -> bytes:
    """Step rows broken over two lines by a newline in their name (so that their usage comes with the records
    joined across lines), bad usage values and malformed lists: in every list of the step, or in its last one
    only (the generator writes Ave, Max, Tot in that order: Tot then differs from Max)."""
    rng = random.Random(seed)
    out = []
    for line in data.split(b"\n"):
        if b"gres/gpuutil=" in line and rng.random() < 0.15:
            if rng.random() < 0.3:
                line = line.replace(delimiter + b"batch" + delimiter, delimiter + b"ba\ntch" + delimiter, 1)
            old, new = rng.choice([(b"gres/gpuutil=", b"gres/gpuutil=x"), (b",mem=", b",oops,mem="),
                                   (b"cpu=", b"cpu=1e"), (b"gres/gpumem=", b"gres/gpumem=-")])
            line = line.replace(old, new) if rng.random() < 0.5 else new.join(line.rsplit(old, 1))
        out.append(line)
    return b"\n".join(out)


@pytest.mark.parametrize("order", ["fetch", "text-last", "text-first"])
@pytest.mark.parametrize("delimiter", [FETCH_DELIMITER, "|#|"])
def test_messy_dump_with_usage_same_figures_and_warnings(order, delimiter, tmp_path, monkeypatch):
    """Usage TRES on the steps, some steps joined across lines, bad values and malformed lists: the direct
    reader gives the reference's table, usage figures included, and the same usage warnings."""
    path = tmp_path / "sacct.txt"
    _bench().generate(path, 2500, seed=41, messy=True, usage=True, delimiter=delimiter, order=order)
    data = _usage_mutations(path.read_bytes(), delimiter.encode(), 3)
    with reference_paths(monkeypatch) as options:
        ref = text.parse_parsable(data, delimiter, "x", options=replace(options, slurm_version="24.11"))
    assert ref.usage_warnings > 10 and ref.table.num_rows > 500
    for pieces in (False, True):
        small = small_pieces(monkeypatch, read_block=1 << 15) if pieces else contextlib.nullcontext({})
        with small as setup:
            direct, path = parse_direct(data, delimiter, monkeypatch, slurm_version="24.11", **setup)
        assert path == "direct"
        assert_same(direct, ref)
        assert (direct.usage_warnings, direct.usage_problems) == (ref.usage_warnings, ref.usage_problems)
    assert pa.compute.sum(direct.table.column("gpu_busy_gpu_s")).as_py() > 0
