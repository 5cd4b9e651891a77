"""Acceptance result records: the JSON-lines schema, the writer, and typed loaders.

One file per Slurm job, `<results_dir>/<kind>-<job_id>.jsonl` (results_dir from SiteConfig.results_dir; it must
be a filesystem every node sees). Every line is one JSON object with these common keys:

    schema   "gpuclust.accept.result/1" (read also: "gpuclust.accept/1", the same layout under its first
             name, and no tag at all, as the oldest lines have)
    type     "job" | "rank" | "sweep" | "pair" | "storage"
    job_id   Slurm job id (string; "1234", or "1234_5" for an array task)
    kind     "allreduce" | "pairwise" | "storage"

and, per type (times are ISO 8601 with an offset, always UTC when written by gpuclust; sizes in bytes;
bandwidths as nccl-tests prints them, GB/s = 1e9 bytes/s; storage in MB/s = 1e6 bytes/s):

- "job" (exactly one per file): cluster, partition, nodes [node names], started, finished, passed (bool: the
  job ran to completion and every correctness check held; performance gates are applied later by
  `gpuclust accept report`), failed_nodes [nodes the program itself found at fault; empty when it could not
  tell], reasons [why not passed], world_size, backend ("gloo" | "nccl"), params {the validated parameters},
  declared_gres {node: GRES string the job was allocated there, from `scontrol show job -d`, e.g.
  "gpu:h100:4(IDX:0-3)"}, node_gres {node: the node's configured Gres from `scontrol show node`}.
- "rank" (one per rank, pairwise: one per rank of each pair step): see RankRecord.
- "sweep" (one per message size): see SweepRecord.
- "pair" (one per node pair): see PairRecord.
- "storage" (one per measurement): see StorageRecord.

The record dataclasses below are the contract: gpuclust.contract writes them and reads them back, checking
each value against the field's type hint (numbers >= 0, finite; choices, patterns and lengths from field
metadata). The JSON Schema is schemas/accept-result.schema.json. Unknown keys are kept in `extra` (forward
compatible); missing required keys, wrong types, a bad schema tag, bad JSON and files with no or several
"job" lines are reported as Problem(file, line, ...), never dropped.

The API of this module is stable: the audit plane reads it (per-node acceptance freshness, version drift).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from gpuclust import contract
from gpuclust.accept.resultfiles import FILE_SUFFIX, result_files
from gpuclust.atomicfile import write_atomic
from gpuclust.contract import ContractError
from gpuclust.errors import InputError, Problem

SCHEMA = "gpuclust.accept.result/1"
READABLE_SCHEMAS = (SCHEMA, "gpuclust.accept/1")  # and lines without a "schema" key (older history)
KINDS = ("allreduce", "pairwise", "storage")
RECORD_TYPES = ("job", "rank", "sweep", "pair", "storage")
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
_FILE_NAME = re.compile(r"(allreduce|pairwise|storage)-([0-9]+(?:_[0-9]+)?)\.jsonl")

PAIR_STATUSES = ("ok", "timeout", "failed")
_STATUS_MESSAGE = "'status' must be ok, timeout or failed, got {value}"

# Storage metrics a "storage" record may carry.
STORAGE_METRICS = (
    "staging",  # shared path -> node-local scratch copy, per node
    "checkpoint_write",  # torch.save + fsync on write_node
    "checkpoint_read",  # torch.load of that file on read_node (a different node); seconds = restore time
    "dcp_save",  # sharded torch.distributed.checkpoint save, all ranks (node = "*")
    "dcp_load",  # sharded load with ranks moved to other nodes
    "aggregate_write",  # every rank writes its share between mpi4py barriers (node = "*")
    "aggregate_read",
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


format_time = contract.format_time


def result_file_name(kind: str, job_id: str) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown acceptance kind {kind!r}")
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"bad Slurm job id {job_id!r}")
    return f"{kind}-{job_id}{FILE_SUFFIX}"


# ---- records ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Versions:
    """Software/firmware versions one rank saw; None where not applicable (driver/CUDA/NCCL on CPU)."""

    driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    torch: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        return {"driver": self.driver, "cuda": self.cuda, "nccl": self.nccl, "torch": self.torch}


@dataclass(frozen=True)
class RankRecord:
    """What one rank saw of its node. `gpus_seen` is what the framework reports (torch.cuda.device_count());
    `gpus_bound` is the number of devices Slurm bound to the step (entries of CUDA_VISIBLE_DEVICES; None when
    the variable is unset, which means nothing was bound, not zero GPUs); `devices_found` is the number of
    GPU device files on the node matching `device_glob` (default /dev/nvidia[0-9]*), i.e. what the hardware
    offers whatever Slurm declares (None when not probed)."""

    NUMBERS_MIN: ClassVar[int] = 0

    job_id: str
    kind: str
    rank: int
    local_rank: int
    world_size: int
    hostname: str
    node: str  # SLURMD_NODENAME, the Slurm node name
    step_id: str | None = None
    gpu_model: str | None = None
    gpu_uuid: str | None = None
    versions: Versions = field(default_factory=Versions)
    cuda_visible_devices: str | None = None
    slurm_job_gpus: str | None = None
    slurm_step_gpus: str | None = None
    gpus_seen: int = 0
    gpus_bound: int | None = None
    devices_found: int | None = None
    device_glob: str | None = None
    declared_gres: str | None = None  # this node's GRES in the job's allocation (scontrol show job -d)
    backend: str | None = None
    device: str | None = None  # "cuda:0" or "cpu"
    wrong: int = 0  # wrong elements this rank saw over the whole run
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepRecord:
    """One message size of an all_reduce sweep. time_us: mean per-iteration time averaged over ranks (the
    nccl-tests default, -a 1); time_us_max: the slowest rank. algbw = size / time; busbw = algbw * 2(n-1)/n."""

    NUMBERS_MIN: ClassVar[int] = 0

    job_id: str
    kind: str
    size: int
    count: int
    dtype: str
    iters: int
    warmup: int
    time_us: float
    time_us_max: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int
    world_size: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PairAttempt:
    """One measurement of a pair (a suspect pair is measured again). samples_gbps: the busbw of each timed
    iteration (ranks averaged), which is the measurement's own noise."""

    NUMBERS_MIN: ClassVar[int] = 0

    attempt: int
    status: str = field(metadata={"choices": PAIR_STATUSES, "message": _STATUS_MESSAGE})
    busbw_gbps: float | None
    iters: int = 0
    time_us: float | None = None
    samples_gbps: tuple[float, ...] = field(default=(), metadata={"below": 1e300})


