"""Step 4b of the direct reader: every field in final row order, the good rows of step 1 with the extra records of
steps 2-3 put in between by line (`Merge`), as the columns of the registry's schema: the prepared fields of
step 4a with the extra records' values parsed by the field's vectorised parser; a dictionary field's derived
columns parsed once per distinct value (`derived`); JobID by its own kernel over the final rows. Each field
also gives its bad-value mask (for step 5's problems) and whether its text was valid UTF-8."""

from __future__ import annotations

import concurrent.futures
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import swar
from gpuclust.accounting.ingest.fast.direct.arrays import encoded, ints, lookup, row_mask, to_strings
from gpuclust.accounting.ingest.fast.direct.layout import Fallback, Layout
from gpuclust.accounting.ingest.fast.direct.prepare import (
    DictPrepared,
    FixedPrepared,
    GoodRows,
    IntPrepared,
    Prepared,
    fixed_groups,
    reference_of,
)
from gpuclust.accounting.ingest.fast.direct.records import Patch
from gpuclust.accounting.ingest.fast.swar import buffers_of
from gpuclust.accounting.ingest.fields import nullable
from gpuclust.accounting.ingest.normalize import absent_column
from gpuclust.accounting.ingest.registry import SacctField


@dataclass
class FieldColumns:
    """A field's output in final row order: its columns, the bad mask of each field it parses (None: none),
    whether its text was valid UTF-8; JobID adds the step mask, a dictionary field its distinct values and each
    row's code (for the problem messages)."""

    columns: dict[str, pa.Array]
    bad: dict[str, np.ndarray | None]
    utf8: bool = True
    is_step: np.ndarray | None = None
    values: pa.Array | None = None
    codes: np.ndarray | None = None


