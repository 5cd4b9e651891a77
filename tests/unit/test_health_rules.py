"""Health rules on before/after snapshot pairs built from the real fixtures, and the [health] config."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpuclust.accept.health.collect import checked_sources, ok, unavailable
from gpuclust.accept.health.rules import HealthFinding, judge_dcgm, judge_job, judge_node, slug, to_finding
from gpuclust.accept.health.sources import SNAPSHOT_SOURCES
from gpuclust.accept.health.sources.dcgm import parse_dcgmi_diag_json
from gpuclust.accept.health.sources.infiniband import read_infiniband
from gpuclust.accept.health.sources.net import parse_proc_net_snmp, parse_tc_qdisc_json, read_net_statistics
from gpuclust.accept.health.sources.nvidia_smi import parse_nvidia_smi_xml
from gpuclust.accept.health.sources.xid import parse_xid_lines
from gpuclust.config.health import XID_CRITICAL_DEFAULT, HealthConfig
from gpuclust.config.site import parse_config
from gpuclust.errors import ConfigError
from gpuclust.exitcodes import Nagios

DATA = Path(__file__).resolve().parents[1] / "data" / "accept" / "health"
CFG = HealthConfig()


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def snap(phase: str, xml: str = "nvidia-smi-a100-sxm4-v12.xml", events: list[dict[str, Any]] | None = None,
         since: str | None = None, time: str = "2025-05-27T04:00:00+00:00") -> dict[str, Any]:
    """A snapshot of every source from its recorded sample; a new source adds its reading here (the assert below
    says so), so that the healthy baseline of these tests covers it."""
    out = {
        "schema": 1, "node": "node1", "phase": phase, "job_id": "42", "time": time,
        "sources": {
            "net": ok(interfaces=read_net_statistics(DATA / "sysfs")),
            "snmp": ok(tcp=parse_proc_net_snmp(read("proc/net/snmp"))["Tcp"]),
            "qdisc": ok(format="json", qdiscs=[q.as_dict() for q in parse_tc_qdisc_json(read("tc-s-j-qdisc-cake.json"))]),
            "infiniband": ok(ports=[x.as_dict() for x in read_infiniband(DATA / "sysfs")]),
            "nvidia_smi": ok(**parse_nvidia_smi_xml(read(xml)).as_dict()),
            "xid": ok(command="journalctl", since=since, events=events or []),
        },
    }
    assert tuple(out["sources"]) == SNAPSHOT_SOURCES, "snap() lacks a source's recorded reading"
    assert not [name for name, e in checked_sources(out["sources"]).items() if e.get("invalid")]
    return out


def pair(**after_kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return snap("before"), snap("after", since="2025-05-27T04:00:00+00:00", **after_kw)


def bad(findings: list[HealthFinding]) -> list[HealthFinding]:
    return [f for f in findings if f.severity in (Nagios.CRITICAL, Nagios.WARNING)]


def test_healthy_pair_has_no_warning_or_critical() -> None:
    before, after = pair()
    findings = judge_node("node1", before, after, CFG)
    assert bad(findings) == []
    assert not [f for f in findings if f.cls == "reset"]


def test_pending_remap_is_critical() -> None:
    xml = read("nvidia-smi-a10g.xml").replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")
    log = parse_nvidia_smi_xml(xml)
    before, after = pair(xml="nvidia-smi-a10g.xml")
    before["sources"]["nvidia_smi"] = ok(**parse_nvidia_smi_xml(read("nvidia-smi-a10g.xml")).as_dict())
    after["sources"]["nvidia_smi"] = ok(**log.as_dict())
    remap = [f for f in judge_node("node1", before, after, CFG) if f.cls == "remap"]
    assert [(f.severity, f.detail) for f in remap] == [(Nagios.CRITICAL, "pending")]


def test_xid_79_in_window_is_critical_and_old_or_other_codes_are_not() -> None:
    events = [{**e.as_dict(), "timed": True} for e in parse_xid_lines(read("xid-syslog-iso-gpud.txt"))]
    old = [{**e.as_dict(), "timed": True} for e in parse_xid_lines(read("xid-dmesg-ctime-gpud.txt"))]
    before, after = pair(events=events + old)
    xids = [f for f in judge_node("node1", before, after, CFG) if f.cls == "xid"]
    assert [(f.severity, f.detail) for f in xids] == [(Nagios.CRITICAL, "79")]  # 2024 events predate --since
    assert "0000:04:00" in xids[0].message


def test_other_xid_is_warning() -> None:
    events = [{"time": "2025-05-27T05:00:00+00:00", "pci": "0000:cb:00", "code": 13, "message": "Graphics SM",
               "line": "x", "timed": True}]
    before, after = pair(events=events)
    (f,) = [f for f in judge_node("node1", before, after, CFG) if f.cls == "xid"]
    assert (f.severity, f.detail) == (Nagios.WARNING, "13")


def test_untimed_xid_already_seen_before_is_not_counted() -> None:
    old = [{**e.as_dict(), "timed": False} for e in parse_xid_lines(read("xid-dmesg-plain-bumblebee.txt"))]
    before, after = pair(events=old)
    before["sources"]["xid"] = ok(command="dmesg", since=None, events=old[:2])
    xids = [f for f in judge_node("node1", before, after, CFG) if f.cls == "xid"]
    assert [f.detail for f in xids] == ["31"]  # the third line is new


def test_counter_backwards_is_reset_unknown_and_not_a_link_finding() -> None:
    before, after = pair()
    before["sources"]["net"]["interfaces"]["ens10f0"]["rx_dropped"] = 10**12
    before["sources"]["net"]["interfaces"]["ens10f0"]["rx_errors"] = 5
    findings = judge_node("node1", before, after, CFG)
    resets = [f for f in findings if f.cls == "reset"]
    assert {f.detail for f in resets} == {"ens10f0-rx_dropped", "ens10f0-rx_errors"}
    assert all(f.severity == Nagios.UNKNOWN for f in resets)
    assert not [f for f in findings if f.cls == "link"]


def test_nic_errors_and_drops_grow() -> None:
    before, after = pair()
    ifs = after["sources"]["net"]["interfaces"]["ens10f0"]
    ifs["rx_crc_errors"] += 3
    ifs["rx_dropped"] += 101
    details = {f.detail for f in judge_node("node1", before, after, CFG) if f.cls == "link"}
    assert details == {"ens10f0-rx_crc_errors", "ens10f0-rx_dropped"}


def test_small_drop_count_on_busy_nic_is_ratio_judged() -> None:
    before, after = pair()
    ifs = after["sources"]["net"]["interfaces"]["ens10f0"]
    ifs["rx_dropped"] += 50  # under net_drop_max ...
    ifs["rx_packets"] += 100_000  # ... but 5e-4 of the run's packets
    assert [f.detail for f in judge_node("node1", before, after, CFG) if f.cls == "link"] == ["ens10f0-rx_dropped"]
    ifs["rx_packets"] += 10_000_000  # 5e-6: fine
    assert [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"] == []


def test_tcp_retransmits_judged_only_over_min_segments() -> None:
    before, after = pair()
    tcp = after["sources"]["snmp"]["tcp"]
    tcp["OutSegs"] += 500
    tcp["RetransSegs"] += 100
    assert not [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    tcp["OutSegs"] += 1500
    (f,) = [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    assert f.detail == "tcp-retrans" and f.severity == Nagios.CRITICAL  # net_severity's default
    warn = dataclasses.replace(CFG, net_severity="warning")
    assert [f.severity for f in judge_node("node1", before, after, warn) if f.cls == "link"] == [Nagios.WARNING]


def test_qdisc_drops() -> None:
    before, after = pair()
    after["sources"]["qdisc"]["qdiscs"][1]["drops"] += 100  # an AQM's few drops: within qdisc_drop_max
    assert not [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    after["sources"]["qdisc"]["qdiscs"][1]["drops"] += 1
    (f,) = [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    assert f.detail == "ens18-qdisc-drops"


def test_ib_error_counter_and_port_down() -> None:
    before, after = pair()
    ports = after["sources"]["infiniband"]["ports"]
    mlx = next(x for x in ports if x["device"] == "mlx4_0" and x["port"] == 1)
    mlx["counters"]["link_downed"] += 1
    mlx2 = next(x for x in ports if x["device"] == "mlx4_0" and x["port"] == 2)
    mlx2["state"] = "DOWN"
    found = {(f.detail, f.severity) for f in judge_node("node1", before, after, CFG) if f.cls == "link"}
    assert found == {("mlx4_0-1-link_downed", Nagios.CRITICAL), ("mlx4_0-2-down", Nagios.CRITICAL)}


def test_ib_rate_below_config_is_topology() -> None:
    before, after = pair()
    cfg = HealthConfig(ib_rate_gbps=200)
    topo = [f for f in judge_node("node1", before, after, cfg) if f.cls == "topology"]
    assert {f.detail for f in topo} == {"mlx4_0-1-rate-40", "mlx4_0-2-rate-40", "i40iw0-1-rate-10"}
    assert all(f.severity == Nagios.WARNING for f in topo)


def test_ecc_uncorrectable_delta_and_aggregate() -> None:
    before, after = pair()
    g = after["sources"]["nvidia_smi"]["gpus"][0]
    g["ecc_volatile"]["uncorrectable"] = 2
    g["ecc_aggregate"]["uncorrectable"] = 2
    g["ecc_volatile"]["correctable"] = 500
    got = {(f.detail, f.severity) for f in judge_node("node1", before, after, CFG) if f.cls == "ecc"}
    assert got == {("uncorrectable", Nagios.CRITICAL), ("uncorrectable-aggregate", Nagios.CRITICAL),
                   ("correctable", Nagios.WARNING)}


def test_throttle_and_pcie_width() -> None:
    before, after = pair()
    g = after["sources"]["nvidia_smi"]["gpus"][0]
    g["clock_events"]["hw_thermal_slowdown"] = True
    g["pcie"]["width_current"] = 8
    found = {(f.cls, f.detail) for f in judge_node("node1", before, after, CFG) if f.severity == Nagios.WARNING}
    assert found == {("throttle", "hw_thermal_slowdown"), ("pcie", "gen4-x8")}
    crit = HealthConfig(pcie_severity="critical")
    assert [f.severity for f in judge_node("node1", before, after, crit) if f.cls == "pcie"] == [Nagios.CRITICAL]


def test_idle_gpu_low_gen_is_not_judged_busy_one_is() -> None:
    before, after = pair()
    before["sources"]["nvidia_smi"] = after["sources"]["nvidia_smi"] = ok(
        **parse_nvidia_smi_xml(read("nvidia-smi-rtx-4000-sff-ada-v13.xml")).as_dict())
    assert not [f for f in judge_node("node1", before, after, CFG) if f.cls == "pcie"]  # gen1 of 4, idle
    after = copy.deepcopy(after)
    after["sources"]["nvidia_smi"]["gpus"][0]["clock_events"]["gpu_idle"] = False
    (f,) = [f for f in judge_node("node1", before, after, CFG) if f.cls == "pcie"]
    assert f.detail == "gen1-x16"


def test_unavailable_source_is_ok_note_unless_required() -> None:
    before, after = pair()
    after["sources"]["infiniband"] = unavailable("/sys/class/infiniband: not found")
    (f,) = [f for f in judge_node("node1", before, after, CFG) if f.cls == "unavailable"]
    assert (f.severity, f.detail) == (Nagios.OK, "infiniband") and "not found" in f.message
    (f,) = [f for f in judge_node("node1", before, after, HealthConfig(require=("infiniband",))) if f.cls == "unavailable"]
    assert f.severity == Nagios.UNKNOWN


def test_job_with_missing_snapshot_is_unknown() -> None:
    before, after = pair()
    findings = judge_job({"node1": {"before": before, "after": after}, "node2": {"before": before}}, CFG,
                         ["node1", "node2", "node3"])
    missing = {(f.node, f.detail) for f in findings if f.severity == Nagios.UNKNOWN}
    assert missing == {("node2", "snapshot-missing"), ("node3", "snapshot-missing")}


def test_dcgm_judgement_and_to_finding() -> None:
    results = parse_dcgmi_diag_json(read("dcgmi-diag-j-dcgm3-gcm-fail.json"))
    found = judge_dcgm("node1", results)
    assert {(f.detail, f.severity) for f in found} == {("persistence-mode", Nagios.CRITICAL),
                                                      ("environment-variables", Nagios.WARNING)}
    f = to_finding(found[0], "42", "allreduce")
    assert f.check == "health-dcgm" and f.node_list == ("node1",) and f.job_id == "42"
    assert f.details["detail"] == "persistence-mode" and f.details["class"] == "dcgm"


def test_slug_and_unknown_class() -> None:
    assert slug("Page Retirement/Row Remap") == "page-retirement-row-remap"
    assert slug("mlx5_0-1-symbol_error") == "mlx5_0-1-symbol_error"
    with pytest.raises(ValueError):
        HealthFinding("n", "bogus", Nagios.OK, "x", "m")


# -- [health] config -----------------------------------------------------------------------------------

BASE = "[site]\ncluster_name = c\n"


def test_health_defaults_and_values() -> None:
    assert parse_config(BASE).health == HealthConfig()
    assert HealthConfig().xid_critical == XID_CRITICAL_DEFAULT and 79 in XID_CRITICAL_DEFAULT
    cfg = parse_config(BASE + "[health]\nxid_critical = 79, 48\nib_rate_gbps = 400\nrequire = nvidia_smi xid\n"
                       "nvidia_smi_timeout = 1m\npcie_severity = critical\ntcp_retrans_ratio_max = 2%\n").health
    assert cfg.xid_critical == (48, 79) and cfg.ib_rate_gbps == 400.0 and cfg.require == ("nvidia_smi", "xid")
    assert cfg.nvidia_smi_timeout_s == 60.0 and cfg.pcie_severity == "critical" and cfg.tcp_retrans_ratio_max == 0.02


@pytest.mark.parametrize("line, msg", [
    ("require = gpu", "unknown health source 'gpu'"),
    ("xid_critical = 79, x", "expected an integer"),
    ("pcie_severity = fatal", "expected one of warning, critical"),
    ("ib_rate_gbps = 0", "must be > 0"),
    ("nvidia_smi_timout = 3", "did you mean 'nvidia_smi_timeout'"),
])
def test_health_bad_values(line: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        parse_config(BASE + "[health]\n" + line + "\n")


def test_site_example_conf_parses(example_config_path: Path) -> None:
    cfg = parse_config(example_config_path.read_text(encoding="utf-8"), str(example_config_path))
    assert cfg.health.nvidia_smi_timeout_s == 30.0


def _with_ip(s: dict[str, Any]) -> dict[str, Any]:
    snmp = parse_proc_net_snmp(read("proc/net/snmp"))
    s["sources"]["snmp"] = ok(tcp=dict(snmp["Tcp"]), ip=dict(snmp["Ip"]))
    return s


def _grow(s: dict[str, Any], section: str, **deltas: int) -> None:
    counters = s["sources"]["snmp"][section]
    for key, d in deltas.items():
        counters[key] = counters.get(key, 0) + d


def test_ip_loss_names_the_node_and_its_peers_retransmits_are_a_symptom() -> None:
    """The deltas recorded on the lab (`slurm-lab fault node2 loss 5 --direction in`, one 64 MiB exchange
    between node1 and node2): node2 received 1437 IP packets and delivered 1371 (its nft rule dropped 66); node1,
    the sender, retransmitted 2340 of 46692 segments. node2 is the cause; node1's retransmits are its symptom."""
    snaps: dict[str, dict[str, Any]] = {}
    for node in ("node1", "node2"):
        before, after = (_with_ip(s) for s in pair())
        for s in (before, after):
            s["node"] = node
        snaps[node] = {"before": before, "after": after}
    _grow(snaps["node2"]["after"], "ip", InReceives=1437, InDelivers=1371, OutRequests=1590)
    _grow(snaps["node2"]["after"], "tcp", OutSegs=46893, RetransSegs=137)
    _grow(snaps["node1"]["after"], "ip", InReceives=1595, InDelivers=1595, OutRequests=1437)
    _grow(snaps["node1"]["after"], "tcp", OutSegs=46692, RetransSegs=2340)
    alone = [f for f in judge_node("node1", snaps["node1"]["before"], snaps["node1"]["after"], CFG)
             if f.cls == "link"]
    assert [(f.detail, f.severity) for f in alone] == [("tcp-retrans", Nagios.CRITICAL)]  # judged alone
    found = judge_job(snaps, CFG, ["node1", "node2"])
    named = sorted({(f.node, f.detail) for f in bad(found)})
    assert named == [("node2", "ip-lost-in")], named
    [symptom] = [f for f in found if f.node == "node1" and f.detail == "tcp-retrans"]
    assert symptom.severity == Nagios.OK and symptom.evidence["symptom_of"] == ["node2"]


