"""Outputs of the economics block (gpuclust.accounting.figures.economics): an HTML section with one stacked bar per
partition, and the Prometheus families (a gpuclust.accounting.output.prom contributor). CSV tables are
the DataFrames economics.economics_from returns (economics_terms, economics_baselines, refusals_by_*,
wait_by_pending_reason), written with the report's other tables."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.economics import HOUR_TERMS, TERMS
from gpuclust.accounting.output import svgplot
from gpuclust.accounting.output.htmltext import words_whole

if TYPE_CHECKING:  # (prometheus_client loads only when gpuclust.prom is written)
    from prometheus_client.metrics_core import Metric

    from gpuclust.accounting.output.prom import PromContext

COLORS = {"completed_run": "#2e7d32", "retries_failures": "#c62828", "in_progress": "#1565c0", "unavailable": "#6d4c41",
          "idle": "#bdbdbd", "network": "#8e24aa", "storage": "#f9a825", "support": "#00838f",
          "operations": "#ef6c00"}
LABELS = {"completed_run": "completed-run", "retries_failures": "retries and failures", "in_progress": "in progress",
          "unavailable": "unavailable (down/drained)", "idle": "idle", "network": "network", "storage": "storage",
          "support": "support", "operations": "operations"}

# Figures the section names by their glossary names (figures.catalog).
_ROW_PER_UNIT = catalog.figure(catalog.ECONOMICS, "total_cost_per_accepted_unit")
_ROW_SHARE = catalog.figure(catalog.ECONOMICS, "completed_run_share_of_capacity")
_BREAK_EVEN = catalog.figure(catalog.ECONOMICS_BASELINES, "break_even_completed_run_share_of_capacity")
_PER_GPU_MONTH = catalog.figure(catalog.ECONOMICS_SIZING, "accepted_units_per_capacity_gpu_month")


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "unknown"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def stacked_bars(rows: list[dict[str, Any]], measure: str, terms: tuple[str, ...], title: str) -> str:
    """One horizontal stacked bar per row: each term's `measure` (gpu_hours or cost), scaled to the largest row.
    Labels are measured as svgplot measures them (never narrower than drawn) and the legend wraps into rows, so
    no text runs past the chart's edge."""
    e = html.escape
    values = [[max(0.0, float(r["terms"][t][measure] or 0.0)) for t in terms] for r in rows]
    biggest = max([sum(v) for v in values] + [1e-12])
    width = svgplot.WIDTH  # shown at its own size (a narrow screen scrolls it): the same as the other charts
    names = [svgplot.truncate(svgplot.clean(r["partition"]), 200, 12) for r in rows]
    totals = [f"{sum(vals):,.3f}" for vals in values]
    label_w = max(100.0, 12 + max(svgplot.text_width(n, 12) for n in names))
    bar_w = width - label_w - 8 - max(svgplot.text_width(t, 11) for t in totals)
    row_h = 26
    keys = [svgplot.text_width(LABELS[t], 11) + 13 + 12 for t in terms]
    legend = svgplot.legend_rows(keys, width - 8)
    height = 40 + row_h * len(rows) + 16 * len(legend) + 14
    out = [f"<svg class='chart' xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' "
           f"height='{height}' role='img' aria-label='{e(title)}'>", f"<text x='4' y='16' font-size='13' font-weight='bold'>{e(title)}</text>"]
    for i, (r, vals) in enumerate(zip(rows, values, strict=True)):
        y = 28 + i * row_h
        full = svgplot.clean(r["partition"])
        label = f"<text x='4' y='{y + 15}' font-size='12'>{e(names[i])}</text>"
        out.append(label if names[i] == full else f"<g><title>{e(full)}</title>{label}</g>")
        x = float(label_w)
        for t, v in zip(terms, vals, strict=True):
            w = bar_w * v / biggest
            if w <= 0:
                continue
            out.append(f"<rect x='{x:.2f}' y='{y}' width='{w:.2f}' height='{row_h - 6}' fill='{COLORS[t]}'>"
                       f"<title>{e(LABELS[t])}: {v:,.4f}</title></rect>")
            x += w
        out.append(f"<text x='{x + 4:.2f}' y='{y + 15}' font-size='11'>{totals[i]}</text>")
    ly = 28 + len(rows) * row_h + 14
    for members in legend:
        lx = 4.0
        for k in members:
            t = terms[k]
            out.append(f"<rect x='{lx:.2f}' y='{ly - 9}' width='10' height='10' fill='{COLORS[t]}'/>"
                       f"<text x='{lx + 13:.2f}' y='{ly}' font-size='11'>{e(LABELS[t])}</text>")
            lx += keys[k]
        ly += 16
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
    denominator = (str(catalog.figure(catalog.RUNS, "completed").glossary) if econ["denominator"] == "runs"
                   else f"accepted units ({econ['units_label']}=N)")
    parts.append(f"<p>Denominator: <b>{e(denominator)}</b>. Window: {e(econ['window']['start'])}, "
                 f"{econ['window']['hours']:.3f} h. Currency: {e(cur or 'none set')}.</p>")
    if econ["capacity"] == "known":  # (unknown capacity: no bar, since its idle part is not known)
        parts.append("<figure>" + stacked_bars(rows, "gpu_hours", ("completed_run", "retries_failures", "in_progress",
                                                                   "unavailable", "idle"),
                                               "Capacity GPU-hours by use, per partition") + "</figure>")
        parts.append("<figure>" + stacked_bars(rows, "cost", TERMS, f"Cost by term, per partition ({cur})") + "</figure>")
    # Terms as rows and partitions as columns: a site has few partitions but nine terms, so this fits a page.
    corner = f"term ({cur or 'cost'}; GPU-hours below)"
    head = "".join(f"<th scope='col' class=n>{words_whole(str(r['partition']))}</th>" for r in rows)
    table = [f"<div class='table-wrap'><table class='t'><thead><tr><th scope='col'>"
             f"{words_whole(corner)}</th>{head}</tr></thead><tbody>"]

    def line(label: str, cells: list[str]) -> None:
        table.append(f"<tr><th scope='row'>{words_whole(label)}</th>" + "".join(f"<td class=n>{c}</td>" for c in cells)
                     + "</tr>")

    line("capacity GPU-hours", [_fmt(r["capacity_gpu_hours"]) for r in rows])
    for t in TERMS:
        line(LABELS[t], [_fmt(r["terms"][t]["cost"], 2) + (f"<br><small>{_fmt(r['terms'][t]['gpu_hours'])} GPU-h</small>"
                                                         if t in HOUR_TERMS else "") for r in rows])
    line("total cost", [_fmt(r["total_cost"], 2) for r in rows])
    line("accepted units", [_fmt(r["accepted_units"]) for r in rows])
    for f in (_ROW_PER_UNIT, _ROW_SHARE):
        line(str(f.glossary), [_fmt(r[f.name], 4) for r in rows])
    table.append("</tbody></table></div>")
    parts.append("".join(table))
    if econ["baselines"]:
        parts.append("<h3>Baselines (same denominator)</h3><div class='table-wrap'><table class='t'><tr><th>baseline</th><th>kind</th>"
                     f"<th>cost per accepted unit ({e(cur)})</th><th>cluster total cost per accepted unit</th>"
                     f"<th>cluster / baseline</th><th>{e(str(_BREAK_EVEN.glossary))}</th>"
                     "<th>note</th></tr>")
        for b in econ["baselines"]:
            parts.append(f"<tr><td>{e(b['baseline'])}</td><td>{e(b['kind'])}</td>"
                         f"<td>{_fmt(b['cost_per_accepted_unit'], 4)}</td>"
                         f"<td>{_fmt(b['cluster_total_cost_per_accepted_unit'], 4)}</td>"
                         f"<td>{_fmt(b['cluster_vs_baseline'], 3)}</td>"
                         f"<td>{_fmt(b[_BREAK_EVEN.name], 4)}</td>"
                         f"<td>{e(b['note'] or '')}</td></tr>")
        parts.append("</table></div>")
    s = econ["sizing"]
    parts.append(f"<h3>Sizing under failure</h3><p>{e(_PER_GPU_MONTH.title)}: "
                 f"{_fmt(s[_PER_GPU_MONTH.name])}; "
                 f"target per month: {_fmt(s['target_per_month'])}; required GPU capacity: "
                 f"<b>{_fmt(s['required_gpu_capacity'])}</b> GPUs.</p>")
    ref = econ["refusals"]
    if ref.get("known"):
        parts.append(f"<h3>Submit policy refusals</h3><p>{ref['total']} refusal(s); {ref['ignored_log_lines']} log "
                     "line(s) not written by gpuclust ignored.</p>")
        would = ref.get("would_refuse") or {}
        if would.get("total"):
            cells = "".join(f"<tr><td>{e(x['rule'])}</td><td>{x['would_refuse']}</td></tr>" for x in would["by_rule"])
            parts.append(f"<p>{would['total']} job(s) accepted by rules in warn mode that would have refused them "
                         f"(per rule below; per account and user in would_refuse_by_account.csv and "
                         f"would_refuse_by_user.csv).</p><table><tr><th>rule</th><th>would refuse</th></tr>{cells}</table>")
    else:
        parts.append(f"<h3>Submit policy refusals</h3><p class='note'>Unknown: {e(ref.get('why', ''))}</p>")
    return "\n".join(parts)


