"""Issue 30 item 3: the cron line and the systemd units an admin deploys (examples/cron, examples/systemd).

The cron line runs under `env -i` with only the variables the cron file sets, as cron does, with the README's
install location (/opt/gpuclust/bin) mapped to a stand-in folder; the units are read as systemd reads them and
scored with `systemd-analyze security --offline=true` where systemd-analyze exists.
"""

from __future__ import annotations

import configparser
import fcntl
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CRON = REPO / "examples" / "cron" / "gpuclust-report.cron"
SCRIPT = REPO / "examples" / "cron" / "gpuclust-report"
SYSTEMD = REPO / "examples" / "systemd"
SERVICE = SYSTEMD / "gpuclust-report.service"
ONFAILURE = SYSTEMD / "gpuclust-onfailure@.service"
TIMER = SYSTEMD / "gpuclust-report.timer"
NOTIFY = SYSTEMD / "gpuclust-onfailure"
INSTALL_BIN = "/opt/gpuclust/bin"  # README "Install"
MAX_EXPOSURE = 4.0

SITE_CONF = """
[site]
cluster_name = crontest
timezone = UTC
state_dir = {state}
report_dir = {reports}
"""

# A stand-in sacct: an idle cluster (a header of the fields gpuclust asked for, no rows).
FAKE_SACCT = """#!/usr/bin/env python3
import sys
args = sys.argv[1:]
if "--version" in args or "-V" in args:
    print("slurm 22.05.8")
    sys.exit(0)
delim = next((a.split("=", 1)[1] for a in args if a.startswith("--delimiter=")), "|")
print(delim.join(args[args.index("-o") + 1].split(",") if "-o" in args else []))
"""


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _gpuclust() -> str:
    beside = Path(sys.executable).parent / "gpuclust"
    found = str(beside) if beside.exists() else shutil.which("gpuclust")
    assert found, "the gpuclust command is not installed"
    return found


# ---- cron ----------------------------------------------------------------------------------------------------

def _cron_file() -> tuple[dict[str, str], str, str]:
    """(environment lines, user, command) of the cron file's one job line."""
    env: dict[str, str] = {}
    jobs = []
    for line in CRON.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)", line)
        if match:
            env[match[1]] = match[2].strip().strip('"')
        else:
            jobs.append(line)
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 6)
    return env, fields[5], fields[6]


def test_cron_file_sets_path_locks_and_reports_failures():
    env, user, command = _cron_file()
    assert user == "gpuclust"  # the dedicated user, never root
    assert env["PATH"].split(":")[0] == INSTALL_BIN and "/usr/bin" in env["PATH"].split(":")
    assert env["SHELL"] == "/bin/sh" and "MAILTO" in env
    assert command.startswith("flock -n ") and "/usr/local/sbin/gpuclust-report" in command
    assert "logger -p user.err" in command and "%" not in command  # cron turns % into newlines


