"""`gpuclust guard` on the lab: real running jobs on real Slurm, their utilisation through the lab's real
Prometheus (fake-dcgm behind node_exporter), a real SMTP server (tests/smtpsink.py, aiosmtpd) and real scancel.

An idle job (2 GPUs at 0 %), a busy job (90 %) and an exempt job (0 %, `guard=off` in its comment) run; guard
runs again and again (warn_after 30 s, cancel_after 60 s, action = cancel). The idle job is warned once, then
cancelled with a last mail; the other two are never touched. With Prometheus unreachable nothing is acted on
and the exit code says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, job_state, lab_env_json, run_cmd, submit
from tests.smtpsink import SmtpSink, free_port

pytestmark = pytest.mark.slurm

FAKE_DCGM = REPO / "tests" / "slurm_lab" / "fake-dcgm"
WARN_S, CANCEL_S = 30, 60


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def prometheus(slurm_lab: Any) -> str:
    cp = subprocess.run([str(SLURM_LAB), "--name", slurm_lab.name, "up", "--telemetry"], capture_output=True,
                        text=True, timeout=300, stdin=subprocess.DEVNULL)
    if cp.returncode != 0:
        msg = f"slurm-lab up --telemetry rc={cp.returncode}:\n{cp.stderr[-3000:]}"
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    url = lab_env_json(slurm_lab.name)["env"].get("SLURM_LAB_PROMETHEUS")
    assert url
    return str(url)


def _conf(tmp_path: Path, url: str, smtp_port: int) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "site.conf"
    path.write_text(f"""[site]
cluster_name = lab
state_dir = {tmp_path / 'state'}
[gpu_type h100]
price_per_gpu_hour = 2.5
[costs]
currency = EUR
[telemetry]
prometheus_url = {url}
step = 1
timeout = 10s
[guard]
lookback = 5m
warn_after = {WARN_S}s
cancel_after = {CANCEL_S}s
action = cancel
user_optout_label = guard=off
address_template = {{user}}@lab.example.org
smtp_host = 127.0.0.1
smtp_port = {smtp_port}
smtp_timeout = 5s
textfile_dir = {tmp_path / 'textfile'}
""")
    return path


def _guard(conf: Path) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "GPUCLUST_CONFIG": str(conf), "PYTHONPATH": str(REPO)}
    cp = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "guard", "--json"], capture_output=True,
                        text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert cp.returncode in (0, 4), cp.stdout + cp.stderr
    return cp.returncode, json.loads(cp.stdout)


def test_guard_warns_once_then_cancels_only_the_idle_job(slurm_lab: Any, prometheus: str, tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "maildir").start()
    fd = f"{sys.executable} {FAKE_DCGM}"
    jobs: list[str] = []
    try:
        idle = submit(["-N1", "--gres=gpu:h100:2", "-A", "ml", "-J", "guard-idle", "-o", "/dev/null",
                       "--wrap", f"{fd} set --util 0 && sleep 400"])
        busy = submit(["-N1", "--gres=gpu:h100:1", "-A", "ml", "-J", "guard-busy", "-o", "/dev/null",
                       "--wrap", f"{fd} set --util 90 && sleep 400"])
        exempt = submit(["-N1", "--gres=gpu:h100:1", "-A", "ml", "-J", "guard-exempt", "-o", "/dev/null",
                         "--comment", "guard=off", "--wrap", f"{fd} set --util 0 && sleep 400"])
        jobs = [idle, busy, exempt]
        conf = _conf(tmp_path, prometheus, sink.port)

        actions: list[dict[str, Any]] = []
        verdicts: dict[str, set[str]] = {j: set() for j in jobs}
        deadline = time.monotonic() + 180
        while job_state(idle) in ("PENDING", "RUNNING", "CONFIGURING", None):
            assert time.monotonic() < deadline, f"idle job {idle} not cancelled in time: {actions}"
            _rc, doc = _guard(conf)
            actions += [a for a in doc["actions"] if a.get("job")]
            for j in doc["jobs"]:
                if j["job"] in verdicts:
                    verdicts[j["job"]].add(j["verdict"])
            if any(a["action"] == "cancel" for a in actions):
                break
            time.sleep(3)

        mine = [(a["job"], a["stage"], a["action"]) for a in actions]
        assert mine == [(idle, "warn", "notice"), (idle, "cancel", "cancel")], actions
        warn = actions[0]
        # warned at the warn time, plus at most a scrape and a run period (3 s here) and a run's own time
        assert WARN_S <= warn["idle_s"] <= WARN_S + 25, warn
        assert actions[1]["idle_s"] >= CANCEL_S and actions[1]["cost"] > 0
        assert "busy" in verdicts[busy] and verdicts[exempt] == {"exempt"}, verdicts

        # real scancel: the idle job ends CANCELLED, the other two still run
        end = time.monotonic() + 60
        while job_state(idle) not in ("CANCELLED",):
            assert time.monotonic() < end, job_state(idle)
            time.sleep(0.5)
        assert job_state(busy) == "RUNNING" and job_state(exempt) == "RUNNING"

        # one mail per stage, to the user, with both parts; more runs send nothing more
        for _ in range(2):
            _rc, doc = _guard(conf)
            assert [a for a in doc["actions"] if a.get("job")] == []
        mails = sink.messages()
        assert sorted(m["X-Gpuclust-Notice"] for m in mails) == [f"guard-{idle}-cancel", f"guard-{idle}-warn"]
        assert all(m["To"].endswith("@lab.example.org") for m in mails)
        log = (tmp_path / "state" / "guard" / "actions.jsonl").read_text().splitlines()
        assert [json.loads(x)["action"] for x in log if json.loads(x).get("job") == idle][:2] == ["notice", "cancel"]

        # Prometheus unreachable: no action, and the outage exit code
        dead = _conf(tmp_path / "dead", f"http://127.0.0.1:{free_port()}", sink.port)
        rc, doc = _guard(dead)
        assert rc == 4 and doc["status"] == "telemetry" and doc["actions"] == [], doc
        assert job_state(busy) == "RUNNING" and job_state(exempt) == "RUNNING"
    finally:
        sink.stop()
        for job in jobs:
            run_cmd(["scancel", job], check=False)
