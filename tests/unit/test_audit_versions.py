"""The audit on every recorded Slurm version (issue 12): the same scenarios (tests/data/audit/record.sh) from
22.05 (nodes from `sinfo --json`) and 24.11+ (nodes from `scontrol --json show node`, state and partitions as
lists), each read through both node sources, give the same findings."""

from __future__ import annotations

from datetime import timedelta

import pytest

import gpuclust.audit.collect as col
from gpuclust.audit import audit_snapshot
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.records import parse_nodes_json, parse_nodes_text
from tests.unit.audit_replay import SCENARIOS, VERSIONS, read, replay


def _audit(scenario: str, version: str, source: str):
    snap = col.collect_snapshot(replay(scenario, version), source)
    drained = [n.reason_time for n in snap.nodes.values() if n.reason_time]
    now = (max(drained) if drained else None)
    now = now + timedelta(hours=2) if now else None
    return snap, audit_snapshot(snap, "gpu", None, now=now, skip=("acceptance",))


def test_versions_recorded():
    assert {"22.05", "24.11"} <= set(VERSIONS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_text_and_json_nodes_are_identical(scenario, version):
    text = {n.name: n for n in parse_nodes_text(read(scenario, "scontrol_d_show_node_o.txt", version))}
    name = "sinfo.json" if version == "22.05" else "scontrol_json_show_node.json"
    js = {n.name: n for n in parse_nodes_json(read(scenario, name, version))}
    assert js == text


@pytest.mark.parametrize("version", VERSIONS)
def test_auto_source_reads_the_version_json(version):
    snap = col.collect_snapshot(replay("degraded", version))
    assert snap.node_source == ("sinfo-json" if version == "22.05" else "scontrol-json") and not snap.notes


def _key(report):
    return sorted((f.check, int(f.severity), f.nodes) for f in report.findings)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("source", ["text", "json"])
def test_degraded_names_the_drained_and_down_nodes(version, source):
    _, report = _audit("degraded", version, source)
    assert report.status == Nagios.CRITICAL
    drain = [f for f in report.findings if f.check == "node.drain"]
    assert [(f.severity, f.nodes) for f in drain] == [(Nagios.WARNING, "node2")]
    assert "GPU 3 Xid 79 fallen off the bus, RMA ticket 4711" in drain[0].message
    down = [f for f in report.findings if f.check == "node.down"]
    assert [(f.severity, f.nodes) for f in down] == [(Nagios.CRITICAL, "node3")] and "PSU failure" in down[0].message
    gres = [f for f in report.findings if f.check == "homogeneity.gres"]
    assert [(f.severity, f.nodes) for f in gres] == [(Nagios.CRITICAL, "node4")]


@pytest.mark.parametrize("version", sorted(set(VERSIONS) - {"22.05"}))
@pytest.mark.parametrize("scenario", ["clean", "degraded"])
def test_same_findings_on_every_version_and_source(scenario, version):
    ref = _key(_audit(scenario, "22.05", "text")[1])
    for source in ("text", "json"):
        assert _key(_audit(scenario, version, source)[1]) == ref, source


@pytest.mark.parametrize("version", VERSIONS)
def test_mostly_drained_is_critical(version):
    for source in ("text", "json"):
        _, report = _audit("mostly_drained", version, source)
        drain = [f for f in report.findings if f.check == "node.drain"]
        assert [(f.severity, f.nodes) for f in drain] == [(Nagios.CRITICAL, "node[1-3]")]


def test_unknown_node_json_shape_falls_back_to_text_by_name():
    """A newer data_parser than gpuclust knows: the JSON is refused by name and the text form read instead."""
    import json

    newest = VERSIONS[-1]
    doc = json.loads(read("degraded", "scontrol_json_show_node.json", newest))
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.99"
    client = replay("degraded", newest)
    client.add("scontrol", col.NODE_SCONTROL_JSON_ARGS, json.dumps(doc))
    snap = col.collect_snapshot(client, "json")
    assert snap.node_source == "text"
    (note,) = snap.notes
    assert "scontrol --json show node" in note and "data_parser/v0.0.99" in note and newest in note
    assert {n.name for n in snap.nodes.values() if n.is_drain} == {"node2"}
