"""Raw string columns (from either front end) -> the typed table of gpuclust.accounting.ingest.schema.

Vectorised over pyarrow arrays. A row with a value that cannot be parsed is removed from the table and
returned as a Problem naming its line and field: never dropped silently.
"""

from __future__ import annotations

import collections
import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import usage
from gpuclust.accounting.ingest.fast import swar
from gpuclust.accounting.ingest.fields import parse_time_epoch
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.registry import REGISTRY, Parsed, Registry
from gpuclust.errors import InputError, Problem

MAX_PROBLEMS_LISTED = 1000  # a badly broken file still reports its count; the list is capped
PARALLEL_MIN_ROWS = 20_000  # below this, threads cost more than they save
WORKERS = max(1, min(4, os.cpu_count() or 1))


@dataclass(frozen=True)
class ReaderOptions:
    """How the readers run. The defaults are what `gpuclust report` uses; tests pass others to reach every
    path (small pieces and blocks, one worker, the reference alone)."""

    registry: Registry = REGISTRY  # the sacct fields read
    fast: bool = True  # the direct text reader, where it can vouch for the reference's result
    strict: bool = False  # an unexpected error inside the direct reader is raised, not a quiet fallback
    by_unique: bool = True  # repetitive fields parsed once per distinct value
    workers: int = WORKERS  # threads for the readers and the field parsers
    parallel_min_rows: int = PARALLEL_MIN_ROWS  # below this, the field parsers run on one thread
    pieces: int = 0  # pieces the direct reader reads the body in; 0: two per worker
    min_piece_bytes: int = 1 << 22
    read_block: int = 1 << 21  # small blocks: pyarrow.csv then converts each while it is in cache
    group_rows: int = 1 << 16  # the fixed-width parsers run on pieces of at least this many rows
    swar_block_rows: int = swar.SWAR_BLOCK_ROWS  # rows per block of the byte kernels
    max_blank_candidates: int = 100_000
    scan_block: int = 1 << 22  # bytes per block of the line scans
    parallel_replace_bytes: int = 16 << 20  # from this size the delimiter swap runs in pieces side by side
    # The Slurm release that wrote the records (`report fetch`: the local sacct's; `report build
    # --slurm-version`): picks the gres/gpuutil rule (gpuclust.accounting.ingest.usage.rule_for_version).
    slurm_version: str | None = None


DEFAULT_OPTIONS = ReaderOptions()


def run_parallel(tasks: Mapping[str, Callable[[], Any]], *, parallel: bool = True,
                 workers: int = WORKERS) -> dict[str, Any]:
    """Run independent, GIL-releasing (pyarrow / numpy) tasks in a small thread pool; results by name."""
    if not parallel or workers == 1:
        return {name: task() for name, task in tasks.items()}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(task) for name, task in tasks.items()}
        return {name: fut.result() for name, fut in futures.items()}


@dataclass
class ParseResult:
    """What a reader gives: the normalized table, the problems and rows refused, and notes on the input."""

    table: pa.Table
    problems: list[Problem] = field(default_factory=list)
    rejected: int = 0  # rows reported as problems (may exceed len(problems) when capped)
    steps_dropped: int = 0
    source: str = ""
    exit_codes_known: bool = True
    notes: list[str] = field(default_factory=list)
    reader: str = ""  # which reader made it: "direct" or "reference" (text), "json"; "a+b" after extend
    # Usage TRES values that could not be used (gpuclust.accounting.ingest.usage): counted, the first ones listed.
    usage_warnings: int = 0
    usage_problems: list[str] = field(default_factory=list)
    # Fields of a complete dump this input lacks -> what that leaves unknown or how it was derived
    # (Registry.missing; report.json input.unknown names them).
    missing_columns: dict[str, str] = field(default_factory=dict)

    def extend(self, other: ParseResult) -> None:
        tables = [self.table, other.table]
        if not tables[0].schema.equals(tables[1].schema):  # e.g. dictionary-encoded text and plain JSON
            tables = [t.cast(plain_schema(t.schema)) for t in tables]
        self.table = pa.concat_tables(tables)
        self.problems += other.problems[: max(0, MAX_PROBLEMS_LISTED - len(self.problems))]
        self.rejected += other.rejected
        self.steps_dropped += other.steps_dropped
        self.exit_codes_known = self.exit_codes_known and other.exit_codes_known
        self.notes += [n for n in other.notes if n not in self.notes]
        self.usage_warnings += other.usage_warnings
        self.usage_problems += other.usage_problems[: max(0, usage.MAX_WARNINGS_LISTED - len(self.usage_problems))]
        self.missing_columns = {**self.missing_columns, **other.missing_columns}
        readers = [r for r in dict.fromkeys([*self.reader.split("+"), *other.reader.split("+")]) if r]
        self.reader = "+".join(readers)


