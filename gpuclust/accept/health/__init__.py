"""Hardware-health counters for acceptance runs (issue 27, library part).

Every node snapshots its counters before and after each acceptance run (`python -m gpuclust.accept.health
snapshot`, collect.py); the delta is what the run caused, the absolute values show the node's state. Sources
(NIC statistics, TCP counters, qdiscs, InfiniBand ports, nvidia-smi, kernel Xid lines) are each optional and
detected: a missing one is "unavailable" with a reason, never "healthy". parse.py holds the pure parsers
(also for dcgmi diag -j and nvbandwidth), rules.py judges snapshot pairs into HealthFindings by the [health]
config section (gpuclust.config.health).
"""

from __future__ import annotations

from gpuclust.accept.health.collect import HealthPaths, load_snapshots, snapshot, write_snapshot
from gpuclust.accept.health.parse import HealthParseError
from gpuclust.accept.health.rules import HealthFinding, judge_dcgm, judge_job, judge_node, to_finding

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
