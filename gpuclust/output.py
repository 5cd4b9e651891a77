"""Text output shared by the planes: JSON for scripts, aligned tables for people.

The planes (accept, audit, accounting) render their own output with these; gpuclust.cli only prints what they
return, so no plane imports the CLI.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from json.encoder import encode_basestring as _encode_str  # (json's own: C, ensure_ascii=False)
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _clean(value: Any) -> Any:
    """NaN is not JSON; scripts get null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# A lone surrogate: a byte that was no UTF-8 in an input (argv, a file, Slurm's output), kept by surrogateescape.
# It cannot be encoded to stdout or a UTF-8 file, so it is written as a JSON escape (\udcff), still valid JSON.
_SURROGATE = re.compile("[\ud800-\udfff]")


def to_json(obj: Any) -> str:
    """json.dumps(_clean(obj), indent=2, default=_default, ensure_ascii=False), byte for byte (_indented), with
    lone surrogates escaped."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", _indented(obj))


# An indented writer of json.dumps' exact text: json indents only in pure Python (generators, a call per value),
# and _clean copied the whole document first; this one cleans as it writes (a small report.json in half the time).
def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value == math.inf:
        return "Infinity"
    if value == -math.inf:
        return "-Infinity"
    return float.__repr__(value)


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, float):
        return _float_text(key)
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _scalar(value: Any, clean: bool) -> str | None:
    """A scalar's JSON text as json writes it (NaN and infinities null where `clean`); None: not a scalar."""
    if isinstance(value, str):
        return _encode_str(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return "null" if clean and not math.isfinite(value) else _float_text(value)
    return None


def _write(value: Any, level: int, out: list[str], clean: bool) -> None:
    text = _scalar(value, clean)
    if text is not None:
        out.append(text)
    elif isinstance(value, (list, tuple)):
        if not value:
            out.append("[]")
            return
        inner = "\n" + "  " * (level + 1)
        sep = "[" + inner
        for item in value:
            text = _scalar(item, clean)
            if text is not None:
                out.append(sep + text)
            else:
                out.append(sep)
                _write(item, level + 1, out, clean)
            sep = "," + inner
        out.append("\n" + "  " * level + "]")
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = "\n" + "  " * (level + 1)
        sep = "{" + inner
        for key, item in value.items():
            head = sep + _encode_str(_key_text(key)) + ": "
            text = _scalar(item, clean)
            if text is not None:
                out.append(head + text)
            else:
                out.append(head)
                _write(item, level + 1, out, clean)
            sep = "," + inner
        out.append("\n" + "  " * level + "}")
    else:  # (what _default gives is written as json writes it: not cleaned)
        _write(_default(value), level, out, False)


def _indented(obj: Any) -> str:
    out: list[str] = []
    _write(obj, 0, out, True)
    return "".join(out)


def json_values(obj: Any) -> Any:
    """`obj` as the values to_json writes (numpy scalars as numbers, NaN as null, tuples as lists), read back:
    json.loads(to_json(obj)) without the indented text, which only the pure-Python encoder writes (this one
    is compact ASCII, C-encoded: its escapes, lone surrogates' included, read back the same)."""
    return json.loads(json.dumps(_clean(obj), default=_default))


# What a terminal acts on rather than shows: C0 controls (ESC starts every escape sequence; CR, BS and friends
# overwrite what was printed; a newline forges a line, the Nagios status line's included), DEL, C1 controls
# (0x9b is a one-byte CSI), the line and paragraph separators, the bidirectional overrides and isolates, and
# lone surrogates (bytes that were no UTF-8, which stdout cannot even encode).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(value: Any) -> str:
    """Text from a node or a user, made safe to print to a terminal or a Nagios status line: every character
    in _UNSAFE is written as a visible escape (ESC as \\x1b, a newline as \\x0a), the rest kept. Applied where
    text is rendered for people (format_table's cells, findings.status_line, the renderers' free lines); JSON
    keeps the raw value (JSON escapes it itself)."""
    text = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(_escape, text)


def terminal_lines(lines: Iterable[Any]) -> str:
    """Lines of rendered text joined by newlines, each made terminal_safe (a newline inside one is escaped,
    so it cannot forge a line of its own). A block that is already safe (a format_table) passes unchanged
    when given as its own lines: terminal_lines(table.splitlines())."""
    return "\n".join(terminal_safe(line) for line in lines)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns; every cell terminal_safe."""
    cells = [[terminal_safe(h) for h in headers]] + [["" if c is None else terminal_safe(c) for c in row]
                                                       for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
