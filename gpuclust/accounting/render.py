"""Report outputs: report.json, one CSV per table, a self-contained report.html, gpuclust.prom.

Every file is written to a temporary name in the output directory and renamed into place, so a reader
(a web server, node_exporter's textfile collector) never sees a half-written file.
"""

from __future__ import annotations

import html
import io
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gpuclust.accounting import svgplot
from gpuclust.accounting.economics_render import economics_html, economics_prom
from gpuclust.accounting.metrics import Report
from gpuclust.atomicfile import write_atomic
from gpuclust.cli.output import to_json
from gpuclust.errors import InputError, Problem

FORMATS = ("html", "csv", "json", "prom", "parquet")


def parse_formats(text: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = [item for item in items if item not in FORMATS]
    if unknown or not items:
        raise InputError(f"unknown format(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return items


def prepare_out_dir(out_dir: Path) -> None:
    """Create the output directory and prove a file can be written there, before any work is done: an
    unwritable --out (a path under a file, under /proc, no permission) is an InputError naming it."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gpuclust-probe.", dir=out_dir)
        os.close(fd)
        os.unlink(tmp)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(str(out_dir), None, f"cannot write the report here: {_why(exc)}")) from None


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write `path` whole or not at all (a temporary file renamed over it); an OSError becomes an InputError
    naming the path."""
    try:
        write_atomic(path, data, make_parents=True)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(str(path), None, f"cannot write: {_why(exc)}")) from None


def write_report(report: Report, out_dir: Path, formats: Iterable[str]) -> list[Path]:
    written: list[Path] = []
    for fmt in formats:
        if fmt == "json":
            path = out_dir / "report.json"
            atomic_write(path, to_json(report.data) + "\n")
            written.append(path)
        elif fmt in ("csv", "parquet"):
            for name, frame in report.tables.items():
                path = out_dir / f"{name}.{fmt}"
                if fmt == "csv":
                    atomic_write(path, frame.to_csv(index=False))
                else:
                    buf = io.BytesIO()
                    frame.to_parquet(buf, index=False)
                    atomic_write(path, buf.getvalue())
                written.append(path)
        elif fmt == "html":
            path = out_dir / "report.html"
            atomic_write(path, render_html(report))
            written.append(path)
        elif fmt == "prom":
            path = out_dir / "gpuclust.prom"
            atomic_write(path, render_prom(report))
            written.append(path)
    return written


# ---- Prometheus ---------------------------------------------------------------------------------------


def _label_value(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prom(report: Report) -> str:
    """Prometheus textfile-collector format (HELP/TYPE once per metric, gauges only)."""
    lines: list[str] = []
    seen: set[str] = set()

    def gauge(name: str, help_text: str, value: Any, labels: dict[str, Any] | None = None) -> None:
        if value is None:
            return
        metric = f"gpuclust_report_{name}"
        if metric not in seen:
            lines.append(f"# HELP {metric} {help_text}")
            lines.append(f"# TYPE {metric} gauge")
            seen.add(metric)
        label_text = ",".join(f'{k}="{_label_value(v)}"' for k, v in (labels or {}).items())
        lines.append(f"{metric}{{{label_text}}} {float(value):.10g}" if label_text else f"{metric} {float(value):.10g}")

    d = report.data
    gauge("period_start_timestamp_seconds", "Start of the report period.", report.period.start_epoch)
    gauge("period_end_timestamp_seconds", "End of the report period (exclusive).", report.period.end_epoch)
    for key in ("runs", "completed", "attempts", "retries", "gpu_hours", "useful_gpu_hours", "cost",
                "cost_per_completed_run", "unpriced_gpu_hours"):
        gauge(f"total_{key}", f"All runs attributed to the period: {key}.", d["totals"].get(key))
    for dim in ("account", "partition"):
        for row in d["runs"][f"by_{dim}"]:
            for key in ("runs", "completed", "attempts", "retries", "gpu_hours", "useful_gpu_hours", "cost",
                        "cost_per_completed_run"):
                gauge(f"{key}", f"Runs attributed to the period, per group: {key}.", row.get(key), {dim: row[dim]})
    for dim in ("partition", "account", "qos"):
        for row in d["queue_wait"][f"by_{dim}"]:
            for q, key in (("0.5", "median_s"), ("0.9", "p90_s"), ("1", "max_s")):
                gauge("queue_wait_seconds", "Queue wait (Start - Eligible) of attempts started in the period.",
                      row.get(key), {"by": dim, "group": row[dim], "quantile": q})
    sizing = d["sizing"]
    for key in ("effective_unit_cost", "useful_ratio", "completed_runs_per_gpu_month", "required_gpus"):
        gauge(f"sizing_{key}", f"Sizing: {key}.", sizing.get(key))
    gauge("input_rejected_rows", "Input rows that could not be parsed (listed in report.json).",
          d.get("input", {}).get("rejected_rows", 0))
    left = d.get("input", {}).get("left_out") or {}
    for reason in ("running", "not_started", "no_allocation"):
        if reason in left:
            gauge("input_left_out_rows", "Input rows that are no attempt (running, not started, no allocation).",
                  left[reason], {"reason": reason})
    for sample in economics_prom(d):  # (econ14: plain records; the writer emits them)
        gauge(sample.name, sample.help, sample.value, sample.labels)
    return "\n".join(lines) + "\n"


# ---- HTML ---------------------------------------------------------------------------------------------


def _plots(tables: Mapping[str, pd.DataFrame]) -> list[tuple[str, str | None]]:
    """The report's four charts as (title, inline SVG), or (title, None) when the table is empty."""
    plots: list[tuple[str, str | None]] = []

    qw = tables["queue_wait_by_partition"]
    if len(qw):
        series = [(label, qw[col].tolist()) for label, col in (("median", "median_s"), ("p90", "p90_s"),
                                                                ("max", "max_s"))]
        plots.append(("Queue wait per partition", svgplot.bar_chart(
            "Queue wait per partition", qw["partition"].tolist(), series, y_label="seconds")))
    else:
        plots.append(("Queue wait per partition", None))

    ra = tables["runs_by_account"]
    if len(ra):
        accounts = ra["account"].tolist()
        hours = [("allocated GPU-hours", ra["gpu_hours"].tolist()),
                 ("useful GPU-hours", ra["useful_gpu_hours"].tolist())]
        plots.append(("GPU-hours by account", svgplot.bar_chart(
            "GPU-hours by account", accounts, hours, y_label="GPU-hours")))
        cost = ra["cost_per_completed_run"].fillna(0.0).tolist()
        plots.append(("Cost per completed run", svgplot.bar_chart(
            "Cost per completed run by account", accounts, [("cost per completed run", cost)], y_label="cost",
            subtitle="(0 = no completed run)")))
    else:
        plots += [("GPU-hours by account", None), ("Cost per completed run", None)]

    tf = tables["top_failures"].head(15)
    if len(tf):
        labels = [f"{j} {s}" for j, s in zip(tf["job_id"], tf["state"], strict=True)]
        plots.append(("Top failures", svgplot.hbar_chart(
            "Top failures by GPU-hours", labels, tf["gpu_hours"].tolist(), x_label="GPU-hours")))
    else:
        plots.append(("Top failures", None))
    return plots


def _table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p><em>no rows</em></p>"
    return frame.to_html(index=False, escape=True, na_rep="null", float_format=lambda v: f"{v:,.4f}", border=0,
                         classes="t")


def render_html(report: Report) -> str:
    d = report.data
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>gpuclust accounting report {e(d['period']['start'])} to {e(d['period']['end'])}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:70em}table.t{border-collapse:collapse;margin:.5em 0 1.5em}"
        "table.t td,table.t th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "table.t th{background:#eee}dt{font-weight:bold;margin-top:.4em}.note{background:#fff4d6;padding:.5em}"
        "svg.chart{display:block;max-width:100%;height:auto}</style>",
        "</head><body>",
        "<h1>GPU accounting report</h1>",
        f"<p>Period: <b>{e(d['period']['start'])}</b> to <b>{e(d['period']['end'])}</b> (end exclusive).</p>",
    ]
    inp = d.get("input", {})
    for note in inp.get("notes", []):
        parts.append(f"<p class='note'>{e(note)}</p>")
    if inp.get("rejected_rows"):
        parts.append(f"<p class='note'>{int(inp['rejected_rows'])} input row(s) could not be parsed and are not "
                     "counted; see report.json input.problems.</p>")
    left = inp.get("left_out") or {}
    if left.get("rows"):
        parts.append(f"<p class='note'>{int(left['rows'])} row(s) are no attempt and count nowhere: "
                     f"{int(left['running'])} running (End Unknown), {int(left['not_started'])} not started, "
                     f"{int(left['no_allocation'])} ended without an allocation.</p>")
    parts.append("<h2>Totals</h2>" + _table_html(report.tables["totals"]))
    parts.append("<h2>Sizing</h2>" + _table_html(report.tables["sizing"]))
    for title, svg in _plots(report.tables):
        parts.append(f"<h2>{e(title)}</h2>")
        parts.append(svg if svg else "<p><em>no data</em></p>")
    for name, frame in report.tables.items():
        if name in ("totals", "sizing"):
            continue
        parts.append(f"<h3>{e(name.replace('_', ' '))}</h3>" + _table_html(frame))
    parts.append(economics_html(d))  # (econ14: the unit economics section)
    parts.append("<h2>Metric definitions</h2><dl>")
    for key, text in d["definitions"].items():
        parts.append(f"<dt>{e(key)}</dt><dd>{e(text)}</dd>")
    parts.append("</dl></body></html>")
    return "\n".join(parts)
