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
import textwrap
from dataclasses import dataclass, field
from typing import Any

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics import Report, deprecated
from gpuclust.accounting.figures.metrics.assembly import records
from gpuclust.errors import InputError
from gpuclust.output import terminal_safe

BY = ("partition", "account", "user")
ROWS = ("jobs", "runs", "findings")
# --sort: the groups' order, the largest first (name: by name). cost falls back to held-idle GPU-hours where no
# group has a cost (no price), so the groups that cost or waste most always come first.
SORT = ("cost", "held-idle", "gpu-hours", "runs", "name")
SORT_KEYS = {"cost": "cost", "held-idle": "held_idle_gpu_hours", "gpu-hours": "gpu_hours", "runs": "runs"}
GROUPS_SHOWN = 10  # groups in the text table without --top (every group is in --format json)
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
_COST = catalog.figure(catalog.RUNS, "cost")
_MEDIAN_WAIT = catalog.figure(catalog.QUEUE_WAIT, "median_s")
_P90_WAIT = catalog.figure(catalog.QUEUE_WAIT, "p90_s")
_WAIT_ATTEMPTS = catalog.figure(catalog.QUEUE_WAIT, "jobs")


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
    """`report show`'s answer: the headline figures, the top failures, the table per partition, account or user."""

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
    total_cost: Figure | None = None  # the answers beside the headline: the period's cost, the queue wait
    queue_wait: list[dict[str, Any]] = field(default_factory=list)  # per partition, most attempts first
    sort: str = "name"

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
            "total_cost": None if self.total_cost is None else self.total_cost.as_dict(),
            "queue_wait": self.queue_wait,
            "sort": self.sort,
        }


def alloc_unknown(report: Report) -> tuple[bool, int]:
    """(no attempt has its GPUs: the dump lacks AllocTRES; how many attempts lack them) from input.unknown."""
    entries = [e for e in (report.data.get("input") or {}).get("unknown") or [] if e.get("missing") == "AllocTRES"]
    return any(e.get("count") is None for e in entries), sum(e.get("count") or 0 for e in entries)


def _use(report: Report) -> dict[str, Any]:
    use = report.data.get("gpu_use")
    return use if isinstance(use, dict) else {}


def summarize(report: Report, by: str = "partition", top: int = 5, sort: str = "cost") -> Summary:
    """The headline answers and the per-`by` table of a built report (pipeline.build), its groups in `sort`
    order (SORT)."""
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")
    if sort not in SORT:
        raise ValueError(f"sort must be one of {', '.join(SORT)}, got {sort!r}")
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
    summary.total_cost = Figure(str(_COST.glossary), "totals.cost", t["cost"], currency or "",
                                "all attempts of the period's runs, failed and retried included"
                                if t["cost"] is not None else "unknown: the input has no AllocTRES (GPUs)"
                                if none_known else "no price configured",
                                UNKNOWN if none_known else NOT_HELD)
    summary.queue_wait = sorted(
        ({"partition": r.get("partition"), _WAIT_ATTEMPTS.name: r.get(_WAIT_ATTEMPTS.name),
          _MEDIAN_WAIT.name: r.get(_MEDIAN_WAIT.name), _P90_WAIT.name: r.get(_P90_WAIT.name)}
         for r in (data.get("queue_wait") or {}).get("by_partition") or []),
        key=lambda r: (-(r[_WAIT_ATTEMPTS.name] or 0), str(r["partition"])))
    summary.top_failures = [{k: f.get(k) for k in FAILURE_KEYS} for f in data.get("top_failures", [])[:top]]
    summary.groups, summary.sort = sort_groups(group_rows(report, by), by, sort)

    info = data.get("input") or {}
    for entry in info.get("unknown") or []:
        count = "every attempt" if entry.get("count") is None else f"{entry['count']} attempt(s)"
        summary.notes.append(f"unknown for {count}, no {entry['missing']}: {entry['unknown']}")
    if by == "user" and "by_user" not in (data.get("runs") or {}):
        summary.notes.append("per user the report holds use figures only (gpu_use.by_user): allocated GPU-h are "
                             "of the jobs that ended in the period; runs, completed-run and cost are per account "
                             "and partition (n/a here)")
    return summary