@dataclass(frozen=True)
class PairRecord:
    """One node pair of a pairwise sweep. status: "ok", "timeout" (ran past the per-pair budget; figures are
    then a lower bound computed from the budget) or "failed". attempts: every measurement of the pair, in
    order (written since measurements are repeated; () in older files); the record's own figures are those of
    its best attempt."""

    NUMBERS_MIN: ClassVar[int] = 0

    job_id: str
    kind: str
    nodes: tuple[str, str] = field(metadata={"message": "'nodes' must name exactly 2 nodes, got {value}"})
    size: int
    iters: int
    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int
    status: str = field(metadata={"choices": PAIR_STATUSES, "message": _STATUS_MESSAGE})
    step_id: str | None = None
    attempts: tuple[PairAttempt, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StorageRecord:
    """One storage measurement. node: where it ran ("*" for an all-rank aggregate); for checkpoint_read,
    write_node is where the file was written and node (= read_node) where it was restored."""

    NUMBERS_MIN: ClassVar[int] = 0

    job_id: str
    kind: str
    metric: str = field(metadata={"choices": STORAGE_METRICS, "message": "unknown storage metric {value} (known: "
                                  + ", ".join(STORAGE_METRICS) + ")"})
    node: str
    bytes: int
    seconds: float
    mbps: float
    ok: bool = True
    write_node: str | None = None
    read_node: str | None = None
    ranks: int | None = None
    path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobRecord:
    """The job line of a result file (exactly one per file): where and when the job ran, and whether it passed."""

    NUMBERS_MIN: ClassVar[int] = 0

    job_id: str = field(metadata={"pattern": _JOB_ID.pattern,
                                  "message": "'job_id' must be a Slurm job id (1234 or 1234_5), got {value}"})
    kind: str
    cluster: str | None
    partition: str | None
    nodes: tuple[str, ...]
    started: datetime
    finished: datetime
    passed: bool
    failed_nodes: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    world_size: int | None = None
    backend: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    declared_gres: dict[str, str] = field(default_factory=dict)
    node_gres: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobResult:
    """Everything one result file holds."""

    path: str
    job: JobRecord
    ranks: tuple[RankRecord, ...] = ()
    sweep: tuple[SweepRecord, ...] = ()
    pairs: tuple[PairRecord, ...] = ()
    storage: tuple[StorageRecord, ...] = ()

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def kind(self) -> str:
        return self.job.kind

    @property
    def skipped(self) -> str | None:
        """Why the test was not run (gpuclust.accept.migskip: all_reduce on MIG slices), or None."""
        note = self.job.extra.get("skipped")
        return str(note) if note else None

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.job.nodes

    def node_passed(self, node: str) -> bool:
        """Did this job pass *for this node*? A failed job that named its culprits (failed_nodes) passes the
        others; a failed job that could not tell fails every node. Performance gates are not applied here."""
        if node not in self.job.nodes:
            return False
        if node in self.job.failed_nodes:
            return False
        return self.job.passed or bool(self.job.failed_nodes)

    def node_versions(self) -> dict[str, Versions]:
        """Per node, the versions its lowest rank reported."""
        out: dict[str, Versions] = {}
        for rank in sorted(self.ranks, key=lambda r: r.rank):
            out.setdefault(rank.node, rank.versions)
        return out

    def ranks_on(self, node: str) -> list[RankRecord]:
        return [r for r in self.ranks if r.node == node]


@dataclass(frozen=True)
class ResultScan:
    """What a lenient scan found: the readable jobs and every problem (file:line). A file with any problem
    is still returned when its job line is readable, minus its bad lines, so a report can show both."""

    jobs: list[JobResult]
    problems: list[Problem]
    bad_files: list[str] = field(default_factory=list)  # files with no usable job line
    root: str | None = None  # the results directory scanned (health snapshots live under it)


# ---- writing ------------------------------------------------------------------------------------------


def record_to_dict(record: JobRecord | RankRecord | SweepRecord | PairRecord | StorageRecord) -> dict[str, Any]:
    """One result line: the schema tag and record type, then the record's fields (gpuclust.contract.write)."""
    return contract.write(record, {"schema": SCHEMA, "type": _TYPE_OF[type(record)]})


def dump_lines(result: JobResult) -> str:
    records: list[Any] = [result.job, *result.ranks, *result.sweep, *result.pairs, *result.storage]
    return "".join(json.dumps(record_to_dict(r), sort_keys=False) + "\n" for r in records)


def write_result(results_dir: str | os.PathLike[str], result: JobResult) -> Path:
    """Write atomically (temp file + rename in the same directory), so a reader never sees half a file."""
    directory = Path(results_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / result_file_name(result.job.kind, result.job.job_id)
    write_atomic(target, dump_lines(result))
    return target


# ---- reading ------------------------------------------------------------------------------------------

_AnyRecord = JobRecord | RankRecord | SweepRecord | PairRecord | StorageRecord
RECORDS: dict[str, type[_AnyRecord]] = {"job": JobRecord, "rank": RankRecord, "sweep": SweepRecord,
                                          "pair": PairRecord, "storage": StorageRecord}
_TYPE_OF: dict[type, str] = {JobRecord: "job", RankRecord: "rank", SweepRecord: "sweep", PairRecord: "pair",
                             StorageRecord: "storage"}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one result line (schemas/accept-result.schema.json), generated from the records."""
    defs: dict[str, Any] = {}
    variants = []
    for rtype, cls in RECORDS.items():
        ref = contract.json_schema(cls, defs)
        variants.append({"allOf": [ref, {"properties": {"type": {"const": rtype}}, "required": ["type"]}]})
    return {
        "$schema": contract.JSON_SCHEMA_DRAFT, "$id": contract.SCHEMA_BASE + "accept-result.schema.json",
        "title": "gpuclust acceptance result line",
        "description": "One JSON line of <results_dir>/<kind>-<job_id>.jsonl. Lines without a schema key are "
                       "older history and read the same.",
        "type": "object",
        "properties": {"schema": {"enum": list(READABLE_SCHEMAS)},
                       "type": {"enum": list(RECORDS)},
                       "kind": {"enum": list(KINDS)}},
        "required": ["type", "job_id", "kind"],
        "oneOf": variants,
        "$defs": defs,
    }


def parse_result_text(text: str, path: str) -> tuple[JobResult | None, list[Problem]]:
    """Parse one file's text. Returns the result (None when no single valid job line) and every problem."""
    problems: list[Problem] = []
    jobs: list[tuple[int, JobRecord]] = []
    others: list[tuple[int, _AnyRecord]] = []
    if text.startswith("\ufeff"):
        text = text[1:]
    # JSON lines end at "\n" only: str.splitlines() would also split at U+2028 and friends, which JSON
    # strings may hold raw
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip(" \t\r"):  # JSON's own whitespace only: a line of other blanks is rejected, not skipped
            continue
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes, kept as surrogates by read_result_text
            problems.append(Problem(path, lineno, "not valid UTF-8"))
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem(path, lineno, f"not valid JSON: {exc.msg} (column {exc.colno})"))
            continue
        except (ValueError, RecursionError) as exc:  # e.g. nesting too deep, an integer of 5000 digits
            problems.append(Problem(path, lineno, f"not valid JSON: {str(exc)[:100] or type(exc).__name__}"))
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(path, lineno, "a result line must be a JSON object"))
            continue
        if "schema" in obj and obj["schema"] not in READABLE_SCHEMAS:
            problems.append(Problem(path, lineno, f"unknown schema {obj.get('schema')!r} (expected {SCHEMA!r}); remove "
                                    "this file from the results directory or rerun the job with this gpuclust",
                                    "schema"))
            continue
        rtype = obj.get("type")
        if not isinstance(rtype, str) or rtype not in RECORDS:
            problems.append(Problem(path, lineno, f"unknown record type {rtype!r} (known: {', '.join(RECORD_TYPES)})",
                                    "type"))
            continue
        try:
            record = contract.read(RECORDS[rtype], obj)
        except ContractError as exc:
            problems.append(Problem(path, lineno, f"{rtype} record: {exc}", exc.field))
            continue
        if record.kind not in KINDS:
            problems.append(Problem(path, lineno, f"unknown kind {record.kind!r} (known: {', '.join(KINDS)})", "kind"))
            continue
        if isinstance(record, JobRecord):
            jobs.append((lineno, record))
        else:
            others.append((lineno, record))
    if not jobs:
        problems.append(Problem(path, None, "no valid 'job' line: the job record is missing or unreadable"))
        # every line is counted or rejected: the readable records of a file without a job are rejected too
        problems.extend(Problem(path, lineno, f"{_TYPE_OF[type(rec)]} record not used: the file has no valid "
                                              f"'job' line") for lineno, rec in others)
        return None, problems
    if len(jobs) > 1:
        lines = ", ".join(str(lineno) for lineno, _ in jobs)
        problems.extend(Problem(path, lineno, f"more than one 'job' line (lines {lines}): the file is not used")
                        for lineno, _ in jobs)
        problems.extend(Problem(path, lineno, f"{_TYPE_OF[type(rec)]} record not used: the file has several "
                                              f"'job' lines") for lineno, rec in others)
        return None, problems
    job = jobs[0][1]
    ranks: list[RankRecord] = []
    sweep: list[SweepRecord] = []
    pairs: list[PairRecord] = []
    storage: list[StorageRecord] = []
    for lineno, record in others:
        if record.job_id != job.job_id or record.kind != job.kind:
            problems.append(Problem(path, lineno, f"record is for job {record.job_id} ({record.kind}), "
                                                  f"but the file's job line is {job.job_id} ({job.kind})", "job_id"))
            continue
        if isinstance(record, RankRecord):
            ranks.append(record)
        elif isinstance(record, SweepRecord):
            sweep.append(record)
        elif isinstance(record, PairRecord):
            pairs.append(record)
        elif isinstance(record, StorageRecord):
            storage.append(record)
    result = JobResult(path, job, tuple(ranks), tuple(sorted(sweep, key=lambda s: s.size)), tuple(pairs),
                       tuple(storage))
    return result, problems


