"""Submit-policy refusals, read from slurmctld's log.

The rendered job_submit.lua (gpuclust/policy/engine.lua, `log_reject`) writes one line per rejection through
slurm.log_info. slurmctld prefixes it with its timestamp and `lua: `; recorded on the lab (22.05, default
LogTimeFormat iso8601_ms):

    [2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v1 op=submit rule=partition_account account=physics user=root partition=a100 gpus=1

A rule in warn mode logs the same fields after `gpuclust-policy-warn v1` for a job it accepted: a would-be refusal,
kept beside the real ones (Refusal.warn) and counted apart. `gpus=` is an integer; policies rendered before the
engine wrote counts as integers under every Lua logged `gpus=16.0` under Lua 5.3+, which reads as 16.

Values are %XX-escaped by the engine (every byte outside [A-Za-z0-9_.,:/@+-]), so a space or '=' in an
account or partition name cannot break the line; an unset value is empty. `report fetch` reads the log and
its logrotate siblings (slurmctld.log.1, slurmctld.log.2.gz, slurmctld.log-20261203[.gz], ...), keeps the
refusals of each fetched day under economics_dir/day=DAY/refusals.json, and counts the lines that are not
gpuclust's (ignored). One rejection is counted once even when two rotated files overlap.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import unquote
from zoneinfo import ZoneInfo

from gpuclust.accounting.history.events import day_dir
from gpuclust.atomicfile import write_atomic
from gpuclust.errors import InputError, Problem

MARKER = "gpuclust-policy-reject"
WARN_MARKER = "gpuclust-policy-warn"
FIELDS = ("op", "rule", "account", "user", "partition", "gpus")
REFUSALS_FILE = "refusals.json"
# slurmctld's LogTimeFormat: iso8601_ms (default) / iso8601 `[2026-12-03T09:06:16.148]`, rfc5424(_ms) / rfc3339
# with an offset `[2026-12-03T09:06:16.148+00:00]`; a syslog-style prefix before the bracket is allowed.
_LINE = re.compile(
    r"\[(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]\s+(?:[^\s:]+:\s+)*"
    + r"(?P<marker>" + MARKER + "|" + WARN_MARKER + r") (?P<version>v\d+) (?P<fields>.*)$"
)
_VALUE = re.compile(r"[A-Za-z0-9_.,:/@+%\-]*")
_COUNT = re.compile(r"(\d+)(?:\.0*)?")  # 16, or 16.0 as older policies logged it under Lua 5.3+


@dataclass(frozen=True)
class Refusal:
    """One refusal of the submit policy as its log line gives it (or a warn-mode rule's would-be refusal)."""

    time: float  # epoch seconds
    op: str
    rule: str
    account: str
    user: str
    partition: str
    gpus: int | None
    warn: bool = False  # a rule in warn mode: the job was accepted, and would have been refused

    def as_dict(self) -> dict[str, Any]:
        out = {"time": self.time, "op": self.op, "rule": self.rule, "account": self.account, "user": self.user,
               "partition": self.partition, "gpus": self.gpus}
        if self.warn:
            out["warn"] = True
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Refusal:
        return cls(float(d["time"]), d["op"], d["rule"], d["account"], d["user"], d["partition"], d.get("gpus"),
                   bool(d.get("warn", False)))


def parse_count(text: str) -> int | None:
    """A logged GPU count: `16`, or `16.0` (an older policy under Lua 5.3+); None when empty or not integral."""
    match = _COUNT.fullmatch(text)
    return int(match.group(1)) if match else None


@dataclass
class LogRead:
    """What reading slurmctld's log found: the refusals, the lines not gpuclust's, unreadable ones, the files."""

    refusals: list[Refusal] = field(default_factory=list)
    ignored_lines: int = 0  # lines not written by gpuclust's rejection logger
    bad_lines: list[Problem] = field(default_factory=list)  # marker present but unreadable
    files: list[str] = field(default_factory=list)


def parse_line(line: str, tz: ZoneInfo) -> Refusal | None:
    """The refusal (or, from a gpuclust-policy-warn line, the would-be refusal) in one log line, None when the line
    is neither; ValueError when it carries a marker but cannot be read (another version, a truncated line)."""
    if MARKER not in line and WARN_MARKER not in line:
        return None
    match = _LINE.search(line.rstrip("\r\n"))
    if not match:
        marker = MARKER if MARKER in line else WARN_MARKER
        raise ValueError(f"a {marker} line gpuclust cannot read")
    if match.group("version") != "v1":
        raise ValueError(f"{match.group('marker')} {match.group('version')}: this gpuclust reads v1")
    values: dict[str, str] = {}
    for token in match.group("fields").split(" "):
        key, sep, value = token.partition("=")
        if not sep or key not in FIELDS or key in values or not _VALUE.fullmatch(value):
            raise ValueError(f"bad field {token[:60]!r}")
        values[key] = unquote(value)
    if "rule" not in values:
        raise ValueError("no rule= field")
    ts = datetime.fromisoformat(match.group("ts").replace("Z", "+00:00"))
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=tz)  # slurmctld logs local time without an offset (iso8601 formats)
    gpus_text = values.get("gpus", "")
    return Refusal(ts.timestamp(), values.get("op", "submit"), values["rule"], values.get("account", ""),
                   values.get("user", ""), values.get("partition", ""), parse_count(gpus_text),
                   match.group("marker") == WARN_MARKER)


