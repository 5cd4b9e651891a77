"""The report as a Prometheus textfile (node_exporter's textfile collector), written with prometheus_client.

Every figure of one period is a gauge (a report is a snapshot of one period, not a running count, so no name
ends in ``_total``). Every sample carries ``cluster``; a breakdown is its own metric family, one per dimension
(``gpuclust_report_runs`` for the cluster, ``gpuclust_report_partition_runs{partition=...}``,
``gpuclust_report_account_runs{account=...}``), so ``sum()`` over one family never counts a run twice. Names
carry their unit (``_seconds``, ``_gpu_hours``, ``_ratio``, ``_timestamp_seconds``); cost families carry a
``currency`` label (site ``currency``, empty when unset) and the currency is also in ``gpuclust_report_info``.
Quantiles are in the metric name (``_p90_seconds``), never a ``quantile`` label on a gauge.

Other modules add families without touching this one: a contributor is a function ``(PromContext) ->
Iterable[Metric]``; pass it to :func:`registry`/:func:`write_textfile` or add it once with
:func:`register_contributor`. ``PromContext.gauge`` makes a family with the ``gpuclust_report_`` prefix and
the ``cluster`` label already there, and ``PromContext.add`` skips missing values. Every metric is listed in
the README (Prometheus metrics).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics import Report, deprecated
from gpuclust.errors import InputError, Problem

PREFIX = "gpuclust_report_"
FILENAME = "gpuclust.prom"


@dataclass(frozen=True)
class PromContext:
    """What a contributor needs: the report, and the labels every sample carries."""

    report: Report
    cluster: str
    currency: str

    def gauge(self, name: str, documentation: str, labels: Sequence[str] = (), *, money: bool = False) -> Gauge:
        """An empty gauge family ``gpuclust_report_<name>`` with labels cluster[, currency], *labels."""
        fixed = [self.cluster, self.currency] if money else [self.cluster]
        names = ["cluster", *(["currency"] if money else []), *labels]
        return Gauge(PREFIX + name, documentation, labels=names, fixed=fixed)

    def add(self, family: Gauge, value: Any, *label_values: Any) -> None:
        """One sample (cluster and, for a money family, currency filled in); None/NaN/non-numbers add nothing."""
        number = _number(value)
        if number is not None:
            family.add_metric([*family.fixed, *(str(v) for v in label_values)], number)


class Gauge(GaugeMetricFamily):
    """A gauge family that knows the values of its leading labels (cluster[, currency])."""

    def __init__(self, name: str, documentation: str, *, labels: Sequence[str], fixed: Sequence[str]) -> None:
        super().__init__(name, documentation, labels=labels)
        self.fixed = list(fixed)


Contributor = Callable[[PromContext], Iterable[Metric]]
_CONTRIBUTORS: list[Contributor] = []


def register_contributor(contributor: Contributor) -> Contributor:
    """Add `contributor` to every textfile written from now on (usable as a decorator)."""
    if contributor not in _CONTRIBUTORS:
        _CONTRIBUTORS.append(contributor)
    return contributor


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _scaled(value: Any, figure: catalog.Figure) -> float | None:
    """A figure's report.json value as its sample (GPU-hours as GPU-seconds)."""
    number = _number(value)
    return None if number is None else number * figure.prom_scale