def read_result_text(path: str | os.PathLike[str]) -> str:
    """A result file's text; bytes that are not UTF-8 become surrogates, which parse_result_text reports
    against their line (one bad byte does not cost the whole file)."""
    return Path(path).read_bytes().decode("utf-8", errors="surrogateescape")


def scan_results(
    results_dir: str | os.PathLike[str], since: datetime | None = None, job: str | None = None
) -> ResultScan:
    """Lenient read: every readable job plus every problem found. `since` keeps jobs that finished at or after
    it (a naive datetime is taken as UTC); `job` keeps one job id (all its kinds)."""
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    jobs: list[JobResult] = []
    problems: list[Problem] = []
    bad: list[str] = []
    directory = Path(results_dir)
    if not directory.exists():
        return ResultScan([], [Problem(str(directory), None, "results directory does not exist: point --results-dir (or the site results_dir) "
                                           "at the acceptance results, or run `gpuclust accept submit` first")], [],
                          str(directory))
    for path in result_files(directory):
        match = _FILE_NAME.fullmatch(path.name)
        if job is not None and (match is None or match.group(2) != job):
            continue
        try:
            text = read_result_text(path)
        except OSError as exc:
            problems.append(Problem(str(path), None, f"cannot read: {exc}"))
            bad.append(str(path))
            continue
        result, found = parse_result_text(text, str(path))
        problems.extend(found)
        if result is None:
            bad.append(str(path))
            continue
        if match is None or (match.group(1), match.group(2)) != (result.kind, result.job_id):
            problems.append(Problem(str(path), None, f"file name does not match its job line "
                                                     f"({result_file_name(result.kind, result.job_id)})"))
        if since is not None and result.job.finished < since:
            continue
        jobs.append(result)
    jobs.sort(key=lambda r: (r.job.finished, r.job_id, r.kind))
    return ResultScan(jobs, problems, bad, str(directory))


