"""MIG and shared GPUs in `audit partition` (issue 44 part 4): each node's GPU layout as part of the partition's
homogeneity, gpushare's layout warnings as named findings, and Slurm's MIG types against the MIG devices the
node reported in an acceptance health snapshot (the real netdata A100 recording, tests/data/accept/health)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from gpuclust.accept.health.collect import ok
from gpuclust.accept.health.sources.nvidia_smi import parse_nvidia_smi_xml
from gpuclust.audit import mig
from gpuclust.audit.findings import Finding
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.parse import parse_gres
from gpuclust.slurm.records import NodeRecord

HEALTH = Path(__file__).resolve().parents[1] / "data" / "accept" / "health"
A100_40 = HEALTH / "nvidia-smi-a100-sxm4-40gb-mig-v11.xml"  # two 3g.20gb instances, 19968 MiB each


def node(name: str, gres: str) -> NodeRecord:
    return NodeRecord(name, "IDLE", gres=tuple(parse_gres(gres)))


def by(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def test_whole_gpu_partition_gets_no_new_finding() -> None:
    assert mig.check_layout([node(f"node{i}", "gpu:h100:4") for i in range(1, 5)]) == []


def test_uniform_mig_partition_is_ok_with_its_layout() -> None:
    found = mig.check_layout([node("mig1", "gpu:1g.10gb:4,gpu:3g.40gb:1"), node("mig2", "gpu:3g.40gb:1,gpu:1g.10gb:4")])
    assert [(f.check, f.severity, f.nodes) for f in found] == [("homogeneity.mig", Nagios.OK, "mig[1-2]")]
    assert found[0].message == "GPU layout MIG 1g.10gb:4,3g.40gb:1 on all 2 nodes"


def test_mig_mode_differs_is_critical_and_names_each_layout_folded() -> None:
    nodes = [*(node(f"gpu{i}", "gpu:h100:4") for i in range(1, 4)), node("gpu4", "gpu:1g.10gb:4,gpu:3g.40gb:1")]
    found = by(mig.check_layout(nodes), "homogeneity.mig")
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.CRITICAL, "gpu4")]
    assert found[0].message == ("MIG mode differs: gpu4 has MIG 1g.10gb:4,3g.40gb:1 (MIG slices), but gpu[1-3] "
                                "(majority) have 4 whole GPU(s) (whole GPUs)")
    assert found[0].details["layouts"] == {"4 whole GPU(s)": "gpu[1-3]", "MIG 1g.10gb:4,3g.40gb:1": "gpu4"}


def test_same_mode_other_slices_is_a_warning() -> None:
    nodes = [node("a1", "gpu:1g.10gb:7"), node("a2", "gpu:1g.10gb:7"), node("a3", "gpu:3g.40gb:2")]
    found = by(mig.check_layout(nodes), "homogeneity.mig")
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.WARNING, "a3")]
    assert found[0].message.startswith("GPU layout differs: a3 has MIG 3g.40gb:2 (MIG slices), but a[1-2]")


def test_shard_node_layout_and_shards_differing() -> None:
    found = mig.check_layout([node("node6", "gpu:h100:2,shard:16")])
    assert [(f.check, f.severity, f.message) for f in found] == [
        ("homogeneity.mig", Nagios.OK, "GPU layout 2 whole GPU(s); 16 shards on all 1 nodes")]
    found = by(mig.check_layout([node("s1", "gpu:h100:2,shard:16"), node("s2", "gpu:h100:2,shard:8"),
                                 node("s3", "gpu:h100:2,shard:16")]), "homogeneity.mig")
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.WARNING, "s2")]


def test_layout_warnings_become_named_findings() -> None:
    nodes = [node("m1", "gpu:a100:1,gpu:3g.40gb:2"), node("m2", "gpu:a100:1,gpu:3g.40gb:2"),
             node("m3", "gpu:5g.50gb:1"), node("m4", "gpu:9g.90gb:1"), node("m5", "shard:8")]
    found = mig.check_layout(nodes)
    named = {(f.check, f.nodes) for f in found if f.check.startswith("gres.")}
    assert named == {("gres.mixed_mig_and_full_gpus", "m[1-2]"), ("gres.unknown_mig_profile", "m3"),
                     ("gres.mig_slice_exceeds_card", "m4"), ("gres.shards_without_gpu", "m5")}
    assert all(f.severity == Nagios.WARNING for f in found if f.check.startswith("gres."))
    mixed = by(found, "gres.mixed_mig_and_full_gpus")[0]
    assert mixed.message.startswith("1 whole GPU(s) beside MIG slices 3g.40gb:2 (a job asking for an untyped")


def _snapshot(results: Path, job: str, name: str, phase: str, time: str, xml: str) -> None:
    d = results / "health" / job
    d.mkdir(parents=True, exist_ok=True)
    snap = {"schema": 1, "node": name, "phase": phase, "job_id": job, "time": time,
            "sources": {"nvidia_smi": ok(**parse_nvidia_smi_xml(xml).as_dict())}}
    (d / f"{name}-{phase}.json").write_text(json.dumps(snap))


def test_mig_report_matches_slurm(tmp_path: Path) -> None:
    _snapshot(tmp_path, "12", "a100n", "after", "2026-05-01T12:00:00+00:00", A100_40.read_text())
    found = mig.check_mig_report(str(tmp_path), [node("a100n", "gpu:3g.20gb:2")])
    assert [(f.check, f.severity, f.nodes) for f in found] == [("gres.mig_report", Nagios.OK, "a100n")]
    assert "match the MIG devices nvidia-smi reported" in found[0].message


def test_mig_report_differs_from_slurm_is_a_warning(tmp_path: Path) -> None:
    _snapshot(tmp_path, "12", "a100n", "before", "2026-05-01T11:00:00+00:00", A100_40.read_text())
    _snapshot(tmp_path, "12", "a100n", "after", "2026-05-01T12:00:00+00:00", A100_40.read_text())
    found = mig.check_mig_report(str(tmp_path), [node("a100n", "gpu:1g.10gb:4,gpu:3g.40gb:1")])
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.WARNING, "a100n")]
    msg = found[0].message
    assert "Slurm's Gres MIG 1g.10gb:4,3g.40gb:1 (MIG devices 10 GB x4, 40 GB x1, 0 whole GPU(s))" in msg
    assert "nvidia-smi on a100n (acceptance job 12, after snapshot 2026-05-01T12:00:00+00:00) reports MIG " \
           "devices 20 GB x2 and 0 whole GPU(s)" in msg
    assert found[0].job_id == "12"


def test_latest_snapshot_decides(tmp_path: Path) -> None:
    """An older job's snapshot that matched does not hide a newer one that does not."""
    _snapshot(tmp_path, "9", "a100n", "after", "2026-04-01T12:00:00+00:00",
              A100_40.read_text().replace("<total>19968 MiB</total>", "<total>9856 MiB</total>"))
    _snapshot(tmp_path, "12", "a100n", "after", "2026-05-01T12:00:00+00:00", A100_40.read_text())
    found = mig.check_mig_report(str(tmp_path), [node("a100n", "gpu:1g.10gb:2")])
    assert [(f.severity, f.job_id) for f in found] == [(Nagios.WARNING, "12")]