def input_period(result: ParseResult, source: str = "<input>") -> Period:
    """Default period for --input without dates: from the earliest Submit to just after the latest End. A dump
    with no dated row has no window to infer: refused, naming the options (never a made-up window).

    (Here, with the parsed rows it reads, so that the read stage hands its window on with them.)"""
    t = result.table
    starts = [v for v in (pc.min(t.column("submit")).as_py(), pc.min(t.column("start")).as_py()) if v]
    ends = [v for v in (pc.max(t.column("end")).as_py(), pc.max(t.column("start")).as_py()) if v]
    if not starts or not ends:
        raise InputError(Problem(source, None, f"no row with a Submit, Start or End ({t.num_rows} row(s) read): "
                                               "no report window can be inferred; give --since and --until (an "
                                               "empty period is an empty report)"))
    return Period(min(starts), max(ends) + timedelta(seconds=1))


_CANNOT_PARSE = re.compile(r"cannot parse ([A-Za-z][A-Za-z0-9]*) ")
_FIELD_COUNT = re.compile(r"record has [0-9]+ fields, header has|line continues no record")


def rejection_advice(problems: Iterable[Problem | str], registry: Registry = REGISTRY) -> str:
    """The likely fix for rejected rows, told from their problems (or those problems' text, as report.json
    holds them): the cause most of them share."""
    times = {fd.name for fd in registry.fields if fd.parse is parse_time_epoch}
    causes: collections.Counter[str] = collections.Counter()
    for problem in problems:
        text = problem.message if isinstance(problem, Problem) else problem
        if (m := _CANNOT_PARSE.search(text)) is not None:
            causes["time" if m.group(1) in times else "value"] += 1
        elif _FIELD_COUNT.search(text):
            causes["fields"] += 1
    cause = causes.most_common(1)[0][0] if causes else ""
    if cause == "time":
        return ("the times are not sacct's standard form (YYYY-MM-DDTHH:MM:SS, e.g. 2026-12-02T10:58:03): "
                "sacct wrote them in a site's SLURM_TIME_FORMAT. Write the dump again with "
                "SLURM_TIME_FORMAT=standard in sacct's environment (`SLURM_TIME_FORMAT=standard sacct ...`; "
                "`report fetch` sets it itself)")
    if cause == "fields":
        return ("the rows do not split into the header's fields: check --delimiter (the dump's own, one that "
                "no job name or comment holds; gpuclust's fetch delimiter '\\x1f|\\x1e' is safe)")
    return "fix the values named above, or write the dump again with sacct (`report fetch` writes one that reads)"


