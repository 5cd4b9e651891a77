"""Step 5 of the direct reader: the table and its problems. The checks that need every step's result come here
(blank lines: records of empty fields in the reference's single pass, skipped in its line-level pass; a line
of separator bytes next to blank lines), then normalize.finish drops the bad rows and the steps and reports
each bad row by its first bad field."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from gpuclust.accounting.ingest.fast.direct.columns import FieldColumns, FinalRows
from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout, StandIn
from gpuclust.accounting.ingest.fast.direct.pieces import Pieces
from gpuclust.accounting.ingest.fast.direct.records import Records
from gpuclust.accounting.ingest.normalize import ParseResult, derive_missing, finish
from gpuclust.accounting.ingest.textcommon import _Source


def removed_rows(src: _Source, body_start: int, layout: Layout, pieces: Pieces, candidates: np.ndarray,
                 records: Records, utf8: bool, stand_in: StandIn, scanned: bool = False) -> set[int]:
    """The good rows that are no records: step 2's, and the blank candidates where the reference would read
    the input line by line (some value not UTF-8, or no stand-in byte free for a multi-byte delimiter)."""
    removed = set(records.removed)
    line_mode = records.odd
    if not records.odd and len(candidates) == pieces.n_g and not pieces.invalid:
        raise Fallback("only empty lines: the reference returns an empty result")
    if not records.odd and len(candidates):
        # Every line is a whole record: the reference's single pyarrow pass applies, where a blank line is a
        # record of empty fields; unless some value is not UTF-8 or no stand-in byte is free, and its
        # line-level pass (which skips blank lines) runs instead.
        line_mode = not utf8 or (len(layout.delim) > 1 and not stand_in.get())
        if line_mode:
            removed.update(candidates.tolist())
    if len(candidates) and (line_mode or len(layout.delim) > 1) and not scanned:
        # An empty line and a line of nfields-1 d0 bytes read alike; the latter is an odd line for a
        # multi-byte delimiter, and a record (not blank) for a one-byte one. (`scanned`: done already.)
        no_separator_lines(src, body_start, layout)
    return removed


def no_separator_lines(src: _Source, body_start: int, layout: Layout) -> None:
    """Blank lines are skipped; a line of nfields-1 d0 bytes reads the same in pyarrow but is not blank."""
    needle = layout.d0 * (layout.nfields - 1)
    pos, seen = body_start, 0
    while True:
        at = src.find(needle, pos)
        if at < 0:
            return
        end = at + len(needle)
        if ((at == body_start or src.read(at - 1, at) == b"\n")
                and (end == src.size or src.read(end, end + 1) in (b"\n", b"\r"))):
            raise Fallback("a line of separator bytes next to blank lines")
        seen += 1
        if seen > 1000:
            raise Fallback("too many separator runs")
        pos = at + 1


def assemble(final: FinalRows, done: dict[str, FieldColumns], records: Records, removed: set[int],
             source: str, usage_rule: str | None = None) -> ParseResult:
    """The columns of step 4b as one table (less the rows that are no records), with the problems of steps 2-3
    and one per bad row."""
    m, registry = final.merge, final.layout.registry
    dropped: np.ndarray | None = None
    if removed:
        dropped = np.zeros(m.size, dtype=bool)
        dropped[m.final(np.fromiter(removed, dtype=np.int64))] = True
    columns: dict[str, pa.Array] = {}
    bad: dict[str, np.ndarray | None] = {}
    for out in done.values():
        columns.update(out.columns)
        bad.update(out.bad)
    text_read = False  # (a text field of the input: its column comes in source order, FinalRows.text_column)
    for fd in registry.fields:  # the text fields' columns are consumed by finish (usage): held there alone
        if fd.direct == "text" and fd.copy is not None and fd.name in done:
            done[fd.name].columns.pop(fd.copy.name, None)
            text_read |= fd.name in final.good.pieces.cols
    columns["line"] = pa.array(m.lines)
    # A narrow dump (its own --format): what it lacks is derived or unknown, as `normalize` makes it.
    missing = registry.missing(final.layout.header)
    for fd in registry.fields:
        if fd.unknowable:
            known = fd.name not in missing  # (no ExitCode column: every exit code unknown, none bad)
            columns[fd.unknowable.name] = pa.array(np.full(m.size, known, dtype=bool))
            if not known:
                columns.update({c.name: pa.nulls(m.size, c.type) for c in fd.parsed})
                bad[fd.name] = None
    if missing:
        derived: dict[str, np.ndarray] = {}
        derive_missing(columns, derived, missing, m.size)
        bad.update(derived)
    bad = {name: bad.get(name) for name in registry.checked}
    is_step = next(out.is_step for out in done.values() if out.is_step is not None)

    def raw_value(name: str, i: int) -> Any:
        got = done.get(name)
        if got is not None and got.values is not None and got.codes is not None:
            return got.values[int(got.codes[i])].as_py()
        if name not in final.good.pieces.cols:
            return registry[name].absent
        src = m.source(i)
        if src >= m.n_g:
            return final.e_rawc[name][src - m.n_g].as_py()
        text, _ = final.good.rows_text(final.good.pieces.cols[name], np.array([src], dtype=np.int64))
        return text[0].as_py()

    result = finish(m.size, columns, bad, is_step, raw_value, m.lines, source, records.problems, dropped,
                    schema=registry.schema, usage_rule=usage_rule,
                    usage_rows=m.sources() if m.n_e and text_read else None)
    result.missing_columns = missing
    # Without an ExitCode column, exit codes are known only when no record reached the fields (as `normalize`
    # counts them: a row that is no record, such as the blank line left of a record refused for its field count,
    # does not).
    records_read = m.size - (int(dropped.sum()) if dropped is not None else 0)
    result.exit_codes_known = "ExitCode" not in missing or records_read == 0
    return result
