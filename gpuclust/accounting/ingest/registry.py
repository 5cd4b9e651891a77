"""The one declaration of every sacct field the accounting plane reads.

Each `SacctField` says, once: the sacct name; where it goes in the field list `report fetch` asks for; how
each ``sacct --json`` shape gives it (`json`, with per-shape overrides in `json_by_shape`); the output
column that keeps its text and the columns parsed from it, with their types and places in the table; the
scalar parser (the definition, used to judge a repaired record) and the vectorised parser (the hot path);
whether it repeats few values (read dictionary-encoded, parsed once per distinct value); and how the direct
text reader reads its bytes.

Everything else is derived from `REGISTRY` (or from a `Registry` given to the readers): the field lists of
gpuclust.accounting.ingest.schema (required, optional, free text, fetch order), the normalized `SCHEMA`, the
text readers (gpuclust.accounting.ingest.text), the JSON reader (gpuclust.accounting.ingest.jsonin) and the
normalisation (gpuclust.accounting.ingest.normalize). Adding a field is one `SacctField` in `FIELDS` (or
`REGISTRY.with_field(...)`); tests/unit/test_accounting_registry.py shows one flowing through every reader.

The parsers live in gpuclust.accounting.ingest.fields; the JSON value readers and the per-version adapters (the
parts of a shape that are more than a path: State, ExitCode, the job id) in gpuclust.slurm.sacct_json.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.ingest import fields as f
from gpuclust.accounting.ingest import usage
from gpuclust.accounting.ingest.fast import swar
from gpuclust.errors import SlurmOutputError
from gpuclust.slurm import sacct_json as sj

UTC_SECONDS = pa.timestamp("s", tz="UTC")


@dataclass(frozen=True)
class Column:
    """An output column: its name, type and (for the columns of the original table) its place; columns
    without a place go after those, in registry order."""

    name: str
    type: pa.DataType
    place: int | None = None


@dataclass
class Parsed:
    """What a vectorised parser gives for a string array: its columns (by output name), the mask of values
    that cannot be parsed, and (JobID only) the mask of step rows."""

    columns: dict[str, pa.Array]
    bad: np.ndarray
    is_step: np.ndarray | None = None

    def take(self, indices: pa.Array) -> Parsed:
        """The result per distinct value taken back to the rows (`indices`: each row's distinct value)."""
        idx = indices.to_numpy()
        return Parsed({k: pc.take(v, indices) for k, v in self.columns.items()}, self.bad[idx],
                      None if self.is_step is None else self.is_step[idx])


VParser = Callable[[pa.Array], Parsed]
JsonRead = Callable[[sj.SacctJsonAdapter, Mapping[str, Any]], str]
# How the direct text reader reads a field's bytes: dictionary-encoded ("dict"); fixed-width byte kernels
# ("fixed", see FixedRead); JobID's own SWAR kernel ("job_id"); a plain decimal cast ("int"); as it is
# ("text": mostly distinct values, e.g. usage TRES, parsed by their consumer).
DirectRead = Literal["dict", "fixed", "job_id", "int", "text"]


@dataclass(frozen=True)
class FixedRead:
    """A field most of whose values have one width: `kernel` (gpuclust.accounting.ingest.fast.swar.fixed_times or
    fixed_clock) parses the rows of exactly that width from the raw bytes; the others go to the vectorised
    parser. `like`: a field whose bytes this one often repeats (Eligible is mostly Submit): read side by side,
    a row equal to it takes its result instead of a parse."""

    kernel: Callable[..., tuple[np.ndarray, np.ndarray]]
    width: int
    like: str | None = None


@dataclass(frozen=True)
class SacctField:
    """One sacct field: its place in `report fetch`'s -o list, and how each reader reads and parses it."""

    name: str
    fetch: int  # place in the `-o` list of `report fetch` (see FETCH rules in gpuclust.accounting.ingest.schema)
    json: JsonRead  # the text sacct would print, from a job object of `sacct --json`
    copy: Column | None = None  # the column holding the text as printed
    parsed: tuple[Column, ...] = ()  # the columns parsed from it (by `vparse`)
    parse: Callable[[str], Any] | None = None  # scalar parser (the definition); raises SlurmOutputError
    vparse: VParser | None = None  # vectorised parser: must agree with `parse`
    # In a complete dump (what `report fetch` writes). A narrower dump lacks some: what it lacks is derived or
    # marked unknown (normalize.derive_missing), by either text reader alike.
    required: bool = True
    # No figure can do without it: a text dump that lacks it is refused (Registry.required).
    essential: bool = False
    # What a dump without this column cannot give (named in report.json input.unknown), or how it is derived.
    without: str = ""
    dictionary: bool = False  # few distinct values: read dictionary-encoded, parsed once per distinct value
    free_text: bool = False  # may hold the delimiter of a plain `|` dump (a record then gets repaired)
    # What a dump without this (optional) field reads as: "" (the text sacct prints for an empty value), or
    # None for a field whose absence must stay visible (Reason: no column means "not fetched", not "no reason").
    absent: str | None = ""
    unknowable: Column | None = None  # JSON may not know it (empty text): this bool column says where
    direct: DirectRead = "dict"
    fixed: FixedRead | None = None
    json_by_shape: Mapping[str, JsonRead] = field(default_factory=dict)  # data_parser plugin -> reader
    # Read on step rows only and rolled up to the job (gpuclust.accounting.ingest.usage): its text column is consumed
    # there, and the table gets usage.COLUMNS instead.
    step_usage: bool = False

    def json_reader(self, plugin: str) -> JsonRead:
        return self.json_by_shape.get(plugin, self.json)

    @property
    def columns(self) -> tuple[Column, ...]:
        return ((self.copy,) if self.copy else ()) + self.parsed + ((self.unknowable,) if self.unknowable else ())

    def plausible(self, text: str) -> bool:
        """Whether the scalar parser accepts `text` (True without one)."""
        if self.parse is None:
            return True
        try:
            self.parse(text)
        except (SlurmOutputError, ValueError):
            return False
        return True

    def parse_values(self, text: pa.Array, by_unique: bool = True) -> Parsed | None:
        """The vectorised parser over `text`; once per distinct value for a dictionary field (unless
        `by_unique` is off: the reference the tests compare with)."""
        if self.vparse is None:
            return None
        if not self.dictionary or not by_unique:
            return self.vparse(text)
        if isinstance(text, pa.ChunkedArray):
            text = text.combine_chunks()
        if text.null_count or len(text) == 0:
            return self.vparse(text)
        enc = pc.dictionary_encode(text)
        if len(enc.dictionary) * 2 > len(text):
            return self.vparse(text)
        return self.vparse(enc.dictionary).take(enc.indices)


LINE = Column("line", pa.int64(), 0)  # the reader's own column: where the record starts


@dataclass(frozen=True)
class Registry:
    """The fields in check order: a row's first bad field, in this order, is the one its problem names."""

    fields: tuple[SacctField, ...]

    def __post_init__(self) -> None:
        names = [fd.name for fd in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"sacct field declared twice: {names}")
        for fd in self.fields:
            if fd.absent is None and (fd.required or fd.vparse is not None or fd.copy is None):
                raise ValueError(f"{fd.name}: absent=None (null where a dump lacks it) is for optional text fields")
        cols = [LINE.name, *(c.name for fd in self.fields for c in fd.columns)]
        if len(set(cols)) != len(cols):
            raise ValueError(f"output column declared twice: {cols}")
        # The fetch order's rules (schema.FETCH_FIELDS): JobID first, a field without free text last.
        fetched = sorted(self.fields, key=lambda fd: fd.fetch)
        places = [fd.fetch for fd in fetched]
        if len(set(places)) != len(places):
            shared = sorted({fd.name for fd in fetched if places.count(fd.fetch) > 1})
            raise ValueError(f"fetch place shared by {', '.join(shared)}: give each field its own")
        if fetched and "JobID" in names and (fetched[0].name != "JobID" or fetched[-1].free_text):
            raise ValueError(f"fetch order {[fd.name for fd in fetched]}: JobID comes first and a field without "
                             "free text last (a name ending in a newline would look like the record's end)")

    def with_field(self, new: SacctField) -> Registry:
        """This registry and one more field (after the others, or instead of one of the same name)."""
        kept = tuple(fd for fd in self.fields if fd.name != new.name)
        if len(kept) == len(self.fields):
            return Registry((*kept, new))
        return Registry(tuple(new if fd.name == new.name else fd for fd in self.fields))

    def __getitem__(self, name: str) -> SacctField:
        return self.by_name[name]

    @cached_property
    def by_name(self) -> dict[str, SacctField]:
        return {fd.name: fd for fd in self.fields}

    @cached_property
    def required(self) -> tuple[str, ...]:
        """What no figure can do without (a job id, a state and times): a text dump lacking one is refused."""
        return tuple(fd.name for fd in self.fields if fd.essential)

    @cached_property
    def complete(self) -> tuple[str, ...]:
        """The fields of a complete dump (the fetch's)."""
        return tuple(fd.name for fd in self.fields if fd.required)

    def missing(self, header: list[str] | tuple[str, ...]) -> dict[str, str]:
        """The fields of a complete dump that `header` lacks, each with what that leaves unknown (or derived)."""
        return {fd.name: fd.without for fd in self.fields if fd.required and fd.name not in header}

    @cached_property
    def optional(self) -> tuple[str, ...]:
        return tuple(fd.name for fd in self.fields if not fd.required)

    @cached_property
    def raw(self) -> tuple[str, ...]:
        """Every field the readers take, in registry order (the plain dump's `-o` order: a free-text field
        sits between fields with a parser, so a `|` inside it can be placed; WCKey, Comment last)."""
        return tuple(fd.name for fd in self.fields)

    @cached_property
    def free_text(self) -> tuple[str, ...]:
        return tuple(fd.name for fd in self.fields if fd.free_text)

    @cached_property
    def fetch(self) -> tuple[str, ...]:
        return tuple(fd.name for fd in sorted(self.fields, key=lambda fd: fd.fetch))

    @cached_property
    def checked(self) -> tuple[str, ...]:
        """The fields with a parser, in check order."""
        return tuple(fd.name for fd in self.fields if fd.vparse is not None)

    @cached_property
    def dictionary(self) -> frozenset[str]:
        return frozenset(fd.name for fd in self.fields if fd.direct == "dict")

    @cached_property
    def copies(self) -> dict[str, str]:
        """Field -> the column holding its text."""
        return {fd.name: fd.copy.name for fd in self.fields if fd.copy}

    @cached_property
    def step_usage(self) -> tuple[str, ...]:
        return tuple(fd.name for fd in self.fields if fd.step_usage)

    @cached_property
    def schema(self) -> pa.Schema:
        # The usage columns go before any unplaced field column; those follow in registry order (a field added
        # at the end of FIELDS stays last; one added in the middle moves the columns after it).
        rollup = [Column(name, kind) for name, kind in usage.COLUMNS] if self.step_usage else []
        cols = [LINE, *rollup, *(c for fd in self.fields if not fd.step_usage for c in fd.columns)]
        placed = sorted((c for c in cols if c.place is not None), key=lambda c: c.place or 0)
        return pa.schema([(c.name, c.type) for c in placed + [c for c in cols if c.place is None]])

    def plausible(self, record: Mapping[str, str]) -> bool:
        """Whether every field of `record` that has a parser parses (a repaired `|` record is judged so)."""
        return all(fd.plausible(record[fd.name]) for fd in self.fields if fd.name in record)

    def json_record(self, adapter: sj.SacctJsonAdapter, plugin: str, job: Mapping[str, Any]) -> dict[str, str]:
        """The raw fields of one `sacct --json` job object (BadField for one that cannot be read).

        The objects holding several fields are checked first, then JobID and ExitCode, then the rest in
        registry order: where several fields are bad, the first found is the one reported."""
        for name in JSON_CONTAINERS:
            sj.obj(job.get(name), name)
        order = [*JSON_FIRST, *(fd.name for fd in self.fields if fd.name not in JSON_FIRST)]
        return {name: self[name].json_reader(plugin)(adapter, job) for name in order if name in self.by_name}


# ---- JSON readers --------------------------------------------------------------------------------------

JSON_CONTAINERS = ("time", "tres", "association")
JSON_FIRST = ("JobID", "JobIDRaw", "ExitCode")


def at(path: str, read: Callable[[Any, str], str] = sj.text, *, fallback: str | None = None) -> JsonRead:
    """The value at a dotted `path` of the job object, read by `read`; `fallback`: a path tried when the
    first is empty (``user`` or ``association.user``)."""
    keys = path.split(".")

    def value(job: Mapping[str, Any], keys: list[str]) -> Any:
        node: Any = job
        for depth, key in enumerate(keys[:-1]):
            node = sj.obj(node.get(key), ".".join(keys[: depth + 1]))
        return node.get(keys[-1])

    def get(adapter: sj.SacctJsonAdapter, job: Mapping[str, Any]) -> str:
        got = value(job, keys)
        if not got and fallback is not None:
            got = value(job, fallback.split("."))
        return read(got, path)

    return get


def nested_text(path: str, inner: str) -> JsonRead:
    """A string that may also come as an object holding it at `inner` (``wckey``: ``{wckey: ...}``)."""

    def get(adapter: sj.SacctJsonAdapter, job: Mapping[str, Any]) -> str:
        value = job.get(path)
        if isinstance(value, Mapping):
            value = sj.obj(value, path).get(inner)
        return sj.text(value, path)

    return get


def _count_text(value: Any, path: str) -> str:
    return str(sj.count(value, path) or 0)


# ---- vectorised parsers in the registry's form ------------------------------------------------------------

def _one(column: str, func: Callable[[pa.Array], tuple[pa.Array, np.ndarray]]) -> VParser:
    def parse(text: pa.Array) -> Parsed:
        value, bad = func(text)
        return Parsed({column: value}, bad)

    return parse


def _job_id(text: pa.Array) -> Parsed:
    cols, is_step, bad = f.v_job_id(text)
    return Parsed(cols, bad, is_step)


def _exit_code(text: pa.Array) -> Parsed:
    code, sig, bad = f.v_exit_code(text, pa.array(np.ones(len(text), dtype=bool)))
    return Parsed({"exit_code": code, "exit_signal": sig}, bad)


def _alloc_tres(text: pa.Array) -> Parsed:
    gpus, gtype, mem, bad = f.v_alloc_tres(text)
    return Parsed({"gpus": gpus, "gpu_type": gtype, "mem_mb": mem}, bad)


def parse_count(text: str) -> int:
    """A count such as NNodes or JobIDRaw (the check a repaired record gets: decimal digits)."""
    if not text.isdigit():
        raise SlurmOutputError(f"bad count {text!r}")
    return int(text) if text.isascii() else 0


def _string(name: str, column: str, fetch: int, place: int, read: JsonRead, *, required: bool = True,
            free_text: bool = False, without: str = "") -> SacctField:
    return SacctField(name, fetch, read, copy=Column(column, pa.string(), place), required=required,
                      free_text=free_text, dictionary=True, without=without)


def _time(name: str, column: str, fetch: int, place: int, path: str, like: str | None = None,
          by_shape: Mapping[str, JsonRead] | None = None, *, essential: bool = False,
          without: str = "") -> SacctField:
    return SacctField(
        name, fetch, at(path, sj.epoch), parsed=(Column(column, UTC_SECONDS, place),),
        parse=f.parse_time_epoch, vparse=_one(column, lambda t: f.v_time(t)), direct="fixed",
        fixed=FixedRead(swar.fixed_times, 19, like), json_by_shape=dict(by_shape or {}), essential=essential,
        without=without,
    )


# The fetch order puts JobID first, so a newline inside a name can never make a continuation line look like
# the start of a record, and a fixed-format field last, so a free-text value that ends in a newline cannot
# be mistaken for a blank line after the record.
FIELDS: tuple[SacctField, ...] = (
    SacctField(
        "JobID", 0, lambda a, job: a.job_id(job)[0], copy=Column("job_id", pa.string(), 1),
        parsed=(Column("job_base", pa.int64(), 3), Column("array_task", pa.int64(), 4),
                Column("array_pending", pa.string(), 5), Column("het_offset", pa.int64(), 6)),
        parse=f.parse_job_id, vparse=_job_id, direct="job_id", essential=True,
    ),
    SacctField(
        "JobIDRaw", 1, lambda a, job: a.job_id(job)[1], parsed=(Column("job_id_raw", pa.int64(), 2),),
        parse=parse_count, vparse=_one("job_id_raw", f.v_int), direct="int",
        without="derived from JobID (each JobID its own job; a requeued job's executions share it)",
    ),
    _string("JobName", "job_name", 2, 7, at("name"), free_text=True,
            without="resubmissions (a failed job submitted again under its name): each JobID is its own run"),
    _string("User", "user", 5, 8, at("user", fallback="association.user"), without="figures by user"),
    _string("Account", "account", 6, 9, at("account", fallback="association.account"),
            without="figures by account (and account labels)"),
    _string("Partition", "partition", 7, 10, at("partition"),
            without="figures by partition, partition prices and GPU types"),
    _string("QOS", "qos", 8, 11, at("qos"), without="queue wait and hold by QOS"),
    SacctField(
        "State", 9, lambda a, job: a.state(job), copy=Column("state_raw", pa.string(), 16),
        parsed=(Column("state", pa.string(), 15),), parse=f.parse_state, vparse=_one("state", f.v_state),
        dictionary=True, essential=True,
    ),
    SacctField(
        "ExitCode", 10, lambda a, job: a.exit_code(job)[0],
        parsed=(Column("exit_code", pa.int64(), 18), Column("exit_signal", pa.int64(), 19)),
        unknowable=Column("exit_code_known", pa.bool_(), 20),
        parse=f.parse_exit_code, vparse=_exit_code, dictionary=True,
        without="exit codes (COMPLETED counts as success)",
    ),
    # The pending reason sacct kept (the last one slurmctld sent to slurmdbd; the economics' wait split reads
    # it). `state.reason` in every JSON shape recorded on the lab (22.05 dbv0.0.38, 24.11 v0.0.42, 26.05
    # v0.0.45) and in the parsers of every other (dbv0.0.37, v0.0.39-v0.0.44). Slurm prints an enum name (None, Priority, AssocGrpGRES, ...), but it is read as free text
    # all the same, placed so that a `|` in it can go one way only: in the plain `-o` order (registry order)
    # between ExitCode and Submit, both parsed; in the fetch order after AllocTRES (parsed) and before
    # NodeList and NNodes (parsed), never last (a newline at its end would look like a blank line).
    # Absent from older dumps and stores: null there (unknown), never "".
    SacctField("Reason", 18, at("state.reason"), copy=Column("reason", pa.string(), 17), required=False,
               free_text=True, dictionary=True, absent=None),
    _time("Submit", "submit", 11, 21, "time.submission", without="hold; queue wait where Eligible is missing too"),
    _time("Eligible", "eligible", 12, 22, "time.eligible", like="Submit",
          without="hold; queue wait counts from Submit"),
    # 21.08's openapi/dbv0.0.37 prints the eligible time at time.start (parse.c): Start comes from
    # End - Elapsed - Suspended there (sacct_json.SacctJsonAdapter.start).
    _time("Start", "start", 13, 23, "time.start", by_shape={"openapi/dbv0.0.37": lambda a, job: a.start(job)},
          essential=True),
    _time("End", "end", 14, 24, "time.end", essential=True),
    SacctField(
        "Elapsed", 15, at("time.elapsed", sj.elapsed), parsed=(Column("elapsed_s", pa.int64(), 25),),
        parse=f.parse_elapsed, vparse=_one("elapsed_s", f.v_elapsed), dictionary=True, direct="fixed",
        fixed=FixedRead(swar.fixed_clock, 8), without="derived from End - Start",
    ),
    # The submit line (issue 47: `policy replay`): sbatch/salloc/srun's argv joined by spaces, as sacct has printed
    # it since Slurm 21.08 (sacct.c's SubmitLine; every release the fetch supports); the JSON of data_parser
    # v0.0.39 on has `submit_line`, 22.05's dbv0.0.38 none ("" there). Read dictionary-encoded, as the other free
    # text is (the direct reader's "text" read does not place a repaired record's fields as the reference does).
    # Free text (a `|` of a --wrap or a job name), placed between two fields with a parser in both orders (in the plain
    # order after Elapsed, before AllocTRES, so a `|` in it cannot be taken for one of Comment's, nor the reverse).
    # Optional and null where a dump or store day lacks it (unknown, not "no line"); fetched before AllocTRES.
    SacctField("SubmitLine", 16, at("submit_line"), copy=Column("submit_line", pa.string()), required=False,
               free_text=True, absent=None, dictionary=True),
    SacctField(
        "AllocTRES", 17, at("tres.allocated", sj.tres_text), copy=Column("alloc_tres", pa.string(), 27),
        parsed=(Column("gpus", pa.int64(), 28), Column("gpu_type", pa.string(), 29),
                Column("mem_mb", pa.float64(), 30)),
        parse=f.parse_alloc_tres, vparse=_alloc_tres, dictionary=True,
        without="GPUs, so GPU-hours, cost and every figure made of them",
    ),
    # Usage TRES, on step rows (the allocation row's are empty): rolled up to the job (accounting.usage).
    # Not in the JSON job object: the JSON reader makes step rows of jobs[].steps (sacct_json.step_records).
    *(SacctField(name, 21 + i, lambda a, job: "", copy=Column(column, pa.string()), required=False,
                 step_usage=True, direct="text")
      for i, (name, column) in enumerate(zip(usage.USAGE_FIELDS, usage.TEXT_COLUMNS, strict=True))),
    SacctField(
        "NNodes", 26, at("allocation_nodes", _count_text), parsed=(Column("nnodes", pa.int64(), 26),),
        parse=parse_count, vparse=_one("nnodes", f.v_int), dictionary=True, without="node counts",
    ),
    _string("NodeList", "nodelist", 19, 14, at("nodes"), without="node lists (top failures)"),
    # The time limit (issue 43: the time-limit over-ask finding). Fetched last (a fixed format). Optional: a dump
    # or store day without it reads null, as do UNLIMITED and Partition_Limit (no limit known, never 0).
    SacctField(
        "Timelimit", 27, at("time.limit", sj.time_limit), parsed=(Column("timelimit_s", pa.int64()),),
        parse=f.parse_timelimit, vparse=_one("timelimit_s", f.v_timelimit), required=False, dictionary=True,
    ),
    # The request's TRES (cpu, mem, node, gres/gpu...: what `policy replay` reads where there is no submit line).
    # Optional, null where a dump or store day lacks it; checked as AllocTRES is when a record is repaired.
    SacctField("ReqTRES", 20, at("tres.requested", sj.tres_text), copy=Column("req_tres", pa.string()),
               parse=f.parse_alloc_tres, required=False, dictionary=True, absent=None),
    _string("WCKey", "wckey", 4, 12, nested_text("wckey", "wckey"), required=False),
    _string("Comment", "comment", 3, 13, nested_text("comment", "job"), required=False, free_text=True),
)

REGISTRY = Registry(FIELDS)
