"""Steps 2 and 3 of the direct reader: the lines that are not whole records (step 1's invalid lines, and the
blank ones), as the reference's line-level pass treats them.

* Step 2, locate records: a line with too few cells is joined with the lines after it until the record has
  every field (a newline inside a job name or comment); a blank line is skipped.
* Step 3, split cells: a record with too many cells (a plain `|` dump with a `|` inside a free-text field)
  gives the extra cells to its free-text fields in the one way that leaves every other field valid
  (textcommon._repair); a record that cannot be told is a problem, never guessed.
* A free-text last column (a header that ends in Comment, JobID first): a newline in it puts the rest of the
  value on lines after a whole record, so a record runs on to the next line that starts with a JobID
  (`_tail_records`, the reference's rule).

What comes out (`Records`): the extra records (line, text of each wanted field), the good rows that were no
records (blank, or joined into one), the problems."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout, StandIn
from gpuclust.accounting.ingest.fast.direct.pieces import Column, Pieces
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.textcommon import _repair, _starts_record, _tail_continuation
from gpuclust.errors import Problem


@dataclass(frozen=True)
class Patch:
    """A record that is one good row with lines of text around it that hold no delimiter (a newline in a
    free-text first or last value): the row stays a row; its first value gains the lines before it
    (`before`, each line with its newline), its last value the lines after it (`after`), and it moves to
    the record's first line. Its other values are the row's own, parsed as every good row's are."""

    row: int
    line: int
    before: str
    after: str


@dataclass
class Records:
    """Step 2-3's result. `odd`: some line is not a whole record (the reference's line-level pass applies)."""

    odd: bool
    extras: list[tuple[int, list[str]]] = field(default_factory=list)  # (line, the wanted fields' values)
    patches: list[Patch] = field(default_factory=list)  # by row
    removed: set[int] = field(default_factory=set)  # good rows that are no records
    problems: list[Problem] = field(default_factory=list)
    utf8: bool = True  # every value of the extra records was valid UTF-8

    def good_lines(self, g_lines: np.ndarray) -> np.ndarray:
        """The line of each good row as a record: a patched row's is its record's first line."""
        if not self.patches:
            return g_lines
        out = g_lines.copy()
        out[[p.row for p in self.patches]] = [p.line for p in self.patches]
        return out


def locate_records(pieces: Pieces, candidates: np.ndarray, layout: Layout, opts: ReaderOptions,
                   stand_in: StandIn, source: str) -> Records:
    """Steps 2 and 3 over the invalid lines of step 1 and the blank candidates."""
    n1 = layout.nfields - 1
    counts = {line: text.count(layout.delim) for line, text in pieces.invalid.items()}
    odd = any(c != n1 for c in counts.values())
    if (odd or len(candidates)) and _tail_continuation(layout.header, opts):
        return _tail_records(pieces, candidates, layout, opts, stand_in, source, counts)
    out = Records(odd)
    if not odd:  # every invalid line holds whole fields (a stray d0 byte in a value)
        for line, text in sorted(pieces.invalid.items()):
            _whole_line(out, layout, line, text)
        return out
    info: dict[int, tuple[bytes, int]] = {line: (text, counts[line]) for line, text in pieces.invalid.items()}
    for row in candidates.tolist():
        info[int(pieces.g_lines[row])] = (b"", 0)
        out.removed.add(row)  # a blank line holds no data: skipped, or joined into the record before it
    consumed: set[int] = set()
    spans: list[tuple[int, int | None]] = []  # (first line, last line) of each record, in line order
    for line in sorted(ln for ln, (_, c) in info.items() if c != n1):
        if line in consumed:
            continue
        text, count = info[line]
        consumed.add(line)
        if text.strip() == b"":
            continue
        acc, j = count, line
        while acc < n1 and j + 1 <= pieces.last_line:  # step 2: join the lines of one record
            j += 1
            consumed.add(j)
            acc += info[j][1] if j in info else n1
        spans.append((line, j))
    _build_records(out, spans, info, pieces, layout, opts, stand_in, source)
    for line, (text, c) in info.items():
        if c == n1 and line not in consumed:
            _whole_line(out, layout, line, text)
    return out


