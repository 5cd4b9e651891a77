"""`gpuclust accept report --drain`, `accept node-status` and the NHC check, on recorded lab data: pairwise
results from tests/data/accept/noise (job 22: node3 throttled and named; job 24: the clean run after it) and
`scontrol -o show node` recorded on the lab with node3 drained by gpuclust and node1 by an admin
(tests/data/accept/drain/)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import drain
from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.audit.acceptance import check_gpuclust_drains
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import UnsafeValueError
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.records import NodeRecord, parse_nodes_text
from gpuclust.slurm.replay import ReplaySlurmClient

REPO = Path(__file__).resolve().parents[2]
CONFIG = "[site]\ncluster_name = an\nresults_dir = {rdir}\nacceptance_stale_days = 7\n[partition gpu]\n"


def _drain_data(data_dir: Path) -> Path:
    return data_dir / "accept" / "drain"


@pytest.fixture
def results(tmp_path: Path, data_dir: Path) -> Path:
    rdir = tmp_path / "results"
    rdir.mkdir()
    for job in ("22", "24"):
        shutil.copy(data_dir / "accept" / "noise" / f"pairwise-{job}.jsonl", rdir)
    return rdir


def _config(rdir: Path) -> object:
    return parse_config(CONFIG.format(rdir=rdir), "t.conf")


def _nodes(data_dir: Path, name: str) -> dict[str, NodeRecord]:
    return {n.name: n for n in parse_nodes_text((_drain_data(data_dir) / name).read_text())}


def _report(rdir: Path, job: str) -> rep.Report:
    config = _config(rdir)
    return rep.evaluate(R.scan_results(rdir), config, job=job)  # type: ignore[arg-type]


@pytest.mark.parametrize("drained", ["show_node_drained.txt", "show_node_drained_24.11.txt"])
def test_recorded_states_parse(data_dir: Path, drained: str) -> None:
    clean = _nodes(data_dir, "show_node_clean.txt")
    assert not any(n.is_drain for n in clean.values())
    mixed = _nodes(data_dir, drained)
    assert drain.is_ours(mixed["node3"]) and mixed["node3"].reason_time is not None
    assert mixed["node1"].is_drain and not drain.is_ours(mixed["node1"]) and mixed["node1"].reason == "admin: disk"


def test_failed_node_is_drained_with_check_and_job(results: Path, data_dir: Path) -> None:
    report = _report(results, "22")
    plan = drain.plan(report, _nodes(data_dir, "show_node_clean.txt"))
    assert plan.of("drain") == ["node3"] and not plan.of("resume")
    [action] = [a for a in plan.actions if a.action == "drain"]
    assert action.reason is not None and action.reason.startswith("gpuclust:bandwidth:outlier job 22 (pairwise): slow node")
    assert action.scontrol_args() == ["update", "NodeName=node3", "State=DRAIN", f"Reason={action.reason}"]
    assert plan.commands() == [shlex.join(["scontrol", "update", "NodeName=node3", "State=DRAIN",
                                           f"Reason={action.reason}"])]


def test_someone_elses_drain_is_never_touched(results: Path, data_dir: Path) -> None:
    nodes = _nodes(data_dir, "show_node_drained.txt")
    # node1 passed job 24 but its drain is the admin's: untouched, never resumed
    plan = drain.plan(_report(results, "24"), nodes)
    by = {a.node: a.action for a in plan.actions}
    assert by["node1"] == "untouched" and "node1" not in plan.of("resume")
    # an admin drain on the failing node itself: not re-drained, not resumed
    admin3 = replace(nodes["node3"], reason="admin: PSU", reason_user="root")
    plan = drain.plan(_report(results, "22"), {**nodes, "node3": admin3})
    assert {a.node: a.action for a in plan.actions}["node3"] == "untouched" and not plan.commands()


def test_ours_resumed_only_on_a_pass_after_the_drain(results: Path, data_dir: Path) -> None:
    nodes = _nodes(data_dir, "show_node_drained.txt")
    report = _report(results, "24")  # node3 passes
    finished = report.nodes["node3"].last_finished
    assert finished is not None
    before = replace(nodes["node3"], reason_time=finished - timedelta(minutes=5))
    after = replace(nodes["node3"], reason_time=finished + timedelta(minutes=5))
    assert drain.plan(report, {**nodes, "node3": before}).of("resume") == ["node3"]
    assert drain.plan(report, {**nodes, "node3": after}).of("keep") == ["node3"]  # that pass predates the drain
    # still failing: kept drained, not drained twice
    plan = drain.plan(_report(results, "22"), {**nodes, "node3": before})
    assert plan.of("keep") == ["node3"] and not plan.commands()


def test_max_drain_refuses_a_partition_wide_drain(results: Path, data_dir: Path) -> None:
    report = _report(results, "22")
    for v in report.nodes.values():
        v.add(rep.Finding(v.node, Nagios.CRITICAL, "gate", "busbw below the floor", "22", "pairwise"))
    plan = drain.plan(report, _nodes(data_dir, "show_node_clean.txt"))
    assert not plan.of("drain") and len(plan.of("skip")) == 4 and "max-drain" in plan.notes[0]
    assert drain.plan(report, _nodes(data_dir, "show_node_clean.txt"), max_fraction=1.0).of("drain") == \
        ["node1", "node2", "node3", "node4"]


@pytest.mark.parametrize("name", ["-node1", "node[1-2]", "node1,node2", "node 1", "", "a=b", "node1\n"])
def test_bad_node_names_never_reach_scontrol(name: str) -> None:
    with pytest.raises(UnsafeValueError):
        drain.drain_args(name, "gpuclust accept: x")
    with pytest.raises(UnsafeValueError):
        drain.resume_args(name)


def test_reasons_are_one_bounded_line_with_the_prefix() -> None:
    reason = drain.make_reason("bandwidth", "gate", "7", "allreduce", "line one\nline two\t" + "x" * 500)
    assert reason.startswith("gpuclust:bandwidth:gate job 7 (allreduce): line one line two x")
    assert len(reason) <= drain.MAX_REASON and "\n" not in reason and reason.endswith("...")
    for bad in ("admin: disk", "gpuclust accept: a\nb", "gpuclust accept: " + "x" * 300, "gpuclust:a\nb"):
        with pytest.raises(UnsafeValueError):
            drain.valid_reason(bad)
    assert drain.valid_reason("gpuclust accept: outlier job 1 (pairwise): x")  # the earlier form is still ours
    with pytest.raises(UnsafeValueError):
        drain.make_reason("disk", "x", None, None, "not a gpuclust class")


def test_taxonomy_names_the_cause_before_the_symptom(results: Path, data_dir: Path) -> None:
    """node3 fails the pairwise outlier AND has a pending row remap: the drain says remap, the cause."""
    from gpuclust.findings import Finding

    report = _report(results, "22")
    remap = Finding.make("health-remap", Nagios.CRITICAL, "node3: GPU 2 row remap pending", ["node3"], job_id="22",
                         kind="pairwise", **{"class": "remap", "detail": "pending"})
    report.nodes["node3"].add(remap)
    [action] = [a for a in drain.plan(report, _nodes(data_dir, "show_node_clean.txt")).actions
                if a.action == "drain"]
    assert action.node == "node3" and action.reason is not None
    assert action.reason.startswith("gpuclust:remap:pending job 22 (pairwise): node3: GPU 2 row remap pending")
    legacy = replace(_nodes(data_dir, "show_node_drained.txt")["node3"])
    assert legacy.reason is not None and legacy.reason.startswith("gpuclust accept:") and drain.is_ours(legacy)


def _client(data_dir: Path, show: str) -> ReplaySlurmClient:
    client = ReplaySlurmClient()
    text = (_drain_data(data_dir) / show).read_text()
    client.add("scontrol", ["-o", "show", "node"], text)
    for name in ("node1", "node2", "node3", "node4"):
        client.add("scontrol", ["-o", "show", "node", name],
                   "\n".join(line for line in text.splitlines() if line.startswith(f"NodeName={name} ")))
    return client


def test_apply_resume_rechecks_ownership(results: Path, data_dir: Path) -> None:
    nodes = _nodes(data_dir, "show_node_drained.txt")
    report = _report(results, "24")
    finished = report.nodes["node3"].last_finished
    assert finished is not None
    plan = drain.plan(report, {**nodes, "node3": replace(nodes["node3"], reason_time=finished - timedelta(1))})
    assert plan.of("resume") == ["node3"]
    client = _client(data_dir, "show_node_drained.txt")
    client.add("scontrol", ["update", "NodeName=node3", "State=RESUME"], "")
    drain.apply(client, plan)
    assert plan.applied == ["scontrol update NodeName=node3 State=RESUME"] and not plan.errors
    # re-drained by an admin meanwhile: the re-read shows another reason, nothing is run
    client = _client(data_dir, "show_node_clean.txt")
    plan = drain.plan(report, {**nodes, "node3": replace(nodes["node3"], reason_time=finished - timedelta(1))})
    drain.apply(client, plan)
    assert plan.applied == [] and "no longer gpuclust's" in plan.notes[-1]


def _cli(args: list[str], client: ReplaySlurmClient, rdir: Path, tmp_path: Path) -> tuple[int, str]:
    conf = tmp_path / "site.conf"
    conf.write_text(CONFIG.format(rdir=rdir))
    result = CliRunner().invoke(cli, ["--config", str(conf), *args], obj=AppContext(client=client))
    return result.exit_code, result.output


def test_cli_dry_run_prints_commands_and_changes_nothing(results: Path, data_dir: Path, tmp_path: Path) -> None:
    client = _client(data_dir, "show_node_clean.txt")
    code, out = _cli(["accept", "report", "--job", "22", "--drain", "--dry-run"], client, results, tmp_path)
    assert code == 2, out
    assert "scontrol update NodeName=node3 State=DRAIN 'Reason=gpuclust:bandwidth:outlier job 22 (pairwise): slow" in out
    assert all(c[1] != "update" for c in client.calls)


def test_cli_drain_runs_scontrol_and_a_failure_exits_3(results: Path, data_dir: Path, tmp_path: Path) -> None:
    client = _client(data_dir, "show_node_clean.txt")
    plan = drain.plan(_report(results, "22"), _nodes(data_dir, "show_node_clean.txt"))
    args = next(a.scontrol_args() for a in plan.actions if a.action == "drain")
    assert args is not None
    client.add("scontrol", args, "")
    code, out = _cli(["accept", "report", "--job", "22", "--drain"], client, results, tmp_path)
    assert code == 2 and ("scontrol", *args) in client.calls, out
    failing = _client(data_dir, "show_node_clean.txt")
    failing.fail("scontrol", args, 1, "slurm_update error: Invalid node state specified")
    code, out = _cli(["accept", "report", "--job", "22", "--drain"], failing, results, tmp_path)
    assert code == 3, out


def test_node_unknown_to_slurm_is_skipped(results: Path, data_dir: Path) -> None:
    nodes = _nodes(data_dir, "show_node_clean.txt")
    del nodes["node3"]
    plan = drain.plan(_report(results, "22"), nodes)
    assert {a.node: a.action for a in plan.actions}["node3"] == "skip" and not plan.commands()


def test_dry_run_needs_drain(results: Path, data_dir: Path, tmp_path: Path) -> None:
    code, _ = _cli(["accept", "report", "--dry-run"], ReplaySlurmClient(), results, tmp_path)
    assert code == 3  # a usage error of a Nagios check is UNKNOWN (issue 15)


def test_audit_shows_gpuclust_drains_as_its_own(data_dir: Path) -> None:
    nodes = list(_nodes(data_dir, "show_node_drained.txt").values())
    [finding] = check_gpuclust_drains(nodes)
    assert finding.check == "acceptance.drain" and finding.node_list == ("node3",)
    assert finding.details["owner"] == "gpuclust" and finding.severity == Nagios.WARNING
    assert check_gpuclust_drains(list(_nodes(data_dir, "show_node_clean.txt").values())) == []


def test_node_status(results: Path) -> None:
    config = _config(results)
    scan = R.scan_results(results)
    late = datetime(2026, 12, 3, 8, 0, tzinfo=timezone.utc)
    # job 24 (after 22) passed every node
    assert drain.node_status(scan, config, "node3", late).status == "OK"
    assert drain.node_status(scan, config, "node3", late + timedelta(days=8)).status == "STALE"
    assert drain.node_status(scan, config, "node9", late).status == "NONE"
    only22 = R.ResultScan([j for j in scan.jobs if j.job_id == "22"], [])
    status = drain.node_status(only22, config, "node3", late)
    assert status.status == "FAILED" and "pairwise job 22: [outlier] slow node" in status.message
    assert drain.node_status(only22, config, "node1", late).status == "OK"


NHC_DRIVER = REPO / "tests" / "data" / "nhc" / "nhc-driver-standin.bash"
NHC_CHECK = REPO / "examples" / "nhc" / "gpuclust_accept.nhc"


def _nhc(results: Path | None, tmp_path: Path, node: str, *args: str, cmd: str | None = None,
         config: str | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run the NHC check for `node` as NHC's driver runs it (tests/data/nhc: a stand-in for the driver with NHC's
    die/log/dbg semantics); returns the process and what it marked offline ("" when nothing)."""
    conf = tmp_path / "site.conf"
    if config is not None:
        conf.write_text(config)
    elif results is not None:
        conf.write_text(CONFIG.format(rdir=results))
    wrapper = tmp_path / "gpuclust"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m gpuclust.cli.main \"$@\"\n")
    wrapper.chmod(0o755)
    offline = tmp_path / "offline"
    offline.write_text("")
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf), GPUCLUST_NHC_CMD=cmd or str(wrapper), PYTHONPATH=str(REPO),
               NHC_NODENAME=node, NHC_STANDIN_OFFLINE=str(offline))
    check = " ".join(["check_gpuclust_accept", *(shlex.quote(a) for a in args)])
    proc = subprocess.run(["bash", str(NHC_DRIVER), str(NHC_CHECK), check], capture_output=True, text=True,
                          env=env, timeout=120)
    return proc, offline.read_text()


