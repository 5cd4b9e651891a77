"""Audit record parsers on real recorded Slurm 22.05 output (tests/data/audit), text and JSON."""

from datetime import datetime, timezone

import pytest

from gpuclust.audit import collect as col
from gpuclust.errors import SlurmCommandError, SlurmOutputError
from gpuclust.slurm.parse import accounting_tres, parse_show_config
from gpuclust.slurm.records import (
    parse_assocs,
    parse_nodes_json,
    parse_nodes_text,
    parse_partitions_text,
    parse_qos,
    parse_reason,
    parse_state,
    parse_version,
)
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.audit_replay import SCENARIOS, read, replay


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_text_and_json_give_the_same_nodes(scenario):
    text = {n.name: n for n in parse_nodes_text(read(scenario, "scontrol_d_show_node_o.txt"))}
    js = {n.name: n for n in parse_nodes_json(read(scenario, "sinfo.json"))}
    assert sorted(text) == sorted(js) == ["node1", "node2", "node3", "node4"]
    for name in text:
        assert text[name] == js[name], name


def test_degraded_nodes_full_reason_user_and_time():
    nodes = {n.name: n for n in parse_nodes_text(read("degraded", "scontrol_d_show_node_o.txt"))}
    node2 = nodes["node2"]
    assert node2.reason == "GPU 3 Xid 79 fallen off the bus, RMA ticket 4711"  # > 20 chars, with spaces
    assert node2.reason_user == "root"
    assert node2.reason_time == datetime(2026, 12, 2, 11, 11, 9, tzinfo=timezone.utc)
    assert node2.state == "IDLE" and node2.flags == {"DRAIN"} and node2.is_drain and not node2.is_down
    assert nodes["node3"].state == "DOWN" and nodes["node3"].is_down and nodes["node3"].reason == "PSU failure"
    assert nodes["node4"].gpu_count == 2 and nodes["node4"].gres_text == "gpu:h100:2"
    assert nodes["node1"].gpus_used == 2 and nodes["node1"].state == "MIXED"
    assert nodes["node1"].reason is None and nodes["node1"].reason_user is None
    assert nodes["node1"].features == ("gpu", "h100") and nodes["node1"].version == "22.05.8"
    assert nodes["node1"].cpus == 8 and nodes["node1"].real_memory_mb == 16000


@pytest.mark.parametrize("text,base,flags", [
    ("IDLE", "IDLE", set()),
    ("IDLE+DRAIN", "IDLE", {"DRAIN"}),
    ("MIXED+DRAIN", "MIXED", {"DRAIN"}),
    ("DOWN*", "DOWN", {"NOT_RESPONDING"}),
    ("IDLE*+DRAIN", "IDLE", {"DRAIN", "NOT_RESPONDING"}),
    ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", {"DRAIN", "NOT_RESPONDING"}),
    ("ALLOC", "ALLOCATED", set()),
    ("drained", "IDLE", {"DRAIN"}),
    ("IDLE~", "IDLE", {"POWERED_DOWN"}),
    ("IDLE+FAIL", "IDLE", {"FAIL"}),
])
def test_parse_state(text, base, flags):
    assert parse_state(text) == (base, frozenset(flags))


def test_parse_reason_forms():
    assert parse_reason("Not responding [slurm@2026-01-05T10:00:00]")[:2] == ("Not responding", "slurm")
    assert parse_reason("no suffix here") == ("no suffix here", None, None)
    assert parse_reason(None) == (None, None, None)
    # an unparseable time keeps the reason and the user
    assert parse_reason("x [root@Jan 5 10:00]") == ("x", "root", None)


def test_partitions_text():
    parts = {p.name: p for p in parse_partitions_text(read("degraded", "scontrol_a_show_partition_o.txt"))}
    gpu = parts["gpu"]
    assert gpu.nodes == ("node1", "node2", "node3", "node4")
    assert gpu.max_time_s == 86400 and gpu.oversubscribe == "FORCE:4"
    assert gpu.allow_accounts == ("ml", "ops", "physics") and gpu.allow_qos is None and gpu.qos is None
    assert gpu.total_gpus == 14
    clean = {p.name: p for p in parse_partitions_text(read("clean", "scontrol_a_show_partition_o.txt"))}
    assert clean["gpu"].max_time_s == -1 and clean["gpu"].allow_accounts is None and clean["gpu"].total_gpus == 16
    assert clean["debug"].max_time_s == 3600


