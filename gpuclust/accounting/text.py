"""Front end 1: ``sacct --parsable2`` text with a header line, in any (multi-character) delimiter.

Records are found by counting fields: a physical line with fewer than N-1 delimiters is joined with the
following lines until the record has all N fields (a newline inside a job name splits a record over lines).

Hot path: the delimiter is swapped for a single byte that does not occur in the data, and pyarrow.csv
tokenises the text (multi-threaded, no quoting). Only if some line does not have exactly N fields does a
line-level pass run; it is still vectorised over the good lines and loops in Python only over the odd
ones.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuclust.accounting.normalize import ParseResult, normalize
from gpuclust.accounting.schema import FREE_TEXT_FIELDS, RAW_FIELDS, REQUIRED_FIELDS
from gpuclust.errors import InputError, Problem

# Bytes that may stand in for a multi-character delimiter, tried in order; one absent from the data is used.
_STAND_INS = [bytes([b]) for b in (0x1F, 0x1E, 0x1D, 0x1C, *range(0x01, 0x09), 0x0B, *range(0x0E, 0x1C))]


def decode_delimiter(text: str) -> str:
    """`--delimiter` value: backslash escapes (``\\x1f|\\x1e``, ``\\t``) are decoded; empty is refused."""
    if "\\" in text:
        text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
    if not text or "\n" in text or "\r" in text:
        raise InputError(f"bad delimiter {text!r}: must be non-empty and without newlines")
    return text


def parse_parsable(data: bytes, delimiter: str = "|", source: str = "<input>") -> ParseResult:
    """Parse a --parsable2 dump (header line first) into the normalized schema."""
    delim = delimiter.encode("utf-8")
    if not delim or b"\n" in delim:
        raise InputError(f"bad delimiter {delimiter!r}")
    header_end = data.find(b"\n")
    header_line = data if header_end < 0 else data[:header_end]
    body = b"" if header_end < 0 else data[header_end + 1 :]
    header = header_line.rstrip(b"\r").decode("utf-8", "replace").split(delimiter)
    if not header_line.strip():
        raise InputError(Problem(source, 1, "empty input: expected a header line of sacct field names"))
    missing = [name for name in REQUIRED_FIELDS if name not in header]
    if missing:
        raise InputError(
            Problem(
                source, 1,
                f"header lacks required field(s) {', '.join(missing)} (delimiter {delimiter!r}; "
                f"header starts {header_line[:80]!r})",
            )
        )

    if len(delim) == 1:
        sep = delim
    else:
        sep = next((c for c in _STAND_INS if c not in body), b"")
        if not sep:  # pathological: every stand-in byte occurs in the data
            return _line_level(body, delim, header, source)
        body = _replace(body, delim, sep)
    result = _fast(body, sep, header, source)
    if result is None:
        result = _line_level(body, sep, header, source, original=delim)
    return result


PARALLEL_REPLACE_BYTES = 16 << 20


def _replace(body: bytes, old: bytes, new: bytes) -> bytes:
    """``body.replace(old, new)``; on a large body, pieces cut at newlines (which `old` never holds, so no
    match spans a cut) are replaced side by side by the pyarrow kernel, which releases the GIL."""
    from gpuclust.accounting.normalize import WORKERS

    if len(body) < PARALLEL_REPLACE_BYTES or WORKERS == 1:
        return body.replace(old, new)
    pieces = 4 * WORKERS
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

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        return b"".join(pool.map(one, range(len(cuts) - 1)))


def _wanted(header: list[str]) -> list[str]:
    return [name for name in RAW_FIELDS if name in header]


def _read_csv(
    data: bytes, sep: bytes, header: list[str], wanted: list[str], kind: pa.DataType,
    on_invalid: Callable[[object], str],
) -> pa.Table:
    """pyarrow.csv with sacct's rules: one-byte delimiter, no quoting or escaping, no newlines inside values,
    the `wanted` columns only, read as `kind` (string or binary). Raises pa.ArrowInvalid."""
    # Column names must be unique for pyarrow; ignored columns get placeholder names.
    names = [name if name in RAW_FIELDS and header.index(name) == i else f"_ignored{i}" for i, name in enumerate(header)]
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


def _fast(body: bytes, sep: bytes, header: list[str], source: str) -> ParseResult | None:
    """pyarrow.csv over the whole body; None when any line is not a whole record."""
    if not body.strip(b"\n"):
        return _from_columns({}, np.zeros(0, dtype=np.int64), header, source, [])
    invalid: list[int] = []

    def on_invalid(row: object) -> str:
        # The first row that is not a whole record decides (None): stop there instead of tokenising the rest.
        invalid.append(1)
        return "error"

    wanted = _wanted(header)
    try:
        table = _read_csv(body, sep, header, wanted, pa.string(), on_invalid)
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None  # e.g. invalid UTF-8: the line-level pass decodes with replacement and reports
    if invalid:
        return None
    lines = np.arange(2, table.num_rows + 2, dtype=np.int64)
    cols = {name: table.column(name).combine_chunks() for name in wanted}
    return _from_columns(cols, lines, header, source, [])


SCAN_BLOCK = 1 << 22


def _positions(buf: np.ndarray, byte: int) -> np.ndarray:
    """``np.flatnonzero(buf == byte)`` in blocks: the compare mask stays small and in cache instead of being a
    fresh array as large as the body (whose page faults cost more than the scan)."""
    parts = [np.flatnonzero(buf[a : a + SCAN_BLOCK] == byte) + a for a in range(0, len(buf), SCAN_BLOCK)]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def _counts_between(buf: np.ndarray, byte: int, bounds: np.ndarray) -> np.ndarray:
    """``np.diff(np.searchsorted(np.flatnonzero(buf == byte), bounds))`` for sorted `bounds`, in blocks (no
    array of every hit): the hits before each bound are those of earlier blocks plus those in its own."""
    before = np.empty(len(bounds), np.int64)
    total = 0
    lo = 0
    for a in range(0, len(buf), SCAN_BLOCK):
        b = min(a + SCAN_BLOCK, len(buf))
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

    def __init__(self, body: bytes, sep: bytes) -> None:
        self.body = body
        self.sep = sep
        if not body:
            self.start = np.zeros(0, np.int64)
            self.end = np.zeros(0, np.int64)
        else:
            nl = _positions(np.frombuffer(body, dtype=np.uint8), 0x0A)
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
                self._counts = _counts_between(np.frombuffer(self.body, dtype=np.uint8), self.sep[0], bounds)
            elif len(self):
                self._counts = pc.count_substring(self.array(), self.sep.decode("latin-1")).to_numpy(zero_copy_only=False)
            else:
                self._counts = np.zeros(0, np.int64)
        return self._counts


def _line_level(
    body: bytes, sep: bytes, header: list[str], source: str, original: bytes | None = None,
) -> ParseResult:
    """Find records by counting delimiters per physical line; join short lines; repair or report the rest."""
    nfields = len(header)
    physical = _Lines(body, sep)
    counts = physical.counts()
    good = counts == nfields - 1
    odd_idx = np.flatnonzero(~good)
    wanted = _wanted(header)
    free = [header.index(name) for name in FREE_TEXT_FIELDS if name in header]
    joined_sep = original or sep

    extra_rows: list[list[str]] = []
    extra_lines: list[int] = []
    problems: list[Problem] = []
    consumed = np.zeros(len(physical), dtype=bool)
    for i in odd_idx:
        if consumed[i]:
            continue
        if physical[int(i)].strip() == b"":
            consumed[i] = True  # a blank line between records holds no data
            continue
        acc, j = int(counts[i]), int(i)
        while acc < nfields - 1 and j + 1 < len(physical):
            j += 1
            acc += int(counts[j])
        consumed[i : j + 1] = True
        good[i : j + 1] = False
        record = physical.span(int(i), j)
        values = [v.decode("utf-8", "replace") for v in record.split(sep)]
        if len(values) > nfields and free:
            # A plain `|` dump: extra separators came from the free-text fields (JobName, Comment).
            values = _repair(values, header, free, joined_sep.decode("utf-8", "replace")) or values
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
        return _from_columns(cols, lines, header, source, problems)
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
    return _from_columns(cols, lines, header, source, problems)


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


def _repair(values: list[str], header: list[str], free: list[int], sep: str) -> list[str] | None:
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
        if _plausible(dict(zip(header, out, strict=True))):
            valid.append(out)
    return valid[0] if len(valid) == 1 else None


def _plausible(rec: dict[str, str]) -> bool:
    from gpuclust.accounting import fields as f
    from gpuclust.errors import SlurmOutputError

    try:
        f.parse_job_id(rec["JobID"])
        f.parse_state(rec["State"])
        f.parse_exit_code(rec["ExitCode"])
        f.parse_elapsed(rec["Elapsed"])
        for name in ("Submit", "Eligible", "Start", "End"):
            f.parse_time_epoch(rec[name])
        f.parse_alloc_tres(rec["AllocTRES"])
    except SlurmOutputError:
        return False
    return rec["JobIDRaw"].isdigit() and rec["NNodes"].isdigit()


def _to_utf8(col: pa.Array) -> pa.Array:
    try:
        return pc.cast(col, pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in col.to_pylist()], pa.string())


def _from_columns(
    cols: dict[str, pa.Array], lines: np.ndarray, header: list[str], source: str, problems: list[Problem]
) -> ParseResult:
    n = len(lines)
    raw = {name: cols[name] if name in cols else pa.array([""] * n, pa.string()) for name in _wanted(header)}
    known = pa.array(np.ones(n, dtype=bool))
    return normalize(raw, pa.array(lines), known, source, extra_problems=problems)
