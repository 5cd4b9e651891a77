"""Judge a node's before/after health snapshots: what the run caused (deltas) and the state the node is in
(absolute values after the run). Thresholds come from [health] (gpuclust.config.health, defaults and their
reasons there).

Each source's rules live in its module (gpuclust.accept.health.sources, which also says what each finds);
this module runs them over a node and a job. The classes and severities are listed at kit.CLASSES. Here:
  unavailable  a source unavailable in either snapshot: UNKNOWN when [health] require lists it, else OK (a
               visible note that does not change the exit code); a node without both snapshots: UNKNOWN;
               a source whose data in a snapshot file does not fit its shape (collect.checked_source):
               UNKNOWN, detail <source>-invalid, naming the field; that source is not judged on that node
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuclust.accept.health import sources
from gpuclust.accept.health.kit import CLASSES, HealthFinding, Judge, Snap, slug, to_finding
from gpuclust.accept.health.sources.dcgm import judge_dcgm
from gpuclust.accept.health.sources.net import CAUSE_DETAILS, demote_symptoms
from gpuclust.accept.health.sources.nvidia_smi import THROTTLE_REASONS
from gpuclust.config.health import HealthConfig
from gpuclust.exitcodes import Nagios

# The names that lived here before the sources had modules of their own, for importers.
__all__ = ["CAUSE_DETAILS", "CLASSES", "THROTTLE_REASONS", "HealthFinding", "demote_symptoms", "judge_dcgm",
           "judge_job", "judge_node", "slug", "to_finding"]


def _unavailable(j: Judge, before: Snap, after: Snap) -> None:
    for source in sources.SOURCES:
        name = source.name
        reasons = []
        invalid: list[tuple[str, Mapping[str, Any]]] = []
        for phase, snap in (("before", before), ("after", after)):
            src = (snap or {}).get("sources", {}).get(name)
            if not isinstance(src, Mapping):
                reasons.append(f"{phase}: not collected")
            elif src.get("status") != "ok":
                reasons.append(f"{phase}: {src.get('reason', 'unavailable')}")
                if isinstance(src.get("invalid"), Mapping):
                    invalid.append((phase, src["invalid"]))
        if invalid:
            where = "; ".join(f"{phase} snapshot: {inv.get('field')}: {inv.get('message')}" for phase, inv in invalid)
            j.add("unavailable", Nagios.UNKNOWN, f"{name}-invalid", f"{j.node}: {name} not judged, its data does "
                  f"not fit its shape ({where})", source=name, reasons=reasons,
                  fields=[str(inv.get("field")) for _, inv in invalid])
        elif reasons and not source.on_request:  # asked for, or not: its absence says nothing about the node
            sev = Nagios.UNKNOWN if name in j.cfg.require else Nagios.OK
            j.add("unavailable", sev, name, f"{j.node}: {name} unavailable ({'; '.join(reasons)})",
                  source=name, reasons=reasons)


def judge_node(node: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
               cfg: HealthConfig) -> list[HealthFinding]:
    """Every finding for one node's snapshot pair. Without both snapshots the node is UNKNOWN (a missing
    snapshot is not a pass); absolute rules still run on whatever after-snapshot exists."""
    j = Judge(node, cfg)
    if before is None or after is None:
        missing = [ph for ph, s in (("before", before), ("after", after)) if s is None]
        j.add("unavailable", Nagios.UNKNOWN, "snapshot-missing", f"{node}: no {' or '.join(missing)} health "
              "snapshot", missing=missing)
    _unavailable(j, before, after)
    for source in sources.JUDGE_ORDER:
        if source.judge is not None:
            source.judge(j, before, after)
    return j.out


def judge_job(snapshots: Mapping[str, Mapping[str, Mapping[str, Any]]], cfg: HealthConfig,
              nodes: Iterable[str]) -> list[HealthFinding]:
    """Findings for every node of the job (`nodes`: the job's node list; a node with no snapshot at all is
    UNKNOWN). `snapshots`: load_snapshots' {node: {phase: snapshot}}."""
    out: list[HealthFinding] = []
    for node in nodes:
        phases = snapshots.get(node, {})
        out.extend(judge_node(node, phases.get("before"), phases.get("after"), cfg))
    for source in sources.SOURCES:
        if source.across_nodes is not None:
            out = source.across_nodes(out)
    return out
