"""GPU use (figures/gpuuse.py) as the page and the Prometheus textfile show it."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.output import svgplot

if TYPE_CHECKING:  # (prometheus_client loads only when gpuclust.prom is written)
    from prometheus_client.core import Metric

    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.accounting.output import prom

# Per-node rows go to CSV, Parquet and report.json only (the per-job table is on the page in part: its top
# jobs, in a few columns, render.PAGE_COLUMNS).
NOT_ON_PAGE = frozenset({"telemetry_nodes"})


def html_section(report: Report) -> str | None:
    """The HTML page's use section: the headline and a utilisation histogram per partition (the tables
    follow with the others)."""
    use = report.data.get("gpu_use")
    if not use:
        return None
    parts = ["<h2 id='gpu-use'>GPU use: busy, held-idle and coverage</h2>"]
    t = use.get("totals") or {}
    cov = t.get("coverage")
    parts.append("<p class='meta'>Idle: under {:g}% for at least {:g} s. Coverage {}. Rules: {}.</p>".format(
        use["idle_threshold_pct"], use["idle_min_s"], "unknown" if cov is None else f"{cov:.1%}",
        html.escape(", ".join(use["gpu_util_rules"]) or "none")))
    for part, h in use.get("histogram_by_partition", {}).items():
        labels = [f"{lo}-{lo + 10}%" for lo in h["bins_pct"][:-1]]
        if not sum(h["jobs"]):  # no covered job: "no data", never a row of zero bars
            parts.append(f"<p><em>{html.escape(part)}: no utilisation telemetry</em></p>")
            continue
        parts.append("<figure>" + svgplot.bar_chart(f"{part}: covered GPU-hours by mean GPU utilisation", labels,
                                                    [("covered GPU-hours", h["covered_gpu_hours"])],
                                                    y_label="GPU-hours") + "</figure>")
    return "\n".join(parts)


# GPU use's families (figures.catalog): each figure's GPU time per breakdown, then its coverage (a ratio: after
# the GPU time, so that a dashboard reads the GPU-seconds families together).
PROM_FIGURES: tuple[catalog.Figure, ...] = tuple(sorted((f for f in catalog.figures(catalog.GPU_USE) if f.prom),
                                                        key=lambda f: f.unit == catalog.RATIO))


def prom_families(ctx: prom.PromContext) -> Iterator[Metric]:
    """Gauges per partition and account: allocated, covered, busy and held-idle GPU-seconds, coverage."""
    use = ctx.report.data.get("gpu_use")
    if not use:
        return
    for dim in catalog.PROM_BREAKDOWNS[catalog.GPU_USE]:
        for f in PROM_FIGURES:
            fam = ctx.gauge(f"{dim}_{f.prom}", str(f.prom_help).format(dim=dim), (dim,))
            for row in use.get(f"by_{dim}", []):
                value = row.get(f.name)
                if value is not None:
                    ctx.add(fam, float(value) * f.prom_scale, row.get(dim))
            yield fam
