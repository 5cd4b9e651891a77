"""Findings and audit reports: what the checks produce and what the CLI prints."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclust.exitcodes import Nagios
from gpuclust.slurm.hostlist import fold

SEVERITY_ORDER = (Nagios.CRITICAL, Nagios.WARNING, Nagios.UNKNOWN, Nagios.OK)


@dataclass(frozen=True)
class Finding:
    """One result of one check. `nodes` may be empty (a partition- or QOS-level finding)."""

    check: str
    severity: Nagios
    message: str
    node_list: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, check: str, severity: Nagios, message: str, nodes: Iterable[str] = (),
             **details: Any) -> Finding:
        ordered = tuple(sorted(set(nodes), key=_natural))
        return cls(check, severity, message, ordered, details)

    @property
    def nodes(self) -> str:
        """Folded NodeSet text, e.g. node[1-3,5]; '' when no nodes."""
        return fold(self.node_list) if self.node_list else ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "check": self.check,
            "severity": self.severity.name,
            "nodes": self.nodes,
            "node_list": list(self.node_list),
            "message": self.message,
        }
        if self.details:
            out["details"] = self.details
        return out


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


@dataclass
class AuditReport:
    """Everything one partition's audit found, plus the node configuration a later --baseline diffs against."""

    partition: str
    findings: list[Finding] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> config fields + state
    cluster: str | None = None
    generated_at: str | None = None

    @property
    def status(self) -> Nagios:
        return Nagios.worst(*(f.severity for f in self.findings))

    def counts(self) -> dict[str, int]:
        out = {s.name: 0 for s in SEVERITY_ORDER}
        for finding in self.findings:
            out[finding.severity.name] += 1
        return out

    def add(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: (SEVERITY_ORDER.index(f.severity), f.check))

    def summary_line(self) -> str:
        counts = self.counts()
        parts = [f"{counts[s.name]} {s.name.lower()}" for s in SEVERITY_ORDER if counts[s.name]]
        return f"partition {self.partition}: {self.status.name} - {', '.join(parts) or 'no findings'}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "cluster": self.cluster,
            "generated_at": self.generated_at,
            "status": self.status.name,
            "exit_code": int(self.status),
            "summary": self.counts(),
            "findings": [f.as_dict() for f in self.sorted_findings()],
            "nodes": self.nodes,
        }


def worst(reports: Sequence[AuditReport]) -> Nagios:
    return Nagios.worst(*(r.status for r in reports))
