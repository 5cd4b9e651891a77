"""Front end 2: ``sacct --json``. The bytes are decoded and parsed here (every failure a located error, never a
traceback); the document's ``meta`` block picks the adapter for its shape (gpuclust.slurm.sacct_json, one per
data_parser version), which turns each job object into the same raw string fields the text path reads, so
gpuclust.accounting.ingest.normalize interprets both identically.

* A document that is not UTF-8, not JSON, nested too deeply, or not an object with a ``jobs`` list is an
  InputError naming the file (and the line where that can be known).
* A shape with no adapter (a newer data_parser; a meta block missing, malformed or naming two versions; a
  plugin the named Slurm does not ship) is refused with UnknownShape naming ``sacct --json``, the plugin and
  the Slurm version; the text form is the documented fallback. Every refusal comes before any row is read:
  nothing of a refused or truncated document reaches the table (or a store).
* A job object with a field that cannot be read is a rejected row, reported as ``file:N`` (N = the job's
  record number, 1-based, as ``line``) with ``jobs[N-1]``, the job id where readable, and the field.

Each job is one allocation record. Its ``steps`` become step rows (sacct_json.step_records), read only for
their usage TRES, which normalize rolls up to the job (gpuclust.accounting.ingest.usage) before dropping them.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from gpuclust.accounting.ingest.normalize import DEFAULT_OPTIONS, ParseResult, ReaderOptions, normalize
from gpuclust.errors import InputError, Problem
from gpuclust.slurm.jsonshape import UnknownShape, read_shape
from gpuclust.slurm.sacct_json import DEFAULT_ADAPTER, BadField, SacctJsonAdapter, adapter_for, step_records

BOM = b"\xef\xbb\xbf"
JSON_EXIT_NOTE = DEFAULT_ADAPTER.note


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, max(0, pos)) + 1


def load_document(data: bytes | str, source: str) -> Any:
    """Bytes (or text) -> the parsed JSON value. A leading UTF-8 BOM is allowed; every failure is an
    InputError naming `source` and, where known, the line."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    if raw.startswith(BOM):
        raw = raw[len(BOM):]
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = _line_of(raw, exc.start)
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(Problem(source, line, f"not valid UTF-8 (byte {raw[exc.start]:#04x} at column {col}): "
                                               "sacct --json writes UTF-8")) from None
    try:
        return json.loads(decoded)
    except json.JSONDecodeError as exc:
        raise InputError(Problem(source, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno}); check that the "
                                                 "file is complete `sacct --json` output (not cut short)")) from None
    except RecursionError:
        raise InputError(Problem(source, None, "not readable JSON: nested too deeply (arrays/objects inside each "
                                               "other beyond Python's recursion limit)")) from None
    except ValueError as exc:  # e.g. an integer literal longer than Python's 4300-digit limit
        raise InputError(Problem(source, None, f"not readable JSON: {exc}")) from None


def _job_label(job: Mapping[str, Any]) -> str:
    jid = job.get("job_id")
    return f", JobID {jid}" if isinstance(jid, int) and not isinstance(jid, bool) else ""


def parse_json(data: bytes | str, source: str = "<input>", *, options: ReaderOptions = DEFAULT_OPTIONS) -> ParseResult:
    doc = load_document(data, source)
    if not isinstance(doc, Mapping):
        kind = "a list" if isinstance(doc, list) else type(doc).__name__
        raise InputError(Problem(source, None, f"sacct --json output must be an object with a 'jobs' list, "
                                               f"not {kind}; give the whole output of `sacct --json`"))
    jobs = doc.get("jobs")
    if not isinstance(jobs, list):
        raise InputError(Problem(source, None, "sacct --json output must be an object with a 'jobs' list; "
                                               "give the whole output of `sacct --json`"))
    shape = read_shape(doc)
    adapter: SacctJsonAdapter
    if not jobs and not shape.plugin:
        adapter = DEFAULT_ADAPTER  # no jobs, no meta: nothing whose shape matters
    else:
        try:
            adapter = adapter_for(shape)
        except UnknownShape as exc:
            raise InputError(Problem(source, None, str(exc))) from None
    registry = options.registry
    cols: dict[str, list[str]] = {name: [] for name in registry.raw}
    unknowable = [fd.name for fd in registry.fields if fd.unknowable]
    known: list[bool] = []
    lines: list[int] = []
    problems: list[Problem] = []
    usage_problems: list[str] = []
    unread_steps = 0  # steps listed but not made rows (their job rejected, unreadable, no id): dropped steps
    for number, job in enumerate(jobs, start=1):
        where = f"jobs[{number - 1}]"
        if not isinstance(job, Mapping):
            problems.append(Problem(source, number, f"{where} is not an object (line = job record number)"))
            continue
        listed = len(job["steps"]) if isinstance(job.get("steps"), list) else 0
        try:
            rec = registry.json_record(adapter, shape.plugin, job)
        except BadField as exc:
            problems.append(Problem(source, number, f"{where}{_job_label(job)}: cannot read {exc} "
                                                    "(line = job record number)", exc.field))
            unread_steps += listed
            continue
        steps: list[dict[str, str]] = []
        if registry.step_usage:
            try:
                steps = step_records(job, rec["JobID"])
            except BadField as exc:  # the job's own record stands; only its usage is unknown
                usage_problems.append(f"{source}:{number}: {where}{_job_label(job)}: cannot read {exc}")
        unread_steps += listed - len(steps)
        for one in (rec, *steps):
            for name in registry.raw:
                cols[name].append(one.get(name, ""))
            # A value the shape cannot know (22.05's exit codes) comes empty: null, not an error.
            known.append(one is not rec or all(rec[name] != "" for name in unknowable))
            lines.append(number)
    raw = {name: pa.array(values, pa.string()) for name, values in cols.items()}
    if options.slurm_version is None and shape.version:  # the document names the Slurm that wrote it
        options = dataclasses.replace(options, slurm_version="{}.{}".format(*shape.version[:2]))
    result = normalize(raw, pa.array(np.array(lines, dtype=np.int64)), pa.array(known, pa.bool_()), source,
                       extra_problems=problems, options=options)
    result.steps_dropped += unread_steps  # (each record of the document lands in one bucket: rows_accounted)
    result.usage_warnings += len(usage_problems)
    result.usage_problems = usage_problems[:50] + result.usage_problems
    result.reader = "json"
    if not adapter.exit_code_known and jobs:
        result.notes.append(adapter.note)
    result.notes.append(f"sacct --json shape: {shape.describe()}")
    return result


def parse_input(
    data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer, delimiter: str | None = "|", source: str = "<input>",
    *, options: ReaderOptions = DEFAULT_OPTIONS,
) -> ParseResult:
    """Either form, told apart by the first non-blank byte after an optional UTF-8 BOM: JSON starts with '{'
    (or '[', which the JSON reader then refuses by name; no sacct text starts with either). `data` may be any
    buffer (a memory-mapped file is read in place by the text parser)."""
    from gpuclust.accounting.ingest.text import parse_parsable

    if _first_byte(data) in (b"{", b"["):
        return parse_json(data if isinstance(data, bytes) else bytes(memoryview(data)), source, options=options)
    return parse_parsable(data, delimiter, source, options=options)


def _first_byte(data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer) -> bytes:
    """``data.lstrip()[:1]`` past a UTF-8 BOM, without copying the whole input."""
    view = memoryview(data)
    skip = len(BOM) if bytes(view[: len(BOM)]) == BOM else 0
    for start in range(skip, len(view), 1 << 16):
        head = bytes(view[start : start + (1 << 16)]).lstrip()
        if head:
            return head[:1]
    return b""
