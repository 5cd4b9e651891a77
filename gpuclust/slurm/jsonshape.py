"""Which Slurm wrote a ``--json`` document, and in which shape: read from its ``meta`` block.

Slurm's JSON outputs change shape with the plugin that writes them, and the meta block itself changed form
(read in Slurm's sources at each release tag):

* 21.08, 22.05: ``meta.plugin.type`` = ``openapi/dbv0.0.37`` (21.08 sacct), ``openapi/dbv0.0.38`` (22.05
  sacct) or ``openapi/v0.0.38`` (sinfo, squeue); ``meta.Slurm.version`` holds integers
  (src/plugins/openapi/dbv0.0.3x/api.c:populate_response_format);
* 23.02 CLI: ``meta.plugins.data_parser`` (plural) = ``data_parser/v0.0.39``, ``meta.Slurm.version`` integers
  (src/interfaces/data_parser.c:_populate_cli_response_meta@slurm-23-02-8-1); 23.02's slurmrestd writes
  ``meta.plugin.type`` = ``openapi/dbv0.0.39`` and ``meta.plugin.data_parser`` = ``v0.0.39``, without the
  ``data_parser/`` prefix (src/plugins/openapi/dbv0.0.39/api.c), read here as ``data_parser/v0.0.39``;
* 23.11 and later: ``meta.plugin.data_parser`` = ``data_parser/v0.0.NN`` and ``meta.slurm.version`` holds
  strings, plus ``meta.slurm.release`` (PARSER_ARRAY(OPENAPI_META) in data_parser/v0.0.40..45).

Every reader of a Slurm JSON output first calls :func:`read_shape`, then picks the adapter registered for
that shape. A shape no adapter is registered for is refused with :class:`UnknownShape`, which names the
command, the plugin and the Slurm version: gpuclust never guesses at a layout it was not proven on. A meta
block that is not an object, or that names two different plugins or two different versions (a document
stitched from two Slurms), has its `conflict` set, and is refused the same way.
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
    the Slurm release that wrote it (``22.05.8``; empty when the meta block does not say). `conflict`: why
    the meta block cannot be trusted (malformed, or saying two things), empty when it can."""

    plugin: str
    release: str
    version: tuple[int, int, int] | None
    conflict: str = ""
    # meta.plugin.type as written (``openapi/slurmdbd``, ``openapi/slurmctld``, ``openapi/v0.0.39``; empty from
    # the CLI) and the command that wrote the document (meta.command[0], basename; empty from slurmrestd): they
    # tell accounting (sacct, /slurmdb/) from the live queue (squeue, /slurm/), which share a data_parser.
    kind: str = ""
    command: str = ""

    def describe(self) -> str:
        plugin = self.plugin or "no plugin named in meta"
        if self.kind and self.kind != self.plugin:  # slurmrestd names the plugin that served it
            plugin = f"{plugin} from {self.kind}"
        text = f"{plugin}, Slurm {self.release or 'version unknown'}"
        return f"{text}; {self.conflict}" if self.conflict else text


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


def _plugin_name(value: Any) -> str:
    """A plugin name as meta gives it; 23.02's slurmrestd writes the data_parser without its prefix."""
    if not isinstance(value, str):
        return ""
    name = value.strip()
    return f"data_parser/{name}" if re.fullmatch(r"v\d+\.\d+\.\d+", name) else name


def _version_of(slurm: Mapping[str, Any]) -> tuple[str, tuple[int, int, int] | None]:
    rel = slurm.get("release")
    release = rel.strip() if isinstance(rel, str) else ""
    version = None
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
    return release, version


def read_shape(doc: Mapping[str, Any]) -> JsonShape:
    """The plugin and Slurm version from a document's ``meta`` block, in any of its historical forms (empty
    fields where absent; `conflict` set where meta is malformed or says two different things)."""
    meta = doc.get("meta")
    if meta is None:
        return JsonShape("", "", None)
    if not isinstance(meta, Mapping):
        return JsonShape("", "", None, f"meta is {type(meta).__name__}, not an object")
    problems: list[str] = []
    parsers: dict[str, str] = {}  # where -> data_parser named there
    kind = ""
    for key in ("plugin", "plugins"):
        block = meta.get(key)
        if block is None:
            continue
        if not isinstance(block, Mapping):
            problems.append(f"meta.{key} is {type(block).__name__}, not an object")
            continue
        if key == "plugin":
            kind = _plugin_name(block.get("type"))
        if _plugin_name(block.get("data_parser")):
            parsers[f"meta.{key}.data_parser"] = _plugin_name(block.get("data_parser"))
    names = sorted(set(parsers.values()))
    if len(names) > 1:
        problems.append("meta names two data_parsers: " + ", ".join(f"{k}={v}" for k, v in sorted(parsers.items())))
    name = names[0] if names else kind
    # 23.02's slurmrestd names both its openapi plugin and its data_parser: the same version, or two Slurms.
    opened = re.fullmatch(r"openapi/(?:db)?v(\d+\.\d+\.\d+)", kind)
    if names and opened and names[0] != f"data_parser/v{opened.group(1)}":
        problems.append(f"meta.plugin.type {kind} and data_parser {names[0]} are of different versions")
    versions: dict[str, tuple[str, tuple[int, int, int] | None]] = {}
    for key in ("slurm", "Slurm"):
        slurm = meta.get(key)
        if slurm is None:
            continue
        if not isinstance(slurm, Mapping):
            problems.append(f"meta.{key} is {type(slurm).__name__}, not an object")
            continue
        versions[key] = _version_of(slurm)
    release, version = next(iter(versions.values()), ("", None))
    if len({v for _, v in versions.values()}) > 1:
        problems.append("meta names two Slurm versions: "
                        + ", ".join(f"meta.{k}={r or '?'}" for k, (r, _) in sorted(versions.items())))
    return JsonShape(name, release[:40], version, "; ".join(problems), kind[:60], _command_of(meta.get("command")))


def _command_of(value: Any) -> str:
    """meta.command[0] without its directory (``sacct``, ``squeue``); empty when absent or not a string list."""
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        return ""
    return value[0].strip().rsplit("/", 1)[-1][:40]


# Node JSON shapes read by gpuclust.slurm.records.node_from_json, each recorded from a real Slurm in the lab:
# 22.05 `sinfo --json` (plain strings and numbers, state a string plus state_flags) and 24.11
# `scontrol --json show node` (state and partitions lists, {set, infinite, number} numbers), and 26.05 (v0.0.45,
# the same node fields).
NODE_JSON_SHAPES: tuple[str, ...] = ("openapi/v0.0.38", "data_parser/v0.0.42", "data_parser/v0.0.45")
NODE_JSON_HINT = "the audit reads `scontrol -d -o show node` text instead"


def check_node_shape(doc: Mapping[str, Any], command: str) -> JsonShape:
    """The shape of a node JSON document; UnknownShape when no node reader was proven on it."""
    shape = read_shape(doc)
    if shape.plugin not in NODE_JSON_SHAPES or shape.conflict:
        raise UnknownShape(command, shape, NODE_JSON_SHAPES, NODE_JSON_HINT)
    return shape
