"""Health parsers on real recorded output (tests/data/accept/health/SOURCES.md) and on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclust.accept.health.kit import HealthParseError, to_float, to_int
from gpuclust.accept.health.sources.dcgm import parse_dcgmi_diag_json
from gpuclust.accept.health.sources.infiniband import parse_ib_rate, parse_ib_state, read_infiniband
from gpuclust.accept.health.sources.net import (
    parse_net_statistics,
    parse_proc_net_netstat,
    parse_proc_net_snmp,
    parse_tc_qdisc_json,
    parse_tc_qdisc_text,
    read_net_statistics,
)
from gpuclust.accept.health.sources.nvbandwidth import parse_nvbandwidth
from gpuclust.accept.health.sources.nvidia_smi import PcieLink, parse_nvidia_smi_xml
from gpuclust.accept.health.sources.xid import parse_xid_lines

DATA = Path(__file__).resolve().parents[1] / "data" / "accept" / "health"


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# -- nvidia-smi -q -x --------------------------------------------------------------------------------


def test_a100_r535_sram_dram_layout_and_host_device_max_gen() -> None:
    log = parse_nvidia_smi_xml(read("nvidia-smi-a100-sxm4-v12.xml"))
    assert (log.driver_version, log.cuda_version) == ("535.54.03", "12.2")
    (g,) = log.gpus
    assert g.index == 0 and g.pci_bus_id == "00000000:01:00.0" and g.product_name == "NVIDIA A100-SXM4-80GB"
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g.ecc_volatile.correctable == 0 and g.ecc_volatile.uncorrectable == 0
    assert "dram_uncorrectable" in g.ecc_volatile.raw
    assert g.pcie == PcieLink(4, 4, 4, 4, 16, 16)
    assert g.power_draw_w == 67.03 and g.temperature_c == 27.0
    # <remapped_rows>N/A</remapped_rows> (MIG enabled): unknown, not "no remap pending"
    assert g.remapped_pending is None and g.remapped_correctable is None
    assert g.clock_events["hw_slowdown"] is False


def test_a10g_r515_remapped_rows_and_histogram() -> None:
    (g,) = parse_nvidia_smi_xml(read("nvidia-smi-a10g.xml")).gpus
    assert g.remapped_pending is False and g.remapped_failure is False
    assert (g.remapped_correctable, g.remapped_uncorrectable) == (0, 0)
    assert g.remap_histogram["max"] == 192
    assert g.clock_events["gpu_idle"] is True
    assert (g.pcie.width_current, g.pcie.width_max) == (8, 16)
    assert g.pcie.gen_max_device is None  # R515 reports only max_link_gen
    assert g.power_draw_w == 25.58  # <power_readings> (pre-R530 name)


def test_quadro_p400_r418_single_double_bit_layout_is_unknown_not_zero() -> None:
    log = parse_nvidia_smi_xml(read("nvidia-smi-quadro-p400.xml"))
    (g,) = log.gpus
    assert log.driver_version == "418.43"
    assert g.ecc_volatile.raw["double_bit/total"] is None
    assert g.ecc_volatile.uncorrectable is None and g.ecc_aggregate.correctable is None
    assert g.retired_pending is None and g.retired_double_bit is None


def test_rtx4000_ada_r595_parity_secded_split_and_event_reasons() -> None:
    (g,) = parse_nvidia_smi_xml(read("nvidia-smi-rtx-4000-sff-ada-v13.xml")).gpus
    assert "sram_uncorrectable_parity" in g.ecc_volatile.raw
    assert "sram_uncorrectable_secded" in g.ecc_aggregate.raw
    assert g.ecc_volatile.uncorrectable is None  # all N/A (ECC disabled)
    assert g.remapped_pending is False
    assert g.pcie.gen_current == 1 and g.pcie.gen_max == 4  # idle GPUs drop to gen1
    assert g.clock_events["gpu_idle"] is True


def test_t4_r515_clocks_throttle_reasons_older_name() -> None:
    (g,) = parse_nvidia_smi_xml(read("nvidia-smi-tesla-t4.xml")).gpus
    assert g.clock_events["hw_thermal_slowdown"] is False
    assert set(g.clock_events) >= {"gpu_idle", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown"}
    assert g.retired_pending is False and g.retired_double_bit == 0


def test_doctype_with_system_id_is_accepted() -> None:
    assert read("nvidia-smi-tesla-t4.xml").splitlines()[1].startswith("<!DOCTYPE nvidia_smi_log SYSTEM")
    parse_nvidia_smi_xml(read("nvidia-smi-tesla-t4.xml"))


def test_truncated_xml_names_the_line() -> None:
    text = read("nvidia-smi-a100-sxm4-v12.xml")
    with pytest.raises(HealthParseError, match=r"nvidia-smi -q -x: line \d+"):
        parse_nvidia_smi_xml(text[: len(text) // 2])


@pytest.mark.parametrize("doc, why", [
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log>&a;</nvidia_smi_log>', "entity"),
    ('<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ELEMENT x ANY>]><nvidia_smi_log/>', "internal subset"),
    ('<?xml version="1.0"?><html><body/></html>', "not <nvidia_smi_log>"),
    ("", "line 1"),
])
def test_hostile_or_foreign_xml_is_refused(doc: str, why: str) -> None:
    with pytest.raises(HealthParseError, match=why):
        parse_nvidia_smi_xml(doc)


@pytest.mark.parametrize("text", ["N/A", "[N/A]", "Not Supported", "Unknown Error", "", None, "N/A (no PMA)"])
def test_unknown_markers_are_none(text: str | None) -> None:
    assert to_int(text) is None and to_float(text) is None


# -- Xid lines ---------------------------------------------------------------------------------------


def test_xid_dmesg_T() -> None:
    events = parse_xid_lines(read("xid-dmesg-T-akash.txt"))
    assert [(e.pci, e.code) for e in events] == [("0000:00:05", 43), ("0000:00:05", 43), ("0000:00:07", 31),
                                                 ("0000:00:08", 94)]
    assert all(e.time is not None and e.time.startswith("2024-0") for e in events)
    assert events[3].message.startswith("pid='<unknown>', name=<unknown>, Contained: SM")


def test_xid_dmesg_ctime_ignores_other_lines() -> None:
    events = parse_xid_lines(read("xid-dmesg-ctime-gpud.txt"))
    assert [e.code for e in events] == [13, 13, 13, 109]
    assert events[3].pci == "0000:cb:00"


def test_xid_plain_dmesg_has_no_wall_time() -> None:
    events = parse_xid_lines(read("xid-dmesg-plain-bumblebee.txt"))
    assert [e.code for e in events] == [32, 32, 31] and all(e.time is None for e in events)


def test_xid_journal_kernel_lines_and_caused_by_previous() -> None:
    events = parse_xid_lines(read("xid-journal-kernel-1150.txt"))
    assert [e.code for e in events] == [45, 45, 45, 45]  # the code, not "previous Xid 149"
    assert events[0].pci == "0000:dc:00"


def test_xid_iso_timestamp() -> None:
    (ev,) = parse_xid_lines(read("xid-syslog-iso-gpud.txt"))
    assert ev.code == 79 and ev.time == "2025-05-27T04:18:56.089671+00:00"


def test_xid_syslog_foreign_month_keeps_event_without_time() -> None:
    (ev,) = parse_xid_lines(read("xid-journalctl-balrog.txt"), year_hint=2020)
    assert ev.code == 79 and ev.time is None  # "Okt" (German locale) is not guessed


# -- net, snmp, qdisc, infiniband ----------------------------------------------------------------------


def test_net_statistics_from_recorded_sysfs() -> None:
    tree = read_net_statistics(DATA / "sysfs")
    assert tree["ens10f0"]["rx_dropped"] == 29220 and tree["ens10f0"]["rx_packets"] == 46422718
    assert "lo" not in parse_net_statistics({"lo": {"rx_errors": "1"}, "eth0": {"rx_errors": "N/A"}})
    assert parse_net_statistics({"eth0": {"rx_errors": "N/A"}}) == {"eth0": {"rx_errors": None}}


def test_net_statistics_missing_tree(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_net_statistics(tmp_path)


def test_proc_net_snmp_and_netstat() -> None:
    snmp = parse_proc_net_snmp(read("proc/net/snmp"))
    assert snmp["Tcp"]["RetransSegs"] == 227 and snmp["Tcp"]["OutSegs"] == 54915039 and snmp["Tcp"]["MaxConn"] == -1
    ext = parse_proc_net_netstat(read("proc/net/netstat"))
    assert "TCPLostRetransmit" in ext["TcpExt"] and "InOctets" in ext["IpExt"]


def test_proc_net_snmp_mismatch_names_lines() -> None:
    with pytest.raises(HealthParseError, match="line 1-2: 3 names but 2 values"):
        parse_proc_net_snmp("Tcp: A B C\nTcp: 1 2\n")
    with pytest.raises(HealthParseError, match="line 2: a value is not an integer"):
        parse_proc_net_snmp("Tcp: A\nTcp: x\n")


def test_tc_json() -> None:
    qs = parse_tc_qdisc_json(read("tc-s-j-qdisc-cake.json"))
    cake = next(q for q in qs if q.dev == "ens16")
    assert (cake.kind, cake.drops, cake.overlimits, cake.requeues, cake.backlog) == ("cake", 7105716, 62338506, 2331, 0)
    assert cake.parent is None and cake.key == "ens16/8007:/root"
    with pytest.raises(HealthParseError, match="not JSON"):
        parse_tc_qdisc_json('[{"kind":')


def test_tc_text_mq_children() -> None:
    qs = parse_tc_qdisc_text(read("tc-s-qdisc-show.txt"))
    eth0 = [q for q in qs if q.dev == "eth0"]
    assert [(q.kind, q.parent) for q in eth0] == [("mq", None), ("fq_codel", ":2"), ("fq_codel", ":1")]
    assert eth0[1].bytes == 793843650 and eth0[1].drops == 0 and eth0[1].backlog == 0
    with pytest.raises(HealthParseError, match="line 1"):
        parse_tc_qdisc_text("garbage\n")


def test_infiniband_recorded_sysfs() -> None:
    ports = {port.name: port for port in read_infiniband(DATA / "sysfs")}
    mlx = ports["mlx4_0-1"]
    assert (mlx.state, mlx.phys_state, mlx.rate_gbps, mlx.width, mlx.link_layer) == ("ACTIVE", "LinkUp", 40.0, "4X", "InfiniBand")
    assert mlx.counters["link_downed"] == 0
    assert ports["i40iw0-1"].counters["symbol_error"] is None  # "N/A (no PMA)"


def test_ib_rate_and_state_text() -> None:
    assert parse_ib_rate("200 Gb/sec (4X HDR)") == (200.0, "4X")
    assert parse_ib_rate("400 Gb/sec (4X NDR)") == (400.0, "4X")
    assert parse_ib_rate("N/A") == (None, None)
    assert parse_ib_state("4: ACTIVE") == (4, "ACTIVE")
    assert parse_ib_state("1: DOWN") == (1, "DOWN")


# -- dcgmi diag ----------------------------------------------------------------------------------------


def test_dcgm4_gb10_document() -> None:
    (r,) = parse_dcgmi_diag_json(read("dcgmi-diag-r1-j-dcgm4.2.3-gb10.json"))
    assert (r.category, r.test, r.gpu, r.status) == ("Deployment", "software", 0, "fail")
    assert "Persistence mode for GPU 0 is disabled" in r.messages[0]


def test_dcgm3_shape_with_banner() -> None:
    text = "Successfully ran diagnostic for group.\n" + read("dcgmi-diag-j-dcgm3-gcm-fail.json")
    results = parse_dcgmi_diag_json(text)
    assert {r.test: r.status for r in results}["Persistence Mode"] == "fail"
    assert {r.test: r.status for r in results}["Environment Variables"] == "warn"
    assert all(r.gpu is None for r in results)


def test_dcgm4_eight_gpu_fragment_from_issue_215() -> None:
    fragment = read("dcgmi-diag-r3-dcgm4-issue215-fragment.txt").rstrip().rstrip(",")
    doc = '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [' + fragment + "]}]}}"
    results = parse_dcgmi_diag_json(doc)
    assert [r.gpu for r in results] == list(range(8)) and {r.status for r in results} == {"pass"}
    assert "859.08 gigaflops" in results[0].messages[-1]


def test_dcgm_unknown_status_is_not_pass_and_gpu_ids_string() -> None:
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Integration", "tests": [
        {"name": "PCIe", "results": [{"gpu_ids": "1", "status": "Inconclusive"}]}]}]}}
    (r,) = parse_dcgmi_diag_json(json.dumps(doc))
    assert r.gpu == 1 and r.status == "not-run"


@pytest.mark.parametrize("text", ["", "Error: unable to connect to host engine", '{"foo": 1}', "{not json"])
def test_dcgm_bad_input(text: str) -> None:
    with pytest.raises(HealthParseError):
        parse_dcgmi_diag_json(text)


# -- nvbandwidth ---------------------------------------------------------------------------------------


def test_nvbandwidth_text_rtx4090() -> None:
    results = parse_nvbandwidth(read("nvbandwidth-rtx4090-issue15.txt"))
    assert [(r.testcase, r.sum_gbps) for r in results] == [("host_to_device_memcpy_ce", 205.04),
                                                          ("device_to_host_memcpy_ce", 214.28)]
    assert results[0].matrix == ((25.50, 24.26, 23.90, 26.30, 26.28, 26.38, 26.09, 26.31),)
    assert results[0].description == "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)"


def test_nvbandwidth_text_na_diagonal() -> None:
    (r,) = parse_nvbandwidth(read("nvbandwidth-a6000-issue50.txt"))
    assert r.testcase == "device_to_device_memcpy_read_ce" and r.sum_gbps == 715.53
    assert len(r.matrix) == 6 and r.matrix[0][0] is None and r.matrix[5][5] is None and r.matrix[3][1] == 21.82


def test_nvbandwidth_readme_matrix_without_sum() -> None:
    (r,) = parse_nvbandwidth(read("nvbandwidth-readme-d2d-write.txt"))
    assert r.testcase == "device_to_device_memcpy_write_ce" and r.sum_gbps is None and len(r.matrix) == 8


def test_nvbandwidth_json_hand_made() -> None:
    # HAND-MADE: the shape json_output.cpp writes (no recorded --json output was found)
    doc = {"nvbandwidth": {"testcases": [
        {"name": "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
         "bandwidth_matrix": [["25.5", "N/A"]], "sum": 25.5},
        {"name": "device_to_device_memcpy_write_ce", "status": "Waived"}]}}
    a, b = parse_nvbandwidth(json.dumps(doc))
    assert a.matrix == ((25.5, None),) and a.sum_gbps == 25.5 and a.status == "passed"
    assert b.status == "waived" and b.matrix == ()
