"""Audit checks, acceptance freshness, baseline diff and the CLI, on real recorded Slurm output
(tests/data/audit, replayed) and result files written with gpuclust.accept.results."""

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

import gpuclust.audit.collect as col
from gpuclust.accept.results import JobRecord, JobResult, RankRecord, Versions, write_result
from gpuclust.audit import audit_partitions, audit_snapshot
from gpuclust.audit.render import render_report
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.audit_replay import DATA, replay

SITE_CONF = str(DATA / "site-lab.conf")
NOW = datetime(2026, 12, 2, 13, 11, 9, tzinfo=timezone.utc)  # 2h after the recorded drains
NODES = ["node1", "node2", "node3", "node4"]






def write_job(results_dir, job_id, kind, nodes, finished, passed=True, failed_nodes=(), reasons=(),
              torch_by_node=None, cluster="audit"):
    job = JobRecord(job_id=job_id, kind=kind, cluster=cluster, partition="gpu", nodes=tuple(nodes),
                    started=finished - timedelta(minutes=2), finished=finished, passed=passed,
                    failed_nodes=tuple(failed_nodes), reasons=tuple(reasons))
    ranks = tuple(
        RankRecord(job_id=job_id, kind=kind, rank=i, local_rank=0, world_size=len(nodes), hostname=n, node=n,
                   versions=Versions(torch=(torch_by_node or {}).get(n, "2.13.0")))
        for i, n in enumerate(nodes)
    )
    write_result(results_dir, JobResult("", job, ranks))


def fresh_results(results_dir, now=NOW):
    write_job(results_dir, "101", "allreduce", NODES, now - timedelta(days=1))
    write_job(results_dir, "102", "storage", NODES, now - timedelta(days=1))


def findings(report, check=None, severity=None):
    return [f for f in report.findings if (check is None or f.check == check)
            and (severity is None or f.severity == severity)]


def audit(scenario, tmp_path, *, source="auto", results=True, **kw):
    rdir = tmp_path / "results"
    if results:
        fresh_results(rdir)
    return audit_partitions(replay(scenario), ["gpu"], load_config(SITE_CONF), source=source, now=NOW,
                            results_dir=str(rdir), **kw)[0]


# ---- scenarios --------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["text", "json"])
def test_clean_partition_is_ok(tmp_path, source):
    report = audit("clean", tmp_path, source=source)
    assert report.status == Nagios.OK, render_report(report)
    assert {f.check for f in report.findings} >= {
        "node.state", "homogeneity.gres", "homogeneity.cpus", "homogeneity.memory", "homogeneity.features",
        "homogeneity.version", "config.gpus", "limits.maxtime", "limits.gpu", "limits.accounts",
        "acceptance.all_reduce", "acceptance.storage", "acceptance.versions", "partition.state"}
    assert findings(report, "homogeneity.gres")[0].nodes == "node[1-4]"


@pytest.mark.parametrize("source", ["text", "json"])
def test_degraded_partition(tmp_path, source):
    report = audit("degraded", tmp_path, source=source)
    assert report.status == Nagios.CRITICAL
    down = findings(report, "node.down")
    assert [(f.severity, f.nodes) for f in down] == [(Nagios.CRITICAL, "node3")]
    assert "'PSU failure', set by root 2h 0m ago" in down[0].message
    drain = findings(report, "node.drain")
    assert [(f.severity, f.nodes) for f in drain] == [(Nagios.WARNING, "node2")]
    assert "GPU 3 Xid 79 fallen off the bus, RMA ticket 4711" in drain[0].message  # full, not 20 chars
    assert drain[0].details["reason_user"] == "root"
    gres = findings(report, "homogeneity.gres")
    assert [(f.severity, f.nodes) for f in gres] == [(Nagios.CRITICAL, "node4")]
    assert "gpu:h100:2 on node4, but node[1-3] (majority) have gpu:h100:4" in gres[0].message
    assert [f.nodes for f in findings(report, "config.gpus", Nagios.CRITICAL)] == ["node4"]
    assert findings(report, "limits.maxtime")[0].severity == Nagios.WARNING
    assert findings(report, "limits.oversubscribe")[0].severity == Nagios.WARNING
    gpu = {(f.details["column"], f.details["tres"]): f for f in findings(report, "limits.gpu")}
    assert set(gpu) == {("GrpTRES", "gres/gpu"), ("MaxTRESPU", "gres/gpu:h100")}
    assert all(f.severity == Nagios.WARNING for f in gpu.values())
    assert "QOS gpu-normal: GrpTRES gres/gpu=999 is above the 14 GPUs" in gpu[("GrpTRES", "gres/gpu")].message
    typed = [f.message for f in findings(report, "limits.typed_tres")]
    assert any("lacks gres/gpu:h100: typed usage" in m for m in typed)
    assert any("QOS gpu-normal: MaxTRESPU gres/gpu:h100=64 is not enforced" in m for m in typed)
    accounts = [f for f in findings(report, "limits.accounts")]
    assert [f.details["account"] for f in accounts] == ["ops"] and accounts[0].severity == Nagios.WARNING
    used = findings(report, "node.gres_used")[0]
    assert used.severity == Nagios.OK and used.details["used"] == 2 and used.nodes == "node1"


