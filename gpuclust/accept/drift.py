"""Version drift, judged one way for every reader (accept report, audit partition).

Two questions, over the versions each node's lowest rank reported (driver, CUDA, NCCL, torch):
- over time: did a field change on a node since its previous result? (`changes`) A field the previous result
  did not record is not drift; None -> None is no change.
- across nodes: which nodes differ from the others? (`across`) A field is judged when at least one node has a
  value; a node without one (None: a CPU build, no driver) then counts as a value of its own. Only a strict
  majority names odd nodes out; a tie names nobody and says so (`FieldDrift.tie`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuclust.findings import natural_key

VERSION_FIELDS = ("driver", "cuda", "nccl", "torch")

Versionish = Mapping[str, str | None]


@dataclass(frozen=True)
class Change:
    """One version field that changed on a node since its previous result (`since_job`: that result's job)."""

    node: str
    field: str
    before: str | None
    after: str | None
    since_job: str


@dataclass(frozen=True)
class FieldDrift:
    """One field across nodes: its values, largest group first (ties by value text)."""

    field: str
    groups: tuple[tuple[str | None, tuple[str, ...]], ...]

    @property
    def uniform(self) -> bool:
        return len(self.groups) == 1

    @property
    def tie(self) -> bool:
        """No strict majority: the two largest groups are the same size."""
        return len(self.groups) > 1 and len(self.groups[0][1]) == len(self.groups[1][1])

    @property
    def majority(self) -> tuple[str | None, tuple[str, ...]] | None:
        return None if self.tie else self.groups[0]

    @property
    def odd(self) -> tuple[tuple[str | None, tuple[str, ...]], ...]:
        """The groups that differ from a strict majority (none on a tie)."""
        return () if self.tie else self.groups[1:]


def changes(node: str, previous: Versionish | None, current: Versionish, since_job: str) -> list[Change]:
    """Fields whose value changed on `node` since its previous result (job `since_job`)."""
    if previous is None:
        return []
    return [Change(node, name, previous[name], value, since_job)
            for name, value in current.items() if name in previous and previous[name] != value]


def across(per_node: Mapping[str, Versionish], fields: tuple[str, ...] | None = None) -> list[FieldDrift]:
    """Each field that some node has a value for, grouped by value across the nodes."""
    if fields is None:
        fields = tuple(sorted({f for versions in per_node.values() for f in versions}))
    out: list[FieldDrift] = []
    for name in fields:
        values = {node: versions.get(name) for node, versions in per_node.items()}
        if all(v is None for v in values.values()):
            continue
        groups: dict[str | None, list[str]] = {}
        for node in sorted(values, key=natural_key):
            groups.setdefault(values[node], []).append(node)
        ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))
        out.append(FieldDrift(name, tuple((value, tuple(nodes)) for value, nodes in ordered)))
    return out


def odd_ones(per_node: Mapping[str, Versionish]) -> dict[str, list[tuple[str, str | None, str | None]]]:
    """node -> [(field, node's value, majority value)] for the nodes a strict majority names."""
    out: dict[str, list[tuple[str, str | None, str | None]]] = {}
    if len(per_node) < 2:
        return out
    for drift in across(per_node):
        if drift.majority is None:
            continue
        for value, nodes in drift.odd:
            for node in nodes:
                out.setdefault(node, []).append((drift.field, value, drift.majority[0]))
    return out