def _run_cron_line(tmp_path: Path, *, drop_path: bool = False, extra: dict[str, str] | None = None,
                   hold_lock: bool = False) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The cron file's job line under `env -i` and /bin/sh, as cron runs it, with stand-ins for the install
    location (a folder holding gpuclust, sacct and a logger that records), the script and the lock."""
    env, _user, command = _cron_file()
    bin_dir = tmp_path / "opt-gpuclust-bin"
    bin_dir.mkdir()
    (bin_dir / "gpuclust").symlink_to(_gpuclust())
    _executable(bin_dir / "sacct", FAKE_SACCT)
    logged = tmp_path / "logger.txt"
    _executable(bin_dir / "logger", f'#!/bin/sh\necho "$*" >> {logged}\n')
    conf = tmp_path / "site.conf"
    conf.write_text(SITE_CONF.format(state=tmp_path / "state", reports=tmp_path / "reports"))
    lock = tmp_path / "cron.lock"
    command = (command.replace("/usr/local/sbin/gpuclust-report", str(SCRIPT))
               .replace("/run/lock/gpuclust-report.lock", str(lock)))
    env = {k: v.replace(INSTALL_BIN, str(bin_dir)) for k, v in env.items()}
    env.update(GPUCLUST_CONFIG=str(conf), GPUCLUST_REPORT_DEFAULTS="/dev/null", FETCH_DAYS="1",
               TMPDIR=str(tmp_path), **(extra or {}))
    if drop_path:
        env.pop("PATH")  # cron's own default
        env["PATH"] = "/usr/bin:/bin"
    argv = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", command]
    with open(lock, "w") as held:
        if hold_lock:  # the previous night's run, still going: flock(1) and fcntl.flock are the same flock(2)
            fcntl.flock(held, fcntl.LOCK_EX)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return done, logged


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
def test_cron_line_runs_under_env_i(tmp_path):
    done, logged = _run_cron_line(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "" and done.stderr == ""  # cron mails only when something went wrong
    reports = tmp_path / "reports"
    dated = [p.name for p in reports.iterdir() if re.fullmatch(r"\d{4}-\d{2}-\d{2}", p.name)]
    assert len(dated) == 1 and os.readlink(reports / "latest") == dated[0]
    assert (reports / dated[0] / "report.json").is_file()
    assert "report for" in logged.read_text()  # the one-line summary in syslog


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
def test_cron_line_without_its_path_fails_loudly(tmp_path):
    """Under cron's default PATH the README's install location is not found: the reason the file sets PATH.
    The failure is mailed (stderr) and logged."""
    done, _logged = _run_cron_line(tmp_path, drop_path=True)
    # the line's own status is logger's (cron ignores it); what counts is the mail (stderr)
    assert "gpuclust: command not found" in done.stderr and "FAILED" in done.stderr, done.stderr
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").glob("20*"))


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
@pytest.mark.parametrize("gpuclust", ["", "/nonexistent/bin/gpuclust"])
def test_script_names_the_missing_command(tmp_path, gpuclust):
    """gpuclust not on PATH (or GPUCLUST naming nothing) is said as such, never as a site config that does not
    load (issue 45 item 11)."""
    done, logged = _run_cron_line(tmp_path, drop_path=not gpuclust, extra={"GPUCLUST": gpuclust} if gpuclust else None)
    name = gpuclust or "gpuclust"
    assert f"FAILED: {name}: command not found" in done.stderr and "(exit 127)" in done.stderr, done.stderr
    assert "does not load" not in done.stderr, done.stderr
    if gpuclust:  # (with cron's default PATH the stand-in logger is not found either)
        assert f"{name}: command not found" in logged.read_text()


@pytest.mark.skipif(shutil.which("flock") is None, reason="flock (util-linux) not installed")
def test_cron_line_skips_a_night_that_overlaps_and_logs_it(tmp_path):
    done, logged = _run_cron_line(tmp_path, hold_lock=True)
    assert not (tmp_path / "reports").exists()  # the script never started
    assert "overlapped" in logged.read_text() and "exit 1" in logged.read_text()


# ---- systemd -------------------------------------------------------------------------------------------------

def _unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",), comment_prefixes=("#", ";"),
                                          interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    parser.read_string(path.read_text())
    return parser


def test_report_service_runs_sandboxed_as_its_own_user():
    unit = _unit(SERVICE)
    service = unit["Service"]
    assert service["User"] == "gpuclust" and service["Group"] == "gpuclust"
    assert service["ProtectSystem"] == "strict"
    assert "/var/lib/gpuclust" in service["ReadWritePaths"].split()
    assert service["NoNewPrivileges"] == "yes" and service["PrivateTmp"] == "yes"
    assert INSTALL_BIN in service["Environment"] or any(
        INSTALL_BIN in line for line in SERVICE.read_text().splitlines() if line.startswith("Environment=PATH"))
    on_failure = unit["Unit"]["OnFailure"]
    assert on_failure == "gpuclust-onfailure@%n.service" and ONFAILURE.is_file()
    assert _unit(ONFAILURE)["Service"]["ExecStart"].startswith("/usr/local/sbin/gpuclust-onfailure ")


def test_timer_catches_up_missed_runs():
    timer = _unit(TIMER)["Timer"]
    assert timer["Persistent"] == "true" and timer["OnCalendar"]


def _offline_security_supported() -> bool:
    if shutil.which("systemd-analyze") is None:
        return False
    done = subprocess.run(["systemd-analyze", "security", "--help"], capture_output=True, text=True, timeout=60)
    return "--offline" in done.stdout


@pytest.mark.skipif(not _offline_security_supported(),
                    reason="systemd-analyze with `security --offline` (systemd 250+) not installed")
@pytest.mark.parametrize("unit", [SERVICE, ONFAILURE], ids=lambda p: p.name)
def test_systemd_analyze_security_scores_under_4(unit, tmp_path):
    copy = tmp_path / unit.name  # an instance name for the template unit, as systemd would start it
    copy = copy.with_name(unit.name.replace("@.", "@gpuclust-report.service."))
    shutil.copy(unit, copy)
    done = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(copy)],
                          capture_output=True, text=True, timeout=120)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout + done.stderr)
    assert match, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert float(match[1]) < MAX_EXPOSURE, done.stdout


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_units_have_no_unknown_settings(tmp_path):
    """systemd-analyze verify reads the units as systemd would, man pages included (Documentation=man:..., after
    the README's install step `gpuclust man --write DIR`); only the not-yet-installed scripts may be missing."""
    units = []
    for unit in (SERVICE, TIMER, ONFAILURE):
        copy = tmp_path / unit.name.replace("@.", "@gpuclust-report.service.")
        shutil.copy(unit, copy)
        units.append(str(copy))
    man_root = tmp_path / "man"
    installed = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "man", "--write", str(man_root / "man1")],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    check_man = "--man=yes" if shutil.which("man") else "--man=no"
    done = subprocess.run(["systemd-analyze", "verify", check_man, *units], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, SYSTEMD_LOG_LEVEL="warning", MANPATH=str(man_root)))
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if line.strip() and "is not executable: No such file or directory" not in line]
    assert problems == [], problems


# ---- the OnFailure notifier ----------------------------------------------------------------------------------

def test_onfailure_logs_and_mails(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = tmp_path / "out"
    _executable(bin_dir / "logger", f'#!/bin/sh\necho "logger $*" >> {out}\n')
    _executable(bin_dir / "sendmail", f'#!/bin/sh\necho "sendmail $*" >> {out}\ncat >> {out}\n')
    _executable(bin_dir / "systemctl", '#!/bin/sh\necho "status of $*"\n')
    _executable(bin_dir / "journalctl", '#!/bin/sh\necho "log of $*"\n')
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "MAILTO": "ops@example.org"}
    done = subprocess.run(["/bin/sh", str(NOTIFY), "gpuclust-report.service"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "logger -p user.err -t gpuclust-report -- FAILED: gpuclust-report.service" in text
    assert "sendmail -t" in text and "To: ops@example.org" in text
    assert "Subject: [gpuclust] gpuclust-report.service failed" in text
    assert "status of" in text and "log of" in text and "--unit=gpuclust-report.service" in text

    (bin_dir / "sendmail").unlink()
    out.unlink()
    done = subprocess.run(["/bin/sh", str(NOTIFY), "gpuclust-report.service"],
                          env={"PATH": f"{bin_dir}:/nonexistent", "MAILTO": ""}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "FAILED" in out.read_text() and "sendmail" not in out.read_text()
