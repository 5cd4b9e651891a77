"""`gpuclust report show`: the built report as a compact terminal answer, without writing HTML.

It computes nothing of its own: every figure is read from the Report that `report build` makes (report.json's
keys), and each carries its glossary name (shared/gpu-hours-glossary.md) and the report.json key it comes from,
so there is one definition of each figure. A figure the report cannot give (no utilisation telemetry, no
AllocTRES) is None here and "unknown" on screen, never 0; a figure the report does not hold for a grouping (runs
per user) is None and "n/a".

Headline (the questions first): cost per completed run, completed-run share of allocated GPU-hours, busy share and
coverage, held-idle GPU-hours, the top failures by GPU-hours. Then a table per partition, account or user.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics import Report, deprecated
from gpuclust.accounting.figures.metrics.assembly import records
from gpuclust.errors import InputError
from gpuclust.output import terminal_safe

BY = ("partition", "account", "user")
ROWS = ("jobs", "runs", "findings")
UNKNOWN = "unknown"
NOT_HELD = "n/a"

# Per-group columns: (key in the summary row, glossary name on screen), the figures' `show` in figures.catalog.
# Keys are report.json's: runs.by_<dim> (RUN_KEYS: the runs' figures it shows) and gpu_use.by_<dim> (USE_KEYS: the
# use figures a row carries, in this order, in --format json).
GROUP_COLUMNS: tuple[tuple[str, str], ...] = tuple((f.name, str(f.show)) for f in catalog.show_columns())
RUN_KEYS = tuple(f.name for f in catalog.figures(catalog.RUNS) if f.show is not None)
USE_KEYS = ("allocated_gpu_hours", "covered_gpu_hours", "coverage", "busy_gpu_hours", "held_idle_gpu_hours",
            "util_mean_pct", "unknown_jobs")
FAILURE_KEYS = ("job_id", "user", "account", "partition", "job_name", "state", "exit_code", "gpu_hours", "cost")
# Figures made of AllocTRES GPUs: unknown (None) when the dump has no AllocTRES column at all, where the report
# sums them to 0 and names the gap in input.unknown.
GPU_KEYS = tuple(key for key in RUN_KEYS if catalog.figure(catalog.RUNS, key).unit in (catalog.GPU_HOURS,
                                                                                        catalog.MONEY))
MONEY_KEYS = frozenset(f.name for f in catalog.figures(catalog.RUNS) if f.unit == catalog.MONEY)
COUNT_KEYS = frozenset(f.name for f in catalog.show_columns() if f.unit == catalog.COUNT)
RATIO_KEYS = frozenset(f.name for f in catalog.show_columns() if f.unit == catalog.RATIO)
_PER_RUN = catalog.figure(catalog.RUNS, "cost_per_completed_run")
_SHARE = catalog.figure(catalog.SIZING, "completed_run_share_of_allocated")
_COVERAGE = catalog.figure(catalog.GPU_USE, "coverage")
_HELD_IDLE = catalog.figure(catalog.GPU_USE, "held_idle_gpu_hours")


@dataclass(frozen=True)
class Figure:
    """One headline figure: its glossary name, the report.json key it is read from, its value (None: see note)."""

    name: str
    key: str
    value: float | None
    unit: str
    note: str = ""
    absent: str = UNKNOWN  # what None means: unknown (the input cannot give it) or n/a (no price, nothing to divide)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "value": self.value, "unit": self.unit, "note": self.note,
                "absent": self.absent if self.value is None else None}


@dataclass
class Summary:
    cluster: str | None
    period: dict[str, str]
    source: str | None
    currency: str | None
    empty: bool
    gpus_unknown: bool = False  # the input has no AllocTRES: GPU-hours and cost are unknown everywhere
    headline: list[Figure] = field(default_factory=list)
    top_failures: list[dict[str, Any]] = field(default_factory=list)
    by: str = "partition"
    groups: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster, "period": self.period, "source": self.source, "currency": self.currency,
            "empty": self.empty, "gpus_unknown": self.gpus_unknown,
            "headline": [f.as_dict() for f in self.headline],
            "top_failures": self.top_failures,
            "by": self.by,
            "columns": [{"key": key, "name": name} for key, name in GROUP_COLUMNS],
            "groups": self.groups,
            "notes": self.notes,
        }


def alloc_unknown(report: Report) -> tuple[bool, int]:
    """(no attempt has its GPUs: the dump lacks AllocTRES; how many attempts lack them) from input.unknown."""
    entries = [e for e in (report.data.get("input") or {}).get("unknown") or [] if e.get("missing") == "AllocTRES"]
    return any(e.get("count") is None for e in entries), sum(e.get("count") or 0 for e in entries)


def _use(report: Report) -> dict[str, Any]:
    use = report.data.get("gpu_use")
    return use if isinstance(use, dict) else {}


def summarize(report: Report, by: str = "partition", top: int = 5) -> Summary:
    """The headline answers and the per-`by` table of a built report (pipeline.build)."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")
    data = report.data
    t = data["totals"]
    sizing = data.get("sizing") or {}
    use = _use(report)
    ut = use.get("totals") or {}
    currency = data.get("currency")
    none_known, some_unknown = alloc_unknown(report)
    if none_known:
        t = {**t, **{key: None for key in GPU_KEYS}}
        sizing = {**sizing, "completed_run_share_of_allocated": None}
    summary = Summary(cluster=data.get("cluster"), period=dict(data["period"]),
                      source=(data.get("input") or {}).get("source"), currency=currency,
                      empty=not t["runs"], gpus_unknown=none_known, by=by)

    if none_known:
        cost_note = "unknown: the input has no AllocTRES (GPUs)"
    elif t["cost"] is None:
        cost_note = "no price configured"
    elif not t["completed"]:
        cost_note = "no completed run"
    else:
        cost_note = f"cost {_num(t['cost'])} over {t['completed']} completed run(s), failed and retried attempts included"
    if some_unknown and not none_known:
        cost_note += f"; a lower bound: {some_unknown} attempt(s) without AllocTRES are unknown"
    unknown_jobs = ut.get("unknown_jobs")
    coverage = ut.get("coverage")
    why_unknown = (f"{unknown_jobs} job(s) without utilisation telemetry" if unknown_jobs else
                   "no utilisation telemetry")
    busy = ut.get("busy_gpu_hours")
    held = ut.get("held_idle_gpu_hours")
    summary.headline = [
        Figure(str(_PER_RUN.glossary), "totals.cost_per_completed_run", t["cost_per_completed_run"],
               currency or "", cost_note, UNKNOWN if none_known else NOT_HELD),
        Figure(str(_SHARE.glossary), "sizing.completed_run_share_of_allocated",
               sizing.get("completed_run_share_of_allocated"), "ratio",
               f"completed-run {_num(t['completed_run_gpu_hours'])} of allocated {_num(t['gpu_hours'])} GPU-h"
               + (f"; {some_unknown} attempt(s) without AllocTRES left out" if some_unknown and not none_known else "")),
        Figure("busy share of covered GPU-hours", "gpu_use.totals.util_mean_pct",
               None if ut.get("util_mean_pct") is None else ut["util_mean_pct"] / 100, "ratio",
               f"busy {_num(busy)} GPU-h" if busy is not None else f"busy unknown: {why_unknown}"),
        Figure(str(_COVERAGE.glossary), "gpu_use.totals.coverage", coverage, "ratio",
               f"covered {_num(ut.get('covered_gpu_hours'))} of allocated {_num(ut.get('allocated_gpu_hours'))} "
               f"GPU-h" + (f"; {why_unknown}" if unknown_jobs else "") if ut else
               "unknown: the input has no AllocTRES (GPUs)" if none_known else "no GPU job in the period"),
        Figure(str(_HELD_IDLE.glossary), "gpu_use.totals.held_idle_gpu_hours", held, "GPU-h",
               f"under {use.get('idle_threshold_pct', 10):g}% for at least {use.get('idle_min_s', 0):g} s, "
               f"over the covered part (coverage {_pct(coverage)})" if held is not None else
               f"unknown: {why_unknown}"),
    ]
    summary.top_failures = [{k: f.get(k) for k in FAILURE_KEYS} for f in data.get("top_failures", [])[:top]]
    summary.groups = group_rows(report, by)

    info = data.get("input") or {}
    for entry in info.get("unknown") or []:
        count = "every attempt" if entry.get("count") is None else f"{entry['count']} attempt(s)"
        summary.notes.append(f"unknown for {count}, no {entry['missing']}: {entry['unknown']}")
    if by == "user":
        summary.notes.append("per user the report holds use figures only (gpu_use.by_user): allocated GPU-h are "
                             "of the jobs that ended in the period; runs, completed-run and cost are per account "
                             "and partition (n/a here)")
    return summary