def refuse_unread(result: ParseResult, source: str = "<input>") -> None:
    """A dump whose every row was rejected is refused, naming the first cause and its fix: never an empty
    report (the rows were there, and none was read)."""
    if result.table.num_rows or not result.rejected:
        return
    first = result.problems[0] if result.problems else None
    said = "" if first is None else f" (the first, line {first.line}: {first.message})"
    raise InputError(Problem(source, None, f"no row could be read: all {result.rejected} row(s) were rejected"
                                           f"{said}. Likely fix: {rejection_advice(result.problems)}"))


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every dictionary-encoded column in its plain type."""
    return pa.schema([pa.field(fd.name, fd.type.value_type if pa.types.is_dictionary(fd.type) else fd.type)
                      for fd in schema])


def empty_table() -> pa.Table:
    return REGISTRY.schema.empty_table()


def absent_column(value: str | None, n: int) -> pa.Array:
    """The column of a field the input lacks: `value` (SacctField.absent: "" or null) in each of `n` rows."""
    return pa.repeat(pa.scalar(value, pa.string()), n)


def normalize(
    raw: Mapping[str, pa.Array],
    lines: pa.Array,
    exit_known: pa.Array,
    source: str,
    *,
    extra_problems: list[Problem] | None = None,
    options: ReaderOptions = DEFAULT_OPTIONS,
) -> ParseResult:
    """`raw` maps each field of the registry (optional ones may be missing) to a string array."""
    registry = options.registry
    n = len(lines)
    rawc = {fd.name: (pc.cast(raw[fd.name], pa.string()) if fd.name in raw else absent_column(fd.absent, n))
            for fd in registry.fields}
    # A narrow dump (a --format of its own): what a complete dump has and this one lacks is derived where
    # it can be, and otherwise left unknown, never guessed (Registry.missing says which, and why).
    missing = registry.missing(list(raw))
    if "ExitCode" in missing:
        exit_known = pa.array(np.zeros(n, dtype=bool))
    columns, bad, is_step, exit_all = parse_fields(rawc, exit_known, options)
    columns["line"] = pc.cast(lines, pa.int64())
    if missing:
        derive_missing(columns, bad, missing, n)

    result = finish(
        n, columns, bad, is_step, lambda name, i: rawc[name][i].as_py(),
        lines.to_numpy(zero_copy_only=False), source, extra_problems, schema=registry.schema,
        usage_rule=usage.rule_for_version(options.slurm_version),
    )
    result.table = result.table.cast(registry.schema)
    result.exit_codes_known = exit_all
    result.missing_columns = missing
    return result


# JobIDRaw derived from JobID: a plain id is its own raw id; an array task or het component gets a negative
# id of its own (no real JobIDRaw is negative, and no two tasks of one array may share one: latest_state
# keeps one row per (JobIDRaw, Start)). Slurm job ids are below 2**26, array indexes below 2**23.
_TASK_BITS = 24


def derive_missing(columns: dict[str, pa.Array], bad: dict[str, np.ndarray], missing: Mapping[str, str],
                   n: int) -> None:
    """Fill the parsed columns of the fields a narrow dump lacks (`missing`, Registry.missing): JobIDRaw from
    JobID, Elapsed from End - Start, JobName as JobID; the others stay as their absent text parses, or null
    (NNodes)."""
    none = np.zeros(n, dtype=bool)
    if "JobName" in missing:  # (one name per job: no resubmission is matched across JobIDs)
        columns["job_name"] = columns["job_id"]
    if "JobIDRaw" in missing:
        base = np.asarray(pc.fill_null(columns["job_base"], 0).to_numpy(zero_copy_only=False), dtype=np.int64)
        task = np.asarray(pc.fill_null(columns["array_task"], -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        het = np.asarray(pc.fill_null(columns["het_offset"], -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        own = np.where(task >= 0, task, np.where(het >= 0, het + (1 << (_TASK_BITS - 1)), -1))
        raw_id = np.where(own >= 0, -((base << _TASK_BITS) + own + 1), base)
        columns["job_id_raw"] = pa.array(raw_id, pa.int64())
        bad["JobIDRaw"] = none
    if "Elapsed" in missing:
        start = pc.cast(columns["start"], pa.int64())
        end = pc.cast(columns["end"], pa.int64())
        elapsed = pc.fill_null(pc.max_element_wise(pc.subtract(end, start), 0), 0)
        columns["elapsed_s"] = elapsed
        bad["Elapsed"] = none
    if "NNodes" in missing:
        columns["nnodes"] = pa.nulls(n, pa.int64())
        bad["NNodes"] = none


def parse_fields(
    rawc: Mapping[str, pa.Array], exit_known: pa.Array, options: ReaderOptions = DEFAULT_OPTIONS,
) -> tuple[dict[str, pa.Array], dict[str, np.ndarray], np.ndarray, bool]:
    """Every field of `rawc` (one string array per registry field) parsed: (the schema's columns but `line`,
    the bad mask of each checked field in check order, the step mask, whether every exit code is known)."""
    n = len(exit_known)
    registry = options.registry
    columns: dict[str, pa.Array] = {}
    bad: dict[str, np.ndarray] = {}
    exit_all = n == 0 or bool(pc.all(exit_known).as_py())
    known_mask = None if exit_all else np.asarray(pc.fill_null(exit_known, False).to_numpy(zero_copy_only=False),
                                                  dtype=bool)
    # The field parsers are independent and their pyarrow kernels release the GIL: run them side by side.
    tasks: dict[str, Callable[[], Any]] = {
        fd.name: functools.partial(fd.parse_values, rawc[fd.name], options.by_unique)
        for fd in registry.fields if fd.vparse
    }
    done = run_parallel(tasks, parallel=n >= options.parallel_min_rows, workers=options.workers)
    is_step = np.zeros(n, dtype=bool)
    for fd in registry.fields:
        if fd.copy:
            columns[fd.copy.name] = rawc[fd.name]
        if fd.unknowable:
            columns[fd.unknowable.name] = exit_known
        parsed: Parsed | None = done.get(fd.name)
        if parsed is None:
            continue
        cols, field_bad = parsed.columns, parsed.bad
        if fd.unknowable and known_mask is not None:
            # Unknown values (sacct --json 22.05's exit codes) are null, not errors.
            cols = {k: pc.if_else(exit_known, v, pa.scalar(None, v.type)) for k, v in cols.items()}
            field_bad = field_bad & known_mask
        columns.update(cols)
        bad[fd.name] = field_bad
        if parsed.is_step is not None:
            is_step = parsed.is_step
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
    *,
    schema: pa.Schema = REGISTRY.schema,
    usage_rule: str | None = None,
    usage_rows: np.ndarray | None = None,
) -> ParseResult:
    """The rows of `columns` (every SCHEMA column, `n` rows) less the bad ones and the steps, with one
    Problem per bad row (its first bad field, in the order of `bad`) after `extra_problems`. The usage text
    columns may come in another row order: `usage_rows` gives each row's row in them (None: the same).

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

    warnings = usage.UsageWarnings()
    late: dict[str, pa.Array | None] = {}  # columns made for the kept rows only (None: all null), added below
    if usage.COLUMNS[0][0] in schema.names:
        columns = dict(columns)
        usage_text = {name: columns.pop(col) for name, col in zip(usage.USAGE_FIELDS, usage.TEXT_COLUMNS,
                                                                   strict=True) if col in columns}
        # Steps give their usage to their job row before they are dropped (rows that are no record take no part).
        rows_step = step if dropped is None else step | dropped
        attached = usage.add_usage_columns(columns, usage_text, rows_step, line_values, source, rule=usage_rule,
                                           warnings=warnings, text_rows=usage_rows, keep=keep)
        late = {name: columns.pop(name) if attached else None for name, _ in usage.COLUMNS}

    specs = []
    arrays = []
    for spec in schema:
        if spec.name in late:
            continue
        col = columns[spec.name]
        if not pa.types.is_dictionary(col.type) and col.type != spec.type:
            col = col.cast(spec.type)
        specs.append(pa.field(spec.name, col.type))
        arrays.append(col)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(specs))
    if not keep.all():
        table = table.filter(pa.array(keep))
    if late:
        added = {name: pa.nulls(table.num_rows, schema.field(name).type) if col is None else col
                 for name, col in late.items()}
        table = pa.Table.from_arrays(
            [table.column(spec.name) if spec.name not in late else added[spec.name] for spec in schema],
            schema=pa.schema([table.schema.field(spec.name) if spec.name not in late else spec for spec in schema]))
    return ParseResult(
        table=table,
        problems=problems,
        rejected=rejected,
        steps_dropped=int(step.sum()),
        source=source,
        usage_warnings=warnings.count,
        usage_problems=warnings.listed,
    )