def test_mig_report_not_asked(tmp_path: Path) -> None:
    nodes = [node("node5", "gpu:1g.10gb:4,gpu:3g.40gb:1"), node("node1", "gpu:h100:4")]
    found = mig.check_mig_report(str(tmp_path), nodes)
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.OK, "node5")]
    assert found[0].message.startswith("MIG devices not asked of the node (no acceptance health snapshot with "
                                       "nvidia-smi under ")
    found = mig.check_mig_report(None, nodes)
    assert found[0].message.startswith("MIG devices not asked of the node (no results_dir)")
    # a node with neither MIG slices in Slurm nor a MIG report: nothing to say
    assert mig.check_mig_report(str(tmp_path), [node("node1", "gpu:h100:4")]) == []


def test_mig_report_unreadable_snapshot_is_not_asked(tmp_path: Path) -> None:
    d = tmp_path / "health" / "3"
    d.mkdir(parents=True)
    (d / "node5-after.json").write_text("{not json")
    found = mig.check_mig_report(str(tmp_path), [node("node5", "gpu:1g.10gb:4")])
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.OK, "node5")] and "not asked" in found[0].message


def test_site_named_mig_type_is_not_compared(tmp_path: Path) -> None:
    _snapshot(tmp_path, "12", "m1", "after", "2026-05-01T12:00:00+00:00", A100_40.read_text())
    found = mig.check_mig_report(str(tmp_path), [node("m1", "gpu:h100:1,gpu:3g.20gb:1")])
    # one whole GPU and one slice in Slurm, two slices and no whole GPU reported
    assert [f.severity for f in found] == [Nagios.WARNING]


def test_mig_only_nodes() -> None:
    nodes = [node("n1", "gpu:h100:4"), node("n5", "gpu:1g.10gb:4,gpu:3g.40gb:1"), node("n7", "gpu:a100:1,gpu:1g.5gb:2")]
    assert mig.mig_only_nodes(nodes) == ["n5"]


# ---- the whole audit, replaying the lab's real output (tests/data/audit/mig: node5 MIG, node6 shards) ----------

def _audit(partition: str, source: str = "auto", results_dir: str = "", snap_edit=None):  # type: ignore[no-untyped-def]
    from gpuclust.audit import audit_snapshot
    from gpuclust.audit.collect import collect_snapshot
    from tests.unit.audit_replay import replay

    snap = collect_snapshot(replay("mig"), source)
    if snap_edit:
        snap_edit(snap)
    return audit_snapshot(snap, partition, None, results_dir=results_dir,
                          now=datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc))


