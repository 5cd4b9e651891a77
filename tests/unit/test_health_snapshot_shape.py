"""Issue 42: typed health snapshots (each source's shape, checked when `accept report` reads them), numbers
bounded before conversion, vanished hardware as its own CRITICAL class, and terminal-safe output. Replayed on
the lab's recorded snapshots (tests/data/accept/health/lab-24.11)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accept import drain
from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept.health import collect, kit, shape
from gpuclust.accept.health.sources import SOURCES
from gpuclust.accept.health.sources.nvidia_smi import SHAPE as NVIDIA_SMI_SHAPE
from gpuclust.accept.health.sources.nvidia_smi import parse_nvidia_smi_xml
from gpuclust.accept.health.sources.xid import parse_xid_lines
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.exitcodes import Nagios
from gpuclust.output import terminal_safe
from gpuclust.slurm.records import parse_nodes_text

TESTS = Path(__file__).resolve().parents[1]
HEALTH = TESTS / "data" / "accept" / "health"
LAB = HEALTH / "lab-24.11"
CONFIG = parse_config((TESTS / "slurm_lab" / "lab-site.conf").read_text())
CLEAN_NODES = TESTS / "data" / "accept" / "drain" / "show_node_clean.txt"
SNAPSHOT_DIRS = sorted({p.parent for p in HEALTH.rglob("*-before.json")})


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(LAB, root)
    return root


def _edit(root: Path, job: str, node: str, phase: str, fn: Any) -> None:
    path = root / "health" / job / f"{node}-{phase}.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def _report(job: str, root: Path) -> rep.Report:
    return rep.evaluate(R.scan_results(root, job=job), CONFIG, job=job)


def _health(report: rep.Report, node: str, *severities: Nagios) -> list[tuple[str, str]]:
    return sorted((f.check, str(f.details.get("detail"))) for f in report.nodes[node].findings
                  if f.check.startswith("health-") and (not severities or f.status in severities))


# ---- shapes ----------------------------------------------------------------------------------------------


def test_every_source_declares_its_shape_and_the_recordings_fit() -> None:
    assert all(s.shape is not None for s in SOURCES)
    checked = 0
    for directory in SNAPSHOT_DIRS:
        snaps, problems = collect.load_snapshots(directory)
        assert problems == []
        for phases in snaps.values():
            for snap in phases.values():
                assert not [n for n, e in snap["sources"].items() if e.get("invalid")], directory
                checked += 1
    assert checked >= 30
    for xml in sorted(HEALTH.glob("*.xml")) + sorted((HEALTH / "lab").glob("*.xml")):
        assert shape.check(NVIDIA_SMI_SHAPE, parse_nvidia_smi_xml(xml.read_text()).as_dict()) is None, xml


def test_the_snapshot_schema_is_json_schema_and_agrees_with_the_check() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = collect.snapshot_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for directory in SNAPSHOT_DIRS:
        for path in sorted(directory.glob("*.json")):
            assert list(validator.iter_errors(json.loads(path.read_text()))) == [], path
    bad = json.loads((LAB / "health" / "15" / "node3-after.json").read_text())
    bad["sources"]["nvidia_smi"]["gpus"][0]["index"] = "0"
    assert list(validator.iter_errors(bad))
    assert collect.checked_source("nvidia_smi", bad["sources"]["nvidia_smi"])["invalid"]["field"] == \
        "nvidia_smi.gpus[0].index"


@pytest.mark.parametrize(("source", "path", "value", "field"), [
    ("nvidia_smi", ["gpus", 0, "ecc_volatile", "uncorrectable"], "5", "nvidia_smi.gpus[0].ecc_volatile.uncorrectable"),
    ("nvidia_smi", ["gpus"], {"0": {}}, "nvidia_smi.gpus"),
    ("nvidia_smi", ["gpus", 0, "clock_events"], ["gpu_idle"], "nvidia_smi.gpus[0].clock_events"),
    ("nvidia_smi", ["gpus", 0, "power_draw_w"], 1e300, "nvidia_smi.gpus[0].power_draw_w"),
    ("net", ["interfaces", "eth0", "rx_errors"], True, "net.interfaces.eth0.rx_errors"),
    ("net", ["interfaces"], [], "net.interfaces"),
    ("xid", ["events"], {"code": 79}, "xid.events"),
    ("snmp", ["tcp", "OutSegs"], 2**70, "snmp.tcp.OutSegs"),
    ("qdisc", ["qdiscs", 0, "drops"], "12", "qdisc.qdiscs[0].drops"),
    ("xid", [], "ok", "xid"),
])
def test_a_source_that_does_not_fit_is_unknown_for_that_source_only(tmp_path: Path, source: str, path: list[Any],
                                                                     value: Any, field: str) -> None:
    root = _copy(tmp_path)

    def put(data: dict[str, Any]) -> None:
        if not path:
            data["sources"][source] = value
            return
        target = data["sources"][source]
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    _edit(root, "15", "node3", "after", put)
    clean = _report("15", LAB)
    report = _report("15", root)
    # node3's own fault (IPv4 packets lost, snmp) stays judged unless snmp is the bad source
    if source != "snmp":
        assert ("health-link", "ip-lost-in") in _health(report, "node3", Nagios.CRITICAL)
    [bad] = [f for f in report.nodes["node3"].findings if f.details.get("detail") == f"{source}-invalid"]
    assert bad.status == Nagios.UNKNOWN and bad.check == "health-unavailable"
    assert "node3" in bad.message and source in bad.message and field in bad.message
    if source == "snmp":  # node3's IPv4 loss (snmp) is what names it the cause of the others' retransmits
        return
    for node in ("node1", "node2", "node4"):
        assert [f.as_dict() for f in report.nodes[node].findings] == [f.as_dict() for f in clean.nodes[node].findings]


def test_accept_report_never_exits_70_on_a_type_confusion(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _edit(root, "14", "node2", "before", lambda d: d["sources"]["infiniband"].update(status="ok", ports="x"))
    _edit(root, "14", "node2", "after", lambda d: d["sources"].update(nvbandwidth=[1], dcgm={"status": "ok",
                                                                                          "results": {"a": 1}}))
    conf = tmp_path / "site.conf"
    conf.write_text((TESTS / "slurm_lab" / "lab-site.conf").read_text().replace(
        "/var/lib/gpuclust-lab/site-state/results", str(root)))
    for args in ([], ["--json"]):
        result = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--job", "14", *args],
                                    obj=AppContext())
        assert result.exit_code == 3, result.output
        assert "Traceback" not in result.output and "internal error" not in result.output


def test_snapshot_files_past_the_limits_are_problems_not_crashes(tmp_path: Path) -> None:
    (tmp_path / "n1-before.json").write_text('{"schema": 1, "n": ' + "9" * 5000 + "}")
    (tmp_path / "n2-before.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "n3-before.json").write_text(json.dumps({"schema": 1, "node": "n3", "phase": "before",
                                                          "job_id": 14, "sources": {}}))
    snaps, problems = collect.load_snapshots(tmp_path)
    assert snaps == {}
    assert [Path(p.file).name for p in problems] == ["n1-before.json", "n2-before.json", "n3-before.json"]
    assert "job_id" in str(problems[2])


# ---- numbers bounded before conversion ---------------------------------------------------------------------


def test_numbers_past_64_bits_are_unknown_values() -> None:
    huge = "9" * 5000
    assert kit.to_int(huge) is None and kit.to_int("1" + "0" * 20) is None
    assert kit.to_int(str(2**64 - 1)) == 2**64 - 1 and kit.to_int("000000000000000000000042 MiB") == 42
    assert kit.to_float(huge) is None and kit.to_float("1" + "0" * 300) is None and kit.to_float("67.03 W") == 67.03
    assert kit.int_or_none(2**64) is None and kit.int_or_none(True) is None
    xml = (HEALTH / "nvidia-smi-a100-sxm4-v12.xml").read_text()
    start = xml.index("<sram_correctable>") + len("<sram_correctable>")
    hostile = xml[:start] + huge + xml[xml.index("</sram_correctable>", start):]
    clean, bad = parse_nvidia_smi_xml(xml).gpus[0], parse_nvidia_smi_xml(hostile).gpus[0]
    assert bad.ecc_volatile.raw["sram_correctable"] is None
    assert bad.pcie == clean.pcie and bad.uuid == clean.uuid  # one bad value is one unknown value
    assert parse_xid_lines(f"NVRM: Xid (PCI:0000:3b:00): {huge}, pid=1\nNVRM: Xid (PCI:0000:3b:00): 79, x\n")[0].code \
        == 79


def test_the_snapshot_program_keeps_every_source_when_nvidia_smi_writes_a_huge_number(tmp_path: Path) -> None:
    xml = (HEALTH / "nvidia-smi-a100-sxm4-v12.xml").read_text()
    start = xml.index("<gpu_temp>") + len("<gpu_temp>")
    (tmp_path / "answer.xml").write_text(xml[:start] + "9" * 4400 + xml[xml.index("</gpu_temp>", start):])
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\ncat {tmp_path / 'answer.xml'}\n")
    fake.chmod(0o755)
    env = {**os.environ, "GPUCLUST_HEALTH_NVIDIA_SMI": str(fake), "GPUCLUST_HEALTH_SYSFS": str(HEALTH / "sysfs"),
           "GPUCLUST_HEALTH_PROC": str(HEALTH / "proc"), "GPUCLUST_HEALTH_TC": "/nonexistent/tc",
           "GPUCLUST_HEALTH_JOURNALCTL": "/nonexistent/journalctl", "GPUCLUST_HEALTH_DMESG": "/nonexistent/dmesg"}
    done = subprocess.run([sys.executable, "-m", "gpuclust.accept.health", "snapshot", "--phase", "before",
                           "--job", "1", "--out", str(tmp_path / "out"), "--node", "n1"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    snap = json.loads((tmp_path / "out" / "n1-before.json").read_text())
    assert snap["sources"]["nvidia_smi"]["status"] == "ok"
    assert snap["sources"]["nvidia_smi"]["gpus"][0]["temperature_c"] is None
    assert snap["sources"]["net"]["status"] == "ok" and snap["sources"]["snmp"]["status"] == "ok"


# ---- vanished hardware -------------------------------------------------------------------------------------


def _vanished(report: rep.Report, node: str) -> list[rep.Finding]:
    return [f for f in report.nodes[node].findings if f.check == "health-vanished"]


def test_a_gpu_gone_after_the_run_is_critical_and_named(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = json.loads((root / "health" / "14" / "node2-before.json").read_text())
    gpu = before["sources"]["nvidia_smi"]["gpus"][0]
    _edit(root, "14", "node2", "after", lambda d: d["sources"]["nvidia_smi"].update(gpus=[]))
    report = _report("14", root)
    [f] = _vanished(report, "node2")
    assert f.status == Nagios.CRITICAL and report.status == Nagios.CRITICAL
    assert "GPU 0" in f.message and gpu["pci_bus_id"] in f.message and gpu["uuid"] in f.message
    assert f.details["evidence"]["uuid"] == gpu["uuid"]
    plan = drain.plan(report, {n.name: n for n in parse_nodes_text(CLEAN_NODES.read_text())})
    [action] = [a for a in plan.actions if a.action == "drain"]
    assert action.node == "node2" and action.reason is not None
    assert action.reason.startswith("gpuclust:vanished:gpu0-")
    assert all(_vanished(report, n) == [] for n in ("node1", "node3", "node4"))


def test_nvidia_smi_that_answered_before_and_not_after_is_critical(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _edit(root, "14", "node4", "after", lambda d: d["sources"].update(
        nvidia_smi={"status": "unavailable", "reason": "nvidia-smi -q -x: timed out after 30s"}))
    [f] = _vanished(_report("14", root), "node4")
    assert f.status == Nagios.CRITICAL and f.details["detail"] == "nvidia-smi" and "timed out" in f.message


def test_a_nic_and_an_ib_port_gone_after_the_run_are_critical(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    port = {"device": "mlx5_0", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 200.0,
            "width": "4X", "link_layer": "InfiniBand", "counters": {"symbol_error": 0}}
    for phase, ports in (("before", [port, {**port, "port": 2}]), ("after", [port])):
        _edit(root, "14", "node1", phase, lambda d, ports=ports: d["sources"].update(
            infiniband={"status": "ok", "ports": ports}))
    _edit(root, "14", "node1", "after", lambda d: d["sources"]["net"]["interfaces"].pop("eth0"))
    _edit(root, "14", "node1", "after", lambda d: d["sources"]["net"]["interfaces"].pop("slab111n1"))  # virtual
    found = {f.details["detail"]: f for f in _vanished(_report("14", root), "node1")}
    assert sorted(found) == ["ib-mlx5_0-2", "nic-eth0"]
    assert all(f.status == Nagios.CRITICAL for f in found.values())
    assert "mlx5_0 port 2" in found["ib-mlx5_0-2"].message and "NIC eth0" in found["nic-eth0"].message


def test_a_snapshot_that_records_physical_nics_judges_only_those(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _edit(root, "14", "node1", "before", lambda d: d["sources"]["net"].update(physical=["ifb0"]))
    _edit(root, "14", "node1", "after", lambda d: [d["sources"]["net"]["interfaces"].pop(i) for i in ("eth0", "ifb0")])
    assert [f.details["detail"] for f in _vanished(_report("14", root), "node1")] == ["nic-ifb0"]


def test_an_invalid_after_source_is_unknown_never_vanished(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    _edit(root, "14", "node1", "after", lambda d: d["sources"]["nvidia_smi"].update(gpus="none"))
    report = _report("14", root)
    assert _vanished(report, "node1") == [] and report.nodes["node1"].status == Nagios.UNKNOWN


# ---- terminal-safe output --------------------------------------------------------------------------------


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\r\nOK: fake line\x9b31m\u202eevil\udcff"


def test_node_text_reaches_the_terminal_escaped_and_json_raw(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    event = {"time": None, "pci": "0000:01:00", "code": 79, "message": f"GPU has fallen off the bus{ESCAPES}",
             "line": "x", "timed": False}
    _edit(root, "14", "node3", "after", lambda d: d["sources"]["xid"].update(events=[event]))
    conf = tmp_path / "site.conf"
    conf.write_text((TESTS / "slurm_lab" / "lab-site.conf").read_text().replace(
        "/var/lib/gpuclust-lab/site-state/results", str(root)))
    text = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--job", "14"], obj=AppContext())
    assert text.exit_code == 2, text.output
    first = text.output.split("\n", 1)[0]
    assert first.startswith("acceptance: CRITICAL - node3: [health-xid] node3: Xid 79")
    assert "\\x1b]0;owned\\x07" in first and "\\x0d\\x0aOK: fake line" in first and "\\u202e" in first
    for line in text.output.splitlines():
        assert terminal_safe(line) == line, line
    js = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--job", "14", "--json"],
                            obj=AppContext())
    doc = json.loads(js.output)
    messages = [f["message"] for n in doc["nodes"].values() for f in n["reasons"] if f["check"] == "health-xid"]
    assert messages and messages[0].endswith("\x1b[31mred\r\nOK: fake line\x9b31m\u202eevil\udcff")


def test_terminal_safe_keeps_clean_text() -> None:
    clean = "node3: GPU 0 (00000000:01:00.0) row remap pending; 4 µs, 日本, tab-free | ok"
    assert terminal_safe(clean) == clean
    assert terminal_safe("a\tb\x00c\x7f") == "a\\x09b\\x00c\\x7f"
    assert terminal_safe(terminal_safe(ESCAPES)) == terminal_safe(ESCAPES)