def _build_records(out: Records, spans: Sequence[tuple[int, int | None]], info: dict[int, tuple[bytes, int]],
                   pieces: Pieces, layout: Layout, opts: ReaderOptions, stand_in: StandIn, source: str) -> None:
    """Each span's lines joined into one record (step 3 repairs a record with too many cells; one that still has
    the wrong number is a problem); a span (line, None) is a line that continues no record. A span of one good
    line and lines without a delimiter is a `Patch` where its first and last fields allow. The other good
    lines inside spans are no records any more (`removed`); they are read from step 1's columns at once."""
    joined = _patches(out, spans, info, pieces, layout)
    good = sorted({k for start, end in joined if end is not None for k in range(start, end + 1) if k not in info})
    rows = _good_rows(pieces, good)
    out.removed.update(rows.tolist())
    lines = dict(zip(good, _line_texts(pieces, layout, rows), strict=True))
    free = [layout.header.index(name) for name in opts.registry.free_text if name in layout.header]

    def shown(raw: bytes) -> bytes:
        return raw.replace(layout.delim, stand_in.get()) if len(layout.delim) > 1 and stand_in.get() else raw

    for start, end in joined:
        if end is None:
            out.problems.append(Problem(source, start, f"line continues no record: {shown(info[start][0])[:120]!r}"))
            continue
        record = b"\n".join(info[k][0] if k in info else lines[k] for k in range(start, end + 1))
        values = _values(out, layout, record)
        if len(values) > layout.nfields and free:  # step 3: give extra cells to the free-text fields
            values = _repair(values, layout.header, free, layout.delim_text, opts) or values
        if len(values) != layout.nfields:
            out.problems.append(Problem(
                source, start, f"record has {len(values)} fields, header has {layout.nfields}: {shown(record)[:120]!r}"))
            continue
        out.extras.append((start, [values[pos] for pos in layout.positions]))


def _patches(out: Records, spans: Sequence[tuple[int, int | None]], info: dict[int, tuple[bytes, int]],
             pieces: Pieces, layout: Layout) -> list[tuple[int, int | None]]:
    """`spans` less those that are patches (added to `out.patches`): one good line, every other line without a
    delimiter (blank ones too), and the fields the lines around it go to read by dictionary (which
    FinalRows.dict_column patches) or not read at all. Such a span, joined into a record, splits into the
    row's values with the text around it added to its first and last."""
    first_ok, last_ok = (name not in layout.wanted or layout.registry[name].direct == "dict"
                         for name in (layout.first, layout.last))
    rest: list[tuple[int, int | None]] = []
    found: list[tuple[int, int, int]] = []  # (start, good line, end)
    for start, end in spans:
        if end is not None:
            good = [k for k in range(start, end + 1) if k not in info]
            if (len(good) == 1 and (first_ok or good[0] == start) and (last_ok or good[0] == end)
                    and not any(info[k][1] for k in range(start, end + 1) if k != good[0])):
                found.append((start, good[0], end))
                continue
        rest.append((start, end))
    rows = _good_rows(pieces, [g for _, g, _ in found]).tolist()
    # (The invalid lines are pyarrow's text, so UTF-8; blank lines are empty.)
    out.patches.extend(
        Patch(row, start, b"".join(info[k][0] + b"\n" for k in range(start, g)).decode("utf-8"),
              b"".join(b"\n" + info[k][0] for k in range(g + 1, end + 1)).decode("utf-8"))
        for row, (start, g, end) in zip(rows, found, strict=True))
    return rest


