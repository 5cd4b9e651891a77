"""Slurm's own usage accounting, rolled up from the steps to their job: `TRESUsageInAve`, `TRESUsageInMax`,
`TRESUsageInTot`, `TRESUsageOutTot` and `ConsumedEnergyRaw` (no extra infrastructure: jobacct_gather and,
for GPUs, the gpu/nvml plugin's `gres/gpuutil` and `gres/gpumem`).

sacct prints usage on the step rows (`123.batch`, `123.0`, `123.extern`); the allocation row's usage
fields are empty. The readers keep every row until `normalize.finish`, which calls `add_usage_columns` here:
each step is given to its job row (the nearest job row before it with the step's job id: sacct prints each execution's
steps right after it, so a requeued job's executions keep their own steps), its usage is summed or maxed
into the job's columns below, and then the steps are dropped as before. The JSON reader turns
``jobs[].steps[]`` into the same step rows (`sacct_json.step_records`), so both front ends share this code.

The columns (null = unknown, never 0: a job without usage TRES has no figure):

====================  ==========================================================================================
column                meaning
====================  ==========================================================================================
gpu_util_gpu_s        the job's allocated GPU-seconds (gres/gpu x Elapsed) when a step recorded gres/gpuutil
                      (the part of `allocated` that has utilisation: `coverage`'s numerator on this path)
gpu_busy_gpu_s        GPU-seconds x measured utilisation, summed over the steps (`busy`): a step gives
                      per-GPU utilisation x its GPUs x its Elapsed, per-GPU utilisation by RULES below
gpu_util_max_pct      at least this per-GPU utilisation was reached (TRESUsageInMax gres/gpuutil / the step's
                      GPUs, or the step's per-GPU mean of task peaks, whichever is higher)
gpu_mem_max_mb        the highest GPU memory a step's task used (TRESUsageInMax gres/gpumem), MiB
cpu_used_s            CPU time of the job's steps (TRESUsageInTot cpu summed over steps), seconds
mem_max_mb            the largest resident memory of a task (TRESUsageInMax mem, max over steps), MiB
energy_j              ConsumedEnergyRaw of the job row, else the sum over its steps; null where Slurm gathers
                      no energy (it then prints 0: a job that ran never used 0 J)
gpu_util_rule         which rule turned gres/gpuutil into per-GPU utilisation: `summed` (23.02.x, and 24.05.1
                      on) or `last-gpu` (23.11.0 to 24.05.0: utilisation unknown); null without gres/gpuutil.
                      figures.gpuuse names three more reasons it is unknown: `mig` (a MIG slice), `shard` and
                      `mps` (a job of shards or MPS only shares a GPU: its own use cannot be told apart)
====================  ==========================================================================================

RULES (shared/gpu-hours-glossary.md; read from Slurm's gpu_nvml.c at each release tag, with the evidence in
tests/data/accounting/usage/FINDINGS.md):
  before 23.02        no gres/gpuutil is gathered at all;
  23.02.x             `summed`: a task's value is its processes' utilisation summed over the node's GPUs;
  23.11.0 - 24.05.0   `last-gpu`: each GPU overwrote the previous one, so a task's value is its reading on the
                      node's LAST GPU only (0 when it does not use that GPU). Utilisation is unknown: the jobs are
                      counted with a warning, never read as idle. (24.05.1's NEWS: "Fix gpuutil/gpumem only
                      tracking last GPU in step.")
  24.05.1 on          `summed` again: a 4-GPU step at full load reads 400.
Under `summed` a step's per-GPU utilisation is TRESUsageInTot / its GPUs. What a task contributes is the
PEAK of its samples (slurmstepd sets Tot := Max for gpuutil before aggregating, 23.02.3 on), so `busy` from
usage TRES is an upper bound built from peaks, not a time average: the report says so, and the Prometheus
source (a time series) is the one to trust where both exist.
Which rule applies depends on the Slurm that wrote the records: `report fetch` knows it (the local sacct's
version), a `--json` document names it in `meta`, and a text dump is told with `report build
--slurm-version`. Without it, a step on one GPU is read as `summed` (23.02 and 24.05.1+ agree there); a step
on several GPUs is `summed` when a value exceeds 100 (no single GPU can), else its utilisation is unknown and
counted as a warning naming --slurm-version.
sacct before 23.11.7 prints gpuutil (and always energy) through its unit conversion: 1024 prints as `1K` and
1536 as `1.50K`; those suffixes are read as x1024.

Bad values (an entry that is not `name=value`, a value that is not a number, a utilisation below 0 or above
100 per GPU, gres/gpuutil on a step without gres/gpu, a negative memory) make that job's figure unknown and are counted as warnings with the line;
the row itself and its allocation figures are kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import sorting, swar
from gpuclust.accounting.ingest.fast.tres_values import extract

# The scalar rules live in usage_rules (numpy-free, shared with `gpuclust job`); re-exported here.
from gpuclust.accounting.ingest.usage_rules import (  # noqa: F401
    CLOCK,
    COUNT_UNIT,
    ENTRY_SYNTAX,
    GATHERED_SINCE,
    LAST_GPU_RELEASES,
    MEM_UNIT_MIB,
    NUMBER,
    RULE_LAST_GPU,
    RULE_SUMMED,
    RULES_OUT,
    check_slurm_version,
    parse_release,
    parse_usage,
    rule_for_version,
)

# The sacct fields read on step rows (the registry declares them with step_usage=True).
USAGE_FIELDS: tuple[str, ...] = (
    "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "TRESUsageOutTot", "ConsumedEnergyRaw",
)
# Their text columns in the raw table (consumed by `add_usage_columns`, never stored).
TEXT_COLUMNS: tuple[str, ...] = (
    "tres_usage_in_ave", "tres_usage_in_max", "tres_usage_in_tot", "tres_usage_out_tot", "consumed_energy_raw",
)
COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("gpu_util_gpu_s", pa.float64()),
    ("gpu_busy_gpu_s", pa.float64()),
    ("gpu_util_max_pct", pa.float64()),
    ("gpu_mem_max_mb", pa.float64()),
    ("cpu_used_s", pa.float64()),
    ("mem_max_mb", pa.float64()),
    ("energy_j", pa.float64()),
    ("gpu_util_rule", pa.string()),
)
MAX_WARNINGS_LISTED = 50


@dataclass
class UsageWarnings:
    """Usage TRES values that could not be used: how many, and the first MAX_WARNINGS_LISTED as file:line: text."""

    count: int = 0
    listed: list[str] = field(default_factory=list)

    def add(self, source: str, line: int, message: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_WARNINGS_LISTED:
            self.listed.append(f"{source}:{line}: {message}")


# ---- one TRES value ----------------------------------------------------------------------------------------

def _decimal(values: pa.Array) -> np.ndarray:
    """Whether each value is all ASCII digits (and not empty): the common case, cast without a regex."""
    return pc.fill_null(pc.ascii_is_decimal(values), False).to_numpy(zero_copy_only=False)


def numbers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Plain numbers -> (float values, NaN where absent; bad mask: present but not a number)."""
    present = pc.is_valid(values).to_numpy(zero_copy_only=False)
    if _decimal(values).sum() == present.sum():
        return np.asarray(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False), dtype=float), \
            np.zeros(len(values), dtype=bool)
    ok = pc.fill_null(pc.match_substring_regex(values, f"^{NUMBER}$"), False)
    present = pc.is_valid(values).to_numpy(zero_copy_only=False)
    out = np.full(len(values), np.nan)
    okn = ok.to_numpy(zero_copy_only=False)
    if okn.any():
        out[okn] = pc.cast(pc.filter(values, ok), pa.float64()).to_numpy(zero_copy_only=False)
    return out, present & ~okn


