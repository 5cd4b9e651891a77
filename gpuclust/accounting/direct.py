"""The direct text reader: pyarrow.csv straight over the input bytes, checked against the reference
(gpuclust.accounting.text) so that it returns the reference's result exactly, or None where it cannot be sure
to (gpuclust.accounting.text then runs the reference)."""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuclust.accounting import fields
from gpuclust.accounting.normalize import ParseResult, ReaderOptions, absent_column, finish
from gpuclust.accounting.registry import Registry, SacctField
from gpuclust.accounting.textcommon import (
    _BOM,
    _STAND_INS,
    _quiet_row_decode,
    _repair,
    _Source,
    _tail_continuation,
    _wanted,
)
from gpuclust.errors import Problem

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

_DICT_BINARY = pa.dictionary(pa.int32(), pa.binary())


class _Fallback(Exception):
    """The direct reader cannot vouch for the reference's result on this input."""








def split_at(delim: bytes) -> int | None:
    """Where the direct reader splits a delimiter D: the first byte that occurs once in D (pyarrow splits on
    it; each value then ends with the bytes before it and starts with the bytes after it, which are checked).
    ``\x1f|\x1e`` splits at 0, ``|#|`` at 1 (a `|` in a name then splits nothing). None: no such byte that
    pyarrow can split on."""
    for k, byte in enumerate(delim):
        if delim.count(byte) == 1 and byte not in b"\r\n\0" and byte < 0x80:
            return k
    return None


