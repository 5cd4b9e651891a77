"""Snapshot a node's hardware-health counters, once before and once after an acceptance run.

    python -m gpuclust.accept.health snapshot --phase before|after --job JOBID --out DIR [--since ISO]

runs once per node (srun --ntasks-per-node=1) and writes DIR/<node>-<phase>.json atomically:

    {"schema": 1, "node": str, "phase": "before"|"after", "job_id": str, "time": ISO 8601 UTC,
     "sources": {"net": ..., "snmp": ..., "qdisc": ..., "infiniband": ..., "nvidia_smi": ..., "xid": ...}}

one entry per source of the registry (gpuclust.accept.health.sources; each source's module documents its
data). Each is {"status": "ok", ...data...} or {"status": "unavailable", "reason": "..."}: a missing file or
directory, a binary not on PATH, a timeout, a non-zero exit or output that does not parse makes the source
unavailable with a reason naming it, never "healthy".

Reading them back (load_snapshots, for `accept report`) checks every file against this shape and every
source's data against the shape its module declares (Source.shape, gpuclust.accept.health.shape): a file that
is no snapshot is a Problem naming it; a source whose data does not fit (a string where a count goes, a list
where a map goes, a number past 64 bits) becomes unavailable with an `invalid` note naming the field, so the
rules judge that source UNKNOWN on that node and every other source as usual.

Two optional GPU diagnostics run in the before phase only, when asked: `--dcgm-level N` runs
`dcgmi diag -r N -j` (source `dcgm`), `--nvbandwidth` runs nvbandwidth's copy-engine tests (source
`nvbandwidth`). A node without the binary records them as unavailable; they are detected, never required.

Roots and binaries are injectable through GPUCLUST_HEALTH_* (gpuclust.accept.health.kit.HealthPaths). Every
command goes through gpuclust.slurm.runner.run_command (argv lists, process-group timeouts).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuclust.accept.health import sources
from gpuclust.accept.health.kit import COMMAND_TIMEOUT_S, HealthPaths, Request, ok, unavailable
from gpuclust.accept.health.shape import Schema, check, obj, string
from gpuclust.accept.health.sources.dcgm import DCGM_TIMEOUT_S, collect_dcgm
from gpuclust.accept.health.sources.infiniband import collect_infiniband
from gpuclust.accept.health.sources.net import collect_net, collect_qdisc, collect_snmp
from gpuclust.accept.health.sources.nvbandwidth import (
    NVBANDWIDTH_TESTS,
    NVBANDWIDTH_TIMEOUT_S,
    collect_nvbandwidth,
)
from gpuclust.accept.health.sources.nvidia_smi import collect_nvidia_smi
from gpuclust.accept.health.sources.xid import collect_xid
from gpuclust.atomicfile import write_atomic
from gpuclust.errors import Problem

# The collectors and constants that lived here before the sources had modules of their own, for importers.
__all__ = [
    "COMMAND_TIMEOUT_S", "DCGM_TIMEOUT_S", "NVBANDWIDTH_TESTS", "NVBANDWIDTH_TIMEOUT_S", "PHASES", "SCHEMA",
    "SOURCES", "HealthPaths", "collect_dcgm", "collect_infiniband", "collect_net", "collect_nvbandwidth",
    "collect_nvidia_smi", "collect_qdisc", "collect_snmp", "collect_xid", "load_snapshots", "node_name", "ok",
    "snapshot", "snapshot_path", "unavailable", "write_snapshot",
]

SCHEMA = 1
SOURCES = sources.SNAPSHOT_SOURCES  # the names every snapshot has
PHASES = ("before", "after")
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024  # a real one is tens of KiB; a file past this is refused unread

# A snapshot file's own fields; each source's entry is {"status": "ok", ...its shape} or ENTRY_UNAVAILABLE.
FILE_SHAPE = obj({"schema": {"type": "integer", "enum": [SCHEMA]}, "node": string(), "phase": string(enum=PHASES),
                  "job_id": string(), "time": string(), "sources": {"type": "object"}},
                 required=["schema", "node", "phase", "sources"])
ENTRY_UNAVAILABLE = obj({"status": string(enum=("unavailable",)), "reason": string()}, required=["status"])


def node_name(env: Mapping[str, str] | None = None) -> str:
    """SLURMD_NODENAME (the Slurm node name) else the short hostname."""
    e = os.environ if env is None else env
    return e.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def snapshot(phase: str, job_id: str, *, paths: HealthPaths | None = None, since: datetime | None = None,
             nvidia_smi_timeout: float = 30.0, node: str | None = None,
             now: datetime | None = None, dcgm_level: int = 0, nvbandwidth: bool = False) -> dict[str, Any]:
    """One node's snapshot (see the module docstring for the shape)."""
    if phase not in PHASES:
        raise ValueError(f"phase must be before or after, got {phase!r}")
    paths = paths or HealthPaths.from_env()
    taken = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    request = Request(phase, paths, since=since, nvidia_smi_timeout=nvidia_smi_timeout, dcgm_level=dcgm_level,
                      nvbandwidth=nvbandwidth)
    collected: dict[str, Any] = {}
    for source in sources.SOURCES:
        entry = source.collect(request)
        if entry is not None:
            collected[source.name] = entry
    return {
        "schema": SCHEMA,
        "node": node or node_name(),
        "phase": phase,
        "job_id": str(job_id),
        "time": taken.isoformat(),
        "sources": collected,
    }