def _epoch(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp() if text else None
    except ValueError:
        return None


# The families of the report's own figures, each declared once in figures.catalog (its prom name, HELP text and
# scale): the runs' (totals and runs.by_<dim>: GPU time in GPU-seconds, report.json's GPU-hours x 3600), the
# queue waits' (per dimension only) and the sizing's.
RUN_FIGURES: tuple[catalog.Figure, ...] = tuple(f for f in catalog.figures(catalog.RUNS) if f.prom)
RUN_DIMENSIONS = catalog.PROM_BREAKDOWNS[catalog.RUNS]
WAIT_DIMENSIONS = catalog.PROM_BREAKDOWNS[catalog.QUEUE_WAIT]
WAIT_FIGURES: tuple[catalog.Figure, ...] = tuple(f for f in catalog.figures(catalog.QUEUE_WAIT) if f.prom)
SIZING_FIGURES: tuple[catalog.Figure, ...] = tuple(f for f in catalog.figures(catalog.SIZING) if f.prom)


def core_families(ctx: PromContext) -> Iterator[Metric]:
    """The report's own families (see the README's table)."""
    d = ctx.report.data
    info = InfoMetricFamily(PREFIX.rstrip("_"), "The report this file holds: its cluster and currency",
                            labels=["cluster"])
    info.add_metric([ctx.cluster], {"currency": ctx.currency})
    yield info
    for name, doc, value in (
        ("period_start_timestamp_seconds", "Start of the report period (Unix time)", ctx.report.period.start_epoch),
        ("period_end_timestamp_seconds", "End of the report period, exclusive (Unix time)", ctx.report.period.end_epoch),
        ("generated_timestamp_seconds", "When the report was built (Unix time)", _epoch(d.get("generated_at"))),
    ):
        family = ctx.gauge(name, doc)
        ctx.add(family, value)
        yield family

    totals = d.get("totals") or {}
    for f in RUN_FIGURES:
        family = ctx.gauge(str(f.prom), f"{f.prom_help}, whole cluster", money=f.money)
        ctx.add(family, _scaled(totals.get(f.name), f))
        yield family
    for dim in RUN_DIMENSIONS:
        rows = d["runs"][f"by_{dim}"]
        for f in RUN_FIGURES:
            family = ctx.gauge(f"{dim}_{f.prom}", f"{f.prom_help}, per {dim} (of the run's first attempt)", [dim],
                               money=f.money)
            for row in rows:
                ctx.add(family, _scaled(row.get(f.name), f), row[dim])
            yield family

    for dim in WAIT_DIMENSIONS:
        rows = d["queue_wait"][f"by_{dim}"]
        for f in WAIT_FIGURES:
            family = ctx.gauge(f"{dim}_{f.prom}", str(f.prom_help).format(dim=dim), [dim])
            for row in rows:
                ctx.add(family, _scaled(row.get(f.name), f), row[dim])
            yield family

    sizing = d.get("sizing") or {}
    for f in SIZING_FIGURES:
        family = ctx.gauge(str(f.prom), str(f.prom_help), money=f.money)
        ctx.add(family, _scaled(sizing.get(f.name), f))
        yield family

    inp = d.get("input") or {}
    family = ctx.gauge("input_rejected_rows", "Input rows that could not be parsed (listed in report.json)")
    ctx.add(family, inp.get("rejected_rows", 0))
    yield family
    left = inp.get("left_out") or {}
    family = ctx.gauge("input_left_out_rows", "Input rows that are no attempt, per reason", ["reason"])
    for reason in ("running", "not_started", "no_allocation"):
        ctx.add(family, left.get(reason), reason)
    yield family


class _ReportCollector(Collector):
    def __init__(self, ctx: PromContext, contributors: Sequence[Contributor]) -> None:
        self.ctx = ctx
        self.contributors = contributors

    def collect(self) -> Iterator[Metric]:
        seen: set[str] = set()
        for contributor in (core_families, *self.contributors):
            for family in contributor(self.ctx):
                if family.name in seen:
                    raise ValueError(f"metric family {family.name} is produced twice ({contributor.__name__})")
                seen.add(family.name)
                if family.samples:  # a family with nothing to say is left out
                    yield family
                    old = deprecated.PROM_ALIASES.get(family.name.removeprefix(PREFIX))
                    if old is not None:  # a renamed family's old name, same samples, for one release
                        if PREFIX + old in seen:
                            raise ValueError(f"metric family {PREFIX + old} is produced twice (deprecated alias)")
                        seen.add(PREFIX + old)
                        yield _renamed(family, PREFIX + old)


def _renamed(family: Metric, name: str) -> Metric:
    out = Metric(name, f"Deprecated, removed in the next release: the same as {family.name}. "
                 + family.documentation, family.type)
    out.samples = [sample._replace(name=name + sample.name.removeprefix(family.name)) for sample in family.samples]
    return out


def context_of(report: Report) -> PromContext:
    d = report.data
    return PromContext(report, str(d.get("cluster") or ""), str(d.get("currency") or ""))


def registry(report: Report, contributors: Sequence[Contributor] | None = None) -> CollectorRegistry:
    """A registry holding the report's families and the contributors' (default: the registered ones)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_ReportCollector(context_of(report), list(_CONTRIBUTORS if contributors is None else contributors)))
    return reg


def render(report: Report, contributors: Sequence[Contributor] | None = None) -> str:
    """The textfile's content (exposition format 0.0.4)."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(registry(report, contributors)).decode("utf-8")


def write_textfile(report: Report, path: Path, contributors: Sequence[Contributor] | None = None) -> None:
    """Write `path` atomically (prometheus_client writes a temporary file beside it and renames it)."""
    try:
        write_to_textfile(str(path), registry(report, contributors))
    except OSError as exc:
        raise InputError(Problem(str(path), None, f"cannot write: {exc.strerror or exc}")) from None