@dataclass(frozen=True)
class FinalRows:
    """The inputs of step 4b: step 4a's inputs and (future) results, the final order, and the extra records'
    text of each registry field (`e_rawc`: SacctField.absent where the input lacks the field)."""

    good: GoodRows
    prepared: dict[str, concurrent.futures.Future[Prepared]]
    merge: Merge
    e_raw: dict[str, pa.Array]
    e_rawc: dict[str, pa.Array]
    patches: list[Patch] = field(default_factory=list)

    @property
    def layout(self) -> Layout:
        return self.good.layout

    def tasks(self) -> dict[str, Callable[[], FieldColumns]]:
        out: dict[str, Callable[[], FieldColumns]] = {}
        for fd in self.layout.registry.fields:
            if fd.direct in ("int", "fixed") and fd.name not in self.good.pieces.cols:
                out[fd.name] = functools.partial(self.absent_field, fd.name)
            elif fd.direct == "job_id":
                out[fd.name] = functools.partial(self.job_id_column, fd.name)
            elif fd.direct == "dict":
                out[fd.name] = functools.partial(self.dict_column, fd.name)
            elif fd.direct == "int":
                out[fd.name] = functools.partial(self.int_column, fd.name)
            elif fd.direct == "text":
                out[fd.name] = functools.partial(self.text_column, fd.name)
        for key, group in fixed_groups(self.layout.registry, self.good.pieces.cols).items():
            out[key] = functools.partial(self.fixed_column, key, group)
        return out

    def absent_field(self, name: str) -> FieldColumns:
        """A parsed field the input lacks (a narrow dump's own --format): its absent text on every row, parsed
        once, as the reference parses it on each (normalize.derive_missing then derives what it can)."""
        fd = self.layout.registry[name]
        assert fd.vparse is not None
        n = self.merge.size
        parsed = fd.vparse(absent_column(fd.absent, 1))
        columns = {column: pa.repeat(arr[0], n) for column, arr in parsed.columns.items()}
        if fd.copy:
            columns[fd.copy.name] = absent_column(fd.absent, n)
        return FieldColumns(columns, {name: np.repeat(parsed.bad, n) if parsed.bad.any() else None})

    def text_column(self, name: str) -> FieldColumns:
        """A field of mostly distinct values (usage TRES) as it is: no dictionary to build. Its rows are in
        source order (the good rows, then the extra records: `Merge.sources` maps them), not final order: its
        consumer (usage.add_usage_columns) indexes it once, where a take would copy every value."""
        fd = self.layout.registry[name]
        assert fd.copy is not None and fd.vparse is None
        if name not in self.good.pieces.cols:
            return FieldColumns({fd.copy.name: absent_column(fd.absent, self.merge.size)}, {})
        extra = self.e_rawc[name]
        if self.good.empty(self.good.pieces.cols[name]) and not extra.null_count:
            text, utf8 = self.merge.after_empty(extra.cast(pa.string())), True  # (`-X` dumps' usage columns)
        else:
            text, utf8 = to_strings(self.spliced(name, final_order=False))
        # Step 1's chunks of this field are read by no later step (it has no parser, so no bad value to show):
        # freed now, not at the end of the read (the usage columns are half of a dump's bytes).
        self.good.pieces.cols[name].chunks.clear()
        return FieldColumns({fd.copy.name: text}, {}, utf8)

    def dict_column(self, name: str) -> FieldColumns:
        """The field in final order (the extra records' values added to the dictionary), and the columns parsed
        from it, per distinct value."""
        m = self.merge
        prepared = self.prepared[name].result()
        assert isinstance(prepared, DictPrepared)
        values = prepared.values
        # A field that gives numbers only (ExitCode, NNodes): its codes are kept as indices for numpy (no int32
        # copy); one with a text column keeps int32 codes for the dictionary array.
        fd = self.layout.registry[name]
        if name not in self.good.pieces.cols and fd.absent is None:  # not in this input, and null says so (Reason)
            assert fd.copy is not None and fd.vparse is None
            return FieldColumns({fd.copy.name: pa.nulls(m.size, pa.string())}, {})
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
        if name in (self.layout.first, self.layout.last) and self.patches:
            values, codes = self.patched(name, values, codes)
        columns, bad = derived(fd, values, codes)
        return FieldColumns(columns, bad, prepared.utf8, values=values, codes=codes)

    def patched(self, name: str, values: pa.Array, codes: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        """The dictionary `values` and final-order `codes` of the line's first or last field with the patches'
        text put around the patched rows' values."""
        first, last = name == self.layout.first, name == self.layout.last
        patches = [p for p in self.patches if (first and p.before) or (last and p.after)]
        if not patches:
            return values, codes
        at = self.merge.final(np.array([p.row for p in patches], dtype=np.int64))
        old: list[str] = values.take(pa.array(codes[at])).to_pylist()
        texts = [(p.before if first else "") + value + (p.after if last else "")
                 for p, value in zip(patches, old, strict=True)]
        new = pa.array(texts, pa.string())
        missing = pc.unique(new.filter(pc.is_null(pc.index_in(new, value_set=values))))
        if len(missing):
            values = pa.concat_arrays([values, missing])
        if not codes.flags.writeable:  # (step 4a's codes, read straight from pyarrow)
            codes = codes.copy()
        codes[at] = np.asarray(pc.index_in(new, value_set=values).to_numpy(zero_copy_only=False))
        return values, codes

    def spliced(self, name: str, *, final_order: bool = True) -> pa.Array:
        """Field `name` of every final row, without prefix, as bytes: the good rows' values with the extra
        records' ones put in (one concatenation); `final_order=False`: in source order (records last)."""
        col = self.good.pieces.cols[name]
        chunks = [self.good.strip(col, chunk, start) for start, chunk in col.chunk_starts()]
        return self.merge.splice(chunks, self.e_rawc[name].cast(pa.binary()), final_order=final_order)

    def job_id_column(self, name: str) -> FieldColumns:
        """JobID of every final row: the two usual shapes by `swar.job_ids_swar`, the rest by the regex."""
        m = self.merge
        raw = self.spliced(name)
        text, utf8 = to_strings(raw)
        data, offsets = buffers_of(raw)
        base, task, has_task, ok = swar.job_ids_swar(data, offsets, self.good.opts.swar_block_rows)
        het = np.zeros(m.size, dtype=np.int64)
        has_het, is_step, bad = (np.zeros(m.size, dtype=bool) for _ in range(3))
        pending: pa.Array = pa.nulls(m.size, pa.string())
        rest = np.flatnonzero(~ok)
        if len(rest):
            # Step rows (most of a dump without -X): `<job id>.<step>`, the job part by the same kernel, so that
            # only odd ids (het, pending ranges, garbage) meet the regex.
            steps = _step_ids(raw, data, offsets, rest, self.good.opts.swar_block_rows)
            if steps is not None:
                at, s_base, s_task, s_has_task = steps
                base[at], task[at], has_task[at], is_step[at] = s_base, s_task, s_has_task, True
                rest = np.setdiff1d(rest, at, assume_unique=True)
        if len(rest):
            sub, sub_step, sub_bad = fields._v_job_id_regex(text.take(pa.array(rest)))
            base[rest] = ints(sub["job_base"])
            task[rest] = ints(sub["array_task"])
            has_task[rest] = fields.valid_mask(sub["array_task"])
            het[rest] = ints(sub["het_offset"])
            has_het[rest] = fields.valid_mask(sub["het_offset"])
            is_step[rest] = sub_step
            bad[rest] = sub_bad
            if sub["array_pending"].null_count < len(rest):
                mask = np.zeros(m.size, dtype=bool)
                mask[rest] = True
                pending = pc.replace_with_mask(pending, pa.array(mask), sub["array_pending"])
        fd = self.layout.registry[name]
        assert fd.copy is not None
        return FieldColumns(
            {
                fd.copy.name: text, "job_base": nullable(base, ~bad, pa.int64()),
                "array_task": nullable(task, has_task, pa.int64()),
                "het_offset": nullable(het, has_het, pa.int64()), "array_pending": pending,
            },
            {name: bad}, utf8, is_step=is_step,
        )

    def int_column(self, name: str) -> FieldColumns:
        m = self.merge
        fd = self.layout.registry[name]
        prepared = self.prepared[name].result()
        assert isinstance(prepared, IntPrepared)
        values = m.full(prepared.values)
        bad = np.zeros(m.size, dtype=bool) if prepared.bad is None else m.full(prepared.bad)
        if m.n_e:
            e_values, e_bad = reference_of(fd)(self.e_rawc[name])
            m.place_e(values, ints(pc.fill_null(e_values, 0)))
            m.place_e(bad, e_bad)
        return FieldColumns({fd.parsed[0].name: nullable(values, ~bad, pa.int64())}, {name: bad}, prepared.utf8)

    def fixed_column(self, key: str, group: tuple[SacctField, ...]) -> FieldColumns:
        """The prepared fields in final order, the extra records' values parsed by the vectorised parser."""
        m = self.merge
        prepared = self.prepared[key].result()
        assert isinstance(prepared, FixedPrepared)
        out = FieldColumns({}, {}, prepared.utf8)
        for fd in group:
            name, column, reference = fd.name, fd.parsed[0], reference_of(fd)
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
                m.place_e(values, ints(e_arr))
                if valid is not None:
                    m.place_e(valid, fields.valid_mask(e_arr))
                if bad is not None:
                    m.place_e(bad, e_bad)
            out.columns[column.name] = nullable(values, valid, column.type)
            out.bad[name] = bad
        return out


def derived(fd: SacctField, values: pa.Array, codes: np.ndarray,
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
        columns[name] = encoded(arr, rows) if pa.types.is_string(arr.type) else lookup(arr, rows)
    bad[fd.name] = row_mask(parsed.bad, rows)
    return columns, bad


class Merge:
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

    def splice(self, chunks: list[pa.Array], extra: pa.Array, *, final_order: bool = True) -> pa.Array:
        """The good rows' values (binary `chunks`, in order) and the extra records' ones (`extra`, in the order
        given), as one binary array in final order: one concatenation, then one take when records go in
        between; `final_order=False`: in source order (`sources`), without the take."""
        parts = [chunk if chunk.type == pa.binary() else chunk.cast(pa.binary()) for chunk in chunks]
        parts.append(extra.cast(pa.binary()))
        offsets = [buffers_of(part)[1] for part in parts if len(part)]
        if sum(int(o[-1] - o[0]) for o in offsets) >= 1 << 31:
            raise Fallback("values too long for one binary array")
        whole = pa.concat_arrays(parts)
        if not self.n_e or not final_order:
            return whole
        return whole.take(pa.array(self.sources()))

    def sources(self) -> np.ndarray:
        """Each final row as an index into [good rows, extra records] (source order)."""
        source = np.empty(self.size, dtype=np.int64)
        source[self.g_mask] = np.arange(self.n_g)
        source[self.at] = self.n_g + self.e_order
        return source

    def after_empty(self, extra: pa.Array) -> pa.Array:
        """A string column in source order: "" on every good row, then the extra records' `extra` (in the order
        given, no nulls)."""
        if not self.n_e:
            return pa.repeat(pa.scalar("", pa.string()), self.size)
        data, e_offsets = buffers_of(extra)
        offsets = np.zeros(self.size + 1, dtype=np.int64)
        offsets[self.n_g + 1 :] = e_offsets[1:] - e_offsets[0]
        if offsets[-1] >= 1 << 31:
            raise Fallback("values too long for one string array")
        body = data[int(e_offsets[0]) : int(e_offsets[-1])]
        return pa.Array.from_buffers(pa.string(), self.size, [
            None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.ascontiguousarray(body))])

    def source(self, i: int) -> int:
        """Final row i as an index into [good rows, extra records]."""
        k = int(np.searchsorted(self.at, i))
        if k < self.n_e and int(self.at[k]) == i:
            return self.n_g + int(self.e_order[k])
        return i - k


def _step_ids(raw: pa.Array, data: np.ndarray, offsets: np.ndarray, rows: np.ndarray, block_rows: int,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Of `rows` of the JobID column `raw`, those of the shape `123.step` or `123_4.step` (one '.', a non-empty
    step name) -> (their rows, job_base, array_task, has_task); None when there are none. What the regex gives
    them, exactly: the job part is the kernel's, the rest is the step."""
    sub = raw.take(pa.array(rows))
    dot = ints(pc.fill_null(pc.find_substring(sub, "."), -1))
    length = ints(pc.fill_null(pc.binary_length(sub), 0))
    one_dot = ints(pc.fill_null(pc.count_substring(sub, "."), 0)) == 1
    candidate = one_dot & (dot >= 1) & (dot < length - 1)
    if not candidate.any():
        return None
    at = rows[candidate]
    starts = offsets[at]
    base, task, has_task, ok = swar.job_ids_swar(data, starts, block_rows, ends=starts + dot[candidate])
    return at[ok], base[ok], task[ok], has_task[ok]