def group_rows(report: Report, by: str) -> list[dict[str, Any]]:
    """One row per group: report.json runs.by_<by> joined with gpu_use.by_<by> on the group's name."""
    runs = {str(r[by]): r for r in (report.data.get("runs") or {}).get(f"by_{by}", [])} if by != "user" else {}
    use = {str(r[by]): r for r in _use(report).get(f"by_{by}", [])}
    none_known, _ = alloc_unknown(report)
    rows = []
    for name in sorted(set(runs) | set(use)):
        row: dict[str, Any] = {by: name}
        r, u = runs.get(name), use.get(name)
        for key in RUN_KEYS:
            if by == "user" or (none_known and key in GPU_KEYS):
                row[key] = None  # not in the report per user
            elif r is not None:
                row[key] = r.get(key)
            else:  # a group whose jobs belong to no run attributed to the period: no runs, nothing completed
                row[key] = None if key in MONEY_KEYS else 0
        for key in USE_KEYS:
            # a group without GPU jobs: nothing allocated, nothing to cover (unknown_jobs 0)
            row[key] = u.get(key) if u is not None else (0 if key in ("allocated_gpu_hours", "unknown_jobs") else None)
        if by == "user":
            row["gpu_hours"] = row["allocated_gpu_hours"]
        rows.append(deprecated.with_run_keys(row))
    return rows