def rotated_files(log_path: str) -> list[Path]:
    """The log and its logrotate siblings, oldest first: NAME.N[.gz] (numbered, higher = older), then dated
    NAME-YYYYMMDD[.gz] / NAME.YYYY-MM-DD[.gz] (by name), then NAME itself."""
    base = Path(log_path)
    parent = base.parent
    if not parent.is_dir():
        return [base] if base.exists() else []
    numbered: list[tuple[int, Path]] = []
    dated: list[Path] = []
    pattern = re.compile(re.escape(base.name) + r"(?:\.(?P<n>\d+)|[-.](?P<d>\d{8}|\d{4}-\d\d-\d\d))(?:\.gz)?$")
    for entry in parent.iterdir():
        match = pattern.fullmatch(entry.name)
        if not match or not entry.is_file():
            continue
        if match.group("n") is not None:
            numbered.append((int(match.group("n")), entry))
        else:
            dated.append(entry)
    out = sorted(dated, key=lambda p: p.name)
    out = [p for _, p in sorted(numbered, key=lambda np_: -np_[0])] + out
    if base.exists():
        out.append(base)
    return out


def _lines(path: Path) -> Any:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return path.open("r", encoding="utf-8", errors="replace")


def read_logs(paths: list[Path], tz: ZoneInfo, *, since: float | None = None, until: float | None = None) -> LogRead:
    """Refusals in [since, until) from the files (any order); lines not by gpuclust are counted as ignored.
    A line present in two files (copytruncate overlap) counts once."""
    out = LogRead(files=[str(p) for p in paths])
    seen: set[str] = set()
    for path in paths:
        try:
            handle = _lines(path)
        except OSError as exc:
            raise InputError(Problem(str(path), None, f"cannot read the slurmctld log: {exc.strerror or exc}")) from None
        with handle:
            lineno = 0
            try:
                for lineno, line in enumerate(handle, start=1):
                    try:
                        refusal = parse_line(line, tz)
                    except ValueError as exc:
                        out.bad_lines.append(Problem(str(path), lineno, str(exc)))
                        continue
                    if refusal is None:
                        out.ignored_lines += 1
                        continue
                    if (since is not None and refusal.time < since) or (until is not None and refusal.time >= until):
                        continue
                    key = line.strip()
                    if key in seen:
                        continue
                    seen.add(key)
                    out.refusals.append(refusal)
            except (OSError, EOFError, zlib.error) as exc:  # a truncated or damaged .gz (zlib.error: bad deflate data)
                out.bad_lines.append(Problem(str(path), None, f"stopped reading after line {lineno}: {exc}; the "
                                             "refusals after it are not counted (check the file with gzip -t)"))
    out.refusals.sort(key=lambda r: r.time)
    return out