def test_ip_loss_needs_both_a_count_and_a_share() -> None:
    before, after = (_with_ip(s) for s in pair())
    _grow(after, "ip", InReceives=100000, InDelivers=99950)  # 50 lost, 0.05 %: a firewall's strays
    assert not [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    # node_exporter's recording predates kernel 6.3's OutTransmits: the out side is not judged without it
    _grow(after, "ip", OutRequests=1000)
    assert not [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    for s, sent in ((before, 5000), (after, 5940)):  # 60 of 1000 never left
        s["sources"]["snmp"]["ip"]["OutTransmits"] = sent
    [f] = [f for f in judge_node("node1", before, after, CFG) if f.cls == "link"]
    assert f.detail == "ip-lost-out" and f.evidence["lost"] == 60


def test_a_critical_finding_names_a_class_that_can_drain() -> None:
    from gpuclust.accept import drain
    from gpuclust.accept.health.actions import CLASS_ACTIONS
    from gpuclust.accept.health.kit import CLASSES, DRAIN_ORDER, NOTE_CLASSES

    # the drain and health check read the one cause order; no class is both a drain's cause and a note
    assert drain.CLASSES[:len(DRAIN_ORDER)] == DRAIN_ORDER and not set(DRAIN_ORDER) & set(NOTE_CLASSES)
    assert {key.split(":")[0] for key in CLASS_ACTIONS} <= set(CLASSES)
    assert HealthFinding("node1", "mig", Nagios.WARNING, "gpu0-pending", "m").cls == "mig"
    with pytest.raises(ValueError, match="never CRITICAL"):
        HealthFinding("node1", "mig", Nagios.CRITICAL, "gpu0-pending", "m")
    for cls in DRAIN_ORDER:  # every class that can be CRITICAL makes a drain reason
        finding = HealthFinding("node1", cls, Nagios.CRITICAL, "detail", "m")
        assert drain.make_reason(finding.cls, finding.detail, "12", "allreduce", "m").startswith(f"gpuclust:{cls}:")
