"""The operator contract of `accept report` (issue 28, items 11-13): a node's state is its latest evidence, the
Nagios first line says why, -w/-c thresholds and --timeout, `--compare-container` says what is missing, and
`policy check` says where gpuclust's own flags go. Recorded lab results from tests/data/accept where they exist."""

from __future__ import annotations

import json
import math
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.exitcodes import Nagios
from gpuclust.nagiosrange import check_value, parse_range
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.unit.test_accept_drain import _client
from tests.unit.test_accept_report import CONFIG, T0, allreduce, scan_of

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "site.example.conf")
CONF = "[site]\ncluster_name = an\nresults_dir = {rdir}\n[partition gpu]\n"


@pytest.fixture
def noise(tmp_path: Path, data_dir: Path) -> Path:
    """Recorded pairwise runs: job 22 with node3 throttled (named), job 24 the clean run after it."""
    rdir = tmp_path / "results"
    rdir.mkdir()
    for job in ("22", "24"):
        shutil.copy(data_dir / "accept" / "noise" / f"pairwise-{job}.jsonl", rdir)
    return rdir


def _cli(tmp_path: Path, rdir: Path, *args: str, client: ReplaySlurmClient | None = None) -> tuple[int, str]:
    conf = tmp_path / "site.conf"
    conf.write_text(CONF.format(rdir=rdir))
    kw = {"obj": AppContext(client=client)} if client is not None else {}
    result = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", *args], **kw)  # type: ignore[arg-type]
    return result.exit_code, result.output


# ---- 11: a node's state is its latest evidence ---------------------------------------------------------------


def test_a_pass_after_a_fail_is_ok_and_the_fail_is_history() -> None:
    bad, good = allreduce("1", 0.01, T0), allreduce("2", 0.4, T0 + timedelta(hours=1))
    report = rep.evaluate(scan_of(good, bad), CONFIG, since=T0 - timedelta(days=7))  # order in the scan: none
    assert report.status == Nagios.OK
    node = report.nodes["node1"]
    assert node.status == Nagios.OK and not node.findings
    assert [(f.job_id, f.status) for f in node.history] == [("1", Nagios.CRITICAL)]
    data = report.as_dict()
    assert data["nodes"]["node1"]["history"][0]["job_id"] == "1" and data["nodes"]["node1"]["reasons"] == []
    assert {j["job_id"]: j["current"] for j in data["jobs"]} == {"1": False, "2": True}
    assert {"status", "exit_code", "figures", "jobs", "nodes", "findings", "problems"} <= set(data)  # kept
    text = rep.render_table(report)
    assert "CRITICAL (history)" in text and "history: findings of earlier runs" in text


def test_a_fail_after_a_pass_is_critical() -> None:
    good, bad = allreduce("1", 0.4, T0), allreduce("2", 0.01, T0 + timedelta(hours=1))
    report = rep.evaluate(scan_of(good, bad), CONFIG, since=T0 - timedelta(days=7))
    assert report.status == Nagios.CRITICAL and report.nodes["node1"].status == Nagios.CRITICAL
    assert not report.nodes["node1"].history