def test_nhc_check_passes_and_fails(results: Path, tmp_path: Path) -> None:
    ok, offline = _nhc(results, tmp_path, "node3", "--stale-days", "3650")
    assert ok.returncode == 0 and not offline, ok.stdout + ok.stderr
    assert "DEBUG:  check_gpuclust_accept: OK: node3" in ok.stderr
    (results / "pairwise-24.jsonl").unlink()
    bad, offline = _nhc(results, tmp_path, "node3", "--stale-days", "3650")
    assert bad.returncode == 1
    assert "Health check failed:  check_gpuclust_accept: FAILED: node3: last acceptance failed" in offline
    stale, offline = _nhc(results, tmp_path, "node1", "--stale-days", "1")
    assert stale.returncode == 1 and "check_gpuclust_accept: STALE: node1" in offline, stale.stdout + stale.stderr


def test_nhc_check_passes_a_node_that_never_ran_acceptance_unless_required(results: Path, tmp_path: Path) -> None:
    # A fresh cluster: enabling the check must not drain every node.
    none, offline = _nhc(results, tmp_path, "node9")
    assert none.returncode == 0 and not offline
    assert "NONE: node9" in none.stdout and "--require-acceptance" in none.stdout
    required, offline = _nhc(results, tmp_path, "node9", "--require-acceptance")
    assert required.returncode == 1 and "check_gpuclust_accept: NONE: node9" in offline


@pytest.mark.parametrize("broken", ["missing gpuclust", "no site config", "bad site config", "crashing gpuclust"])
def test_nhc_check_that_cannot_run_says_so_and_never_drains(results: Path, tmp_path: Path, broken: str) -> None:
    cmd = config = None
    given: Path | None = results
    if broken == "missing gpuclust":
        cmd = str(tmp_path / "no-such-dir" / "gpuclust")
    elif broken == "no site config":
        given = None
    elif broken == "bad site config":
        config = "[site\n"
    else:
        crash = tmp_path / "crash"
        crash.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\nexit 1\n")
        crash.chmod(0o755)
        cmd = str(crash)
    proc, offline = _nhc(given, tmp_path, "node3", cmd=cmd, config=config)
    assert proc.returncode == 0 and not offline, proc.stdout + proc.stderr
    assert "check_gpuclust_accept: cannot run" in proc.stdout
    assert "SYSLOG: check_gpuclust_accept: cannot run" in proc.stderr
    if broken == "missing gpuclust":
        assert "not found" in proc.stdout
