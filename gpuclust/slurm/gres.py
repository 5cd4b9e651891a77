"""GPUs as Slurm declares them: a job's per-node GRES (`scontrol show job -d`), a node's configured Gres
(`scontrol show node -o`), and GPU counts and types in GRES strings. Used by the acceptance jobs (what Slurm
bound) and by `accept report` (declared against detected)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuclust.errors import SlurmError
from gpuclust.slurm import hostlist
from gpuclust.slurm.client import SlurmClient
from gpuclust.slurm.parse import parse_gres, parse_scontrol_oneliners, parse_scontrol_record

_NONE = ("(null)", "N/A")


def parse_job_node_gres(text: str) -> dict[str, str]:
    """`scontrol show job -d` -> {node: GRES allocated there}, from the detail lines
    `Nodes=node[1-2] CPU_IDs=0-1 Mem=0 GRES=gpu:h100:2(IDX:0-1)`. Nodes without GPUs map to ""."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("Nodes="):
            continue
        record = parse_scontrol_record(stripped)
        gres = record.get("GRES", "")
        for node in hostlist.expand(record.get("Nodes", "")):
            out[node] = "" if gres in _NONE else gres
    return out


def parse_node_gres(text: str) -> dict[str, str]:
    """`scontrol show node -o NODES` -> {node: configured Gres} ("" when it has none)."""
    out: dict[str, str] = {}
    for record in parse_scontrol_oneliners(text):
        name = record.get("NodeName")
        if name:
            gres = record.get("Gres", "")
            out[name] = "" if gres in _NONE else gres
    return out


def gres_gpu_count(text: str | None) -> int | None:
    """GPUs in a GRES string (`gpu:h100:4(S:0-1)`, `gpu:h100:2(IDX:0-1)`); None for unknown, 0 for none."""
    if text is None:
        return None
    return sum(item.count for item in parse_gres(text) if item.name == "gpu")


def gres_gpu_type(text: str | None) -> str | None:
    """The GPU type in a GRES string; several types joined by ','; None when untyped or absent."""
    types = {item.type for item in parse_gres(text) if item.name == "gpu" and item.type}
    return sorted(types)[0] if len(types) == 1 else (",".join(sorted(types)) if types else None)


def declared_gres(client: SlurmClient, job_id: str,
                  nodes: Sequence[str]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(per-node GRES of this job, per-node configured Gres, warnings): a failing scontrol is a warning, not
    an exception, so a job that measured still writes its result."""
    warnings: list[str] = []
    job_gres: dict[str, str] = {}
    node_gres: dict[str, str] = {}
    try:
        job_gres = parse_job_node_gres(client.scontrol(["show", "job", "-d", job_id]))
    except SlurmError as exc:
        warnings.append(f"scontrol show job -d failed: {exc}")
    if nodes:
        try:
            node_gres = parse_node_gres(client.scontrol(["show", "node", "-o", hostlist.fold(nodes)]))
        except SlurmError as exc:
            warnings.append(f"scontrol show node failed: {exc}")
    return job_gres, node_gres, warnings
