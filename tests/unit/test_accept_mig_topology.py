"""Acceptance's gres and topology checks on a MIG node count physical cards (issue 44).

tests/data/accept/mig/storage-1.jsonl was written by a real 2-node storage job on the lab (`migfin`, Slurm 22.05)
on a partition of node5 (Gres=gpu:1g.10gb:4,gpu:3g.40gb:1: one H100 in MIG mode) and node6
(gpu:h100:2,shard:h100:16), with ACCEPT_GPU_DEVICE_GLOB=STATE/dev/nvidia[0-1]: two device files on both nodes (the
lab's nodes share one /dev). Its health snapshots (health/1/) hold the lab's nvidia-smi stand-in: one GPU.
node6 declares 2 GPUs and has 2 device files. node5's Slurm counts 5 MIG instances of one card, and its 2 device
files are one too many; a real MIG node has /dev/nvidia0 (its instances are /dev/nvidia-caps/*), which the tests
give it by editing devices_found to 1."""

from __future__ import annotations

import json
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept import topology
from gpuclust.config import parse_config
from gpuclust.slurm.gpushare import node_layout

BASE = "[site]\ncluster_name = migfin\nresults_dir = /x\n[partition migshared]\nnics_per_node = 1\n"
GLOB = "/var/lib/gpuclust-lab/migfin/dev/nvidia[0-1]"
NODE5 = "gpu:1g.10gb:4,gpu:3g.40gb:1"


@pytest.fixture
def rdir(tmp_path: Path, data_dir: Path) -> Path:
    out = tmp_path / "results"
    shutil.copytree(data_dir / "accept" / "mig", out)
    return out


def _devices(rdir: Path, node: str, count: int) -> None:
    """The node's rank as a real node's /dev would have it."""
    path = rdir / "storage-1.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for line in lines:
        if line.get("type") == "rank" and line.get("node") == node:
            line["devices_found"] = count
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _report(rdir: Path, extra: str = "") -> rep.Report:
    return rep.evaluate(R.scan_results(rdir), parse_config(BASE + extra, "t.conf"), job="1")


def _findings(report: rep.Report, check: str) -> dict[str, list[str]]:
    return {n: [f"{f.status.name} {f.message}" for f in v.findings if f.check == check]
            for n, v in report.nodes.items()}


def test_physical_gpus_of_a_layout() -> None:
    assert node_layout(NODE5).physical_gpus == 1
    assert node_layout("gpu:3g.40gb:4").physical_gpus == 2  # 12/7 GPU-equivalents: two cards
    assert node_layout("gpu:h100:2,shard:16").physical_gpus == 2
    assert node_layout("gpu:a100:1,gpu:3g.40gb:2").physical_gpus == 2
    assert node_layout("gpu:5g.50gb:1").physical_gpus is None  # no such profile: unknown, not guessed
    assert node_layout("gpu:odd:2", {"odd": Fraction(1, 2)}).physical_gpus == 1


def test_recorded_mig_node_with_one_device_file_too_many_is_named_in_cards(rdir: Path) -> None:
    report = _report(rdir)
    assert _findings(report, "gres") == {"node5": [
        f"CRITICAL Slurm declares 5 GPUs on node5 ({NODE5}), MIG instances of 1 GPU-equivalent on 1 physical GPU "
        f"(nvidia-smi, the job's before snapshot), but the node has 2 GPU devices ({GLOB})"], "node6": []}
    [finding] = [f for f in report.nodes["node5"].findings if f.check == "gres"]
    assert finding.status.name == "CRITICAL"


def test_mig_node_with_its_card_is_no_mismatch(rdir: Path) -> None:
    """Before: `Slurm declares 5 GPUs on node5 (...) but the node has 1 GPU devices`, CRITICAL."""
    _devices(rdir, "node5", 1)
    report = _report(rdir, "gpus_per_node = 5\n")
    assert _findings(report, "gres") == {"node5": [], "node6": [
        "CRITICAL Slurm declares gpu:h100:2,shard:h100:16 on node6; partition migshared expects 5 GPUs per node"]}
    assert _findings(report, "topology")["node5"] == []
    row = report.as_dict()["topology"]["1"]["node5"]
    assert row["match"] is True and row["seen"]["gpus_per_node"] == 1 and row["seen"]["gpus_from"] == "device_files"
    assert row["seen"]["mig"] == {"gres": NODE5, "gres_gpus": 5, "gpu_equivalents": 1.0, "physical_gpus": 1,
                                  "physical_from": "nvidia_smi"}
    # node6 is not MIG: its 2 GPUs against the 5 announced, as before
    assert _findings(report, "topology")["node6"] == ["CRITICAL topology on node6: 2 GPUs seen (device_files), "
                                                      "5 announced"]
    assert "mig" not in report.as_dict()["topology"]["1"]["node6"]["seen"]