def sort_groups(rows: list[dict[str, Any]], by: str, sort: str) -> tuple[list[dict[str, Any]], str]:
    """The groups in `sort` order, the largest first (unknown last, then by name), and the order used: cost
    where no group has a cost is held-idle GPU-hours (then GPU-hours)."""
    used = sort
    if sort == "cost" and not any(r.get("cost") is not None for r in rows):
        used = "held-idle" if any(r.get("held_idle_gpu_hours") is not None for r in rows) else "gpu-hours"
    if used == "name":
        return sorted(rows, key=lambda r: str(r[by])), used
    key = SORT_KEYS[used]

    def order(r: dict[str, Any]) -> tuple[int, float, str]:
        value = r.get(key)
        return (1, 0.0, str(r[by])) if value is None else (0, -float(value), str(r[by]))

    return sorted(rows, key=order), used


def group_rows(report: Report, by: str) -> list[dict[str, Any]]:
    """One row per group: report.json runs.by_<by> joined with gpu_use.by_<by> on the group's name."""
    held = f"by_{by}" in (report.data.get("runs") or {})  # (runs per user: reports from this version on)
    runs = {str(r[by]): r for r in (report.data.get("runs") or {}).get(f"by_{by}", [])}
    use = {str(r[by]): r for r in _use(report).get(f"by_{by}", [])}
    none_known, _ = alloc_unknown(report)
    rows = []
    for name in sorted(set(runs) | set(use)):
        row: dict[str, Any] = {by: name}
        r, u = runs.get(name), use.get(name)
        for key in RUN_KEYS:
            if not held or (none_known and key in GPU_KEYS):
                row[key] = None  # not in the report for this grouping
            elif r is not None:
                row[key] = r.get(key)
            else:  # a group whose jobs belong to no run attributed to the period: no runs, nothing completed
                row[key] = None if key in MONEY_KEYS else 0
        for key in USE_KEYS:
            # a group without GPU jobs: nothing allocated, nothing to cover (unknown_jobs 0)
            row[key] = u.get(key) if u is not None else (0 if key in ("allocated_gpu_hours", "unknown_jobs") else None)
        if not held:
            row["gpu_hours"] = row["allocated_gpu_hours"]
        rows.append(deprecated.with_run_keys(row))
    return rows


def row_records(report: Report, rows: str, by: str = "partition") -> list[dict[str, Any]]:
    """Row-level records for log shippers, each with `row`, `cluster`, `period_start`, `period_end` first.

    jobs: one per job with GPUs that ended in the period (the gpu_use_jobs table); runs: the runs table per
    `by` group (the report keeps no per-run rows); findings: the top failures (kind failure), the jobs that held
    GPUs idle longest (kind held-idle), then every waste finding (kind idle_gpu, idle_stretch, gpu_too_large,
    time_limit, cpu_share, mem_share, multi_node: figures/findings.py) with its evidence, advice and cost."""
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
        # then every waste detector's finding (figures/findings.py), the most costly first, its evidence parsed
        frame = report.tables.get("findings")
        for rec in records(frame) if frame is not None else []:
            out.append({"row": "finding", **head, **rec, "evidence": json.loads(rec["evidence"])})
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


def _cell(key: str, value: Any, by: str, gpus_unknown: bool, decimals: int | None = None) -> str:
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
    return _num(value) if decimals is None else _fixed(value, decimals)


def column_decimals(values: list[Any]) -> int:
    """One number of decimals for a column of figures, so that it reads alike (never 3.00 beside 9): none when
    all are whole or the largest is 100 or more, 1 from 10, else 2."""
    known = [abs(float(v)) for v in values if v is not None]
    if not known or all(v.is_integer() for v in known) or max(known) >= 100:
        return 0
    return 1 if max(known) >= 10 else 2


def _fixed(value: Any, decimals: int) -> str:
    return f"{float(value):,.{decimals}f}"


def _failure_cost(failure: dict[str, Any]) -> str:
    if failure.get("cost") is not None:
        return _num(failure["cost"])
    return UNKNOWN if failure.get("gpu_hours") is None else NOT_HELD  # unknown GPUs, or no price


