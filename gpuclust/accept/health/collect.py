"""Snapshot a node's hardware-health counters, once before and once after an acceptance run.

    python -m gpuclust.accept.health snapshot --phase before|after --job JOBID --out DIR [--since ISO]

runs once per node (srun --ntasks-per-node=1) and writes DIR/<node>-<phase>.json atomically:

    {"schema": 1, "node": str, "phase": "before"|"after", "job_id": str, "time": ISO 8601 UTC,
     "sources": {"net": ..., "snmp": ..., "qdisc": ..., "infiniband": ..., "nvidia_smi": ..., "xid": ...}}

Each source is {"status": "ok", ...data...} or {"status": "unavailable", "reason": "..."}: a missing file or
directory, a binary not on PATH, a timeout, a non-zero exit or output that does not parse makes the source
unavailable with a reason naming it, never "healthy". Data per source:

    net         {"interfaces": {iface: {counter: int|null}}}       /sys/class/net/*/statistics (lo skipped)
    snmp        {"tcp": {...}, "ip": {...}, "tcp_ext": {...}|absent}  /proc/net/snmp Tcp and Ip, /proc/net/netstat TcpExt
    qdisc       {"format": "json"|"text", "qdiscs": [...]}         tc -s -j qdisc show, else tc -s qdisc show
    infiniband  {"ports": [...]}                                   /sys/class/infiniband/*/ports/*
    nvidia_smi  {"driver_version", "cuda_version", "gpus": [...]}  nvidia-smi -q -x (bounded timeout)
    xid         {"command", "since", "events": [...]}              journalctl -k -o short-iso --since, else dmesg

The after-snapshot passes --since = the before-snapshot's time; only Xid events at or after it are kept
(events without a wall-clock time are kept and marked, the rules compare them with the before-snapshot's).

Roots and binaries are injectable (tests point them at fixture trees and fake binaries):

    GPUCLUST_HEALTH_SYSFS       sysfs root (default /sys)
    GPUCLUST_HEALTH_PROC        procfs root (default /proc)
    GPUCLUST_HEALTH_NVIDIA_SMI  nvidia-smi binary (default: nvidia-smi on PATH)
    GPUCLUST_HEALTH_TC          tc binary (default: tc)
    GPUCLUST_HEALTH_JOURNALCTL  journalctl binary (default: journalctl)
    GPUCLUST_HEALTH_DMESG       dmesg binary (default: dmesg)
    GPUCLUST_HEALTH_DCGMI       dcgmi binary (default: dcgmi; only with --dcgm-level)
    GPUCLUST_HEALTH_NVBANDWIDTH nvbandwidth binary (default: nvbandwidth; only with --nvbandwidth)

Two optional GPU diagnostics run in the before phase only, when asked: `--dcgm-level N` runs
`dcgmi diag -r N -j` (source `dcgm`), `--nvbandwidth` runs nvbandwidth's copy-engine tests (source
`nvbandwidth`). A node without the binary records them as unavailable; they are detected, never required.

Every command goes through gpuclust.slurm.runner.run_command (argv lists, process-group timeouts).
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuclust.accept.health import parse as p
from gpuclust.atomicfile import write_atomic
from gpuclust.errors import Problem, SlurmCommandError, SlurmCommandNotFound, SlurmTimeout
from gpuclust.slurm.runner import run_command

SCHEMA = 1
SOURCES = ("net", "snmp", "qdisc", "infiniband", "nvidia_smi", "xid")
PHASES = ("before", "after")
COMMAND_TIMEOUT_S = 30.0  # tc, journalctl, dmesg: bounded so a stuck tool cannot stall the job


@dataclass(frozen=True)
class HealthPaths:
    """Where the collector reads from: roots and binaries (see the module docstring for the env names)."""

    sysfs: str = "/sys"
    proc: str = "/proc"
    nvidia_smi: str = "nvidia-smi"
    tc: str = "tc"
    journalctl: str = "journalctl"
    dmesg: str = "dmesg"
    dcgmi: str = "dcgmi"
    nvbandwidth: str = "nvbandwidth"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HealthPaths:
        e = os.environ if env is None else env
        d = cls()
        return cls(
            sysfs=e.get("GPUCLUST_HEALTH_SYSFS") or d.sysfs,
            proc=e.get("GPUCLUST_HEALTH_PROC") or d.proc,
            nvidia_smi=e.get("GPUCLUST_HEALTH_NVIDIA_SMI") or d.nvidia_smi,
            tc=e.get("GPUCLUST_HEALTH_TC") or d.tc,
            journalctl=e.get("GPUCLUST_HEALTH_JOURNALCTL") or d.journalctl,
            dmesg=e.get("GPUCLUST_HEALTH_DMESG") or d.dmesg,
            dcgmi=e.get("GPUCLUST_HEALTH_DCGMI") or d.dcgmi,
            nvbandwidth=e.get("GPUCLUST_HEALTH_NVBANDWIDTH") or d.nvbandwidth,
        )


def unavailable(reason: str) -> dict[str, Any]:
    return {"status": "unavailable", "reason": reason}


def ok(**data: Any) -> dict[str, Any]:
    return {"status": "ok", **data}


class _Unavailable(Exception):
    """Internal: this source cannot be read; the message is the reason."""


def _run(argv: Sequence[str], timeout: float) -> str:
    """stdout of argv, or _Unavailable with a reason naming the command."""
    try:
        return run_command(list(argv), timeout=timeout).stdout
    except SlurmCommandNotFound:
        raise _Unavailable(f"{argv[0]}: not found on PATH") from None
    except SlurmTimeout:
        raise _Unavailable(f"{' '.join(argv)}: timed out after {timeout:g}s (process group killed)") from None
    except SlurmCommandError as exc:
        detail = (exc.stderr.strip() or exc.stdout.strip() or "(no output)").splitlines()[0][:200]
        raise _Unavailable(f"{' '.join(argv)}: exited {exc.returncode}: {detail}") from None
    except OSError as exc:  # e.g. permission denied on the binary
        raise _Unavailable(f"{argv[0]}: {exc.strerror or exc}") from None


def _guard(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one source reader; every failure becomes an unavailable source with its reason."""
    try:
        return fn()
    except _Unavailable as exc:
        return unavailable(str(exc))
    except p.HealthParseError as exc:
        return unavailable(f"parse error: {exc}")
    except FileNotFoundError as exc:
        return unavailable(f"{exc.filename or exc}: not found")
    except OSError as exc:
        return unavailable(f"{exc.filename or ''}: {exc.strerror or exc}".strip(": "))


