"""The announced topology (partition keys) against what a job recorded: tests/data/accept/topology/allreduce-8.jsonl
was written by a real 2-node allreduce job on the lab (each node: 4 GPU device files, one veth eth0 at
10000 Mb/s read by the ethtool ioctl because the lab nodes share the host's /sys)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept import topology
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError

BASE = "[site]\ncluster_name = gpuclust\nresults_dir = /x\n[partition gpu]\ngpus_per_node = 4\n"


@pytest.fixture
def rdir(tmp_path: Path, data_dir: Path) -> Path:
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(data_dir / "accept" / "topology" / "allreduce-8.jsonl", out)
    return out


def _report(rdir: Path, extra: str) -> rep.Report:
    config = parse_config(BASE + extra, "t.conf")
    return rep.evaluate(R.scan_results(rdir), config, job="8")


def _topology_findings(report: rep.Report) -> dict[str, list[str]]:
    return {n: [f"{f.status.name} {f.message}" for f in v.findings if f.check == "topology"]
            for n, v in report.nodes.items()}


def test_recorded_job_matches_the_lab_announcement(rdir: Path) -> None:
    report = _report(rdir, "nics_per_node = 1\nnic_speed_mbps = 10000\n")
    assert _topology_findings(report) == {"node1": [], "node2": []}
    table = report.as_dict()["topology"]["8"]
    for node in ("node1", "node2"):
        assert table[node]["match"] is True and table[node]["mismatches"] == []
        seen = table[node]["seen"]
        assert seen["gpus_per_node"] == 4 and seen["gpus_from"] == "device_files"
        assert seen["nic_speeds_mbps"] == {"eth0": 10000} and seen["nic_speed_source"] == "ethtool"
        assert table[node]["announced"] == {"gpus_per_node": 4, "nics_per_node": 1, "nic_speed_mbps": 10000}


@pytest.mark.parametrize("extra, text", [
    ("nic_speed_mbps = 25000\n", "NIC speed eth0 10000 Mb/s, 25000 Mb/s announced"),
    ("nics_per_node = 2\n", "1 NICs seen (eth0), 2 announced"),
    ("nics_per_node = 1\nnic_names = ib*\n", "0 NICs seen (none), 1 announced"),
])
def test_mismatch_is_critical_on_every_node(rdir: Path, extra: str, text: str) -> None:
    report = _report(rdir, extra)
    for node in ("node1", "node2"):
        assert _topology_findings(report)[node] == [f"CRITICAL topology on {node}: {text}"]
        assert report.as_dict()["topology"]["8"][node]["match"] is False
    assert report.status.name == "CRITICAL"


def test_gpus_per_node_against_the_device_files(rdir: Path) -> None:
    report = rep.evaluate(R.scan_results(rdir), parse_config(BASE.replace("= 4", "= 8"), "t.conf"), job="8")
    assert "CRITICAL topology on node1: 4 GPUs seen (device_files), 8 announced" in _topology_findings(report)["node1"]


def test_nvlink_announced_but_no_nvidia_smi_is_a_warning(rdir: Path) -> None:
    report = _report(rdir, "nvlink = yes\n")
    assert _topology_findings(report)["node1"] == [
        "WARNING NVLink announced for node1 but not verifiable there (no nvidia-smi topo -m)"]


def test_older_results_without_topology_are_not_judged(tmp_path: Path, data_dir: Path) -> None:
    shutil.copy(data_dir / "accept" / "lab_results" / "allreduce-12.jsonl", tmp_path)
    report = rep.evaluate(R.scan_results(tmp_path), parse_config(BASE + "nic_speed_mbps = 10000\n", "t.conf"),
                          job="12")
    assert all(not v for v in _topology_findings(report).values())
    assert all(row["match"] is None for row in report.topology["12"].values())


def test_no_announcement_no_comparison(rdir: Path) -> None:
    config = parse_config("[site]\ncluster_name = g\nresults_dir = /x\n[partition gpu]\n", "t.conf")
    assert rep.evaluate(R.scan_results(rdir), config, job="8").topology == {}


def test_config_keys_are_validated_with_file_and_line() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(BASE + "nic_speed_mbps = 0\nnvlink = sometimes\nnics_per_node = -1\n", "site.conf")
    text = "\n".join(str(p) for p in err.value.problems)
    assert "site.conf:6:" in text and "nic_speed_mbps" in text
    assert "site.conf:7:" in text and "nvlink" in text
    assert "site.conf:8:" in text and "nics_per_node" in text


# hand-made matrices in the layout of `nvidia-smi topo -m` (not recorded: no GPU machine here)
NV = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-63\nGPU1\tNV18\t X \t0-63\n"
PCI = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-63\nGPU1\tSYS\t X \t0-63\n"


def test_nvlink_read_from_the_topology_matrix() -> None:
    assert topology.nvlink_in_topo(NV) is True
    assert topology.nvlink_in_topo(PCI) is False
    assert topology.nvlink_in_topo(None) is None and topology.nvlink_in_topo("No devices were found\n") is None


def test_nic_probe_on_this_host() -> None:
    nics, source = topology.nic_speeds()
    assert "lo" not in nics and source in ("sysfs", "ethtool", "sysfs+ethtool", "none")
    assert all(s is None or (isinstance(s, int) and s > 0) for s in nics.values())
    assert topology.ethtool_speed("lo") is None
