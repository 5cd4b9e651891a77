"""Step 4a of the direct reader: parse each field over the good rows of step 1, in the thread pool while steps 2
and 3 run on this thread. By the field's `direct` kind in the registry: a repetitive field ("dict") is read
dictionary-encoded, its distinct values stripped of the delimiter's bytes and decoded once; a decimal field
("int") by one cast; the fixed-width fields ("fixed": times, Elapsed) by byte kernels eight bytes at a time,
the rows of another width by the field's vectorised parser. JobID is read in step 4b (its own kernel over the
final rows)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import sorting, swar
from gpuclust.accounting.ingest.fast.direct.arrays import ints, starts_with, to_strings, unwrap
from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout
from gpuclust.accounting.ingest.fast.direct.pieces import DICT_BINARY, BlankCandidates, Column, Pieces
from gpuclust.accounting.ingest.fast.swar import buffers_of
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.registry import Registry, SacctField


@dataclass
class DictPrepared:
    """A dictionary-read field over the good rows: its distinct values (prefix stripped, as text) and each
    row's code (None: the field is not in the input, every row "")."""

    values: pa.Array
    indices: np.ndarray | None
    utf8: bool


@dataclass
class IntPrepared:
    """A decimal field over the good rows (JobIDRaw)."""

    values: np.ndarray
    bad: np.ndarray | None
    utf8: bool


@dataclass
class FixedValues:
    """One fixed-width field over the good rows: int64 values (epoch seconds, seconds), which are valid (None:
    all), which cannot be parsed (None: none)."""

    values: np.ndarray
    valid: np.ndarray | None
    bad: np.ndarray | None


@dataclass
class FixedPrepared:
    """The fixed-width fields over the good rows, by name, and whether their text was valid UTF-8."""

    fields: dict[str, FixedValues]
    utf8: bool


Prepared = DictPrepared | IntPrepared | FixedPrepared


def fixed_groups(reg: Registry, present: Container[str]) -> dict[str, tuple[SacctField, ...]]:
    """The fixed-width fields of the input (`present`), each with those that are `like` it (read side by side),
    by the first's name."""
    groups: dict[str, list[SacctField]] = {}
    for fd in reg.fields:
        if fd.direct == "fixed" and fd.fixed is not None and fd.name in present:
            groups.setdefault(fd.fixed.like or fd.name, []).append(fd)
    ordered = {key: sorted(group, key=lambda fd: fd.name != key) for key, group in groups.items()}
    return {group[0].name: tuple(group) for group in ordered.values()}


