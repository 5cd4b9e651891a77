"""`accept report`: gates, outliers, declared vs detected GPUs, baselines, drift, exit codes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.exitcodes import Nagios

CONF = """
[site]
cluster_name = lab
results_dir = /nonexistent
[partition gpu]
gpu_type = h100
gpus_per_node = 4
expect_busbw_gbps = 0.1
busbw_tolerance = 50%
busbw_min_size = 4M
expect_staging_mbps = 20
expect_checkpoint_write_mbps = 20
expect_checkpoint_read_mbps = 20
expect_restore_seconds = 60
storage_tolerance = 50%
"""
CONFIG = parse_config(CONF, "test.conf")
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
NODES = ("node1", "node2", "node3", "node4")


def rank(job: str, kind: str, i: int, node: str, **kw: object) -> R.RankRecord:
    base = dict(job_id=job, kind=kind, rank=i, local_rank=0, world_size=4, hostname=node, node=node,
                versions=R.Versions(torch="2.13.0+cpu"), cuda_visible_devices="0", gpus_bound=1, devices_found=4,
                device_glob="/lab/dev/nvidia[0-9]*", backend="gloo", device="cpu")
    base.update(kw)
    return R.RankRecord(**base)  # type: ignore[arg-type]


def allreduce(job: str, busbw: float, finished: datetime = T0, ranks: tuple[R.RankRecord, ...] | None = None,
              node_gres: dict[str, str] | None = None, wrong: int = 0) -> R.JobResult:
    jr = R.JobRecord(job_id=job, kind="allreduce", cluster="lab", partition="gpu", nodes=NODES,
                     started=finished - timedelta(minutes=1), finished=finished, passed=wrong == 0, world_size=4,
                     backend="gloo", declared_gres={n: "gpu:h100:1(IDX:0)" for n in NODES},
                     node_gres=node_gres or {n: "gpu:h100:4" for n in NODES})
    sweep = tuple(R.SweepRecord(job_id=job, kind="allreduce", size=s, count=s // 4, dtype="float32", iters=5,
                                warmup=1, time_us=1.0, time_us_max=1.0, algbw_gbps=busbw / 1.5, busbw_gbps=busbw,
                                wrong=wrong if s == 1 << 20 else 0, world_size=4)
                  for s in (1 << 20, 4 << 20, 16 << 20))
    ranks = ranks or tuple(rank(job, "allreduce", i, n) for i, n in enumerate(NODES))
    return R.JobResult("", jr, ranks, sweep)


def scan_of(*results: R.JobResult) -> R.ResultScan:
    return R.ResultScan(list(results), [])


def test_healthy_allreduce_is_ok() -> None:
    report = rep.evaluate(scan_of(allreduce("1", 0.4)), CONFIG)
    assert report.status == Nagios.OK
    assert all(v.status == Nagios.OK for v in report.nodes.values())


def test_busbw_gate_uses_large_sizes_not_the_average() -> None:
    res = allreduce("1", 0.4)
    # tiny sizes are slow (as always), large ones fine: OK. The average over all sizes would fail.
    sweep = (replace(res.sweep[0], busbw_gbps=0.0001), *res.sweep[1:])
    assert rep.evaluate(scan_of(replace(res, sweep=sweep)), CONFIG).status == Nagios.OK
    slow = rep.evaluate(scan_of(allreduce("2", 0.04)), CONFIG)
    assert slow.status == Nagios.CRITICAL
    assert rep.nodes_with(slow, "gate", Nagios.CRITICAL) == list(NODES)
    assert "below 0.050" in slow.nodes["node1"].findings[0].message


def test_wrong_elements_are_critical() -> None:
    report = rep.evaluate(scan_of(allreduce("1", 0.4, wrong=3)), CONFIG)
    assert report.status == Nagios.CRITICAL and rep.nodes_with(report, "run") == list(NODES)


def test_small_sweep_is_not_gated_but_warned() -> None:
    res = allreduce("1", 0.4)
    report = rep.evaluate(scan_of(replace(res, sweep=res.sweep[:1])), CONFIG)
    assert report.status == Nagios.WARNING and "busbw not gated" in report.findings[0].message


def test_gres_declared_vs_detected() -> None:
    # node2: Slurm declares 2 GPUs, the node has 4 device files -> CRITICAL on node2 only
    gres = {n: "gpu:h100:4" for n in NODES} | {"node2": "gpu:h100:2"}
    report = rep.evaluate(scan_of(allreduce("1", 0.4, node_gres=gres)), CONFIG)
    assert rep.nodes_with(report, "gres", Nagios.CRITICAL) == ["node2"]
    messages = " ".join(f.message for f in report.nodes["node2"].findings)
    assert "has 4 GPU devices" in messages and "expects 4 GPUs per node" in messages


def test_gres_allocation_vs_binding_and_torch() -> None:
    ranks = tuple(rank("1", "allreduce", i, n) for i, n in enumerate(NODES))
    ranks = (replace(ranks[0], cuda_visible_devices=None, gpus_bound=None), *ranks[1:2],
             replace(ranks[2], backend="nccl", gpus_seen=0, gpus_bound=1), ranks[3])
    report = rep.evaluate(scan_of(allreduce("1", 0.4, ranks=ranks)), CONFIG)
    assert rep.nodes_with(report, "gres", Nagios.CRITICAL) == ["node1", "node3"]
    assert "nothing bound" in report.nodes["node1"].findings[0].message
    assert "torch sees 0 GPUs of the 1" in report.nodes["node3"].findings[0].message


def test_version_drift_and_fleet() -> None:
    old = allreduce("1", 0.4, T0)
    new_ranks = tuple(rank("2", "allreduce", i, n, versions=R.Versions(torch="2.14.0" if n == "node4" else "2.13.0+cpu"))
                      for i, n in enumerate(NODES))
    new = allreduce("2", 0.4, T0 + timedelta(days=1), ranks=new_ranks)
    report = rep.evaluate(scan_of(old, new), CONFIG)
    assert report.status == Nagios.WARNING
    assert rep.nodes_with(report, "drift") == ["node4"]
    texts = [f.message for f in report.nodes["node4"].findings]
    assert any("2.13.0+cpu -> 2.14.0 (since job 1)" in t for t in texts)
    assert any("the job's other nodes run 2.13.0+cpu" in t for t in texts)


def test_baseline_needs_history_then_warns() -> None:
    history = [allreduce(str(i), 0.4 + 0.01 * i, T0 + timedelta(hours=i)) for i in range(3)]
    low = allreduce("9", 0.15, T0 + timedelta(days=1))  # passes the 0.05 gate, far below its own 0.41
    report = rep.evaluate(scan_of(*history, low), CONFIG)
    assert report.status == Nagios.WARNING and rep.nodes_with(report, "baseline") == list(NODES)
    assert rep.evaluate(scan_of(*history[:2], low), CONFIG).status == Nagios.OK  # 2 runs: no baseline yet


def test_selection_latest_per_kind_by_default() -> None:
    bad = allreduce("1", 0.01, T0)
    good = allreduce("2", 0.4, T0 + timedelta(hours=1))
    assert rep.evaluate(scan_of(bad, good), CONFIG).status == Nagios.OK
    assert rep.evaluate(scan_of(bad, good), CONFIG, job="1").status == Nagios.CRITICAL
    # --since judges both runs; each node's state is its latest run (job 2 passed), job 1's failure is history
    both = rep.evaluate(scan_of(bad, good), CONFIG, since=T0 - timedelta(days=1))
    assert both.status == Nagios.OK and all(v.history for v in both.nodes.values())


def test_nothing_is_unknown_and_problems_are_unknown() -> None:
    assert rep.evaluate(scan_of(), CONFIG).status == Nagios.UNKNOWN
    scan = R.ResultScan([allreduce("1", 0.4)], [R.Problem("x/allreduce-5.jsonl", 3, "not valid JSON")])
    report = rep.evaluate(scan, CONFIG)
    assert report.status == Nagios.UNKNOWN and report.problems == ["x/allreduce-5.jsonl:3: not valid JSON"]
    assert rep.evaluate(scan, CONFIG, job="1").status == Nagios.OK  # --job: other files' problems don't count


def test_lab_pairwise_with_throttled_node3(data_dir: Path) -> None:
    """Recorded on the lab: tbf 50mbit on node3's eth0 (job 14), then the qdisc removed (job 15)."""
    scan = R.scan_results(data_dir / "accept" / "lab_results")
    report = rep.evaluate(scan, CONFIG, job="14")
    assert rep.nodes_with(report, "outlier", Nagios.CRITICAL) == ["node3"]
    assert rep.nodes_with(report, "outlier") == ["node3"]
    assert report.status == Nagios.CRITICAL and report.nodes["node1"].status == Nagios.OK
    cleared = rep.evaluate(scan, CONFIG, job="15")
    assert cleared.status == Nagios.OK and rep.nodes_with(cleared, "outlier") == []


