"""Outputs of the economics block (gpuclust.accounting.economics): an HTML section with one stacked bar per
partition, and Prometheus samples as plain records for whichever writer emits the textfile. CSV tables are
the DataFrames economics.build_economics returns (economics_terms, economics_baselines, refusals_by_*,
wait_by_pending_reason), written with the report's other tables."""

from __future__ import annotations

import html
from typing import Any, NamedTuple

from gpuclust.accounting.economics import HOUR_TERMS, TERMS

COLORS = {"useful": "#2e7d32", "retries_failures": "#c62828", "in_progress": "#1565c0", "unavailable": "#6d4c41",
          "idle": "#bdbdbd", "network": "#8e24aa", "storage": "#f9a825", "support": "#00838f",
          "operations": "#ef6c00"}
LABELS = {"useful": "useful", "retries_failures": "retries and failures", "in_progress": "in progress",
          "unavailable": "unavailable (down/drained)", "idle": "idle", "network": "network", "storage": "storage",
          "support": "support", "operations": "operations"}


class PromSample(NamedTuple):
    name: str  # without the gpuclust_report_ prefix
    help: str
    type: str  # "gauge"
    labels: dict[str, str]
    value: float


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def stacked_bars(rows: list[dict[str, Any]], measure: str, terms: tuple[str, ...], title: str) -> str:
    """One horizontal stacked bar per row: each term's `measure` (gpu_hours or cost), scaled to the largest row."""
    e = html.escape
    values = [[max(0.0, float(r["terms"][t][measure] or 0.0)) for t in terms] for r in rows]
    biggest = max([sum(v) for v in values] + [1e-12])
    label_w, bar_w, row_h = 140, 560, 26
    height = 40 + row_h * len(rows) + 30
    out = [f"<svg class='chart' xmlns='http://www.w3.org/2000/svg' width='{label_w + bar_w + 120}' height='{height}' "
           f"role='img' aria-label='{e(title)}'>", f"<text x='4' y='16' font-size='13' font-weight='bold'>{e(title)}</text>"]
    for i, (r, vals) in enumerate(zip(rows, values, strict=True)):
        y = 28 + i * row_h
        out.append(f"<text x='4' y='{y + 15}' font-size='12'>{e(str(r['partition']))}</text>")
        x = float(label_w)
        for t, v in zip(terms, vals, strict=True):
            w = bar_w * v / biggest
            if w <= 0:
                continue
            out.append(f"<rect x='{x:.2f}' y='{y}' width='{w:.2f}' height='{row_h - 6}' fill='{COLORS[t]}'>"
                       f"<title>{e(LABELS[t])}: {v:,.4f}</title></rect>")
            x += w
        out.append(f"<text x='{x + 4:.2f}' y='{y + 15}' font-size='11'>{sum(vals):,.3f}</text>")
    ly = 28 + len(rows) * row_h + 14
    lx = 4
    for t in terms:
        out.append(f"<rect x='{lx}' y='{ly - 9}' width='10' height='10' fill='{COLORS[t]}'/>"
                   f"<text x='{lx + 13}' y='{ly}' font-size='11'>{e(LABELS[t])}</text>")
        lx += 16 + 7 * len(LABELS[t])
    out.append("</svg>")
    return "".join(out)