def test_lab_mig_and_shared_partitions_from_both_node_sources() -> None:
    for source in ("text", "json"):
        mig_part = _audit("mig", source)
        found = by(mig_part.findings, "homogeneity.mig")
        assert [(f.severity, f.nodes, f.message) for f in found] == [
            (Nagios.OK, "node5", "GPU layout MIG 1g.10gb:4,3g.40gb:1 on all 1 nodes")], source
        report = by(mig_part.findings, "gres.mig_report")
        assert [(f.severity, f.nodes) for f in report] == [(Nagios.OK, "node5")]
        assert "not asked" in report[0].message
        shared = by(_audit("shared", source).findings, "homogeneity.mig")
        assert [(f.severity, f.message) for f in shared] == [
            (Nagios.OK, "GPU layout 2 whole GPU(s); 16 shards on all 1 nodes")]
        assert not [f for f in _audit("gpu", source).findings if f.check in ("homogeneity.mig", "gres.mig_report")]


def test_lab_partition_mixing_mig_and_whole_gpu_nodes_is_critical() -> None:
    """The recorded nodes, in a partition that spans node[1-5] (the partition record edited, the nodes as Slurm
    printed them)."""
    import dataclasses

    def widen(snap):  # type: ignore[no-untyped-def]
        snap.partitions["gpu"] = dataclasses.replace(snap.partitions["gpu"],
                                                     nodes=("node1", "node2", "node3", "node4", "node5"))

    report = _audit("gpu", "text", snap_edit=widen)
    found = by(report.findings, "homogeneity.mig")
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.CRITICAL, "node5")]
    assert found[0].message == ("MIG mode differs: node5 has MIG 1g.10gb:4,3g.40gb:1 (MIG slices), but node[1-4] "
                                "(majority) have 4 whole GPU(s) (whole GPUs)")
    assert report.status == Nagios.CRITICAL


def test_lab_mig_node_acceptance_skips_all_reduce_and_compares_the_report(tmp_path: Path) -> None:
    """An acceptance snapshot of node5 whose nvidia-smi is the netdata A100 (two 3g.20gb): it does not match the
    lab's Gres (four 1g.10gb, one 3g.40gb): a warning naming both; all_reduce is not asked of node5."""
    _snapshot(tmp_path, "31", "node5", "after", "2026-12-07T11:00:00+00:00", A100_40.read_text())
    report = _audit("mig", results_dir=str(tmp_path))
    mig_report = by(report.findings, "gres.mig_report")
    assert [(f.severity, f.nodes, f.job_id) for f in mig_report] == [(Nagios.WARNING, "node5", "31")]
    assert "reports MIG devices 20 GB x2" in mig_report[0].message
    all_reduce = by(report.findings, "acceptance.all_reduce")
    assert [(f.severity, f.nodes) for f in all_reduce] == [(Nagios.OK, "node5")]
    assert all_reduce[0].message.startswith("all_reduce not run: the nodes' GPUs are MIG slices")


def test_site_gpu_share_overrides_reach_the_layout() -> None:
    """[gpu_type NAME] gpu_share (config.gpu_type_shares): a site's own slice name is a MIG slice in the audit, as
    in the report and the policy; without it the same Gres reads as whole GPUs."""
    from fractions import Fraction

    from gpuclust.config import parse_config

    site = parse_config("[site]\ncluster_name = c\n[gpu_type tiny]\ngpu_share = 1/7\n")
    nodes = [node("m1", "gpu:tiny:7"), node("w1", "gpu:h100:4")]
    found = by(mig.check_layout(nodes, site.gpu_type_shares), "homogeneity.mig")
    assert [(f.severity, f.nodes) for f in found] == [(Nagios.CRITICAL, "m1")] or \
        [(f.severity, f.nodes) for f in found] == [(Nagios.CRITICAL, "w1")]
    assert "MIG tiny:7 (MIG slices)" in found[0].message
    assert mig.mig_only_nodes(nodes, site.gpu_type_shares) == ["m1"]
    assert mig.mig_only_nodes(nodes) == []  # (without the site's share: 7 whole GPUs of type tiny)
    assert mig.layouts(nodes, {"tiny": Fraction(1, 7)})["m1"].gpu_equivalents == 1
    # an untyped GPU on that node reads the site's share too (gpushare.NodeLayout.untyped_share)
    assert mig.layouts(nodes, site.gpu_type_shares)["m1"].untyped_share() == (Fraction(1, 7), None)


def test_audit_partition_passes_the_site_shares() -> None:
    """The whole audit of the lab's recorded shard partition with a site that calls its h100 half a GPU
    ([gpu_type h100] gpu_share = 1/2): the layout reads it as slices, as the report would."""
    from gpuclust.audit import audit_snapshot
    from gpuclust.audit.collect import collect_snapshot
    from gpuclust.config import parse_config
    from tests.unit.audit_replay import replay

    site = parse_config("[site]\ncluster_name = lab\n[gpu_type h100]\ngpu_share = 1/2\n")
    snap = collect_snapshot(replay("mig"), "text")
    report = audit_snapshot(snap, "shared", site, now=datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc))
    found = by(report.findings, "homogeneity.mig")
    assert [(f.severity, f.message) for f in found] == [
        (Nagios.OK, "GPU layout MIG h100:2; 16 shards on all 1 nodes")]