ELLIPSIS = "\u2026"
NAME_WIDTH = 24  # a group's or job's name beyond this is cut (…) where the terminal is narrow
# Where the table is wider than the terminal, these columns go first (the answers above carry busy, coverage and
# cost per completed run for the whole cluster); --wide shows every one.
FIT_DROP = ("unknown_jobs", "completed_run_gpu_hours", "coverage", "busy_gpu_hours", "completed",
            "cost_per_completed_run", "held_idle_gpu_hours", "runs", "gpu_hours")
FAILURE_DROP = (2, 6, 3, 4, 1)  # top failures: account, exit, partition, name, user


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


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(1, width - 1)] + ELLIPSIS


def fit_table(headers: list[str], rows: list[list[str]], right: set[int], width: int | None,
              drop: tuple[int, ...], cut: tuple[int, ...] = (0,), style: Any = None) -> tuple[list[str], list[int]]:
    """table() within `width` characters (None: any width): the columns `drop` names (in that order) are left
    out until it fits, then the text of the columns `cut` names is cut to fit. Returns the lines (indented by
    two) and the columns left out."""
    keep = list(range(len(headers)))
    left_out: list[int] = []

    def render(cells_cut: int | None) -> list[str]:
        def cells(r: list[str]) -> list[str]:
            return [_cut(terminal_safe(r[i]), cells_cut) if cells_cut and i in cut else r[i] for i in keep]
        return ["  " + x for x in table(cells(headers), [cells(r) for r in rows],
                                        {k for k, i in enumerate(keep) if i in right}, style)]

    lines = render(None)
    if width is None:
        return lines, left_out
    for i in drop:
        if max(len(x) for x in lines) <= width:
            break
        if i in keep and len(keep) > 1:
            keep.remove(i)
            left_out.append(i)
            lines = render(None)
    if max(len(x) for x in lines) > width:
        lines = render(NAME_WIDTH)
        over = max(len(x) for x in lines) - width
        if over > 0:
            lines = render(max(4, NAME_WIDTH - over))
    return lines, left_out


def _wrap(text: str, width: int | None, indent: str = "", more: str = "  ") -> list[str]:
    """`text` as lines of at most `width` characters, broken at words (None: one line)."""
    if width is None:
        return [indent + text]
    return textwrap.wrap(text, width=max(20, width), initial_indent=indent, subsequent_indent=indent + more,
                         break_long_words=True, break_on_hyphens=False) or [indent]


def _value(f: Figure) -> str:
    if f.value is None:
        return f.absent
    if f.unit == "ratio":
        return _pct(f.value)
    return f"{_num(f.value)} {f.unit}".rstrip()


def _duration(seconds: Any) -> str:
    """Seconds as people read a wait: 45s, 12m 5s, 1h 23m, 2d 3h (unknown: unknown)."""
    if seconds is None:
        return UNKNOWN
    s = int(round(float(seconds)))
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


WAIT_SHOWN = 4  # partitions whose queue wait the answers show (most attempts first)


