"""Hardware-health counters for acceptance runs (issue 27, library part).

Every node snapshots its counters before and after each acceptance run (`python -m gpuclust.accept.health
snapshot`, collect.py); the delta is what the run caused, the absolute values show the node's state. Sources
(NIC statistics, TCP counters, qdiscs, InfiniBand ports, nvidia-smi, kernel Xid lines; dcgmi diag and
nvbandwidth when asked) are each optional and detected: a missing one is "unavailable" with a reason, never
"healthy". Each source is one module of sources/ (its parser, collector and rules; how to add one is there),
built on kit.py; collect.py snapshots them all, rules.py judges snapshot pairs into HealthFindings by the
[health] config section (gpuclust.config.health), parse.py gathers the parsers in one namespace.
"""

from __future__ import annotations

from gpuclust.accept.health.collect import load_snapshots, snapshot, write_snapshot
from gpuclust.accept.health.kit import HealthFinding, HealthParseError, HealthPaths, to_finding
from gpuclust.accept.health.rules import judge_job, judge_node
from gpuclust.accept.health.sources.dcgm import judge_dcgm

__all__ = [
    "HealthFinding",
    "HealthParseError",
    "HealthPaths",
    "judge_dcgm",
    "judge_job",
    "judge_node",
    "load_snapshots",
    "snapshot",
    "to_finding",
    "write_snapshot",
]
