"""Hostlists through ClusterShell's NodeSet; gpuclust never expands `node[1-4]` by hand."""

from __future__ import annotations

from collections.abc import Iterable

from gpuclust.errors import SlurmOutputError

# (ClusterShell is imported by the functions: a report build that expands no hostlist does not load it.)


def expand(hostlist: str) -> list[str]:
    """`node[1-3],gpu7` -> ['node1', 'node2', 'node3', 'gpu7']; '' and '(null)'/'None assigned' -> []."""
    text = hostlist.strip()
    if not text or text in ("(null)", "None", "None assigned", "Unknown"):
        return []
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        return list(NodeSet(text))
    except NodeSetParseError as exc:
        raise SlurmOutputError(f"bad hostlist {hostlist!r}: {exc}") from exc


def fold(nodes: Iterable[str]) -> str:
    """['node1', 'node2', 'node3', 'node5'] -> 'node[1-3,5]'."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(nodes)))
