"""MIG and shared GPUs in the partition audit: each node's GPU layout (gpuclust.slurm.gpushare.node_layout on
its configured Gres: whole GPUs, MIG slices by type, shards, MPS) as part of the partition's homogeneity, the
layout's own warnings, and Slurm's MIG types against what the node itself reported.

homogeneity (only where a node of the partition has MIG slices, shards or MPS, or the layouts differ: a
partition of whole GPUs alone reads as before)
  homogeneity.mig      CRITICAL  nodes differ in MIG mode (whole GPUs, MIG slices, both): a job asking for
                                 gpu:N gets whole GPUs on some nodes and slices on others
                       WARNING   same MIG mode, different layout (slice types or counts, shards, MPS)
                       OK        one layout on every node
  gres.<code>          WARNING   a layout warning of gpushare, by its code: mixed_mig_and_full_gpus,
                                 unknown_mig_profile, mig_slice_exceeds_card, shards_without_gpu,
                                 mps_without_gpu, untyped_gpu_on_mixed_node
acceptance (needs the results directory)
  gres.mig_report      WARNING   the MIG instances nvidia-smi reported on the node (the latest acceptance health
                                 snapshot that has them, gpuclust.accept.health) differ from Slurm's Gres: MIG
                                 devices by memory size (a profile's `<M>gb`) and whole GPUs. gres.conf and the
                                 GPU disagree: jobs get slices that are not there, or lose ones that are
                       OK        they match; or "not asked": no snapshot with nvidia-smi for the node
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from gpuclust.exitcodes import Nagios
from gpuclust.slurm.gpushare import NodeLayout, ShareWarning, mig_profile, node_layout
from gpuclust.slurm.hostlist import fold
from gpuclust.slurm.records import NodeRecord

from .checks import majority_groups
from .findings import Finding


def layouts(nodes: Sequence[NodeRecord], shares: Mapping[str, Fraction] | None = None) -> dict[str, NodeLayout]:
    """Each node's layout; `shares`: the site's `[gpu_type NAME] gpu_share` (config.gpu_type_shares), which make a
    type of its own name a MIG slice (gpu_share below 1) or a whole GPU, as in every other plane."""
    return {n.name: node_layout(list(n.gres), shares) for n in nodes}


def mig_mode(layout: NodeLayout) -> str:
    if layout.mixed:
        return "MIG slices and whole GPUs"
    if layout.mig_mode:
        return "MIG slices"
    return "whole GPUs" if layout.whole_gpus else "no GPU"


def layout_text(layout: NodeLayout) -> str:
    """`4 whole GPU(s)`, `MIG 1g.10gb:4,3g.40gb:1`, `2 whole GPU(s); 16 shards`."""
    parts = []
    if layout.whole_gpus:
        parts.append(f"{layout.whole_gpus} whole GPU(s)")
    if layout.slices:
        parts.append("MIG " + ",".join(f"{t}:{n}" for t, n in sorted(layout.slices.items())))
    if layout.shards:
        parts.append(f"{layout.shards} shards")
    if layout.mps:
        parts.append(f"{layout.mps} MPS")
    return "; ".join(parts) or "no GPU"


def _shared(layout: NodeLayout) -> bool:
    return bool(layout.slices or layout.shards or layout.mps)


def check_layout(nodes: Sequence[NodeRecord], shares: Mapping[str, Fraction] | None = None) -> list[Finding]:
    """homogeneity.mig and gres.<warning code> (see the module docstring); `shares` as in `layouts`."""
    if not nodes:
        return []
    per_node = layouts(nodes, shares)
    out: list[Finding] = []
    texts = {name: layout_text(lay) for name, lay in per_node.items()}
    modes = {name: mig_mode(lay) for name, lay in per_node.items()}
    groups = majority_groups(texts)
    if len(groups) > 1 or any(_shared(lay) for lay in per_node.values()):
        if len(groups) == 1:
            value, group = groups[0]
            out.append(Finding.make("homogeneity.mig", Nagios.OK, f"GPU layout {value} on all {len(group)} nodes",
                                    group, layout=value))
        else:
            value, majority = groups[0]
            tie = len(groups[1][1]) == len(majority)
            basis = (f"{fold(majority)} ({'no majority; largest group' if tie else 'majority'}) "
                     f"{'has' if len(majority) == 1 else 'have'} {value} ({modes[majority[0]]})")
            for odd_value, odd_nodes in groups[1:]:
                differs = modes[odd_nodes[0]] != modes[majority[0]]
                what = "MIG mode" if differs else "GPU layout"
                out.append(Finding.make(
                    "homogeneity.mig", Nagios.CRITICAL if differs else Nagios.WARNING,
                    f"{what} differs: {fold(odd_nodes)} {'has' if len(odd_nodes) == 1 else 'have'} {odd_value} "
                    f"({modes[odd_nodes[0]]}), but {basis}", odd_nodes,
                    layout=odd_value, mig_mode=modes[odd_nodes[0]], majority_layout=value,
                    majority_mig_mode=modes[majority[0]], majority_nodes=fold(majority),
                    layouts={v: fold(g) for v, g in groups}))
    warned: dict[tuple[str, str], list[str]] = {}
    for name, lay in per_node.items():
        for warning in lay.warnings:
            warned.setdefault((warning.code, warning.detail), []).append(name)
    for (code, detail), names in sorted(warned.items()):
        out.append(Finding.make(f"gres.{code}", Nagios.WARNING, _warning_text(ShareWarning(code, detail)), names,
                                code=code))
    return out


def _warning_text(warning: ShareWarning) -> str:
    why = {
        "mixed_mig_and_full_gpus": "a job asking for an untyped gpu:N may get either; GPU-equivalents are "
                                   "unknown for untyped requests",
        "unknown_mig_profile": "its share of a GPU is unknown",
        "mig_slice_exceeds_card": "no card has that many slices: a typo in gres.conf or slurm.conf",
        "shards_without_gpu": "Slurm's shards need the node's GPUs",
        "mps_without_gpu": "MPS needs the node's GPUs",
        "untyped_gpu_on_mixed_node": "an untyped GPU count there cannot be priced",
    }.get(warning.code, "")
    return f"{warning.detail}" + (f" ({why})" if why else "")


# ---- Slurm's MIG types against the node's own report ----------------------------------------------------

def reported_layout(nv: Mapping[str, Any]) -> tuple[int, Counter[int | None]]:
    """(whole GPUs, MIG devices by memory GB) from a snapshot's nvidia_smi data."""
    whole = 0
    sizes: Counter[int | None] = Counter()
    for g in nv.get("gpus") or []:
        if str(g.get("mig_mode_current") or "").lower() == "enabled":
            for m in g.get("mig_devices") or []:
                sizes[m.get("memory_gb")] += 1
        else:
            whole += 1
    return whole, sizes


