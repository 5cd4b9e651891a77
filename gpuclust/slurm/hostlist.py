"""Hostlists through ClusterShell's NodeSet; gpuclust never expands `node[1-4]` by hand."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpuclust.errors import SlurmOutputError

# (ClusterShell is imported by the functions: a report build that expands no hostlist does not load it.)
_ONE_NAME = re.compile(r"[A-Za-z0-9_.-]+")  # no bracket, comma or space: one node, which NodeSet gives back as is


def expand(hostlist: str) -> list[str]:
    """`node[1-3],gpu7` -> ['node1', 'node2', 'node3', 'gpu7']; '' and '(null)'/'None assigned' -> []."""
    text = hostlist.strip()
    if not text or text in ("(null)", "None", "None assigned", "Unknown"):
        return []
    if _ONE_NAME.fullmatch(text):
        return [text]
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        return list(NodeSet(text))
    except NodeSetParseError as exc:
        raise SlurmOutputError(f"bad hostlist {hostlist!r}: {exc}") from exc


def fold(nodes: Iterable[str]) -> str:
    """['node1', 'node2', 'node3', 'node5'] -> 'node[1-3,5]'."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(nodes)))
