"""Front end 1: ``sacct --parsable2`` text with a header line, in any (multi-character) delimiter.

Records are found by counting fields: a physical line with fewer than N-1 delimiters is joined with the
following lines until the record has all N fields (a newline inside a job name splits a record over lines).

Two readers give the same result:

* the direct reader (gpuclust.accounting.ingest.fast.direct, used when it can vouch for the result): pyarrow.csv over the
  input bytes as they are (a memory-mapped file is not copied), split on a byte that occurs once in the
  delimiter, in a few pieces side by side; the delimiter's bytes around it are checked on each field (the
  fetch's ``\x1f|\x1e`` splits on ``\x1f``, ``|#|`` on ``#``). The few lines that are not whole
  records are joined as below; the fields are parsed by kernels over the raw bytes and once per distinct
  value; string columns come out dictionary-encoded.
* the reference (`_reference`, here): the delimiter is swapped for a single byte that does not occur in the data,
  and pyarrow.csv tokenises the text. Only if some line does not have exactly N fields does a line-level
  pass run; it is still vectorised over the good lines and loops in Python only over the odd ones.

How they run (which one, threads, piece and block sizes, the field registry) is one `ReaderOptions`
parameter; `ParseResult.reader` says which reader ran.
"""

from __future__ import annotations

import io
import mmap
import re
import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpuclust.accounting.ingest.fast import memory
from gpuclust.accounting.ingest.fast.direct import read_direct
from gpuclust.accounting.ingest.normalize import DEFAULT_OPTIONS, ParseResult, ReaderOptions, normalize
from gpuclust.accounting.ingest.registry import Registry
from gpuclust.accounting.ingest.textcommon import (
    _BOM,
    _STAND_INS,
    SCAN_BLOCK,
    _DecodeFailure,
    _quiet_row_decode,
    _repair,
    _Source,
    _starts_record,
    _tail_continuation,
    _wanted,
)
from gpuclust.errors import InputError, Problem


def decode_delimiter(text: str) -> str:
    """`--delimiter` value: backslash escapes (``\\x1f|\\x1e``, ``\\t``) are decoded; empty is refused."""
    given = text
    try:
        if "\\" in text:
            text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
        text.encode("utf-8")
    except UnicodeError as exc:  # `\x` without hex digits, a lone `\`, bytes that are no text
        why = exc.reason if isinstance(exc, UnicodeDecodeError | UnicodeEncodeError) else str(exc)
        raise InputError(f"bad delimiter {given!r}: {why}; use a literal string or the escapes "
                         "\\t, \\xHH, \\\\") from None
    if not text or "\n" in text or "\r" in text:
        raise InputError(f"bad delimiter {given!r}: give a non-empty string without newlines, e.g. '|'")
    return text


# gpuclust's own fetch delimiter (gpuclust.accounting.ingest.schema.FETCH_DELIMITER; not imported: schema imports the
# registry, which this module's readers are given through ReaderOptions).
_FETCH_DELIMITER = "\x1f|\x1e"
_FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")  # how sacct names its fields in a header


def sniff_delimiter(first_line: bytes) -> str:
    """The delimiter of a dump, told from its first line: gpuclust's fetch delimiter where it occurs there,
    else sacct's own `|` (`--delimiter` names any other)."""
    return _FETCH_DELIMITER if _FETCH_DELIMITER.encode("utf-8") in first_line else "|"


def header_example(registry: Registry) -> str:
    """The sacct command that writes a dump gpuclust reads whole (header line included)."""
    return f"sacct -a -X --parsable2 --format={','.join(registry.complete)}"


def shell_delimiter(delimiter: str) -> str:
    """`delimiter` as a `--delimiter` value to paste into a shell: the escapes `decode_delimiter` reads
    (``\\t``, ``\\x1f``), single-quoted, so that the shell hands them on as they are."""
    return shlex.quote(delimiter.encode("unicode_escape").decode("ascii"))


def _header_delimiter(line: str) -> str | None:
    """The one string between the field names of a header line (None: no such string), whatever it is."""
    names = list(_FIELD_NAME.finditer(line))
    between = {line[a.end():b.start()] for a, b in zip(names, names[1:], strict=False)}
    if len(names) < 2 or len(between) != 1 or line[:names[0].start()] or line[names[-1].end():]:
        return None
    found = between.pop()
    return found if found and not _FIELD_NAME.search(found) else None


def _refuse_comma(source: str, registry: Registry) -> InputError:
    return InputError(Problem(
        source, 1, "the dump's delimiter is ',', which cannot separate sacct's fields: AllocTRES holds commas "
        "(billing=1,cpu=1,gres/gpu=4) and so may NodeList (node[1,3]), so no row would split into its fields. "
        f"Write the dump again with sacct's own | (`{header_example(registry)}`) or another delimiter that no "
        "value holds (sacct --delimiter=...)"))


