"""Text rendering of audit reports: a Nagios status line with performance data, then a table per severity,
worst first."""

from __future__ import annotations

from collections.abc import Sequence

from gpuclust.findings import Perf, status_line
from gpuclust.output import format_table

from .findings import SEVERITY_ORDER, AuditReport, counts_text, worst

REASON_MAX = 240  # the status line's reason; the full findings follow it


def reason(report: AuditReport) -> str:
    """Why the partition has its status, for the status line: its first finding at that level, and how many
    more there are ('' when OK)."""
    if report.status.name == "OK":
        return ""
    level = [f for f in report.sorted_findings() if f.severity == report.status]
    if not level:
        return ""
    top = level[0]
    text = f"[{top.check}] {top.nodes + ': ' if top.nodes else ''}{top.message}"
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 3] + "..."
    return text + (f" (and {len(level) - 1} more)" if len(level) > 1 else "")


def status_text(report: AuditReport) -> str:
    """The status line, the reason first: `partition gpu: WARNING - [node.drain] node2: drained; 1 warning |
    perfdata`."""
    why = reason(report)
    counts = counts_text(report.counts())
    return status_line(f"partition {report.partition}", report.status, f"{why}; {counts}" if why else counts,
                       report.perf())


def render_report(report: AuditReport, problems_only: bool = False, *, first: bool = True) -> str:
    """`first`: this report's summary is the output's first line and carries the performance data (Nagios
    reads performance data on the first line; a later '|' would turn the rest of the text into data)."""
    summary = status_text(report)
    lines = [summary if first else summary.split(" | ", 1)[0]]
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


def overall_line(reports: Sequence[AuditReport]) -> str:
    """`audit: CRITICAL - gpu CRITICAL, debug OK | gpu_nodes=4;;;0 ...`: several partitions in one line."""
    text = ", ".join(f"{r.partition} {r.status.name}" for r in reports)
    failing = [r for r in reports if r.status == worst(reports) and reason(r)]
    if failing:
        text += f"; {failing[0].partition}: {reason(failing[0])}"
    perf = [Perf(f"{r.partition}_{p.label}", p.value, p.uom, p.warn, p.crit, p.min, p.max)
            for r in reports for p in r.perf()]
    return status_line("audit", worst(reports), text, perf)


def render_reports(reports: Sequence[AuditReport], problems_only: bool = False) -> str:
    if len(reports) == 1:
        return render_report(reports[0], problems_only)
    body = "\n\n".join(render_report(r, problems_only, first=False) for r in reports)
    return f"{overall_line(reports)}\n\n{body}"