def test_lab_allreduce_and_gres_mismatch(data_dir: Path) -> None:
    """Job 12: 4 nodes, healthy. Job 17: node2 reconfigured to Gres=gpu:h100:2 with 4 device files."""
    scan = R.scan_results(data_dir / "accept" / "lab_results")
    assert not scan.problems
    assert rep.evaluate(scan, CONFIG, job="12").status == Nagios.OK
    report = rep.evaluate(scan, CONFIG, job="17")
    assert rep.nodes_with(report, "gres") == ["node2"] and report.status == Nagios.CRITICAL


def test_lab_storage_gates(data_dir: Path) -> None:
    scan = R.scan_results(data_dir / "accept" / "lab_results", job="16")
    [res] = scan.jobs
    assert {r.metric for r in res.storage} >= {"staging", "checkpoint_write", "checkpoint_read", "dcp_save"}
    read = next(r for r in res.storage if r.metric == "checkpoint_read")
    assert read.write_node != read.read_node
    strict = parse_config(CONF.replace("expect_checkpoint_read_mbps = 20", "expect_checkpoint_read_mbps = 100000"))
    report = rep.evaluate(scan, strict, job="16")
    assert any("checkpoint_read" in f.message and f.check == "gate" for f in report.nodes[read.read_node].findings)