def test_text_and_json_sources_agree(tmp_path):
    def key(r):
        return sorted((f.check, f.severity, f.nodes, f.message) for f in r.findings)
    assert key(audit("degraded", tmp_path / "a", source="text")) == key(audit("degraded", tmp_path / "b", source="json"))


def test_mostly_drained_is_critical(tmp_path):
    report = audit("mostly_drained", tmp_path)
    drain = findings(report, "node.drain")
    assert [(f.severity, f.nodes) for f in drain] == [(Nagios.CRITICAL, "node[1-3]")]
    assert "3 of 4 nodes unavailable" in drain[0].message
    assert "maintenance window: firmware update" in drain[0].message


def test_no_such_partition_is_unknown(tmp_path):
    report = audit_partitions(replay("clean"), ["nope"], None, now=NOW)[0]
    assert report.status == Nagios.UNKNOWN and "no partition 'nope'" in report.findings[0].message


def test_sacctmgr_down_is_unknown_for_limits_only(tmp_path):
    client = replay("degraded")
    client.fail("sacctmgr", col.QOS_ARGS, 1, "sacctmgr: error: Problem talking to the database")
    report = audit_partitions(client, ["gpu"], load_config(SITE_CONF), now=NOW, results_dir=str(tmp_path))[0]
    assert findings(report, "limits.accounting")[0].severity == Nagios.UNKNOWN
    assert report.status == Nagios.CRITICAL  # node3 is still reported: a known failure beats not knowing
    assert findings(report, "node.down")


def test_no_site_config_still_audits_slurm(tmp_path):
    report = audit_partitions(replay("clean"), ["gpu"], None, now=NOW)[0]
    # no max_time to hold MaxTime=UNLIMITED against: a GPU partition without any time limit is a warning
    assert report.status == Nagios.WARNING
    assert [f.check for f in report.findings if f.severity != Nagios.OK] == ["limits.maxtime"]


# ---- acceptance ---------------------------------------------------------------------------------------

def test_acceptance_store_missing(tmp_path):
    report = audit("clean", tmp_path, results=False)
    store = findings(report, "acceptance.store")
    assert store[0].severity == Nagios.WARNING and store[0].nodes == "node[1-4]"
    assert "no acceptance results store" in store[0].message


def test_acceptance_stale_never_failed_and_drift(tmp_path):
    rdir = tmp_path / "results"
    write_job(rdir, "201", "allreduce", ["node1", "node2", "node3"], NOW - timedelta(days=10))
    write_job(rdir, "202", "allreduce", ["node1", "node2"], NOW - timedelta(days=1),
              torch_by_node={"node2": "2.12.0"})
    # after node3's last pass: a job that named node3 as the culprit
    write_job(rdir, "203", "allreduce", ["node2", "node3"], NOW - timedelta(hours=5), passed=False,
              failed_nodes=["node3"], reasons=["wrong results on node3"], torch_by_node={"node2": "2.12.0"})
    write_job(rdir, "204", "storage", NODES, NOW - timedelta(hours=3), passed=False, reasons=["timeout"],
              torch_by_node={"node2": "2.12.0"})
    write_job(rdir, "205", "allreduce", ["node4"], NOW - timedelta(hours=1), cluster="elsewhere")
    report = audit_partitions(replay("clean"), ["gpu"], load_config(SITE_CONF), now=NOW,
                              results_dir=str(rdir))[0]
    ar = findings(report, "acceptance.all_reduce")
    assert {(f.severity, f.nodes) for f in ar} == {
        (Nagios.WARNING, "node4"),  # never passed here (205 is another cluster's)
        (Nagios.WARNING, "node3"),  # stale: 10 days
        (Nagios.OK, "node[1-2]"),
    }
    assert any("last passing all_reduce 10d 0h ago (stale after 7d)" in f.message for f in ar)
    failures = {(f.severity, f.nodes): f for f in findings(report, "acceptance.failures")}
    assert failures[(Nagios.CRITICAL, "node3")].details["jobs"] == ["203"]
    assert "wrong results on node3" in failures[(Nagios.CRITICAL, "node3")].message
    # storage job 204 failed without a culprit, after the storage passes (none): warning for each node
    assert {k for k in failures if k[0] == Nagios.WARNING} == {(Nagios.WARNING, n) for n in NODES}
    drift = findings(report, "acceptance.versions", Nagios.WARNING)
    assert [(f.nodes, f.details["value"]) for f in drift] == [("node2", "2.12.0")]
    assert report.status == Nagios.CRITICAL


