"""Issue 15 items 2 and 3: one CLI grammar and Nagios semantics, through click's CliRunner and through the
installed console script (a real process: exit status, stdout vs stderr, SIGPIPE, shell completion)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accounting.ingest.period import resolve_period
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.errors import InputError
from gpuclust.timespec import parse_time

REPO = Path(__file__).resolve().parent.parent.parent
DATA = REPO / "tests" / "data" / "accounting"
EXAMPLE = REPO / "site.example.conf"
NOW = datetime(2026, 12, 3, 9, 30, 15, tzinfo=timezone.utc)


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "state")))
    return conf


def _input_args(tmp_path: Path) -> list[str]:
    return ["--input", str(DATA / "lab-parsable.txt"), "--delimiter", "\\x1f|\\x1e", "--out", str(tmp_path / "out"),
            "--format", "json"]


# ---- the one time grammar --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("now", NOW.replace(microsecond=0)),
    ("today", datetime(2026, 12, 3, tzinfo=timezone.utc)),
    ("yesterday", datetime(2026, 12, 2, tzinfo=timezone.utc)),
    ("tomorrow", datetime(2026, 12, 4, tzinfo=timezone.utc)),
    ("7d", NOW - timedelta(days=7)),
    ("24h", NOW - timedelta(hours=24)),
    ("30m", NOW - timedelta(minutes=30)),
    ("2w", NOW - timedelta(weeks=2)),
    ("90s", NOW - timedelta(seconds=90)),
    ("3 days ago", NOW - timedelta(days=3)),
    ("now-7days", NOW - timedelta(days=7)),
    ("NOW-1hour", NOW - timedelta(hours=1)),
    ("now+2h", NOW + timedelta(hours=2)),
    ("today-1d", datetime(2026, 12, 2, tzinfo=timezone.utc)),
    ("2026-12-01", datetime(2026, 12, 1, tzinfo=timezone.utc)),
    ("2026-12-01T06:00", datetime(2026, 12, 1, 6, tzinfo=timezone.utc)),
    ("2026-12-01 06:00:30", datetime(2026, 12, 1, 6, 0, 30, tzinfo=timezone.utc)),
    ("2026-12-01T06:00Z", datetime(2026, 12, 1, 6, tzinfo=timezone.utc)),
    ("2026-12-01T07:00+01:00", datetime(2026, 12, 1, 6, tzinfo=timezone.utc)),
])
def test_time_forms(text, expected):
    assert parse_time(text).resolve("UTC", NOW) == expected


def test_time_in_site_zone_and_dst():
    # a date is midnight in the site time zone; `yesterday` across a DST change is still midnight
    assert parse_time("2026-12-01").resolve("Europe/Berlin", NOW).isoformat() == "2026-12-01T00:00:00+01:00"
    march = datetime(2026, 3, 30, 12, tzinfo=timezone.utc)  # Berlin changed to CEST on the 29th
    assert parse_time("yesterday").resolve("Europe/Berlin", march).isoformat() == "2026-03-29T00:00:00+01:00"


@pytest.mark.parametrize("text,why", [
    ("", "empty"), ("2026", "bare number"), ("7 fortnights", "unknown unit"), ("nonsense", "not a time"),
    ("2026-13-01", "not a time"), ("0001-01-01", "outside 1970-9000"), ("now-999999999d", "century"),
    ("12/01/2026", "not a time"),
])
def test_time_errors(text, why):
    with pytest.raises(ValueError, match=why):
        parse_time(text)


def test_open_ended_since_runs_to_now_and_errors_name_the_option():
    period = resolve_period("7d", None, None, "UTC", now=NOW)
    assert period is not None and period.end == NOW.replace(microsecond=0)
    assert period.start == NOW - timedelta(days=7)
    with pytest.raises(InputError, match=r"^--until: needs --since"):
        resolve_period(None, "today", None, "UTC", now=NOW)
    with pytest.raises(InputError, match=r"^--since: .*not a time"):
        resolve_period("bogus", None, None, "UTC", now=NOW)
    with pytest.raises(InputError, match=r"^--until: the period is empty"):
        resolve_period("today", "yesterday", None, "UTC", now=NOW)
    with pytest.raises(InputError, match=r"^--period: "):
        resolve_period("today", None, "yesterday", "UTC", now=NOW)


# ---- CliRunner -------------------------------------------------------------------------------------------------

def test_config_after_the_subcommand(tmp_path):
    conf = _conf(tmp_path)
    for args in (["--config", str(conf), "report", "build"], ["report", "build", "--config", str(conf)]):
        result = CliRunner().invoke(cli, [*args, *_input_args(tmp_path), "--since", "2026-12-02",
                                          "--until", "2026-12-03"])
        assert result.exit_code == 0, result.output
        assert "wrote" in result.stdout
    # the later --config wins
    result = CliRunner().invoke(cli, ["--config", str(tmp_path / "absent.conf"), "config", "check",
                                      "--config", str(conf)])
    assert result.exit_code == 0, result.output


def test_report_build_since_alone_runs_to_now(tmp_path):
    result = CliRunner().invoke(cli, ["report", "build", "--config", str(_conf(tmp_path)), *_input_args(tmp_path),
                                      "--since", "2026-12-02", "--json"])
    assert result.exit_code == 0, result.output
    period = json.loads(result.stdout)["period"]
    end = datetime.fromisoformat(period["end"])
    assert abs(end - datetime.now(timezone.utc)) < timedelta(hours=1)
    # and a relative one (exit 1 if the recorded jobs fall outside the last week of this machine's clock)
    result = CliRunner().invoke(cli, ["report", "build", "--config", str(_conf(tmp_path)), *_input_args(tmp_path),
                                      "--since", "7d", "--json"])
    assert result.exit_code in (0, 1), result.output
    period = json.loads(result.stdout)["period"]
    start, end = datetime.fromisoformat(period["start"]), datetime.fromisoformat(period["end"])
    assert end - start == timedelta(days=7)


def test_empty_period_from_a_dump_says_so_and_exits_0(tmp_path):
    """An empty period is an empty report for that period (issue 28 item 7), not a failure."""
    result = CliRunner().invoke(cli, ["report", "build", "--config", str(_conf(tmp_path)), *_input_args(tmp_path),
                                      "--since", "2020-01-01", "--until", "2020-01-02"])
    assert result.exit_code == 0, result.output
    assert "no job attempts in the period 2020-01-01" in result.stderr
    assert "cost None" not in result.output


@pytest.mark.parametrize("args,option", [
    (["--since", "bogus"], "'--since'"), (["--since", "2026-12-02", "--until", "2026"], "'--until'"),
    (["--format", "pdf"], "'--format'"), (["--delimiter", ""], "'--delimiter'"),
    (["--since", "0001-01-01", "--until", "0001-01-02"], "'--since'"),
])
def test_errors_name_the_option(tmp_path, args, option):
    result = CliRunner().invoke(cli, ["report", "build", "--config", str(_conf(tmp_path)), *_input_args(tmp_path),
                                      *args])
    assert result.exit_code == 2, result.output
    assert option in result.stderr and "<input>" not in result.output


def test_quiet_prints_nothing_on_success(tmp_path):
    conf = _conf(tmp_path)
    for args in (["--quiet", "report", "build"], ["report", "build", "-q"]):
        result = CliRunner().invoke(cli, [*args, "--config", str(conf), *_input_args(tmp_path),
                                          "--since", "2026-12-02", "--until", "2026-12-03"])
        assert result.exit_code == 0, result.output
        assert result.output == ""
        assert (tmp_path / "out" / "report.json").exists()
    # errors still speak
    result = CliRunner().invoke(cli, ["-q", "report", "build", "--config", str(conf), "--format", "pdf"])
    assert result.exit_code == 2 and "'--format'" in result.stderr


def _accept_conf(tmp_path: Path, text: str | None = None) -> Path:
    conf = tmp_path / "accept.conf"
    conf.write_text(text if text is not None else
                    f"[site]\ncluster_name = t\nresults_dir = {tmp_path}\n[partition gpu]\ngpus_per_node = 4\n")
    return conf


@pytest.mark.parametrize("args", [
    ["accept", "report", "--bogus"],
    ["accept", "report", "--since", "soon"],
    ["accept", "report", "--job", "14", "--since", "7d"],
    ["audit", "partition"],
    ["audit", "partition", "gpu", "--bogus"],
    ["audit", "--bogus"],
])
def test_nagios_usage_errors_are_unknown(tmp_path, args):
    result = CliRunner().invoke(cli, ["--config", str(_accept_conf(tmp_path)), *args], obj=AppContext())
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("UNKNOWN - ")


def test_nagios_config_errors_are_unknown_other_commands_keep_2(tmp_path):
    absent = str(tmp_path / "absent.conf")
    bad = _accept_conf(tmp_path, "[site]\nnot_a_key = 1\n")
    for conf in (absent, str(bad)):
        for where in ("before", "after"):
            args = ["accept", "report", "--json"]
            args = ["--config", conf, *args] if where == "before" else [*args, "--config", conf]
            result = CliRunner().invoke(cli, args, obj=AppContext())
            assert result.exit_code == 3, result.output
            assert result.stdout.startswith(f"UNKNOWN - {conf}")
        result = CliRunner().invoke(cli, ["report", "build", "--config", conf, "--input", str(DATA / "lab-pipe.txt")])
        assert result.exit_code == 2, result.output
        assert conf in result.stderr
    result = CliRunner().invoke(cli, ["audit", "partition", "gpu", "--config", absent], obj=AppContext())
    assert result.exit_code == 3 and "no such file (named by --config)" in result.stdout
    # $GPUCLUST_CONFIG names the file explicitly too
    result = CliRunner().invoke(cli, ["audit", "partition", "gpu"], obj=AppContext(), env={"GPUCLUST_CONFIG": absent})
    assert result.exit_code == 3 and "$GPUCLUST_CONFIG" in result.stdout


def test_unexpected_exception_exits_70_with_one_line(tmp_path, monkeypatch):
    import gpuclust.cli.config as config_cli

    def boom(path):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(config_cli, "check_config", boom)
    result = CliRunner().invoke(cli, ["config", "check", str(EXAMPLE)])
    assert result.exit_code == 70, result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "internal error" in line and "ZeroDivisionError: division by zero second line" in line
    assert "bug in gpuclust" in line and "GPUCLUST_DEBUG=1" in line
    # in a Nagios check too (70 is outside 0-3, so Nagios shows it as UNKNOWN)
    monkeypatch.setattr("gpuclust.accept.results.scan_results", lambda *a, **k: 1 / 0)
    result = CliRunner().invoke(cli, ["--config", str(_accept_conf(tmp_path)), "accept", "report"], obj=AppContext())
    assert result.exit_code == 70, result.output


# ---- the console script, as cron, Nagios and a shell run it ----------------------------------------------------

def _script() -> str:
    path = Path(sys.executable).parent / "gpuclust"
    assert path.exists(), f"console script not installed next to {sys.executable} (pip install -e .)"
    return str(path)


def _run(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("GPUCLUST_CONFIG", "GPUCLUST_DEBUG")}
    return subprocess.run([_script(), *args], capture_output=True, text=True, timeout=120, env={**full, **(env or {})})


def test_console_script_exit_codes(tmp_path):
    conf = _accept_conf(tmp_path)
    cp = _run(["audit", "partition", "--bogus"])
    assert cp.returncode == 3 and cp.stdout.startswith("UNKNOWN - No such option '--bogus'"), cp
    cp = _run(["accept", "report", "--config", str(tmp_path / "absent.conf")])
    assert cp.returncode == 3 and cp.stdout.startswith("UNKNOWN - "), cp
    cp = _run(["accept", "report", "--since", "yesterday", "--config", str(conf)])
    assert cp.returncode == 3 and "no acceptance results" in cp.stdout, cp  # Nagios UNKNOWN: nothing to judge
    cp = _run(["report", "build", "--config", str(tmp_path / "absent.conf")])
    assert cp.returncode == 2 and "absent.conf" in cp.stderr, cp
    cp = _run(["config", "check", "--config", str(EXAMPLE), "--quiet"])
    assert (cp.returncode, cp.stdout, cp.stderr) == (0, "", ""), cp
    cp = _run(["--config", str(tmp_path / "absent.conf"), "config", "show"])
    assert cp.returncode == 2 and "config file not found" in cp.stderr, cp


def test_console_script_internal_error_is_70(tmp_path):
    code = ("import gpuclust.cli.config as c\n"
            "def boom(path):\n    raise KeyError('x')\n"
            "c.check_config = boom\n"
            "from gpuclust.cli.main import main\nmain()\n")
    cp = subprocess.run([sys.executable, "-c", code, "config", "check", str(EXAMPLE)], capture_output=True,
                        text=True, timeout=120)
    assert cp.returncode == 70, cp
    assert len(cp.stderr.splitlines()) == 1 and "KeyError" in cp.stderr and "Traceback" not in cp.stderr
    cp = subprocess.run([sys.executable, "-c", code, "config", "check", str(EXAMPLE)], capture_output=True,
                        text=True, timeout=120, env={**os.environ, "GPUCLUST_DEBUG": "1"})
    assert cp.returncode == 1 and "Traceback" in cp.stderr


def test_console_script_closed_stdout_is_sigpipe_not_exit_1():
    """`gpuclust policy render | head -0`: the reader is gone before the first write; the command ends the way
    `cat` does (killed by SIGPIPE, 141 in the shell), with nothing on stderr."""
    read, write = os.pipe()
    os.close(read)  # the reader has gone before gpuclust starts: deterministic, no race with a real head
    try:
        env = {k: v for k, v in os.environ.items() if k != "GPUCLUST_CONFIG"}
        cp = subprocess.run([_script(), "--config", str(EXAMPLE), "policy", "render"], stdout=write,
                            stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    finally:
        os.close(write)
    assert cp.returncode == -signal.SIGPIPE, cp
    assert cp.stderr == ""


def test_shell_completion_from_the_config():
    env = {"_GPUCLUST_COMPLETE": "bash_complete", "GPUCLUST_CONFIG": str(EXAMPLE)}
    cp = _run([], {**env, "COMP_WORDS": "gpuclust audit partition ", "COMP_CWORD": "3"})
    assert cp.returncode == 0, cp
    assert "plain,gpu" in cp.stdout.splitlines(), cp.stdout
    cp = _run([], {**env, "COMP_WORDS": "gpuclust accept submit all -A p", "COMP_CWORD": "5"})
    assert cp.stdout.splitlines() == ["plain,physics"], cp.stdout
    cp = _run([], {**env, "COMP_WORDS": "gpuclust policy check --account ", "COMP_CWORD": "4"})
    assert {line.split(",", 1)[1] for line in cp.stdout.splitlines()} == {"physics", "ml", "ops"}, cp.stdout
    # a --config after the subcommand is the one completion reads
    cp = _run([], {"_GPUCLUST_COMPLETE": "bash_complete",
                   "COMP_WORDS": f"gpuclust accept submit all --config {DATA / 'site.conf'} -p ", "COMP_CWORD": "7"})
    assert {line.split(",", 1)[1] for line in cp.stdout.splitlines()} == {"gpu", "debug"}, cp.stdout
    cp = _run([], {"_GPUCLUST_COMPLETE": "bash_source"})
    assert cp.returncode == 0 and "_gpuclust_completion" in cp.stdout


def test_policy_check_keeps_sbatch_short_options():
    """sbatch's -q is --qos: the command that reads sbatch options does not take -q/--quiet for itself."""
    result = CliRunner().invoke(cli, ["policy", "check", "--config", str(EXAMPLE), "--user", "alice", "--json",
                                      "--slurm-version", "22.05", "--gres-types", "gpu", "-A", "physics", "-q",
                                      "normal", "-p", "gpu", "--comment", "team=physics,project=x"])
    assert result.exit_code in (0, 1), result.output
    assert json.loads(result.stdout)["job_desc"]["qos"] == "normal"
    result = CliRunner().invoke(cli, ["-q", "policy", "check", "--config", str(EXAMPLE), "--user", "alice",
                                      "--slurm-version", "22.05", "--", "-A", "physics", "-p", "gpu"])
    assert result.exit_code in (0, 1) and result.stdout == "", result.output
