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
        body = body.replace(delim, sep)
    result = _fast(body, sep, header, source)
    if result is None:
        result = _line_level(body, sep, header, source, original=delim)
    return result


def _wanted(header: list[str]) -> list[str]:
    return [name for name in RAW_FIELDS if name in header]


def _fast(body: bytes, sep: bytes, header: list[str], source: str) -> ParseResult | None:
    """pyarrow.csv over the whole body; None when any line is not a whole record."""
    if not body.strip(b"\n"):
        return _from_columns({}, np.zeros(0, dtype=np.int64), header, source, [])
    invalid: list[int] = []

    def on_invalid(row: object) -> str:
        invalid.append(1)
        return "skip"

    # Column names must be unique for pyarrow; ignored columns get placeholder names.
    names = [name if name in RAW_FIELDS and header.index(name) == i else f"_ignored{i}" for i, name in enumerate(header)]
    wanted = _wanted(header)
    try:
        table = pacsv.read_csv(
            io.BytesIO(body),
            read_options=pacsv.ReadOptions(column_names=names, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(
                delimiter=sep.decode("latin-1"), quote_char=False, escape_char=False,
                newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in wanted},
                include_columns=wanted, strings_can_be_null=False, quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None  # e.g. invalid UTF-8: the line-level pass decodes with replacement and reports
    if invalid:
        return None
    lines = np.arange(2, table.num_rows + 2, dtype=np.int64)
    cols = {name: table.column(name).combine_chunks() for name in wanted}
    return _from_columns(cols, lines, header, source, [])


def _line_level(body: bytes, sep: bytes, header: list[str], source: str, original: bytes | None = None) -> ParseResult:
    """Find records by counting delimiters per physical line; join short lines; repair or report the rest."""
    nfields = len(header)
    physical = body.split(b"\n")
    if physical and physical[-1] == b"":
        physical.pop()  # the final newline ends the last record; it does not start a new one
    arr = pa.array(physical, pa.binary())
    counts = pc.count_substring(arr, sep.decode("latin-1")).to_numpy(zero_copy_only=False) if physical else np.zeros(0, np.int64)
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
        if physical[i].strip() == b"":
            consumed[i] = True  # a blank line between records holds no data
            continue
        acc, j = int(counts[i]), int(i)
        while acc < nfields - 1 and j + 1 < len(physical):
            j += 1
            acc += int(counts[j])
        consumed[i : j + 1] = True
        good[i : j + 1] = False
        record = b"\n".join(physical[i : j + 1])
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
    cols: dict[str, pa.Array] = {}
    if len(good_idx):
        split = pc.split_pattern(arr.take(pa.array(good_idx)), sep.decode("latin-1"))
        for name in wanted:
            col = pc.list_element(split, header.index(name))
            cols[name] = _to_utf8(col)
    else:
        cols = {name: pa.array([], pa.string()) for name in wanted}
    lines = good_idx.astype(np.int64) + 2
    if extra_rows:
        for pos, name in enumerate(wanted):
            cols[name] = pa.concat_arrays([cols[name], pa.array([row[pos] for row in extra_rows], pa.string())])
        lines = np.concatenate([lines, np.array(extra_lines, dtype=np.int64)])
        order = np.argsort(lines, kind="stable")
        lines = lines[order]
        cols = {name: col.take(pa.array(order)) for name, col in cols.items()}
    return _from_columns(cols, lines, header, source, problems)


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
    raw = {name: cols.get(name, pa.array([""] * n, pa.string())) for name in _wanted(header)}
    known = pa.array(np.ones(n, dtype=bool))
    return normalize(raw, pa.array(lines), known, source, extra_problems=problems)