def economics_html(data: dict[str, Any]) -> str:
    """The report page's unit economics section ('' when the report has none)."""
    econ = data.get("economics")
    if not econ:
        return ""
    e = html.escape
    cur = econ.get("currency") or ""
    rows = [*econ["by_partition"], econ["total"]]
    parts = ["<h2>Unit economics</h2>"]
    for note in econ.get("notes", []):
        parts.append(f"<p class='note'>{e(note)}</p>")
    if econ["capacity"] == "unknown":
        parts.append("<p class='note'><b>Capacity unknown</b>: idle and unavailable GPU-hours are not known (not 0).</p>")
    denominator = "completed runs" if econ["denominator"] == "runs" else f"accepted units ({econ['units_label']}=N)"
    parts.append(f"<p>Denominator: <b>{e(denominator)}</b>. Window: {e(econ['window']['start'])}, "
                 f"{econ['window']['hours']:.3f} h. Currency: {e(cur or 'none set')}.</p>")
    if econ["capacity"] == "known":  # (unknown capacity: no bar, since its idle part is not known)
        parts.append(stacked_bars(rows, "gpu_hours", ("useful", "retries_failures", "in_progress", "unavailable",
                                                      "idle"), "Capacity GPU-hours by use, per partition"))
        parts.append(stacked_bars(rows, "cost", TERMS, f"Cost by term, per partition ({cur})"))
    head = "".join(f"<th>{e(LABELS[t])}</th>" for t in TERMS)
    table = [f"<table class='t'><tr><th>partition</th><th>capacity GPU-h</th>{head}<th>total cost</th>"
             "<th>units</th><th>unit cost</th><th>useful share</th></tr>"]
    for r in rows:
        cells = "".join(
            f"<td>{_fmt(r['terms'][t]['cost'], 2)}" + (f"<br><small>{_fmt(r['terms'][t]['gpu_hours'])} GPU-h</small>"
                                                      if t in HOUR_TERMS else "") + "</td>" for t in TERMS)
        table.append(f"<tr><td>{e(str(r['partition']))}</td><td>{_fmt(r['capacity_gpu_hours'])}</td>{cells}"
                     f"<td>{_fmt(r['total_cost'], 2)}</td><td>{_fmt(r['accepted_units'])}</td>"
                     f"<td>{_fmt(r['effective_unit_cost'], 4)}</td><td>{_fmt(r['useful_share'], 4)}</td></tr>")
    table.append("</table>")
    parts.append("".join(table))
    if econ["baselines"]:
        parts.append("<h3>Baselines (same denominator)</h3><table class='t'><tr><th>baseline</th><th>kind</th>"
                     f"<th>unit cost ({e(cur)})</th><th>cluster unit cost</th><th>cluster / baseline</th>"
                     "<th>break-even useful share</th><th>note</th></tr>")
        for b in econ["baselines"]:
            parts.append(f"<tr><td>{e(b['baseline'])}</td><td>{e(b['kind'])}</td><td>{_fmt(b['unit_cost'], 4)}</td>"
                         f"<td>{_fmt(b['cluster_unit_cost'], 4)}</td><td>{_fmt(b['cluster_vs_baseline'], 3)}</td>"
                         f"<td>{_fmt(b['break_even_useful_share'], 4)}</td><td>{e(b['note'] or '')}</td></tr>")
        parts.append("</table>")
    s = econ["sizing"]
    parts.append(f"<h3>Sizing under failure</h3><p>Useful work per GPU-month: {_fmt(s['useful_work_per_gpu_month'])}; "
                 f"target per month: {_fmt(s['target_per_month'])}; required GPU capacity: "
                 f"<b>{_fmt(s['required_gpu_capacity'])}</b> GPUs.</p>")
    ref = econ["refusals"]
    if ref.get("known"):
        parts.append(f"<h3>Submit policy refusals</h3><p>{ref['total']} refusal(s); {ref['ignored_log_lines']} log "
                     "line(s) not written by gpuclust ignored.</p>")
    else:
        parts.append(f"<h3>Submit policy refusals</h3><p class='note'>Unknown: {e(ref.get('why', ''))}</p>")
    return "\n".join(parts)


def economics_prom(data: dict[str, Any]) -> list[PromSample]:
    """Prometheus samples of the economics block (gauges; unknown figures are left out, never 0)."""
    econ = data.get("economics")
    if not econ:
        return []
    out: list[PromSample] = []
    cur = econ.get("currency") or ""
    for r in [*econ["by_partition"], econ["total"]]:
        part = str(r["partition"])
        for t in TERMS:
            term = r["terms"][t]
            if t in HOUR_TERMS and term["gpu_hours"] is not None:
                out.append(PromSample("economics_gpu_hours", "GPU-hours of each unit-economics term in the period.",
                                      "gauge", {"partition": part, "term": t}, float(term["gpu_hours"])))
            if term["cost"] is not None:
                out.append(PromSample("economics_cost", "Cost of each unit-economics term in the period.", "gauge",
                                      {"partition": part, "term": t, "currency": cur}, float(term["cost"])))
        for key, help_text in (("capacity_gpu_hours", "GPU-hours the partition could deliver in the period."),
                               ("total_cost", "All unit-economics terms summed."),
                               ("accepted_units", "The denominator: completed runs or accepted units."),
                               ("effective_unit_cost", "Total cost per accepted unit."),
                               ("useful_share", "Useful GPU-hours / capacity GPU-hours.")):
            if r.get(key) is not None:
                labels = {"partition": part, **({"currency": cur} if "cost" in key else {})}
                out.append(PromSample(f"economics_{key}", help_text, "gauge", labels, float(r[key])))
    for b in econ["baselines"]:
        if b["unit_cost"] is not None:
            out.append(PromSample("economics_baseline_unit_cost", "A baseline's cost per accepted unit.", "gauge",
                                  {"baseline": b["baseline"], "kind": b["kind"], "currency": cur}, float(b["unit_cost"])))
        if b["break_even_useful_share"] is not None:
            out.append(PromSample("economics_break_even_useful_share", "Useful share of capacity at which the "
                                  "cluster's unit cost equals the baseline's.", "gauge", {"baseline": b["baseline"]},
                                  float(b["break_even_useful_share"])))
    if econ["sizing"]["required_gpu_capacity"] is not None:
        out.append(PromSample("economics_required_gpu_capacity", "GPUs needed for the target at the measured useful "
                              "work per GPU-month.", "gauge", {}, float(econ["sizing"]["required_gpu_capacity"])))
    ref = econ["refusals"]
    if ref.get("known"):
        out.append(PromSample("policy_refusals", "Jobs the submit policy rejected in the period.", "gauge",
                              {"by": "total", "group": "all"}, float(ref["total"])))
        for dim in ("rule", "account", "user", "partition"):
            for item in ref[f"by_{dim}"]:
                out.append(PromSample("policy_refusals", "Jobs the submit policy rejected in the period.", "gauge",
                                      {"by": dim, "group": str(item[dim])}, float(item["refusals"])))
        out.append(PromSample("policy_log_ignored_lines", "slurmctld log lines not written by gpuclust (ignored).",
                              "gauge", {}, float(ref["ignored_log_lines"])))
    out.sort(key=lambda sample: sample.name)  # (stable) the samples of one metric family stay together
    return out
