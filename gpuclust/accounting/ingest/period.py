"""Report periods: `--since T [--until T]` or `--period yesterday|today|last-7d|last-30d`, in the site time zone.

A period is half-open, [start, end). Times are read by the one time grammar (gpuclust.timespec: `7d`, `24h`,
`now-7days`, `yesterday`, `2026-12-01`, ISO date-times). A bare date means midnight of that day in the site time
zone, so `--since 2026-12-01 --until 2026-12-02` is the one day of December 1st. An open-ended `--since` runs to
now, as `sacct -S` does.

Lengths and order are those of the instants, never of the wall clocks: Python compares and subtracts two
datetimes of the same zone by their wall times, so a 25-hour DST day would read 24 h and a period from 02:30
to 03:00 on a spring-forward night (02:30 does not exist: it is read as 02:30 before the change, 01:30 UTC,
after 03:00's 01:00 UTC) would look non-empty. `Period.seconds` and `resolve_period` go through UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

from gpuclust.errors import InputError, Problem
from gpuclust.timespec import EARLIEST, LATEST, TimeSpec, parse_time

PERIODS = ("yesterday", "today", "last-7d", "last-30d")

__all__ = ["EARLIEST", "LATEST", "PERIODS", "Period", "parse_when", "resolve_period"]


@dataclass(frozen=True)
class Period:
    """A report period: two aware datetimes, the end exclusive."""

    start: datetime  # aware
    end: datetime  # aware, exclusive

    @property
    def start_epoch(self) -> int:
        return int(self.start.timestamp())

    @property
    def end_epoch(self) -> int:
        return int(self.end.timestamp())

    @property
    def seconds(self) -> float:
        """The true length: a 23- or 25-hour DST day has its 23 or 25 hours."""
        return self.end.timestamp() - self.start.timestamp()

    def utc_days(self) -> list[date]:
        """Every UTC calendar day the period touches (the store's partitions)."""
        first = self.start.astimezone(timezone.utc).date()
        last = (self.end.astimezone(timezone.utc) - timedelta(seconds=1)).date()
        return [first + timedelta(days=i) for i in range((last - first).days + 1)]

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


def _spec(value: str | TimeSpec, option: str) -> TimeSpec:
    if isinstance(value, TimeSpec):
        return value
    try:
        return parse_time(value)
    except ValueError as exc:
        raise InputError(Problem(option, None, str(exc))) from None


def parse_when(text: str | TimeSpec, tz: str, now: datetime | None = None, option: str = "--since") -> datetime:
    """One point in time in the site time zone (gpuclust.timespec's grammar); InputError naming `option`."""
    return _spec(text, option).resolve(tz, now)


def resolve_period(
    since: str | TimeSpec | None,
    until: str | TimeSpec | None,
    period: str | None,
    tz: str,
    now: datetime | None = None,
) -> Period | None:
    """The period asked for; None when nothing was given (the caller picks its default)."""
    if period and (since or until):
        raise InputError(Problem("--period", None, "give either --period or --since/--until, not both"))
    zone = ZoneInfo(tz)
    now = (now or datetime.now(zone)).astimezone(zone)
    today = datetime.combine(now.date(), time(), zone)
    if period:
        if period == "yesterday":
            return Period(_day(today, -1, zone), today)
        if period == "today":
            return Period(today, _day(today, 1, zone))
        if period in ("last-7d", "last-30d"):
            days = 7 if period == "last-7d" else 30
            return Period(_day(today, -days, zone), today)
        raise InputError(Problem("--period", None, f"unknown period {period!r}; use one of {', '.join(PERIODS)}"))
    if not since and not until:
        return None
    if not since:
        raise InputError(Problem("--until", None, "needs --since (an open-ended --since runs to now): add --since, e.g. --since 7d"))
    start = parse_when(since, tz, now, "--since")
    end = parse_when(until, tz, now, "--until") if until else now.replace(microsecond=0)
    for flag, value, when in (("--since", since, start), ("--until", until or "now", end)):
        if not EARLIEST <= when <= LATEST:  # (the store's lookback reaches a century before the start)
            raise InputError(Problem(flag, None, f"{value} is outside {EARLIEST.year}-{LATEST.year}: "
                                                 "Slurm records none there; give a later date"))
    if end.timestamp() <= start.timestamp():  # (instants: a same-zone comparison reads the wall clocks)
        gaps = [f"{value} does not exist in {tz} (a DST change skips it; read as {when.isoformat()})"
                for value, when in ((since, start), (until, end)) if value and not _exists(when)]
        raise InputError(Problem("--until" if until else "--since",
                                 None, f"the period is empty: {end.isoformat()} ({until or 'now'}) is not after "
                                       f"{start.isoformat()} ({since})" + "".join(f"; {g}" for g in gaps)
                                       + "; give an --until after --since"))
    return Period(start, end)


def _exists(when: datetime) -> bool:
    """Whether a zone's wall time exists (not skipped by a DST change): it survives a round trip via UTC."""
    back = when.astimezone(timezone.utc).astimezone(when.tzinfo)
    return back.replace(tzinfo=None) == when.replace(tzinfo=None)


def _day(today: datetime, offset: int, zone: ZoneInfo) -> datetime:
    # Calendar arithmetic in the zone, so a DST change still gives midnight.
    return datetime.combine(today.date() + timedelta(days=offset), time(), zone)
