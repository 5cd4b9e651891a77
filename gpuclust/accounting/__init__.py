"""The accounting plane: sacct ingest, the history store, the figures and the report.

Its public face for other planes (tests/unit/test_import_graph.py): the live telemetry reader the guard uses.
The names load on first use, so importing the package loads nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuclust.accounting.figures.telemetry import (
        JobTelemetry,
        JobWindow,
        TelemetryResult,
        fetch_telemetry,
    )

__all__ = ["JobTelemetry", "JobWindow", "TelemetryResult", "fetch_telemetry"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpuclust.accounting.figures import telemetry

        return getattr(telemetry, name)
    raise AttributeError(f"module 'gpuclust.accounting' has no attribute {name!r}")
