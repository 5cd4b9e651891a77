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


def fetch_sources(client: Any, config: SiteConfig, days: list[Any]) -> dict[str, Any]:
    """`report fetch`'s second half: node events, inventory and sreport per UTC day, and the refusals of each
    day from slurmctld's log. A failure here is reported in the summary; the jobs are stored anyway."""
    from zoneinfo import ZoneInfo

    from gpuclust.accounting.history import events as events_mod
    from gpuclust.accounting.history import refusals as refusals_mod
    from gpuclust.errors import GpuclustError

    out: dict[str, Any] = {"events": [], "refusals": None, "problems": []}
    for day in days:
        try:
            out["events"].append({"day": day.isoformat(), **events_mod.fetch_day(client, config.state_dir, day)})
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
    jobs that passed it, from the results directory; {} when there is none."""
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
