"""Text rendering of audit reports: a table per severity, worst first, with a Nagios-style first line."""

from __future__ import annotations

from collections.abc import Sequence

from gpuclust.output import format_table

from .findings import SEVERITY_ORDER, AuditReport


def render_report(report: AuditReport, problems_only: bool = False) -> str:
    lines = [report.summary_line()]
    for severity in SEVERITY_ORDER:
        if problems_only and severity.name == "OK":
            continue
        group = [f for f in report.sorted_findings() if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(severity.name)
        table = format_table(["CHECK", "NODES", "MESSAGE"], [(f.check, f.nodes or "-", f.message) for f in group])
        lines.extend("  " + line for line in table.splitlines())
    return "\n".join(lines)


def render_reports(reports: Sequence[AuditReport], problems_only: bool = False) -> str:
    return "\n\n".join(render_report(r, problems_only) for r in reports)