def snapshot_path(out_dir: str | os.PathLike[str], node: str, phase: str) -> Path:
    return Path(out_dir) / f"{node}-{phase}.json"


def write_snapshot(out_dir: str | os.PathLike[str], snap: Mapping[str, Any]) -> Path:
    """Write DIR/<node>-<phase>.json atomically (a reader never sees half a snapshot)."""
    path = snapshot_path(out_dir, str(snap["node"]), str(snap["phase"]))
    return write_atomic(path, json.dumps(snap, indent=1, sort_keys=True) + "\n", make_parents=True,
                        input_error=True)


def load_snapshots(directory: str | os.PathLike[str]) -> tuple[dict[str, dict[str, dict[str, Any]]], list[Problem]]:
    """Every DIR/<node>-<phase>.json -> ({node: {phase: snapshot}}, problems). A file that is not JSON, not a
    snapshot, or disagrees with its own name is a Problem naming the file, never an exception."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    problems: list[Problem] = []
    base = Path(directory)
    if not base.is_dir():
        return out, [Problem(str(base), None, "snapshot directory not found")]
    for path in sorted(base.glob("*-*.json")):
        stem = path.name[:-len(".json")]
        node, _, phase = stem.rpartition("-")
        if phase not in PHASES or not node:
            continue
        try:
            if path.stat().st_size > MAX_SNAPSHOT_BYTES:
                problems.append(Problem(str(path), None, f"larger than {MAX_SNAPSHOT_BYTES >> 20} MiB: no snapshot"))
                continue
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(str(path), None, f"cannot read: {exc}"))
            continue
        except json.JSONDecodeError as exc:
            problems.append(Problem(str(path), exc.lineno, f"not JSON: {exc.msg}"))
            continue
        except (ValueError, RecursionError) as exc:  # an integer past 4,300 digits; nesting past the stack
            problems.append(Problem(str(path), None, f"not JSON this reader takes: {type(exc).__name__}: "
                                                     f"{str(exc)[:120]}"))
            continue
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("sources"), dict):
            problems.append(Problem(str(path), None, f"not a health snapshot (schema {SCHEMA} with sources)"))
            continue
        if data.get("node") != node or data.get("phase") != phase:
            problems.append(Problem(str(path), None, f"file name says {node}/{phase} but the snapshot says "
                                                     f"{_short(data.get('node'))}/{_short(data.get('phase'))}"))
            continue
        misfit = check(FILE_SHAPE, data)
        if misfit is not None:
            problems.append(Problem(str(path), None, f"not a health snapshot: {misfit}"))
            continue
        out.setdefault(node, {})[phase] = {**data, "sources": checked_sources(data["sources"])}
    return out, problems


def _short(value: object) -> str:
    text = value if isinstance(value, str) else repr(value) if isinstance(value, (int, float, type(None))) \
        else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


SHAPES: dict[str, Schema | None] = {s.name: s.shape for s in sources.SOURCES}


def checked_source(name: str, entry: object) -> dict[str, Any]:
    """One source's entry of a snapshot file as the rules may read it: an `ok` entry whose data fits the
    source's shape, or an unavailable one. An entry that does not fit becomes
    {"status": "unavailable", "reason": ..., "invalid": {"field": "<source>.<path>", "message": ...}}:
    the rules judge it UNKNOWN (gpuclust.accept.health.rules), never as the hardware's state."""
    if not isinstance(entry, dict):
        misfit = check({"type": "object"}, entry)
    elif entry.get("status") == "ok":
        shape = SHAPES.get(name)
        data = {k: v for k, v in entry.items() if k != "status"}
        misfit = check(shape, data) if shape is not None else None
        if misfit is None:
            return entry
    else:
        misfit = check(ENTRY_UNAVAILABLE, entry)
        if misfit is None:  # a file's own "invalid" key is not taken: only this reader writes one
            return {k: v for k, v in entry.items() if k != "invalid"}
    assert misfit is not None
    where = f"{name}.{misfit.field}" if misfit.field else name
    return {"status": "unavailable", "reason": f"does not fit its shape: {where}: {misfit.message}",
            "invalid": {"field": where, "message": misfit.message}}


def checked_sources(entries: Mapping[str, object]) -> dict[str, dict[str, Any]]:
    """Every source's entry, checked (checked_source)."""
    return {name: checked_source(name, entry) for name, entry in entries.items()}


def snapshot_schema() -> dict[str, Any]:
    """The whole snapshot file as one JSON Schema (draft 2020-12), from FILE_SHAPE and the sources' shapes:
    for tools and tests; load_snapshots checks the same parts one by one."""
    entries: dict[str, Any] = {}
    for name, shape in SHAPES.items():
        ok_entry = {**(shape or {"type": "object"}), "properties": {
            **(shape or {}).get("properties", {}), "status": {"const": "ok"}}}
        entries[name] = {"oneOf": [ok_entry, ENTRY_UNAVAILABLE]}
    body = {**FILE_SHAPE, "properties": {**FILE_SHAPE["properties"], "sources": {
        "type": "object", "properties": entries, "additionalProperties": {"type": "object"}}}}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://github.com/gpuclust/gpuclust/schemas/health-snapshot.schema.json",
            "title": "gpuclust health snapshot (python -m gpuclust.accept.health snapshot)", **body}