def test_recorded_throttled_then_clean_run(tmp_path: Path, noise: Path) -> None:
    code, out = _cli(tmp_path, noise, "--since", "2020-01-01", "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "OK", out
    node3 = data["nodes"]["node3"]
    assert node3["status"] == "OK" and any(h["check"] == "outlier" and h["job_id"] == "22" for h in node3["history"])
    code, out = _cli(tmp_path, noise, "--job", "22")  # the failed run alone still fails
    assert code == 2 and out.startswith("acceptance: CRITICAL - node3: [outlier] slow node")


def test_recorded_lab_results_latest_per_kind(tmp_path: Path, data_dir: Path) -> None:
    # pairwise-14 (node3 throttled) is history after pairwise-15; allreduce-17's GRES mismatch on node2 is current
    report = rep.evaluate(R.scan_results(data_dir / "accept" / "lab_results"), CONFIG, since=T0 - timedelta(days=7))
    assert report.status == Nagios.CRITICAL
    assert report.nodes["node3"].status == Nagios.OK and report.nodes["node3"].history
    assert report.nodes["node2"].status == Nagios.CRITICAL
    assert report.summary_line().startswith("acceptance: CRITICAL - node2: [gres] Slurm declares gpu:h100:2 on node2")


# ---- 12: the first line says why --------------------------------------------------------------------------------


def test_no_results_first_line_names_the_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = _cli(tmp_path, empty)
    assert code == 3
    assert out.splitlines()[0].startswith(f"acceptance: UNKNOWN - no acceptance results at all under {empty}; ")
    code, out = _cli(tmp_path, tmp_path / "missing")
    assert code == 3 and "results directory does not exist" in out.splitlines()[0]


def test_drain_output_keeps_the_status_line_first(tmp_path: Path, noise: Path, data_dir: Path) -> None:
    client = _client(data_dir, "show_node_clean.txt")
    code, out = _cli(tmp_path, noise, "--job", "22", "--drain", "--dry-run", client=client)
    lines = out.splitlines()
    assert code == 2 and lines[0].startswith("acceptance: CRITICAL - node3: [outlier]") and " | jobs=1" in lines[0]
    assert any("scontrol update NodeName=node3 State=DRAIN" in line for line in lines[1:])
    assert not any(" | " in line and "=" in line.split(" | ")[-1] for line in lines[1:3])


def test_compare_container_with_nothing_says_what_is_missing(tmp_path: Path, noise: Path) -> None:
    code, out = _cli(tmp_path, noise, "--compare-container")
    first = out.splitlines()[0]
    assert code == 3 and first.startswith("container vs bare metal: UNKNOWN - no node has both")
    assert "no containerised run with an image digest" in first and "--container IMAGE" in first
    assert " | nodes=4;;;0 nodes_compared=0;;;0" in first
    empty = tmp_path / "none"
    empty.mkdir()
    code, out = _cli(tmp_path, empty, "--compare-container")
    assert code == 3 and f"no acceptance results under {empty}" in out.splitlines()[0]


# ---- 12: -w/-c on nodes_critical, and --timeout ------------------------------------------------------------------


@pytest.mark.parametrize(("text", "alerts", "quiet"), [
    ("10", [-1, 11], [0, 10, 5.5]),
    ("10:", [9.9, -1], [10, 1e9]),
    ("~:10", [10.1], [-1e9, 10]),
    ("10:20", [9, 21], [10, 15, 20]),
    ("@10:20", [10, 15, 20], [9, 21]),
    ("0", [1], [0]),
])
def test_nagios_ranges(text: str, alerts: list[float], quiet: list[float]) -> None:
    r = parse_range(text)
    assert all(r.alerts(v) for v in alerts) and not any(r.alerts(v) for v in quiet) and str(r) == text


@pytest.mark.parametrize("text", ["", "@", "x", "1:2:3", "5:1", "~", "nan", "1:y"])
def test_bad_ranges_name_the_text_and_the_grammar(text: str) -> None:
    with pytest.raises(ValueError, match="expected a Nagios range"):
        parse_range(text)


def test_check_value_critical_beats_warning() -> None:
    w, c = parse_range("0"), parse_range("3")
    assert [check_value(n, w, c) for n in (0, 1, 3, 4)] == [Nagios.OK, Nagios.WARNING, Nagios.WARNING,
                                                             Nagios.CRITICAL]
    assert parse_range("~:").start == -math.inf and parse_range("~:").end == math.inf


def test_thresholds_on_failing_nodes(tmp_path: Path, noise: Path) -> None:
    code, out = _cli(tmp_path, noise, "--job", "22", "-w", "0", "-c", "2")
    first = out.splitlines()[0]
    assert code == 1 and first.startswith("acceptance: WARNING - 1 failing node(s), outside -w 0: node3: [outlier]")
    assert " nodes_critical=1;0;2;0;4 " in first
    code, out = _cli(tmp_path, noise, "--job", "22", "-w", "5", "-c", "10")
    assert code == 0 and out.startswith("acceptance: OK - ")
    code, out = _cli(tmp_path, noise, "--job", "22", "--critical", "0")
    assert code == 2 and "outside -c 0" in out.splitlines()[0]
    code, out = _cli(tmp_path, noise, "-w", "1:x")
    assert code == 3 and out.startswith("UNKNOWN - ") and "'-w' / '--warning'" in out and "Nagios range" in out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO to block on")
def test_timeout_ends_in_unknown(tmp_path: Path) -> None:
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    os.mkfifo(stuck / "allreduce-1.jsonl")  # reading it blocks until the alarm
    code, out = _cli(tmp_path, stuck, "--timeout", "1")
    assert code == 3 and out.startswith("acceptance: UNKNOWN - timed out after 1 s")
    code, out = _cli(tmp_path, stuck, "-t", "1", "--json")
    assert code == 3 and json.loads(out)["status"] == "UNKNOWN"


# ---- 13: policy check and gpuclust's own flags --------------------------------------------------------------------


def _policy(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--config", EXAMPLE, "policy", "check", "--user", "alice", *args])
    return result.exit_code, result.stdout, result.stderr


OK_JOB = ("-A", "ml", "--gres=gpu:h100:2", "--comment=team=ml,project=x")


def test_q_after_policy_check_stays_sbatch_qos() -> None:
    code, out, _ = _policy("--json", "-q", "normal", *OK_JOB)
    assert code == 0 and json.loads(out)["job_desc"]["qos"] == "normal"
    # -q meant as gpuclust's --quiet: sbatch takes '-A' as the QOS and 'ml' as the script; the error says so
    code, out, err = _policy("-q", *OK_JOB)
    assert code == 2 and "Unable to open file ml" in err
    assert "it takes '-A' as the QOS" in err and "gpuclust -q policy check" in err


def test_gpuclust_options_among_sbatch_options_say_where_they_go() -> None:
    code, _, err = _policy(*OK_JOB, "--json")
    assert code == 2 and "unrecognized option '--json'" in err
    assert "--json is an option of `policy check`" in err and "before the sbatch options" in err
    code, _, err = _policy(*OK_JOB, "--slurm-timeout", "5")
    assert code == 2 and "put it before the subcommand" in err


def test_quiet_before_the_subcommand_and_sbatch_quiet() -> None:
    result = CliRunner().invoke(cli, ["--config", EXAMPLE, "-q", "policy", "check", "--user", "alice", *OK_JOB])
    assert result.exit_code == 0 and result.stdout == ""
    code, out, _ = _policy(*OK_JOB, "--quiet")  # sbatch's --quiet: read as sbatch does, and quiets the output
    assert code == 0 and out == ""
    code, out, _ = _policy(*OK_JOB)
    assert code == 0 and out.startswith("ACCEPT")


def test_a_global_option_after_the_subcommand_says_where_it_goes(tmp_path: Path, noise: Path) -> None:
    code, out = _cli(tmp_path, noise, "--slurm-timeout", "5")  # a Nagios check: UNKNOWN, not "did you mean --timeout"
    assert code == 3 and out.startswith("UNKNOWN - --slurm-timeout is a global option: put it before the subcommand")
    assert "Did you mean" not in out
    result = CliRunner().invoke(cli, ["--config", EXAMPLE, "policy", "render", "--slurm-timeout=5"])
    assert result.exit_code == 2 and "gpuclust --slurm-timeout ... policy render ..." in result.stderr