def _direct(src: _Source, body_start: int, delim: bytes, header: list[str], source: str,
            opts: ReaderOptions) -> ParseResult | None:
    if split_at(delim) is None or b"\r" in delim or (len(delim) > 1 and not delim.strip()):
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
    each value starting with the delimiter's bytes after the split byte (`plen` of them; 0 for a line's first
    field) and ending with those before it (`slen`; 0 for a line's last field)."""

    name: str
    plen: int
    slen: int
    chunks: list[pa.Array]
    starts: np.ndarray  # the good row each chunk starts at; starts[-1] = number of rows

    def value(self, row: int) -> bytes:
        k = int(np.searchsorted(self.starts, row, side="right")) - 1
        value = self.chunks[k][row - int(self.starts[k])].as_py()
        return b"" if value is None else bytes(value)


@dataclass
class _DictPrepared:
    """A dictionary-read field over the good rows: its distinct values (prefix stripped, as text) and each
    row's code (None: the field is not in the input, every row "")."""

    values: pa.Array
    indices: np.ndarray | None
    utf8: bool


@dataclass
class _IntPrepared:
    """A decimal field over the good rows (JobIDRaw)."""

    values: np.ndarray
    bad: np.ndarray | None
    utf8: bool


@dataclass
class _FixedValues:
    """One fixed-width field over the good rows: int64 values (epoch seconds, seconds), which are valid (None:
    all), which cannot be parsed (None: none)."""

    values: np.ndarray
    valid: np.ndarray | None
    bad: np.ndarray | None


@dataclass
class _FixedPrepared:
    fields: dict[str, _FixedValues]
    utf8: bool


Prepared = _DictPrepared | _IntPrepared | _FixedPrepared


@dataclass
class _FieldColumns:
    """A field's output in final row order: its columns, the bad mask of each field it parses (None: none),
    whether its text was valid UTF-8; JobID adds the step mask, a dictionary field its distinct values and each
    row's code (for the problem messages)."""

    columns: dict[str, pa.Array]
    bad: dict[str, np.ndarray | None]
    utf8: bool = True
    is_step: np.ndarray | None = None
    values: pa.Array | None = None
    codes: np.ndarray | None = None


class _Direct:
    """The direct reader's steps, in order: read the body in pieces (`_read_pieces`); find the blank lines
    (`_blank_candidates`); start each field's preparation over the good rows in the pool (`_dict_prepare`,
    `_int_prepare`, `_fixed_prepare`) while this thread joins the lines that are not whole records
    (`_classify`, `_stitch`); then put every field in final row order with those records (`_build`: the
    `*_task` steps) and report (normalize.finish)."""

    def __init__(self, src: _Source, body_start: int, delim: bytes, header: list[str], source: str,
                 opts: ReaderOptions) -> None:
        self.src, self.body_start, self.delim, self.header, self.source = src, body_start, delim, header, source
        self.opts = opts
        self.reg = opts.registry
        at = split_at(delim)
        assert at is not None
        # d0: the byte pyarrow splits on; rest: the bytes after it (each value but a line's first starts with
        # them); pre: the bytes before it (each value but a line's last ends with them).
        self.d0, self.rest, self.pre = delim[at : at + 1], delim[at + 1 :], delim[:at]
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
        # Filled by the steps, in order.
        self.invalid: dict[int, bytes] = {}  # _read_pieces: lines pyarrow could not split
        self.last_line = 1
        self.g_lines = np.zeros(0, dtype=np.int64)  # line of each good row
        self.n_g = 0
        self.candidates = np.zeros(0, dtype=np.int64)  # _blank_candidates: good rows that may be blank lines
        self.prepared: dict[str, concurrent.futures.Future[Prepared]] = {}
        self.counts: dict[int, int] = {}  # _classify: delimiters on each invalid line
        self.odd = False  # some line is not a whole record
        self.removed: set[int] = set()  # good rows that are no records (blank, or joined into one)
        self.extras: list[tuple[int, list[str]]] = []  # records joined or repaired here: (line, wanted values)
        self.problems: list[Problem] = []
        self.line_mode = False
        self.stand_in: bytes | None = None  # the reference's stand-in byte, once looked for
        self.merge = _Merge(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))  # _build: final order
        self.e_raw: dict[str, pa.Array] = {}  # the extra records' values of each wanted field
        self.e_rawc: dict[str, pa.Array] = {}  # ... of every registry field ("" where absent)

    # ---- reading ------------------------------------------------------------------------------------

    def run(self) -> ParseResult:
        with ThreadPoolExecutor(max_workers=self.opts.workers) as pool:
            self.pool = pool
            self._read_pieces()
            self.candidates = self._blank_candidates()
            # The work that needs no line order starts now, in the pool, while this thread joins the lines
            # that are not whole records (Python) and puts the rows in order.
            prepare: dict[str, Callable[[], Prepared]] = {}
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

    def _start(self, tasks: dict[str, Callable[[], Prepared]]) -> dict[str, concurrent.futures.Future[Prepared]]:
        """Futures of `tasks` in the pool (run at once, in order, with one worker)."""
        if self.pool is None or self.opts.workers == 1:
            out: dict[str, concurrent.futures.Future[Prepared]] = {}
            for name, task in tasks.items():
                fut: concurrent.futures.Future[Prepared] = concurrent.futures.Future()
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
        self.invalid = {}
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
            self.cols[name] = _Column(name, 0 if name == self.first else len(self.rest),
                                      0 if name == self.names[-1] else len(self.pre), chunks, starts)

    # ---- lines that are not whole records --------------------------------------------------------

    def _classify(self) -> None:
        n1 = self.nfields - 1
        self.counts = {line: text.count(self.delim) for line, text in self.invalid.items()}
        self.odd = any(c != n1 for c in self.counts.values())
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
        if self.stand_in is None:
            self.stand_in = next((c for c in _STAND_INS if self.src.find(c, self.body_start) < 0), b"")
        return self.stand_in

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

    def _affix_ok(self, col: _Column, arr: pa.Array) -> np.ndarray:
        """Whether each value starts with the delimiter's bytes after the split byte and ends with those
        before it (as a value of `col` must)."""
        ok = _starts_with(arr, self.rest[: col.plen]) if col.plen else np.ones(len(arr), dtype=bool)
        if col.slen:
            ok &= fields._mask(pc.ends_with(arr, pattern=self.pre[-col.slen :]))
            ok &= np.asarray(pc.binary_length(arr).to_numpy(zero_copy_only=False)) >= col.plen + col.slen
        return ok

    def _prefix_ok(self, col: _Column, arr: pa.Array, rows: np.ndarray | int = 0) -> None:
        """Every value of `arr` (good rows `rows`, or from row `rows` on) starts and ends with the delimiter's
        parts, except on blank lines; else the direct reader cannot vouch for the split."""
        if not col.plen and not col.slen:
            return
        ok = self._affix_ok(col, arr)
        if not ok.all():
            where = np.flatnonzero(~ok)
            where = rows[where] if isinstance(rows, np.ndarray) else where + rows
            if not np.isin(where, self.candidates).all():
                raise _Fallback(f"a {col.name} value does not start with the delimiter's rest")

    def _strip(self, col: _Column, arr: pa.Array, rows: np.ndarray | int = 0) -> pa.Array:
        if not col.plen and not col.slen:
            return arr
        self._prefix_ok(col, arr, rows)
        return _slice(arr, col)

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

    def _dict_prepare(self, name: str) -> _DictPrepared:
        """A dictionary-read field over the good rows: one dictionary of its distinct values (prefix stripped,
        as text) and each row's code."""
        col = self.cols.get(name)
        if col is None or not col.chunks:
            return _DictPrepared(pa.array([""] if col is None else [], pa.string()), None, True)
        whole = pa.chunked_array(col.chunks, type=_DICT_BINARY).combine_chunks()  # one dictionary (C++)
        uniq, indices = whole.dictionary, whole.indices
        clean = True
        if col.plen or col.slen:
            ok = self._affix_ok(col, uniq)
            if not ok.all():
                rows = np.flatnonzero(np.isin(indices.to_numpy(zero_copy_only=False), np.flatnonzero(~ok)))
                if not np.isin(rows, self.candidates).all():
                    raise _Fallback(f"a {name} value does not start with the delimiter's rest")
                clean = False
            uniq = _slice(uniq, col)
        values, utf8 = _to_strings(uniq)
        if not clean or not utf8:  # b"" and the bare prefix, or two invalid spellings, may now be equal
            enc = pc.dictionary_encode(values)
            indices, values = enc.indices.take(indices), enc.dictionary
        codes = np.frombuffer(indices.buffers()[1], np.int32)[indices.offset : indices.offset + len(indices)]
        return _DictPrepared(values, codes, utf8)

    def _dict_task(self, name: str) -> _FieldColumns:
        """The field in final order (the extra records' values added to the dictionary), and the columns parsed
        from it, per distinct value."""
        m = self.merge
        prepared = self.prepared[name].result()
        assert isinstance(prepared, _DictPrepared)
        values = prepared.values
        # A field that gives numbers only (ExitCode, NNodes): its codes are kept as indices for numpy (no int32
        # copy); one with a text column keeps int32 codes for the dictionary array.
        fd = self.reg[name]
        if name not in self.cols and fd.absent is None:  # not in this input, and null says so (Reason)
            assert fd.copy is not None and fd.vparse is None
            return _FieldColumns({fd.copy.name: pa.nulls(m.size, pa.string())}, {})
        numbers_only = fd.copy is None and not any(pa.types.is_string(c.type) for c in fd.parsed)
        kind = np.intp if numbers_only else np.int32
        if prepared.indices is None:
            codes = np.zeros(m.size, dtype=kind)
        else:
            codes = m.full(prepared.indices, kind)
        e_values = self.e_raw.get(name)
        if e_values is None:
            e_values = pa.array([""] * m.n_e, pa.string())
        if m.n_e:
            missing = pc.is_null(pc.index_in(e_values, value_set=values))
            new = pc.unique(e_values.filter(missing))
            if len(new):
                values = pa.concat_arrays([values, new])
            m.place_e(codes, np.asarray(pc.index_in(e_values, value_set=values).to_numpy(zero_copy_only=False)))
        columns, bad = _derived(fd, values, codes)
        return _FieldColumns(columns, bad, prepared.utf8, values=values, codes=codes)

    def _spliced(self, name: str) -> pa.Array:
        """Field `name` of every final row, without prefix, as bytes: the good rows' values with the extra
        records' ones put in (one concatenation)."""
        col = self.cols[name]
        chunks = [self._strip(col, chunk, start) for start, chunk in self._chunks(col)]
        return self.merge.splice(chunks, self.e_rawc[name].cast(pa.binary()))

    def _job_id_task(self, name: str) -> _FieldColumns:
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
        fd = self.reg[name]
        assert fd.copy is not None
        return _FieldColumns(
            {
                fd.copy.name: text, "job_base": _nullable(base, ~bad, pa.int64()),
                "array_task": _nullable(task, has_task, pa.int64()),
                "het_offset": _nullable(het, has_het, pa.int64()), "array_pending": pending,
            },
            {name: bad}, utf8, is_step=is_step,
        )

    def _int_prepare(self, name: str) -> _IntPrepared:
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
        return _IntPrepared(values, bad, utf8)

    def _int_task(self, name: str) -> _FieldColumns:
        m = self.merge
        fd = self.reg[name]
        prepared = self.prepared[name].result()
        assert isinstance(prepared, _IntPrepared)
        values = m.full(prepared.values)
        bad = np.zeros(m.size, dtype=bool) if prepared.bad is None else m.full(prepared.bad)
        if m.n_e:
            e_values, e_bad = _reference_of(fd)(self.e_rawc[name])
            m.place_e(values, _ints(pc.fill_null(e_values, 0)))
            m.place_e(bad, e_bad)
        return _FieldColumns({fd.parsed[0].name: _nullable(values, ~bad, pa.int64())}, {name: bad}, prepared.utf8)

    def _fixed_prepare(self, group: tuple[SacctField, ...]) -> _FixedPrepared:
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
                size = col.plen + width + col.slen
                n = len(chunk)
                if not n:
                    continue
                data, offsets = _parts(chunk)
                fixed = (offsets[1:] - offsets[:-1]) == size
                if col.slen:  # (the kernels check the prefix; the suffix is checked here)
                    fixed &= fields._mask(pc.ends_with(chunk, pattern=self.pre[-col.slen :]))
                todo = fixed
                v, k = values[f][start : start + n], np.zeros(n, dtype=bool)
                if first is not None and fixed.all() and first[4].all() and groups[0][0] == start:
                    same = fields.rows_equal(data, int(offsets[0]), first[2], first[3], n, size)
                    v[same], k[same] = first[0][same], first[1][same]
                    todo = ~same
                if todo.all():
                    kernel(data, int(offsets[0]), n, prefix, out=(v, k), block_rows=self.opts.swar_block_rows,
                           tail=col.slen)
                elif todo.any():
                    sel = np.flatnonzero(todo)
                    d2, o2 = _parts(chunk.filter(pa.array(todo)))
                    v[sel], k[sel] = kernel(d2, int(o2[0]), len(sel), prefix, block_rows=self.opts.swar_block_rows,
                                            tail=col.slen)
                if f == 0:
                    first = (v, k, data, int(offsets[0]), fixed)
                if not k.all():
                    if valid[f] is None:
                        valid[f] = np.ones(self.n_g, dtype=bool)
                    valid[f][start : start + n] = k  # type: ignore[index]
                    slow[f].append(np.flatnonzero(~k) + start)
        out = _FixedPrepared({}, True)
        for f, (name, col) in enumerate(zip(names, cols, strict=True)):
            bad: np.ndarray | None = None
            rows = np.concatenate(slow[f]) if slow[f] else np.zeros(0, dtype=np.int64)
            if len(rows):
                text, utf8 = self._rows_text(col, rows)
                out.utf8 &= utf8
                ref, ref_bad = reference(text)
                values[f][rows] = _ints(ref)
                valid[f][rows] = fields.valid_mask(ref)  # type: ignore[index]
                if ref_bad.any():
                    bad = np.zeros(self.n_g, dtype=bool)
                    bad[rows] = ref_bad
            out.fields[name] = _FixedValues(values[f], valid[f], bad)
        return out

    def _fixed_task(self, key: str, group: tuple[SacctField, ...]) -> _FieldColumns:
        """The prepared fields in final order, the extra records' values parsed by the vectorised parser."""
        m = self.merge
        prepared = self.prepared[key].result()
        assert isinstance(prepared, _FixedPrepared)
        out = _FieldColumns({}, {}, prepared.utf8)
        for fd in group:
            name, column, reference = fd.name, fd.parsed[0], _reference_of(fd)
            g = prepared.fields[name]
            e_arr, e_bad = reference(self.e_rawc[name]) if m.n_e else (None, None)
            values = m.full(g.values)
            valid: np.ndarray | None = None
            if g.valid is not None:
                valid = m.full(g.valid)
                if m.n_e:
                    valid[m.at] = True
            elif e_arr is not None and e_arr.null_count:
                valid = np.ones(m.size, dtype=bool)
            bad: np.ndarray | None = None
            if g.bad is not None:
                bad = m.full(g.bad)
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
            out.columns[column.name] = _nullable(values, valid, column.type)
            out.bad[name] = bad
        return out

    # ---- assembly ----------------------------------------------------------------------------------------

    def _build(self) -> ParseResult:
        if not self.odd:
            for line, text in sorted(self.invalid.items()):
                self._extra_line(line, text)
        self.merge = m = _Merge(self.g_lines, np.array([line for line, _ in self.extras], dtype=np.int64))
        self.e_raw = {name: pa.array([row[pos] for _, row in self.extras], pa.string())
                      for pos, name in enumerate(self.wanted)}
        self.e_rawc = {fd.name: self.e_raw.get(fd.name, absent_column(fd.absent, m.n_e)) for fd in self.reg.fields}

        tasks: dict[str, Callable[[], _FieldColumns]] = {}
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
            self.utf8_ok &= out.utf8

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
            columns.update(out.columns)
            bad.update(out.bad)
        columns["line"] = pa.array(m.lines)
        for fd in self.reg.fields:
            if fd.unknowable:
                columns[fd.unknowable.name] = pa.array(np.ones(m.size, dtype=bool))
        bad = {name: bad.get(name) for name in self.reg.checked}
        is_step = next(out.is_step for out in done.values() if out.is_step is not None)

        def raw_value(name: str, i: int) -> Any:
            got = done.get(name)
            if got is not None and got.values is not None and got.codes is not None:
                return got.values[int(got.codes[i])].as_py()
            src = m.source(i)
            if src >= m.n_g:
                return self.e_rawc[name][src - m.n_g].as_py()
            text, _ = self._rows_text(self.cols[name], np.array([src], dtype=np.int64))
            return text[0].as_py()

        return finish(m.size, columns, bad, is_step, raw_value, m.lines, self.source, self.problems, dropped,
                      schema=self.reg.schema)

    def _run(self, tasks: dict[str, Callable[[], _FieldColumns]]) -> dict[str, _FieldColumns]:
        if self.pool is None or self.opts.workers == 1:
            return {name: task() for name, task in tasks.items()}
        futures = {name: self.pool.submit(task) for name, task in tasks.items()}
        return {name: fut.result() for name, fut in futures.items()}


