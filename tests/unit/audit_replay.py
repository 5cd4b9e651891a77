"""Replay the audit's Slurm calls from real output recorded per scenario in tests/data/audit."""

from __future__ import annotations

from pathlib import Path

from gpuclust.audit import collect as col
from gpuclust.slurm.replay import ReplaySlurmClient

DATA = Path(__file__).resolve().parents[1] / "data" / "audit"
SCENARIOS = ("clean", "degraded", "mostly_drained")


def read(scenario: str, name: str) -> str:
    return (DATA / scenario / name).read_text()


def replay(scenario: str) -> ReplaySlurmClient:
    """A client answering every call the audit makes with the scenario's recorded output."""
    c = ReplaySlurmClient()
    c.add("scontrol", col.VERSION_ARGS, read(scenario, "scontrol_version.txt"))
    c.add("scontrol", col.CONFIG_ARGS, read(scenario, "scontrol_show_config.txt"))
    c.add("scontrol", col.PARTITION_ARGS, read(scenario, "scontrol_a_show_partition_o.txt"))
    c.add("scontrol", col.NODE_TEXT_ARGS, read(scenario, "scontrol_d_show_node_o.txt"))
    c.add("sinfo", col.NODE_SINFO_JSON_ARGS, read(scenario, "sinfo.json"))
    c.add("sacctmgr", col.QOS_ARGS, read(scenario, "sacctmgr_show_qos.txt"))
    c.add("sacctmgr", col.assoc_args(read(scenario, "cluster_name.txt").strip()), read(scenario, "sacctmgr_show_assoc.txt"))
    return c