def row_records(report: Report, rows: str, by: str = "partition") -> list[dict[str, Any]]:
    """Row-level records for log shippers, each with `row`, `cluster`, `period_start`, `period_end` first.

    jobs: one per job with GPUs that ended in the period (the gpu_use_jobs table); runs: the runs table per
    `by` group (the report keeps no per-run rows); findings: the top failures (kind failure) and the jobs that held
    GPUs idle longest (kind held-idle)."""
    data = report.data
    head = {"cluster": data.get("cluster"), "period_start": data["period"]["start"],
            "period_end": data["period"]["end"]}
    out: list[dict[str, Any]] = []
    if rows == "jobs":
        frame = report.tables.get("gpu_use_jobs")
        split = data.get("input", {}).get("partitioned")
        if frame is None and split:
            raise InputError(f"--rows jobs: the period holds more stored rows than one build keeps per job (it was "
                             f"built in {split['buckets']} buckets): give a shorter period, e.g. --since 7d")
        for rec in records(frame) if frame is not None else []:
            out.append({"row": "job", **head, **rec})
    elif rows == "runs":
        for rec in group_rows(report, by):
            out.append({"row": "runs_group", "by": by, **head, **rec})
    elif rows == "findings":
        for rec in data.get("top_failures", []):
            out.append({"row": "finding", "kind": "failure", **head, **rec})
        for rec in _use(report).get("worst_held_idle", []):
            out.append({"row": "finding", "kind": "held-idle", **head, **rec})
    else:
        raise ValueError(f"rows must be one of {', '.join(ROWS)}, got {rows!r}")
    return out