def test_cli_report_exit_codes_and_json(tmp_path: Path, data_dir: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(data_dir / "accept" / "lab_results", results)
    conf = tmp_path / "site.conf"
    conf.write_text(CONF.replace("/nonexistent", str(results)))
    runner = CliRunner()
    out = runner.invoke(cli, ["--config", str(conf), "accept", "report", "--job", "14", "--json"], obj=AppContext())
    assert out.exit_code == 2, out.output
    doc = json.loads(out.output)
    assert doc["status"] == "CRITICAL" and doc["nodes"]["node3"]["status"] == "CRITICAL"
    assert any(r["check"] == "outlier" for r in doc["nodes"]["node3"]["reasons"])
    out = runner.invoke(cli, ["--config", str(conf), "accept", "report", "--job", "12345"], obj=AppContext())
    assert out.exit_code == 3 and "no acceptance results" in out.output
    (results / "allreduce-99.jsonl").write_text("{broken\n")
    out = runner.invoke(cli, ["--config", str(conf), "accept", "report", "--job", "99"], obj=AppContext())
    assert out.exit_code == 3 and "allreduce-99.jsonl:1" in out.output
    out = runner.invoke(cli, ["--config", str(conf), "accept", "report", "--since", "nonsense"], obj=AppContext())
    assert out.exit_code == 3  # issue 15: a usage error in a Nagios check is UNKNOWN (was 2, read as CRITICAL)
    assert "UNKNOWN - " in out.stdout and "'--since'" in out.output


@pytest.mark.parametrize("since", ["24h", "7d", "2026-12-01T00:00"])
def test_cli_since_forms(tmp_path: Path, since: str) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(CONF.replace("/nonexistent", str(tmp_path)))
    R.write_result(tmp_path, allreduce("1", 0.4, datetime.now(timezone.utc)))
    out = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--since", since], obj=AppContext())
    assert out.exit_code == 0, out.output


def staging(job: str, mbps: dict[str, float], finished: datetime, failed: tuple[str, ...] = ()) -> R.JobResult:
    nodes = tuple(mbps)
    jr = R.JobRecord(job_id=job, kind="storage", cluster="lab", partition="gpu", nodes=nodes,
                     started=finished - timedelta(minutes=1), finished=finished, passed=not failed,
                     world_size=len(nodes), backend="gloo", failed_nodes=failed)
    recs = tuple(R.StorageRecord(job_id=job, kind="storage", metric="staging", node=n, bytes=1 << 30,
                                 seconds=(1 << 30) / (v * 1e6), mbps=v) for n, v in mbps.items())
    return R.JobResult("", jr, storage=recs)


def baseline_of(*last: dict[str, float]) -> rep.Report:
    """Three runs at 200 MB/s on every node, then the given runs; the report on the last one."""
    runs = [staging(str(i), dict.fromkeys(NODES, 200.0), T0 + timedelta(hours=i)) for i in range(3)]
    runs += [staging(str(10 + i), m, T0 + timedelta(days=1, hours=i)) for i, m in enumerate(last)]
    return rep.evaluate(scan_of(*runs), CONFIG)


def test_baseline_a_whole_run_drop_is_the_runs_not_each_nodes() -> None:
    """Every node 60% below its own history (a loaded login node, a busy file system): one run-level
    warning, no node named for it."""
    report = baseline_of(dict.fromkeys(NODES, 80.0))
    assert rep.nodes_with(report, "baseline") == [] and all(v.status == Nagios.OK for v in report.nodes.values())
    [run_level] = [f for f in report.findings if f.check == "baseline"]
    assert run_level.status == Nagios.WARNING and not run_level.nodes
    assert "the run's median 80.000 over 4 nodes is 60% below the median 200.000 of its last 3 runs" in run_level.message
    assert report.status == Nagios.WARNING


def test_baseline_names_the_node_that_fell_further_than_the_run() -> None:
    alone = baseline_of(dict.fromkeys(NODES, 200.0) | {"node3": 60.0})
    assert rep.nodes_with(alone, "baseline") == ["node3"] and not [f for f in alone.findings if not f.nodes]
    assert "70% below node3's own baseline 200.000" in alone.nodes["node3"].findings[0].message
    both = baseline_of(dict.fromkeys(NODES, 80.0) | {"node3": 20.0})  # run -60%, node3 -90%: 4x its peers' drop
    assert rep.nodes_with(both, "baseline") == ["node3"]
    assert "the whole run being 60% below its own" in both.nodes["node3"].findings[0].message
    assert [f.check for f in both.findings if not f.nodes] == ["baseline"]
    within = baseline_of(dict.fromkeys(NODES, 80.0) | {"node3": 50.0})  # -75%, but within 50% of the run's drop
    assert rep.nodes_with(within, "baseline") == []


def test_baseline_two_nodes_have_no_peers_to_compare() -> None:
    """Under PEER_MIN_NODES nodes with a baseline, each node is judged against its own history alone."""
    pair = ("node1", "node2")
    runs = [staging(str(i), dict.fromkeys(pair, 200.0), T0 + timedelta(hours=i)) for i in range(3)]
    report = rep.evaluate(scan_of(*runs, staging("9", dict.fromkeys(pair, 80.0), T0 + timedelta(days=1))), CONFIG)
    assert rep.nodes_with(report, "baseline") == ["node1", "node2"]


def test_baseline_leaves_out_the_runs_that_named_the_node() -> None:
    """node3 was named at fault in three runs (20 MB/s): its baseline is its three good runs (200), not a
    median dragged down to 110 by the runs that already failed it."""
    good = dict.fromkeys(NODES, 200.0)
    figures = [good, good | {"node3": 20.0}, good | {"node3": 20.0}, good | {"node3": 20.0}, good, good]
    runs = [staging(str(i), m, T0 + timedelta(hours=i), failed=("node3",) if m["node3"] < 100 else ())
            for i, m in enumerate(figures)]
    last = staging("9", good | {"node3": 90.0}, T0 + timedelta(days=1))
    report = rep.evaluate(scan_of(*runs, last), CONFIG)
    assert rep.nodes_with(report, "baseline") == ["node3"]
    assert "55% below node3's own baseline 200.000 (median of its last 3 runs)" in \
        report.nodes["node3"].findings[0].message
