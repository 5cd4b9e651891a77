"""The accounting plane: sacct ingest, the history store, the figures and the report.

Its public face for other planes (tests/unit/test_import_graph.py): the live telemetry reader the guard uses, and
the lemon nodes of the store that `audit partition` checks (pipeline.lemon_nodes), and the stored requests that
`policy replay` runs through the submit policy (stored_requests).
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
    from gpuclust.accounting.pipeline import lemon_nodes

__all__ = ["JobTelemetry", "JobWindow", "TelemetryResult", "fetch_telemetry", "lemon_nodes", "stored_requests"]


def _lemon_nodes(config: Any, since: Any, until: Any) -> dict[str, Any]:
    """pipeline.lemon_nodes, which loads the data libraries only when there is a store to read (`audit
    partition` on a host without one stays light)."""
    from gpuclust.accounting.history.storepath import store_dir

    root = store_dir(config.state_dir)
    if not root.is_dir():
        from gpuclust.errors import InputError

        raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")
    from gpuclust.accounting import pipeline

    return pipeline.lemon_nodes(config, since, until)


def stored_requests(config: Any, since: Any, until: Any) -> Any:
    """The stored executions (a pyarrow Table of history.storeread.REQUEST_COLUMNS: the job, its submit line and
    request fields, its AllocTRES and elapsed time) of the jobs submitted in since..until (aware datetimes), as
    `report fetch` stored them; InputError when there is no store (or a StoreError naming a damaged day)."""
    from gpuclust.accounting.history.storepath import store_dir

    root = store_dir(config.state_dir)
    if not root.is_dir():
        from gpuclust.errors import InputError

        raise InputError(f"no accounting data in {root}: run `gpuclust report fetch` first")
    from gpuclust.accounting.history import storeread

    return storeread.requests_submitted(root, since, until, config.cluster_name)


def __getattr__(name: str) -> Any:
    if name == "lemon_nodes":
        return _lemon_nodes
    if name in __all__:
        from gpuclust.accounting.figures import telemetry

        return getattr(telemetry, name)
    raise AttributeError(f"module 'gpuclust.accounting' has no attribute {name!r}")
