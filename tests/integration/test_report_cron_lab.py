"""examples/cron/gpuclust-report against the lab: dated directories, `latest`, retention, and a failing fetch or
config that stops before the build with a non-zero exit (issue 15 item 4)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.integration.labutil import submit, wait_for_sacct, wait_job_done

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "cron" / "gpuclust-report"

SITE_CONF = """
[site]
cluster_name = cronlab
timezone = UTC
state_dir = {state}
report_dir = {reports}

[gpu_type h100]
price_per_gpu_hour = 2.50

[partition gpu]
gpu_type = h100
price_per_gpu_hour = 2.50
"""


def _gpuclust() -> str:
    beside = Path(sys.executable).parent / "gpuclust"
    found = str(beside) if beside.exists() else shutil.which("gpuclust")
    assert found, "the gpuclust command is not installed"
    return found


def _run(tmp_path: Path, conf: Path, *, path_prefix: Path | None = None, **settings: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf), GPUCLUST_REPORT_DEFAULTS="/dev/null", GPUCLUST=_gpuclust(),
               TMPDIR=str(tmp_path), **settings)
    env.pop("JOURNAL_STREAM", None)
    if path_prefix is not None:
        env["PATH"] = f"{path_prefix}:{env['PATH']}"
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=300,
                          stdin=subprocess.DEVNULL)


def _dated(reports: Path) -> list[str]:
    return sorted(p.name for p in reports.iterdir() if p.is_dir() and not p.is_symlink() and p.name[0].isdigit())


@pytest.mark.slurm
def test_cron_script_on_lab(slurm_lab, tmp_path):
    today = datetime.now(timezone.utc).date()
    job = submit(["-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", "-A", "ml", "-p", "gpu", "--gres=gpu:h100:1",
                  "-J", "cron-report", "--wrap", "true"])
    wait_job_done(job)
    wait_for_sacct(job)
    reports = tmp_path / "reports"
    conf = tmp_path / "site.conf"
    conf.write_text(SITE_CONF.format(state=tmp_path / "state", reports=reports))
    day = today.isoformat()

    # A normal run: the dated directory, `latest` pointing at it, the report inside, silent on success.
    r = _run(tmp_path, conf, REPORT_DAY=day, FETCH_DAYS="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""  # cron mails only when something went wrong
    assert _dated(reports) == [day]
    latest = reports / "latest"
    assert latest.is_symlink() and os.readlink(latest) == day
    data = json.loads((latest / "report.json").read_text())
    assert data["cluster"] == "cronlab" and data["period"]["start"].startswith(day)
    assert job in {f["job_id"] for f in data["top_failures"]} or data["totals"]["runs"] >= 1
    assert (latest / "gpuclust.prom").stat().st_size > 0
    assert not [p for p in reports.iterdir() if p.name.startswith((".staging", ".old", ".latest"))]

    # A failing fetch (sacct exits 1): non-zero exit, no build, the previous report and `latest` untouched.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sacct").write_text("#!/bin/sh\necho 'sacct: error: slurmdbd: connection refused' >&2\nexit 1\n")
    (fake / "sacct").chmod(0o755)
    before = (latest / "report.json").stat().st_mtime_ns
    yesterday = (today - timedelta(days=1)).isoformat()
    r = _run(tmp_path, conf, path_prefix=fake, REPORT_DAY=yesterday, FETCH_DAYS="1")
    assert r.returncode not in (0, 1), (r.returncode, r.stderr)  # gpuclust's own code for a failing Slurm
    assert "fetch" in r.stderr and "no report built" in r.stderr, r.stderr
    assert _dated(reports) == [day] and os.readlink(latest) == day
    assert (latest / "report.json").stat().st_mtime_ns == before
    assert not [p for p in reports.iterdir() if p.name.startswith(".staging")]

    # A bad config: exit 2 (gpuclust's config error), nothing fetched or built.
    bad = tmp_path / "bad.conf"
    bad.write_text(conf.read_text().replace("timezone = UTC", "timezone = UTC\nno_such_key = 1"))
    r = _run(tmp_path, bad, REPORT_DAY=yesterday)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "no_such_key" in r.stderr
    assert _dated(reports) == [day]

    # Retention: dated directories older than KEEP_DAYS go; then KEEP_COUNT keeps the newest N; `latest` stays.
    for old in ("2020-01-01", "2020-01-02", (today - timedelta(days=3)).isoformat(),
                (today - timedelta(days=2)).isoformat()):
        (reports / old).mkdir()
        (reports / old / "report.json").write_text("{}")
    (reports / "notes").mkdir()  # not a dated directory: never touched
    r = _run(tmp_path, conf, REPORT_DAY=day, FETCH_DAYS="0", KEEP_DAYS="30", VERBOSE="1")
    assert r.returncode == 0, r.stderr
    assert "2 old report(s) removed" in r.stdout
    assert _dated(reports) == [(today - timedelta(days=3)).isoformat(), (today - timedelta(days=2)).isoformat(), day]
    r = _run(tmp_path, conf, REPORT_DAY=day, FETCH_DAYS="0", KEEP_COUNT="2")
    assert r.returncode == 0, r.stderr
    assert _dated(reports) == [(today - timedelta(days=2)).isoformat(), day]
    assert os.readlink(latest) == day and (reports / "notes").is_dir()

    # A backfill of an older day does not move `latest` back. The lab has no jobs yesterday: build answers 1
    # (empty period) and the empty report is still published, so the history has no hole.
    r = _run(tmp_path, conf, REPORT_DAY=yesterday, FETCH_DAYS="1", KEEP_DAYS="0")
    assert r.returncode == 0, r.stderr
    assert yesterday in _dated(reports) and os.readlink(latest) == day

    # A bad setting is the script's own error (1), before anything runs.
    r = _run(tmp_path, conf, KEEP_DAYS="ninety")
    assert r.returncode == 1 and "KEEP_DAYS" in r.stderr
