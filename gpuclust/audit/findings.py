"""Audit reports: the findings of one partition's checks (gpuclust.findings.Finding, the model every plane
shares), its figures, and the audit JSON contract (schema "gpuclust.audit/1", schemas/audit.schema.json).

The JSON is written by AuditReport.as_dict / audit_document and read back by AuditReport.from_dict /
read_audit_document (what `--baseline` does). Output written before the schema tag existed reads as version 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclust.exitcodes import Nagios
from gpuclust.findings import (
    SEVERITY_ORDER,
    Finding,
    Perf,
    counts_text,
    finding_perf,
    sort_findings,
    status_line,
)
from gpuclust.findings import counts as count_findings
from gpuclust.nagiosrange import Thresholds

SCHEMA = "gpuclust.audit/1"
SCHEMA_PREFIX = "gpuclust.audit/"

__all__ = ["SCHEMA", "SEVERITY_ORDER", "AuditReport", "Finding", "PartitionFigures", "audit_document",
           "read_audit_document", "worst"]


@dataclass(frozen=True)
class PartitionFigures:
    """What the partition holds, as Nagios performance data: nodes, GPUs configured and in use, nodes down
    (DOWN/FAIL/not responding) and drained (drained or draining, not down)."""

    nodes: int = 0
    gpus: int = 0
    gpus_used: int = 0
    down: int = 0
    drained: int = 0

    def perf(self) -> list[Perf]:
        return [Perf("nodes", self.nodes, min=0), Perf("gpus", self.gpus, min=0),
                Perf("gpus_used", self.gpus_used, min=0, max=self.gpus),
                Perf("down", self.down, min=0, max=self.nodes),
                Perf("drained", self.drained, min=0, max=self.nodes)]

    def as_dict(self) -> dict[str, int]:
        return {"nodes": self.nodes, "gpus": self.gpus, "gpus_used": self.gpus_used, "down": self.down,
                "drained": self.drained}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> PartitionFigures:
        data = data or {}
        return cls(**{k: int(data.get(k) or 0) for k in ("nodes", "gpus", "gpus_used", "down", "drained")})


@dataclass
class AuditReport:
    """Everything one partition's audit found, plus the node configuration a later --baseline diffs against."""

    partition: str
    findings: list[Finding] = field(default_factory=list)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> config fields + state
    cluster: str | None = None
    generated_at: str | None = None
    figures: PartitionFigures | None = None  # None: the audit could not look (Slurm unreachable, no partition)
    thresholds: Thresholds | None = None  # -w/-c on the unavailable (down + drained) nodes

    @property
    def status(self) -> Nagios:
        return Nagios.worst(*(f.severity for f in self.findings))

    def counts(self) -> dict[str, int]:
        return count_findings(self.findings)

    def add(self, findings: Iterable[Finding]) -> None:
        self.findings.extend(findings)

    def sorted_findings(self) -> list[Finding]:
        return sort_findings(self.findings)

    def perf(self) -> list[Perf]:
        gated = []
        if self.figures and self.thresholds:
            limits = self.thresholds.as_dict()
            gated = [Perf("unavailable", self.figures.down + self.figures.drained, warn=limits["warning"],
                          crit=limits["critical"], min=0, max=self.figures.nodes)]
        return [*(self.figures.perf() if self.figures else []), *gated, *finding_perf(self.counts())]

    def summary_line(self) -> str:
        """The Nagios status line: `partition gpu: CRITICAL - 1 critical, 2 warning | nodes=4;;;0 gpus=16;;;0 ...`."""
        return status_line(f"partition {self.partition}", self.status, counts_text(self.counts()), self.perf())

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "partition": self.partition,
            "cluster": self.cluster,
            "generated_at": self.generated_at,
            "status": self.status.name,
            "exit_code": int(self.status),
            "summary": self.counts(),
            "figures": self.figures.as_dict() if self.figures else None,
            "thresholds": self.thresholds.as_dict() if self.thresholds else None,
            "findings": [f.as_dict() for f in self.sorted_findings()],
            "nodes": self.nodes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditReport:
        """One partition's report from its JSON (as_dict's output; also output from before the schema tag)."""
        _check_schema(data)
        nodes = data.get("nodes") or {}
        if not isinstance(nodes, dict) or not all(isinstance(v, dict) for v in nodes.values()):
            raise ValueError(f"partition {data.get('partition')}: 'nodes' is not a map of node objects")
        findings = data.get("findings") or []
        try:
            parsed = [Finding.from_dict(f) for f in findings]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"partition {data.get('partition')}: a finding lacks {exc}") from None
        figures = data.get("figures")
        return cls(str(data.get("partition", "")), parsed, nodes, data.get("cluster"), data.get("generated_at"),
                   PartitionFigures.from_dict(figures) if isinstance(figures, dict) else None)


def _check_schema(data: Any) -> None:
    if not isinstance(data, dict):
        raise ValueError("not a gpuclust audit JSON object")
    tag = data.get("schema")
    if tag is not None and tag != SCHEMA:
        raise ValueError(f"unsupported audit JSON schema {tag!r} (this gpuclust reads {SCHEMA!r})")


def worst(reports: Sequence[AuditReport]) -> Nagios:
    return Nagios.worst(*(r.status for r in reports))


def audit_document(reports: Sequence[AuditReport], all_partitions: bool) -> dict[str, Any]:
    """The `audit partition --json` document: one report, or with --all every report under `partitions`."""
    if not all_partitions:
        return reports[0].as_dict()
    status = worst(reports)
    return {"schema": SCHEMA, "status": status.name, "exit_code": int(status),
            "partitions": [r.as_dict() for r in reports]}


def read_audit_document(data: Any) -> list[AuditReport]:
    """The reports in an `audit partition --json` document (single or --all). Raises ValueError."""
    _check_schema(data)
    if "partitions" in data:
        reports = data["partitions"]
        if not isinstance(reports, list):
            raise ValueError("'partitions' is not a list")
        return [AuditReport.from_dict(r) for r in reports]
    return [AuditReport.from_dict(data)]
