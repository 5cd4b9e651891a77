"""Hostlists through ClusterShell's NodeSet; gpuclust never expands `node[1-4]` by hand."""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetParseError

from gpuclust.errors import SlurmOutputError


def expand(hostlist: str) -> list[str]:
    """`node[1-3],gpu7` -> ['node1', 'node2', 'node3', 'gpu7']; '' and '(null)'/'None assigned' -> []."""
    text = hostlist.strip()
    if not text or text in ("(null)", "None", "None assigned", "Unknown"):
        return []
    try:
        return list(NodeSet(text))
    except NodeSetParseError as exc:
        raise SlurmOutputError(f"bad hostlist {hostlist!r}: {exc}") from exc


def fold(nodes: Iterable[str]) -> str:
    """['node1', 'node2', 'node3', 'node5'] -> 'node[1-3,5]'."""
    return str(NodeSet.fromlist(list(nodes)))
