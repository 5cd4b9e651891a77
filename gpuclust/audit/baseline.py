"""`--baseline FILE`: diff the partition's nodes against a saved `audit partition --json` output.

  baseline.added    WARNING  nodes in the partition now that the baseline did not have
  baseline.removed  WARNING  nodes the baseline had that are gone
  baseline.changed  WARNING  nodes whose configuration (GRES, CPUs, RealMemory, features, slurmd version) changed
  baseline          OK       no change; UNKNOWN when the file cannot be read
  (a partition the baseline does not hold: baseline.added WARNING with all its nodes)

State (drain, down) is not diffed: the node checks report it on every run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuclust.exitcodes import Nagios
from gpuclust.slurm.hostlist import fold
from gpuclust.slurm.records import NodeRecord

from .findings import Finding, read_audit_document

CONFIG_FIELDS = ("gres", "cpus", "real_memory_mb", "features", "version")


class PartitionNotInBaseline(ValueError):
    """The baseline is readable but has no audit of this partition (e.g. a partition created since)."""


def load_baseline(path: str, partition: str) -> dict[str, dict[str, Any]]:
    """The partition's `nodes` map from a single-partition or `--all` JSON output. Raises ValueError."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read baseline {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"baseline {path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    try:
        reports = read_audit_document(doc)
    except ValueError as exc:
        raise ValueError(f"baseline {path} is not a gpuclust audit JSON output: {exc}") from None
    for report in reports:
        if report.partition == partition:
            return report.nodes
    raise PartitionNotInBaseline(f"baseline {path} has no audit of partition {partition}")


def diff_baseline(path: str, partition: str, nodes: Mapping[str, NodeRecord]) -> list[Finding]:
    try:
        old = load_baseline(path, partition)
    except PartitionNotInBaseline as exc:
        return [Finding.make("baseline.added", Nagios.WARNING, f"{exc}: every node is new", list(nodes))]
    except ValueError as exc:
        return [Finding.make("baseline", Nagios.UNKNOWN, str(exc))]
    out: list[Finding] = []
    added = sorted(set(nodes) - set(old))
    removed = sorted(set(old) - set(nodes))
    if added:
        out.append(Finding.make("baseline.added", Nagios.WARNING, f"{len(added)} node(s) not in the baseline {path}",
                                added))
    if removed:
        out.append(Finding.make("baseline.removed", Nagios.WARNING,
                                f"{len(removed)} node(s) of the baseline are no longer in the partition: "
                                f"{fold(removed)}", removed))
    changes: dict[str, list[str]] = {}  # change text -> nodes, so identical changes fold into one node set
    for name in sorted(set(nodes) & set(old)):
        now_cfg = nodes[name].config()
        diffs = [f"{f} {old[name].get(f)!r} -> {now_cfg[f]!r}" for f in CONFIG_FIELDS
                 if f in old[name] and old[name].get(f) != now_cfg[f]]
        if diffs:
            changes.setdefault("; ".join(diffs), []).append(name)
    for text, names in changes.items():
        out.append(Finding.make("baseline.changed", Nagios.WARNING, f"changed since the baseline: {text}", names))
    if not out:
        out.append(Finding.make("baseline", Nagios.OK, f"same nodes and configuration as the baseline {path}",
                                list(nodes)))
    return out
