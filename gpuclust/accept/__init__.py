"""Acceptance jobs: all_reduce, pairwise, storage and health runs on GRES-allocated nodes, their results and
their verdicts.

This module is the plane's public face: what other planes may use of it (the audit's acceptance freshness and
version drift and a node's last nvidia-smi report, the unit economics' measured restore times and whether there are any). They import these names from here, never a module
inside (tests/unit/test_import_graph.py holds that). The names load on first use, so the programs that run on
the compute nodes (`python -m gpuclust.accept.health ...` in a prolog, say) do not load the results reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuclust.accept.drift import VERSION_FIELDS
    from gpuclust.accept.drift import across as drift_across
    from gpuclust.accept.health.job import latest_nvidia_smi
    from gpuclust.accept.resultfiles import result_files
    from gpuclust.accept.results import JobResult, Versions, last_pass_by_node, scan_results

__all__ = ["VERSION_FIELDS", "JobResult", "Versions", "drift_across", "last_pass_by_node", "latest_nvidia_smi",
           "result_files", "scan_results"]


def __getattr__(name: str) -> Any:
    if name in ("VERSION_FIELDS", "drift_across"):
        from gpuclust.accept import drift

        return drift.VERSION_FIELDS if name == "VERSION_FIELDS" else drift.across
    if name == "latest_nvidia_smi":  # (the audit: what a node's GPUs last reported, e.g. its MIG devices)
        from gpuclust.accept.health.job import latest_nvidia_smi

        return latest_nvidia_smi
    if name == "result_files":  # (which files are results, told without loading the reader)
        from gpuclust.accept.resultfiles import result_files

        return result_files
    if name in ("JobResult", "Versions", "last_pass_by_node", "scan_results"):
        from gpuclust.accept import results

        return getattr(results, name)
    raise AttributeError(f"module 'gpuclust.accept' has no attribute {name!r}")
