"""Parsers for config values. Each takes the raw string and returns the typed value or raises ValueError
with a message that says what was expected."""

from __future__ import annotations

import math
import re
from datetime import date
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuclust.errors import SlurmOutputError
from gpuclust.slurm.parse import parse_slurm_duration

_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
# Bounds every consumer can hold: durations become datetime.timedelta and float seconds (a century is far
# beyond any sensible window or limit), sizes and integers int64 (numpy, pyarrow, Slurm's own counters).
MAX_DURATION_S = 100 * 365 * 86400
MAX_INT = 2**63 - 1
MAX_SIZE = 2**62


def parse_str(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    return text


def parse_slurm_name(text: str) -> str:
    """A Slurm partition/account/QOS/user/GRES type name: safe on any command line."""
    if not _SLURM_NAME.match(text):
        raise ValueError(f"{text!r} is not a valid Slurm name (letters, digits, '_', '.', '-')")
    return text


def parse_currency(text: str) -> str:
    """An ISO 4217 currency code: three capital letters (EUR, USD, CHF)."""
    if not re.fullmatch(r"[A-Z]{3}", text):
        raise ValueError(f"expected an ISO 4217 currency code such as EUR or USD, got {text!r}")
    return text


def parse_int(text: str) -> int:
    """A decimal integer within int64 (``_`` separators allowed, as Python reads them)."""
    raw = text.strip()
    if not re.fullmatch(r"[+-]?[0-9](?:_?[0-9])*", raw) or len(raw) > 40:
        raise ValueError(f"expected an integer, got {text!r}")
    value = int(raw.replace("_", ""))
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise ValueError(f"integer out of range (at most {MAX_INT}), got {text!r}")
    return value


def parse_nonneg_int(text: str) -> int:
    value = parse_int(text)
    if value < 0:
        raise ValueError(f"must be >= 0, got {value}")
    return value


def parse_positive_int(text: str) -> int:
    value = parse_int(text)
    if value <= 0:
        raise ValueError(f"must be > 0, got {value}")
    return value


def parse_nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"must be a finite number >= 0, got {text!r}")
    return value


def parse_fraction(text: str) -> float:
    """0.15 or 15%."""
    raw = text.strip()
    value = parse_nonneg_float(raw[:-1]) / 100 if raw.endswith("%") else parse_nonneg_float(raw)
    if value > 1:
        raise ValueError(f"must be a fraction between 0 and 1 (or a percentage), got {text!r}")
    return value


_TRUE = {"yes", "true", "on", "1"}
_FALSE = {"no", "false", "off", "0"}


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ValueError(f"expected yes/no, got {text!r}")


def parse_list(text: str) -> tuple[str, ...]:
    """Comma- or whitespace-separated list."""
    return tuple(item for item in re.split(r"[,\s]+", text.strip()) if item)


def parse_name_list(text: str) -> tuple[str, ...]:
    return tuple(parse_slurm_name(item) for item in parse_list(text))


def parse_duration(text: str) -> int:
    """Seconds from `90s`, `30m`, `24h`, `7d`, `2w`, plain seconds, or Slurm's `[D-]HH:MM:SS` / `MM:SS`."""
    raw = text.strip().lower()
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw]?)", raw)
    if match:
        return _bounded_duration(float(match.group(1)) * _DURATION_UNITS.get(match.group(2) or "s", 1), text)
    if ":" in raw and re.fullmatch(r"[0-9:\-]+", raw):
        try:
            seconds = parse_slurm_duration(raw)
        except (SlurmOutputError, ValueError, OverflowError):
            seconds = None
        if seconds is not None and seconds >= 0:
            return _bounded_duration(seconds, text)
    raise ValueError(f"expected a duration like 30m, 24h, 7d or 2-00:00:00, got {text!r}")


def _bounded_duration(seconds: float, text: str) -> int:
    if not seconds <= MAX_DURATION_S:  # (also NaN / inf)
        raise ValueError(f"duration too long (at most {MAX_DURATION_S // (365 * 86400)} years), got {text!r}")
    return int(seconds)


def parse_size(text: str) -> int:
    """Bytes from `8`, `64K`, `1M`, `1G`, `1GiB`, `512MB` (binary units throughout)."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        raise ValueError(f"expected a size like 8, 64K, 256M or 1G, got {text!r}")
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
    if not size <= MAX_SIZE:
        raise ValueError(f"size too large (at most 4 EiB), got {text!r}")
    return int(size)


def parse_mem_mb(text: str) -> int:
    """Memory in MB as Slurm writes it (--mem): `64000`, `64G`, `512M`, `1T`; no suffix is MB."""
    match = re.fullmatch(r"([0-9]+)\s*([KMGT]?)(?:i?B)?", text.strip(), re.IGNORECASE)
    if not match:
        raise ValueError(f"expected a memory size like 64000 (MB), 512M, 64G or 1T, got {text!r}")
    mb = int(match.group(1))
    unit = match.group(2).upper()
    mb = -(-mb // 1024) if unit == "K" else mb * {"": 1, "M": 1, "G": 1024, "T": 1024**2}[unit]
    if not 0 < mb <= 2**40:
        raise ValueError(f"must be > 0 and at most 1 EiB, got {text!r}")
    return mb


def parse_timezone(text: str) -> str:
    try:
        if len(text) > 255:
            raise ValueError("too long")
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # (OSError: a name the file system refuses)
        raise ValueError(f"unknown time zone {text!r} (use an IANA name such as UTC or Europe/Berlin)") from None
    return text


def parse_abs_path(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"must be an absolute path, got {text!r}")
    if any(c in text for c in "\n\0"):
        raise ValueError("path contains a newline or NUL")
    return text


def parse_choice(*choices: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text.lower()

    return parse


def parse_date(text: str) -> str:
    """A calendar date, YYYY-MM-DD (kept as that text)."""
    raw = text.strip()
    if re.fullmatch(r"\d{4}-\d\d-\d\d", raw):
        try:
            return date.fromisoformat(raw).isoformat()
        except ValueError:
            pass
    raise ValueError(f"expected a date YYYY-MM-DD, got {text!r}")


def parse_label_pairs(text: str) -> dict[str, str]:
    """`team=physics, project=lattice` -> {'team': 'physics', 'project': 'lattice'}."""
    pairs: dict[str, str] = {}
    for item in parse_list(text):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"expected key=value pairs, got {item!r}")
        pairs[parse_slurm_name(key)] = value
    return pairs


def parse_positive_seconds(text: str) -> float:
    """Seconds > 0: a plain number (fractions allowed: 0.5) or a duration like 30s, 5m."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        value = float(parse_duration(raw))
    if not (value > 0 and math.isfinite(value) and value <= MAX_DURATION_S):
        raise ValueError(f"must be a duration > 0 (e.g. 30s, 5m or 30), got {text!r}")
    return value


def parse_positive_float(text: str) -> float:
    value = parse_nonneg_float(text)
    if value <= 0:
        raise ValueError(f"must be > 0, got {text!r}")
    return value
