"""Front end 1: ``sacct --parsable2`` text with a header line, in any (multi-character) delimiter.

Records are found by counting fields: a physical line with fewer than N-1 delimiters is joined with the
following lines until the record has all N fields (a newline inside a job name splits a record over lines).

Two readers give the same result:

* the direct reader (`_direct`, used when it can vouch for the result): pyarrow.csv over the input bytes as
  they are (a memory-mapped file is not copied), split on the delimiter's first byte in a few pieces side by
  side; each field then starts with the delimiter's rest, which is checked. The few lines that are not whole
  records are joined as below; the fields are parsed by kernels over the raw bytes and once per distinct
  value; string columns come out dictionary-encoded.
* the reference (`_reference`): the delimiter is swapped for a single byte that does not occur in the data,
  and pyarrow.csv tokenises the text. Only if some line does not have exactly N fields does a line-level
  pass run; it is still vectorised over the good lines and loops in Python only over the odd ones.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import io
import mmap
import re
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuclust.accounting import fields
from gpuclust.accounting.normalize import DEFAULT_OPTIONS, ParseResult, ReaderOptions, finish, normalize
from gpuclust.accounting.registry import Registry, SacctField
from gpuclust.errors import InputError, Problem

# Bytes that may stand in for a multi-character delimiter, tried in order; one absent from the data is used.
_STAND_INS = [bytes([b]) for b in (0x1F, 0x1E, 0x1D, 0x1C, *range(0x01, 0x09), 0x0B, *range(0x0E, 0x1C))]


def decode_delimiter(text: str) -> str:
    """`--delimiter` value: backslash escapes (``\\x1f|\\x1e``, ``\\t``) are decoded; empty is refused."""
    given = text
    try:
        if "\\" in text:
            text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
        text.encode("utf-8")
    except UnicodeError as exc:  # `\x` without hex digits, a lone `\`, bytes that are no text
        why = exc.reason if isinstance(exc, UnicodeDecodeError | UnicodeEncodeError) else str(exc)
        raise InputError(f"bad delimiter {given!r}: {why} (escapes: \\t, \\xHH, \\\\)") from None
    if not text or "\n" in text or "\r" in text:
        raise InputError(f"bad delimiter {given!r}: must be non-empty and without newlines")
    return text


def parse_parsable(
    data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer, delimiter: str = "|", source: str = "<input>",
    *, options: ReaderOptions = DEFAULT_OPTIONS,
) -> ParseResult:
    """Parse a --parsable2 dump (header line first) into the normalized schema.

    `data` may be any buffer (a memory-mapped file is read without a copy). The direct reader
    (`_direct`) handles it where it can be sure to give the reference's result; anything else (and every
    input while ``options.fast`` is off) goes through the reference (`_reference`); the result's `reader`
    says which ran."""
    registry = options.registry
    delim = delimiter.encode("utf-8")
    if not delim or b"\n" in delim:
        raise InputError(f"bad delimiter {delimiter!r}")
    src = _Source(data, options.scan_block)
    head = 3 if src.read(0, 3) == _BOM else 0  # a UTF-8 byte order mark before the header is no data
    header_end = src.find(b"\n", head)
    header_line = src.read(head, src.size if header_end < 0 else header_end)
    header = header_line.rstrip(b"\r").decode("utf-8", "replace").split(delimiter)
    if not header_line.strip():
        raise InputError(Problem(source, 1, "empty input: expected a header line of sacct field names"))
    seen: dict[str, int] = {}
    for col, name in enumerate(header, start=1):
        if name in seen:
            raise InputError(Problem(
                source, 1, f"duplicate column {name!r} in the header (columns {seen[name]} and {col}): "
                "which one holds the data is ambiguous", name))
        seen[name] = col
    missing = [name for name in registry.required if name not in header]
    if missing:
        raise InputError(
            Problem(
                source, 1,
                f"header lacks required field(s) {', '.join(missing)} (delimiter {delimiter!r}; "
                f"header starts {header_line[:80]!r})",
            )
        )
    if options.fast and header_end >= 0:
        result = _direct(src, header_end + 1, delim, header, source, options)
        if result is not None:
            result.reader = "direct"
            return result
    whole = src.tobytes()
    body = b"" if header_end < 0 else whole[header_end + 1 :]
    del whole
    result = _reference(body, delim, header, source, options)
    result.reader = "reference"
    return result


def _reference(body: bytes, delim: bytes, header: list[str], source: str, opts: ReaderOptions) -> ParseResult:
    """The reference: the delimiter swapped for a free byte, pyarrow.csv over the whole body, and the
    line-level pass where any line is not a whole record."""
    if len(delim) == 1:
        sep = delim
    else:
        sep = next((c for c in _STAND_INS if c not in body), b"")
        if not sep:  # pathological: every stand-in byte occurs in the data
            return _line_level(body, delim, header, source, opts)
        body = _replace(body, delim, sep, opts)
    blank_line = body.startswith(b"\n") or b"\n\n" in body
    result = None if blank_line and _tail_continuation(header, opts) else _fast(body, sep, header, source, opts)
    if result is None:
        result = _line_level(body, sep, header, source, opts, original=delim)
    return result


def _replace(body: bytes, old: bytes, new: bytes, opts: ReaderOptions = DEFAULT_OPTIONS) -> bytes:
    """``body.replace(old, new)``; on a large body, pieces cut at newlines (which `old` never holds, so no
    match spans a cut) are replaced side by side by the pyarrow kernel, which releases the GIL."""
    if len(body) < opts.parallel_replace_bytes or opts.workers == 1:
        return body.replace(old, new)
    pieces = 4 * opts.workers
    cuts = [0]
    for k in range(1, pieces):
        at = body.find(b"\n", max(cuts[-1], len(body) * k // pieces))
        if at < 0:
            break
        cuts.append(at + 1)
    cuts.append(len(body))
    cuts = sorted(set(cuts))
    offsets = pa.py_buffer(np.array(cuts, dtype=np.int64))
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(cuts) - 1, [None, offsets, pa.py_buffer(body)])
    pattern, replacement = old.decode("utf-8"), new.decode("utf-8")

    def one(k: int) -> pa.Buffer | bytes:
        out = pc.replace_substring(arr.slice(k, 1), pattern, replacement)
        piece = out[0].as_buffer()  # joined below straight from the Arrow buffer: one copy less
        return b"" if piece is None else piece

    with ThreadPoolExecutor(max_workers=opts.workers) as pool:
        return b"".join(pool.map(one, range(len(cuts) - 1)))


def _wanted(header: list[str], opts: ReaderOptions) -> list[str]:
    return [name for name in opts.registry.raw if name in header]


def _read_csv(
    data: bytes, sep: bytes, header: list[str], wanted: list[str], kind: pa.DataType,
    on_invalid: Callable[[object], str],
) -> pa.Table:
    """pyarrow.csv with sacct's rules: one-byte delimiter, no quoting or escaping, no newlines inside values,
    the `wanted` columns only, read as `kind` (string or binary). Raises pa.ArrowInvalid."""
    # Column names must be unique for pyarrow; ignored columns get placeholder names.
    names = [name if name in wanted and header.index(name) == i else f"_ignored{i}" for i, name in enumerate(header)]
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
        parse_options=pacsv.ParseOptions(
            delimiter=sep.decode("latin-1"), quote_char=False, escape_char=False,
            newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=on_invalid,
        ),
        convert_options=pacsv.ConvertOptions(
            column_types={name: kind for name in wanted},
            include_columns=wanted, strings_can_be_null=False, quoted_strings_can_be_null=False,
        ),
    )


def _fast(body: bytes, sep: bytes, header: list[str], source: str, opts: ReaderOptions) -> ParseResult | None:
    """pyarrow.csv over the whole body; None when any line is not a whole record."""
    if not body.strip(b"\n"):
        return _from_columns({}, np.zeros(0, dtype=np.int64), header, source, [], opts)
    invalid: list[int] = []

    def on_invalid(row: object) -> str:
        # The first row that is not a whole record decides (None): stop there instead of tokenising the rest.
        invalid.append(1)
        return "error"

    on_invalid._direct_reader = _DecodeFailure()  # type: ignore[attr-defined]
    wanted = _wanted(header, opts)
    try:
        with _quiet_row_decode():
            table = _read_csv(body, sep, header, wanted, pa.string(), on_invalid)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None  # e.g. invalid UTF-8: the line-level pass decodes with replacement and reports
    if invalid:
        return None
    lines = np.arange(2, table.num_rows + 2, dtype=np.int64)
    cols = {name: table.column(name).combine_chunks() for name in wanted}
    return _from_columns(cols, lines, header, source, [], opts)


SCAN_BLOCK = DEFAULT_OPTIONS.scan_block


def _positions(buf: np.ndarray, byte: int, block: int = SCAN_BLOCK) -> np.ndarray:
    """``np.flatnonzero(buf == byte)`` in blocks: the compare mask stays small and in cache instead of being a
    fresh array as large as the body (whose page faults cost more than the scan)."""
    parts = [np.flatnonzero(buf[a : a + block] == byte) + a for a in range(0, len(buf), block)]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _counts_between(buf: np.ndarray, byte: int, bounds: np.ndarray, block: int = SCAN_BLOCK) -> np.ndarray:
    """``np.diff(np.searchsorted(np.flatnonzero(buf == byte), bounds))`` for sorted `bounds`, in blocks (no
    array of every hit): the hits before each bound are those of earlier blocks plus those in its own."""
    before = np.empty(len(bounds), np.int64)
    total = 0
    lo = 0
    for a in range(0, len(buf), block):
        b = min(a + block, len(buf))
        hi = int(np.searchsorted(bounds, b, side="left"))
        hits = np.flatnonzero(buf[a:b] == byte) + a
        before[lo:hi] = total + np.searchsorted(hits, bounds[lo:hi])
        total += len(hits)
        lo = hi
    before[lo:] = total
    return np.diff(before)


class _Lines:
    """The physical lines of `body` (split on b"\\n", a final empty piece dropped, as ``body.split``) without
    making a Python object per line: line i is ``body[start[i]:end[i]]``."""

    def __init__(self, body: bytes, sep: bytes, scan_block: int = SCAN_BLOCK) -> None:
        self.body = body
        self.sep = sep
        self.scan_block = scan_block
        if not body:
            self.start = np.zeros(0, np.int64)
            self.end = np.zeros(0, np.int64)
        else:
            nl = _positions(np.frombuffer(body, dtype=np.uint8), 0x0A, scan_block)
            self.start = np.concatenate([np.zeros(1, np.int64), nl + 1])
            self.end = np.concatenate([nl, np.array([len(body)], np.int64)])
            if body.endswith(b"\n"):
                self.start, self.end = self.start[:-1], self.end[:-1]
        self._counts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start)

    def __getitem__(self, i: int) -> bytes:
        return self.body[int(self.start[i]) : int(self.end[i])]

    def span(self, i: int, j: int) -> bytes:
        """Lines i..j joined by b"\\n" (exactly as they stand in the body)."""
        return self.body[int(self.start[i]) : int(self.end[j])]

    def array(self) -> pa.Array:
        """A zero-copy binary array of the lines, each with its trailing newline (never a separator byte)."""
        # Line i runs to the start of line i+1; the last one to the end of the body.
        offsets = np.concatenate([self.start, np.array([len(self.body)], np.int64)])
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(self), [None, pa.py_buffer(offsets), pa.py_buffer(self.body)]
        )

    def counts(self) -> np.ndarray:
        """Separators per line (the same kernel and pattern as over ``pa.array(lines, pa.binary())``)."""
        if self._counts is None:
            if len(self) and len(self.sep) == 1:
                # One byte: find it with numpy and count the hits between line starts; the same counts as below.
                bounds = np.concatenate([self.start, np.array([len(self.body)], np.int64)])
                self._counts = _counts_between(np.frombuffer(self.body, dtype=np.uint8), self.sep[0], bounds,
                                               self.scan_block)
            elif len(self):
                self._counts = pc.count_substring(self.array(), self.sep.decode("latin-1")).to_numpy(zero_copy_only=False)
            else:
                self._counts = np.zeros(0, np.int64)
        return self._counts


def _line_level(
    body: bytes, sep: bytes, header: list[str], source: str, opts: ReaderOptions, original: bytes | None = None,
) -> ParseResult:
    """Find records by counting delimiters per physical line; join short lines; repair or report the rest."""
    nfields = len(header)
    physical = _Lines(body, sep, opts.scan_block)
    counts = physical.counts()
    good = counts == nfields - 1
    odd_idx = np.flatnonzero(~good)
    wanted = _wanted(header, opts)
    free = [header.index(name) for name in opts.registry.free_text if name in header]
    joined_sep = original or sep

    extra_rows: list[list[str]] = []
    extra_lines: list[int] = []
    problems: list[Problem] = []
    consumed = np.zeros(len(physical), dtype=bool)
    # A free-text last column (a plain dump ending in Comment): a newline in it puts the rest of the value on
    # the lines after a whole record. With JobID first, a record starts only on a line that starts with a
    # JobID; the lines after a record that do not (blank ones too) continue its last value.
    tail = _tail_continuation(header, opts)
    for odd in odd_idx:
        if consumed[odd]:
            continue
        start = int(odd)
        if tail and start > 0 and not _starts_record(physical[start], sep):
            if not good[start - 1]:  # (only after blank lines at the top)
                consumed[start] = True
                if physical[start].strip():
                    problems.append(Problem(source, start + 2, f"line continues no record: {physical[start][:120]!r}"))
                continue
            start -= 1  # the whole record before it: this line continues its last value
        elif physical[start].strip() == b"":
            consumed[start] = True  # a blank line between records holds no data
            continue
        acc, j = int(counts[start]), start
        while acc < nfields - 1 and j + 1 < len(physical):
            j += 1
            acc += int(counts[j])
        if tail:
            while j + 1 < len(physical) and not _starts_record(physical[j + 1], sep):
                j += 1
        i = start
        consumed[i : j + 1] = True
        good[i : j + 1] = False
        record = physical.span(int(i), j)
        values = [v.decode("utf-8", "replace") for v in record.split(sep)]
        if len(values) > nfields and free:
            # A plain `|` dump: extra separators came from the free-text fields (JobName, Comment).
            values = _repair(values, header, free, joined_sep.decode("utf-8", "replace"), opts) or values
        if len(values) != nfields:
            problems.append(
                Problem(source, int(i) + 2, f"record has {len(values)} fields, header has {nfields}: {record[:120]!r}")
            )
            continue
        extra_rows.append([values[header.index(name)] for name in wanted])
        extra_lines.append(int(i) + 2)

    good_idx = np.flatnonzero(good)
    lines = good_idx.astype(np.int64) + 2
    spliced = _read_spliced(physical, good, header, wanted, extra_lines, extra_rows) if extra_rows else None
    if spliced is not None:
        cols = spliced
        lines = np.concatenate([lines, np.array(extra_lines, dtype=np.int64)])
        lines = lines[np.argsort(lines, kind="stable")]
        return _from_columns(cols, lines, header, source, problems, opts)
    cols = _good_columns(physical, good, good_idx, header, wanted)
    if extra_rows:
        # The joined/repaired records go back in line order. They are few: splice them between slices of the
        # good rows (one copy of each column) rather than concatenating and re-taking every row.
        extra = np.array(extra_lines, dtype=np.int64)
        order = np.argsort(extra, kind="stable")
        at = np.searchsorted(lines, extra[order], side="right")
        bounds = [0, *at.tolist(), len(lines)]
        merged: dict[str, pa.Array] = {}
        for pos, name in enumerate(wanted):
            good_col = cols[name]
            extras = pa.array([extra_rows[int(k)][pos] for k in order], pa.string())
            pieces: list[pa.Array] = []
            for e in range(len(order) + 1):
                if bounds[e + 1] > bounds[e]:
                    pieces += _chunks(good_col.slice(bounds[e], bounds[e + 1] - bounds[e]))
                if e < len(order):
                    pieces.append(extras.slice(e, 1))
            merged[name] = pa.chunked_array(pieces, pa.string()).combine_chunks()
        cols = merged
        lines = np.concatenate([lines, extra])
        lines = lines[np.argsort(lines, kind="stable")]
    else:
        cols = {name: _single(col) for name, col in cols.items()}
    return _from_columns(cols, lines, header, source, problems, opts)


_JOB_ID_BYTES = re.compile(rb"[0-9]+(?:_[0-9]+|_\[[^\]]*\]|\+[0-9]+)?(?:\.[^.]+)?")  # (any length)


def _tail_continuation(header: list[str], opts: ReaderOptions) -> bool:
    """Whether lines after a whole record can continue its last value: the last column is free text and
    the first is JobID (which tells where a record starts)."""
    return len(header) > 1 and header[0] == "JobID" and header[-1] in opts.registry.free_text


def _starts_record(line: bytes, sep: bytes) -> bool:
    """Whether a line starts with a JobID and a separator (so it can start a record)."""
    at = line.find(sep)
    return at > 0 and _JOB_ID_BYTES.fullmatch(line, 0, at) is not None


def _chunks(col: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(col.chunks) if isinstance(col, pa.ChunkedArray) else [col]


def _single(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _good_columns(
    physical: _Lines, good: np.ndarray, good_idx: np.ndarray, header: list[str], wanted: list[str]
) -> dict[str, pa.Array | pa.ChunkedArray]:
    """The fields of the whole lines (exactly nfields-1 separators each), one string array per wanted field."""
    if not len(good_idx):
        return {name: pa.array([], pa.string()) for name in wanted}
    sep = physical.sep
    if len(sep) == 1:
        # Hot path: cut the good lines out of the body in a few large slices and let pyarrow.csv tokenise them
        # (multi-threaded). Only where pyarrow.csv could see other rows than the b"\n" split does (a \r, a
        # leading BOM) is the reference split below used.
        good_body = _select_lines(physical, good)
        if b"\r" not in good_body and not good_body.startswith(b"\xef\xbb\xbf"):
            table = _read_lines(good_body, sep, header, wanted)
            if table is not None and table.num_rows == len(good_idx):
                return {name: table.column(name) for name in wanted}
    # Reference: split each good line on the separator.
    arr = pa.array([physical[int(i)] for i in good_idx], pa.binary())
    split = pc.split_pattern(arr, sep.decode("latin-1"))
    return {name: _to_utf8(pc.list_element(split, header.index(name))) for name in wanted}


def _read_spliced(
    physical: _Lines, good: np.ndarray, header: list[str], wanted: list[str],
    extra_lines: list[int], extra_rows: list[list[str]],
) -> dict[str, pa.Array | pa.ChunkedArray] | None:
    """The good lines and the joined records in one pyarrow.csv pass, each joined record written back as one
    line at its place, its newlines swapped for a byte absent from the body and swapped back after reading.

    None (the caller merges the records itself) where that cannot be exact: a multi-byte separator, a value
    holding the separator (a repaired `|` dump) or a \r, or no free byte.
    """
    sep = physical.sep
    if len(sep) != 1:
        return None
    sep_text = sep.decode("latin-1")
    values_text = "".join("".join(row) for row in extra_rows)
    if sep_text in values_text or "\r" in values_text:
        return None
    placeholder = next((c for c in _STAND_INS if c != sep and c.decode("latin-1") not in values_text
                        and c not in physical.body), None)
    if placeholder is None:
        return None
    ph = placeholder.decode("latin-1")
    positions = {name: header.index(name) for name in wanted}
    inserts: list[tuple[int, bytes]] = []
    for line, row in zip(extra_lines, extra_rows, strict=True):
        fields = [""] * len(header)
        for pos, name in enumerate(wanted):
            fields[positions[name]] = row[pos].replace("\n", ph)
        inserts.append((line - 2, (sep_text.join(fields) + "\n").encode("utf-8")))
    data = _select_lines(physical, good, inserts)
    if b"\r" in data or data.startswith(b"\xef\xbb\xbf"):
        return None
    table = _read_lines(data, sep, header, wanted)
    if table is None or table.num_rows != int(good.sum()) + len(extra_rows):
        return None
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    for pos, name in enumerate(wanted):
        col = table.column(name)
        if any("\n" in row[pos] for row in extra_rows):
            col = pc.replace_substring(col, ph, "\n")
        cols[name] = col
    return cols


def _select_lines(physical: _Lines, good: np.ndarray, inserts: list[tuple[int, bytes]] | None = None) -> bytes:
    """The body with only the `good` lines (each with its newline): one slice per run of good lines.
    `inserts` (line index, bytes), in line order, go in before the good line of that index."""
    edges = np.diff(np.concatenate([[0], good.astype(np.int8), [0]]))
    run_start, run_end = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    offsets = np.concatenate([physical.start, np.array([len(physical.body)], np.int64)])
    body = physical.body
    if not inserts and len(run_start) == 1 and run_start[0] == 0 and run_end[0] == len(physical):
        return body
    pieces: list[bytes] = []
    k = 0
    pending = inserts or []
    for a, b in zip(run_start.tolist(), run_end.tolist(), strict=True):
        while k < len(pending) and pending[k][0] < a:
            pieces.append(pending[k][1])
            k += 1
        pieces.append(body[int(offsets[a]) : int(offsets[b])])
    pieces += [item for _, item in pending[k:]]
    return b"".join(pieces)


def _read_lines(data: bytes, sep: bytes, header: list[str], wanted: list[str]) -> pa.Table | None:
    """pyarrow.csv over lines that each hold exactly len(header) fields; binary columns (UTF-8 checked later,
    as in the reference path). None if pyarrow.csv disagrees about any row."""
    invalid: list[int] = []

    def on_invalid(row: object) -> str:
        invalid.append(1)
        return "skip"

    # Strings first (pyarrow checks UTF-8 in its worker threads); if some value is not UTF-8, read bytes and
    # decode each column as the reference path does (with replacement where needed).
    for kind in (pa.string(), pa.binary()):
        try:
            table = _read_csv(data, sep, header, wanted, kind, on_invalid)
        except pa.ArrowInvalid:
            continue
        if invalid:
            return None
        if kind == pa.binary():
            table = pa.table({name: _to_utf8(table.column(name).combine_chunks()) for name in wanted})
        return table
    return None


def _split_ways(extra: int, slots: int) -> list[tuple[int, ...]]:
    if slots == 1:
        return [(extra,)]
    return [(first, *rest) for first in range(extra + 1) for rest in _split_ways(extra - first, slots - 1)]


def _repair(values: list[str], header: list[str], free: list[int], sep: str, opts: ReaderOptions) -> list[str] | None:
    """Give the extra fields to the free-text columns in the one way that leaves every other field valid.

    None when no way, or more than one way, works (the record is then reported, not guessed).
    """
    extra = len(values) - len(header)
    order = sorted(free)
    valid: list[list[str]] = []
    for shares in _split_ways(extra, len(order)):
        out: list[str] = []
        pos = 0
        for col in range(len(header)):
            take = 1 + (shares[order.index(col)] if col in order else 0)
            out.append(sep.join(values[pos : pos + take]))
            pos += take
        if opts.registry.plausible(dict(zip(header, out, strict=True))):
            valid.append(out)
    return valid[0] if len(valid) == 1 else None


def _to_utf8(col: pa.Array) -> pa.Array:
    try:
        return pc.cast(col, pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in col.to_pylist()], pa.string())


def _from_columns(
    cols: dict[str, pa.Array], lines: np.ndarray, header: list[str], source: str, problems: list[Problem],
    opts: ReaderOptions,
) -> ParseResult:
    n = len(lines)
    raw = {name: cols[name] if name in cols else pa.array([""] * n, pa.string()) for name in _wanted(header, opts)}
    known = pa.array(np.ones(n, dtype=bool))
    return normalize(raw, pa.array(lines), known, source, extra_problems=problems, options=opts)


# ==== the direct reader ======================================================================================
#
# pyarrow.csv straight over the input bytes (a memory-mapped file is never copied), split on the first byte
# d0 of the delimiter D: every field but a line's first then starts with the rest p = D[1:] of the delimiter,
# which is checked (and stripped where a value is needed), never swapped out of the text first. The body is
# read in a few pieces cut at newlines, side by side, one thread each (so pyarrow reports each line it
# cannot split with its line number). The few lines that are not whole records are joined as the reference
# joins them; the fields are parsed by the vectorised parsers (fixed-width ones eight bytes at a time, the
# repetitive ones once per distinct value).
#
# It returns the reference's result exactly, or None where it cannot be sure to (a carriage return or a
# byte-order mark in the body, a field that does not start with p, a line only of d0 bytes next to blank
# lines, a delimiter pyarrow cannot split on...); parse_parsable then runs the reference.

# (Its knobs are ReaderOptions fields: fast, strict, pieces, min_piece_bytes, read_block, group_rows,
# swar_block_rows, max_blank_candidates, workers.)

_BOM = b"\xef\xbb\xbf"
_DICT_BINARY = pa.dictionary(pa.int32(), pa.binary())


class _Fallback(Exception):
    """The direct reader cannot vouch for the reference's result on this input."""


