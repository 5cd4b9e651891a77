"""Step 1 of the direct reader: split the body into lines and cells. pyarrow.csv reads the input bytes as they are
(a memory-mapped file is never copied), split on the delimiter's byte d0, in pieces cut at newlines, side by
side. A line with exactly the header's number of cells is a *good row* (its values stay in pyarrow chunks, each
still carrying the delimiter's other bytes, checked later); any other line is an *invalid line*, kept as bytes
for step 2. `blank_candidates` finds the good rows that may be blank lines (every value empty);
`BlankCandidates` finds them once, for every thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuclust.accounting.ingest.fast import memory
from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout, Pool
from gpuclust.accounting.ingest.fast.swar import buffers_of
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.textcommon import _BOM, _Source

DICT_BINARY = pa.dictionary(pa.int32(), pa.binary())


@dataclass
class Column:
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

    def chunk_starts(self) -> list[tuple[int, pa.Array]]:
        return list(zip(self.starts[:-1].tolist(), self.chunks, strict=True))


@dataclass(frozen=True)
class Pieces:
    """What step 1 gives: each read column over the good rows, the line of each good row (`g_lines`, sorted),
    the invalid lines (line -> bytes) and the number of the body's last line."""

    cols: dict[str, Column]
    g_lines: np.ndarray
    invalid: dict[int, bytes]
    last_line: int

    @property
    def n_g(self) -> int:
        return len(self.g_lines)

    def g_row(self, line: int) -> int:
        """The good row of `line`."""
        row = int(np.searchsorted(self.g_lines, line))
        if row >= self.n_g or int(self.g_lines[row]) != line:
            raise Fallback("line bookkeeping")
        return row


def read_pieces(src: _Source, body_start: int, layout: Layout, opts: ReaderOptions, pool: Pool,
                decode_failed: Any) -> Pieces:
    """The body read by pyarrow.csv in pieces cut at newlines, one thread each (so pyarrow reports each line it
    cannot split with its line number). `decode_failed`: the object the quiet unraisable hook marks when
    pyarrow could not decode a line for the handler."""
    cuts = _cuts(src, body_start, opts)
    parts = pool.map(lambda span: _read_piece(src, span, layout, opts, decode_failed),
                     list(zip(cuts[:-1], cuts[1:], strict=True)))
    g_lines: list[np.ndarray] = []
    invalid: dict[int, bytes] = {}
    line0 = 2
    for table, bad in parts:
        numbers = sorted(number for number, _ in bad if number is not None)
        if len(numbers) != len(bad):
            raise Fallback("no line number for a line pyarrow could not split")
        nlines = table.num_rows + len(bad)
        local = np.arange(1, nlines + 1, dtype=np.int64)
        if numbers:
            local = np.delete(local, np.array(numbers, dtype=np.int64) - 1)
        g_lines.append(local + (line0 - 1))
        for number, text in bad:
            invalid[line0 + int(number or 0) - 1] = text.encode("utf-8")
        line0 += nlines
    lines = np.concatenate(g_lines)
    cols: dict[str, Column] = {}
    for name in layout.read:
        chunks = [chunk for table, _ in parts for chunk in table.column(name).chunks]
        starts = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum([len(c) for c in chunks], out=starts[1:])
        if int(starts[-1]) != len(lines):
            raise Fallback("column lengths differ")
        cols[name] = Column(name, 0 if name == layout.first else len(layout.rest),
                            0 if name == layout.last else len(layout.pre), chunks, starts)
    return Pieces(cols, lines, invalid, line0 - 1)


