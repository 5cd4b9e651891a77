"""Which Slurm wrote a ``--json`` document, and in which shape: read from its ``meta`` block.

Slurm's JSON outputs change shape with the plugin that writes them:

* 22.05: ``meta.plugin.type`` = ``openapi/dbv0.0.38`` (sacct) or ``openapi/v0.0.38`` (sinfo, squeue), and
  ``meta.Slurm.version`` holds integers;
* 23.02 and later: ``meta.plugin.data_parser`` = ``data_parser/v0.0.NN`` (the ``--json`` default of that
  release), and ``meta.slurm.version`` holds strings (24.11: ``data_parser/v0.0.42``).

Every reader of a Slurm JSON output first calls :func:`read_shape`, then picks the adapter registered for
that shape. A shape no adapter is registered for is refused with :class:`UnknownShape`, which names the
command, the plugin and the Slurm version: gpuclust never guesses at a layout it was not proven on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclust.errors import SlurmOutputError


@dataclass(frozen=True)
class JsonShape:
    """The shape of one Slurm JSON document: its plugin (``openapi/dbv0.0.38``, ``data_parser/v0.0.42``) and
    the Slurm release that wrote it (``22.05.8``; empty when the meta block does not say)."""

    plugin: str
    release: str
    version: tuple[int, int, int] | None

    def describe(self) -> str:
        plugin = self.plugin or "no plugin named in meta"
        return f"{plugin}, Slurm {self.release or 'version unknown'}"


class UnknownShape(SlurmOutputError):
    """A Slurm JSON document in a shape gpuclust has no adapter for."""

    def __init__(self, command: str, shape: JsonShape, known: tuple[str, ...], hint: str = ""):
        self.command = command
        self.shape = shape
        self.known = known
        text = (f"{command}: unknown JSON shape ({shape.describe()}); gpuclust reads only "
                f"{', '.join(known)}")
        super().__init__(text + (f". {hint}" if hint else ""))


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def read_shape(doc: Mapping[str, Any]) -> JsonShape:
    """The plugin and Slurm version from a document's ``meta`` block (empty fields where absent)."""
    meta = doc.get("meta")
    if not isinstance(meta, Mapping):
        return JsonShape("", "", None)
    plugin = meta.get("plugin")
    name = ""
    if isinstance(plugin, Mapping):
        parser = plugin.get("data_parser")
        kind = plugin.get("type")
        if isinstance(parser, str) and parser:
            name = parser
        elif isinstance(kind, str):
            name = kind
    slurm = meta.get("slurm", meta.get("Slurm"))
    release, version = "", None
    if isinstance(slurm, Mapping):
        rel = slurm.get("release")
        release = rel if isinstance(rel, str) else ""
        ver = slurm.get("version")
        if isinstance(ver, Mapping):
            parts = [_int(ver.get(k)) for k in ("major", "minor", "micro")]
            if parts[0] is not None and parts[1] is not None:
                version = (parts[0], parts[1], parts[2] or 0)
        if version is None and release:
            match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
            if match:
                version = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
        if not release and version:
            release = f"{version[0]:02d}.{version[1]:02d}.{version[2]}"
    return JsonShape(name.strip(), release.strip()[:40], version)


# Node JSON shapes read by gpuclust.audit.records.node_from_json, each recorded from a real Slurm in the lab:
# 22.05 `sinfo --json` (plain strings and numbers, state a string plus state_flags) and 24.11
# `scontrol --json show node` (state and partitions lists, {set, infinite, number} numbers), and 26.05 (v0.0.45,
# the same node fields).
NODE_JSON_SHAPES: tuple[str, ...] = ("openapi/v0.0.38", "data_parser/v0.0.42", "data_parser/v0.0.45")
NODE_JSON_HINT = "the audit reads `scontrol -d -o show node` text instead"


def check_node_shape(doc: Mapping[str, Any], command: str) -> JsonShape:
    """The shape of a node JSON document; UnknownShape when no node reader was proven on it."""
    shape = read_shape(doc)
    if shape.plugin not in NODE_JSON_SHAPES:
        raise UnknownShape(command, shape, NODE_JSON_SHAPES, NODE_JSON_HINT)
    return shape
