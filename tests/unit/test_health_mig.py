"""MIG in the health snapshots (issue 44 part 5): `nvidia-smi -q -x` of MIG-enabled GPUs, read from two real
recordings (tests/data/accept/health/SOURCES.md): the MIG mode, the MIG devices and their ECC counts; an
instance's ECC judged as a GPU's; a pending MIG mode change; `gpuclust health check` on a MIG node."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuclust.accept.health.actions import action_for
from gpuclust.accept.health.collect import checked_source, ok
from gpuclust.accept.health.kit import HealthPaths
from gpuclust.accept.health.node import check_node
from gpuclust.accept.health.rules import judge_node
from gpuclust.accept.health.sources.nvidia_smi import parse_nvidia_smi_xml, visible_devices
from gpuclust.config.health import HealthConfig
from gpuclust.exitcodes import Nagios

DATA = Path(__file__).resolve().parents[1] / "data" / "accept" / "health"
A100_40 = "nvidia-smi-a100-sxm4-40gb-mig-v11.xml"  # netdata's recording: two 3g.20gb instances
A100_80 = "nvidia-smi-a100-sxm4-v12.xml"  # telegraf's recording: four 1g.20gb instances
CFG = HealthConfig()


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def nv(xml: str) -> dict[str, Any]:
    return ok(**parse_nvidia_smi_xml(xml).as_dict())


def snap(phase: str, xml: str) -> dict[str, Any]:
    return {"schema": 1, "node": "node5", "phase": phase, "job_id": "7", "time": "2026-05-01T12:00:00+00:00",
            "sources": {"nvidia_smi": nv(xml)}}


def test_netdata_a100_40gb_recording_has_two_3g_20gb_instances() -> None:
    log = parse_nvidia_smi_xml(read(A100_40))
    assert log.driver_version == "510.47.03" and len(log.gpus) == 1
    gpu = log.gpus[0]
    assert (gpu.mig_mode_current, gpu.mig_mode_pending) == ("Enabled", "Enabled")
    assert [(m.index, m.gpu_instance_id, m.compute_instance_id) for m in gpu.mig_devices] == [(0, 1, 0), (1, 2, 0)]
    first = gpu.mig_devices[0]
    assert first.multiprocessor_count == 42 and first.shared["copy_engine_count"] == 3
    assert first.memory_total_mib == 19968 and first.memory_gb == 20  # the profile's "20gb"
    assert first.ecc_volatile.uncorrectable == 0 and first.ecc_volatile.raw == {"sram_uncorrectable": 0}
    assert first.ecc_aggregate.uncorrectable is None  # this driver prints no aggregate count per instance
    # under MIG the GPU's own volatile ECC reads N/A; its aggregate remains
    assert gpu.ecc_volatile.uncorrectable is None and gpu.ecc_aggregate.uncorrectable == 0


def test_telegraf_a100_80gb_recording_has_four_instances() -> None:
    gpu = parse_nvidia_smi_xml(read(A100_80)).gpus[0]
    assert [m.gpu_instance_id for m in gpu.mig_devices] == [3, 4, 5, 6]
    assert {(m.multiprocessor_count, m.memory_gb) for m in gpu.mig_devices} == {(14, 20)}


def test_gpus_without_mig_read_as_before() -> None:
    gpu = parse_nvidia_smi_xml(read("nvidia-smi-a10g.xml")).gpus[0]
    assert (gpu.mig_mode_current, gpu.mig_mode_pending, gpu.mig_devices) == (None, None, ())
    assert gpu.as_dict()["mig_devices"] == []


def test_mig_data_fits_the_snapshot_shape_and_survives_json() -> None:
    for name in (A100_40, A100_80, "nvidia-smi-tesla-t4.xml"):
        entry = json.loads(json.dumps(nv(read(name))))
        assert checked_source("nvidia_smi", entry) == entry
    # a file whose instance count is a string is not judged (UNKNOWN), as for any other field
    entry = json.loads(json.dumps(nv(read(A100_40))))
    entry["gpus"][0]["mig_devices"][0]["ecc_volatile"]["uncorrectable"] = "3"
    checked = checked_source("nvidia_smi", entry)
    assert checked["status"] == "unavailable"
    assert checked["invalid"]["field"] == "nvidia_smi.gpus[0].mig_devices[0].ecc_volatile.uncorrectable"


def test_healthy_mig_pair_has_no_finding() -> None:
    findings = judge_node("node5", snap("before", read(A100_40)), snap("after", read(A100_40)), CFG)
    assert [f for f in findings if f.severity in (Nagios.WARNING, Nagios.CRITICAL)] == []


def _instance_ecc(xml: str, instance: int, count: int) -> str:
    """The recording with one instance's volatile SRAM uncorrectable count set (the others unchanged)."""
    parts = xml.split("<mig_device>")
    parts[instance + 1] = parts[instance + 1].replace("<sram_uncorrectable>0</sram_uncorrectable>",
                                                      f"<sram_uncorrectable>{count}</sram_uncorrectable>", 1)
    return "<mig_device>".join(parts)


