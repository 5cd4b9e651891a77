"""The one time grammar of gpuclust. Every option that takes a point in time (`report --since/--until`,
`accept report --since`) is read here, through `gpuclust.cli.params.TIME`, so the forms are the same everywhere:

    now, today, yesterday, tomorrow     (today = midnight in the site time zone)
    now-7days, today-1d, now+2h         an anchor plus or minus COUNT UNIT (sacct's own `now-7days` form)
    7d, 24h, 30m, 2w, 90s, "3 days ago" that long before now
    2026-12-01                          midnight of that day in the site time zone
    2026-12-01T06:00[:00], 2026-12-01 06:00, ...+01:00, ...Z   a date-time; site time zone unless it has an offset

Units: s/sec/second(s), m/min/minute(s), h/hr/hour(s), d/day(s), w/week(s). A bare number is refused (is `2026` a
year or 2026 seconds ago?). Parsing checks the form and the range; `TimeSpec.resolve` turns it into an aware
datetime once the site time zone is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9000, 1, 1, tzinfo=timezone.utc)
MAX_OFFSET_S = 100 * 366 * 86400  # a century: further than any Slurm database reaches

_UNITS: dict[str, int] = {}
for _names, _unit_s in ((("s", "sec", "secs", "second", "seconds"), 1),
                         (("m", "min", "mins", "minute", "minutes"), 60),
                         (("h", "hr", "hrs", "hour", "hours"), 3600),
                         (("d", "day", "days"), 86400),
                         (("w", "week", "weeks"), 7 * 86400)):
    _UNITS.update(dict.fromkeys(_names, _unit_s))

ANCHORS = ("now", "today", "yesterday", "tomorrow")
FORMS = "7d, 24h, now-7days, yesterday, today, now, 2026-12-01 or 2026-12-01T06:00"

_ANCHORED = re.compile(r"(now|today|yesterday|tomorrow)(?:\s*([+-])\s*([0-9]+)\s*([a-z]+))?")
_AGO = re.compile(r"([0-9]+)\s*([a-z]+)(?:\s+ago)?")


@dataclass(frozen=True)
class TimeSpec:
    """A parsed point in time, not yet placed in a time zone."""

    text: str
    anchor: str | None = None  # now, today, yesterday, tomorrow; None for an absolute time
    offset_s: int = 0  # added to the anchor (negative: before it)
    absolute: datetime | None = None  # naive means the site time zone
    date_only: bool = False

    @property
    def relative(self) -> bool:
        return self.anchor is not None

    def resolve(self, tz: str | tzinfo, now: datetime | None = None) -> datetime:
        """The aware datetime this names, in `tz` (the site time zone). `now` is for tests."""
        zone = ZoneInfo(tz) if isinstance(tz, str) else tz
        current = (now or datetime.now(zone)).astimezone(zone)
        if self.absolute is not None:
            value = self.absolute if self.absolute.tzinfo else self.absolute.replace(tzinfo=zone)
            return value
        if self.anchor == "now":
            # an elapsed time (7d, now-24h): counted in real seconds, so it spans a DST change truly
            base = current.replace(microsecond=0).astimezone(timezone.utc)
            return (base + timedelta(seconds=self.offset_s)).astimezone(zone)
        else:
            days = {"today": 0, "yesterday": -1, "tomorrow": 1}[self.anchor or "today"]
            # calendar arithmetic in the zone, so a DST change still gives midnight
            base = datetime.combine(current.date() + timedelta(days=days), time(), zone)
        return base + timedelta(seconds=self.offset_s)

    def __str__(self) -> str:
        return self.text


def parse_time(text: str) -> TimeSpec:
    """Read one point in time in the grammar above; ValueError (the message says which forms work) otherwise."""
    raw = " ".join(text.strip().split())
    low = raw.lower()
    if not raw:
        raise ValueError(f"empty time; use {FORMS}")
    match = _ANCHORED.fullmatch(low)
    if match:
        anchor, sign, count, unit = match.groups()
        offset = 0 if sign is None else _seconds(count, unit, text) * (-1 if sign == "-" else 1)
        return TimeSpec(text, anchor=anchor, offset_s=offset)
    match = _AGO.fullmatch(low)
    if match:
        return TimeSpec(text, anchor="now", offset_s=-_seconds(match.group(1), match.group(2), text))
    if re.fullmatch(r"[0-9]+", low):
        raise ValueError(f"{text!r} is a bare number: add a unit (7d, 24h, 30m) or write a date (2026-12-01)")
    return _absolute(raw, text)


def _seconds(count: str, unit: str, text: str) -> int:
    if unit not in _UNITS:
        raise ValueError(f"unknown unit {unit!r} in {text!r}; use s, m, h, d or w (or seconds, minutes, hours, "
                         "days, weeks)")
    seconds = int(count) * _UNITS[unit]
    if seconds > MAX_OFFSET_S:
        raise ValueError(f"{text!r} reaches more than a century away; Slurm records none there")
    return seconds


def _absolute(raw: str, text: str) -> TimeSpec:
    iso = raw[:-1] + "+00:00" if raw[-1:] in ("Z", "z") else raw
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", iso):
            value = datetime.combine(date.fromisoformat(iso), time())
            date_only = True
        elif re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?([+-][0-9:]+)?", iso):
            value = datetime.fromisoformat(iso)
            date_only = False
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"{text!r} is not a time gpuclust reads; use {FORMS}") from None
    probe = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if not EARLIEST - timedelta(days=1) <= probe <= LATEST:
        raise ValueError(f"{text!r} is outside {EARLIEST.year}-{LATEST.year}: Slurm records none there")
    return TimeSpec(text, absolute=value, date_only=date_only)


def resolve(text: str | TimeSpec, tz: str | tzinfo, now: datetime | None = None) -> datetime:
    """parse_time + resolve in one step (library callers holding a string)."""
    spec = text if isinstance(text, TimeSpec) else parse_time(text)
    return spec.resolve(tz, now)