def collect_net(paths: HealthPaths) -> dict[str, Any]:
    return _guard(lambda: ok(interfaces=p.read_net_statistics(paths.sysfs)))


def collect_snmp(paths: HealthPaths) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        snmp_path = Path(paths.proc) / "net" / "snmp"
        snmp = p.parse_proc_net_snmp(snmp_path.read_text(encoding="utf-8"), str(snmp_path))
        if "Tcp" not in snmp:
            raise p.HealthParseError(str(snmp_path), "no Tcp section")
        data: dict[str, Any] = {"tcp": snmp["Tcp"]}
        if "Ip" in snmp:  # where the node itself lost packets: received-not-delivered, requested-not-sent
            data["ip"] = snmp["Ip"]
        netstat_path = Path(paths.proc) / "net" / "netstat"
        try:  # TcpExt is a bonus: its absence does not make the source unavailable
            ext = p.parse_proc_net_netstat(netstat_path.read_text(encoding="utf-8"), str(netstat_path))
            if "TcpExt" in ext:
                data["tcp_ext"] = ext["TcpExt"]
        except (OSError, p.HealthParseError) as exc:
            data["tcp_ext_unavailable"] = str(exc)
        return ok(**data)

    return _guard(read)


def collect_qdisc(paths: HealthPaths, timeout: float = COMMAND_TIMEOUT_S) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        try:  # JSON output (iproute2 >= 4.13); older tc refuses -j
            out = _run([paths.tc, "-s", "-j", "qdisc", "show"], timeout)
            return ok(format="json", qdiscs=[q.as_dict() for q in p.parse_tc_qdisc_json(out)])
        except (_Unavailable, p.HealthParseError) as first:
            if isinstance(first, _Unavailable) and "not found" in str(first):
                raise
            out = _run([paths.tc, "-s", "qdisc", "show"], timeout)
            return ok(format="text", qdiscs=[q.as_dict() for q in p.parse_tc_qdisc_text(out)])

    return _guard(read)


def collect_infiniband(paths: HealthPaths) -> dict[str, Any]:
    return _guard(lambda: ok(ports=[port.as_dict() for port in p.read_infiniband(paths.sysfs)]))


def collect_nvidia_smi(paths: HealthPaths, timeout: float) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        out = _run([paths.nvidia_smi, "-q", "-x"], timeout)
        return ok(**p.parse_nvidia_smi_xml(out).as_dict())

    return _guard(read)