class _Source:
    """The input, without a copy: a pa.Buffer for pyarrow, `find` (memchr speed on bytes and mmap)."""

    def __init__(self, data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer,
                 scan_block: int = SCAN_BLOCK) -> None:
        self.obj = data
        self.scan_block = scan_block
        self.buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        self.size = self.buffer.size
        self._find = data.find if isinstance(data, bytes | bytearray | mmap.mmap) else None

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        if self._find is not None:
            return int(self._find(sub, start, end))
        if len(sub) == 1:
            arr = np.frombuffer(self.buffer, dtype=np.uint8)
            for a in range(start, end, self.scan_block):
                hits = np.flatnonzero(arr[a : min(a + self.scan_block, end)] == sub[0])
                if len(hits):
                    return a + int(hits[0])
            return -1
        at = self.read(start, end).find(sub)
        return at + start if at >= 0 else -1

    def read(self, start: int, end: int) -> bytes:
        start = max(0, min(start, self.size))
        end = max(start, min(end, self.size))
        return self.buffer.slice(start, end - start).to_pybytes()

    def tobytes(self) -> bytes:
        return self.obj if isinstance(self.obj, bytes) else self.buffer.to_pybytes()


class _DecodeFailure:
    row_decode_failed = False


@contextlib.contextmanager
def _quiet_row_decode() -> Iterator[None]:
    """pyarrow decodes a line it cannot split (strictly, as UTF-8) before it calls the handler; a line that is
    not UTF-8 fails there, the read fails (and the caller falls back), and Python prints the error as
    'unraisable'. Keep that one quiet; anything else goes to the usual hook."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        reader = getattr(unraisable.object, "_direct_reader", None)
        if isinstance(unraisable.exc_value, UnicodeDecodeError) and reader is not None:
            reader.row_decode_failed = True
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _direct(src: _Source, body_start: int, delim: bytes, header: list[str], source: str,
            opts: ReaderOptions) -> ParseResult | None:
    d0, rest = delim[:1], delim[1:]
    if (d0 in b"\r\n" or d0 in rest or b"\r" in delim or d0[0] >= 0x80 or d0 == b"\0"
            or (len(delim) > 1 and not delim.strip())):
        return None  # pyarrow cannot split on it, or a line's blankness would differ from the reference's
    if body_start >= src.size or src.read(body_start, body_start + 3) == _BOM:
        return None
    try:
        with _quiet_row_decode():
            return _Direct(src, body_start, delim, header, source, opts).run()
    except _Fallback:
        return None
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError, IndexError, KeyError):
        if opts.strict:
            raise
        return None


def _parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, offsets) of a binary array, offsets for its own rows (len + 1 of them)."""
    bufs = arr.buffers()
    kind = np.int64 if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=kind)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(8, dtype=np.uint8)
    return data, offsets