def _check_header(header: list[str], header_line: bytes, delimiter: str, source: str, registry: Registry) -> None:
    """Refuse a first line that is no header (a dump written with --noheader), or that does not split on the
    delimiter, naming the fix: the delimiter it does split on, as a --delimiter value that works when pasted."""
    if any(name in registry.raw for name in header):
        return
    line = header_line.decode("utf-8", "replace").strip()
    other = _header_delimiter(line)
    if other is not None and other != delimiter and any(name in registry.raw for name in line.split(other)):
        if other == ",":
            raise _refuse_comma(source, registry)
        raise InputError(Problem(
            source, 1, f"the header does not split on the delimiter {delimiter!r} but does on {other!r}: "
            f"pass --delimiter {shell_delimiter(other)} (or leave --delimiter out: "
            "gpuclust's fetch delimiter and | are detected)"))
    kind = "is not a header of sacct field names" if not all(_FIELD_NAME.fullmatch(n) for n in header) else \
        "names no sacct field gpuclust reads"
    raise InputError(Problem(
        source, 1, f"the first line {kind} (it starts {header_line[:60]!r}): gpuclust needs sacct's header line "
        f"to know the columns. Write the dump without --noheader/-n, e.g. `{header_example(registry)}` "
        f"(at least {', '.join(registry.required)})"))


def parse_parsable(
    data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer, delimiter: str | None = "|",
    source: str = "<input>", *, options: ReaderOptions = DEFAULT_OPTIONS,
) -> ParseResult:
    """Parse a --parsable2 dump (header line first) into the normalized schema.

    `data` may be any buffer (a memory-mapped file is read without a copy). `delimiter` None: told from the
    header line (`sniff_delimiter`). The direct reader (gpuclust.accounting.ingest.fast.direct.read_direct) handles any
    dump, a narrow one too (fewer fields than Registry.complete: what it lacks is derived or unknown, as the
    reference makes it), where it can be sure to give the reference's result; anything else (and every
    input while ``options.fast`` is off) goes through the reference (`_reference`); the result's `reader`
    says which ran."""
    registry = options.registry
    src = _Source(data, options.scan_block)
    head = 3 if src.read(0, 3) == _BOM else 0  # a UTF-8 byte order mark before the header is no data
    header_end = src.find(b"\n", head)
    header_line = src.read(head, src.size if header_end < 0 else header_end)
    if header_line.endswith(b"\r"):
        # A dump with Windows line ends (edited or copied on Windows): \r\n is a line end, in both readers.
        # (The one copy; sacct itself writes \n.)
        src = _Source(src.tobytes().replace(b"\r\n", b"\n"), options.scan_block)
        header_end = src.find(b"\n", head)
        header_line = src.read(head, src.size if header_end < 0 else header_end)
    if delimiter is None:
        delimiter = sniff_delimiter(header_line)
    delim = delimiter.encode("utf-8")
    if not delim or b"\n" in delim:
        raise InputError(f"bad delimiter {delimiter!r}")
    header = header_line.rstrip(b"\r").decode("utf-8", "replace").split(delimiter)
    if not header_line.strip():
        raise InputError(Problem(source, 1, "empty input: expected a header line of sacct field names; give a dump written by "
                                           "`sacct --parsable2` (with its header) or `sacct --json`"))
    _check_header(header, header_line, delimiter, source, registry)
    if delimiter == ",":
        raise _refuse_comma(source, registry)
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
                f"header lacks {', '.join(missing)}: no figure can do without a job id, a state and its times "
                f"(header starts {header_line[:80]!r}; e.g. `{header_example(registry)}`)", missing[0],
            )
        )
    if options.fast and header_end >= 0:
        result = read_direct(src, header_end + 1, delim, header, source, options)
        if result is not None:
            result.reader = "direct"
            return result
    whole = src.tobytes()
    body = b"" if header_end < 0 else whole[header_end + 1 :]
    del whole
    if b"\r\n" in body:  # a dump saved with CRLF line ends reads as the same dump with LF ones
        body = body.replace(b"\r\n", b"\n")
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




def _read_csv(
    data: bytes, sep: bytes, header: list[str], wanted: list[str], kind: pa.DataType,
    on_invalid: Callable[[object], str],
) -> pa.Table:
    """pyarrow.csv with sacct's rules: one-byte delimiter, no quoting or escaping, no newlines inside values,
    the `wanted` columns only, read as `kind` (string or binary). Raises pa.ArrowInvalid."""
    # Column names must be unique for pyarrow; ignored columns get placeholder names.
    names = [name if name in wanted and header.index(name) == i else f"_ignored{i}" for i, name in enumerate(header)]
    return pacsv.read_csv(
        io.BytesIO(data), memory_pool=memory.read_pool(),
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
