"""Acceptance jobs: all_reduce, pairwise, storage and health runs on GRES-allocated nodes, their results and
their verdicts.

This module is the plane's public face: what other planes may use of it (the audit's acceptance freshness and
version drift, the unit economics' measured restore times). They import these names from here, never a module
inside (tests/unit/test_import_graph.py holds that).
"""

from gpuclust.accept.drift import VERSION_FIELDS
from gpuclust.accept.drift import across as drift_across
from gpuclust.accept.results import JobResult, Versions, last_pass_by_node, scan_results

__all__ = ["VERSION_FIELDS", "JobResult", "Versions", "drift_across", "last_pass_by_node", "scan_results"]
