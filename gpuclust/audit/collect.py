"""Read everything the audit needs from Slurm through a SlurmClient, into one typed snapshot.

scontrol (nodes, partitions, config) must answer, or the audit is UNKNOWN: the caller gets the SlurmError.
sacctmgr (QOS, associations) may fail on its own (slurmdbd down); the snapshot then carries the error and
the limit checks report UNKNOWN while the node checks still run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timezone

from gpuclust.config.values import parse_slurm_name
from gpuclust.errors import SlurmCommandError, SlurmError, SlurmOutputError
from gpuclust.slurm.client import NodeObjectSource, SlurmClient
from gpuclust.slurm.parse import accounting_tres, parse_show_config
from gpuclust.slurm.records import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    AssocRecord,
    NodeRecord,
    PartitionRecord,
    QosRecord,
    node_from_json,
    parse_assocs,
    parse_nodes_json,
    parse_nodes_text,
    parse_partitions_text,
    parse_qos,
    parse_version,
)

SOURCES = ("auto", "text", "json")
# The argv of every read, so tests and recordings (tests/data/audit/record.sh) use the same ones.
VERSION_ARGS = ["--version"]
CONFIG_ARGS = ["show", "config"]
PARTITION_ARGS = ["-a", "-o", "show", "partition"]
NODE_TEXT_ARGS = ["-d", "-o", "show", "node"]
NODE_SCONTROL_JSON_ARGS = ["--json", "show", "node"]  # 23.02+
NODE_SINFO_JSON_ARGS = ["--json"]  # 21.08-22.05: scontrol has no --json, sinfo's has the node objects
QOS_ARGS = ["-P", "show", "qos", f"format={QOS_FORMAT}"]


def assoc_args(cluster: str) -> list[str]:
    return ["-P", "show", "assoc", "where", f"cluster={parse_slurm_name(cluster)}", f"format={ASSOC_FORMAT}"]


@dataclass
class ClusterSnapshot:
    """Everything the audit read from Slurm: nodes, partitions, accounting TRES, QOS and associations."""

    cluster: str
    version: tuple[int, int, int]
    node_source: str  # "text", "sinfo-json", "scontrol-json", "pyslurm"
    nodes: dict[str, NodeRecord]
    partitions: dict[str, PartitionRecord]
    accounting_tres: frozenset[str]
    qos: list[QosRecord] | None = None
    assocs: list[AssocRecord] | None = None
    accounting_error: str | None = None
    notes: list[str] = field(default_factory=list)  # e.g. why the JSON path fell back to text


def json_node_args(version: tuple[int, int, int]) -> tuple[str, list[str]] | None:
    if version >= (23, 2, 0):
        return "scontrol", NODE_SCONTROL_JSON_ARGS
    if version >= (22, 5, 0):  # the v0.0.38 node objects this is tested on
        return "sinfo", NODE_SINFO_JSON_ARGS
    return None


def read_nodes(client: SlurmClient, version: tuple[int, int, int], source: str,
               notes: list[str]) -> tuple[str, list[NodeRecord]]:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if source == "auto" and isinstance(client, NodeObjectSource):  # --backend pyslurm: its nodes, not the CLI's
        return client.node_source, [node_from_json(obj) for obj in client.node_objects(version)]
    if source in ("auto", "json"):
        how = json_node_args(version)
        if how is None:
            notes.append(f"Slurm {'.'.join(map(str, version))} has no node JSON; read scontrol text")
        else:
            tool, args = how
            try:
                text = client.scontrol(args) if tool == "scontrol" else client.sinfo(args)
                return f"{tool}-json", parse_nodes_json(text, f"{tool} {' '.join(args)}")
            except (SlurmOutputError, SlurmCommandError) as exc:
                # An unexpected JSON shape or option must not blind the audit: text works everywhere.
                notes.append(f"{tool} {' '.join(args)} unusable ({exc}); read scontrol text instead")
    return "text", parse_nodes_text(client.scontrol(NODE_TEXT_ARGS), timezone.utc)


def collect_snapshot(client: SlurmClient, source: str = "auto", accounting: bool = True) -> ClusterSnapshot:
    """Everything about the cluster the checks need. Raises SlurmError when scontrol fails.

    accounting=False skips sacctmgr, each call a round trip to slurmdbd (most of the audit's Slurm time: BENCHMARKS.md,
    "CLI startup"), when the limit checks are not wanted."""
    version = parse_version(client.scontrol(VERSION_ARGS))
    config = parse_show_config(client.scontrol(CONFIG_ARGS))
    cluster = config.get("ClusterName", "")
    partitions = {p.name: p for p in parse_partitions_text(client.scontrol(PARTITION_ARGS))}
    notes: list[str] = []
    node_source, node_list = read_nodes(client, version, source, notes)
    snap = ClusterSnapshot(
        cluster=cluster,
        version=version,
        node_source=node_source,
        nodes={n.name: n for n in node_list},
        partitions=partitions,
        accounting_tres=accounting_tres(config),
        notes=notes,
    )
    if not accounting:
        snap.accounting_error = "not read (limit checks skipped)"
        return snap
    if not config.get("AccountingStorageType", "accounting_storage/slurmdbd").endswith("slurmdbd"):
        snap.accounting_error = "no slurmdbd accounting (AccountingStorageType is not slurmdbd)"
        return snap
    try:
        snap.qos = parse_qos(client.sacctmgr(QOS_ARGS))
        snap.assocs = parse_assocs(client.sacctmgr(assoc_args(cluster))) if cluster else []
    except (SlurmError, ValueError) as exc:
        snap.qos, snap.assocs = None, None
        snap.accounting_error = str(exc)
    return snap
