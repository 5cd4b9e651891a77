"""The two things `gpuclust report` does, as library calls: fetch into the store, and build a report.

`build` is the orchestrator of the report: it calls the stages in order, each once, and passes what one
makes on to the next: read (read_input; jsonin, normalize: the rows and their window) -> latest state
(store.latest_state) -> filter (jobfilter) -> runs and metrics (metrics.build_report, rows_accounted) ->
economics -> GPU use (gpuuse, with its telemetry) -> trend (from the store only) -> the stamped report."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gpuclust.accounting.figures import economics, findings, gpuuse, lemon, trend
from gpuclust.accounting.figures.economics import (
    attach as attach_economics,  # (one of two stages named attach)
)
from gpuclust.accounting.figures.jobfilter import JobFilter
from gpuclust.accounting.figures.metrics import (
    DEFAULT_TOP,
    Report,
    build_report,
    no_gpu_accounted,
    note_no_gpu,
    rows_accounted,
)
from gpuclust.accounting.history import sources, store, storeread
from gpuclust.accounting.history.fetch import fetch_day, sacct_version
from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.normalize import (
    DEFAULT_OPTIONS,
    PARALLEL_MIN_ROWS,
    ParseResult,
    ReaderOptions,
    input_period,
    refuse_unread,
)
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.output import reportdoc
from gpuclust.accounting.output.render import write_report
from gpuclust.config import SiteConfig
from gpuclust.errors import InputError, Problem
from gpuclust.slurm.client import SlurmClient

# How far before the period the store is read, so that runs ending in the period see their earlier attempts.
LOOKBACK_EXTRA = timedelta(days=7)
PROBLEMS_IN_REPORT = storeread.PROBLEMS_IN_REPORT


@dataclass
class FetchSummary:
    """What `report fetch` did: the store and its days, problems and rejected rows, economics and telemetry."""

    store: str
    days: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    rejected_rows: int = 0
    economics: dict[str, Any] = field(default_factory=dict)  # node events, refusals (gpuclust.accounting.figures.economics)
    # `report fetch --repair`: the days fetched again, each with why it could not be read (None: not a repair)
    repaired: dict[str, str] | None = None
    # The stored telemetry summaries (storedtelemetry.TelemetryFetch.store_into; None: [telemetry] is off)
    telemetry: dict[str, Any] | None = None
    # The stored GPU-equivalents where some row or node has slices, shards or MPS: rows of unknown share and the
    # warnings (report.json input.gpu_share_warnings' form); None: whole GPUs everywhere
    gpu_shares: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "economics": self.economics,
            "store": self.store,
            "days": self.days,
            "rejected_rows": self.rejected_rows,
            "problems": [str(p) for p in self.problems[:PROBLEMS_IN_REPORT]],
        }
        if self.repaired is not None:
            out["repaired"] = self.repaired
        if self.telemetry is not None:
            out["telemetry"] = self.telemetry
        if self.gpu_shares is not None:
            out["gpu_shares"] = self.gpu_shares
        return out


def fetch(
    client: SlurmClient,
    config: SiteConfig,
    period: Period,
    *,
    via: str = "parsable",
    progress: Callable[[date], None] | None = None,
    options: ReaderOptions = DEFAULT_OPTIONS,
    days: list[date] | None = None,
    now: datetime | None = None,
) -> FetchSummary:
    """Fetch every UTC day the period touches (`days`: those days instead, e.g. repair_days'), then replace those
    days in the store in one swap.

    Day by day: sacct's bytes go straight into the reader, and each day's table is written to the staged
    snapshot before the next day is fetched, so memory is bounded by one day, not the period. What the store
    holds that gpuclust did not write, and its days that cannot be read, are carried over as they are and come
    first in the summary's problems (store.staged).

    With [telemetry] prometheus_url set, the GPU jobs of the fetched days then get their telemetry summaries,
    written with their days in the same swap (storedtelemetry: what fails there is a warning, never the fetch's
    failure; `now`: the time a running job's summary reaches, the clock's by default).

    The node inventory (`scontrol show node -o`) is read first, once, and stored beside the days, [costs] or not;
    each row is stored with its GPU-equivalents as a report computes them from that inventory and the days' node
    events (figures.shares; the events are read, and stored, only where some row or node has slices, shards or
    MPS): the columns alloc_gpu_equivalents and gpu_share_unknown that store_sql's figures read."""
    from gpuclust.accounting.figures import shares as shares_mod
    from gpuclust.accounting.history import events as events_mod

    root = store.store_dir(config.state_dir)
    summary = FetchSummary(str(root))
    days = period.utc_days() if days is None else sorted(set(days))
    if options.slurm_version is None:
        options = dataclasses.replace(options, slurm_version=sacct_version(client))
    nodes_text, not_read = sources.fetch_inventory(client)
    layout_events = sources.LayoutEvents(client, days)
    gpu_shares = shares_mod.PeriodShares(config, shares_mod.inventory(nodes_text), layout_events.read)
    unknown_rows = 0
    telemetry = None
    if config.telemetry.prometheus_url:
        # (imported here: a build never loads the fetch's telemetry side)
        from gpuclust.accounting.figures import storedtelemetry

        telemetry = storedtelemetry.TelemetryFetch(config.telemetry)
    with store.staged(root, days, cluster=config.cluster_name) as stage:
        summary.problems += [Problem("", None, line) for line in stage.warnings]
        for day in days:
            result = fetch_day(client, day, via, options=options)
            if telemetry is not None:
                telemetry.add_day(day, result.table)
            summary.days.append({"day": day.isoformat(), "rows": result.table.num_rows,
                                 "rejected_rows": result.rejected, "steps_dropped": result.steps_dropped,
                                 "usage_warnings": result.usage_warnings})
            summary.problems += result.problems
            problems = None
            if result.rejected:
                problems = [str(p) for p in result.problems] or [f"{result.rejected} rejected row(s)"]
            summary.rejected_rows += result.rejected
            row_shares = shares_mod.stored_shares(gpu_shares, result.table)
            unknown_rows += int(np.isnan(row_shares.equivalents).sum())
            stage.write_day(day, result.table, problems, row_shares)
            del result, row_shares
            if progress:
                progress(day)
        if telemetry is not None:
            summary.telemetry = telemetry.store_into(stage, _previous_days_dir(root, config.cluster_name),
                                                     now or datetime.now(timezone.utc))
    if not_read:  # (after the store's own warnings, which come first)
        summary.problems.append(Problem("", None, not_read))
    if gpu_shares.used:
        summary.gpu_shares = {"unknown_rows": unknown_rows, "warnings": gpu_shares.warning_list()}
    # The inventory (and the events read for the layout check) beside the days, before the trend's weeks read them.
    for day in days:
        events_mod.store_inventory(config.state_dir, day, nodes_text, layout_events.texts.get(day))
    # The daily trend's per-day aggregates of the weeks these days change (trend.refresh: a cache, issue 31 item 5).
    trend.refresh(root, config, lookback_of(config))
    if config.economics.enabled:  # ([costs], [baseline NAME] or slurmctld_log in the site config)
        summary.economics = sources.fetch_sources(client, config, days, nodes_text=nodes_text,
                                                  events_texts=layout_events.texts)
    else:  # (with [costs] the economics reads the days' events again and names those it cannot read)
        summary.problems += [Problem("", None, line) for line in layout_events.problems]
    return summary


def _previous_days_dir(root: Path, cluster: str) -> Path | None:
    """The cluster directory of the snapshot a fetch replaces (under its lock), or None."""
    snap = store.current_snapshot(root)
    if snap is None or not snap.is_dir():
        return None
    try:
        return store.days_dir(snap, cluster)
    except store.StoreError:
        return None


def repair_days(config: SiteConfig, period: Period | None = None) -> dict[date, str]:
    """The stored days `report fetch --repair` fetches again, each with why it cannot be read (store.unreadable_days),
    of the period (None: every stored day). With a `current` link that points nowhere every day of the period is
    lost (without a period: StoreDamaged, which says to give one)."""
    root = store.store_dir(config.state_dir)
    wanted = period.utc_days() if period is not None else None
    try:
        return store.unreadable_days(root, config.cluster_name, wanted)
    except store.StoreDamaged as exc:
        if wanted is None:
            raise store.StoreDamaged(f"{exc}; or give --repair a period (--since/--until) to fetch again") from None
        return {day: str(exc) for day in wanted}


def lookback_of(config: SiteConfig) -> timedelta:
    """How far before a day the store is read for the runs that end on it (and after it, for the trend)."""
    return timedelta(seconds=config.retry_window_s) + LOOKBACK_EXTRA


NO_CONFIG_REPORT_DIR = "gpuclust-report"


def default_config() -> SiteConfig:
    """The site config of `report build --input` where the site has none: every default, no prices (so no
    money figures: cost is unknown, not 0), one cluster named by the input. Points a newcomer at a dump in one
    command."""
    return SiteConfig(path="(no site config: defaults)", cluster_name="unknown", report_dir=NO_CONFIG_REPORT_DIR)


MMAP_MIN_BYTES = 1 << 20  # read_input memory-maps files from this size on (smaller ones are read)


def read_input(path: str, delimiter: str | None = None, *, options: ReaderOptions = DEFAULT_OPTIONS,
               mmap_min_bytes: int = MMAP_MIN_BYTES) -> ParseResult:
    """Parse an input file (sacct --parsable2 text or --json). A file from `mmap_min_bytes` on is
    memory-mapped, not copied: the text reader tokenises it in place. `delimiter` None: detected from the
    header line (gpuclust's fetch delimiter, else `|`; text.sniff_delimiter). A file whose every row is
    rejected is refused with the likely fix (normalize.refuse_unread), never read as an empty one."""
    import mmap
    import os

    data: bytes | mmap.mmap
    try:
        with Path(path).open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            # Small files are simply read; an empty file cannot be mapped.
            if size < max(1, mmap_min_bytes):
                data = fh.read()
            else:
                # (Not MAP_POPULATE: mapping every page up front runs on one thread; the reading threads
                # fault their own pieces in side by side.)
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(path, None, f"cannot read: {exc}")) from None
    parsed = parse_input(data, delimiter, path, options=options)
    refuse_unread(parsed, path)
    return parsed