def economics_families(ctx: PromContext) -> list[Metric]:
    """The economics block as Prometheus families (a prom contributor). As for the report's other metrics: the
    cluster figure and each breakdown are separate families (summing one never double-counts), GPU time in
    seconds, shares as ratios, money families labelled with the currency; unknown figures are left out, never 0."""
    econ = ctx.report.data.get("economics")
    if not econ:
        return []
    total, parts = econ["total"], econ["by_partition"]
    out: list[Metric] = []

    def pair(f: catalog.Figure) -> None:
        doc = str(f.prom_help)
        whole = ctx.gauge(str(f.prom), doc, money=f.money)
        ctx.add(whole, None if total.get(f.name) is None else float(total[f.name]) * f.prom_scale)
        each = ctx.gauge(f"partition_{f.prom}", f"{doc} Per partition.", ["partition"], money=f.money)
        for r in parts:
            ctx.add(each, None if r.get(f.name) is None else float(r[f.name]) * f.prom_scale, r["partition"])
        out.extend((whole, each))

    def terms(name: str, doc: str, measure: str, names: tuple[str, ...], *, money: bool, scale: float) -> None:
        whole = ctx.gauge(f"economics_{name}", doc, ["term"], money=money)
        each = ctx.gauge(f"partition_economics_{name}", f"{doc} Per partition.", ["partition", "term"], money=money)
        for t in names:
            value = total["terms"][t][measure]
            ctx.add(whole, None if value is None else float(value) * scale, t)
            for r in parts:
                value = r["terms"][t][measure]
                ctx.add(each, None if value is None else float(value) * scale, r["partition"], t)
        out.extend((whole, each))

    terms("gpu_seconds", "GPU time of each unit-economics term in the period (capacity = their sum).", "gpu_hours",
          HOUR_TERMS, money=False, scale=3600.0)
    terms("cost", "Cost of each unit-economics term in the period (total cost = their sum).", "cost", TERMS,
          money=True, scale=1.0)
    for f in catalog.figures(catalog.ECONOMICS):
        if f.prom:
            pair(f)
    cost_f = catalog.figure(catalog.ECONOMICS_BASELINES, "cost_per_accepted_unit")
    break_even_f = catalog.figure(catalog.ECONOMICS_BASELINES, "break_even_completed_run_share_of_capacity")
    unit_cost = ctx.gauge(str(cost_f.prom), str(cost_f.prom_help), ["baseline", "kind"], money=cost_f.money)
    break_even = ctx.gauge(str(break_even_f.prom), str(break_even_f.prom_help), ["baseline"], money=break_even_f.money)
    for b in econ["baselines"]:
        ctx.add(unit_cost, b[cost_f.name], b["baseline"], b["kind"])
        ctx.add(break_even, b[break_even_f.name], b["baseline"])
    required_f = catalog.figure(catalog.ECONOMICS_SIZING, "required_gpu_capacity")
    required = ctx.gauge(str(required_f.prom), str(required_f.prom_help))
    ctx.add(required, econ["sizing"][required_f.name])
    out.extend((unit_cost, break_even, required))
    ref = econ["refusals"]
    if ref.get("known"):
        refusals = ctx.gauge("policy_refusals", "Jobs the submit policy rejected in the period.")
        ctx.add(refusals, ref["total"])
        out.append(refusals)
        for dim in ("rule", "account", "user", "partition"):
            family = ctx.gauge(f"policy_refusals_by_{dim}", f"Jobs the submit policy rejected in the period, per {dim}.",
                               [dim])
            for item in ref[f"by_{dim}"]:
                ctx.add(family, item["refusals"], item[dim])
            out.append(family)
        would = ref.get("would_refuse") or {}
        if would.get("total"):
            for dim in ("rule", "account", "user"):
                family = ctx.gauge(f"policy_would_refuse_by_{dim}", "Jobs rules in warn mode accepted and would have "
                                   f"refused in the period, per {dim}.", [dim])
                for item in would[f"by_{dim}"]:
                    ctx.add(family, item["would_refuse"], item[dim])
                out.append(family)
        ignored = ctx.gauge("policy_log_ignored_lines", "slurmctld log lines not written by gpuclust (ignored).")
        ctx.add(ignored, ref["ignored_log_lines"])
        out.append(ignored)
    return out
