"""Front end 2: ``sacct --json``. Each job becomes a record of the same raw string fields the text path
reads, so gpuclust.accounting.normalize interprets both identically.

Shapes:

* 22.05 (``openapi/dbv0.0.38``): times are epoch integers under ``time``; ``tres.allocated`` is a list of
  {type, name, count}; ``exit_code`` is {status, return_code} but **return_code is 0 for every job that
  exited normally, whatever its code** (see shared/slurm-lab-notes.md). So exit codes from this shape are
  recorded as unknown (``exit_code_known`` False, ``exit_code`` null), never as 0.
* 23.02+ data_parser (``--json=v0.0.39`` and later): numbers may be ``{set, infinite, number}`` objects,
  ``state.current`` a list of flags, ``exit_code.return_code``/``signal`` objects, ``time.*`` such objects,
  ``array.task_id`` such an object. These exit codes are trusted.

Steps are not read: ``jobs[].steps`` hold step records; each job is one allocation record.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa

from gpuclust.accounting.normalize import ParseResult, normalize
from gpuclust.accounting.schema import RAW_FIELDS
from gpuclust.errors import InputError, Problem

JSON_EXIT_NOTE = (
    "Input is sacct --json from Slurm 22.05 (openapi/dbv0.0.38), which reports return code 0 for jobs that "
    "exited non-zero: exit codes are unknown (null) on this path. A run counts as completed when its last "
    "attempt is COMPLETED (Slurm sets COMPLETED only for exit code 0)."
)


def _num(value: Any) -> int | None:
    """Plain numbers, or the data_parser {set, infinite, number} object; None when unset/infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _time(value: Any) -> str:
    secs = _num(value)
    if not secs:  # 0 means unset in sacct's JSON
        return "Unknown"
    return datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