def collect_xid(paths: HealthPaths, since: datetime | None, timeout: float = COMMAND_TIMEOUT_S) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        since_text = since.isoformat() if since else None
        try:
            argv = [paths.journalctl, "-k", "-o", "short-iso", "--no-pager"]
            if since is not None:
                # journalctl takes "YYYY-MM-DD HH:MM:SS" in local time; convert from the UTC instant
                argv += ["--since", since.astimezone().strftime("%Y-%m-%d %H:%M:%S")]
            out, command = _run(argv, timeout), "journalctl"
        except _Unavailable as first:
            try:
                out, command = _run([paths.dmesg, "--time-format", "iso"], timeout), "dmesg"
            except _Unavailable as second:
                raise _Unavailable(f"{first}; fallback {second}") from None
        events = []
        for ev in p.parse_xid_lines(out, year_hint=datetime.now().year):
            in_window: bool | None = None
            if ev.time is not None and since is not None:
                in_window = p.parse_iso_time(ev.time) >= since
                if not in_window:
                    continue
            events.append({**ev.as_dict(), "timed": ev.time is not None})
        return ok(command=command, since=since_text, events=events)

    return _guard(read)


# dcgmi diag levels take minutes (3: ~30 min on 8 GPUs; 4: hours): generous, but bounded.
DCGM_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0, 4: 4 * 3600.0}
NVBANDWIDTH_TIMEOUT_S = 900.0
# The copy-engine host<->device and device<->device tests: seconds per GPU, the figures acceptance compares.
NVBANDWIDTH_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")


def collect_dcgm(paths: HealthPaths, level: int) -> dict[str, Any]:
    """`dcgmi diag -r LEVEL -j`. Exits non-zero when a test fails, with the JSON still on stdout: that JSON is
    the result, so a non-zero exit with parseable output is read, not unavailable."""
    if level not in DCGM_TIMEOUT_S:
        raise ValueError(f"dcgm level must be 1-4, got {level!r}")

    def read() -> dict[str, Any]:
        argv = [paths.dcgmi, "diag", "-r", str(level), "-j"]
        try:
            out = run_command(argv, timeout=DCGM_TIMEOUT_S[level], check=False)
        except SlurmCommandNotFound:
            raise _Unavailable(f"{paths.dcgmi}: not found on PATH") from None
        except SlurmTimeout:
            raise _Unavailable(f"{' '.join(argv)}: timed out after {DCGM_TIMEOUT_S[level]:g}s") from None
        if not out.stdout.strip():
            detail = (out.stderr.strip() or "(no output)").splitlines()[0][:200]
            raise _Unavailable(f"{' '.join(argv)}: exited {out.returncode}: {detail}")
        results = p.parse_dcgmi_diag_json(out.stdout, source=" ".join(argv))
        return ok(level=level, exit_code=out.returncode, results=[r.as_dict() for r in results])

    return _guard(read)


def collect_nvbandwidth(paths: HealthPaths) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        argv = [paths.nvbandwidth]
        for test in NVBANDWIDTH_TESTS:
            argv += ["-t", test]
        results = p.parse_nvbandwidth(_run(argv, NVBANDWIDTH_TIMEOUT_S), source=paths.nvbandwidth)
        return ok(tests=list(NVBANDWIDTH_TESTS), results=[r.as_dict() for r in results])

    return _guard(read)


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
    sources = {
        "net": collect_net(paths),
        "snmp": collect_snmp(paths),
        "qdisc": collect_qdisc(paths),
        "infiniband": collect_infiniband(paths),
        "nvidia_smi": collect_nvidia_smi(paths, nvidia_smi_timeout),
        "xid": collect_xid(paths, since),
    }
    if phase == "before" and dcgm_level:
        sources["dcgm"] = collect_dcgm(paths, dcgm_level)
    if phase == "before" and nvbandwidth:
        sources["nvbandwidth"] = collect_nvbandwidth(paths)
    return {
        "schema": SCHEMA,
        "node": node or node_name(),
        "phase": phase,
        "job_id": str(job_id),
        "time": taken.isoformat(),
        "sources": sources,
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
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(str(path), None, f"cannot read: {exc}"))
            continue
        except json.JSONDecodeError as exc:
            problems.append(Problem(str(path), exc.lineno, f"not JSON: {exc.msg}"))
            continue
        if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("sources"), dict):
            problems.append(Problem(str(path), None, f"not a health snapshot (schema {SCHEMA} with sources)"))
            continue
        if data.get("node") != node or data.get("phase") != phase:
            problems.append(Problem(str(path), None, f"file name says {node}/{phase} but the snapshot says "
                                                     f"{data.get('node')}/{data.get('phase')}"))
            continue
        out.setdefault(node, {})[phase] = data
    return out, problems
