"""Pull sacct in UTC day windows through a SlurmClient (the client pins TZ=UTC and SLURM_TIME_FORMAT)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone

from gpuclust.accounting.ingest.jsonin import parse_json
from gpuclust.accounting.ingest.normalize import DEFAULT_OPTIONS, ParseResult, ReaderOptions
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS
from gpuclust.accounting.ingest.text import parse_parsable
from gpuclust.errors import InputError, SlurmError, SlurmOutputError
from gpuclust.slurm.client import SLURM_TIME_FORMAT, SlurmClient

VIA = ("parsable", "json")
SACCT_TIMEOUT_S = 600.0


def window_bounds(day: date) -> tuple[str, str]:
    start = datetime.combine(day, time(), timezone.utc)
    end = start + timedelta(days=1)
    return start.strftime(SLURM_TIME_FORMAT), end.strftime(SLURM_TIME_FORMAT)


def sacct_args(day: date, via: str = "parsable") -> list[str]:
    """The sacct argv (without 'sacct') for one UTC day window.

    -a all users, -D every execution of requeued jobs, with their steps (no -X): the steps carry the usage TRES
    (TRESUsageIn*, rolled up to their job by gpuclust.accounting.ingest.usage, then dropped). The text form uses a
    multi-character delimiter and an explicit field list (FETCH_FIELDS: fields every Slurm since 22.05 prints,
    checked against each version's recorded `sacct --helpformat`; 22.05 refuses newer ones such as Restarts,
    and -D already gives each execution of a requeued job its own row). --json ignores -o; its shape
    depends on the version and is read by gpuclust.slurm.sacct_json.
    """
    since, until = window_bounds(day)
    base = ["-a", "-D", "-S", since, "-E", until]
    if via == "json":
        return [*base, "--json"]
    if via != "parsable":
        raise ValueError(f"via must be one of {VIA}")
    return [*base, "--parsable2", f"--delimiter={FETCH_DELIMITER}", "-o", ",".join(FETCH_FIELDS)]


def fetch_day(client: SlurmClient, day: date, via: str = "parsable", *,
              options: ReaderOptions = DEFAULT_OPTIONS) -> ParseResult:
    """One UTC day: sacct's raw bytes straight into the reader (never decoded to str and back), so the
    direct reader tokenises them in place. Memory: that day's output and its table."""
    args = sacct_args(day, via)
    raw = _sacct_bytes(client, args)
    source = f"sacct window {day.isoformat()}"
    if via == "json":
        try:
            return parse_json(raw, source, options=options)
        except InputError as exc:  # Slurm's own output: an unknown shape or broken JSON is Slurm's side
            raise SlurmOutputError(f"sacct {' '.join(args)}: {exc}") from None
    return parse_parsable(raw, FETCH_DELIMITER, source, options=options)


def sacct_version(client: SlurmClient) -> str | None:
    """The Slurm release sacct prints records of (it picks the gres/gpuutil rule); None where the client
    cannot say (a replay) or sacct fails: the rule is then inferred per step (gpuclust.accounting.ingest.usage)."""
    ask = getattr(client, "sacct_version", None)
    if ask is None:
        return None
    try:
        return str(ask())
    except SlurmError:
        return None


def _sacct_bytes(client: SlurmClient, args: list[str]) -> bytes:
    read = getattr(client, "sacct_bytes", None)
    if read is not None:
        return bytes(read(args, timeout=SACCT_TIMEOUT_S))
    # A client with text output only: the runner decoded with surrogateescape, so encoding back restores
    # sacct's exact bytes.
    return client.sacct(args, timeout=SACCT_TIMEOUT_S).encode("utf-8", "surrogateescape")


def fetch_days(
    client: SlurmClient,
    days: list[date],
    via: str = "parsable",
    progress: Callable[[date], None] | None = None,
) -> dict[date, ParseResult]:
    """Every day's result, all held at once (for library use on short periods); `pipeline.fetch` streams
    instead, one day in memory at a time."""
    results: dict[date, ParseResult] = {}
    for day in days:
        results[day] = fetch_day(client, day, via)
        if progress:
            progress(day)
    return results