def _empty_values(col: _Column, rows: np.ndarray) -> np.ndarray:
    """Whether the value of `col` in each of the good rows `rows` (sorted) is empty."""
    out = np.zeros(len(rows), dtype=bool)
    which = np.searchsorted(col.starts, rows, side="right") - 1
    for k in np.unique(which).tolist():
        sel = np.flatnonzero(which == k)
        local = rows[sel] - int(col.starts[k])
        chunk = col.chunks[k]
        if pa.types.is_dictionary(chunk.type):
            lengths = np.asarray(pc.binary_length(chunk.dictionary).to_numpy(zero_copy_only=False))
            out[sel] = lengths[_indices(chunk)[local]] == 0
        else:
            _, offsets = _parts(chunk)
            out[sel] = offsets[local + 1] == offsets[local]
    return out


def _indices(arr: pa.DictionaryArray) -> np.ndarray:
    return np.asarray(arr.indices.to_numpy(zero_copy_only=False), dtype=np.int32)


def _decode(values: list[bytes]) -> tuple[list[str], bool]:
    """UTF-8 text of each value (invalid bytes replaced, as the reference does) and whether all were valid."""
    out: list[str] = []
    valid = True
    for v in values:
        try:
            out.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(v.decode("utf-8", "replace"))
            valid = False
    return out, valid