def _elapsed(value: Any) -> str:
    secs = _num(value) or 0
    days, rest = divmod(secs, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _tres(items: Any) -> str:
    """tres.allocated list -> the AllocTRES string sacct would print (mem in MB gets an M)."""
    if not isinstance(items, list):
        return ""
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        kind, name, count = item.get("type"), item.get("name"), _num(item.get("count"))
        if not kind or count is None:
            continue
        key = f"{kind}/{name}" if name else str(kind)
        out.append(f"{key}={count}M" if key == "mem" else f"{key}={count}")
    return ",".join(out)


def _state(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("current", value.get("state"))
    if isinstance(value, list):  # newer shapes: a list of flags, the base state first
        value = value[0] if value else ""
    return str(value or "")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, Mapping):  # comment {job, administrator, system}
        return str(value.get("job") or "")
    return str(value)


def _exit(job: Mapping[str, Any], trusted: bool) -> tuple[str, bool]:
    if not trusted:
        return "", False
    ec = job.get("exit_code")
    if not isinstance(ec, Mapping):
        return "", False
    code = _num(ec.get("return_code"))
    signal = ec.get("signal")
    sig = _num(signal.get("id")) if isinstance(signal, Mapping) else _num(signal)
    if code is None:
        return "", False
    return f"{code}:{sig or 0}", True


def _job_id(job: Mapping[str, Any]) -> str:
    raw = _num(job.get("job_id"))
    array = job.get("array") or {}
    het = job.get("het") or {}
    task = array.get("task_id")
    task_num = _num(task)
    pending = array.get("task")
    het_offset = _num(het.get("job_offset"))
    if task_num is not None:
        return f"{_num(array.get('job_id')) or raw}_{task_num}"
    if pending:
        return f"{_num(array.get('job_id')) or raw}_[{pending}]"
    if het_offset is not None:
        return f"{_num(het.get('job_id')) or raw}+{het_offset}"
    return str(raw)


def _record(job: Mapping[str, Any], trusted: bool) -> tuple[dict[str, str], bool]:
    times = job.get("time") or {}
    tres = job.get("tres") or {}
    assoc = job.get("association") or {}
    exit_text, known = _exit(job, trusted)
    rec = {
        "JobID": _job_id(job),
        "JobIDRaw": str(_num(job.get("job_id")) if _num(job.get("job_id")) is not None else ""),
        "JobName": _text(job.get("name")),
        "User": _text(job.get("user") or assoc.get("user")),
        "Account": _text(job.get("account") or assoc.get("account")),
        "Partition": _text(job.get("partition")),
        "QOS": _text(job.get("qos")),
        "State": _state(job.get("state")),
        "ExitCode": exit_text,
        "Submit": _time(times.get("submission")),
        "Eligible": _time(times.get("eligible")),
        "Start": _time(times.get("start")),
        "End": _time(times.get("end")),
        "Elapsed": _elapsed(times.get("elapsed")),
        "AllocTRES": _tres(tres.get("allocated")),
        "NNodes": str(_num(job.get("allocation_nodes")) or 0),
        "NodeList": _text(job.get("nodes")) if job.get("nodes") not in ("None assigned",) else "None assigned",
        "WCKey": _text((job.get("wckey") or {}).get("wckey") if isinstance(job.get("wckey"), Mapping) else job.get("wckey")),
        "Comment": _text(job.get("comment")),
    }
    return rec, known


def exit_codes_trusted(doc: Mapping[str, Any]) -> bool:
    """22.05's dbv0.0.38 loses exit codes; data_parser shapes (23.02+) carry them."""
    meta = doc.get("meta") or {}
    plugin = meta.get("plugin") or {}
    if plugin.get("data_parser"):
        return True
    version = (meta.get("Slurm") or meta.get("slurm") or {}).get("version") or {}
    major, minor = _num(version.get("major")) or 0, _num(version.get("minor")) or 0
    if (major, minor) >= (23, 2):
        return True
    return False


def parse_json(data: bytes | str, source: str = "<input>") -> ParseResult:
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as exc:
        raise InputError(Problem(source, exc.lineno, f"not valid JSON: {exc.msg}")) from None
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list):
        raise InputError(Problem(source, None, "sacct --json output must be an object with a 'jobs' list"))
    trusted = exit_codes_trusted(doc)
    cols: dict[str, list[str]] = {name: [] for name in RAW_FIELDS}
    known: list[bool] = []
    lines: list[int] = []
    problems: list[Problem] = []
    for number, job in enumerate(doc["jobs"], start=1):
        if not isinstance(job, Mapping):
            problems.append(Problem(source, number, "jobs[] entry is not an object (line = job record number)"))
            continue
        try:
            rec, ok = _record(job, trusted)
        except (AttributeError, TypeError, ValueError, OverflowError) as exc:
            problems.append(Problem(source, number, f"cannot read job record: {exc} (line = job record number)"))
            continue
        for name in RAW_FIELDS:
            cols[name].append(rec[name])
        known.append(ok)
        lines.append(number)
    raw = {name: pa.array(values, pa.string()) for name, values in cols.items()}
    result = normalize(raw, pa.array(np.array(lines, dtype=np.int64)), pa.array(known, pa.bool_()), source,
                       extra_problems=problems)
    if not trusted:
        result.notes.append(JSON_EXIT_NOTE)
    return result


def parse_input(
    data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer, delimiter: str = "|", source: str = "<input>"
) -> ParseResult:
    """Either form, told apart by the first non-blank byte (JSON starts with '{'). `data` may be any buffer
    (a memory-mapped file is read in place by the text parser)."""
    from gpuclust.accounting.text import parse_parsable

    if _first_byte(data) == b"{":
        return parse_json(data if isinstance(data, bytes) else bytes(memoryview(data)), source)
    return parse_parsable(data, delimiter, source)


def _first_byte(data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer) -> bytes:
    """``data.lstrip()[:1]`` without copying the whole input."""
    view = memoryview(data)
    for start in range(0, len(view), 1 << 16):
        head = bytes(view[start : start + (1 << 16)]).lstrip()
        if head:
            return head[:1]
    return b""

