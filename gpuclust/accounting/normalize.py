"""Raw string columns (from either front end) -> the typed table of gpuclust.accounting.schema.

Vectorised over pyarrow arrays. A row with a value that cannot be parsed is removed from the table and
returned as a Problem naming its line and field: never dropped silently.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting import fields as f
from gpuclust.accounting.schema import PLAIN_STRING_COLUMNS, RAW_FIELDS, SCHEMA
from gpuclust.errors import Problem

MAX_PROBLEMS_LISTED = 1000  # a badly broken file still reports its count; the list is capped
PARALLEL_MIN_ROWS = 20_000  # below this, threads cost more than they save
WORKERS = max(1, min(4, os.cpu_count() or 1))


def run_parallel(tasks: Mapping[str, Callable[[], Any]], *, parallel: bool = True) -> dict[str, Any]:
    """Run independent, GIL-releasing (pyarrow / numpy) tasks in a small thread pool; results by name."""
    if not parallel or WORKERS == 1:
        return {name: task() for name, task in tasks.items()}
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {name: pool.submit(task) for name, task in tasks.items()}
        return {name: fut.result() for name, fut in futures.items()}


@dataclass
class ParseResult:
    table: pa.Table
    problems: list[Problem] = field(default_factory=list)
    rejected: int = 0  # rows reported as problems (may exceed len(problems) when capped)
    steps_dropped: int = 0
    source: str = ""
    exit_codes_known: bool = True
    notes: list[str] = field(default_factory=list)

    def extend(self, other: ParseResult) -> None:
        tables = [self.table, other.table]
        if not tables[0].schema.equals(tables[1].schema):  # e.g. dictionary-encoded text and plain JSON
            tables = [t.cast(SCHEMA) for t in tables]
        self.table = pa.concat_tables(tables)
        self.problems += other.problems[: max(0, MAX_PROBLEMS_LISTED - len(self.problems))]
        self.rejected += other.rejected
        self.steps_dropped += other.steps_dropped
        self.exit_codes_known = self.exit_codes_known and other.exit_codes_known
        self.notes += [n for n in other.notes if n not in self.notes]


def _bind(func: Callable[[pa.Array], Any], arg: pa.Array) -> Callable[[], Any]:
    return lambda: func(arg)


def empty_table() -> pa.Table:
    return SCHEMA.empty_table()


def normalize(
    raw: Mapping[str, pa.Array],
    lines: pa.Array,
    exit_known: pa.Array,
    source: str,
    *,
    extra_problems: list[Problem] | None = None,
) -> ParseResult:
    """`raw` maps each name of RAW_FIELDS (optional ones may be missing) to a string array."""
    n = len(lines)
    blank = pa.array([""] * n, pa.string()) if n else pa.array([], pa.string())
    rawc = {name: (pc.cast(raw[name], pa.string()) if name in raw else blank) for name in RAW_FIELDS}
    columns, bad, is_step, exit_all = parse_fields(rawc, exit_known)
    columns["line"] = pc.cast(lines, pa.int64())

    result = finish(
        n, columns, bad, is_step, lambda name, i: rawc[name][i].as_py(),
        lines.to_numpy(zero_copy_only=False), source, extra_problems,
    )
    result.table = result.table.cast(SCHEMA)
    result.exit_codes_known = exit_all
    return result


def parse_fields(
    rawc: Mapping[str, pa.Array], exit_known: pa.Array
) -> tuple[dict[str, pa.Array], dict[str, np.ndarray], np.ndarray, bool]:
    """Every field of `rawc` (one string array per RAW_FIELDS name) parsed: (the SCHEMA columns but `line`,
    the bad mask of each raw field, the step mask, whether every exit code is known)."""
    n = len(exit_known)
    columns: dict[str, pa.Array] = {}
    bad: dict[str, np.ndarray] = {}

    # The field parsers are independent and their pyarrow kernels release the GIL: run them side by side.
    exit_all = n == 0 or bool(pc.all(exit_known).as_py())
    tasks: dict[str, Callable[[], Any]] = {
        "JobID": lambda: f.v_job_id(rawc["JobID"]),
        "JobIDRaw": lambda: f.v_int(rawc["JobIDRaw"]),
        "State": lambda: f.by_unique(f.v_state, rawc["State"]),
        "ExitCode": lambda: (
            f.by_unique(lambda t: f.v_exit_code(t, pa.array(np.ones(len(t), dtype=bool))), rawc["ExitCode"])
            if exit_all
            else f.v_exit_code(rawc["ExitCode"], exit_known)
        ),
        **{name: _bind(f.v_time, rawc[name]) for name in ("Submit", "Eligible", "Start", "End")},
        "Elapsed": lambda: f.by_unique(f.v_elapsed, rawc["Elapsed"]),
        "NNodes": lambda: f.by_unique(f.v_int, rawc["NNodes"]),
        "AllocTRES": lambda: f.by_unique(f.v_alloc_tres, rawc["AllocTRES"]),
    }
    done = run_parallel(tasks, parallel=n >= PARALLEL_MIN_ROWS)

    ids, is_step, bad["JobID"] = done["JobID"]
    columns.update(ids)
    columns["job_id_raw"], bad["JobIDRaw"] = done["JobIDRaw"]
    for raw_name, col in PLAIN_STRING_COLUMNS.items():
        columns[col] = rawc[raw_name]
    columns["state"], bad["State"] = done["State"]
    columns["exit_code"], columns["exit_signal"], bad["ExitCode"] = done["ExitCode"]
    columns["exit_code_known"] = exit_known
    for raw_name, col in (("Submit", "submit"), ("Eligible", "eligible"), ("Start", "start"), ("End", "end")):
        columns[col], bad[raw_name] = done[raw_name]
    columns["elapsed_s"], bad["Elapsed"] = done["Elapsed"]
    columns["nnodes"], bad["NNodes"] = done["NNodes"]
    columns["gpus"], columns["gpu_type"], columns["mem_mb"], bad["AllocTRES"] = done["AllocTRES"]
    return columns, bad, is_step, exit_all


def finish(
    n: int,
    columns: Mapping[str, pa.Array | pa.ChunkedArray],
    bad: Mapping[str, np.ndarray | None],
    is_step: np.ndarray,
    raw_value: Callable[[str, int], Any],
    line_values: np.ndarray,
    source: str,
    extra_problems: list[Problem] | None = None,
    dropped: np.ndarray | None = None,
) -> ParseResult:
    """The rows of `columns` (every SCHEMA column, `n` rows) less the bad ones and the steps, with one
    Problem per bad row (its first bad field, in the order of `bad`) after `extra_problems`.

    `bad` maps each raw field to its mask of rows that could not be parsed (None: none); `raw_value(name, i)`
    is the text of field `name` in row i, for the message. `dropped` rows are no records at all (left out,
    never reported). String columns may be dictionary-encoded; every other column is cast to its SCHEMA
    type."""
    masks = {name: mask for name, mask in bad.items() if mask is not None and mask.any()}
    any_bad = np.zeros(n, dtype=bool)
    for mask in masks.values():
        any_bad |= mask
    # A step row is dropped on purpose (it is not an allocation record), but only when its id parsed.
    job_bad = masks.get("JobID")
    step = is_step & ~job_bad if job_bad is not None else is_step
    if dropped is not None:
        any_bad &= ~dropped
        step = step & ~dropped
    keep = ~any_bad & ~step
    if dropped is not None:
        keep &= ~dropped

    problems: list[Problem] = list(extra_problems or [])
    rejected = len(problems)
    bad_idx = np.flatnonzero(any_bad & ~step)
    rejected += len(bad_idx)
    for i in bad_idx[: max(0, MAX_PROBLEMS_LISTED - len(problems))]:
        for name, mask in masks.items():
            if mask[i]:
                value = raw_value(name, int(i))
                problems.append(Problem(source, int(line_values[i]), f"cannot parse {name} {value!r}", name))
                break

    specs = []
    arrays = []
    for spec in SCHEMA:
        col = columns[spec.name]
        if not pa.types.is_dictionary(col.type) and col.type != spec.type:
            col = col.cast(spec.type)
        specs.append(pa.field(spec.name, col.type))
        arrays.append(col)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(specs))
    if not keep.all():
        table = table.filter(pa.array(keep))
    return ParseResult(
        table=table,
        problems=problems,
        rejected=rejected,
        steps_dropped=int(step.sum()),
        source=source,
    )