def test_acceptance_bad_result_lines(tmp_path):
    rdir = tmp_path / "results"
    fresh_results(rdir)
    (rdir / "allreduce-999.jsonl").write_text("{not json\n")
    report = audit_partitions(replay("clean"), ["gpu"], load_config(SITE_CONF), now=NOW,
                              results_dir=str(rdir))[0]
    store = findings(report, "acceptance.store")
    assert store[0].severity == Nagios.WARNING and "allreduce-999.jsonl:1" in store[0].message
    assert findings(report, "acceptance.all_reduce")[0].severity == Nagios.OK  # good files still count


# ---- baseline -----------------------------------------------------------------------------------------

def test_baseline_diff(tmp_path):
    base = audit("clean", tmp_path / "a")
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(base.as_dict()))
    same = audit("clean", tmp_path / "b", baseline_path=str(path))
    assert findings(same, "baseline")[0].severity == Nagios.OK
    changed = audit("degraded", tmp_path / "c", baseline_path=str(path))
    diff = findings(changed, "baseline.changed")
    assert [(f.severity, f.nodes) for f in diff] == [(Nagios.WARNING, "node4")]
    assert "gres 'gpu:h100:4' -> 'gpu:h100:2'" in diff[0].message
    # an --all output works as a baseline too; a node missing from it is "added", an extra one "removed"
    doc = base.as_dict()
    doc["nodes"]["node9"] = doc["nodes"].pop("node1")
    path.write_text(json.dumps({"status": "OK", "partitions": [doc]}))
    moved = audit("clean", tmp_path / "d", baseline_path=str(path))
    assert [f.nodes for f in findings(moved, "baseline.added")] == ["node1"]
    assert [f.nodes for f in findings(moved, "baseline.removed")] == ["node9"]
    # a partition the baseline does not hold: all its nodes are new
    other = audit_partitions(replay("clean"), ["debug"], None, now=NOW, baseline_path=str(path),
                             skip=("acceptance",))[0]
    assert [(f.severity, f.nodes) for f in findings(other, "baseline.added")] == [(Nagios.WARNING, "node[1-4]")]