def _tail_records(pieces: Pieces, candidates: np.ndarray, layout: Layout, opts: ReaderOptions,
                  stand_in: StandIn, source: str, counts: dict[int, int]) -> Records:
    """Steps 2-3 where the last column is free text and JobID first, line for line as the reference's
    line-level pass: a line that starts no record (blank ones too) continues the whole record before it; a
    record runs on until the next line that starts with a JobID."""
    n1, first_line, last_line = layout.nfields - 1, 2, pieces.last_line
    out = Records(True)  # the reference reads such a body line by line
    info: dict[int, tuple[bytes, int]] = {line: (text, counts[line]) for line, text in pieces.invalid.items()}
    for row in candidates.tolist():
        info[int(pieces.g_lines[row])] = (b"", 0)
        out.removed.add(row)
    consumed: set[int] = set()
    spans: list[tuple[int, int | None]] = []

    def count(line: int) -> int:
        return info[line][1] if line in info else n1

    # A good row's first delimiter ends its first value (the value holds the delimiter's bytes before d0): the
    # good lines right after the odd ones (where records end) are asked about, read at once.
    after = sorted({ln + 1 for ln in info if ln + 1 <= last_line and ln + 1 not in info})
    firsts = dict(zip(after, _values_at(pieces.cols[layout.first], _good_rows(pieces, after)), strict=True))

    def starts_record(line: int) -> bool:
        if line in info:
            return _starts_record(info[line][0], layout.delim)
        first = firsts[line] if line in firsts else pieces.cols[layout.first].value(pieces.g_row(line))
        job_id = first[: len(first) - len(layout.pre)]
        return _starts_record(job_id + layout.delim, layout.delim)

    for line in sorted(ln for ln, (_, c) in info.items() if c != n1):
        if line in consumed:
            continue
        start = line
        if start > first_line and not starts_record(start):
            if count(start - 1) != n1 or start - 1 in consumed:  # (only after blank lines at the top)
                consumed.add(start)
                if info[start][0].strip():
                    spans.append((start, None))
                continue
            start -= 1  # the whole record before it: this line continues its last value
        elif info[start][0].strip() == b"":
            consumed.add(start)  # a blank line between records holds no data
            continue
        acc, end = count(start), start
        while acc < n1 and end + 1 <= last_line:
            end += 1
            acc += count(end)
        while end + 1 <= last_line and not starts_record(end + 1):
            end += 1
        consumed.update(range(start, end + 1))
        spans.append((start, end))
    _build_records(out, spans, info, pieces, layout, opts, stand_in, source)
    for line, (raw, c) in info.items():
        if c == n1 and line not in consumed:
            _whole_line(out, layout, line, raw)
    return out


def _whole_line(out: Records, layout: Layout, line: int, text: bytes) -> None:
    """A line of whole fields pyarrow could not split (a stray d0 byte in a value)."""
    values = _values(out, layout, text)
    out.extras.append((line, [values[pos] for pos in layout.positions]))


def _good_rows(pieces: Pieces, lines: list[int]) -> np.ndarray:
    """The good row of each of `lines` (each must be a good row's line)."""
    at = np.asarray(lines, dtype=np.int64)
    rows = np.searchsorted(pieces.g_lines, at)
    if len(at) and ((rows >= pieces.n_g).any() or (pieces.g_lines[np.minimum(rows, pieces.n_g - 1)] != at).any()):
        raise Fallback("line bookkeeping")
    return rows


def _line_texts(pieces: Pieces, layout: Layout, rows: np.ndarray) -> list[bytes]:
    """Good rows `rows` (sorted) exactly as they stand in the input (values joined by d0; each holds its
    prefix), read column by column."""
    if not len(rows):
        return []
    if not layout.complete:
        raise Fallback("a good line must be joined to a record, but not every field was read")
    columns = [_values_at(pieces.cols[name], rows) for name in layout.names]
    return [layout.d0.join(parts) for parts in zip(*columns, strict=True)]


def _values_at(col: Column, rows: np.ndarray) -> list[bytes]:
    """The values of good rows `rows` of `col`, as bytes (one take over its chunks)."""
    if not len(rows):
        return []
    taken = pa.chunked_array(col.chunks, type=col.chunks[0].type).take(pa.array(rows))
    out: list[bytes] = []
    for chunk in taken.chunks:
        if pa.types.is_dictionary(chunk.type):
            chunk = chunk.cast(chunk.type.value_type)
        out += [b"" if v is None else v for v in chunk.to_pylist()]
    return out


def _values(out: Records, layout: Layout, record: bytes) -> list[str]:
    """The fields of a record, as text (invalid UTF-8 replaced per value, as the reference does)."""
    try:
        # Valid UTF-8 throughout: splitting the text on the delimiter splits the bytes the same way.
        return record.decode("utf-8").split(layout.delim_text)
    except UnicodeDecodeError:
        values, _ = decode(record.split(layout.delim))
        out.utf8 = False
        return values


def decode(values: list[bytes]) -> tuple[list[str], bool]:
    """UTF-8 text of each value (invalid bytes replaced, as the reference does) and whether all were valid."""
    texts: list[str] = []
    valid = True
    for v in values:
        try:
            texts.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(v.decode("utf-8", "replace"))
            valid = False
    return texts, valid