def load_results(
    results_dir: str | os.PathLike[str], since: datetime | None = None, job: str | None = None
) -> list[JobResult]:
    """Strict read: the jobs, oldest first; raises InputError listing every bad line (file:line) if any."""
    scan = scan_results(results_dir, since=since, job=job)
    if scan.problems:
        raise InputError(scan.problems)
    return scan.jobs


# ---- conveniences for readers (report, audit) ----------------------------------------------------------


def last_pass_by_node(jobs: Iterable[JobResult], kinds: Sequence[str] = KINDS) -> dict[str, datetime]:
    """Per node, when the most recent job of these kinds that passed for it finished (see node_passed)."""
    out: dict[str, datetime] = {}
    for result in jobs:
        if result.kind not in kinds:
            continue
        if result.skipped:  # not run: no evidence either way
            continue
        for node in result.nodes:
            if result.node_passed(node) and (node not in out or result.job.finished > out[node]):
                out[node] = result.job.finished
    return out


def count_visible_devices(value: str | None) -> int | None:
    """Devices listed in CUDA_VISIBLE_DEVICES-like text: None when unset (nothing bound), 0 for ""/"NoDevFiles"."""
    if value is None:
        return None
    text = value.strip()
    if not text or text in ("NoDevFiles", "-1"):
        return 0
    return len([item for item in text.split(",") if item.strip()])
