"""The direct text reader: pyarrow.csv straight over the input bytes, checked against the reference
(gpuclust.accounting.ingest.text) so that it returns the reference's result exactly, or None where it cannot be sure
to (a carriage return or a byte-order mark in the body, a field that does not start with the delimiter's
bytes, a line only of d0 bytes next to blank lines, a delimiter pyarrow cannot split on...; any step raises
`Fallback`), and text.parse_parsable then runs the reference.

The pipeline (`read_direct`), one module per step, each with typed inputs and outputs:

    0. layout.Layout.of            delimiter + header -> Layout (the split byte d0, the columns read)
    1. pieces.read_pieces          bytes -> Pieces: good rows (pyarrow chunks) + invalid lines, by line
    4a. prepare.GoodRows.tasks     each field over the good rows (in the thread pool, while the rest of
                                   1 and 2-3 run)
       pieces.BlankCandidates      Pieces -> the good rows that may be blank lines
    2-3. records.locate_records    invalid lines -> Records: records joined across newlines (2), pipes in
                                   free text given back to their field (3), problems
    4b. columns.FinalRows.tasks    each field in final order (good rows + extra records, `Merge`) -> columns
    5. assemble.removed_rows       the rows that are no records (blank lines, joined lines)
       assemble.assemble           -> ParseResult (normalize.finish: bad rows out, one problem each)

Its knobs are ReaderOptions fields: fast, strict, pieces, min_piece_bytes, read_block, group_rows,
swar_block_rows, max_blank_candidates, workers; the fields and how each is read (SacctField.direct) come from
the registry.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from gpuclust.accounting.ingest import usage
from gpuclust.accounting.ingest.fast import memory
from gpuclust.accounting.ingest.fast.direct.assemble import assemble, no_separator_lines, removed_rows
from gpuclust.accounting.ingest.fast.direct.columns import FinalRows, Merge
from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout, Pool, StandIn, split_at
from gpuclust.accounting.ingest.fast.direct.pieces import BlankCandidates, read_pieces
from gpuclust.accounting.ingest.fast.direct.prepare import GoodRows
from gpuclust.accounting.ingest.fast.direct.records import locate_records
from gpuclust.accounting.ingest.normalize import ParseResult, ReaderOptions, absent_column
from gpuclust.accounting.ingest.textcommon import _BOM, _DecodeFailure, _quiet_row_decode, _Source

__all__ = ["read_direct", "split_at"]


def read_direct(src: _Source, body_start: int, delim: bytes, header: list[str], source: str,
                opts: ReaderOptions) -> ParseResult | None:
    """The body of a --parsable2 dump (from `body_start`) read by the direct reader; None where it cannot vouch
    for the reference's result (or on an unexpected error, unless ``opts.strict``)."""
    if split_at(delim) is None or b"\r" in delim or (len(delim) > 1 and not delim.strip()):
        return None  # pyarrow cannot split on it, or a line's blankness would differ from the reference's
    if body_start >= src.size or src.read(body_start, body_start + 3) == _BOM:
        return None
    # A body of less than one piece is read on this thread: its column tasks cost less than handing them over.
    workers = opts.workers if src.size - body_start >= opts.min_piece_bytes else 1
    try:
        with _quiet_row_decode(), ThreadPoolExecutor(max_workers=workers) as threads:
            return _pipeline(src, body_start, Layout.of(delim, header, opts), source, opts, Pool(threads, workers))
    except Fallback:
        return None
    except (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError, IndexError, KeyError):
        if opts.strict:
            raise
        return None


def _pipeline(src: _Source, body_start: int, layout: Layout, source: str, opts: ReaderOptions,
              pool: Pool) -> ParseResult:
    pieces = read_pieces(src, body_start, layout, opts, pool, _DecodeFailure())  # 1
    blanks = BlankCandidates(pieces, layout, opts)
    good = GoodRows(layout, pieces, blanks, opts)
    prepared = pool.start(good.tasks())  # 4a, in the pool ...
    candidates = blanks.rows()  # ... while the blank candidates and steps 2-3 are found here
    stand_in = StandIn(src, body_start)
    records = locate_records(pieces, candidates, layout, opts, stand_in, source)
    # Step 5's scan for lines of separator bytes reads the whole input: done while it is in memory (a
    # multi-byte delimiter always needs it where there are blank candidates).
    scanned = bool(len(candidates)) and len(layout.delim) > 1
    if scanned:
        no_separator_lines(src, body_start, layout)
    src.evict()  # every later step reads the columns of step 1 (and a few lines at most from the input)
    merge = Merge(records.good_lines(pieces.g_lines), np.array([line for line, _ in records.extras], dtype=np.int64))
    e_raw = {name: pa.array([row[pos] for _, row in records.extras], pa.string())
             for pos, name in enumerate(layout.wanted)}
    e_rawc = {fd.name: e_raw.get(fd.name, absent_column(fd.absent, merge.n_e)) for fd in layout.registry.fields}
    final = FinalRows(good, prepared, merge, e_raw, e_rawc, records.patches)
    done = pool.run(final.tasks())  # 4b
    memory.release_read_pool()  # (step 1's chunks that 4b freed: the usage columns' text)
    utf8 = records.utf8 and all(out.utf8 for out in done.values())
    removed = removed_rows(src, body_start, layout, pieces, candidates, records, utf8, stand_in, scanned)  # 5
    return assemble(final, done, records, removed, source, usage.rule_for_version(opts.slurm_version))
