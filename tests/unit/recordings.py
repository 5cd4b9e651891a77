"""What the recorded text dumps in tests/data were fetched without.

A dump recorded before a field joined `report fetch`'s list (Reason, Timelimit, SubmitLine, ReqTRES, ...) has
no column for it: the field reads as null there, while `sacct --json` of the same jobs gives it. Tests that
compare the two forms row by row leave those columns out, by the recording's own header, so a field added to
the registry later needs no list of its own here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuclust.accounting.ingest.registry import REGISTRY


def unrecorded_columns(dump: Path, delimiter: str) -> tuple[str, ...]:
    """The table columns of the registry fields the header of the text dump `dump` lacks. (A step usage field
    has none of its own: it rolls up into the usage columns every reader makes.)"""
    header = dump.read_bytes().split(b"\n", 1)[0].decode().split(delimiter)
    return tuple(c.name for fd in REGISTRY.fields if fd.name not in header and not fd.step_usage
                 for c in fd.columns)


def without_unrecorded(dump: Path, delimiter: str, *rows: list[dict[str, Any]]) -> None:
    """Drop the unrecorded columns of `dump` from each row of each list, in place."""
    names = unrecorded_columns(dump, delimiter)
    for row in (r for one in rows for r in one):
        for name in names:
            row.pop(name, None)


def report_without_unrecorded(dump: Path, delimiter: str, report: dict[str, Any]) -> dict[str, Any]:
    """report.json's data without the unrecorded columns of `dump` in its per-job rows (`top_failures`: a field
    that table shows reads as null from the recording and as given from --json)."""
    names = set(unrecorded_columns(dump, delimiter))
    out = dict(report)
    out["top_failures"] = [{k: v for k, v in row.items() if k not in names} for row in report.get("top_failures", [])]
    return out
