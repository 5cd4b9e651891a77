"""Report periods: `--since D --until D` or `--period yesterday|last-7d|last-30d`, in the site time zone.

A period is half-open, [start, end). A bare date means midnight of that day in the site time zone, so
`--since 2026-12-01 --until 2026-12-02` is the one day of December 1st.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

from gpuclust.errors import InputError

PERIODS = ("yesterday", "today", "last-7d", "last-30d")


@dataclass(frozen=True)
class Period:
    start: datetime  # aware
    end: datetime  # aware, exclusive

    @property
    def start_epoch(self) -> int:
        return int(self.start.timestamp())

    @property
    def end_epoch(self) -> int:
        return int(self.end.timestamp())

    def utc_days(self) -> list[date]:
        """Every UTC calendar day the period touches (the store's partitions)."""
        first = self.start.astimezone(timezone.utc).date()
        last = (self.end - timedelta(seconds=1)).astimezone(timezone.utc).date()
        return [first + timedelta(days=i) for i in range((last - first).days + 1)]

    def as_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


def parse_when(text: str, tz: str) -> datetime:
    """`2026-12-01`, `2026-12-01T06:00[:00]` (site time zone unless it carries an offset), `now`, `today`."""
    zone = ZoneInfo(tz)
    raw = text.strip()
    if raw == "now":
        return datetime.now(zone).replace(microsecond=0)
    if raw == "today":
        return datetime.combine(datetime.now(zone).date(), time(), zone)
    try:
        if len(raw) == 10:
            return datetime.combine(date.fromisoformat(raw), time(), zone)
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise InputError(f"bad date {text!r}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS], 'today' or 'now'") from None
    return value if value.tzinfo else value.replace(tzinfo=zone)


def resolve_period(
    since: str | None, until: str | None, period: str | None, tz: str, now: datetime | None = None
) -> Period | None:
    """The period asked for; None when nothing was given (the caller picks its default)."""
    if period and (since or until):
        raise InputError("give either --period or --since/--until, not both")
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
        raise InputError(f"unknown period {period!r}; use one of {', '.join(PERIODS)}")
    if not since and not until:
        return None
    if not since or not until:
        raise InputError("--since and --until go together")
    start, end = parse_when(since, tz), parse_when(until, tz)
    if end <= start:
        raise InputError(f"--until {until} is not after --since {since}")
    for flag, value, when in (("--since", since, start), ("--until", until, end)):
        if not EARLIEST <= when <= LATEST:  # (the store's lookback reaches a century before the start)
            raise InputError(f"{flag} {value} is outside {EARLIEST.year}-{LATEST.year}: Slurm records none there")
    return Period(start, end)


EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)


def _day(today: datetime, offset: int, zone: ZoneInfo) -> datetime:
    # Calendar arithmetic in the zone, so a DST change still gives midnight.
    return datetime.combine(today.date() + timedelta(days=offset), time(), zone)