def _to_strings(arr: pa.Array) -> tuple[pa.Array, bool]:
    """A binary array as strings (replacing invalid UTF-8 as the reference does), and whether it was valid."""
    try:
        return pc.cast(arr, pa.string()), True
    except pa.ArrowInvalid:
        text, _ = _decode(arr.to_pylist())
        return pa.array(text, pa.string()), False


@dataclass
class _Column:
    """One field as read: its chunks (binary, or dictionary<int32, binary>) over the good rows of every piece,
    each value starting with the delimiter's rest (`plen` bytes; 0 for a line's first field)."""

    name: str
    plen: int
    chunks: list[pa.Array]
    starts: np.ndarray  # the good row each chunk starts at; starts[-1] = number of rows

    def value(self, row: int) -> bytes:
        k = int(np.searchsorted(self.starts, row, side="right")) - 1
        value = self.chunks[k][row - int(self.starts[k])].as_py()
        return b"" if value is None else bytes(value)


class _Direct:
    def __init__(self, src: _Source, body_start: int, delim: bytes, header: list[str], source: str,
                 opts: ReaderOptions) -> None:
        self.src, self.body_start, self.delim, self.header, self.source = src, body_start, delim, header, source
        self.opts = opts
        self.reg = opts.registry
        self.d0, self.rest = delim[:1], delim[1:]
        self.delim_text = delim.decode("utf-8")
        self.nfields = len(header)
        self.wanted = _wanted(header, opts)
        self.positions = [header.index(name) for name in self.wanted]
        self.names = [name if name in opts.registry.raw and header.index(name) == i else f"_ignored{i}"
                      for i, name in enumerate(header)]
        self.first = self.names[0]
        self.read = self.wanted + ([self.first] if self.first not in self.wanted else [])
        self.complete = len(self.read) == self.nfields  # a good line can be rebuilt from its values
        self.utf8_ok = True
        self.row_decode_failed = False
        self.cols: dict[str, _Column] = {}
        self.pool: ThreadPoolExecutor | None = None

    # ---- reading ------------------------------------------------------------------------------------

    def run(self) -> ParseResult:
        with ThreadPoolExecutor(max_workers=self.opts.workers) as pool:
            self.pool = pool
            self._read_pieces()
            self.candidates = self._blank_candidates()
            # The work that needs no line order starts now, in the pool, while this thread joins the lines
            # that are not whole records (Python) and puts the rows in order.
            prepare: dict[str, Callable[[], Any]] = {}
            for fd in self.reg.fields:
                if fd.direct == "dict":
                    prepare[fd.name] = functools.partial(self._dict_prepare, fd.name)
                elif fd.direct == "int":
                    prepare[fd.name] = functools.partial(self._int_prepare, fd.name)
            for key, group in _fixed_groups(self.reg).items():
                prepare[key] = functools.partial(self._fixed_prepare, group)
            self.prepared = self._start(prepare)
            self._classify()
            return self._build()

    def _start(self, tasks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        """Futures of `tasks` in the pool (run at once, in order, with one worker)."""
        if self.pool is None or self.opts.workers == 1:
            out: dict[str, Any] = {}
            for name, task in tasks.items():
                fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
                fut.set_result(task())
                out[name] = fut
            return out
        return {name: self.pool.submit(task) for name, task in tasks.items()}

    def _map(self, func: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if self.pool is None or self.opts.workers == 1 or len(items) < 2:
            return [func(item) for item in items]
        return list(self.pool.map(func, items))

    def _cuts(self) -> list[int]:
        size = self.src.size - self.body_start
        k = max(1, min(self.opts.pieces or 2 * self.opts.workers, size // max(1, self.opts.min_piece_bytes)))
        cuts = [self.body_start]
        for i in range(1, k):
            target = max(self.body_start + size * i // k, cuts[-1])
            nl = self.src.find(b"\n", target)
            if nl < 0 or nl + 1 >= self.src.size:
                break
            if self.src.read(nl + 1, nl + 4) == _BOM:
                continue  # pyarrow would drop a byte-order mark at the start of a piece
            cuts.append(nl + 1)
        cuts.append(self.src.size)
        return cuts

    def _read_piece(self, span: tuple[int, int]) -> tuple[pa.Table, list[tuple[int | None, str]]]:
        a, b = span
        if self.src.find(b"\r", a, b) >= 0:
            raise _Fallback("carriage return: pyarrow ends a line there, the reference does not")
        invalid: list[tuple[int | None, str]] = []

        def on_invalid(row: Any) -> str:
            invalid.append((row.number, row.text))
            return "skip"

        on_invalid._direct_reader = self  # type: ignore[attr-defined]
        types = {name: (_DICT_BINARY if name in self.reg.dictionary else pa.binary()) for name in self.read}
        try:
            return self._read_csv(a, b, on_invalid, types), invalid
        except pa.ArrowInvalid as exc:
            # A line longer than a block, a line pyarrow cannot decode for the handler (not UTF-8)...: the
            # reference reads what pyarrow cannot.
            raise _Fallback(f"pyarrow.csv: {exc}") from None

    def _read_csv(self, a: int, b: int, on_invalid: Callable[[Any], str], types: dict[str, pa.DataType]) -> pa.Table:
        return pacsv.read_csv(
            pa.BufferReader(self.src.buffer.slice(a, b - a)),
            read_options=pacsv.ReadOptions(column_names=self.names, block_size=self.opts.read_block, use_threads=False),
            parse_options=pacsv.ParseOptions(
                delimiter=self.d0.decode("latin-1"), quote_char=False, escape_char=False,
                newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types, include_columns=self.read, strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )

    def _read_pieces(self) -> None:
        cuts = self._cuts()
        parts = self._map(self._read_piece, list(zip(cuts[:-1], cuts[1:], strict=True)))
        g_lines: list[np.ndarray] = []
        self.invalid: dict[int, bytes] = {}
        line0 = 2
        for table, invalid in parts:
            numbers = sorted(number for number, _ in invalid if number is not None)
            if len(numbers) != len(invalid):
                raise _Fallback("no line number for a line pyarrow could not split")
            nlines = table.num_rows + len(invalid)
            local = np.arange(1, nlines + 1, dtype=np.int64)
            if numbers:
                local = np.delete(local, np.array(numbers, dtype=np.int64) - 1)
            g_lines.append(local + (line0 - 1))
            for number, text in invalid:
                self.invalid[line0 + int(number or 0) - 1] = text.encode("utf-8")
            line0 += nlines
        self.last_line = line0 - 1
        self.g_lines = np.concatenate(g_lines)
        self.n_g = len(self.g_lines)
        for name in self.read:
            chunks = [chunk for table, _ in parts for chunk in table.column(name).chunks]
            starts = np.zeros(len(chunks) + 1, dtype=np.int64)
            np.cumsum([len(c) for c in chunks], out=starts[1:])
            if int(starts[-1]) != self.n_g:
                raise _Fallback("column lengths differ")
            self.cols[name] = _Column(name, 0 if name == self.first else len(self.rest), chunks, starts)

    # ---- lines that are not whole records --------------------------------------------------------

    def _classify(self) -> None:
        n1 = self.nfields - 1
        self.counts = {line: text.count(self.delim) for line, text in self.invalid.items()}
        self.odd = any(c != n1 for c in self.counts.values())
        self.removed: set[int] = set()
        self.extras: list[tuple[int, list[str]]] = []
        self.problems: list[Problem] = []
        self.line_mode = self.odd  # decided later when no line is odd (blank lines are then the only question)
        if (self.odd or len(self.candidates)) and _tail_continuation(self.header, self.opts):
            raise _Fallback("lines that may continue a free-text last column: the reference reads them")
        if self.odd:
            self._stitch()

    def _blank_candidates(self) -> np.ndarray:
        """Good rows pyarrow made of an empty line: every value empty (a line of d0 bytes looks the same)."""
        col = self.cols[self.first]
        found: list[np.ndarray] = []
        for chunk, start in zip(col.chunks, col.starts[:-1].tolist(), strict=True):
            if pa.types.is_dictionary(chunk.type):
                empty = np.flatnonzero(np.asarray(pc.binary_length(chunk.dictionary).to_numpy()) == 0)
                if len(empty):
                    found.append(np.flatnonzero(np.isin(_indices(chunk), empty)) + start)
            else:
                _, offsets = _parts(chunk)
                hits = np.flatnonzero(offsets[1:] == offsets[:-1])
                if len(hits):
                    found.append(hits + start)
        if not found:
            return np.zeros(0, dtype=np.int64)
        rows = np.concatenate(found)
        if len(rows) > self.opts.max_blank_candidates:
            raise _Fallback("too many empty lines")
        empty = np.ones(len(rows), dtype=bool)
        for other in self.cols.values():
            empty &= _empty_values(other, rows)
        return rows[empty]

    def _g_row(self, line: int) -> int:
        row = int(np.searchsorted(self.g_lines, line))
        if row >= self.n_g or int(self.g_lines[row]) != line:
            raise _Fallback("line bookkeeping")
        return row

    def _line_text(self, row: int) -> bytes:
        """A good line exactly as it stands in the input (its values joined by d0; each holds its prefix)."""
        if not self.complete:
            raise _Fallback("a good line must be joined to a record, but not every field was read")
        return self.d0.join(self.cols[name].value(row) for name in self.names)

    def _values(self, record: bytes) -> list[str]:
        """The fields of a record, as text (invalid UTF-8 replaced per value, as the reference does)."""
        try:
            # Valid UTF-8 throughout: splitting the text on the delimiter splits the bytes the same way.
            return record.decode("utf-8").split(self.delim_text)
        except UnicodeDecodeError:
            values, _ = _decode(record.split(self.delim))
            self.utf8_ok = False
            return values

    def _stitch(self) -> None:
        """The reference's line-level pass over the lines that are not whole records (and blank lines)."""
        n1 = self.nfields - 1
        info: dict[int, tuple[bytes, int]] = {line: (text, self.counts[line]) for line, text in self.invalid.items()}
        for row in self.candidates.tolist():
            info[int(self.g_lines[row])] = (b"", 0)
            self.removed.add(row)  # a blank line holds no data: skipped, or joined into the record before it
        header = self.header
        free = [header.index(name) for name in self.reg.free_text if name in header]
        consumed: set[int] = set()
        for line in sorted(ln for ln, (_, c) in info.items() if c != n1):
            if line in consumed:
                continue
            text, count = info[line]
            consumed.add(line)
            if text.strip() == b"":
                continue
            acc, j, texts = count, line, [text]
            while acc < n1 and j + 1 <= self.last_line:
                j += 1
                consumed.add(j)
                if j in info:
                    part, c = info[j]
                else:
                    row = self._g_row(j)
                    self.removed.add(row)
                    part, c = self._line_text(row), n1
                texts.append(part)
                acc += c
            record = b"\n".join(texts)
            values = self._values(record)
            if len(values) > self.nfields and free:
                values = _repair(values, header, free, self.delim_text, self.opts) or values
            if len(values) != self.nfields:
                shown = self._as_reference_shows(record)
                self.problems.append(Problem(
                    self.source, line, f"record has {len(values)} fields, header has {self.nfields}: {shown[:120]!r}"))
                continue
            self.extras.append((line, [values[pos] for pos in self.positions]))
        for line, (text, c) in info.items():
            if c == n1 and line not in consumed:
                self._extra_line(line, text)

    def _extra_line(self, line: int, text: bytes) -> None:
        """A line of whole fields pyarrow could not split (a stray d0 byte in a value)."""
        values = self._values(text)
        self.extras.append((line, [values[pos] for pos in self.positions]))

    def _stand_in(self) -> bytes:
        """The byte the reference swaps a multi-byte delimiter for (b"" when every candidate occurs)."""
        if not hasattr(self, "_sep"):
            self._sep = next((c for c in _STAND_INS if self.src.find(c, self.body_start) < 0), b"")
        return self._sep

    def _as_reference_shows(self, record: bytes) -> bytes:
        if len(self.delim) > 1 and self._stand_in():
            return record.replace(self.delim, self._stand_in())
        return record

    def _no_separator_lines(self) -> None:
        """Blank lines are skipped; a line of nfields-1 d0 bytes reads the same in pyarrow but is not blank."""
        needle = self.d0 * (self.nfields - 1)
        pos, seen = self.body_start, 0
        while True:
            at = self.src.find(needle, pos)
            if at < 0:
                return
            end = at + len(needle)
            if ((at == self.body_start or self.src.read(at - 1, at) == b"\n")
                    and (end == self.src.size or self.src.read(end, end + 1) == b"\n")):
                raise _Fallback("a line of separator bytes next to blank lines")
            seen += 1
            if seen > 1000:
                raise _Fallback("too many separator runs")
            pos = at + 1

    # ---- fields ------------------------------------------------------------------------------------------

    def _prefix_ok(self, col: _Column, arr: pa.Array, rows: np.ndarray | int = 0) -> None:
        """Every value of `arr` (good rows `rows`, or from row `rows` on) starts with the delimiter's rest,
        except on blank lines; else the direct reader cannot vouch for the split."""
        if not col.plen:
            return
        ok = _starts_with(arr, self.rest)
        if not ok.all():
            where = np.flatnonzero(~ok)
            where = rows[where] if isinstance(rows, np.ndarray) else where + rows
            if not np.isin(where, self.candidates).all():
                raise _Fallback(f"a {col.name} value does not start with the delimiter's rest")

    def _strip(self, col: _Column, arr: pa.Array, rows: np.ndarray | int = 0) -> pa.Array:
        if not col.plen:
            return arr
        self._prefix_ok(col, arr, rows)
        return pc.binary_slice(arr, col.plen, 1 << 30)

    def _chunks(self, col: _Column) -> list[tuple[int, pa.Array]]:
        return list(zip(col.starts[:-1].tolist(), col.chunks, strict=True))

    def _groups(self, col: _Column) -> Iterator[tuple[int, pa.Array]]:
        """The column in pieces of at least GROUP_ROWS rows (adjacent chunks copied into one buffer, reused
        from piece to piece): the vectorised kernels then run on a few long arrays, not many short ones."""
        group: list[tuple[int, pa.Array]] = []
        rows = 0
        data_buf = np.empty(0, dtype=np.uint8)
        offsets_buf = np.empty(0, dtype=np.int64)
        chunks = self._chunks(col)
        for i, (start, chunk) in enumerate(chunks):
            group.append((start, chunk))
            rows += len(chunk)
            if rows < self.opts.group_rows and i + 1 < len(chunks):
                continue
            if len(group) == 1:
                yield group[0]
            else:
                parts = [_parts(c) for _, c in group]
                size = sum(int(o[-1] - o[0]) for _, o in parts)
                if len(data_buf) < size:
                    data_buf = np.empty(max(size, 2 * len(data_buf)), dtype=np.uint8)
                if len(offsets_buf) < rows + 1:
                    offsets_buf = np.empty(max(rows + 1, 2 * len(offsets_buf)), dtype=np.int64)
                pos = row = 0
                for data, offsets in parts:
                    a, b = int(offsets[0]), int(offsets[-1])
                    data_buf[pos : pos + b - a] = data[a:b]
                    n = len(offsets) - 1
                    np.add(offsets, pos - a, out=offsets_buf[row : row + n + 1], casting="unsafe")
                    pos += b - a
                    row += n
                yield group[0][0], pa.Array.from_buffers(
                    pa.large_binary(), rows, [None, pa.py_buffer(offsets_buf[: rows + 1]), pa.py_buffer(data_buf[:pos])])
            group, rows = [], 0

    def _rows_text(self, col: _Column, rows: np.ndarray) -> tuple[pa.Array, bool]:
        """The values of good rows `rows` (sorted) without their prefix, as text."""
        which = np.searchsorted(col.starts, rows, side="right") - 1
        pieces: list[pa.Array] = []
        for k in np.unique(which).tolist():
            local = rows[which == k] - int(col.starts[k])
            pieces.append(col.chunks[k].take(pa.array(local)))
        arr = pa.concat_arrays(pieces) if pieces else pa.array([], pa.binary())
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        return _to_strings(self._strip(col, arr, rows))

    def _dict_prepare(self, name: str) -> dict[str, Any]:
        """A dictionary-read field over the good rows: one dictionary of its distinct values (prefix stripped,
        as text) and each row's code."""
        col = self.cols.get(name)
        if col is None or not col.chunks:
            return {"values": pa.array([""] if col is None else [], pa.string()), "indices": None, "utf8": True}
        whole = pa.chunked_array(col.chunks, type=_DICT_BINARY).combine_chunks()  # one dictionary (C++)
        uniq, indices = whole.dictionary, whole.indices
        clean = True
        if col.plen:
            ok = _starts_with(uniq, self.rest)
            if not ok.all():
                rows = np.flatnonzero(np.isin(indices.to_numpy(zero_copy_only=False), np.flatnonzero(~ok)))
                if not np.isin(rows, self.candidates).all():
                    raise _Fallback(f"a {name} value does not start with the delimiter's rest")
                clean = False
            uniq = pc.binary_slice(uniq, col.plen, 1 << 30)
        values, utf8 = _to_strings(uniq)
        if not clean or not utf8:  # b"" and the bare prefix, or two invalid spellings, may now be equal
            enc = pc.dictionary_encode(values)
            indices, values = enc.indices.take(indices), enc.dictionary
        return {"values": values, "utf8": utf8,
                "indices": np.frombuffer(indices.buffers()[1], np.int32)[indices.offset : indices.offset + len(indices)]}

    def _dict_task(self, name: str) -> dict[str, Any]:
        """The field in final order (the extra records' values added to the dictionary), and the columns parsed
        from it, per distinct value."""
        m = self.merge
        prepared = self.prepared[name].result()
        values = prepared["values"]
        # A field that gives numbers only (ExitCode, NNodes): its codes are kept as indices for numpy (no int32
        # copy); one with a text column keeps int32 codes for the dictionary array.
        fd = self.reg[name]
        numbers_only = fd.copy is None and not any(pa.types.is_string(c.type) for c in fd.parsed)
        kind = np.intp if numbers_only else np.int32
        if prepared["indices"] is None:
            codes = np.zeros(m.size, dtype=kind)
        else:
            codes = m.full(prepared["indices"], kind)
        e_values = self.e_raw.get(name)
        if e_values is None:
            e_values = pa.array([""] * m.n_e, pa.string())
        if m.n_e:
            missing = pc.is_null(pc.index_in(e_values, value_set=values))
            new = pc.unique(e_values.filter(missing))
            if len(new):
                values = pa.concat_arrays([values, new])
            m.place_e(codes, np.asarray(pc.index_in(e_values, value_set=values).to_numpy(zero_copy_only=False)))
        return {"values": values, "codes": codes, "utf8": prepared["utf8"], **_derived(fd, values, codes)}

    def _spliced(self, name: str) -> pa.Array:
        """Field `name` of every final row, without prefix, as bytes: the good rows' values with the extra
        records' ones put in (one concatenation)."""
        col = self.cols[name]
        chunks = [self._strip(col, chunk, start) for start, chunk in self._chunks(col)]
        return self.merge.splice(chunks, self.e_rawc[name].cast(pa.binary()))

    def _job_id_task(self, name: str) -> dict[str, Any]:
        """JobID of every final row: the two usual shapes by `fields.job_ids_swar`, the rest by the regex."""
        m = self.merge
        raw = self._spliced(name)
        text, utf8 = _to_strings(raw)
        data, offsets = _parts(raw)
        base, task, has_task, ok = fields.job_ids_swar(data, offsets, self.opts.swar_block_rows)
        het = np.zeros(m.size, dtype=np.int64)
        has_het, is_step, bad = (np.zeros(m.size, dtype=bool) for _ in range(3))
        pending: pa.Array = pa.nulls(m.size, pa.string())
        rest = np.flatnonzero(~ok)
        if len(rest):
            sub, sub_step, sub_bad = fields._v_job_id_regex(text.take(pa.array(rest)))
            base[rest] = _ints(sub["job_base"])
            task[rest] = _ints(sub["array_task"])
            has_task[rest] = fields.valid_mask(sub["array_task"])
            het[rest] = _ints(sub["het_offset"])
            has_het[rest] = fields.valid_mask(sub["het_offset"])
            is_step[rest] = sub_step
            bad[rest] = sub_bad
            if sub["array_pending"].null_count < len(rest):
                mask = np.zeros(m.size, dtype=bool)
                mask[rest] = True
                pending = pc.replace_with_mask(pending, pa.array(mask), sub["array_pending"])
        return {
            "columns": {
                "job_id": text, "job_base": _nullable(base, ~bad, pa.int64()),
                "array_task": _nullable(task, has_task, pa.int64()),
                "het_offset": _nullable(het, has_het, pa.int64()), "array_pending": pending,
            },
            "bad": {"JobID": bad}, "is_step": is_step, "utf8": utf8,
        }

    def _int_prepare(self, name: str) -> dict[str, Any]:
        """JobIDRaw of the good rows: `v_int` by a decimal test and one cast (no UTF-8 check is needed for that:
        a byte outside ASCII is not a digit; only the other values are decoded, for the UTF-8 verdict)."""
        col = self.cols[name]
        values = np.empty(self.n_g, dtype=np.int64)  # every row is written below
        bad: np.ndarray | None = None
        utf8 = True
        for start, group in self._groups(col):
            raw = self._strip(col, group, start)
            text = raw.view(pa.large_string() if pa.types.is_large_binary(raw.type) else pa.string())
            # (at most 18 digits, as `v_int`: every such value fits int64)
            decimal = fields._mask(pc.and_(pc.ascii_is_decimal(text), pc.less_equal(pc.binary_length(text), 18)))
            n = len(group)
            if decimal.all():
                values[start : start + n] = _ints(pc.cast(text, pa.int64()))
            else:
                kept = pc.if_else(pa.array(decimal), text, pa.scalar(None, text.type))
                values[start : start + n] = _ints(pc.fill_null(pc.cast(kept, pa.int64()), 0))
                if bad is None:
                    bad = np.zeros(self.n_g, dtype=bool)
                bad[start : start + n] = ~decimal
                _, valid = _to_strings(raw.filter(pa.array(~decimal)))
                utf8 &= valid
        return {"values": values, "bad": bad, "utf8": utf8}

    def _int_task(self, name: str) -> dict[str, Any]:
        m = self.merge
        fd = self.reg[name]
        prepared = self.prepared[name].result()
        values = m.full(prepared["values"])
        bad = np.zeros(m.size, dtype=bool) if prepared["bad"] is None else m.full(prepared["bad"])
        if m.n_e:
            e_values, e_bad = _reference_of(fd)(self.e_rawc[name])
            m.place_e(values, _ints(pc.fill_null(e_values, 0)))
            m.place_e(bad, e_bad)
        return {"columns": {fd.parsed[0].name: _nullable(values, ~bad, pa.int64())}, "bad": {name: bad},
                "utf8": prepared["utf8"]}

    def _fixed_prepare(self, group: tuple[SacctField, ...]) -> dict[str, Any]:
        """Fixed-width fields over the good rows: `kernel` over the rows that are exactly prefix + `width`
        bytes, `reference` over the others. Several fields go side by side: a row whose bytes equal the first
        field's (Eligible is mostly Submit) takes its result instead of a parse."""
        names = tuple(fd.name for fd in group)
        assert group[0].fixed is not None
        width, kernel, reference = group[0].fixed.width, group[0].fixed.kernel, _reference_of(group[0])
        cols = [self.cols[name] for name in names]
        values = [np.empty(self.n_g, dtype=np.int64) for _ in names]  # every row is written below
        valid: list[np.ndarray | None] = [None for _ in names]  # None: all valid
        slow: list[list[np.ndarray]] = [[] for _ in names]
        for groups in zip(*(self._groups(col) for col in cols), strict=True):
            first: tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray] | None = None
            for f, (col, (start, chunk)) in enumerate(zip(cols, groups, strict=True)):
                prefix = self.rest[: col.plen]
                size = col.plen + width
                n = len(chunk)
                if not n:
                    continue
                data, offsets = _parts(chunk)
                fixed = (offsets[1:] - offsets[:-1]) == size
                todo = fixed
                v, k = values[f][start : start + n], np.zeros(n, dtype=bool)
                if first is not None and fixed.all() and first[4].all() and groups[0][0] == start:
                    same = fields.rows_equal(data, int(offsets[0]), first[2], first[3], n, size)
                    v[same], k[same] = first[0][same], first[1][same]
                    todo = ~same
                if todo.all():
                    kernel(data, int(offsets[0]), n, prefix, out=(v, k), block_rows=self.opts.swar_block_rows)
                elif todo.any():
                    sel = np.flatnonzero(todo)
                    d2, o2 = _parts(chunk.filter(pa.array(todo)))
                    v[sel], k[sel] = kernel(d2, int(o2[0]), len(sel), prefix, block_rows=self.opts.swar_block_rows)
                if f == 0:
                    first = (v, k, data, int(offsets[0]), fixed)
                if not k.all():
                    if valid[f] is None:
                        valid[f] = np.ones(self.n_g, dtype=bool)
                    valid[f][start : start + n] = k  # type: ignore[index]
                    slow[f].append(np.flatnonzero(~k) + start)
        out: dict[str, Any] = {"utf8": True}
        for f, (name, col) in enumerate(zip(names, cols, strict=True)):
            bad: np.ndarray | None = None
            rows = np.concatenate(slow[f]) if slow[f] else np.zeros(0, dtype=np.int64)
            if len(rows):
                text, utf8 = self._rows_text(col, rows)
                out["utf8"] &= utf8
                ref, ref_bad = reference(text)
                values[f][rows] = _ints(ref)
                valid[f][rows] = fields.valid_mask(ref)  # type: ignore[index]
                if ref_bad.any():
                    bad = np.zeros(self.n_g, dtype=bool)
                    bad[rows] = ref_bad
            out[name] = {"values": values[f], "valid": valid[f], "bad": bad}
        return out

    def _fixed_task(self, key: str, group: tuple[SacctField, ...]) -> dict[str, Any]:
        """The prepared fields in final order, the extra records' values parsed by the vectorised parser."""
        m = self.merge
        prepared = self.prepared[key].result()
        out: dict[str, Any] = {"columns": {}, "bad": {}, "utf8": prepared["utf8"]}
        for fd in group:
            name, column, reference = fd.name, fd.parsed[0], _reference_of(fd)
            g = prepared[name]
            e_arr, e_bad = reference(self.e_rawc[name]) if m.n_e else (None, None)
            values = m.full(g["values"])
            valid: np.ndarray | None = None
            if g["valid"] is not None:
                valid = m.full(g["valid"])
                if m.n_e:
                    valid[m.at] = True
            elif e_arr is not None and e_arr.null_count:
                valid = np.ones(m.size, dtype=bool)
            bad: np.ndarray | None = None
            if g["bad"] is not None:
                bad = m.full(g["bad"])
                if m.n_e:
                    bad[m.at] = False
            elif e_bad is not None and e_bad.any():
                bad = np.zeros(m.size, dtype=bool)
            if e_arr is not None and e_bad is not None:
                m.place_e(values, _ints(e_arr))
                if valid is not None:
                    m.place_e(valid, fields.valid_mask(e_arr))
                if bad is not None:
                    m.place_e(bad, e_bad)
            out["columns"][column.name] = _nullable(values, valid, column.type)
            out["bad"][name] = bad
        return out

    # ---- assembly ----------------------------------------------------------------------------------------

    def _build(self) -> ParseResult:
        if not self.odd:
            for line, text in sorted(self.invalid.items()):
                self._extra_line(line, text)
        self.merge = m = _Merge(self.g_lines, np.array([line for line, _ in self.extras], dtype=np.int64))
        self.e_raw = {name: pa.array([row[pos] for _, row in self.extras], pa.string())
                      for pos, name in enumerate(self.wanted)}
        blank_e = pa.array([""] * m.n_e, pa.string())
        self.e_rawc = {name: self.e_raw.get(name, blank_e) for name in self.reg.raw}

        tasks: dict[str, Callable[[], Any]] = {}
        for fd in self.reg.fields:
            if fd.direct == "job_id":
                tasks[fd.name] = functools.partial(self._job_id_task, fd.name)
            elif fd.direct == "dict":
                tasks[fd.name] = functools.partial(self._dict_task, fd.name)
            elif fd.direct == "int":
                tasks[fd.name] = functools.partial(self._int_task, fd.name)
        for key, group in _fixed_groups(self.reg).items():
            tasks[key] = functools.partial(self._fixed_task, key, group)
        done = self._run(tasks)
        for out in done.values():
            self.utf8_ok &= bool(out["utf8"])

        if not self.odd and len(self.candidates) == self.n_g and not self.invalid:
            raise _Fallback("only empty lines: the reference returns an empty result")
        if not self.odd and len(self.candidates):
            # Every line is a whole record: the reference's single pyarrow pass applies, where a blank line is a
            # record of empty fields; unless some value is not UTF-8 or no stand-in byte is free, and its
            # line-level pass (which skips blank lines) runs instead.
            self.line_mode = not self.utf8_ok or (len(self.delim) > 1 and not self._stand_in())
            if self.line_mode:
                self.removed.update(self.candidates.tolist())
        if len(self.candidates) and (self.line_mode or len(self.delim) > 1):
            # An empty line and a line of nfields-1 d0 bytes read alike; the latter is an odd line for a
            # multi-byte delimiter, and a record (not blank) for a one-byte one.
            self._no_separator_lines()
        dropped: np.ndarray | None = None
        if self.removed:
            dropped = np.zeros(m.size, dtype=bool)
            dropped[m.final(np.fromiter(self.removed, dtype=np.int64))] = True

        columns: dict[str, pa.Array] = {}
        bad: dict[str, np.ndarray | None] = {}
        for out in done.values():
            columns.update(out["columns"])
            bad.update(out["bad"])
        columns["line"] = pa.array(m.lines)
        for fd in self.reg.fields:
            if fd.unknowable:
                columns[fd.unknowable.name] = pa.array(np.ones(m.size, dtype=bool))
        bad = {name: bad.get(name) for name in self.reg.checked}
        is_step = next(out["is_step"] for out in done.values() if "is_step" in out)

        def raw_value(name: str, i: int) -> Any:
            if name in self.reg.dictionary:
                return done[name]["values"][int(done[name]["codes"][i])].as_py()
            src = m.source(i)
            if src >= m.n_g:
                return self.e_rawc[name][src - m.n_g].as_py()
            text, _ = self._rows_text(self.cols[name], np.array([src], dtype=np.int64))
            return text[0].as_py()

        return finish(m.size, columns, bad, is_step, raw_value, m.lines, self.source, self.problems, dropped,
                      schema=self.reg.schema)

    def _run(self, tasks: dict[str, Callable[[], Any]]) -> dict[str, Any]:
        if self.pool is None or self.opts.workers == 1:
            return {name: task() for name, task in tasks.items()}
        futures = {name: self.pool.submit(task) for name, task in tasks.items()}
        return {name: fut.result() for name, fut in futures.items()}


def _derived(fd: SacctField, values: pa.Array, codes: np.ndarray) -> dict[str, Any]:
    """The columns of a dictionary-read field: its text (dictionary-encoded), and what is parsed from it (once
    per distinct value, taken to the rows by their codes: text columns dictionary-encoded)."""
    columns: dict[str, pa.Array] = {}
    bad: dict[str, np.ndarray | None] = {}
    if fd.copy:
        indices = pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes.astype(np.int32, copy=False))])
        columns[fd.copy.name] = pa.DictionaryArray.from_arrays(indices, values)
    if fd.vparse is None:
        return {"columns": columns, "bad": bad}
    rows = codes.astype(np.intp, copy=False)
    parsed = fd.vparse(values)
    for name, arr in parsed.columns.items():
        columns[name] = _encoded(arr, rows) if pa.types.is_string(arr.type) else _lookup(arr, rows)
    bad[fd.name] = _row_mask(parsed.bad, rows)
    return {"columns": columns, "bad": bad}


def _fixed_groups(reg: Registry) -> dict[str, tuple[SacctField, ...]]:
    """The fixed-width fields, each with those that are `like` it (read side by side), by the first's name."""
    groups: dict[str, list[SacctField]] = {}
    for fd in reg.fields:
        if fd.direct == "fixed" and fd.fixed is not None:
            groups.setdefault(fd.fixed.like or fd.name, []).append(fd)
    return {key: tuple(sorted(group, key=lambda fd: fd.name != key)) for key, group in groups.items()}


def _reference_of(fd: SacctField) -> Callable[[pa.Array], tuple[pa.Array, np.ndarray]]:
    """A one-column field's vectorised parser as (values, bad)."""
    assert fd.vparse is not None and len(fd.parsed) == 1
    vparse, column = fd.vparse, fd.parsed[0].name

    def parse(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
        parsed = vparse(text)
        return parsed.columns[column], parsed.bad

    return parse


class _Merge:
    """The good rows and the extra records (joined or repaired lines; in the order given, with their lines) in
    line order. The extra records are few: each column is written as the good rows' values with those rows
    put in between, by `place` (a piece of good rows) and `place_e` (the extra records)."""

    def __init__(self, g_lines: np.ndarray, e_lines: np.ndarray) -> None:
        self.n_g = len(g_lines)
        self.n_e = len(e_lines)
        self.size = self.n_g + self.n_e
        self.e_order = np.argsort(e_lines, kind="stable")
        self.g_before = np.searchsorted(g_lines, e_lines[self.e_order])  # good rows before each extra record
        self.at = self.g_before + np.arange(self.n_e)  # where each (sorted) extra record goes
        self.g_mask = np.ones(self.size, dtype=bool)
        self.g_mask[self.at] = False
        self.lines = np.empty(self.size, dtype=np.int64)
        self.place(self.lines, 0, g_lines)
        self.place_e(self.lines, e_lines)

    def final(self, rows: np.ndarray) -> np.ndarray:
        """Where good rows `rows` go."""
        return rows + np.searchsorted(self.g_before, rows, side="right")

    def place(self, out: np.ndarray, start: int, values: np.ndarray) -> None:
        """out[...] = values for the good rows start, start + 1, ..."""
        n = len(values)
        if not n:
            return
        if not self.n_e:
            out[start : start + n] = values
            return
        first = start + int(np.searchsorted(self.g_before, start, side="right"))
        last = start + n - 1
        end = last + int(np.searchsorted(self.g_before, last, side="right")) + 1
        if end - first == n:
            out[first:end] = values
        else:
            out[first:end][self.g_mask[first:end]] = values

    def full(self, g_values: np.ndarray, dtype: Any = None) -> np.ndarray:
        """A new final-order array with the good rows' `g_values` placed (the same array when no record is to
        be put in); the extra records' slots are left for `place_e`."""
        dtype = g_values.dtype if dtype is None else np.dtype(dtype)
        if not self.n_e and g_values.dtype == dtype:
            return g_values
        out = np.empty(self.size, dtype=dtype)
        self.place(out, 0, g_values)
        return out

    def place_e(self, out: np.ndarray, values: np.ndarray) -> None:
        """out[...] = values for the extra records (in the order given)."""
        if self.n_e:
            out[self.at] = values[self.e_order]

    def splice(self, chunks: list[pa.Array], extra: pa.Array) -> pa.Array:
        """The good rows' values (binary `chunks`, in order) and the extra records' ones (`extra`, in the order
        given), as one binary array in final order: one concatenation, then one take when records go in
        between."""
        parts = [chunk if chunk.type == pa.binary() else chunk.cast(pa.binary()) for chunk in chunks]
        parts.append(extra.cast(pa.binary()))
        offsets = [_parts(part)[1] for part in parts if len(part)]
        if sum(int(o[-1] - o[0]) for o in offsets) >= 1 << 31:
            raise _Fallback("values too long for one binary array")
        whole = pa.concat_arrays(parts)
        if not self.n_e:
            return whole
        source = np.empty(self.size, dtype=np.int64)  # final row -> index into [good rows, extra records]
        source[self.g_mask] = np.arange(self.n_g)
        source[self.at] = self.n_g + self.e_order
        return whole.take(pa.array(source))

    def source(self, i: int) -> int:
        """Final row i as an index into [good rows, extra records]."""
        k = int(np.searchsorted(self.at, i))
        if k < self.n_e and int(self.at[k]) == i:
            return self.n_g + int(self.e_order[k])
        return i - k


def _ints(arr: pa.Array) -> np.ndarray:
    """The int64 values of a fixed-width column (nulls: whatever lies under them), without a copy."""
    if arr.type != pa.int64() and not pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.int64())
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset : arr.offset + len(arr)]


def _starts_with(arr: pa.Array, prefix: bytes) -> np.ndarray:
    """Whether each value of a binary array starts with `prefix`."""
    return fields._mask(pc.starts_with(arr, pattern=prefix))


def _nullable(values: np.ndarray, valid: np.ndarray | None, kind: pa.DataType) -> pa.Array:
    """A fixed-width pyarrow array over `values` (no copy), null where not `valid`."""
    if valid is None or valid.all():
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)], null_count=0)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)],
                                 null_count=int(len(valid) - np.count_nonzero(valid)))


def _lookup(values: pa.Array, rows: np.ndarray) -> pa.Array:
    """values[rows]: one value per distinct value (int64 or float64, possibly null) taken to the rows."""
    kind = values.type
    filled = np.asarray(pc.fill_null(values, 0).to_numpy(zero_copy_only=False))
    out = np.take(filled, rows)
    return _nullable(out, np.take(fields.valid_mask(values), rows) if values.null_count else None, kind)


def _row_mask(per_value: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
    return np.take(per_value, rows) if per_value.any() else None


def _encoded(values: pa.Array, rows: np.ndarray) -> pa.Array:
    """values[rows] dictionary-encoded (distinct values only; nulls stay null)."""
    enc = pc.dictionary_encode(values)
    idx = enc.indices
    codes = np.take(np.asarray(pc.fill_null(idx, 0).to_numpy(zero_copy_only=False), dtype=np.int32), rows)
    valid = np.take(fields.valid_mask(idx), rows) if idx.null_count else None
    return pa.DictionaryArray.from_arrays(_nullable(codes, valid, pa.int32()), enc.dictionary)