def render_text(summary: Summary, style: Any = None, width: int | None = None, wide: bool = False,
                groups_shown: int | None = None) -> str:
    """The summary as text. `style(text)` marks headings (the CLI passes a bold click.style on a terminal;
    click.echo drops the escapes when the output is piped). `width`: the terminal's columns (None: any
    width, every column): no line is longer, the group table keeps the columns that fit (the others with
    `wide`) under short headers, and notes wrap at words. `groups_shown`: the groups listed (None: all)."""
    def h(text: str) -> str:
        return style(text) if style else text

    narrow = width is not None and not wide
    fit = width if narrow else None
    p = summary.period
    title = terminal_safe(f"{summary.cluster or 'cluster'} {p['start']} .. {p['end']}")
    source = f"({terminal_safe(summary.source)})"
    if fit is not None and len(title) + 2 + len(source) > fit:
        lines = [h(title), *_wrap(source, fit, "  ")]
    else:
        lines = [h(title) + f"  {source}"]
    if summary.empty:
        lines.append(f"no job attempts in the period {p['start']} .. {p['end']}")
        return "\n".join(lines)
    lines += ["", h("Answers")]
    answers: list[tuple[str, str, str]] = []
    for f in summary.headline:
        answers.append((f.name, _value(f), f.note))
        if f is summary.headline[0] and summary.total_cost is not None:
            answers.append((summary.total_cost.name, _value(summary.total_cost), summary.total_cost.note))
    for w in summary.queue_wait[:WAIT_SHOWN]:
        answers.append((f"{_MEDIAN_WAIT.glossary}, {terminal_safe(str(w['partition']))}",
                        _duration(w[_MEDIAN_WAIT.name]),
                        f"{_P90_WAIT.glossary} {_duration(w[_P90_WAIT.name])}; "
                        f"{w[_WAIT_ATTEMPTS.name] or 0} attempt(s) started"))
    if len(summary.queue_wait) > WAIT_SHOWN:
        answers.append((str(_MEDIAN_WAIT.glossary), "",
                        f"{len(summary.queue_wait) - WAIT_SHOWN} more partition(s): --format json"))
    name_w = max(len(name) for name, _, _ in answers)
    for name, value, note in answers:
        head = f"  {name.ljust(name_w)}  {value}".rstrip()
        if fit is None or len(head) + len(note) + 4 <= fit:
            lines.append(head + (f"  ({note})" if note else ""))
        else:
            lines.append(head if len(head) <= fit else _wrap(head, fit)[0])
            if note:
                lines += _wrap(f"({note})", fit, "      ", " ")
    lines += ["", h(f"Top failures by GPU-hours ({len(summary.top_failures)})")]
    if summary.top_failures:
        heads = ["job", "user", "account", "partition", "name", "state", "exit", "GPU-h", "cost"]
        places = column_decimals([f.get("gpu_hours") for f in summary.top_failures])
        money = column_decimals([f.get("cost") for f in summary.top_failures])
        rows = [[str(f.get(k) if f.get(k) is not None else "") for k in FAILURE_KEYS[:7]]
                + [UNKNOWN if f.get("gpu_hours") is None else _fixed(f["gpu_hours"], places),
                   _fixed(f["cost"], money) if f.get("cost") is not None else _failure_cost(f)]
                for f in summary.top_failures]
        got, _ = fit_table(heads, rows, {7, 8}, fit, FAILURE_DROP, cut=(1, 2, 3, 4))
        lines += got
    else:
        lines.append("  none: every attempt that ended in the period completed")
    groups = summary.groups if groups_shown is None else summary.groups[:groups_shown]
    order = "" if summary.sort == "name" else f", by {summary.sort}"
    lines += ["", h(f"By {summary.by}{order}")]
    columns = [c for c in catalog.show_columns() if not (narrow and c.show_wide)]
    heads = [summary.by, *(str(c.show_short or c.show) if narrow else str(c.show) for c in columns)]
    column_places = {c.name: column_decimals([g.get(c.name) for g in groups]) for c in columns}
    rows = [[str(g[summary.by]), *(_cell(c.name, g.get(c.name), summary.by, summary.gpus_unknown, column_places[c.name])
                                   for c in columns)] for g in groups]
    keys = [c.name for c in columns]
    drop = tuple(1 + keys.index(k) for k in FIT_DROP if k in keys)
    got, left_out = fit_table(heads, rows, set(range(1, len(heads))), fit, drop)
    lines += got
    shown_columns = [c for i, c in enumerate(columns) if 1 + i not in left_out]
    if narrow:
        legend = "; ".join(f"{c.show_short}: {c.show}" for c in shown_columns if c.show_short)
        hidden = [str(c.show) for c in catalog.show_columns() if c not in shown_columns]
        if legend:
            lines += _wrap(f"({legend})", fit, "  ", " ")
        if hidden:
            lines += _wrap(f"(not shown at this width: {', '.join(hidden)}; --wide shows every column)", fit, "  ",
                           " ")
    if len(groups) < len(summary.groups):
        lines += _wrap(f"({len(summary.groups) - len(groups)} more {summary.by}(s): --top N shows more, --format json "
                       "shows all)", fit, "  ", " ")
    if summary.currency:
        lines.append(f"  (cost in {summary.currency})")
    for note in summary.notes:
        lines += _wrap(f"note: {terminal_safe(note)}", fit, "", "  ")
    return "\n".join(lines)