def test_qos_assoc_and_config():
    qos = {q.name: q for q in parse_qos(read("degraded", "sacctmgr_show_qos.txt"))}
    assert qos["gpu-normal"].gpu.limits == {"GrpTRES": {"gres/gpu": 999},
                                            "MaxTRESPU": {"gres/gpu:h100": 64, "gres/gpu": 8}}
    assert qos["normal"].gpu.limits == {}
    assocs = parse_assocs(read("clean", "sacctmgr_show_assoc.txt"))
    physics = [a for a in assocs if a.account == "physics" and a.user is None][0]
    assert physics.gpu.limits == {"GrpTRES": {"gres/gpu": 4}} and physics.qos == ("gpu-normal", "normal")
    config = parse_show_config(read("degraded", "scontrol_show_config.txt"))
    assert "gres/gpu" in accounting_tres(config) and "gres/gpu:h100" not in accounting_tres(config)
    assert "gres/gpu:h100" in accounting_tres(parse_show_config(read("clean", "scontrol_show_config.txt")))
    assert parse_version(read("clean", "scontrol_version.txt")) == (22, 5, 8)


def test_collect_auto_uses_sinfo_json_on_2205_and_text_on_request():
    snap = col.collect_snapshot(replay("degraded"))
    assert snap.node_source == "sinfo-json" and snap.cluster == "audit" and not snap.notes
    text = col.collect_snapshot(replay("degraded"), source="text")
    assert text.node_source == "text" and text.nodes == snap.nodes


def test_collect_falls_back_to_text_when_json_fails():
    client = replay("clean")
    client.fail("sinfo", col.NODE_SINFO_JSON_ARGS, 1, "sinfo: unrecognized option '--json'")
    snap = col.collect_snapshot(client)
    assert snap.node_source == "text" and len(snap.nodes) == 4 and "unusable" in snap.notes[0]


def test_collect_sacctmgr_failure_is_kept_not_raised():
    client = replay("clean")
    client.fail("sacctmgr", col.QOS_ARGS, 1, "sacctmgr: error: Problem talking to the database: Connection refused")
    snap = col.collect_snapshot(client)
    assert snap.qos is None and "Connection refused" in (snap.accounting_error or "")


def test_collect_scontrol_failure_raises():
    client = ReplaySlurmClient()
    client.fail("scontrol", col.VERSION_ARGS, 1, "slurm_load_ctl_conf error: Unable to contact slurm controller")
    with pytest.raises(SlurmCommandError):
        col.collect_snapshot(client)


def test_bad_json_is_an_output_error():
    with pytest.raises(SlurmOutputError):
        parse_nodes_json("{not json")
    with pytest.raises(SlurmOutputError):
        parse_nodes_json('{"meta": {}}')


def test_json_2302_shapes_are_read():
    """23.02+ node objects (list states, {set, infinite, number} numbers, list features). Not recorded here (the
    lab is 22.05): built by editing a real v0.0.38 object into the newer shape."""
    import json

    doc = json.loads(read("degraded", "sinfo.json"))
    node = next(n for n in doc["nodes"] if n["name"] == "node2")
    node["state"] = ["IDLE", "DRAIN"]
    node.pop("state_flags")
    node["reason_changed_at"] = {"set": True, "infinite": False, "number": node["reason_changed_at"]}
    node["features"] = ["gpu", "h100"]
    node["cpus"] = {"set": True, "infinite": False, "number": 8}
    meta = {"plugin": {"type": "", "data_parser": "data_parser/v0.0.42"}}
    rec = parse_nodes_json(json.dumps({"meta": meta, "nodes": [node]}))[0]
    ref = {n.name: n for n in parse_nodes_json(read("degraded", "sinfo.json"))}["node2"]
    assert rec == ref
    # Without a meta block naming a proven shape the document is refused, never guessed at (issue 12).
    with pytest.raises(SlurmOutputError, match="unknown JSON shape"):
        parse_nodes_json(json.dumps({"nodes": [node]}), "scontrol --json show node")
