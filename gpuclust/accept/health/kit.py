"""What every health source is built from (gpuclust.accept.health.sources): the value parsers, the collector's
status builders and command runner, the finding type and the judge that collects findings, and `Source`,
the registry's entry.

Nothing here knows a particular source; a source module imports this and nothing of its siblings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeAlias

from gpuclust.accept.health.shape import INT_MAX, INT_MIN, NUM_MAX, Schema
from gpuclust.config.health import HealthConfig
from gpuclust.errors import GpuclustError, SlurmCommandError, SlurmCommandNotFound, SlurmTimeout
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Finding
from gpuclust.slurm.runner import run_command

# --------------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------------


class HealthParseError(GpuclustError):
    """A health source's output is not what that source writes. `source` names the source (or the file),
    `detail` the line or element and what was wrong."""

    def __init__(self, source: str, detail: str):
        self.source = source
        self.detail = detail
        super().__init__(f"{source}: {detail}")


# Values the drivers and sysfs write for "no value". Compared case-insensitively after strip().
_UNKNOWN = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]",
            "n/a (no pma)", "unknown", "<<<not_supported>>>", "[insufficient permissions]"}


def is_unknown(text: str | None) -> bool:
    return text is None or text.strip().lower() in _UNKNOWN


def bounded_int(digits: str) -> int | None:
    """A run of decimal digits (an optional '-' first) as an int when it fits 64 bits (INT_MIN..INT_MAX), else
    None. Bounded before int() sees it: Python refuses to convert more than 4,300 digits (ValueError), and a
    value past 64 bits is no counter a kernel or driver keeps, so it is an unknown value, not a crash."""
    sign, body = ("-", digits[1:]) if digits.startswith("-") else ("", digits.removeprefix("+"))
    body = body.lstrip("0") or "0"
    if not body.isascii() or not body.isdigit() or len(body) > 20:  # 2**64 - 1 has 20 digits
        return None
    value = int(sign + body)
    return value if INT_MIN <= value <= INT_MAX else None


def to_int(text: str | None) -> int | None:
    """'12', '12 us', '192 bank(s)' -> int; unknown markers, and values past 64 bits, -> None."""
    if is_unknown(text):
        return None
    assert text is not None
    m = re.match(r"\s*(-?[0-9]+)\b", text)
    return bounded_int(m.group(1)) if m else None


def to_float(text: str | None) -> float | None:
    """'67.03 W', '27 C' -> float; unknown markers, and magnitudes past NUM_MAX, -> None."""
    if is_unknown(text):
        return None
    assert text is not None
    m = re.match(r"\s*(-?[0-9]+(?:\.[0-9]+)?)", text)
    if not m or len(m.group(1)) > 64:  # a reading has a few digits; hundreds are no reading
        return None
    value = float(m.group(1))
    return value if abs(value) <= NUM_MAX else None


def to_yes_no(text: str | None) -> bool | None:
    if is_unknown(text):
        return None
    assert text is not None
    low = text.strip().lower()
    if low in ("yes", "true", "1"):
        return True
    if low in ("no", "false", "0"):
        return False
    return None


def int_or_none(value: Any) -> int | None:
    """A JSON integer within 64 bits (bool excluded: True is an int to Python, not a counter)."""
    if isinstance(value, int) and not isinstance(value, bool) and INT_MIN <= value <= INT_MAX:
        return value
    return None


def read_sysfs(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:  # some sysfs files refuse reads (permissions, a driver without the attribute)
        return ""


def parse_iso_time(text: str) -> datetime:
    """An ISO 8601 time (a 'Z' suffix accepted); naive times are read as UTC. Raises ValueError."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------------
# Collecting
# --------------------------------------------------------------------------------------------------

COMMAND_TIMEOUT_S = 30.0  # tc, journalctl, dmesg: bounded so a stuck tool cannot stall the job


@dataclass(frozen=True)
class HealthPaths:
    """Where the collectors read from: roots and binaries. Each field is overridden by the environment
    variable GPUCLUST_HEALTH_<FIELD> (tests point them at fixture trees and fake binaries):

        GPUCLUST_HEALTH_SYSFS       sysfs root (default /sys)
        GPUCLUST_HEALTH_PROC        procfs root (default /proc)
        GPUCLUST_HEALTH_NVIDIA_SMI  nvidia-smi binary (default: nvidia-smi on PATH)
        GPUCLUST_HEALTH_TC          tc binary (default: tc)
        GPUCLUST_HEALTH_JOURNALCTL  journalctl binary (default: journalctl)
        GPUCLUST_HEALTH_DMESG       dmesg binary (default: dmesg)
        GPUCLUST_HEALTH_DCGMI       dcgmi binary (default: dcgmi; only with --dcgm-level)
        GPUCLUST_HEALTH_NVBANDWIDTH nvbandwidth binary (default: nvbandwidth; only with --nvbandwidth)
    """

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
        # An empty variable means the default, as an unset one does.
        return cls(**{f.name: e.get(f"GPUCLUST_HEALTH_{f.name.upper()}") or getattr(d, f.name)
                      for f in fields(cls)})


