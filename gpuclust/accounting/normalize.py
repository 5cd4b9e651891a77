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
        self.table = pa.concat_tables([self.table, other.table])
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
    columns: dict[str, pa.Array] = {}
    blank = pa.array([""] * n, pa.string()) if n else pa.array([], pa.string())
    rawc = {name: (pc.cast(raw[name], pa.string()) if name in raw else blank) for name in RAW_FIELDS}
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
    columns["line"] = pc.cast(lines, pa.int64())

    any_bad = np.zeros(n, dtype=bool)
    for mask in bad.values():
        any_bad |= mask
    # A step row is dropped on purpose (it is not an allocation record), but only when its id parsed.
    step = is_step & ~bad["JobID"]
    keep = ~any_bad & ~step

    problems: list[Problem] = list(extra_problems or [])
    rejected = len(problems)
    bad_idx = np.flatnonzero(any_bad & ~step)
    rejected += len(bad_idx)
    line_values = lines.to_numpy(zero_copy_only=False)
    for i in bad_idx[: max(0, MAX_PROBLEMS_LISTED - len(problems))]:
        for name, mask in bad.items():
            if mask[i]:
                value = rawc[name][int(i)].as_py()
                problems.append(Problem(source, int(line_values[i]), f"cannot parse {name} {value!r}", name))
                break

    table = pa.table({name: columns[name] for name in SCHEMA.names}).cast(SCHEMA)
    if not keep.all():
        table = table.filter(pa.array(keep))
    exit_all_known = exit_all
    return ParseResult(
        table=table,
        problems=problems,
        rejected=rejected,
        steps_dropped=int(step.sum()),
        source=source,
        exit_codes_known=exit_all_known,
    )
