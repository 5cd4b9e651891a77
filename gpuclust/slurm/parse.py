"""Parsers for Slurm's text forms, shared by every plane: TRES and GRES strings, scontrol one-liners,
--parsable2 tables, Slurm durations, times and memory sizes. Pure functions, one per form."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from gpuclust.errors import SlurmOutputError

UNKNOWN_TIMES = frozenset({"", "Unknown", "None", "N/A", "(null)", "0", "NONE"})
UNLIMITED = frozenset({"UNLIMITED", "INFINITE", "Partition_Limit", "infinite", "unlimited"})
_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}


# ---- TRES -------------------------------------------------------------------------------------------

def parse_tres(text: str | None) -> dict[str, str]:
    """`billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1` -> {'billing': '8', ...}.

    Empty input gives {}. A piece without '=' raises SlurmOutputError naming it.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        key, sep, value = piece.partition("=")
        if not sep or not key:
            raise SlurmOutputError(f"bad TRES item {piece!r} in {text!r}")
        out[key] = value
    return out


def tres_count(value: str) -> int:
    """TRES counts are integers, except memory-like values with a unit; those are not counts."""
    try:
        return int(value)
    except ValueError:
        raise SlurmOutputError(f"TRES count {value!r} is not an integer") from None


def gpu_count(tres: Mapping[str, str]) -> int:
    """GPUs of a TRES dict: the untyped `gres/gpu` key; 0 when absent."""
    value = tres.get("gres/gpu")
    return tres_count(value) if value is not None else 0


def gpu_types(tres: Mapping[str, str]) -> dict[str, int]:
    """{'h100': 2} from typed keys `gres/gpu:h100=2` (0-count types dropped)."""
    out: dict[str, int] = {}
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            count = tres_count(value)
            if count:
                out[key[len("gres/gpu:"):]] = count
    return out


def gpu_type(tres: Mapping[str, str]) -> str | None:
    """The GPU type of a TRES dict: the typed key with the largest count (ties: by name); None if untyped."""
    types = gpu_types(tres)
    if not types:
        return None
    return sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]


# ---- GRES -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gres:
    """One GRES item: `gpu:h100:4(S:0-1)`, `gpu:2`, `gres:gpu:h100:2`, `gpu:h100:2(IDX:0-1)`."""

    name: str
    type: str | None
    count: int
    detail: str | None = None  # what was in parentheses: S:0-1, IDX:0-1

    @property
    def indexes(self) -> str | None:
        if self.detail and self.detail.startswith("IDX:"):
            return self.detail[4:]
        return None


_GRES_ITEM = re.compile(r"^(?:gres[:/])?([A-Za-z0-9_\-]+)(?::([A-Za-z0-9_.\-]+))?(?::(\d+[KMGT]?))?(?:\((.*)\))?$")


def parse_gres(text: str | None) -> list[Gres]:
    """Comma-separated GRES items; `(null)`/empty -> []. A bare `gpu` means count 1.

    `gpu:2` is count 2 untyped; `gpu:h100` (no count) is type h100 count 1. Commas inside parentheses
    (`gpu:h100:4(S:0,1)`) do not split items.
    """
    if not text or text in ("(null)", "N/A", "none"):
        return []
    items: list[Gres] = []
    for raw in _split_outside_parens(text):
        raw = raw.strip()
        if not raw:
            continue
        match = _GRES_ITEM.match(raw)
        if not match:
            raise SlurmOutputError(f"bad GRES item {raw!r} in {text!r}")
        name, second, third, detail = match.groups()
        gtype: str | None
        if third is not None:
            gtype, count_text = second, third
        elif second is not None and second.isdigit():
            gtype, count_text = None, second
        else:
            gtype, count_text = second, "1"
        items.append(Gres(name, gtype, _count_with_suffix(count_text), detail))
    return items


def _count_with_suffix(text: str) -> int:
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    if text[-1] in mult:
        return int(text[:-1]) * mult[text[-1]]
    return int(text)


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


# ---- scontrol ---------------------------------------------------------------------------------------

# A new key starts at a space followed by Word= (keys may contain '/', ':', '.' as in CfgTRES, gres/gpu).
_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.\-]*)=")


def parse_scontrol_record(text: str) -> dict[str, str]:
    """One `scontrol show X -o` line (or a multi-line record) -> {key: value}.

    Values may contain spaces (Reason=Not responding [slurm@...], Comment=...). A value runs until the
    next ` Key=`; this is the same heuristic scontrol's own readers use, and it is exact for the keys
    Slurm prints because every key starts a new whitespace-separated token.
    """
    flat = " ".join(line.strip() for line in text.strip().splitlines())
    matches = list(_SCONTROL_KEY.finditer(flat))
    out: dict[str, str] = {}
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(flat)
        out[match.group(1)] = flat[match.end():end].strip()
    return out