@dataclass(frozen=True)
class Request:
    """What one snapshot asks of the sources (the snapshot command's options)."""

    phase: str  # before | after
    paths: HealthPaths
    since: datetime | None = None
    nvidia_smi_timeout: float = 30.0
    dcgm_level: int = 0
    nvbandwidth: bool = False


def unavailable(reason: str) -> dict[str, Any]:
    return {"status": "unavailable", "reason": reason}


def ok(**data: Any) -> dict[str, Any]:
    return {"status": "ok", **data}


class Unavailable(Exception):
    """This source cannot be read; the message is the reason (guard() makes it the source's entry)."""


def run(argv: Sequence[str], timeout: float) -> str:
    """stdout of argv, or Unavailable with a reason naming the command."""
    try:
        return run_command(list(argv), timeout=timeout).stdout
    except SlurmCommandNotFound:
        raise Unavailable(f"{argv[0]}: not found on PATH") from None
    except SlurmTimeout:
        raise Unavailable(f"{' '.join(argv)}: timed out after {timeout:g}s (process group killed)") from None
    except SlurmCommandError as exc:
        detail = (exc.stderr.strip() or exc.stdout.strip() or "(no output)").splitlines()[0][:200]
        raise Unavailable(f"{' '.join(argv)}: exited {exc.returncode}: {detail}") from None
    except OSError as exc:  # e.g. permission denied on the binary
        raise Unavailable(f"{argv[0]}: {exc.strerror or exc}") from None


