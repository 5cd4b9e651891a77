"""The snapshot collector: fixture sysfs/proc trees and fake binaries through the GPUCLUST_HEALTH_* overrides."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path

from gpuclust.accept.health.collect import (
    HealthPaths,
    checked_sources,
    collect_infiniband,
    collect_net,
    collect_nvidia_smi,
    collect_qdisc,
    collect_snmp,
    collect_xid,
    load_snapshots,
    snapshot,
    write_snapshot,
)
from gpuclust.accept.health.sources import SNAPSHOT_SOURCES

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "accept" / "health"


def fake(tmp: Path, name: str, body: str) -> str:
    """A fake binary: a shell script (the collector itself never uses a shell)."""
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def fixture_paths(tmp: Path) -> HealthPaths:
    return HealthPaths(
        sysfs=str(DATA / "sysfs"), proc=str(DATA / "proc"),
        nvidia_smi=fake(tmp, "nvidia-smi", f"cat '{DATA / 'nvidia-smi-a100-sxm4-v12.xml'}'"),
        tc=fake(tmp, "tc", f"cat '{DATA / 'tc-s-j-qdisc-cake.json'}'"),
        journalctl=fake(tmp, "journalctl", f"cat '{DATA / 'xid-syslog-iso-gpud.txt'}'"),
        dmesg=fake(tmp, "dmesg", "exit 1"),
    )


def test_snapshot_from_fixture_trees(tmp_path: Path) -> None:
    snap = snapshot("after", "42", paths=fixture_paths(tmp_path), node="node1",
                    since=datetime(2025, 5, 27, 4, 0, tzinfo=timezone.utc))
    src = snap["sources"]
    # every snapshot source reads its recorded sample (a new source records one: sources/__init__.py step 4),
    # and what it read fits the data shape it declares
    assert {k: v["status"] for k, v in src.items()} == dict.fromkeys(SNAPSHOT_SOURCES, "ok")
    assert {k: v.get("invalid") for k, v in checked_sources(src).items()} == dict.fromkeys(SNAPSHOT_SOURCES)
    assert src["net"]["interfaces"]["ens10f0"]["rx_dropped"] == 29220
    assert src["snmp"]["tcp"]["RetransSegs"] == 227 and "TCPLostRetransmit" in src["snmp"]["tcp_ext"]
    assert src["qdisc"]["format"] == "json"
    assert src["nvidia_smi"]["gpus"][0]["product_name"] == "NVIDIA A100-SXM4-80GB"
    assert [e["code"] for e in src["xid"]["events"]] == [79]
    json.dumps(snap)  # all of it JSON


def test_xid_window_drops_events_before_since(tmp_path: Path) -> None:
    paths = fixture_paths(tmp_path)
    xid = collect_xid(paths, datetime(2025, 6, 1, tzinfo=timezone.utc))
    assert xid["status"] == "ok" and xid["events"] == []


def test_xid_falls_back_to_dmesg(tmp_path: Path) -> None:
    paths = HealthPaths(journalctl=str(tmp_path / "no-journalctl"),
                        dmesg=fake(tmp_path, "dmesg", f"cat '{DATA / 'xid-dmesg-plain-bumblebee.txt'}'"))
    xid = collect_xid(paths, None)
    assert xid["command"] == "dmesg" and [e["timed"] for e in xid["events"]] == [False, False, False]


def test_nvidia_smi_truncated_xml_is_unavailable(tmp_path: Path) -> None:
    half = len((DATA / "nvidia-smi-a100-sxm4-v12.xml").read_bytes()) // 2
    smi = fake(tmp_path, "nvidia-smi", f"head -c {half} '{DATA / 'nvidia-smi-a100-sxm4-v12.xml'}'")
    src = collect_nvidia_smi(HealthPaths(nvidia_smi=smi), 10)
    assert src["status"] == "unavailable" and src["reason"].startswith("parse error: nvidia-smi -q -x: line")


def test_nvidia_smi_that_hangs_is_unavailable(tmp_path: Path) -> None:
    smi = fake(tmp_path, "nvidia-smi", "sleep 30")
    src = collect_nvidia_smi(HealthPaths(nvidia_smi=smi), 1)
    assert src["status"] == "unavailable" and "timed out after 1s" in src["reason"]


def test_nvidia_smi_nonzero_exit_is_unavailable(tmp_path: Path) -> None:
    smi = fake(tmp_path, "nvidia-smi", "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.' >&2; exit 9")
    src = collect_nvidia_smi(HealthPaths(nvidia_smi=smi), 10)
    assert src["status"] == "unavailable" and "exited 9: NVIDIA-SMI has failed" in src["reason"]


def test_nvidia_smi_not_installed_is_unavailable(tmp_path: Path) -> None:
    src = collect_nvidia_smi(HealthPaths(nvidia_smi=str(tmp_path / "nvidia-smi")), 10)
    assert src == {"status": "unavailable", "reason": f"{tmp_path / 'nvidia-smi'}: not found on PATH"}


def test_missing_sysfs_and_proc_are_unavailable(tmp_path: Path) -> None:
    paths = HealthPaths(sysfs=str(tmp_path / "sys"), proc=str(tmp_path / "proc"))
    for src in (collect_net(paths), collect_infiniband(paths), collect_snmp(paths)):
        assert src["status"] == "unavailable" and "not found" in src["reason"] and str(tmp_path) in src["reason"]


def test_tc_text_fallback(tmp_path: Path) -> None:
    tc = fake(tmp_path, "tc", f"case \"$2\" in -j) echo 'Option \"-j\" is unknown' >&2; exit 1;; esac; cat '{DATA / 'tc-s-qdisc-show.txt'}'")
    src = collect_qdisc(HealthPaths(tc=tc))
    assert src["status"] == "ok" and src["format"] == "text" and len(src["qdiscs"]) == 7


def test_write_and_load_snapshots(tmp_path: Path) -> None:
    paths = fixture_paths(tmp_path)
    out = tmp_path / "out"
    for phase in ("before", "after"):
        write_snapshot(out, snapshot(phase, "42", paths=paths, node="node1"))
    (out / "node2-before.json").write_text("{not json", encoding="utf-8")
    (out / "node3-after.json").write_text(json.dumps({"schema": 1, "node": "node9", "phase": "after", "sources": {}}),
                                          encoding="utf-8")
    snaps, problems = load_snapshots(out)
    assert set(snaps) == {"node1"} and set(snaps["node1"]) == {"before", "after"}
    assert [(Path(pr.file).name, pr.line) for pr in problems] == [("node2-before.json", 1), ("node3-after.json", None)]
    assert "not JSON" in problems[0].message and "node9" in problems[1].message
    _, problems = load_snapshots(tmp_path / "nowhere")
    assert problems[0].message == "snapshot directory not found"


def test_cli_subprocess_with_env_overrides(tmp_path: Path) -> None:
    paths = fixture_paths(tmp_path)
    # every path of the fixture tree, as the variables HealthPaths.from_env reads
    env = {**os.environ, **{f"GPUCLUST_HEALTH_{f.name.upper()}": str(getattr(paths, f.name)) for f in fields(paths)},
           "SLURMD_NODENAME": "gpu-n07", "PYTHONPATH": str(REPO)}
    out = tmp_path / "snaps"
    proc = subprocess.run([sys.executable, "-m", "gpuclust.accept.health", "snapshot", "--phase", "after",
                           "--job", "1234", "--out", str(out), "--since", "2025-05-27T04:00:00Z"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    path = out / "gpu-n07-after.json"
    assert proc.stdout.strip() == str(path)
    snap = json.loads(path.read_text(encoding="utf-8"))
    assert (snap["schema"], snap["node"], snap["phase"], snap["job_id"]) == (1, "gpu-n07", "after", "1234")
    assert snap["time"].endswith("+00:00")
    assert {name: s["status"] for name, s in snap["sources"].items()} == dict.fromkeys(SNAPSHOT_SOURCES, "ok")
    assert snap["sources"]["xid"]["since"] == "2025-05-27T04:00:00+00:00"


def test_cli_bad_since_is_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuclust.accept.health", "snapshot", "--phase", "before",
                           "--job", "1", "--out", str(tmp_path), "--since", "yesterday"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120,
                          check=False)
    assert proc.returncode == 2 and "ISO 8601" in proc.stderr
