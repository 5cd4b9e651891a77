"""The pyslurm backend: node data read from libslurm through pyslurm instead of `scontrol`/`sinfo` output.

The Slurm CLIs stay gpuclust's primary interface; this backend is for sites that build pyslurm against their own
Slurm. PyPI carries pyslurm only for Slurm 25.11, so it is never a dependency: the `gpuclust[pyslurm]` extra names
it, and a site builds it from the pyslurm tag that matches its Slurm (README "pyslurm"; `scripts/test-pyslurm SRC`
builds one and runs the `pyslurm`-marked tests on a lab).

What it provides: the nodes of `audit partition` (`pyslurm.Nodes`). They come out as node objects of the
`sinfo --json` shape, so the audit maps them to NodeRecords with the same code as the JSON source
(gpuclust.slurm.records.node_from_json) and the checks cannot tell the sources apart. Everything else
(partitions, config, sacctmgr, sacct, sbatch, scancel) goes through the wrapped CLI client.

pyslurm is imported on the first read, never at import time: the CLI starts without it, and only a command
that reads nodes through it fails (PyslurmUnavailable, with what to do) where it is missing or was built for
another Slurm. libslurm reads SLURM_CONF from the environment when pyslurm is imported, and ends the process
(its fatal(), exit 1, after retrying for 60 s) when it cannot read that config: the audit asks `scontrol show
config` before the nodes, so a config the commands cannot read is UNKNOWN before pyslurm is ever imported.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpuclust.errors import ConfigError, Problem, SlurmError
from gpuclust.slurm.client import SlurmClient

BACKENDS = ("cli", "pyslurm")
NODE_SOURCE = "pyslurm"
BUILD_HINT = ("build pyslurm from the tag that matches this Slurm (v22.5.x for 22.05, v24.11.0 for 24.11) against "
              "the site's libslurm-dev (scripts/test-pyslurm SRC; README \"pyslurm\"), or use the CLI backend "
              "(--backend cli, or [slurm] backend = cli)")


class PyslurmUnavailable(ConfigError):
    """The pyslurm backend was chosen, but pyslurm cannot be imported or was built for another Slurm."""


class PyslurmRPCError(SlurmError):
    """pyslurm could not read from slurmctld (the backend's counterpart of a failing scontrol)."""


def release_of(version: str) -> tuple[int, int] | None:
    """'22.5.3' (pyslurm) or '22.05.8' (Slurm) -> (22, 5): the Slurm release a pyslurm is built for."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def import_pyslurm(origin: str = "--backend pyslurm") -> ModuleType:
    """pyslurm, or PyslurmUnavailable naming where the backend was chosen and what to do."""
    try:
        return importlib.import_module("pyslurm")
    except ImportError as exc:
        detail = str(exc)
        if "libslurm" in detail:  # built against a libslurm this host no longer has (another Slurm release)
            why = f"pyslurm was built for another Slurm: {detail}"
        else:
            why = f"pyslurm is not importable ({detail})"
        raise PyslurmUnavailable(Problem("", None, f"{origin}: {why}; {BUILD_HINT}")) from None


def check_release(module: ModuleType, slurm_version: tuple[int, int, int], origin: str) -> str:
    """pyslurm's version, or PyslurmUnavailable when it is for another Slurm release than the CLI's."""
    version = str(getattr(module, "__version__", "") or module.version())
    built = release_of(version)
    if built is None or built != slurm_version[:2]:
        slurm = f"{slurm_version[0]}.{slurm_version[1]:02d}"
        raise PyslurmUnavailable(Problem("", None, f"{origin}: pyslurm {version} was built for another Slurm "
                                                   f"than this one ({slurm}, from scontrol --version); "
                                                   f"{BUILD_HINT}"))
    return version


def _gres_text(gres: Mapping[str, Any] | None) -> str | None:
    """pyslurm's GRES dict back to Slurm's text: {'gpu:h100': 4} -> 'gpu:h100:4',
    {'gpu:h100': {'count': '2', 'indexes': '0-1'}} -> 'gpu:h100:2(IDX:0-1)'."""
    if not gres:
        return None
    items = []
    for name, value in gres.items():
        if isinstance(value, Mapping):
            items.append(f"{name}:{value.get('count', 0)}(IDX:{value.get('indexes', 'N/A')})")
        else:
            items.append(f"{name}:{value}")
    return ",".join(items)


def _joined(value: Any) -> str | None:
    """A GRES field of pyslurm's node() dict: a string, or the list it split on commas, joined back as it was."""
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or None
    return value if isinstance(value, str) and value else None


def node_state(node: Any) -> str:
    """pyslurm.Node.state with MIXED where scontrol and sinfo print it: Slurm keeps a partly allocated node
    ALLOCATED in its node_state, and its clients (slurm_sprint_node_table) replace the base state with MIXED when
    some but not all effective CPUs are allocated. pyslurm 22.5 prints node_state as it is (24.11 does what the
    clients do, and then this changes nothing)."""
    state = str(node.state or "UNKNOWN")
    efctv = getattr(node, "effective_cpus", None)
    alloc = getattr(node, "allocated_cpus", None)
    if isinstance(efctv, int) and isinstance(alloc, int) and 0 < alloc < efctv:
        return "+".join(["MIXED", *state.split("+")[1:]])
    return state


def node_object(node: Any, legacy: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One pyslurm.Node -> a node object of the `sinfo --json` shape that node_from_json reads.

    `legacy`: the node's dict from pyslurm's older `pyslurm.node().get()` where the build has that class (22.5;
    24.11 keeps it in pyslurm.deprecated). It loads with SHOW_DETAIL like `scontrol -d`, so it holds the GRES
    strings as Slurm prints them: Gres with its socket detail, GresUsed (pyslurm.Nodes.load() of 22.5 asks
    without SHOW_DETAIL, so its allocated_gres is always empty) and GresDrain (which pyslurm.Node lacks).
    Without it, pyslurm.Node's GRES dicts are used."""
    gres = _gres_text(node.configured_gres)
    used = _gres_text(node.allocated_gres)
    drained: str | None = None
    if legacy:
        gres = _joined(legacy.get("gres")) or gres
        used = _joined(legacy.get("gres_used")) or used
        drained = _joined(legacy.get("gres_drain"))
    reason = node.reason
    return {
        "name": node.name,
        "state": node_state(node),
        "reason": reason,
        "reason_changed_at": node.reason_time or 0,
        "reason_set_by_user": node.reason_user if reason else None,
        "gres": gres,
        "gres_used": used,
        "gres_drained": drained,
        "cpus": node.total_cpus,
        "real_memory": node.real_memory,
        "features": list(node.available_features or []),
        "slurmd_version": node.slurm_version,
        "partitions": list(node.partitions or []),
    }


@dataclass
class PyslurmSlurmClient:
    """A SlurmClient whose nodes come from pyslurm; every command goes to the wrapped CLI client `cli`.

    `origin` says where the backend was chosen (`--backend pyslurm`, `site.conf: [slurm] backend`), for errors."""

    cli: SlurmClient
    origin: str = "--backend pyslurm"
    node_source: str = NODE_SOURCE
    _module: ModuleType | None = field(default=None, repr=False)

    def pyslurm(self, slurm_version: tuple[int, int, int]) -> ModuleType:
        if self._module is None:
            module = import_pyslurm(self.origin)
            check_release(module, slurm_version, self.origin)
            self._module = module
        return self._module

    def node_objects(self, slurm_version: tuple[int, int, int]) -> list[dict[str, Any]]:
        """Every node, as `sinfo --json` node objects. `slurm_version` is the CLI's (scontrol --version): a
        pyslurm built for another release is refused rather than trusted."""
        module = self.pyslurm(slurm_version)
        rpc_error: type[BaseException] = getattr(module, "RPCError", RuntimeError)
        try:
            nodes = list(module.Nodes.load().values())
            legacy_cls = getattr(module, "node", None)  # the older API: a later pyslurm may drop it
            legacy = legacy_cls().get() if legacy_cls is not None else {}
        except rpc_error as exc:
            raise PyslurmRPCError(f"pyslurm.Nodes.load(): {exc}") from None
        return [node_object(n, legacy.get(n.name)) for n in nodes]

    # ---- everything else: the CLI -------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        """What the wrapped client has beyond the protocol (CommandSlurmClient.sacct_version, .run)."""
        if name.startswith("_") or name == "cli":
            raise AttributeError(name)
        return getattr(self.cli, name)

    def sacct(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.cli.sacct(args, timeout=timeout)

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        return self.cli.sacct_bytes(args, timeout=timeout)

    def scontrol(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.cli.scontrol(args, timeout=timeout)

    def sinfo(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.cli.sinfo(args, timeout=timeout)

    def sbatch(
        self, args: Sequence[str], *, script: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        return self.cli.sbatch(args, script=script, env=env, timeout=timeout)

    def scancel(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.cli.scancel(args, timeout=timeout)

    def sacctmgr(
        self, args: Sequence[str], *, input_text: str | None = None, timeout: float | None = None
    ) -> str:
        return self.cli.sacctmgr(args, input_text=input_text, timeout=timeout)
