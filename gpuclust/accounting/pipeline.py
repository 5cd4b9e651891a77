"""The two things `gpuclust report` does, as library calls: fetch into the store, and build a report."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting import economics, gpuuse, reportdoc, store, storeread, trend
from gpuclust.accounting.fetch import fetch_day, sacct_version
from gpuclust.accounting.jsonin import parse_input
from gpuclust.accounting.metrics import DEFAULT_TOP, Report, build_report
from gpuclust.accounting.normalize import DEFAULT_OPTIONS, ParseResult, ReaderOptions
from gpuclust.accounting.period import Period
from gpuclust.accounting.render import write_report
from gpuclust.config import SiteConfig
from gpuclust.errors import InputError, Problem
from gpuclust.slurm.client import SlurmClient

# How far before the period the store is read, so that runs ending in the period see their earlier attempts.
LOOKBACK_EXTRA = timedelta(days=7)
PROBLEMS_IN_REPORT = 50


@dataclass
class FetchSummary:
    store: str
    days: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    rejected_rows: int = 0
    economics: dict[str, Any] = field(default_factory=dict)  # node events, refusals (gpuclust.accounting.economics)

    def as_dict(self) -> dict[str, Any]:
        return {
            "economics": self.economics,
            "store": self.store,
            "days": self.days,
            "rejected_rows": self.rejected_rows,
            "problems": [str(p) for p in self.problems[:PROBLEMS_IN_REPORT]],
        }


def fetch(
    client: SlurmClient,
    config: SiteConfig,
    period: Period,
    *,
    via: str = "parsable",
    progress: Callable[[date], None] | None = None,
    options: ReaderOptions = DEFAULT_OPTIONS,
) -> FetchSummary:
    """Fetch every UTC day the period touches, then replace those days in the store in one swap.

    Day by day: sacct's bytes go straight into the reader, and each day's table is written to the staged
    snapshot before the next day is fetched, so memory is bounded by one day, not the period."""
    root = store.store_dir(config.state_dir)
    summary = FetchSummary(str(root))
    days = period.utc_days()
    if options.slurm_version is None:
        options = dataclasses.replace(options, slurm_version=sacct_version(client))
    with store.staged(root, days, cluster=config.cluster_name) as stage:
        for day in days:
            result = fetch_day(client, day, via, options=options)
            summary.days.append({"day": day.isoformat(), "rows": result.table.num_rows,
                                 "rejected_rows": result.rejected, "steps_dropped": result.steps_dropped,
                                 "usage_warnings": result.usage_warnings})
            summary.problems += result.problems
            problems = None
            if result.rejected:
                problems = [str(p) for p in result.problems] or [f"{result.rejected} rejected row(s)"]
            summary.rejected_rows += result.rejected
            stage.write_day(day, result.table, problems)
            del result
            if progress:
                progress(day)
    # The daily trend's per-day aggregates of the weeks these days change (trend.refresh: a cache, issue 31 item 5).
    trend.refresh(root, config, lookback_of(config))
    if config.economics.enabled:  # ([costs], [baseline NAME] or slurmctld_log in the site config)
        summary.economics = economics.fetch_sources(client, config, days)
    return summary


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
    header line (gpuclust's fetch delimiter, else `|`; text.sniff_delimiter)."""
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
                # (Not MAP_POPULATE: mapping every page up front, on one thread, measured 0.1-0.2 s slower
                # on a 300 MB file than letting the reading threads fault their own pieces in.)
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(path, None, f"cannot read: {exc}")) from None
    return parse_input(data, delimiter, path, options=options)


def input_period(result: ParseResult, source: str = "<input>") -> Period:
    """Default period for --input without dates: from the earliest Submit to just after the latest End. A dump
    with no dated row has no window to infer: refused, naming the options (never a made-up window)."""
    t = result.table
    starts = [v for v in (pc.min(t.column("submit")).as_py(), pc.min(t.column("start")).as_py()) if v]
    ends = [v for v in (pc.max(t.column("end")).as_py(), pc.max(t.column("start")).as_py()) if v]
    if not starts or not ends:
        raise InputError(Problem(source, None, f"no row with a Submit, Start or End ({t.num_rows} row(s) read): "
                                               "no report window can be inferred; give --since and --until (an "
                                               "empty period is an empty report)"))
    return Period(min(starts), max(ends) + timedelta(seconds=1))


BUCKETS = ("rejected", "steps_dropped", "superseded", "filtered_out", "attempt_rows", "running", "not_started",
           "no_allocation")


def rows_accounted(parsed: ParseResult, info: dict[str, Any]) -> dict[str, Any]:
    """Where every record read went (report.json input.rows_accounted): each lands in exactly one bucket, and
    `read` = the sum of the buckets (`balanced`). Attempts ending outside the period are attempt rows too."""
    left = info.get("left_out") or {}
    buckets = {
        "rejected": parsed.rejected, "steps_dropped": parsed.steps_dropped,
        "superseded": int(info.get("superseded", 0)), "filtered_out": int(info.get("filtered_out", 0)),
        **{name: int(left.get(name, 0)) for name in ("attempt_rows", "running", "not_started", "no_allocation")},
    }
    read = parsed.table.num_rows + parsed.rejected + parsed.steps_dropped
    return {"read": read, **buckets, "balanced": read == sum(buckets.values())}