def reference_of(fd: SacctField) -> Callable[[pa.Array], tuple[pa.Array, np.ndarray]]:
    """A one-column field's vectorised parser as (values, bad)."""
    assert fd.vparse is not None and len(fd.parsed) == 1
    vparse, column = fd.vparse, fd.parsed[0].name

    def parse(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
        parsed = vparse(text)
        return parsed.columns[column], parsed.bad

    return parse


@dataclass(frozen=True)
class GoodRows:
    """The inputs of step 4a: step 1's columns and the blank candidates (a value there may lack the
    delimiter's bytes: a blank line has none)."""

    layout: Layout
    pieces: Pieces
    blanks: BlankCandidates
    opts: ReaderOptions

    def tasks(self) -> dict[str, Callable[[], Prepared]]:
        """The preparation of every field this step reads, by field (a fixed group by its first field)."""
        out: dict[str, Callable[[], Prepared]] = {}
        for fd in self.layout.registry.fields:
            if fd.direct == "dict":
                out[fd.name] = functools.partial(self.dict_field, fd.name)
            elif fd.direct == "int" and fd.name in self.pieces.cols:
                out[fd.name] = functools.partial(self.int_field, fd.name)
        for key, group in fixed_groups(self.layout.registry, self.pieces.cols).items():
            out[key] = functools.partial(self.fixed_fields, group)
        return out

    def affix_ok(self, col: Column, arr: pa.Array) -> np.ndarray:
        """Whether each value starts with the delimiter's bytes after the split byte and ends with those
        before it (as a value of `col` must)."""
        ok = starts_with(arr, self.layout.rest[: col.plen]) if col.plen else np.ones(len(arr), dtype=bool)
        if col.slen:
            ok &= fields._mask(pc.ends_with(arr, pattern=self.layout.pre[-col.slen :]))
            ok &= np.asarray(pc.binary_length(arr).to_numpy(zero_copy_only=False)) >= col.plen + col.slen
        return ok

    def all_candidates(self, rows: np.ndarray) -> bool:
        """Whether every row of `rows` is a blank candidate. By binary search in the sorted candidates: np.isin
        would build a table over their whole range (every row of the input) at each call, once per chunk."""
        return bool(sorting.in_sorted(rows, self.blanks.rows()).all())

    def prefix_ok(self, col: Column, arr: pa.Array, rows: np.ndarray | int = 0) -> None:
        """Every value of `arr` (good rows `rows`, or from row `rows` on) starts and ends with the delimiter's
        parts, except on blank lines; else the direct reader cannot vouch for the split."""
        if not col.plen and not col.slen:
            return
        ok = self.affix_ok(col, arr)
        if not ok.all():
            where = np.flatnonzero(~ok)
            where = rows[where] if isinstance(rows, np.ndarray) else where + rows
            if not self.all_candidates(where):
                raise Fallback(f"a {col.name} value does not start with the delimiter's rest")

    def empty(self, col: Column) -> bool:
        """Whether every value of `col` on the good rows is empty: the delimiter's bytes alone, or nothing on a
        blank candidate (a column no row fills, as the usage TRES of an allocation-only dump)."""
        width = col.plen + col.slen
        pattern = np.frombuffer(self.layout.rest[: col.plen] + self.layout.pre[len(self.layout.pre) - col.slen :],
                                dtype=np.uint8)
        bare: list[np.ndarray] = []
        for start, chunk in col.chunk_starts():
            if pa.types.is_dictionary(chunk.type):
                return False
            data, offsets = buffers_of(chunk)
            lengths = np.diff(offsets)
            filled = lengths == width
            if not (filled | (lengths == 0)).all():
                return False
            body = data[int(offsets[0]) : int(offsets[-1])]
            if width and not (body.reshape(-1, width) == pattern).all():
                return False
            if width and not filled.all():
                bare.append(np.flatnonzero(~filled) + start)
        return not bare or self.all_candidates(np.concatenate(bare))

    def strip(self, col: Column, arr: pa.Array, rows: np.ndarray | int = 0) -> pa.Array:
        if not col.plen and not col.slen:
            return arr
        self.prefix_ok(col, arr, rows)
        return unwrap(arr, col)

    def groups(self, col: Column) -> Iterator[tuple[int, pa.Array]]:
        """The column in pieces of at least GROUP_ROWS rows (adjacent chunks copied into one buffer, reused
        from piece to piece): the vectorised kernels then run on a few long arrays, not many short ones."""
        group: list[tuple[int, pa.Array]] = []
        rows = 0
        data_buf = np.empty(0, dtype=np.uint8)
        offsets_buf = np.empty(0, dtype=np.int64)
        chunks = col.chunk_starts()
        for i, (start, chunk) in enumerate(chunks):
            group.append((start, chunk))
            rows += len(chunk)
            if rows < self.opts.group_rows and i + 1 < len(chunks):
                continue
            if len(group) == 1:
                yield group[0]
            else:
                parts = [buffers_of(c) for _, c in group]
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

    def rows_text(self, col: Column, rows: np.ndarray) -> tuple[pa.Array, bool]:
        """The values of good rows `rows` (sorted) without their prefix, as text."""
        which = np.searchsorted(col.starts, rows, side="right") - 1
        pieces: list[pa.Array] = []
        for k in np.unique(which).tolist():
            local = rows[which == k] - int(col.starts[k])
            pieces.append(col.chunks[k].take(pa.array(local)))
        arr = pa.concat_arrays(pieces) if pieces else pa.array([], pa.binary())
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(arr.type.value_type)
        return to_strings(self.strip(col, arr, rows))

    def dict_field(self, name: str) -> DictPrepared:
        """A dictionary-read field over the good rows: one dictionary of its distinct values (prefix stripped,
        as text) and each row's code."""
        col = self.pieces.cols.get(name)
        if col is None or not col.chunks:
            return DictPrepared(pa.array([""] if col is None else [], pa.string()), None, True)
        whole = pa.chunked_array(col.chunks, type=DICT_BINARY).combine_chunks()  # one dictionary (C++)
        uniq, indices = whole.dictionary, whole.indices
        clean = True
        if col.plen or col.slen:
            ok = self.affix_ok(col, uniq)
            if not ok.all():
                rows = np.flatnonzero(np.isin(indices.to_numpy(zero_copy_only=False), np.flatnonzero(~ok)))
                if not self.all_candidates(rows):
                    raise Fallback(f"a {name} value does not start with the delimiter's rest")
                clean = False
            uniq = unwrap(uniq, col)
        values, utf8 = to_strings(uniq)
        if not clean or not utf8:  # b"" and the bare prefix, or two invalid spellings, may now be equal
            enc = pc.dictionary_encode(values)
            indices, values = enc.indices.take(indices), enc.dictionary
        codes = np.frombuffer(indices.buffers()[1], np.int32)[indices.offset : indices.offset + len(indices)]
        return DictPrepared(values, codes, utf8)

    def int_field(self, name: str) -> IntPrepared:
        """JobIDRaw of the good rows: `v_int` by a decimal test and one cast (no UTF-8 check is needed for that:
        a byte outside ASCII is not a digit; only the other values are decoded, for the UTF-8 verdict)."""
        col = self.pieces.cols[name]
        values = np.empty(self.pieces.n_g, dtype=np.int64)  # every row is written below
        bad: np.ndarray | None = None
        utf8 = True
        for start, group in self.groups(col):
            raw = self.strip(col, group, start)
            text = raw.view(pa.large_string() if pa.types.is_large_binary(raw.type) else pa.string())
            # (at most 18 digits, as `v_int`: every such value fits int64)
            decimal = fields._mask(pc.and_(pc.ascii_is_decimal(text), pc.less_equal(pc.binary_length(text), 18)))
            n = len(group)
            if decimal.all():
                values[start : start + n] = ints(pc.cast(text, pa.int64()))
            else:
                kept = pc.if_else(pa.array(decimal), text, pa.scalar(None, text.type))
                values[start : start + n] = ints(pc.fill_null(pc.cast(kept, pa.int64()), 0))
                if bad is None:
                    bad = np.zeros(self.pieces.n_g, dtype=bool)
                bad[start : start + n] = ~decimal
                _, valid = to_strings(raw.filter(pa.array(~decimal)))
                utf8 &= valid
        return IntPrepared(values, bad, utf8)

    def fixed_fields(self, group: tuple[SacctField, ...]) -> FixedPrepared:
        """Fixed-width fields over the good rows: `kernel` over the rows that are exactly prefix + `width`
        bytes, `reference` over the others. Several fields go side by side: a row whose bytes equal the first
        field's (Eligible is mostly Submit) takes its result instead of a parse."""
        names = tuple(fd.name for fd in group)
        assert group[0].fixed is not None
        width, kernel, reference = group[0].fixed.width, group[0].fixed.kernel, reference_of(group[0])
        cols = [self.pieces.cols[name] for name in names]
        values = [np.empty(self.pieces.n_g, dtype=np.int64) for _ in names]  # every row is written below
        valid: list[np.ndarray | None] = [None for _ in names]  # None: all valid
        slow: list[list[np.ndarray]] = [[] for _ in names]
        for groups in zip(*(self.groups(col) for col in cols), strict=True):
            first: tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray, int] | None = None
            for f, (col, (start, chunk)) in enumerate(zip(cols, groups, strict=True)):
                prefix = self.layout.rest[: col.plen]
                size = col.plen + width + col.slen
                n = len(chunk)
                if not n:
                    continue
                data, offsets = buffers_of(chunk)
                fixed = (offsets[1:] - offsets[:-1]) == size
                if col.slen:  # (the kernels check the prefix; the suffix is checked here)
                    fixed &= fields._mask(pc.ends_with(chunk, pattern=self.layout.pre[-col.slen :]))
                todo = fixed
                v, k = values[f][start : start + n], np.zeros(n, dtype=bool)
                # (rows of the first field's bytes are compared only at the same size: a line's first or last
                # column lacks the delimiter's bytes on one side)
                if first is not None and first[5] == size and fixed.all() and first[4].all() and groups[0][0] == start:
                    same = swar.rows_equal(data, int(offsets[0]), first[2], first[3], n, size)
                    v[same], k[same] = first[0][same], first[1][same]
                    todo = ~same
                if todo.all():
                    kernel(data, int(offsets[0]), n, prefix, out=(v, k), block_rows=self.opts.swar_block_rows,
                           tail=col.slen)
                elif todo.any():
                    sel = np.flatnonzero(todo)
                    d2, o2 = buffers_of(chunk.filter(pa.array(todo)))
                    v[sel], k[sel] = kernel(d2, int(o2[0]), len(sel), prefix, block_rows=self.opts.swar_block_rows,
                                            tail=col.slen)
                if f == 0:
                    first = (v, k, data, int(offsets[0]), fixed, size)
                if not k.all():
                    if valid[f] is None:
                        valid[f] = np.ones(self.pieces.n_g, dtype=bool)
                    valid[f][start : start + n] = k  # type: ignore[index]
                    slow[f].append(np.flatnonzero(~k) + start)
        out = FixedPrepared({}, True)
        for f, (name, col) in enumerate(zip(names, cols, strict=True)):
            bad: np.ndarray | None = None
            rows = np.concatenate(slow[f]) if slow[f] else np.zeros(0, dtype=np.int64)
            if len(rows):
                text, utf8 = self.rows_text(col, rows)
                out.utf8 &= utf8
                ref, ref_bad = reference(text)
                values[f][rows] = ints(ref)
                valid[f][rows] = fields.valid_mask(ref)  # type: ignore[index]
                if ref_bad.any():
                    bad = np.zeros(self.pieces.n_g, dtype=bool)
                    bad[rows] = ref_bad
            out.fields[name] = FixedValues(values[f], valid[f], bad)
        return out