def test_without_a_snapshot_the_cards_are_the_gpu_equivalents_rounded_up(rdir: Path) -> None:
    shutil.rmtree(rdir / "health")
    report = _report(rdir)
    assert _findings(report, "gres")["node5"] == [
        f"CRITICAL Slurm declares 5 GPUs on node5 ({NODE5}), MIG instances of 1 GPU-equivalent, so 1 physical GPU, "
        f"but the node has 2 GPU devices ({GLOB})"]
    _devices(rdir, "node5", 1)
    report = _report(rdir, "gpus_per_node = 5\n")
    assert _findings(report, "gres")["node5"] == [] and _findings(report, "topology")["node5"] == []
    assert report.as_dict()["topology"]["1"]["node5"]["seen"]["mig"]["physical_from"] == "gpu_equivalents"


def test_topology_mismatch_on_a_mig_node_says_how_it_counted(rdir: Path) -> None:
    report = _report(rdir, "gpus_per_node = 5\n")  # the recorded 2 device files
    assert _findings(report, "topology")["node5"] == [
        f"CRITICAL topology on node5: 2 physical GPUs seen (device_files), 1 announced (partition's 5 GPUs per node "
        f"= Slurm's 5 MIG instances ({NODE5}), 1 GPU-equivalent on 1 physical GPU (nvidia-smi, the job's before "
        "snapshot))"]
    # an announcement in cards is read as cards
    _devices(rdir, "node5", 1)
    assert _findings(_report(rdir, "gpus_per_node = 1\n"), "topology")["node5"] == []
    assert _findings(_report(rdir, "gpus_per_node = 2\n"), "topology")["node5"] == [
        f"CRITICAL topology on node5: 1 physical GPU seen (device_files), 2 announced (read as physical GPUs; "
        f"Slurm declares 5 MIG instances ({NODE5}))"]


def test_unknown_slice_share_is_a_warning_not_a_mismatch(rdir: Path) -> None:
    path = rdir / "storage-1.jsonl"
    path.write_text(path.read_text().replace("gpu:3g.40gb:1\"", "gpu:5g.50gb:1\""))
    shutil.rmtree(rdir / "health")
    report = _report(rdir, "gpus_per_node = 5\n")
    gres = "gpu:1g.10gb:4,gpu:5g.50gb:1"
    assert _findings(report, "gres")["node5"] == [
        f"WARNING Slurm declares 5 GPUs on node5 ({gres}), MIG instances of unknown GPU-equivalents: its physical "
        f"GPUs unknown; the node's 2 GPU devices ({GLOB}) not compared"]
    assert _findings(report, "topology")["node5"] == [
        f"WARNING topology on node5: physical GPUs not compared (2 seen (device_files); partition's 5 GPUs per node "
        f"= Slurm's 5 MIG instances ({gres}), unknown GPU-equivalents: its physical GPUs unknown)"]


def test_whole_gpu_jobs_read_no_snapshot(rdir: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mig_cards reads the job's snapshots only where a node has MIG slices."""
    called: list[str] = []
    monkeypatch.setattr(topology, "snapshot_gpus", lambda root, job: called.append(job) or {})
    [whole] = R.load_results(data_dir / "accept" / "topology")
    assert topology.mig_cards(whole, str(data_dir / "accept" / "topology")) == {} and called == []
    [mig] = R.load_results(rdir)
    assert set(topology.mig_cards(mig, str(rdir))) == {"node5"} and called == ["1"]


def test_mig_device_model_against_the_node_types(rdir: Path) -> None:
    def model_warnings(model: str) -> list[str]:
        path = rdir / "storage-1.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for line in lines:
            if line.get("type") == "rank" and line.get("node") == "node5":
                line["gpu_model"] = model
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return [m for m in _findings(_report(rdir), "gres")["node5"] if m.startswith("WARNING")]

    assert model_warnings("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == []  # one of the node's two types
    assert model_warnings("NVIDIA A100-SXM4-40GB MIG 2g.20gb") == [
        "WARNING rank 0 on node5 runs on a NVIDIA A100-SXM4-40GB MIG 2g.20gb, GRES type is 1g.10gb,3g.40gb"]