def jsonl(records_: list[dict[str, Any]]) -> str:
    """One compact JSON object per line (no NaN: records() made them null)."""
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":"), default=str) + "\n" for r in records_)


# ---- text ----------------------------------------------------------------------------------------------


def _num(value: Any) -> str:
    if value is None:
        return UNKNOWN
    v = float(value)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _pct(value: Any) -> str:
    return UNKNOWN if value is None else f"{float(value):.1%}"


def _cell(key: str, value: Any, by: str, gpus_unknown: bool) -> str:
    if value is None:
        if by == "user" and key in RUN_KEYS:
            return NOT_HELD
        if key in MONEY_KEYS and not gpus_unknown:
            return NOT_HELD  # no price configured, or no completed run: not an input gap
        return UNKNOWN
    if key in RATIO_KEYS:
        return _pct(value)
    if key in COUNT_KEYS:
        return str(int(value))
    return _num(value)


def _failure_cost(failure: dict[str, Any]) -> str:
    if failure.get("cost") is not None:
        return _num(failure["cost"])
    return UNKNOWN if failure.get("gpu_hours") is None else NOT_HELD  # unknown GPUs, or no price


def table(headers: list[str], rows: list[list[str]], right: set[int], style: Any = None) -> list[str]:
    """An aligned plain-text table: numbers right-aligned, the header underlined with dashes."""
    # cells carry what users wrote (job names, labels): an escape sequence in one is shown, never obeyed
    headers = [terminal_safe(c) for c in headers]
    rows = [[terminal_safe(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    head = line(headers)
    return [style(head) if style else head, "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def render_text(summary: Summary, style: Any = None) -> str:
    """The summary as text. `style(text)` marks headings (the CLI passes a bold click.style on a terminal;
    click.echo drops the escapes when the output is piped)."""
    def h(text: str) -> str:
        return style(text) if style else text

    p = summary.period
    lines = [h(terminal_safe(f"{summary.cluster or 'cluster'} {p['start']} .. {p['end']}"))
             + f"  ({terminal_safe(summary.source)})"]
    if summary.empty:
        lines.append(f"no job attempts in the period {p['start']} .. {p['end']}")
        return "\n".join(lines)
    lines += ["", h("Answers")]
    width = max(len(f.name) for f in summary.headline)
    for f in summary.headline:
        if f.value is None:
            value = f.absent
        elif f.unit == "ratio":
            value = _pct(f.value)
        else:
            value = f"{_num(f.value)} {f.unit}".rstrip()
        lines.append(f"  {f.name.ljust(width)}  {value}" + (f"  ({f.note})" if f.note else ""))
    lines += ["", h(f"Top failures by GPU-hours ({len(summary.top_failures)})")]
    if summary.top_failures:
        heads = ["job", "user", "account", "partition", "name", "state", "exit", "GPU-h", "cost"]
        rows = [[str(f.get(k) if f.get(k) is not None else "") for k in FAILURE_KEYS[:7]]
                + [_num(f.get("gpu_hours")), _failure_cost(f)]
                for f in summary.top_failures]
        lines += ["  " + x for x in table(heads, rows, {7, 8})]
    else:
        lines.append("  none: every attempt that ended in the period completed")
    lines += ["", h(f"By {summary.by}")]
    heads = [summary.by, *(name for _, name in GROUP_COLUMNS)]
    rows = [[str(g[summary.by]), *(_cell(key, g.get(key), summary.by, summary.gpus_unknown) for key, _ in GROUP_COLUMNS)]
            for g in summary.groups]
    lines += ["  " + x for x in table(heads, rows, set(range(1, len(heads))))]
    if summary.currency:
        lines.append(f"  (cost in {summary.currency})")
    for note in summary.notes:
        lines.append(f"note: {terminal_safe(note)}")
    return "\n".join(lines)
