"""Slurm's own usage accounting, rolled up from the steps to their job: `TRESUsageInAve`, `TRESUsageInMax`,
`TRESUsageInTot`, `TRESUsageOutTot` and `ConsumedEnergyRaw` (no extra infrastructure: jobacct_gather and,
for GPUs, the gpu/nvml plugin's `gres/gpuutil` and `gres/gpumem`).

sacct prints usage on the step rows (`123.batch`, `123.0`, `123.extern`); the allocation row's usage
fields are empty. The readers keep every row until `normalize.finish`, which calls `attach` here: each step
is given to its job row (the nearest job row before it with the step's job id: sacct prints each execution's
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
                      on) or `last-gpu` (23.11.0 to 24.05.0: utilisation unknown); null without gres/gpuutil
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
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields
from gpuclust.accounting.ingest.fast import sorting, swar
from gpuclust.accounting.ingest.fast.tres_values import extract

# The sacct fields read on step rows (the registry declares them with step_usage=True).
USAGE_FIELDS: tuple[str, ...] = (
    "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "TRESUsageOutTot", "ConsumedEnergyRaw",
)
# Their text columns in the raw table (consumed by `attach`, never stored).
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
RULE_SUMMED = "summed"
RULE_LAST_GPU = "last-gpu"
RULES_OUT = (RULE_SUMMED, RULE_LAST_GPU)
GATHERED_SINCE = (23, 2, 0)
LAST_GPU_RELEASES = ((23, 11, 0), (24, 5, 0))  # inclusive
MAX_WARNINGS_LISTED = 50

_COUNT_UNIT = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}
_MEM_UNIT_MIB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
_NUMBER = r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_ENTRY_SYNTAX = re.compile(r"^(?:[^,=\s]+=[^,=\s]*(?:,[^,=\s]+=[^,=\s]*)*)?$")


def parse_release(version: str | None) -> tuple[int, int, int] | None:
    """`slurm-wlm 23.11.4`, `24.05`, `slurm 24.05.1-1` -> (major, minor, micro); micro 0 when not given."""
    if not version:
        return None
    m = re.match(r"^\s*(?:slurm(?:-wlm)?\s+)?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", version)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def rule_for_version(version: str | None) -> str | None:
    """The gres/gpuutil rule of a Slurm release (RULES above); None when the version is not known. A release
    without a micro number (`24.05`) is taken as its .0."""
    release = parse_release(version)
    if release is None:
        return None
    first, last = LAST_GPU_RELEASES
    return RULE_LAST_GPU if first <= release <= last else RULE_SUMMED


def check_slurm_version(version: str | None) -> str | None:
    """`report build --slurm-version`: a release such as 23.11 or 24.05.3 (InputError otherwise)."""
    from gpuclust.errors import InputError

    if version is not None and rule_for_version(version) is None:
        raise InputError(f"{version!r} is not a Slurm release (e.g. 23.11, 24.05.3)")
    return version


@dataclass
class UsageWarnings:
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
    ok = pc.fill_null(pc.match_substring_regex(values, f"^{_NUMBER}$"), False)
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
    sub, ok, bad, out = _matched(values, f"^(?P<n>{_NUMBER})(?P<u>[KMGTP]?)$")
    if sub is not None:
        num = pc.cast(pc.struct_field(sub, [0]), pa.float64()).to_numpy(zero_copy_only=False)
        unit = pc.index_in(pc.struct_field(sub, [1]), value_set=pa.array(_SUFFIXES)).to_numpy(zero_copy_only=False)
        out[ok] = num * np.array([scale[u] for u in _SUFFIXES])[unit]
    return out, bad


def counts(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Counts sacct may have put through its unit conversion (gpuutil before 23.11.7, energy): `1K` = 1024,
    `1.50K` = 1536; plain numbers as they are."""
    return _suffixed(values, _COUNT_UNIT)