@dataclass(frozen=True)
class JobFilter:
    """`report build --user/--account/--partition`: only these jobs (empty: any). A filtered report leaves
    the unit economics out: capacity and idle belong to the whole partition, not to a part of its jobs."""

    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.users or self.accounts or self.partitions)

    def apply(self, table: pa.Table) -> pa.Table:
        mask = None
        for column, wanted in (("user", self.users), ("account", self.accounts), ("partition", self.partitions)):
            if not wanted:
                continue
            col = table.column(column)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            one = pc.is_in(col, pa.array(list(wanted), pa.string()))
            mask = one if mask is None else pc.and_(mask, one)
        return table if mask is None else table.filter(pc.fill_null(mask, False))

    def describe(self) -> dict[str, list[str]]:
        return {"users": list(self.users), "accounts": list(self.accounts), "partitions": list(self.partitions)}


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
    only: JobFilter = JobFilter(),
    slurm_version: str | None = None,
) -> tuple[Report, ParseResult | None]:
    """Compute the report from --input or the store. The caller writes it (write_report). From the store, the
    report also holds the daily trend of the `trend_days` days before its end (0: none)."""
    info: dict[str, Any]
    parsed: ParseResult | None = None
    if input_path:
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
    else:
        if period is None:
            raise InputError("give a period (--period or --since/--until) to build from the store")
        root = store.store_dir(config.state_dir)
        lookback = timedelta(seconds=config.retry_window_s) + LOOKBACK_EXTRA
        days = Period(period.start - lookback, period.end).utc_days()
        # Day file by day file, only the columns and rows the report needs (storeread: same figures).
        table = storeread.load_for_report(root, days, config.cluster_name)
        import pyarrow.compute as pc

        known = bool(pc.all(table.column("exit_code_known")).as_py()) if table.num_rows else True
        stored_problems = store.stored_problems(root, days, config.cluster_name)
        info = {
            "source": str(root),
            "rows": table.num_rows,
            "days_read": [d.isoformat() for d in days if d in set(store.stored_days(root, config.cluster_name))],
            "steps_dropped": 0,
            "rejected_rows": len(stored_problems),
            "problems": stored_problems[:PROBLEMS_IN_REPORT],
            "exit_codes_known": known,
            "notes": [] if known else [
                "Some stored rows came from sacct --json (22.05), which cannot know exit codes: they are "
                "null, and COMPLETED counts as success for them."
            ],
        }
    if only:
        rows_before = table.num_rows
        table = only.apply(table)
        info["filtered_out"] = rows_before - table.num_rows
        info["only"] = only.describe()
        info.setdefault("notes", []).append("Filtered to " + ", ".join(
            f"{k} {', '.join(v)}" for k, v in only.describe().items() if v) + ": the unit economics (capacity, "
            "idle) are left out, they belong to whole partitions.")
    report = build_report(table, config, period, target=target, top=top, input_info=info)
    if parsed is not None:
        report.data["input"]["rows_accounted"] = rows_accounted(parsed, report.data["input"])
    if not only:
        economics.attach(report, table, config, period, events_path=events_path, nodes_path=nodes_path,
                         sreport_path=sreport_path, log_path=log_path, reasons_path=reasons_path,
                         offline=bool(input_path), target=target,
                         period_inferred=bool(info.get("window", {}).get("source") == "inferred"))
        unknown = sum(e["count"] or 0 for e in report.data["input"].get("unknown", []) if e["missing"] == "AllocTRES")
        econ = report.data.get("economics")
        if isinstance(econ, dict) and (unknown or "AllocTRES" in (parsed.missing_columns if parsed else {})):
            econ.setdefault("notes", []).append(
                f"{unknown} attempt(s) ran without an AllocTRES: their GPU-hours are unknown, so allocated leaves "
                "them out and idle (capacity - allocated - unavailable) holds them: both are bounds, not figures.")
    gpuuse.attach(report, table, config, period,
                  usage_warnings=parsed.usage_warnings if parsed else 0,
                  usage_problems=parsed.usage_problems if parsed else None)
    del table  # the period's rows are done with: the trend reads its own chunks (memory, 10M lines)
    if not input_path and trend_days:
        add_trend(report, config, trend_days)
    return reportdoc.stamp(report, config.cluster_name, currency=config.currency), parsed


def add_trend(report: Report, config: SiteConfig, days: int = max(trend.TREND_DAYS)) -> None:
    """The daily trend of the `days` days before the report's end, from the store's per-day aggregates
    (trend.from_store: computed and cached where missing; report.json `trend`, the trend_daily table, the HTML
    trend view)."""
    frame = trend.from_store(store.store_dir(config.state_dir), config, report.period.end, days, lookback_of(config))
    report.tables["trend_daily"] = frame
    report.data["trend"] = {"days": days, "daily": trend.as_records(frame)}
    report.data["definitions"] = {**report.data["definitions"], "trend": trend.DEFINITION}


__all__ = ["FetchSummary", "build", "fetch", "read_input", "write_report"]