def _sizes_text(sizes: Counter[int | None]) -> str:
    return ", ".join(f"{'?' if gb is None else gb} GB x{n}" for gb, n in
                     sorted(sizes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))) or "none"


def check_mig_report(results_dir: str | None, nodes: Sequence[NodeRecord],
                     shares: Mapping[str, Fraction] | None = None) -> list[Finding]:
    """gres.mig_report for the partition's nodes that have MIG slices in Slurm or reported MIG devices."""
    per_node = layouts(nodes, shares)
    if results_dir:
        from gpuclust.accept import latest_nvidia_smi

        reports = latest_nvidia_smi(results_dir, per_node)
    else:
        reports = {}
    out: list[Finding] = []
    not_asked: list[str] = []
    matched: list[str] = []
    for name, lay in per_node.items():
        got = reports.get(name)
        whole, sizes = reported_layout(got[1]["nvidia_smi"]) if got else (0, Counter())
        if not lay.slices and not sizes:
            continue
        if got is None:
            not_asked.append(name)
            continue
        job_id, snap = got
        expected: Counter[int | None] = Counter()
        unnamed = []
        for gtype, count in lay.slices.items():
            profile = mig_profile(gtype)
            if profile is None:
                unnamed.append(gtype)
            else:
                expected[profile.memory_gb] += count
        where = f"nvidia-smi on {name} (acceptance job {job_id}, {snap.get('phase')} snapshot {snap.get('time')})"
        if unnamed:
            out.append(Finding.make("gres.mig_report", Nagios.OK,
                                    f"not compared: GPU type(s) {', '.join(sorted(unnamed))} name no MIG profile; "
                                    f"{where} reports MIG devices {_sizes_text(sizes)}", [name], job_id=job_id))
            continue
        if expected == sizes and whole == lay.whole_gpus:
            matched.append(name)
            continue
        out.append(Finding.make(
            "gres.mig_report", Nagios.WARNING,
            f"Slurm's Gres {layout_text(lay)} (MIG devices {_sizes_text(expected)}, {lay.whole_gpus} whole GPU(s)) "
            f"but {where} reports MIG devices {_sizes_text(sizes)} and {whole} whole GPU(s): gres.conf and the "
            "GPU's MIG configuration disagree", [name], job_id=job_id, slurm_layout=layout_text(lay),
            reported_mig_gb={str(k): v for k, v in sizes.items()}, reported_whole=whole))
    if matched:
        out.append(Finding.make("gres.mig_report", Nagios.OK, "Slurm's MIG types match the MIG devices nvidia-smi "
                                "reported (latest acceptance health snapshot)", matched))
    if not_asked:
        why = "no results_dir" if not results_dir else f"no acceptance health snapshot with nvidia-smi under {results_dir}"
        out.append(Finding.make("gres.mig_report", Nagios.OK, f"MIG devices not asked of the node ({why}): "
                                "Slurm's MIG types not compared with the GPU", not_asked))
    return out


def mig_only_nodes(nodes: Sequence[NodeRecord], shares: Mapping[str, Fraction] | None = None) -> list[str]:
    """Nodes whose GPUs are all MIG slices: no whole GPU for a cross-node all_reduce."""
    return [name for name, lay in layouts(nodes, shares).items() if lay.slices and not lay.whole_gpus]