def guard(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one source reader; every failure becomes an unavailable source with its reason."""
    try:
        return fn()
    except Unavailable as exc:
        return unavailable(str(exc))
    except HealthParseError as exc:
        return unavailable(f"parse error: {exc}")
    except FileNotFoundError as exc:
        return unavailable(f"{exc.filename or exc}: not found")
    except OSError as exc:
        return unavailable(f"{exc.filename or ''}: {exc.strerror or exc}".strip(": "))
    except (ValueError, OverflowError, RecursionError) as exc:
        # What output no parser foresaw can still raise (a number past Python's 4,300-digit conversion limit,
        # JSON nested past the recursion limit): this source is unavailable, the node keeps the others.
        return unavailable(f"unreadable output: {type(exc).__name__}: {str(exc)[:200]}")


# --------------------------------------------------------------------------------------------------
# Judging
# --------------------------------------------------------------------------------------------------

# Finding classes and severities (gpuclust.exitcodes.Nagios); each source's module says when it finds its own:
#   xid, ecc, remap, throttle, pcie  the GPU (sources xid, nvidia_smi)
#   link, topology                   the fabric (net, snmp, qdisc, infiniband)
#   dcgm                             dcgmi diag fail: CRITICAL, warn: WARNING
#   vanished     hardware present before the run and gone after it (a GPU, a NIC, an IB port), or a source
#                that answered before and not after (nvidia-smi): CRITICAL (sources nvidia_smi, net,
#                infiniband)
#   reset        a counter went backwards (reboot, driver reload, wrap): UNKNOWN, and its delta is not used
#   unavailable  a source unavailable in either snapshot: UNKNOWN when [health] require lists it, else OK (a
#                visible note that does not change the exit code); a node without both snapshots, or a
#                source whose data in a snapshot file does not fit its shape: UNKNOWN
#   nvlink       a GPU's NVLink error counter grew (source nvidia_smi)
#   fabric       Fabric Manager has not trained the GPU into the NVLink fabric (source nvidia_smi)
#   gres         fewer GPUs answer than the node's GRES (gpuclust health check)
# The classes a CRITICAL finding may carry, cause before symptom: the order picks which finding names a node's
# drain, in `accept report --drain` (gpuclust.accept.drain) and `health check` alike. A new class that can be
# CRITICAL goes here; HealthFinding refuses a CRITICAL finding of any other class.
DRAIN_ORDER = ("xid", "vanished", "remap", "ecc", "dcgm", "fabric", "nvlink", "pcie", "link", "throttle", "topology",
               "gres")
# The classes that are never CRITICAL, so never a drain's cause.
NOTE_CLASSES = ("unavailable", "reset", "mig")
CLASSES = (*DRAIN_ORDER, *NOTE_CLASSES)

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    """A drain-reason-safe token: [a-z0-9._-]+."""
    out = _SLUG_BAD.sub("-", text.lower()).strip("-")
    return out or "unknown"


@dataclass(frozen=True)
class HealthFinding:
    """One finding on a node: its class (CLASSES), severity, drain-reason-safe detail, message and evidence."""

    node: str
    cls: str  # one of CLASSES
    severity: Nagios
    detail: str  # slug, safe for a drain reason
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cls not in CLASSES:
            raise ValueError(f"unknown health finding class {self.cls!r}")
        if self.severity == Nagios.CRITICAL and self.cls not in DRAIN_ORDER:
            raise ValueError(f"health finding class {self.cls!r} is never CRITICAL (kit.NOTE_CLASSES): a class that "
                             "can drain a node goes in kit.DRAIN_ORDER")
        object.__setattr__(self, "detail", slug(self.detail))


def finding_action(hf: HealthFinding, cfg: HealthConfig | None = None) -> str | None:
    """What to do about a WARNING or CRITICAL finding (gpuclust.accept.health.actions); None for the rest."""
    if hf.severity not in (Nagios.WARNING, Nagios.CRITICAL):
        return None
    from gpuclust.accept.health.actions import action_for

    return action_for(hf.cls, hf.detail, hf.evidence, dict(cfg.actions) if cfg is not None else None)


def to_finding(hf: HealthFinding, job_id: str | None, kind: str | None, cfg: HealthConfig | None = None) -> Finding:
    """The project-wide Finding (check = health-<cls>; details: class, detail, evidence, and for a WARNING or
    CRITICAL one the action, NVIDIA's per Xid or gpuclust's per class, `[health] actions` over both)."""
    # details["class"] (not a keyword argument: Finding.make's own first parameter is named cls)
    details: dict[str, Any] = {"class": hf.cls, "detail": hf.detail, "evidence": hf.evidence}
    action = finding_action(hf, cfg)
    if action is not None:
        details["action"] = action
    return Finding.make(f"health-{hf.cls}", hf.severity, hf.message, [hf.node], job_id=job_id, kind=kind,
                        **details)


def source_data(snap: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """The source's data when it is ok, else None."""
    if not snap:
        return None
    src = snap.get("sources", {}).get(name)
    return src if isinstance(src, Mapping) and src.get("status") == "ok" else None


def checkable(snap: Snap, name: str) -> bool:
    """Whether the snapshot can say a source's hardware went away: it exists, and the source's entry is not one
    that failed its shape check (collect.checked_source), which says nothing about the hardware and is judged
    UNKNOWN instead. A source that is unavailable, or absent, answered nothing."""
    if not snap:
        return False
    entry = snap.get("sources", {}).get(name)
    return not (isinstance(entry, Mapping) and entry.get("invalid"))


def num(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Judge:
    """One node's findings, as the sources' rules add them."""

    def __init__(self, node: str, cfg: HealthConfig):
        self.node, self.cfg = node, cfg
        self.out: list[HealthFinding] = []

    def add(self, cls: str, severity: Nagios, detail: str, message: str, **evidence: Any) -> None:
        self.out.append(HealthFinding(self.node, cls, severity, detail, message, evidence))

    def delta(self, what: str, detail: str, before: Any, after: Any) -> int | None:
        """after - before, or None when either is unknown. A counter that went backwards (reboot, driver
        reload, 32/64-bit wrap) is a `reset` finding and yields None: never a false failure, never silent."""
        b, a = num(before), num(after)
        if b is None or a is None:
            return None
        if a < b:
            self.add("reset", Nagios.UNKNOWN, detail, f"{self.node}: {what} went backwards ({b} -> {a}): "
                     "reset, reboot or wrap during the run; its change is not judged", before=b, after=a)
            return None
        return a - b


Snap: TypeAlias = Mapping[str, Any] | None  # a snapshot; None where the node has none


@dataclass(frozen=True)
class Source:
    """One entry of the registry (gpuclust.accept.health.sources.SOURCES)."""

    name: str  # the key in a snapshot's "sources"
    # Request -> the source's entry (ok(...) or unavailable(...), through guard()); None: not asked for
    collect: Callable[[Request], dict[str, Any] | None]
    # (judge, before snapshot, after snapshot): adds the source's findings; None: judged elsewhere or never
    judge: Callable[[Judge, Snap, Snap], None] | None = None
    # Collected only when asked (a diagnostic that takes minutes): its absence is no "unavailable" note, and
    # [health] require cannot name it.
    on_request: bool = False
    # The job's findings, every node's -> the job's findings: a rule that needs the other nodes' findings.
    across_nodes: Callable[[list[HealthFinding]], list[HealthFinding]] | None = None
    # The JSON Schema of the source's `ok` data (built with gpuclust.accept.health.shape): a snapshot file's
    # entry that does not fit it is not judged (UNKNOWN for the source on that node, collect.load_snapshots).
    shape: Schema | None = None