def test_baseline_unreadable_is_unknown(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("nope")
    report = audit("clean", tmp_path, baseline_path=str(bad))
    assert findings(report, "baseline")[0].severity == Nagios.UNKNOWN
    assert report.status == Nagios.UNKNOWN


# ---- CLI ----------------------------------------------------------------------------------------------

def run_cli(args, client, config=SITE_CONF):
    return CliRunner().invoke(cli, ["--config", config, "audit", "partition", *args],
                              obj=AppContext(client=client, config_path=config))


def test_cli_json_and_exit_code(tmp_path):
    result = run_cli(["gpu", "--json", "--results-dir", str(tmp_path)], replay("degraded"))
    assert result.exit_code == 2, result.output
    doc = json.loads(result.output)
    assert doc["status"] == "CRITICAL" and doc["exit_code"] == 2 and doc["partition"] == "gpu"
    for finding in doc["findings"]:
        assert {"check", "severity", "nodes", "node_list", "message"} <= set(finding)
    assert doc["nodes"]["node4"]["gres"] == "gpu:h100:2"
    assert doc["findings"][0]["severity"] == "CRITICAL"  # worst first


def test_cli_text_grouped_by_severity(tmp_path):
    result = run_cli(["gpu", "--results-dir", str(tmp_path)], replay("degraded"))
    out = result.output
    assert out.splitlines()[0].startswith("partition gpu: CRITICAL - ")
    assert out.index("\nCRITICAL\n") < out.index("\nWARNING\n") < out.index("\nOK\n")
    assert "GPU 3 Xid 79 fallen off the bus, RMA ticket 4711" in out


def test_cli_all(tmp_path):
    fresh_results(tmp_path)
    result = run_cli(["--all", "--json", "--results-dir", str(tmp_path)], replay("clean"))
    doc = json.loads(result.output)
    assert [p["partition"] for p in doc["partitions"]] == ["gpu", "debug"]
    assert result.exit_code == doc["exit_code"]


def test_cli_unknown_partition_and_unreachable(tmp_path):
    assert run_cli(["nope"], replay("clean")).exit_code == 3
    down = ReplaySlurmClient()
    down.fail("scontrol", col.VERSION_ARGS, 1, "Unable to contact slurm controller (connect failure)")
    result = run_cli(["gpu", "--json"], down)
    assert result.exit_code == 3
    assert "Unable to contact slurm controller" in json.loads(result.output)["findings"][0]["message"]


def test_cli_usage_and_missing_config(tmp_path):
    # issue 15: usage errors are UNKNOWN (3) in a Nagios check, not 2 (CRITICAL); an explicit --config that does
    # not exist is an error (UNKNOWN), no longer an OK finding
    assert run_cli([], replay("clean")).exit_code == 3
    assert run_cli(["gpu", "--all"], replay("clean")).exit_code == 3
    assert run_cli(["gpu", "--bogus"], replay("clean")).exit_code == 3
    result = run_cli(["gpu", "--json"], replay("clean"), config=str(tmp_path / "absent.conf"))
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("UNKNOWN - ") and "absent.conf" in result.stdout and "--config" in result.stdout


def test_cli_bad_config_is_unknown(tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("[site]\nnot_a_key = 1\n")
    result = run_cli(["gpu", "--json"], replay("clean"), config=str(bad))
    doc = json.loads(result.output)
    assert any(f["check"] == "config" and f["severity"] == "UNKNOWN" for f in doc["findings"])


def test_snapshot_audit_without_nodes_known(tmp_path):
    snap = col.collect_snapshot(replay("clean"))
    snap.nodes.pop("node4")
    report = audit_snapshot(snap, "gpu", None, now=NOW, skip=("acceptance",))
    assert [f.nodes for f in findings(report, "partition.nodes")] == ["node4"]


# ---- checks on typed records (states the lab cannot easily produce) --------------------------------------

def _node(name, state="IDLE", flags=(), gres="gpu:h100:4", used="gpu:h100:0", drained=None):
    from gpuclust.slurm.parse import parse_gres
    from gpuclust.slurm.records import NodeRecord

    return NodeRecord(name=name, state=state, flags=frozenset(flags), gres=tuple(parse_gres(gres)),
                      gres_used=tuple(parse_gres(used)), gres_drained=tuple(parse_gres(drained)), cpus=8,
                      real_memory_mb=16000, features=("gpu",), version="22.05.8")


def test_not_responding_maintenance_and_gres_accounting():
    from gpuclust.audit.checks import check_node_state

    nodes = [_node("n1", flags={"NOT_RESPONDING"}), _node("n2", flags={"MAINTENANCE"}),
             _node("n3", used="gpu:h100:6"), _node("n4", drained="gpu:h100:1"), _node("n5"), _node("n6")]
    got = {(f.check, f.severity, f.nodes) for f in check_node_state(nodes, NOW)}
    assert ("node.down", Nagios.CRITICAL, "n1") in got
    assert ("node.other", Nagios.OK, "n2") in got
    assert ("node.gres_used", Nagios.CRITICAL, "n3") in got
    assert ("node.gres_drained", Nagios.WARNING, "n4") in got


def test_draining_node_with_jobs_and_tied_homogeneity():
    from gpuclust.audit.checks import check_homogeneity, check_node_state

    drain = [f for f in check_node_state([_node("n1", "MIXED", {"DRAIN"}), _node("n2"), _node("n3")], NOW)
             if f.check == "node.drain"]
    assert drain[0].severity == Nagios.WARNING and drain[0].message.startswith("draining (jobs still running)")
    tied = [f for f in check_homogeneity([_node("a1"), _node("a2", gres="gpu:a100:4")])
            if f.check == "homogeneity.gres"]
    assert len(tied) == 1 and "no majority" in tied[0].message and tied[0].severity == Nagios.CRITICAL


def test_cli_skip(tmp_path):
    client = replay("degraded")
    result = run_cli(["gpu", "--json", "--skip", "acceptance", "--skip", "limits"], client)
    assert not [c for c in client.calls if c[0] == "sacctmgr"]  # no sacctmgr when limits are skipped
    checks = {f["check"].split(".")[0] for f in json.loads(result.output)["findings"]}
    assert "acceptance" not in checks and "limits" not in checks and "node" in checks


# ---- -w/-c on the unavailable nodes, and --timeout (issue 28 item 12) ----------------------------------------

def _node_severities(doc):
    return sorted((f["check"], f["severity"], f["nodes"]) for f in doc["findings"]
                  if f["check"] in ("node.down", "node.drain"))


@pytest.mark.parametrize(("ranges", "expected"), [
    ((), [("node.down", "CRITICAL", "node3"), ("node.drain", "WARNING", "node2")]),  # the defaults
    (("-w", "2", "-c", "3"), [("node.down", "OK", "node3"), ("node.drain", "OK", "node2")]),
    (("-w", "1", "-c", "3"), [("node.down", "WARNING", "node3"), ("node.drain", "WARNING", "node2")]),
    (("--warning", "0", "--critical", "1"), [("node.down", "CRITICAL", "node3"), ("node.drain", "CRITICAL", "node2")]),
])
def test_cli_ranges_on_unavailable_nodes(tmp_path, ranges, expected):
    # the degraded recording: node3 down, node2 drained, node4 odd GPUs (homogeneity skipped to isolate)
    args = ["gpu", "--skip", "homogeneity", "--skip", "limits", "--skip", "acceptance", *ranges]
    doc = json.loads(run_cli([*args, "--json"], replay("degraded")).output)
    assert _node_severities(doc) == expected
    assert doc["thresholds"] == ({"warning": ranges[1], "critical": ranges[3]} if ranges else None)
    text = run_cli(args, replay("degraded"))
    first = text.output.splitlines()[0]
    if ranges:
        assert f" unavailable=2;{ranges[1]};{ranges[3]};0;4 " in first + " "
        assert "2 of 4 nodes unavailable" in text.output
    else:
        assert "unavailable=" not in first
    assert text.exit_code == {"OK": 0, "WARNING": 1, "CRITICAL": 2}[max(
        (s for _, s, _ in expected), key=["OK", "WARNING", "CRITICAL"].index)]


def test_cli_bad_range_is_unknown(tmp_path):
    result = run_cli(["gpu", "-c", "5:1"], replay("clean"))
    assert result.exit_code == 3 and "start 5 is above end 1" in result.output


class _StuckClient(ReplaySlurmClient):
    def scontrol(self, args, *, timeout=None):
        import time
        time.sleep(30)  # a hung slurmctld; the alarm ends it
        return super().scontrol(args, timeout=timeout)


def test_cli_timeout_ends_in_unknown(tmp_path):
    stuck = _StuckClient()
    result = run_cli(["gpu", "-t", "1"], stuck)
    assert result.exit_code == 3, result.output
    assert result.output.startswith("partition gpu: UNKNOWN - [timeout] timed out after 1 s (--timeout)")
    result = run_cli(["gpu", "--timeout", "1", "--json"], stuck)
    doc = json.loads(result.output)
    assert result.exit_code == 3 and doc["status"] == "UNKNOWN" and doc["findings"][0]["check"] == "timeout"


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("assoc", "audit|root||||||normal\n", "sacctmgr show assoc: line 1 is not a header with Account"),
    ("qos", "normal|||||\ngpu-normal||||gres/gpu=8|\n", "sacctmgr show qos: line 1 is not a header with Name"),
])
def test_sacctmgr_output_without_header_is_named(name, text, expected):
    from gpuclust.errors import SlurmOutputError
    from gpuclust.slurm.records import parse_assocs, parse_qos

    with pytest.raises(SlurmOutputError, match=expected) as err:
        (parse_assocs if name == "assoc" else parse_qos)(text)
    assert "-n/--noheader" in str(err.value)
