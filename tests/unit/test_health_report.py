"""`accept report` and `--drain` on health snapshots recorded on the real 24.11 lab
(tests/data/accept/health/lab-24.11/README.md): the faulty node named alone with its class, drained with the
taxonomy reason; the job-level command's srun argv."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuclust.accept import drain
from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept.health import job as health_job
from gpuclust.config import parse_config
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.records import parse_nodes_text

DATA = Path(__file__).resolve().parents[1] / "data" / "accept" / "health" / "lab-24.11"
CONFIG = parse_config((Path(__file__).resolve().parents[1] / "slurm_lab" / "lab-site.conf").read_text())
CLEAN_NODES = Path(__file__).resolve().parents[1] / "data" / "accept" / "drain" / "show_node_clean.txt"


def _report(job: str, root: Path = DATA) -> rep.Report:
    return rep.evaluate(R.scan_results(root, job=job), CONFIG, job=job)


def _named(report: rep.Report) -> dict[str, list[tuple[str, str]]]:
    return {n: sorted((f.check, str(f.details.get("detail"))) for f in v.findings
                      if f.check.startswith("health-") and f.status in (Nagios.WARNING, Nagios.CRITICAL))
            for n, v in report.nodes.items() if v.status != Nagios.OK}


@pytest.mark.parametrize(("job", "named"), [
    ("14", {}),
    ("15", {"node3": [("health-link", "ip-lost-in")]}),
    ("16", {"node3": [("health-link", "ip-lost-out")]}),
    ("17", {"node3": [("health-remap", "pending")]}),
])
def test_recorded_lab_faults_are_named_alone(job: str, named: dict[str, list[tuple[str, str]]]) -> None:
    report = _report(job)
    assert _named(report) == named
    assert report.status == (Nagios.CRITICAL if named else Nagios.OK)
    summary = report.as_dict()["health"][job]
    assert sorted(summary) == ["node1", "node2", "node3", "node4"]
    assert summary["node1"]["sources"]["snmp"] == "ok" and summary["node1"]["sources"]["nvidia_smi"] == "ok"
    assert summary["node1"]["sources"]["infiniband"].startswith("unavailable: ")  # the lab has no IB: not "ok"


def test_drain_names_the_class_and_detail(tmp_path: Path) -> None:
    nodes = {n.name: n for n in parse_nodes_text(CLEAN_NODES.read_text())}  # recorded on the lab (22.05)
    for job, reason in (("17", "gpuclust:remap:pending RESET_GPU job 17 (allreduce): node3: GPU 0"),
                        ("15", "gpuclust:link:ip-lost-in CHECK_MECHANICALS job 15 (allreduce): node3: 527 of 10521")):
        plan = drain.plan(_report(job), nodes)
        assert plan.of("drain") == ["node3"], plan.actions
        [action] = [a for a in plan.actions if a.action == "drain"]
        assert action.reason is not None and action.reason.startswith(reason), action.reason


def test_a_node_without_its_after_snapshot_is_unknown_never_a_pass(tmp_path: Path) -> None:
    root = tmp_path / "results"
    shutil.copytree(DATA, root)
    (root / "health" / "14" / "node2-after.json").unlink()
    (root / "health" / "14" / "node4-before.json").write_text("{not json", encoding="utf-8")
    report = _report("14", root)
    assert report.nodes["node2"].status == Nagios.UNKNOWN and report.nodes["node4"].status == Nagios.UNKNOWN
    assert any(f.check == "health-input" and "node4-before.json" in f.message for f in report.findings)
    assert report.nodes["node1"].status == Nagios.OK


def test_job_command_builds_one_srun_step_with_the_before_time(tmp_path: Path) -> None:
    out = health_job.health_dir(tmp_path, "17")
    shutil.copytree(DATA / "health" / "17", out)
    since = health_job.earliest_before(out)
    assert since is not None and since.tzinfo is not None and since < datetime.now(timezone.utc)
    argv = health_job.step_argv("after", "17", 4, out, python="/venv/bin/python", nvidia_smi_timeout=30,
                                since=since, dcgm_level=2, nvbandwidth=True)
    assert argv[:6] == ["srun", "--nodes=4", "--ntasks=4", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
                        "--job-name=gpuclust-health-after"]
    assert argv[argv.index("--since") + 1] == since.isoformat()
    assert "--dcgm-level" not in argv and "--nvbandwidth" not in argv  # the before phase only
    before = health_job.step_argv("before", "17", 4, out, python="/venv/bin/python", nvidia_smi_timeout=30,
                                  since=None, dcgm_level=2, nvbandwidth=True)
    assert before[-3:] == ["--dcgm-level", "2", "--nvbandwidth"]
    with pytest.raises(Exception, match="not a Slurm job id"):
        health_job.health_dir(tmp_path, "17; rm -rf /")


def test_job_command_honours_accept_health_0_and_refuses_outside_a_job(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    env = {"ACCEPT_HEALTH": "0", "ACCEPT_RESULTS_DIR": str(tmp_path)}
    assert health_job.snapshot_job("before", env, run=lambda argv, **kw: calls.append(argv)) == 0 and not calls
    from gpuclust.errors import GpuclustError

    with pytest.raises(GpuclustError, match="not inside a Slurm batch job"):
        health_job.snapshot_job("before", {"ACCEPT_RESULTS_DIR": str(tmp_path)}, run=lambda argv, **kw: None)
    with pytest.raises(GpuclustError):
        health_job.snapshot_job("before", {"ACCEPT_DCGM_LEVEL": "9", "ACCEPT_RESULTS_DIR": str(tmp_path)})


def test_a_job_wide_gate_goes_to_the_node_its_counters_name() -> None:
    """Job 15's all_reduce busbw (0.114 GB/s at the large sizes) against a floor of 0.5: one figure for the whole
    job, so without health evidence every node would carry the gate. node3's counters name it: the gate stays on
    node3, and the others get one run-level finding instead of being named (so --drain drains node3 alone)."""
    text = (Path(__file__).resolve().parents[1] / "slurm_lab" / "lab-site.conf").read_text()
    strict = parse_config(text.replace("expect_busbw_gbps = 0.1", "expect_busbw_gbps = 1.0"))
    assert strict.partitions["gpu"].expect_busbw_gbps == 1.0
    report = rep.evaluate(R.scan_results(DATA, job="15"), strict, job="15")
    assert {n: v.status for n, v in report.nodes.items()} == {
        "node1": Nagios.OK, "node2": Nagios.OK, "node3": Nagios.CRITICAL, "node4": Nagios.OK}
    assert sorted(f.check for f in report.nodes["node3"].findings if f.status == Nagios.CRITICAL) == \
        ["gate", "health-link"]
    [run_level] = [f for f in report.findings if f.check == "gate"]
    assert run_level.severity == Nagios.CRITICAL and "attributed to node3" in run_level.message
    healthy = rep.evaluate(R.scan_results(DATA, job="14"), strict, job="14")  # no health cause: every node
    assert all(v.status == Nagios.CRITICAL for v in healthy.nodes.values())


def test_spurious_retransmits_under_load_name_nobody() -> None:
    """Recorded under load (lab-22.05-load/README.md): 662 retransmits on node3, all D-SACKed by the receivers.
    Spurious, so not loss: every node OK."""
    root = DATA.parent / "lab-22.05-load"
    report = rep.evaluate(R.scan_results(root, job="35"), CONFIG, job="35")
    assert {n: v.status for n, v in report.nodes.items()} == {"node2": Nagios.OK, "node3": Nagios.OK,
                                                               "node4": Nagios.OK}, _named(report)