_SUFFIXES = ("", "K", "M", "G", "T", "P")


def _matched(values: pa.Array, pattern: str) -> tuple[pa.Array | None, np.ndarray, np.ndarray, np.ndarray]:
    """(the regex groups of the values that match, or None when none does; the match mask; the bad mask:
    present but not matching; a NaN array the caller fills at the mask)."""
    got = pc.extract_regex(values, pattern)
    present = pc.is_valid(values).to_numpy(zero_copy_only=False)
    ok = pc.is_valid(got).to_numpy(zero_copy_only=False)
    sub = pc.filter(got, pa.array(ok)) if ok.any() else None
    return sub, ok, present & ~ok, np.full(len(values), np.nan)


def _suffixed(values: pa.Array, scale: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """`<number><K|M|G|T|P>?` -> number x scale[suffix] (NaN where absent; bad mask: present, not that form)."""
    if values.null_count == 0:  # (as `values` of a TresList are) digits with an optional suffix: no regex
        unit = pc.fill_null(pc.index_in(pc.utf8_slice_codeunits(values, -1), value_set=pa.array(_SUFFIXES[1:])), -1)
        has_unit = pc.greater_equal(unit, 0)
        digits = pc.if_else(has_unit, pc.utf8_slice_codeunits(values, 0, -1), values)
        if len(values) == 0 or _decimal(digits).all():
            num = np.asarray(pc.cast(digits, pa.float64()).to_numpy(zero_copy_only=False), dtype=float)
            factor = np.array([scale[u] for u in _SUFFIXES[1:]] + [scale[""]])
            return num * factor[np.asarray(unit.to_numpy(zero_copy_only=False))], np.zeros(len(values), dtype=bool)
    sub, ok, bad, out = _matched(values, f"^(?P<n>{NUMBER})(?P<u>[KMGTP]?)$")
    if sub is not None:
        num = pc.cast(pc.struct_field(sub, [0]), pa.float64()).to_numpy(zero_copy_only=False)
        unit = pc.index_in(pc.struct_field(sub, [1]), value_set=pa.array(_SUFFIXES)).to_numpy(zero_copy_only=False)
        out[ok] = num * np.array([scale[u] for u in _SUFFIXES])[unit]
    return out, bad


def counts(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Counts sacct may have put through its unit conversion (gpuutil before 23.11.7, energy): `1K` = 1024,
    `1.50K` = 1536; plain numbers as they are."""
    return _suffixed(values, COUNT_UNIT)


def sizes_mib(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Sizes as sacct prints them (`218192K`, `1.50G`, raw bytes without a suffix) -> MiB."""
    return _suffixed(values, MEM_UNIT_MIB)


def clock_seconds(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """CPU time as sacct prints it (`[D-]HH:MM:SS`, `MM:SS.mmm`) -> seconds. The common `HH:MM:SS` by Elapsed's
    byte kernel (the same arithmetic as the regex: H * 3600 + M * 60 + S), the others by the regex."""
    if len(values) and values.null_count == 0:
        eight = pc.equal(pc.binary_length(values), 8).to_numpy(zero_copy_only=False)
        if eight.any():
            out = np.full(len(values), np.nan)
            bad = np.zeros(len(values), dtype=bool)
            sub = values.filter(pa.array(eight))
            data, offsets = swar.buffers_of(sub)
            secs, ok = swar.fixed_clock(data, int(offsets[0]), len(sub), b"")
            at = np.flatnonzero(eight)
            out[at[ok]] = secs[ok]
            rest = np.concatenate([np.flatnonzero(~eight), at[~ok]])
            if len(rest):
                rest.sort()
                r_out, r_bad = _clock_regex(values.take(pa.array(rest)))
                out[rest], bad[rest] = r_out, r_bad
            return out, bad
    return _clock_regex(values)


def _clock_regex(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    sub, ok, bad, out = _matched(values, CLOCK)
    if sub is not None:
        groups = sub  # (a name the closure sees as not None)

        def part(i: int) -> np.ndarray:
            col = pc.struct_field(groups, [i])
            col = pc.if_else(pc.equal(col, ""), "0", col)
            return np.asarray(pc.cast(pc.fill_null(col, "0"), pa.float64()).to_numpy(zero_copy_only=False))

        out[ok] = part(0) * 86400 + part(1) * 3600 + part(2) * 60 + part(3)
    return out, bad


# ---- the rollup --------------------------------------------------------------------------------------------

def present(raw: Mapping[str, pa.Array]) -> bool:
    """Whether the input has any usage column at all."""
    return any(name in raw for name in USAGE_FIELDS)


def _plain(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    return arr


def _string(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A text column as one string array (the direct reader's binary read as text)."""
    arr = _plain(arr)
    return arr.cast(pa.string()) if pa.types.is_binary(arr.type) else arr


def _empty_to_null(arr: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(arr, ""), pa.scalar(None, pa.string()), arr)


@dataclass(frozen=True)
class Extracted:
    """One TRES of one usage column on the usage rows: its values (NaN: absent or bad), the rows (of the table,
    ascending) whose value is not one, and their text (for the warnings)."""

    name: str
    key: str
    values: np.ndarray
    bad_rows: np.ndarray
    bad_text: pa.Array

    def index(self, row: int) -> int:
        return int(np.searchsorted(self.bad_rows, row))

    def where_same(self, twin: Extracted, same: np.ndarray, same_rows: np.ndarray) -> Extracted:
        """These figures, with `twin`'s (the same TRES of a column that printed the same list) on the usage
        rows `same` (rows of the table: `same_rows`), its bad values too."""
        borrowed = twin.bad_rows[sorting.in_sorted(twin.bad_rows, same_rows)]
        if not borrowed.size:
            return Extracted(self.name, self.key, np.where(same, twin.values, self.values), self.bad_rows, self.bad_text)
        bad_rows = np.concatenate([self.bad_rows, borrowed])
        order = np.argsort(bad_rows, kind="stable")
        text = pa.concat_arrays([self.bad_text, twin.bad_text.take(pa.array(np.searchsorted(twin.bad_rows, borrowed)))])
        return Extracted(self.name, self.key, np.where(same, twin.values, self.values), bad_rows[order],
                         text.take(pa.array(order)))


class _TextOrder:
    """Rows of the table <-> rows of the usage text columns, where those come in another order (`text_rows`:
    each table row's text row)."""

    def __init__(self, text_rows: np.ndarray | None) -> None:
        self.text_rows = text_rows
        self._rows_of_text: np.ndarray | None = None

    def text(self, rows: np.ndarray) -> np.ndarray:
        """The text rows of table `rows`."""
        return rows if self.text_rows is None else self.text_rows[rows]

    def text_row(self, row: int) -> int:
        return row if self.text_rows is None else int(self.text_rows[row])

    def rows_of(self, by_text_row: np.ndarray) -> np.ndarray:
        """Values given per text row, per table row."""
        return by_text_row if self.text_rows is None else by_text_row[self.text_rows]

    def rows(self, text_rows: np.ndarray) -> np.ndarray:
        """The table rows of `text_rows`."""
        if self.text_rows is None:
            return text_rows
        inverse = self._rows_of_text
        if inverse is None:
            # Filled before it is shared: the rollup's threads call this side by side, and one must never see
            # the array half written (another may compute its own meanwhile).
            inverse = np.empty(self.text_rows.size, dtype=np.int64)
            inverse[self.text_rows] = np.arange(self.text_rows.size)
            self._rows_of_text = inverse
        return inverse[text_rows]


def add_usage_columns(
    columns: dict[str, Any],
    usage_text: Mapping[str, pa.Array],
    is_step: np.ndarray,
    line_values: np.ndarray,
    source: str,
    *,
    rule: str | None,
    warnings: UsageWarnings,
    text_rows: np.ndarray | None = None,
    keep: np.ndarray | None = None,
) -> bool:
    """Add the COLUMNS to `columns` (every row; only the job rows' values matter), from the step rows'
    `usage_text` (raw field -> string array of every row; `text_rows`: each row's row in them where they
    come in another order, a permutation). `columns` must hold job_id, gpus and elapsed_s. `keep`: the rows
    the caller keeps (its job rows; None: every row): the COLUMNS are made for those rows alone, in order (a
    dump's step rows are most of its rows: the figures are not written out for every row to be filtered at once).
    Where no row has usage, nothing is added and False returned: the caller adds null COLUMNS to the rows it
    keeps (a dump's step rows are most of its rows: a million nulls per column cost page faults, not work).

    The steps, in order: `_UsageRows.of` (the rows that print usage), `_read_lists` (the lists' syntax and
    their keys, read side by side in a pool while the output arrays, parents and energy are set up),
    `_warn_bad_lists` and `_warn_bad_values`, `_utilisation` and `_warn_utilisation` (per-GPU utilisation by
    the rule), `_JobMap` (each usage row's job among the rows kept), `_roll_up` and `_roll_up_energy` (sums and
    peaks per job), `_job_utilisation` (what a job's utilisation figures keep), `_write`."""
    n = len(is_step)
    if not usage_text or n == 0:
        return False
    usage = _UsageRows.of(usage_text, text_rows, n, line_values, source, warnings)
    if usage is None:
        return False
    reads = _read_lists(usage, columns, is_step, keep)
    _warn_bad_lists(usage, reads.bad_lists, reads.same_rows, reads.ave_same_rows)
    _warn_bad_values(usage, reads.got)
    util = _utilisation(reads.got, reads.gpus, rule)
    _warn_utilisation(util, line_values[usage.rows], source, warnings)
    jobs = _JobMap(is_step[usage.rows], reads.parent, usage.rows, reads.out)
    _roll_up(jobs, reads, util)
    _roll_up_energy(jobs, reads.out.values["energy_j"], reads.energy, is_step[usage.rows])
    _job_utilisation(jobs, reads.out, util, reads.job_gpus, reads.job_elapsed)
    _write(columns, reads.out)
    return True


class _UsageRows:
    """The rows that print usage (`rows`: of the table; `t_rows`: the same in the text columns) and the reads of
    their text columns, which the pool's threads call side by side (nothing here is written after `of`)."""

    def __init__(self, text: dict[str, pa.Array], order: _TextOrder, rows: np.ndarray, n: int,
                 line_values: np.ndarray, source: str, warnings: UsageWarnings) -> None:
        self.text = text
        self.order = order
        self.rows = rows
        self.t_rows = order.text(rows)  # the usage rows in the text columns
        self.n = n
        self.line_values = line_values
        self.source = source
        self.warnings = warnings

    @classmethod
    def of(cls, usage_text: Mapping[str, pa.Array], text_rows: np.ndarray | None, n: int, line_values: np.ndarray,
           source: str, warnings: UsageWarnings) -> _UsageRows | None:
        """The text columns as strings and the rows where any of them is not empty; None where none is."""
        text = {name: _string(arr) for name, arr in usage_text.items()}
        order = _TextOrder(text_rows)
        has_usage = np.zeros(n, dtype=bool)
        for arr in text.values():
            has_usage |= order.rows_of(fields._mask(pc.greater(pc.binary_length(arr), 0)))
        rows = np.flatnonzero(has_usage)
        if rows.size == 0:
            return None
        return cls(text, order, rows, n, line_values, source, warnings)

    def warn(self, mask_rows: np.ndarray, message: Any) -> None:
        """One warning per row in `mask_rows` (all rows of the table), the first ones listed."""
        for i in mask_rows[:MAX_WARNINGS_LISTED].tolist():
            self.warnings.add(self.source, int(self.line_values[i]), message(i))
        self.warnings.count += max(0, len(mask_rows) - MAX_WARNINGS_LISTED)

    def to_read(self, name: str, among: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, bool, pa.Array]:
        """The usage rows `among` picks (None: all): their table rows, their text rows, and what to read of
        column `name`: the whole column (an empty row costs a kernel nothing), or a copy of those rows when
        they are few (`few`)."""
        at, t_at = (self.rows, self.t_rows) if among is None else (self.rows[among], self.t_rows[among])
        few = at.size * 8 < self.n
        return at, t_at, few, self.text[name].take(pa.array(t_at)) if few else self.text[name]

    # A malformed TRES list that a figure is read from is a warning (what can be read of it still is):
    # TRESUsageOutTot gives none, TRESUsageInAve only where TRESUsageInTot has no gres/gpuutil (_read_ave).
    def malformed(self, name: str, among: np.ndarray | None = None) -> np.ndarray:
        """The rows (of the table) whose `name` is not a TRES list; `among`: of these usage rows only."""
        at, t_at, few, arr = self.to_read(name, among)
        ok = fields._mask(pc.fill_null(pc.match_substring_regex(arr, ENTRY_SYNTAX.pattern), True))
        return at[~ok] if few else at[~ok[t_at]]

    def field_values(self, name: str, key: str, kind: str, among: np.ndarray | None = None) -> Extracted:
        """`key` of column `name` on the usage rows (NaN where absent); `among`: only on these rows."""
        rows = self.rows
        out = np.full(rows.size, np.nan)
        if name not in self.text:
            return Extracted(name, key, out, np.zeros(0, np.int64), pa.array([], pa.string()))
        at, t_at, few, arr = self.to_read(name, among)
        where, values = extract(arr, key)
        parse = {"number": numbers, "count": counts, "size": sizes_mib, "clock": clock_seconds}[kind]
        got, bad = parse(values)
        bad_at = np.flatnonzero(bad)
        if few:
            sub = np.full(at.size, np.nan)
            sub[where] = got
            out[slice(None) if among is None else among] = sub
            return Extracted(name, key, out, at[where[bad_at]], values.take(pa.array(bad_at)))
        full = np.full(self.n, np.nan)  # by text row
        full[where] = got
        out[slice(None) if among is None else among] = full[t_at]
        bad_rows = self.order.rows(where[bad_at])
        if self.order.text_rows is not None:  # (rows of the table ascending, as Extracted keeps them)
            ranked = np.argsort(bad_rows, kind="stable")
            bad_rows, bad_at = bad_rows[ranked], bad_at[ranked]
        if among is not None:  # (the whole column was read)
            wanted = sorting.in_sorted(bad_rows, at)
            bad_rows, bad_at = bad_rows[wanted], bad_at[wanted]
        return Extracted(name, key, out, bad_rows, values.take(pa.array(bad_at)))

    def same_text(self, a: str, b: str) -> np.ndarray:
        """Which usage rows print the very same list as `a` and as `b`."""
        if a not in self.text or b not in self.text:
            return np.zeros(self.rows.size, dtype=bool)
        return fields._mask(pc.equal(self.text[a], self.text[b]))[self.t_rows]


@dataclass
class _Output:
    """The figures out, one row per table row kept (`kept`; `out_row`: each table row's row out): `values` per
    float column (NaN: no figure), `rule_code` an index into RULES_OUT (-1: none)."""

    kept: np.ndarray
    out_row: np.ndarray
    n_out: int
    values: dict[str, np.ndarray]
    rule_code: np.ndarray


@dataclass
class _Reads:
    """What `_read_lists` leaves: each (column, key) read on the usage rows, the malformed lists per column
    (table rows), the table rows where Max prints Tot's list and where Ave (read) prints Tot's, and what was set
    up meanwhile: the output arrays, the jobs' GPUs and Elapsed (per table row, and per usage row), each usage
    row's parent (table row, -1: none) and its ConsumedEnergyRaw."""

    got: dict[tuple[str, str], Extracted]
    bad_lists: dict[str, np.ndarray]
    same_rows: np.ndarray
    ave_same_rows: np.ndarray
    out: _Output
    job_gpus: np.ndarray
    job_elapsed: np.ndarray
    gpus: np.ndarray
    elapsed: np.ndarray
    parent: np.ndarray
    energy: np.ndarray


_MAX_KEYS = (("gres/gpuutil", "count"), ("gres/gpumem", "size"), ("mem", "size"), ("cpu", "clock"))
_TOT_KEYS = (("gres/gpuutil", "count"), ("cpu", "clock"))
_Futures = dict[Any, Future[Any]]


def _read_lists(usage: _UsageRows, columns: Mapping[str, Any], is_step: np.ndarray,
                keep: np.ndarray | None) -> _Reads:
    """The syntax checks and key reads of the lists, in a pool, with the rest of the rollup set up meanwhile on
    this thread: the kernels release the GIL, so the columns are read side by side, TRESUsageInMax first."""
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        syntax, read = _submit_max(pool, usage)
        # A step of one task prints the same list as its Ave, its Max and its Tot (sacct's batch and extern
        # steps always): such a Tot is read as its Max was, and such an Ave as its Tot, not again.
        same = usage.same_text("TRESUsageInMax", "TRESUsageInTot")
        same_rows = usage.rows[same]
        _submit_tot(pool, usage, ~same, syntax, read)
        out = _output_arrays(usage.n, keep)
        job_gpus, job_elapsed = _job_sizes(columns)
        gpus, elapsed = job_gpus[usage.rows], job_elapsed[usage.rows]
        parent = _parents(_plain(columns["job_id"]), is_step, usage.rows, usage.line_values, usage.source,
                          usage.warnings)
        energy = _energy(usage)
        got = _tot_as_max(read, same, same_rows)
        ave_same_rows = _read_ave(pool, usage, got, syntax)
        bad_lists = {name: fut.result() for name, fut in syntax.items()}
    return _Reads(got, bad_lists, same_rows, ave_same_rows, out, job_gpus, job_elapsed, gpus, elapsed, parent,
                  energy)


def _submit_max(pool: ThreadPoolExecutor, usage: _UsageRows) -> tuple[_Futures, _Futures]:
    """TRESUsageInMax's syntax check and its four keys, submitted first (every figure but energy reads them)."""
    syntax = {"TRESUsageInMax": pool.submit(usage.malformed, "TRESUsageInMax")} \
        if "TRESUsageInMax" in usage.text else {}
    read = {("TRESUsageInMax", key): pool.submit(usage.field_values, "TRESUsageInMax", key, kind)
            for key, kind in _MAX_KEYS}
    return syntax, read


def _submit_tot(pool: ThreadPoolExecutor, usage: _UsageRows, own: np.ndarray, syntax: _Futures,
                read: _Futures) -> None:
    """TRESUsageInTot's syntax check and its keys, submitted (into `syntax` and `read`) on the usage rows `own`
    alone: those whose Tot is not their Max's list."""
    if "TRESUsageInTot" in usage.text:
        syntax["TRESUsageInTot"] = pool.submit(usage.malformed, "TRESUsageInTot", own)
    read |= {("TRESUsageInTot", key): pool.submit(usage.field_values, "TRESUsageInTot", key, kind, among=own)
             for key, kind in _TOT_KEYS}


def _output_arrays(n: int, keep: np.ndarray | None) -> _Output:
    """The output arrays, one row per row kept (every row where `keep` is None), no figure in any yet."""
    kept = np.ones(n, dtype=bool) if keep is None else keep
    out_row = np.cumsum(kept, dtype=np.int64) - 1  # table row -> its row out
    n_out = int(out_row[-1]) + 1
    values = {name: np.full(n_out, np.nan) for name, kind in COLUMNS if kind != pa.string()}
    rule_code = np.full(n_out, -1, dtype=np.int64)  # index into RULES_OUT, -1: none
    return _Output(kept, out_row, n_out, values, rule_code)


def _job_sizes(columns: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each table row's GPUs and Elapsed seconds (0 where unknown)."""
    job_gpus = np.nan_to_num(np.asarray(_plain(columns["gpus"]).to_numpy(zero_copy_only=False), dtype=float))
    job_elapsed = np.nan_to_num(np.asarray(_plain(columns["elapsed_s"]).to_numpy(zero_copy_only=False),
                                           dtype=float))
    return job_gpus, job_elapsed


def _energy(usage: _UsageRows) -> np.ndarray:
    """ConsumedEnergyRaw of each usage row (NaN where empty or absent)."""
    if "ConsumedEnergyRaw" not in usage.text:
        return np.full(usage.rows.size, np.nan)
    return numbers(_empty_to_null(usage.text["ConsumedEnergyRaw"]))[0][usage.t_rows]


def _tot_as_max(read: _Futures, same: np.ndarray, same_rows: np.ndarray) -> dict[tuple[str, str], Extracted]:
    """The keys read (waiting for them), Tot's taken from Max's on the usage rows where both print one list."""
    got = {pair: fut.result() for pair, fut in read.items()}
    for key in ("gres/gpuutil", "cpu"):
        got["TRESUsageInTot", key] = got["TRESUsageInTot", key].where_same(
            got["TRESUsageInMax", key], same, same_rows)
    return got


def _read_ave(pool: ThreadPoolExecutor, usage: _UsageRows, got: dict[tuple[str, str], Extracted],
              syntax: _Futures) -> np.ndarray:
    """TRESUsageInAve's gres/gpuutil into `got`, only where Tot has none (a hand-cut dump, a step without GPUs),
    taken from Tot where both print one list, and its syntax check submitted on the rows read; returns the
    table rows where Ave was Tot's list."""
    ave_rows = np.isnan(got["TRESUsageInTot", "gres/gpuutil"].values)
    ave_same = ave_rows & usage.same_text("TRESUsageInAve", "TRESUsageInTot")
    ave_same_rows = usage.rows[ave_same]
    ave_own = ave_rows & ~ave_same
    got["TRESUsageInAve", "gres/gpuutil"] = usage.field_values(
        "TRESUsageInAve", "gres/gpuutil", "count", among=ave_own).where_same(
        got["TRESUsageInTot", "gres/gpuutil"], ave_same, ave_same_rows)
    if "TRESUsageInAve" in usage.text:
        syntax["TRESUsageInAve"] = pool.submit(usage.malformed, "TRESUsageInAve", ave_own)
    return ave_same_rows


def _with_twin(bad_rows: np.ndarray, twin_bad_rows: np.ndarray, same_rows: np.ndarray) -> np.ndarray:
    """Malformed rows, and those of a twin column on the rows where the two print the same list."""
    return np.union1d(bad_rows, twin_bad_rows[sorting.in_sorted(twin_bad_rows, same_rows)])


def _warn_bad_lists(usage: _UsageRows, bad_lists: dict[str, np.ndarray], same_rows: np.ndarray,
                    ave_same_rows: np.ndarray) -> None:
    """A warning per malformed list read (a list not checked because its twin was counts as its twin did)."""
    if "TRESUsageInTot" in bad_lists and "TRESUsageInMax" in bad_lists:
        bad_lists["TRESUsageInTot"] = _with_twin(bad_lists["TRESUsageInTot"], bad_lists["TRESUsageInMax"],
                                                 same_rows)
    if "TRESUsageInAve" in bad_lists and "TRESUsageInTot" in bad_lists:
        bad_lists["TRESUsageInAve"] = _with_twin(bad_lists["TRESUsageInAve"], bad_lists["TRESUsageInTot"],
                                                 ave_same_rows)
    order = usage.order
    for name, bad_rows in sorted(bad_lists.items()):
        arr = usage.text[name]
        usage.warn(bad_rows,
                   lambda i, name=name, arr=arr: f"{name} {arr[order.text_row(i)].as_py()!r:.80} is not a TRES list")


def _warn_bad_values(usage: _UsageRows, got: dict[tuple[str, str], Extracted]) -> None:
    """A warning per value read that is not a number of its kind."""
    for name, key in (("TRESUsageInAve", "gres/gpuutil"), ("TRESUsageInMax", "gres/gpuutil"),
                      ("TRESUsageInTot", "gres/gpuutil"), ("TRESUsageInMax", "gres/gpumem"),
                      ("TRESUsageInTot", "cpu"), ("TRESUsageInMax", "mem")):
        ex = got[name, key]
        usage.warn(ex.bad_rows,
                   lambda i, ex=ex: f"{ex.name} {ex.key}={ex.bad_text[ex.index(i)].as_py()!r} is not a value")


@dataclass(frozen=True)
class _Utilisation:
    """Per usage row: whether it has gres/gpuutil, its per-GPU utilisation and peak, and why it is unusable
    (`absurd`: outside 0-100; `ambiguous`: rule unknown on several GPUs; `last_gpu`: 23.11.0-24.05.0;
    `gpuless`: a step with no gres/gpu to spread it over)."""

    has_util: np.ndarray
    per_gpu: np.ndarray
    peak: np.ndarray
    absurd: np.ndarray
    ambiguous: np.ndarray
    last_gpu: np.ndarray
    gpuless: np.ndarray
    spoiled: np.ndarray  # any of the four


def _utilisation(got: dict[tuple[str, str], Extracted], gpus: np.ndarray, rule: str | None) -> _Utilisation:
    """Per-GPU utilisation of each usage row, by the rule of the Slurm that wrote it (RULES above)."""
    util_ave, util_max, util_tot = (got[name, "gres/gpuutil"].values
                                    for name in ("TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot"))
    has_util = ~np.isnan(util_ave) | ~np.isnan(util_tot)
    multi = gpus > 1
    evidence = np.fmax(np.nan_to_num(util_max, nan=-1), np.nan_to_num(util_tot, nan=-1)) > 100
    last_gpu = has_util if rule == RULE_LAST_GPU else np.zeros(gpus.size, dtype=bool)
    # Unknown version: one GPU reads the same under both `summed` releases; several need a value over 100.
    ambiguous = has_util & multi & ~evidence if rule is None else np.zeros(gpus.size, dtype=bool)
    # Tot is the sum over tasks; a step without Tot (a hand-cut dump) falls back to Ave x tasks = Ave for one.
    total = np.where(np.isnan(util_tot), util_ave, util_tot)
    per_gpu = total / np.maximum(gpus, 1)
    # Max is one task's peak summed over its GPUs: / the step's GPUs, and the step's mean of task peaks, are
    # both lower bounds of the busiest GPU's peak, so the larger one is kept.
    peak = np.fmax(util_max / np.maximum(gpus, 1), per_gpu)
    absurd = has_util & ~last_gpu & ((per_gpu < 0) | (per_gpu > 100) | (np.nan_to_num(peak) > 100)
                                     | (np.nan_to_num(peak) < 0))
    # gres/gpuutil on a step whose AllocTRES has no gres/gpu: over how many GPUs is unknown, so its utilisation
    # is too (read as is it would be 0% busy on 0 GPUs, and its job held idle).
    gpuless = has_util & ~last_gpu & ~absurd & (gpus <= 0)
    return _Utilisation(has_util, per_gpu, peak, absurd, ambiguous, last_gpu, gpuless,
                        absurd | ambiguous | last_gpu | gpuless)


def _warn_utilisation(util: _Utilisation, lines: np.ndarray, source: str, warnings: UsageWarnings) -> None:
    """A warning per usage row whose utilisation is unusable (`lines`: each usage row's line)."""
    absurd, ambiguous, last_gpu, per_gpu = util.absurd, util.ambiguous, util.last_gpu, util.per_gpu
    for i in np.flatnonzero(absurd)[: MAX_WARNINGS_LISTED]:
        warnings.add(source, int(lines[i]), f"gres/gpuutil reads {per_gpu[i]:.6g}% per GPU "
                                            f"(outside 0-100; rule {RULE_SUMMED})")
    warnings.count += max(0, int(absurd.sum()) - MAX_WARNINGS_LISTED)
    for i in np.flatnonzero(ambiguous)[: MAX_WARNINGS_LISTED]:
        warnings.add(source, int(lines[i]), "gres/gpuutil of a step on several GPUs, and the Slurm version that "
                                            "wrote it is not known (23.11.0-24.05.0 recorded only the node's last "
                                            "GPU, other releases the sum): pass --slurm-version")
    warnings.count += max(0, int(ambiguous.sum()) - MAX_WARNINGS_LISTED)
    for i in np.flatnonzero(last_gpu)[: MAX_WARNINGS_LISTED]:
        warnings.add(source, int(lines[i]), "gres/gpuutil from Slurm 23.11.0-24.05.0, which recorded only the "
                                            "node's last GPU (fixed in 24.05.1): utilisation unknown")
    warnings.count += max(0, int(last_gpu.sum()) - MAX_WARNINGS_LISTED)
    for i in np.flatnonzero(util.gpuless)[: MAX_WARNINGS_LISTED]:
        warnings.add(source, int(lines[i]), "gres/gpuutil on a step with no gres/gpu in its AllocTRES: its GPUs, "
                                            "so its utilisation, unknown")
    warnings.count += max(0, int(util.gpuless.sum()) - MAX_WARNINGS_LISTED)


class _JobMap:
    """Each usage row's job as a row out (a step's parent row, a job row itself), for the usage rows whose job
    is kept (`valid`; a job row dropped takes its steps' figures with it), and the per-job sums and peaks."""

    def __init__(self, step: np.ndarray, parent: np.ndarray, rows: np.ndarray, out: _Output) -> None:
        target = np.where(step, parent, rows)
        self.valid = (target >= 0) & out.kept[np.maximum(target, 0)]
        self.target_v = out.out_row[target[self.valid]]  # rows out
        self.n_out = out.n_out

    def add(self, dest: np.ndarray, values: np.ndarray) -> None:
        """The sum of each job's `values` (NaN: none) into `dest`, which holds no figure yet (NaN where the job
        gets none). bincount adds in the rows' order, as a loop would."""
        v = values[self.valid]
        ok = ~np.isnan(v)
        idx = self.target_v[ok]
        got = np.bincount(idx, minlength=self.n_out) > 0
        dest[got] = np.bincount(idx, weights=v[ok], minlength=self.n_out)[got]

    def peak(self, dest: np.ndarray, values: np.ndarray) -> None:
        """The highest of each job's `values` (NaN: none) into `dest`, which holds no figure yet."""
        v = values[self.valid]
        ok = ~np.isnan(v)
        idx, v = self.target_v[ok], v[ok]
        if idx.size and (idx[1:] >= idx[:-1]).all():  # (sacct's order: each job's steps after it, together)
            first = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
            dest[idx[first]] = np.fmax.reduceat(v, first)
        else:
            np.fmax.at(dest, idx, v)

    def jobs_of(self, step_mask: np.ndarray) -> np.ndarray:
        """The job rows (as rows out, a mask) of the usage rows in `step_mask`: by a mask, not a sort."""
        marked = np.zeros(self.n_out, dtype=bool)
        marked[self.target_v[step_mask[self.valid]]] = True
        return marked


def _roll_up(jobs: _JobMap, reads: _Reads, util: _Utilisation) -> None:
    """The usage rows' busy GPU-seconds and CPU seconds summed, and their peaks maxed, into their jobs' rows out
    (an unusable utilisation and a negative GPU memory count as none)."""
    out, got = reads.out.values, reads.got
    spoiled = util.spoiled
    busy = np.where(util.has_util & ~spoiled, util.per_gpu / 100 * reads.gpus * reads.elapsed, np.nan)
    jobs.add(out["gpu_busy_gpu_s"], busy)
    # (a peak only where the row has a utilisation: Max alone, without Tot or Ave, passes no rule's checks)
    jobs.peak(out["gpu_util_max_pct"], np.where(util.has_util & ~spoiled, util.peak, np.nan))
    gmem_max = got["TRESUsageInMax", "gres/gpumem"].values
    gmem_max = np.where(np.nan_to_num(gmem_max) < 0, np.nan, gmem_max)
    jobs.peak(out["gpu_mem_max_mb"], gmem_max)
    jobs.add(out["cpu_used_s"], got["TRESUsageInTot", "cpu"].values)
    jobs.peak(out["mem_max_mb"], got["TRESUsageInMax", "mem"].values)


def _roll_up_energy(jobs: _JobMap, dest: np.ndarray, energy: np.ndarray, step: np.ndarray) -> None:
    """Each job's energy into `dest`: its own row's figure, else its steps' sum (0 J, Slurm's "not gathered",
    counts as none)."""
    energy = np.where(energy > 0, energy, np.nan)
    step_energy = np.where(step, energy, np.nan)
    own_energy = np.where(step, np.nan, energy)
    jobs.add(dest, step_energy)
    job_energy = own_energy[jobs.valid]
    ok = ~np.isnan(job_energy)
    dest[jobs.target_v[ok]] = job_energy[ok]  # the job row's own figure wins over its steps' sum


def _job_utilisation(jobs: _JobMap, output: _Output, util: _Utilisation, job_gpus: np.ndarray,
                     job_elapsed: np.ndarray) -> None:
    """Per job: no utilisation figure where a step's is unusable (part of it would read as idle), else its
    GPU-seconds with utilisation (busy capped at them) and the rule."""
    out = output.values
    spoiled_at = jobs.jobs_of(util.spoiled)
    spoiled_jobs = np.flatnonzero(spoiled_at)
    out["gpu_busy_gpu_s"][spoiled_jobs] = np.nan
    out["gpu_util_max_pct"][spoiled_jobs] = np.nan
    good_jobs = np.flatnonzero(jobs.jobs_of(util.has_util) & ~spoiled_at)
    good_rows = np.flatnonzero(output.kept)[good_jobs]  # (rows of the table)
    out["gpu_util_gpu_s"][good_jobs] = job_gpus[good_rows] * job_elapsed[good_rows]
    # Busy GPU-seconds never exceed the job's own GPU-seconds (overlapping steps on the same GPUs).
    cap = out["gpu_util_gpu_s"]
    over = ~np.isnan(cap) & (out["gpu_busy_gpu_s"] > cap)
    out["gpu_busy_gpu_s"][over] = cap[over]
    output.rule_code[good_jobs] = 0
    output.rule_code[jobs.jobs_of(util.last_gpu)] = 1  # says why the figure is unknown


def _write(columns: dict[str, Any], output: _Output) -> None:
    """The COLUMNS as Arrow arrays into `columns` (null: no figure)."""
    out, rule_code = output.values, output.rule_code
    for name, kind in COLUMNS:
        if kind == pa.string():
            columns[name] = pa.array(RULES_OUT, pa.string()).take(
                pa.array(rule_code, pa.int64(), mask=rule_code < 0))
        else:
            columns[name] = fields.nullable(out[name], ~np.isnan(out[name]), pa.float64())


def _parents(job_id: pa.Array, is_step: np.ndarray, rows: np.ndarray, line_values: np.ndarray, source: str,
             warnings: UsageWarnings) -> np.ndarray:
    """For each of `rows` (row positions), the position of its job row: the nearest job row before it whose
    job id is the step's id less its `.step` part; -1 where none (an orphan step, counted)."""
    n = len(is_step)
    positions = np.arange(n)
    last_job = np.maximum.accumulate(np.where(~is_step, positions, -1))
    step_rows = rows[is_step[rows]]
    parent = np.full(rows.size, -1, dtype=np.int64)
    if step_rows.size == 0:
        return parent
    ids = pc.take(job_id, pa.array(step_rows))
    keys = pc.list_element(pc.split_pattern(ids, ".", max_splits=1, reverse=True), 0)  # less its last `.step`
    guess = last_job[step_rows]
    guess_ok = guess >= 0
    match = np.zeros(step_rows.size, dtype=bool)
    if guess_ok.any():
        got = pc.take(job_id, pa.array(np.where(guess_ok, guess, 0)))
        match = guess_ok & pc.fill_null(pc.equal(got, keys), False).to_numpy(zero_copy_only=False)
    resolved = np.where(match, guess, -1)
    missing = np.flatnonzero(~match)
    if missing.size:
        # Out of sacct's order (a dump sorted or merged by hand): the latest job row with that id before the
        # step, else after it.
        job_rows = np.flatnonzero(~is_step)
        by_id: dict[str, list[int]] = {}
        for pos, jid in zip(job_rows.tolist(), pc.take(job_id, pa.array(job_rows)).to_pylist(), strict=True):
            by_id.setdefault(jid, []).append(pos)
        for i in missing.tolist():
            cands = by_id.get(keys[i].as_py(), [])
            before = [p for p in cands if p < step_rows[i]]
            if before or cands:
                resolved[i] = before[-1] if before else cands[0]
            else:
                warnings.add(source, int(line_values[step_rows[i]]),
                             f"step {ids[i].as_py()} has no job row: its usage is left out")
    where = np.searchsorted(rows, step_rows)
    parent[where] = resolved
    return parent