def _derived(fd: SacctField, values: pa.Array, codes: np.ndarray,
             ) -> tuple[dict[str, pa.Array], dict[str, np.ndarray | None]]:
    """The columns of a dictionary-read field: its text (dictionary-encoded), and what is parsed from it (once
    per distinct value, taken to the rows by their codes: text columns dictionary-encoded)."""
    columns: dict[str, pa.Array] = {}
    bad: dict[str, np.ndarray | None] = {}
    if fd.copy:
        indices = pa.Array.from_buffers(pa.int32(), len(codes), [None, pa.py_buffer(codes.astype(np.int32, copy=False))])
        columns[fd.copy.name] = pa.DictionaryArray.from_arrays(indices, values)
    if fd.vparse is None:
        return columns, bad
    rows = codes.astype(np.intp, copy=False)
    parsed = fd.vparse(values)
    for name, arr in parsed.columns.items():
        columns[name] = _encoded(arr, rows) if pa.types.is_string(arr.type) else _lookup(arr, rows)
    bad[fd.name] = _row_mask(parsed.bad, rows)
    return columns, bad


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


def _slice(arr: pa.Array, col: _Column) -> pa.Array:
    """The values of `col` without the delimiter's parts around them."""
    if not col.slen:
        return pc.binary_slice(arr, col.plen, 1 << 30)
    return pc.binary_slice(arr, col.plen, -col.slen)


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
