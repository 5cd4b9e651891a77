"""One findings model for every plane that judges (audit, accept report), and one Nagios mapping.

A Finding is one result of one check: a Nagios severity, a message, the nodes it is about (none for a
partition- or run-level finding), and optional details, job id and acceptance kind. A report's status is the
worst of its findings (gpuclust.exitcodes.Nagios.worst: a known failure beats not knowing). The first line a
command prints is a Nagios plugin status line, `SERVICE: STATUS - text | perfdata`, with performance data in
the plugin guidelines' format, `label=value[UOM];[warn];[crit];[min];[max]`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclust.exitcodes import Nagios
from gpuclust.output import terminal_safe
from gpuclust.slurm.hostlist import fold

# Worst first, the order reports list findings in. (Nagios.worst ranks UNKNOWN below WARNING.)
SEVERITY_ORDER = (Nagios.CRITICAL, Nagios.WARNING, Nagios.UNKNOWN, Nagios.OK)


def natural_key(name: str) -> tuple[Any, ...]:
    """node2 before node10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


@dataclass(frozen=True)
class Finding:
    """One result of one check. `node_list` may be empty (a partition-, QOS- or run-level finding)."""

    check: str
    severity: Nagios
    message: str
    node_list: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    job_id: str | None = None  # accept report: the Slurm job the finding comes from
    kind: str | None = None  # accept report: allreduce | pairwise | storage

    @classmethod
    def make(cls, check: str, severity: Nagios, message: str, nodes: Iterable[str] = (), *,
             job_id: str | None = None, kind: str | None = None, **details: Any) -> Finding:
        ordered = tuple(sorted(set(nodes), key=natural_key))
        return cls(check, severity, message, ordered, details, job_id, kind)

    @property
    def status(self) -> Nagios:
        """The severity under the name reports use for their own state."""
        return self.severity

    @property
    def nodes(self) -> str:
        """Folded NodeSet text, e.g. node[1-3,5]; '' when no nodes."""
        return fold(self.node_list) if self.node_list else ""

    @property
    def node(self) -> str | None:
        """The node of a one-node finding; None for a finding about no node or several."""
        return self.node_list[0] if len(self.node_list) == 1 else None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "check": self.check,
            "severity": self.severity.name,
            "nodes": self.nodes,
            "node_list": list(self.node_list),
            "message": self.message,
        }
        if self.job_id is not None or self.kind is not None:
            out["job_id"] = self.job_id
            out["kind"] = self.kind
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(str(data["check"]), Nagios[str(data["severity"])], str(data["message"]),
                   tuple(data.get("node_list") or ()), dict(data.get("details") or {}), data.get("job_id"),
                   data.get("kind"))


def worst(findings: Iterable[Finding]) -> Nagios:
    return Nagios.worst(*(f.severity for f in findings))


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    """{'CRITICAL': n, 'WARNING': n, 'UNKNOWN': n, 'OK': n}."""
    out = {s.name: 0 for s in SEVERITY_ORDER}
    for finding in findings:
        out[finding.severity.name] += 1
    return out


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first, then by check name (stable otherwise)."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.index(f.severity), f.check))


def counts_text(counted: dict[str, int]) -> str:
    """'1 critical, 2 warning' ('no findings' when all are zero)."""
    parts = [f"{counted[s.name]} {s.name.lower()}" for s in SEVERITY_ORDER if counted.get(s.name)]
    return ", ".join(parts) or "no findings"


# ---- Nagios performance data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Perf:
    """One performance datum: `label=value[UOM];[warn];[crit];[min];[max]` (trailing empty fields dropped)."""

    label: str
    value: float | int
    uom: str = ""
    warn: str | None = None  # a Nagios range, e.g. "1" or "10:"
    crit: str | None = None
    min: float | int | None = None
    max: float | int | None = None

    def __str__(self) -> str:
        label = terminal_safe(self.label)
        if re.search(r"[\s'=]", label):
            label = "'" + label.replace("'", "''") + "'"
        fields = [f"{_num(self.value)}{self.uom}", self.warn or "", self.crit or "",
                  "" if self.min is None else _num(self.min), "" if self.max is None else _num(self.max)]
        while len(fields) > 1 and fields[-1] == "":
            fields.pop()
        return f"{label}={';'.join(fields)}"


def _num(value: float | int) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.6g}"
    return str(int(value))


def perfdata(items: Sequence[Perf]) -> str:
    return " ".join(str(p) for p in items)


def status_line(service: str, status: Nagios, text: str, perf: Sequence[Perf] = ()) -> str:
    """`SERVICE: STATUS - text | perfdata`: the first line of a Nagios plugin's output. A '|' inside the text
    would start the performance data, so it is replaced; control characters and escape sequences (a node's
    or a user's text) are escaped (gpuclust.output.terminal_safe), so the line stays one line."""
    line = f"{terminal_safe(service)}: {status.name} - {terminal_safe(text).replace('|', '/')}"
    return f"{line} | {perfdata(perf)}" if perf else line


def finding_perf(counted: dict[str, int], prefix: str = "") -> list[Perf]:
    """critical/warning/unknown finding counts as performance data."""
    return [Perf(f"{prefix}critical", counted.get("CRITICAL", 0), min=0),
            Perf(f"{prefix}warning", counted.get("WARNING", 0), min=0),
            Perf(f"{prefix}unknown", counted.get("UNKNOWN", 0), min=0)]