def fetch_days(log_path: str, state_dir: str, days: list[date], tz: ZoneInfo) -> dict[str, Any]:
    """Read the log (and rotated files) once, keep each day's refusals (UTC days) in its refusals.json."""
    files = rotated_files(log_path)
    if not files:
        raise InputError(Problem(log_path, None, "slurmctld log not found (site slurmctld_log)"))
    start = datetime(days[0].year, days[0].month, days[0].day, tzinfo=timezone.utc).timestamp()
    end = datetime(days[-1].year, days[-1].month, days[-1].day, tzinfo=timezone.utc).timestamp() + 86400
    read = read_logs(files, tz, since=start, until=end)
    by_day: dict[date, list[Refusal]] = {d: [] for d in days}
    for r in read.refusals:
        d = datetime.fromtimestamp(r.time, timezone.utc).date()
        if d in by_day:
            by_day[d].append(r)
    for d, items in by_day.items():
        write_atomic(day_dir(state_dir, d) / REFUSALS_FILE, json.dumps({
            "refusals": [r.as_dict() for r in items],
            "ignored_lines": read.ignored_lines, "bad_lines": [str(p) for p in read.bad_lines[:50]],
            "files": read.files}), make_parents=True)
    return {"refusals": len(read.refusals), "ignored_lines": read.ignored_lines, "bad_lines": len(read.bad_lines),
            "files": read.files}


@dataclass
class RefusalSource:
    """The stored refusals of a period's days (None: unknown), the lines ignored or unreadable, the days missing."""

    refusals: list[Refusal] | None  # None: not known (no log configured or read)
    ignored_lines: int = 0
    bad_lines: list[str] = field(default_factory=list)
    missing_days: list[str] = field(default_factory=list)


def load_stored(state_dir: str, days: list[date], since: float | None = None,
                until: float | None = None) -> RefusalSource:
    """The stored refusals of `days`, those in [since, until) (a period need not be whole days)."""
    items: list[Refusal] = []
    ignored = 0
    bad: list[str] = []
    missing = []
    for d in days:
        path = day_dir(state_dir, d) / REFUSALS_FILE
        if not path.exists():
            missing.append(d.isoformat())
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        items += [r for r in (Refusal.from_dict(x) for x in data["refusals"])
                  if (since is None or r.time >= since) and (until is None or r.time < until)]
        ignored = max(ignored, int(data.get("ignored_lines", 0)))  # (one read of the log serves several days)
        bad += [b for b in data.get("bad_lines", []) if b not in bad]
    if len(missing) == len(days):
        return RefusalSource(None, missing_days=missing)
    return RefusalSource(items, ignored, bad, missing)


def read_file(path: str, tz: ZoneInfo, since: float, until: float) -> RefusalSource:
    """The offline form: `report build --slurmctld-log FILE` (rotated siblings of FILE are read too)."""
    files = rotated_files(path)
    if not files:
        raise InputError(Problem(path, None, "cannot read the slurmctld log: no such file"))
    read = read_logs(files, tz, since=since, until=until)
    return RefusalSource(read.refusals, read.ignored_lines, [str(p) for p in read.bad_lines[:50]])


def counts(refusals: list[Refusal], what: str = "refusals") -> dict[str, list[dict[str, Any]]]:
    """Refusals by rule, account, user and partition (descending count, then name); each count is under `what`."""
    out: dict[str, list[dict[str, Any]]] = {}
    for dim in ("rule", "account", "user", "partition"):
        c = Counter(getattr(r, dim) or "(none)" for r in refusals)
        out[f"by_{dim}"] = [{dim: k, what: n} for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]
    return out