def _cuts(src: _Source, body_start: int, opts: ReaderOptions) -> list[int]:
    size = src.size - body_start
    k = max(1, min(opts.pieces or 2 * opts.workers, size // max(1, opts.min_piece_bytes)))
    cuts = [body_start]
    for i in range(1, k):
        target = max(body_start + size * i // k, cuts[-1])
        nl = src.find(b"\n", target)
        if nl < 0 or nl + 1 >= src.size:
            break
        if src.read(nl + 1, nl + 4) == _BOM:
            continue  # pyarrow would drop a byte-order mark at the start of a piece
        cuts.append(nl + 1)
    cuts.append(src.size)
    return cuts


def _read_piece(src: _Source, span: tuple[int, int], layout: Layout, opts: ReaderOptions,
                decode_failed: Any) -> tuple[pa.Table, list[tuple[int | None, str]]]:
    a, b = span
    if src.find(b"\r", a, b) >= 0 and not _crlf_only(src, a, b):
        raise Fallback("a carriage return not before a newline: pyarrow ends a line there, the reference does not")
    invalid: list[tuple[int | None, str]] = []

    def on_invalid(row: Any) -> str:
        invalid.append((row.number, row.text))
        return "skip"

    on_invalid._direct_reader = decode_failed  # type: ignore[attr-defined]
    dictionary = layout.registry.dictionary
    types = {name: (DICT_BINARY if name in dictionary else pa.binary()) for name in layout.read}
    try:
        return _read_csv(src, a, b, layout, opts, on_invalid, types), invalid
    except pa.ArrowInvalid as exc:
        # A line longer than a block, a line pyarrow cannot decode for the handler (not UTF-8)...: the
        # reference reads what pyarrow cannot.
        raise Fallback(f"pyarrow.csv: {exc}") from None


def _crlf_only(src: _Source, a: int, b: int) -> bool:
    """Whether every carriage return in [a, b) ends a line (CRLF): pyarrow then splits the lines as the
    reference does after it reads CRLF as LF."""
    arr = np.frombuffer(src.buffer, dtype=np.uint8)
    for s in range(a, b, src.scan_block):
        e = min(s + src.scan_block, b)
        at = np.flatnonzero(arr[s:e] == 13) + s
        if len(at) and (int(at[-1]) + 1 >= src.size or not (arr[at + 1] == 10).all()):
            return False
    return True


def _read_csv(src: _Source, a: int, b: int, layout: Layout, opts: ReaderOptions, on_invalid: Callable[[Any], str],
              types: dict[str, pa.DataType]) -> pa.Table:
    return pacsv.read_csv(
        pa.BufferReader(src.buffer.slice(a, b - a)), memory_pool=memory.read_pool(),
        read_options=pacsv.ReadOptions(column_names=layout.names, block_size=opts.read_block, use_threads=False),
        parse_options=pacsv.ParseOptions(
            delimiter=layout.d0.decode("latin-1"), quote_char=False, escape_char=False,
            newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=on_invalid,
        ),
        convert_options=pacsv.ConvertOptions(
            column_types=types, include_columns=layout.read, strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


class BlankCandidates:
    """`blank_candidates`, found once by whichever thread asks first (the others wait for it): step 4a starts
    in the pool before they are known, and needs them only where a value lacks the delimiter's bytes."""

    def __init__(self, pieces: Pieces, layout: Layout, opts: ReaderOptions) -> None:
        self.pieces, self.layout, self.opts = pieces, layout, opts
        self._lock = threading.Lock()
        self._rows: np.ndarray | None = None

    def rows(self) -> np.ndarray:
        with self._lock:
            if self._rows is None:
                self._rows = blank_candidates(self.pieces, self.layout, self.opts)
            return self._rows


def blank_candidates(pieces: Pieces, layout: Layout, opts: ReaderOptions) -> np.ndarray:
    """Good rows pyarrow made of an empty line: every value empty (a line of d0 bytes looks the same)."""
    col = pieces.cols[layout.blank_probe]
    found: list[np.ndarray] = []
    for chunk, start in zip(col.chunks, col.starts[:-1].tolist(), strict=True):
        if pa.types.is_dictionary(chunk.type):
            empty = np.flatnonzero(np.asarray(pc.binary_length(chunk.dictionary).to_numpy()) == 0)
            if len(empty):
                found.append(np.flatnonzero(np.isin(indices(chunk), empty)) + start)
        else:
            _, offsets = buffers_of(chunk)
            hits = np.flatnonzero(offsets[1:] == offsets[:-1])
            if len(hits):
                found.append(hits + start)
    if not found:
        return np.zeros(0, dtype=np.int64)
    rows = np.concatenate(found)
    if len(rows) > opts.max_blank_candidates:
        raise Fallback("too many empty lines")
    empty = np.ones(len(rows), dtype=bool)
    for other in pieces.cols.values():
        empty &= _empty_values(other, rows)
    return rows[empty]


def indices(arr: pa.DictionaryArray) -> np.ndarray:
    return np.asarray(arr.indices.to_numpy(zero_copy_only=False), dtype=np.int32)


def _empty_values(col: Column, rows: np.ndarray) -> np.ndarray:
    """Whether the value of `col` in each of the good rows `rows` (sorted) is empty."""
    out = np.zeros(len(rows), dtype=bool)
    which = np.searchsorted(col.starts, rows, side="right") - 1
    bounds = np.flatnonzero(np.diff(which)) + 1  # rows is sorted: each chunk's rows are one run
    for a, b in zip([0, *bounds.tolist()], [*bounds.tolist(), len(rows)], strict=True):
        k = int(which[a])
        local = rows[a:b] - int(col.starts[k])
        chunk = col.chunks[k]
        if pa.types.is_dictionary(chunk.type):
            _, offsets = buffers_of(chunk.dictionary)
            out[a:b] = (offsets[1:] == offsets[:-1])[indices(chunk)[local]]
        else:
            _, offsets = buffers_of(chunk)
            out[a:b] = offsets[local + 1] == offsets[local]
    return out
