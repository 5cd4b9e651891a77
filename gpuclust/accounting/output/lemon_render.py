"""Lemon nodes (figures/lemon.py) as the page and the Prometheus textfile show them: the named nodes with their
test, MTTF and ETTR by job size, and the re-acceptance lines (the per-node ranking is the lemon_nodes table)."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.output.htmltext import words_whole

if TYPE_CHECKING:  # (prometheus_client loads only when gpuclust.prom is written)
    from prometheus_client.core import Metric

    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.accounting.output import prom


def _num(value: Any, fmt: str) -> str:
    return "unknown" if value is None else format(value, fmt)


def html_section(report: Report) -> str | None:
    """The page's lemon section: findings, MTTF and ETTR by job size, the `accept submit` lines."""
    from gpuclust.accounting.figures.lemon import window_words

    lemon = report.data.get("lemon_nodes")
    if not lemon:
        return None
    e = html.escape
    fleet = lemon["fleet"]
    parts = ["<h2 id='lemon-nodes'>Lemon nodes: production failures per node</h2>",
             f"<p class='meta'>Test: {e(lemon['test'])}; alpha {lemon['alpha']:g}, at least {lemon['min_failures']} "
             f"failure {e(window_words(lemon.get('failure_window_seconds', 3600)))}s; {lemon['nodes_tested']} "
             f"node(s) tested; telemetry "
             f"{'joined' if lemon['telemetry_joined'] else 'not joined (Xid and ECC not counted)'}.</p>"]
    if lemon["findings"]:
        parts.append("<ul>" + "".join(f"<li>{e(text)}</li>" for text in lemon["findings"]) + "</ul>")
    else:
        parts.append("<p>No node fails production jobs beyond chance.</p>")
    mttf = catalog.figure(catalog.LEMON_FLEET, "mttf_hours").title
    ettr = catalog.figure(catalog.LEMON_FLEET, "ettr").title
    w = words_whole  # (cells keep their words whole: a page table never breaks "65-512" or "(node-level)")
    rows = "".join(f"<tr><td>{w(str(r['job_size']))}</td><td>{r['jobs']}</td><td>{r['failed_jobs']}</td>"
                   f"<td>{_num(r['mttf_hours'], '.1f')}</td><td>{_num(r['ettr'], '.3f')}</td></tr>"
                   for r in lemon["by_job_size"])
    parts.append(f"<div class='table-wrap'><table class='t'><thead><tr><th>GPUs</th><th>Jobs</th>"
                 f"<th>{w('Failed (node-level)')}</th><th>{w(mttf)}</th>"
                 f"<th>{w(ettr)}</th></tr></thead><tbody>{rows}<tr><td>all</td><td>{fleet['jobs']}</td>"
                 f"<td>{fleet['failed_jobs']}</td><td>{_num(fleet['mttf_hours'], '.1f')}</td>"
                 f"<td>{_num(fleet['ettr'], '.3f')}</td></tr></tbody></table></div>")
    parts.append(f"<p class='meta'>Restore {fleet['restore_seconds']:g} s ({e(fleet['restore_source'])}), "
                 f"checkpoint interval {fleet['checkpoint_interval_seconds']:g} s.</p>")
    again = lemon.get("reaccept") or {}
    lines = list(again.get("suspects") or [])
    if again.get("sweep"):
        lines += again["sweep"]
    if lines:
        parts.append("<p>Queue for re-acceptance (suspects, then nodes whose acceptance is older than "
                     f"{again.get('stale_days')} days):</p><pre>" + e("\n".join(lines)) + "</pre>")
    return "\n".join(parts)


def prom_families(ctx: prom.PromContext) -> Iterator[Metric]:
    """Per node: failure hours, GPU time, corrected p-value, lemon flag; MTTF and ETTR for the fleet and by size."""
    lemon = ctx.report.data.get("lemon_nodes")
    if not lemon:
        return
    for place, rows, dims in ((catalog.LEMON, lemon["nodes"], catalog.PROM_BREAKDOWNS[catalog.LEMON]),
                              (catalog.LEMON_FLEET, [lemon["fleet"]], ()),
                              (catalog.LEMON_SIZES, lemon["by_job_size"], catalog.PROM_BREAKDOWNS[catalog.LEMON_SIZES])):
        for f in catalog.figures(place):
            if f.prom is None:
                continue
            name = f"{dims[0]}_{f.prom}" if dims else f.prom
            fam = ctx.gauge(name, str(f.prom_help), dims)
            for row in rows:
                value = row.get(f.name)
                if value is not None:
                    ctx.add(fam, float(value) * f.prom_scale, *(row.get(d) for d in dims))
            yield fam