NO_FILTER = JobFilter()  # build's default: every job


def _nodes_text(config: SiteConfig, period: Period, input_path: str | None, nodes_path: str | None) -> str | None:
    """The node records the waste findings take the partitions' shares from: --nodes with --input, else the
    inventory `report fetch` stored (none: the configured gpus_per_node only)."""
    if input_path:
        if not nodes_path:
            return None
        try:
            return Path(nodes_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None  # (the economics' reading of the same file says why)
    return findings.stored_nodes_text(config.state_dir, period.utc_days())


@dataclass
class GpuShares:
    """The table's GPU-equivalents (figures.shares) and what the report says of them."""

    equivalents: np.ndarray | None
    row_warnings: list[dict[str, Any]]
    node_warnings: list[dict[str, Any]]


def period_shares(config: SiteConfig, period: Period, nodes_text: str | None, *, input_path: str | None = None,
                  events_path: str | None = None, nodes_path: str | None = None) -> Any:
    """The figures.shares.PeriodShares of a build: the inventory `nodes_text`, the node events of --events or the
    store read only where some table or node has slices, shards or MPS."""
    from gpuclust.accounting.figures import shares as shares_mod

    nodes = shares_mod.inventory(nodes_text, nodes_path or "scontrol show node -o")

    def events() -> Any:
        try:
            if input_path:
                return sources.given_sources(config, period, events_path=events_path, nodes_path=None,
                                             sreport_path=None, log_path=None, reasons_path=None)[0]
            return sources.stored_sources(config, period)[0]
        except InputError:
            return None  # (the economics names a bad events file)

    return shares_mod.PeriodShares(config, nodes, events)


def table_gpu_shares(table: Any, config: SiteConfig, period: Period, nodes_text: str | None, *,
                     input_path: str | None = None, events_path: str | None = None,
                     nodes_path: str | None = None) -> GpuShares | None:
    """Each row's GPU-equivalents where the table or the inventory has MIG slices, shards or MPS (None: whole
    GPUs everywhere, every figure as before). The node events are read only then (a layout changed)."""
    from gpuclust.accounting.figures import shares as shares_mod

    ctx = period_shares(config, period, nodes_text, input_path=input_path, events_path=events_path,
                        nodes_path=nodes_path)
    got = ctx.of(table)
    if got is None:
        return None
    return GpuShares(got.equivalents, got.warning_list(), shares_mod.node_warnings(ctx.layouts()))


def gpu_shares_note(info: dict[str, Any], got: GpuShares, config: SiteConfig) -> None:
    """report.json input.gpu_share_warnings (named, per row and per node) and a note on the price units."""
    from gpuclust.accounting.figures import shares as shares_mod

    shares_mod.note(info, got.row_warnings + got.node_warnings, config)


def build(
    config: SiteConfig,
    period: Period | None,
    *,
    input_path: str | None = None,
    delimiter: str | None = None,
    target: float | None = None,
    top: int = DEFAULT_TOP,
    trend_days: int = max(trend.TREND_DAYS),
    events_path: str | None = None,
    nodes_path: str | None = None,
    sreport_path: str | None = None,
    log_path: str | None = None,
    reasons_path: str | None = None,
    only: JobFilter = NO_FILTER,
    slurm_version: str | None = None,
    rows_in_memory: int | None = None,
    rows_per_bucket: int | None = None,
) -> tuple[Report, ParseResult | None]:
    """Compute the report from --input or the store. The caller writes it (write_report). From the store, the
    report also holds the daily trend of the `trend_days` days before its end (0: none); a period of more than
    `rows_in_memory` stored rows is built partitioned (gpuclust.accounting.figures.partitioned), in buckets of about
    `rows_per_bucket` (None: partitioned.ROWS_IN_MEMORY and ROWS_PER_BUCKET)."""
    info: dict[str, Any]
    parsed: ParseResult | None = None
    # (the store first: a partitioned build of the store returns from this branch)
    if not input_path:
        if period is None:
            raise InputError("give a period (--period or --since/--until) to build from the store")
        root = store.store_dir(config.state_dir)
        lookback = timedelta(seconds=config.retry_window_s) + LOOKBACK_EXTRA
        days = Period(period.start - lookback, period.end).utc_days()
        with store.reading(root):
            rows_stored = storeread.stored_rows(storeread.day_files(root, days, config.cluster_name))
        from gpuclust.accounting.figures import partitioned  # (the store's build only: not --input's)

        if rows_stored > (partitioned.ROWS_IN_MEMORY if rows_in_memory is None else rows_in_memory):
            report = partitioned.build_report(root, days, config, period, only=only, target=target, top=top,
                                              rows_per_bucket=rows_per_bucket or partitioned.ROWS_PER_BUCKET)
            if trend_days:
                trend.add_to_report(report, root, config, trend_days, lookback_of(config))
            return reportdoc.stamp(report, config.cluster_name, currency=config.currency), None
        # Day file by day file, only the columns and rows the report needs (storeread: same figures).
        table = storeread.load_for_report(root, days, config.cluster_name)
        info = storeread.store_info(root, days, config.cluster_name, table.num_rows, storeread.exit_codes_known(table))
    else:
        parsed = read_input(input_path, delimiter, options=dataclasses.replace(DEFAULT_OPTIONS,
                                                                               slurm_version=slurm_version))
        table = parsed.table
        inferred = period is None
        if period is None:
            period = input_period(parsed, input_path)
        info = {
            "source": input_path,
            "rows": table.num_rows,
            "steps_dropped": parsed.steps_dropped,
            "rejected_rows": parsed.rejected,
            "problems": [str(p) for p in parsed.problems[:PROBLEMS_IN_REPORT]],
            "exit_codes_known": parsed.exit_codes_known,
            "notes": list(parsed.notes),
            "usage_warnings": parsed.usage_warnings,
            # The one window of every figure and cross-check (capacity, idle, sreport alike), and where it came from.
            "window": {"start": period.as_dict()["start"], "end": period.as_dict()["end"],
                       "source": "inferred" if inferred else "given"},
        }
        if inferred:
            info["notes"].append(
                f"The report window {period.as_dict()['start']} .. {period.as_dict()['end']} was inferred from the "
                "dump's rows (earliest Submit or Start to just after the latest End): every figure, capacity and "
                "idle included, and every cross-check uses it. Give --since/--until to set it.")
        if parsed.missing_columns:
            info["notes"].append(
                "The dump lacks " + ", ".join(parsed.missing_columns) + " (a narrower sacct --format than "
                "`report fetch` writes): what each leaves unknown is in report.json input.unknown.")
            info["unknown"] = [{"missing": name, "unknown": why, "count": None}
                               for name, why in parsed.missing_columns.items() if not why.startswith("derived")]
            info["derived"] = {name: why for name, why in parsed.missing_columns.items() if why.startswith("derived")}
        rows_parsed = table.num_rows
        table = store.latest_state(table)
        # An execution read twice (a dump that concatenates overlapping windows) counts once: its other rows
        # are "superseded", a bucket of their own.
        info["superseded"] = rows_parsed - table.num_rows
    if only:
        rows_before = table.num_rows
        table = only.apply(table)
        only.note(info, rows_before - table.num_rows)
    if no_gpu_accounted(table):
        note_no_gpu(info)
    # The GPU use figures (and their Prometheus queries) read only the table: computed beside the report, on
    # the core the report's pandas steps leave idle (a small table's in turn: there the thread costs more).
    nodes_text = _nodes_text(config, period, input_path, nodes_path)
    shares = findings.partition_shares(config, nodes_text)
    gpu_shares = table_gpu_shares(table, config, period, nodes_text, input_path=input_path, events_path=events_path,
                                  nodes_path=nodes_path)
    equivalents = gpu_shares.equivalents if gpu_shares else None
    store_root = None if input_path else store.store_dir(config.state_dir)
    with ThreadPoolExecutor(max_workers=1) as beside:
        use = beside.submit(gpuuse.use_sums, table, config, period, store_root=store_root, shares=shares,
                            equivalents=equivalents) if table.num_rows >= PARALLEL_MIN_ROWS else None
        report = build_report(table, config, period, target=target, top=top, input_info=info,
                              equivalents=equivalents)
        if gpu_shares is not None:
            gpu_shares_note(report.data["input"], gpu_shares, config)
        if parsed is not None:
            report.data["input"]["rows_accounted"] = rows_accounted(parsed, report.data["input"])
        if not only:
            attach_economics(report, table, config, period, events_path=events_path, nodes_path=nodes_path,
                             sreport_path=sreport_path, log_path=log_path, reasons_path=reasons_path,
                             offline=bool(input_path), target=target,
                             period_inferred=bool(info.get("window", {}).get("source") == "inferred"),
                             equivalents=equivalents)
            economics.note_unknown_allocations(report, "AllocTRES" in (parsed.missing_columns if parsed else {}))
        use_sums = gpuuse.use_sums(table, config, period, store_root=store_root, shares=shares,
                                   equivalents=equivalents) if use is None else use.result()
        gpuuse.attach_sums(report, use_sums, config,
                           usage_warnings=parsed.usage_warnings if parsed else 0,
                           usage_problems=parsed.usage_problems if parsed else None)
    lemon.attach(report, lemon.job_rows(table, period, equivalents), config, period,
                 gpu_events=use_sums.gpu_events if config.telemetry.prometheus_url else None)
    del table  # the period's rows are done with: the trend reads its own chunks (memory, 10M lines)
    if not input_path and trend_days:
        trend.add_to_report(report, store.store_dir(config.state_dir), config, trend_days, lookback_of(config))
    return reportdoc.stamp(report, config.cluster_name, currency=config.currency), parsed


def lemon_nodes(config: SiteConfig, since: datetime, until: datetime) -> dict[str, Any]:
    """The lemon nodes (figures/lemon.py: report.json's `lemon_nodes`) of the jobs the store holds that ended in
    since..until: `audit partition`'s lemon check. InputError (a StoreError) when the store cannot be read."""
    root = store.store_dir(config.state_dir)
    period = Period(since, until)
    with store.reading(root):
        table = storeread.load_for_report(root, period.utc_days(), config.cluster_name)
    return lemon.section_for(lemon.job_rows(table, period), config, until)


# (input_period, rows_accounted and JobFilter live with their stages; their old names here still serve.)
__all__ = ["FetchSummary", "JobFilter", "build", "fetch", "input_period", "read_input", "rows_accounted",
           "write_report"]