def sizes_mib(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Sizes as sacct prints them (`218192K`, `1.50G`, raw bytes without a suffix) -> MiB."""
    return _suffixed(values, _MEM_UNIT_MIB)


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
    sub, ok, bad, out = _matched(
        values, r"^(?:(?P<d>[0-9]+)-)?(?:(?P<h>[0-9]+):)?(?P<m>[0-9]+):(?P<s>[0-9]+(?:\.[0-9]+)?)$")
    if sub is not None:
        groups = sub  # (a name the closure sees as not None)

        def part(i: int) -> np.ndarray:
            col = pc.struct_field(groups, [i])
            col = pc.if_else(pc.equal(col, ""), "0", col)
            return np.asarray(pc.cast(pc.fill_null(col, "0"), pa.float64()).to_numpy(zero_copy_only=False))

        out[ok] = part(0) * 86400 + part(1) * 3600 + part(2) * 60 + part(3)
    return out, bad


def parse_usage(text: str) -> dict[str, float]:
    """One usage TRES string -> {name: value} (cpu in seconds, mem/vmem/gres/gpumem in MiB, others as
    printed). The scalar definition, for tests and messages; the rollup uses the vectorised forms above."""
    if not _ENTRY_SYNTAX.match(text):
        raise ValueError(f"not a TRES list (name=value,...): {text!r:.80}")
    out: dict[str, float] = {}
    for entry in filter(None, text.split(",")):
        name, _, value = entry.partition("=")
        arr = pa.array([value])
        if name == "cpu":
            got, bad = clock_seconds(arr) if ":" in value else numbers(arr)
        elif name in ("mem", "vmem", "gres/gpumem"):
            got, bad = sizes_mib(arr)
        else:
            got, bad = counts(arr)
        if bad[0]:
            raise ValueError(f"{name}={value!r} is not a number")
        out[name] = float(got[0])
    return out


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


def null_columns(n: int) -> dict[str, pa.Array]:
    return {name: pa.nulls(n, kind) for name, kind in COLUMNS}


def attach(
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
    keeps (a dump's step rows are most of its rows: a million nulls per column cost page faults, not work)."""
    n = len(is_step)
    if not usage_text or n == 0:
        return False
    text = {name: _string(arr) for name, arr in usage_text.items()}
    order = _TextOrder(text_rows)
    has_usage = np.zeros(n, dtype=bool)
    for arr in text.values():
        has_usage |= order.rows_of(fields._mask(pc.greater(pc.binary_length(arr), 0)))
    rows = np.flatnonzero(has_usage)
    if rows.size == 0:
        return False
    t_rows = order.text(rows)  # the usage rows in the text columns

    def warn(mask_rows: np.ndarray, message: Any) -> None:
        """One warning per row in `mask_rows` (all rows of the table), the first ones listed."""
        for i in mask_rows[:MAX_WARNINGS_LISTED].tolist():
            warnings.add(source, int(line_values[i]), message(i))
        warnings.count += max(0, len(mask_rows) - MAX_WARNINGS_LISTED)

    def to_read(name: str, among: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, bool, pa.Array]:
        """The usage rows `among` picks (None: all): their table rows, their text rows, and what to read of
        column `name`: the whole column (an empty row costs a kernel nothing), or a copy of those rows when
        they are few (`few`)."""
        at, t_at = (rows, t_rows) if among is None else (rows[among], t_rows[among])
        few = at.size * 8 < n
        return at, t_at, few, text[name].take(pa.array(t_at)) if few else text[name]

    # A malformed TRES list that a figure is read from is a warning (what can be read of it still is):
    # TRESUsageOutTot gives none, TRESUsageInAve only where TRESUsageInTot has no gres/gpuutil (below).
    def malformed(name: str, among: np.ndarray | None = None) -> np.ndarray:
        """The rows (of the table) whose `name` is not a TRES list; `among`: of these usage rows only."""
        at, t_at, few, arr = to_read(name, among)
        ok = fields._mask(pc.fill_null(pc.match_substring_regex(arr, _ENTRY_SYNTAX.pattern), True))
        return at[~ok] if few else at[~ok[t_at]]

    def field_values(name: str, key: str, kind: str, among: np.ndarray | None = None) -> Extracted:
        """`key` of column `name` on the usage rows (NaN where absent); `among`: only on these rows."""
        out = np.full(rows.size, np.nan)
        if name not in text:
            return Extracted(name, key, out, np.zeros(0, np.int64), pa.array([], pa.string()))
        at, t_at, few, arr = to_read(name, among)
        where, values = extract(arr, key)
        parse = {"number": numbers, "count": counts, "size": sizes_mib, "clock": clock_seconds}[kind]
        got, bad = parse(values)
        bad_at = np.flatnonzero(bad)
        if few:
            sub = np.full(at.size, np.nan)
            sub[where] = got
            out[slice(None) if among is None else among] = sub
            return Extracted(name, key, out, at[where[bad_at]], values.take(pa.array(bad_at)))
        full = np.full(n, np.nan)  # by text row
        full[where] = got
        out[slice(None) if among is None else among] = full[t_at]
        bad_rows = order.rows(where[bad_at])
        if text_rows is not None:  # (rows of the table ascending, as Extracted keeps them)
            ranked = np.argsort(bad_rows, kind="stable")
            bad_rows, bad_at = bad_rows[ranked], bad_at[ranked]
        if among is not None:  # (the whole column was read)
            wanted = sorting.in_sorted(bad_rows, at)
            bad_rows, bad_at = bad_rows[wanted], bad_at[wanted]
        return Extracted(name, key, out, bad_rows, values.take(pa.array(bad_at)))

    def same_text(a: str, b: str) -> np.ndarray:
        """Which usage rows print the very same list as `a` and as `b`."""
        if a not in text or b not in text:
            return np.zeros(rows.size, dtype=bool)
        return fields._mask(pc.equal(text[a], text[b]))[t_rows]

    def with_twin(bad_rows: np.ndarray, twin_bad_rows: np.ndarray, same_rows: np.ndarray) -> np.ndarray:
        """Malformed rows, and those of a twin column on the rows where the two print the same list."""
        return np.union1d(bad_rows, twin_bad_rows[sorting.in_sorted(twin_bad_rows, same_rows)])

    # The kernels release the GIL: the columns are read side by side, TRESUsageInMax first (the rest of the
    # rollup is set up here meanwhile).
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        syntax = {"TRESUsageInMax": pool.submit(malformed, "TRESUsageInMax")} if "TRESUsageInMax" in text else {}
        read = {("TRESUsageInMax", key): pool.submit(field_values, "TRESUsageInMax", key, kind) for key, kind in (
            ("gres/gpuutil", "count"), ("gres/gpumem", "size"), ("mem", "size"), ("cpu", "clock"))}
        # A step of one task prints the same list as its Ave, its Max and its Tot (sacct's batch and extern
        # steps always): such a Tot is read as its Max was, and such an Ave as its Tot, not again.
        same = same_text("TRESUsageInMax", "TRESUsageInTot")
        same_rows = rows[same]
        own = ~same
        if "TRESUsageInTot" in text:
            syntax["TRESUsageInTot"] = pool.submit(malformed, "TRESUsageInTot", own)
        read |= {("TRESUsageInTot", key): pool.submit(field_values, "TRESUsageInTot", key, kind, among=own)
                 for key, kind in (("gres/gpuutil", "count"), ("cpu", "clock"))}
        kept = np.ones(n, dtype=bool) if keep is None else keep
        out_row = np.cumsum(kept, dtype=np.int64) - 1  # table row -> its row out
        n_out = int(out_row[-1]) + 1
        out = {name: np.full(n_out, np.nan) for name, kind in COLUMNS if kind != pa.string()}
        rule_code = np.full(n_out, -1, dtype=np.int64)  # index into RULES_OUT, -1: none
        job_gpus = np.nan_to_num(np.asarray(_plain(columns["gpus"]).to_numpy(zero_copy_only=False), dtype=float))
        job_elapsed = np.nan_to_num(np.asarray(_plain(columns["elapsed_s"]).to_numpy(zero_copy_only=False),
                                               dtype=float))
        gpus, elapsed = job_gpus[rows], job_elapsed[rows]
        parent = _parents(_plain(columns["job_id"]), is_step, rows, line_values, source, warnings)
        energy = numbers(_empty_to_null(text["ConsumedEnergyRaw"]))[0][t_rows] if "ConsumedEnergyRaw" in text \
            else np.full(rows.size, np.nan)
        got = {pair: fut.result() for pair, fut in read.items()}
        for key in ("gres/gpuutil", "cpu"):
            got["TRESUsageInTot", key] = got["TRESUsageInTot", key].where_same(
                got["TRESUsageInMax", key], same, same_rows)
        # Ave counts only where Tot has no gpuutil (a hand-cut dump, a step without GPUs): read it there alone.
        ave_rows = np.isnan(got["TRESUsageInTot", "gres/gpuutil"].values)
        ave_same = ave_rows & same_text("TRESUsageInAve", "TRESUsageInTot")
        ave_same_rows = rows[ave_same]
        ave_own = ave_rows & ~ave_same
        got["TRESUsageInAve", "gres/gpuutil"] = field_values(
            "TRESUsageInAve", "gres/gpuutil", "count", among=ave_own).where_same(
            got["TRESUsageInTot", "gres/gpuutil"], ave_same, ave_same_rows)
        if "TRESUsageInAve" in text:
            syntax["TRESUsageInAve"] = pool.submit(malformed, "TRESUsageInAve", ave_own)
        bad_lists = {name: fut.result() for name, fut in syntax.items()}
    if "TRESUsageInTot" in bad_lists and "TRESUsageInMax" in bad_lists:
        bad_lists["TRESUsageInTot"] = with_twin(bad_lists["TRESUsageInTot"], bad_lists["TRESUsageInMax"], same_rows)
    if "TRESUsageInAve" in bad_lists and "TRESUsageInTot" in bad_lists:
        bad_lists["TRESUsageInAve"] = with_twin(bad_lists["TRESUsageInAve"], bad_lists["TRESUsageInTot"],
                                                ave_same_rows)
    for name, bad_rows in sorted(bad_lists.items()):
        arr = text[name]
        warn(bad_rows, lambda i, name=name, arr=arr: f"{name} {arr[order.text_row(i)].as_py()!r:.80} is not a TRES list")
    for name, key in (("TRESUsageInAve", "gres/gpuutil"), ("TRESUsageInMax", "gres/gpuutil"),
                      ("TRESUsageInTot", "gres/gpuutil"), ("TRESUsageInMax", "gres/gpumem"),
                      ("TRESUsageInTot", "cpu"), ("TRESUsageInMax", "mem")):
        ex = got[name, key]
        warn(ex.bad_rows, lambda i, ex=ex: f"{ex.name} {ex.key}={ex.bad_text[ex.index(i)].as_py()!r} is not a value")
    util_ave, util_max, util_tot = (got[name, "gres/gpuutil"].values
                                    for name in ("TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot"))
    gmem_max = got["TRESUsageInMax", "gres/gpumem"].values
    cpu_tot = got["TRESUsageInTot", "cpu"].values
    mem_max = got["TRESUsageInMax", "mem"].values
    lines = line_values[rows]

    step = is_step[rows]
    # Per-GPU utilisation of each step, by the rule of the Slurm that wrote it.
    has_util = ~np.isnan(util_ave) | ~np.isnan(util_tot)
    multi = gpus > 1
    evidence = np.fmax(np.nan_to_num(util_max, nan=-1), np.nan_to_num(util_tot, nan=-1)) > 100
    last_gpu = has_util if rule == RULE_LAST_GPU else np.zeros(rows.size, dtype=bool)
    # Unknown version: one GPU reads the same under both `summed` releases; several need a value over 100.
    ambiguous = has_util & multi & ~evidence if rule is None else np.zeros(rows.size, dtype=bool)
    # Tot is the sum over tasks; a step without Tot (a hand-cut dump) falls back to Ave x tasks = Ave for one.
    total = np.where(np.isnan(util_tot), util_ave, util_tot)
    per_gpu = total / np.maximum(gpus, 1)
    # Max is one task's peak summed over its GPUs: / the step's GPUs, and the step's mean of task peaks, are
    # both lower bounds of the busiest GPU's peak, so the larger one is kept.
    peak = np.fmax(util_max / np.maximum(gpus, 1), per_gpu)
    absurd = has_util & ~last_gpu & ((per_gpu < 0) | (per_gpu > 100) | (np.nan_to_num(peak) > 100)
                                     | (np.nan_to_num(peak) < 0))
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
    # gres/gpuutil on a step whose AllocTRES has no gres/gpu: over how many GPUs is unknown, so its utilisation
    # is too (read as is it would be 0% busy on 0 GPUs, and its job held idle).
    gpuless = has_util & ~last_gpu & ~absurd & (gpus <= 0)
    for i in np.flatnonzero(gpuless)[: MAX_WARNINGS_LISTED]:
        warnings.add(source, int(lines[i]), "gres/gpuutil on a step with no gres/gpu in its AllocTRES: its GPUs, "
                                            "so its utilisation, unknown")
    warnings.count += max(0, int(gpuless.sum()) - MAX_WARNINGS_LISTED)
    spoiled = absurd | ambiguous | last_gpu | gpuless
    negative_mem = np.nan_to_num(gmem_max) < 0
    gmem_max = np.where(negative_mem, np.nan, gmem_max)

    target = np.where(step, parent, rows)
    valid = (target >= 0) & kept[np.maximum(target, 0)]  # (a job row dropped takes its steps' figures with it)
    target_v = out_row[target[valid]]  # rows out

    def add(name: str, values: np.ndarray) -> None:
        """The sum of each job's `values` (NaN: none) into column `name`, which holds no figure yet (NaN where
        the job gets none). bincount adds in the rows' order, as a loop would."""
        v = values[valid]
        ok = ~np.isnan(v)
        idx = target_v[ok]
        got = np.bincount(idx, minlength=n_out) > 0
        out[name][got] = np.bincount(idx, weights=v[ok], minlength=n_out)[got]

    def peak_of(name: str, values: np.ndarray) -> None:
        """The highest of each job's `values` (NaN: none) into column `name`, which holds no figure yet."""
        v = values[valid]
        ok = ~np.isnan(v)
        dest = out[name]
        idx, v = target_v[ok], v[ok]
        if idx.size and (idx[1:] >= idx[:-1]).all():  # (sacct's order: each job's steps after it, together)
            first = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
            dest[idx[first]] = np.fmax.reduceat(v, first)
        else:
            np.fmax.at(dest, idx, v)

    busy = np.where(has_util & ~spoiled, per_gpu / 100 * gpus * elapsed, np.nan)
    add("gpu_busy_gpu_s", busy)
    peak_of("gpu_util_max_pct", np.where(spoiled, np.nan, peak))
    peak_of("gpu_mem_max_mb", gmem_max)
    add("cpu_used_s", cpu_tot)
    peak_of("mem_max_mb", mem_max)
    energy = np.where(energy > 0, energy, np.nan)
    step_energy = np.where(step, energy, np.nan)
    own_energy = np.where(step, np.nan, energy)
    add("energy_j", step_energy)
    job_energy = own_energy[valid]
    ok = ~np.isnan(job_energy)
    out["energy_j"][target_v[ok]] = job_energy[ok]  # the job row's own figure wins over its steps' sum

    # A job with a spoiled step has no utilisation figure at all (part of it would read as idle).
    def jobs_of(step_mask: np.ndarray) -> np.ndarray:
        """The job rows (as rows out, a mask) of the usage rows in `step_mask`: by a mask, not a sort."""
        marked = np.zeros(n_out, dtype=bool)
        marked[target_v[step_mask[valid]]] = True
        return marked

    spoiled_at = jobs_of(spoiled)
    spoiled_jobs = np.flatnonzero(spoiled_at)
    out["gpu_busy_gpu_s"][spoiled_jobs] = np.nan
    out["gpu_util_max_pct"][spoiled_jobs] = np.nan
    good_jobs = np.flatnonzero(jobs_of(has_util) & ~spoiled_at)
    good_rows = np.flatnonzero(kept)[good_jobs]  # (rows of the table)
    out["gpu_util_gpu_s"][good_jobs] = job_gpus[good_rows] * job_elapsed[good_rows]
    # Busy GPU-seconds never exceed the job's own GPU-seconds (overlapping steps on the same GPUs).
    cap = out["gpu_util_gpu_s"]
    over = ~np.isnan(cap) & (out["gpu_busy_gpu_s"] > cap)
    out["gpu_busy_gpu_s"][over] = cap[over]
    rule_code[good_jobs] = 0
    rule_code[jobs_of(last_gpu)] = 1  # says why the figure is unknown

    for name, kind in COLUMNS:
        if kind == pa.string():
            columns[name] = pa.array(RULES_OUT, pa.string()).take(
                pa.array(rule_code, pa.int64(), mask=rule_code < 0))
        else:
            columns[name] = fields.nullable(out[name], ~np.isnan(out[name]), pa.float64())
    return True


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
