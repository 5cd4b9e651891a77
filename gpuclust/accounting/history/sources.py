"""What the unit economics read besides the jobs: node events and inventory, sreport, the submit policy's
refusals (fetched per day by `report fetch` and stored, or given as files beside `--input`), and the restore
times that the storage acceptance measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpuclust.accounting.ingest.period import Period
from gpuclust.config import SiteConfig

if TYPE_CHECKING:  # (the readers load where a source is read: a build from a dump alone reads none)
    from gpuclust.accounting.history.events import EventSource
    from gpuclust.accounting.history.refusals import RefusalSource


def fetch_sources(client: Any, config: SiteConfig, days: list[Any], *, nodes_text: str | None = None,
                  events_texts: dict[Any, str] | None = None) -> dict[str, Any]:
    """`report fetch`'s second half: node events, inventory and sreport per UTC day, and the refusals of each
    day from slurmctld's log. A failure here is reported in the summary; the jobs are stored anyway.
    `nodes_text`: the inventory the fetch read (None: read per day); `events_texts`: the days' events it read."""
    from zoneinfo import ZoneInfo

    from gpuclust.accounting.history import events as events_mod
    from gpuclust.accounting.history import refusals as refusals_mod
    from gpuclust.errors import GpuclustError

    out: dict[str, Any] = {"events": [], "refusals": None, "problems": []}
    for day in days:
        try:
            out["events"].append({"day": day.isoformat(), **events_mod.fetch_day(
                client, config.state_dir, day, nodes_text=nodes_text, events_text=(events_texts or {}).get(day))})
        except Exception as exc:  # noqa: BLE001 - a secondary source: the jobs are stored whatever happens here,
            # and the report marks capacity unknown for the day (a replayed client without these outputs, too)
            out["problems"].append(f"node events of {day.isoformat()} not fetched: {exc}")
    log = config.economics.slurmctld_log
    if log is None:
        out["problems"].append("no [site] slurmctld_log: submit policy refusals are not counted")
    else:
        try:
            out["refusals"] = refusals_mod.fetch_days(log, config.state_dir, days, ZoneInfo(config.timezone))
        except GpuclustError as exc:
            out["problems"].append(f"refusals not read: {exc}")
    return out


def fetch_inventory(client: Any) -> tuple[str | None, str | None]:
    """`report fetch`'s node inventory (`scontrol show node -o`, one call): its text, or None and why. Every fetch
    stores it beside its days (events.store_inventory), [costs] or not: the shares of shard and MPS jobs read the
    node layout from it, at the fetch (the stored alloc_gpu_equivalents) and in a report built later."""
    from gpuclust.accounting.history import events as events_mod

    try:
        return str(client.scontrol(list(events_mod.NODES_ARGS))), None
    except Exception as exc:  # noqa: BLE001 - a secondary source, as the economics' (a replayed client without it)
        return None, (f"node inventory (scontrol show node -o) not read: {exc}: not stored with the days; the GPU-"
                      "equivalents of shard and MPS jobs (and of untyped GPUs on MIG nodes) are unknown unless "
                      "[partition NAME] shards_per_gpu gives them")


class LayoutEvents:
    """The node events of a fetch's days, read once and only when asked (figures.shares.PeriodShares asks where
    some row or node has slices, shards or MPS: the nodes whose GPU layout changed make their shares unknown).
    `texts`: what sacctmgr printed per day (stored with the inventory); `problems`: the days it could not read."""

    def __init__(self, client: Any, days: list[Any]):
        self.client = client
        self.days = days
        self.texts: dict[Any, str] = {}
        self.problems: list[str] = []

    def read(self) -> EventSource | None:
        from gpuclust.accounting.history import events as events_mod

        merged = events_mod.Events()
        for day in self.days:
            try:
                text = str(self.client.sacctmgr(events_mod.day_event_args(day)))
                parsed = events_mod.parse_events(text, f"sacctmgr show event {day.isoformat()}")
            except Exception as exc:  # noqa: BLE001 - as fetch_sources: the jobs are stored whatever happens here
                self.problems.append(f"node events of {day.isoformat()} not read: {exc}: a node whose GPU layout "
                                     "changed that day is not seen (its rows' GPU-equivalents read the inventory's "
                                     "layout)")
                continue
            self.texts[day] = text
            merged.nodes += parsed.nodes
            merged.cluster += parsed.cluster
        return events_mod.EventSource(merged, None)


def stored_sources(config: SiteConfig, period: Period) -> tuple[EventSource | None, RefusalSource | None]:
    """The node events and inventory, and the refusals, that `report fetch` stored for the period's days."""
    from gpuclust.accounting.history import events as events_mod
    from gpuclust.accounting.history import refusals as refusals_mod

    days = period.utc_days()
    return (events_mod.load_stored(config.state_dir, days),
            refusals_mod.load_stored(config.state_dir, days, float(period.start_epoch), float(period.end_epoch)))


def given_sources(config: SiteConfig, period: Period, *, events_path: str | None, nodes_path: str | None,
                  sreport_path: str | None, log_path: str | None,
                  reasons_path: str | None) -> tuple[EventSource | None, RefusalSource | None]:
    """The same sources from the files given beside `--input` (none given: none)."""
    source = refusal_source = None
    if events_path or nodes_path or reasons_path:
        from gpuclust.accounting.history import events as events_mod

        source = events_mod.read_files(events_path, nodes_path, sreport_path, reasons_path)
    if log_path:
        from zoneinfo import ZoneInfo

        from gpuclust.accounting.history import refusals as refusals_mod

        refusal_source = refusals_mod.read_file(log_path, ZoneInfo(config.timezone), float(period.start_epoch),
                                                float(period.end_epoch))
    return source, refusal_source


def measured_restore_seconds(results_dir: str) -> dict[str, float]:
    """Per partition, the median checkpoint restore time (checkpoint_read seconds) of the acceptance storage
    jobs that passed it, from the results directory; {} when there is none (an unset one, "", as a build without a
    site config has, included: result_files takes it as no directory)."""
    from gpuclust.accept import result_files

    try:
        if not result_files(results_dir):  # (no jobs, found without loading the results reader)
            return {}
        from gpuclust.accept import scan_results

        scan = scan_results(results_dir)
    except OSError:
        return {}
    seconds: dict[str, list[float]] = {}
    for result in scan.jobs:
        part = result.job.partition
        if not part:
            continue
        for rec in result.storage:
            if rec.metric == "checkpoint_read" and rec.ok and rec.seconds > 0:
                seconds.setdefault(part, []).append(float(rec.seconds))
    return {p: float(np.median(v)) for p, v in seconds.items()}
