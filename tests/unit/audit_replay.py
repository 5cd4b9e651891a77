"""Replay the audit's Slurm calls from real output recorded per scenario in tests/data/audit."""

from __future__ import annotations

from pathlib import Path

from gpuclust.audit import collect as col
from gpuclust.slurm.replay import ReplaySlurmClient

DATA = Path(__file__).resolve().parents[1] / "data" / "audit"
SCENARIOS = ("clean", "degraded", "mostly_drained")
# 22.05 is recorded in DATA/<scenario>/, later versions in DATA/<version>/<scenario>/ (record.sh LAB OUT_DIR).
VERSIONS = ("22.05", *sorted(p.name for p in DATA.iterdir() if p.is_dir() and p.name[:2].isdigit()))


def scenario_dir(scenario: str, version: str = "22.05") -> Path:
    return DATA / scenario if version == "22.05" else DATA / version / scenario


def read(scenario: str, name: str, version: str = "22.05") -> str:
    return (scenario_dir(scenario, version) / name).read_text()


def replay(scenario: str, version: str = "22.05") -> ReplaySlurmClient:
    """A client answering every call the audit makes with the scenario's recorded output."""
    c = ReplaySlurmClient()
    d = scenario_dir(scenario, version)
    c.add("scontrol", col.VERSION_ARGS, read(scenario, "scontrol_version.txt", version))
    c.add("scontrol", col.CONFIG_ARGS, read(scenario, "scontrol_show_config.txt", version))
    c.add("scontrol", col.PARTITION_ARGS, read(scenario, "scontrol_a_show_partition_o.txt", version))
    c.add("scontrol", col.NODE_TEXT_ARGS, read(scenario, "scontrol_d_show_node_o.txt", version))
    c.add("sinfo", col.NODE_SINFO_JSON_ARGS, read(scenario, "sinfo.json", version))
    if (d / "scontrol_json_show_node.json").exists():
        c.add("scontrol", col.NODE_SCONTROL_JSON_ARGS, read(scenario, "scontrol_json_show_node.json", version))
    c.add("sacctmgr", col.QOS_ARGS, read(scenario, "sacctmgr_show_qos.txt", version))
    c.add("sacctmgr", col.assoc_args(read(scenario, "cluster_name.txt", version).strip()),
          read(scenario, "sacctmgr_show_assoc.txt", version))
    return c