def test_uncorrectable_ecc_on_an_instance_is_critical_like_a_gpus() -> None:
    before = snap("before", read(A100_40))
    after = snap("after", _instance_ecc(read(A100_40), 1, 2))
    ecc = [f for f in judge_node("node5", before, after, CFG) if f.cls == "ecc"]
    assert [(f.severity, f.detail) for f in ecc] == [(Nagios.CRITICAL, "gi2-ci0-uncorrectable")]
    assert ecc[0].evidence == {"gpu": 0, "pci": "00000000:00:04.0", "gpu_instance": 2, "compute_instance": 0,
                               "before": 0, "after": 2}
    assert "MIG instance GI 2 CI 0 uncorrectable volatile ECC errors 0 -> 2 during the run" in ecc[0].message
    assert action_for("ecc", ecc[0].detail) == "RESET_GPU"


def test_instance_counter_that_went_back_is_a_reset_not_a_failure() -> None:
    before = snap("before", _instance_ecc(read(A100_40), 0, 5))
    after = snap("after", read(A100_40))
    findings = judge_node("node5", before, after, CFG)
    assert not [f for f in findings if f.cls == "ecc"]
    assert [(f.cls, f.severity, f.detail) for f in findings if f.cls == "reset"] == [
        ("reset", Nagios.UNKNOWN, "gpu0-gi1-ci0-ecc-uncorrectable")]


def test_new_instance_after_the_run_has_no_delta_judged() -> None:
    """An instance that did not exist before (recreated, new ids) has no before count: nothing to compare."""
    before = snap("before", read(A100_40).replace("<gpu_instance_id>2<", "<gpu_instance_id>9<"))
    after = snap("after", _instance_ecc(read(A100_40), 1, 2))
    assert not [f for f in judge_node("node5", before, after, CFG) if f.cls == "ecc"]


def test_pending_mig_mode_change_is_a_warning() -> None:
    xml = read(A100_80).replace("<pending_mig>Enabled</pending_mig>", "<pending_mig>Disabled</pending_mig>")
    findings = [f for f in judge_node("node5", snap("before", xml), snap("after", xml), CFG) if f.cls == "mig"]
    assert [(f.severity, f.detail) for f in findings] == [(Nagios.WARNING, "gpu0-pending-disabled")]
    assert "MIG mode Enabled, Disabled pending" in findings[0].message
    assert findings[0].evidence["current"] == "Enabled" and findings[0].evidence["pending"] == "Disabled"
    assert action_for("mig", findings[0].detail) == "RESET_GPU"


def test_visible_devices_counts_mig_devices_as_the_gres_does() -> None:
    assert visible_devices(nv(read(A100_40))) == 2
    assert visible_devices(nv(read(A100_80))) == 4
    assert visible_devices(nv(read("nvidia-smi-a10g.xml"))) == 1
    none_yet = read(A100_40).split("<mig_devices>")[0] + "<mig_devices>None</mig_devices>" + \
        read(A100_40).split("</mig_devices>")[1]
    assert visible_devices(nv(none_yet)) == 0  # MIG on, no instance created: nothing to run on


def _node_check(tmp_path: Path, xml: str, gres: int) -> Any:
    doc = tmp_path / "nvidia-smi.xml"
    doc.write_text(xml)
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f'#!/bin/sh\nexec cat "{doc}"\n')
    tool.chmod(0o755)
    journal = tmp_path / "journalctl"
    journal.write_text("#!/bin/sh\nexit 0\n")
    journal.chmod(0o755)
    (tmp_path / "proc" / "sys" / "kernel" / "random").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("b1\n")
    paths = HealthPaths(sysfs=str(tmp_path / "nosys"), proc=str(tmp_path / "proc"), nvidia_smi=str(tool),
                        journalctl=str(journal), dmesg=str(tmp_path / "no-dmesg"))
    return check_node("node5", HealthConfig(check_nvidia_smi_timeout_s=5.0), paths=paths,
                      state_dir=tmp_path / "state", gres_gpus=gres,
                      now=datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc))


def test_health_check_reads_a_mig_node_and_counts_its_instances(tmp_path: Path) -> None:
    """Gres=gpu:3g.20gb:2 on the netdata A100: two devices, as declared; no gres finding, the check passes."""
    result = _node_check(tmp_path, read(A100_40), gres=2)
    assert result.state == "pass" and result.gpus_seen == 2, result.as_dict()
    assert not result.unchecked


def test_health_check_mig_node_missing_an_instance_is_a_gres_finding(tmp_path: Path) -> None:
    result = _node_check(tmp_path, read(A100_40), gres=3)
    gres = [f for f in result.findings if f.cls == "gres"]
    assert result.state == "fail" and [(f.severity, f.detail) for f in gres] == [(Nagios.CRITICAL, "count")]
    assert "nvidia-smi lists 2 GPU(s) and MIG device(s), the node's GRES declares 3" in gres[0].message


def test_health_check_keeps_the_instance_counts_for_the_next_check(tmp_path: Path) -> None:
    first = _node_check(tmp_path, read(A100_40), gres=2)
    saved = first.next_state["snapshot"]["nvidia_smi"]["gpus"][0]["mig_devices"]
    assert [m["gpu_instance_id"] for m in saved] == [1, 2]
