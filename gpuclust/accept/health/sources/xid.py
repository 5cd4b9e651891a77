"""Kernel log Xid lines (source `xid`): `journalctl -k -o short-iso --since`, else `dmesg --time-format iso`.

    xid  {"command": "journalctl"|"dmesg", "since": ISO|null,
          "events": [XidEvent.as_dict() + {"timed": bool}]}

The after snapshot passes --since = the before snapshot's time; only events at or after it are kept (events
without a wall-clock time are kept and marked untimed; the rules compare them with the before snapshot's).

Findings: `xid` for an Xid in the run's window: CRITICAL for codes in [health] xid_critical, else WARNING.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from gpuclust.accept.health.kit import (
    COMMAND_TIMEOUT_S,
    HealthPaths,
    Judge,
    Snap,
    Source,
    Unavailable,
    bounded_int,
    guard,
    num,
    ok,
    parse_iso_time,
    run,
    source_data,
)
from gpuclust.accept.health.shape import boolean, integer, list_of, obj, string
from gpuclust.exitcodes import Nagios

XID_SOURCE = "kernel log"

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),?\s*(?P<msg>.*)$")
# journalctl -o short-iso: 2024-05-01T12:00:01+0000 host kernel: ...; dmesg --time-format=iso:
# 2025-05-27T04:18:56,089671+00:00 ...
_ISO = re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
# dmesg -T / --ctime: [Fri Aug 30 11:43:09 2024]
_CTIME = re.compile(r"\[(?:[A-Z][a-z]{2}) (?P<mon>[A-Z][a-z]{2}) +(?P<day>[0-9]{1,2}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}) "
                    r"(?P<year>[0-9]{4})\]")
# syslog / journalctl short: May 01 12:00:01 host kernel: ...
_SHORT = re.compile(r"^\s*(?P<mon>[A-Z][a-z]{2}) +(?P<day>[0-9]{1,2}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2}) ")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                        "Nov", "Dec"), start=1)}


@dataclass(frozen=True)
class XidEvent:
    """One Xid line of the kernel log: its time, the GPU's PCI address, the Xid code and message."""

    time: str | None  # ISO 8601; None when the line carries no wall-clock time (plain dmesg, a foreign month)
    pci: str  # as the driver prints it, e.g. 0000:3b:00
    code: int
    message: str
    line: str  # the line as read (stripped), to tell repeated untimed lines apart

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _line_time(line: str, year_hint: int | None) -> str | None:
    m = _ISO.search(line.split("NVRM:", 1)[0])
    if m:
        raw = m.group("ts").replace(",", ".")
        raw = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", raw)
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).isoformat()
        except (ValueError, OverflowError):
            return None
    m = _CTIME.search(line)
    if m and m.group("mon") in _MONTHS:
        return _local_iso(int(m.group("year")), _MONTHS[m.group("mon")], int(m.group("day")), m.group("hms"))
    m = _SHORT.match(line)
    if m and year_hint is not None and m.group("mon") in _MONTHS:
        return _local_iso(year_hint, _MONTHS[m.group("mon")], int(m.group("day")), m.group("hms"))
    return None


def _local_iso(year: int, month: int, day: int, hms: str) -> str | None:
    """dmesg -T and syslog print local time without a zone: read it as this machine's local time."""
    h, mi, s = (int(x) for x in hms.split(":"))
    try:
        return datetime(year, month, day, h, mi, s).astimezone().isoformat()
    except (ValueError, OverflowError):  # a day 31 of a 30-day month; year 1 east of UTC
        return None


def parse_xid_lines(text: str, year_hint: int | None = None) -> list[XidEvent]:
    """Xid events from kernel log lines (journalctl -k -o short-iso, dmesg, dmesg -T, dmesg
    --time-format=iso, syslog). Lines that are not Xid reports are ignored. `year_hint`: the year for
    syslog-style lines that print none (Mon DD HH:MM:SS)."""
    events: list[XidEvent] = []
    for raw in text.splitlines():
        m = _XID.search(raw)
        code = bounded_int(m.group("code")) if m else None
        if m is None or code is None:  # not an Xid report; or a code past 64 bits, which no driver writes
            continue
        events.append(XidEvent(_line_time(raw, year_hint), m.group("pci").lower(), code,
                               m.group("msg").strip(), raw.strip()))
    return events


def collect_xid(paths: HealthPaths, since: datetime | None, timeout: float = COMMAND_TIMEOUT_S) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        since_text = since.isoformat() if since else None
        try:
            argv = [paths.journalctl, "-k", "-o", "short-iso", "--no-pager"]
            if since is not None:
                # journalctl takes "YYYY-MM-DD HH:MM:SS" in local time; convert from the UTC instant
                argv += ["--since", since.astimezone().strftime("%Y-%m-%d %H:%M:%S")]
            out, command = run(argv, timeout), "journalctl"
        except Unavailable as first:
            try:
                out, command = run([paths.dmesg, "--time-format", "iso"], timeout), "dmesg"
            except Unavailable as second:
                raise Unavailable(f"{first}; fallback {second}") from None
        events = []
        for ev in parse_xid_lines(out, year_hint=datetime.now().year):
            in_window: bool | None = None
            if ev.time is not None and since is not None:
                try:
                    in_window = parse_iso_time(ev.time) >= since
                except OverflowError:  # year 1 or 9999 at an offset: kept, its time cannot be compared
                    in_window = True
                if not in_window:
                    continue
            events.append({**ev.as_dict(), "timed": ev.time is not None})
        return ok(command=command, since=since_text, events=events)

    return guard(read)


def judge_xid(j: Judge, before: Snap, after: Snap) -> None:
    src = source_data(after, "xid")
    if src is None:
        return
    since = src.get("since")
    before_src = source_data(before, "xid")
    # Untimed lines (plain dmesg) cannot be placed in the window: ones already there before the run are old.
    seen_before: dict[str, int] = {}
    for ev in (before_src or {}).get("events", []):
        if not ev.get("timed"):
            seen_before[ev.get("line", "")] = seen_before.get(ev.get("line", ""), 0) + 1
    for ev in src.get("events", []):
        if not ev.get("timed"):
            line = ev.get("line", "")
            if seen_before.get(line, 0) > 0:
                seen_before[line] -= 1
                continue
        elif since:
            try:
                if parse_iso_time(ev["time"]) < parse_iso_time(since):
                    continue
            except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
                pass
        code = num(ev.get("code"))
        if code is None:
            continue
        sev = Nagios.CRITICAL if code in j.cfg.xid_critical else Nagios.WARNING
        j.add("xid", sev, str(code), f"{j.node}: Xid {code} on GPU {ev.get('pci')} during the run: "
              f"{ev.get('message', '')}".rstrip(": "), pci=ev.get("pci"), code=code, time=ev.get("time"),
              line=ev.get("line"))


# The snapshot's data (SOURCE.shape).
SHAPE = obj({"command": string(), "since": string(True), "events": list_of(obj({
    "time": string(True), "pci": string(), "code": integer(), "message": string(), "line": string(),
    "timed": boolean()}, required=["code"]))}, required=["events"])

SOURCE = Source("xid", lambda r: collect_xid(r.paths, r.since), judge_xid, shape=SHAPE)
