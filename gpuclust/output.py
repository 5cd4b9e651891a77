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
    text = json.dumps(_clean(obj), indent=2, sort_keys=False, default=_default, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