def parse_scontrol_oneliners(text: str) -> list[dict[str, str]]:
    """`scontrol show node -o` output -> one dict per non-empty line."""
    return [parse_scontrol_record(line) for line in text.splitlines() if line.strip() and "=" in line]


# ---- scontrol show config --------------------------------------------------------------------------------

def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` `Key = value` lines -> dict (the header and plugin sections are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def accounting_tres(config: Mapping[str, str]) -> frozenset[str]:
    """The TRES slurmdbd accounts (AccountingStorageTRES): a typed limit on anything else is never enforced."""
    return frozenset(p.strip() for p in config.get("AccountingStorageTRES", "").split(",") if p.strip())


# ---- --parsable2 tables -----------------------------------------------------------------------------

def parse_parsable(text: str, delimiter: str = "|", *, required: Sequence[str] = (),
                   command: str = "output") -> list[dict[str, str]]:
    """`sacctmgr/sinfo --parsable2` output with a header line -> list of dicts keyed by header.

    A line with the wrong number of fields raises SlurmOutputError naming the line; so does a first line that
    lacks a `required` column (output without its header: a wrapper or alias adding -n). sacctmgr values
    never contain the delimiter or newlines, unlike sacct job names (the accounting plane reads those).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split(delimiter)
    missing = [name for name in required if name not in header]
    if missing:
        raise SlurmOutputError(
            f"{command}: line 1 is not a header with {', '.join(missing)} (got {lines[0][:120]!r}); gpuclust asks "
            "for --parsable2 output with its header line: look for a wrapper or alias that adds -n/--noheader")
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        fields = line.split(delimiter)
        if len(fields) != len(header):
            raise SlurmOutputError(f"line {lineno}: expected {len(header)} fields, got {len(fields)}: {line!r}")
        rows.append(dict(zip(header, fields, strict=True)))
    return rows


# ---- durations, times, memory -----------------------------------------------------------------------

_DURATION = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def parse_slurm_duration(text: str | None) -> int | None:
    """Seconds from Slurm's `[DD-[HH:]]MM:SS` (also `DD-HH` / minutes only as printed by some fields).

    None for Unknown/empty; -1 for UNLIMITED/Partition_Limit. Raises SlurmOutputError otherwise.
    """
    if text is None:
        return None
    raw = text.strip()
    if raw in UNKNOWN_TIMES or raw == "INVALID":
        return None
    if raw in UNLIMITED:
        return -1
    match = _DURATION.match(raw)
    if match:
        days, hours, minutes, seconds = match.groups()
        if days is not None and hours is None:
            # With days, two fields are hours:minutes (Slurm's "days-hours:minutes"), not minutes:seconds.
            hours, minutes, seconds = minutes, seconds, "0"
        return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + int(float(seconds))
    match = re.fullmatch(r"(\d+)-(\d+)", raw)  # DD-HH
    if match:
        return int(match.group(1)) * 86400 + int(match.group(2)) * 3600
    if raw.isdigit():  # plain minutes, as in TimeLimit of some outputs
        return int(raw) * 60
    raise SlurmOutputError(f"bad Slurm duration {text!r}")


def format_slurm_duration(seconds: int) -> str:
    """Slurm's `[D-]HH:MM:SS` for a whole number of seconds (sacct's Elapsed, --time, MaxTime): the form
    `parse_slurm_duration` reads back."""
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def parse_slurm_time(text: str | None, tz: timezone = timezone.utc) -> datetime | None:
    """`2026-12-02T10:58:03` (SLURM_TIME_FORMAT pinned by the client) -> aware datetime; Unknown -> None."""
    if text is None:
        return None
    raw = text.strip()
    if raw in UNKNOWN_TIMES:
        return None
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise SlurmOutputError(f"bad Slurm time {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=tz)


def parse_memory_mb(text: str | None) -> float | None:
    """`64G`, `16000M`, `512K`, `16000` (MB), with optional per-node/cpu suffix `n`/`c` -> MB."""
    if text is None:
        return None
    raw = text.strip()
    if raw in UNKNOWN_TIMES:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTP]?)[nc]?", raw, re.IGNORECASE)
    if not match:
        raise SlurmOutputError(f"bad memory size {text!r}")
    return float(match.group(1)) * _MEM_UNITS[(match.group(2) or "M").upper()]
