"""`gpuclust job` on real Slurm and the lab's real Prometheus (fake dcgm-exporter values set by the jobs).

An ended 2-GPU job runs one GPU at 90 % with 4000 MiB used and leaves the other at 0 %: `gpuclust job --json`
must give the hand-computed figures (the oracle of test_telemetry_lab: the raw 1 s points read back from
Prometheus) within 1 %, and the idle-GPU and GPU-too-large findings. A running job of the unprivileged lab user,
asked by that user (sacct's own permissions), must show as running, from Prometheus, at its 70 %.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import click
import ClusterShell
import pytest

from tests.integration.labutil import REPO, run_cmd, submit, wait_for_sacct, wait_job_done
from tests.integration.test_telemetry_lab import FAKE_DCGM, _hand_figures, prometheus  # noqa: F401 (fixture)

pytestmark = pytest.mark.slurm


def _conf(prom: str, state: Path) -> Path:
    """A site config every user can read (pytest's tmp_path is root's only)."""
    d = Path(tempfile.mkdtemp(prefix="gpuclust-job-"))
    os.chmod(d, 0o755)
    conf = d / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\ntimezone = UTC\nstate_dir = {state}\n\n"
                    f"[telemetry]\nprometheus_url = {prom}\nstep = 1\nidle_threshold = 10\nidle_min = 10s\n")
    os.chmod(conf, 0o644)
    return conf


def _gpuclust(conf: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from gpuclust.cli.main import main; sys.argv[0] = 'gpuclust'; main()"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code, "--config", str(conf), *argv], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)


def _user_python(user: str) -> str:
    """This venv's Python when `user` can run it, else the system's."""
    probe = run_cmd(["su", user, "-s", "/bin/sh", "-c", f"{shlex.quote(sys.executable)} -c 'import click'"],
                    check=False)
    return sys.executable if probe.returncode == 0 else "/usr/bin/python3"


_STAGED: dict[str, Path] = {}


def _staged_for_users() -> Path:
    """gpuclust, its dependencies and the fake dcgm-exporter copied where every user can read them: the checkout may sit in
    a directory only root can enter (a clone under /root), which the unprivileged user's commands cannot read."""
    if "root" not in _STAGED:
        d = Path(tempfile.mkdtemp(prefix="gpuclust-job-code-"))
        os.chmod(d, 0o755)
        shutil.copytree(REPO / "gpuclust", d / "gpuclust", ignore=shutil.ignore_patterns("__pycache__"))
        for package in (click, ClusterShell):  # gpuclust job's only dependencies outside the standard library
            shutil.copytree(Path(package.__file__).parent, d / package.__name__,
                            ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(FAKE_DCGM, d / "fake-dcgm")
        for path in d.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() or path.name == "fake-dcgm" else 0o644)
        _STAGED["root"] = d
    return _STAGED["root"]


def _as_user(user: str, slurm_conf: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """argv as `user` (su), with the lab's SLURM_CONF, from a copy of gpuclust and click every user can read
    (`gpuclust job` needs nothing else), on this venv's Python when the user can run it, else the system's."""
    py = _user_python(user)
    cmd = (f"SLURM_CONF={shlex.quote(slurm_conf)} PATH={shlex.quote(os.environ['PATH'])} "
           f"PYTHONPATH={shlex.quote(str(_staged_for_users()))} {shlex.quote(py)} -c "
           f"{shlex.quote('import sys; from gpuclust.cli.main import main; sys.argv[0] = chr(103); main()')} "
           + " ".join(shlex.quote(a) for a in argv))
    return run_cmd(["su", user, "-s", "/bin/sh", "-c", cmd], check=False, timeout=120)


def test_ended_job_figures_match_the_samples_and_find_the_idle_gpu(slurm_lab, prometheus, tmp_path):  # noqa: F811
    fd = f"{sys.executable} {FAKE_DCGM}"
    script = ("G0=${SLURM_JOB_GPUS%%,*}; G1=${SLURM_JOB_GPUS##*,}; "
              f"{fd} set --gpu $G0 --util 90 --fb-used 4000 && {fd} set --gpu $G1 --util 0 && sleep 24")
    job = submit(["-N1", "--gres=gpu:h100:2", "-A", "ml", "-t", "600", "-J", f"job-view-{uuid.uuid4().hex[:6]}",
                  "-o", "/dev/null", "--wrap", script])
    assert wait_job_done(job, timeout=180) == "COMPLETED"
    wait_for_sacct(job)
    time.sleep(3)  # the epilog's unmapping reaches Prometheus by the next scrape

    cp = _gpuclust(_conf(prometheus, tmp_path / "state"), "job", "--json", job)
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["errors"] == []
    (j,) = doc["jobs"]
    use = j["gpu_use"]
    assert j["source"] == "prometheus" and not j["running"] and j["gpu_count"] == 2, j
    assert use["allocated_gpu_hours"] == pytest.approx(2 * j["elapsed_s"] / 3600, rel=1e-4)
    assert 0.8 <= use["coverage"] <= 1.0, use
    mean, held = _hand_figures(prometheus, job)
    assert use["util_mean_pct"] == pytest.approx(mean, rel=0.01), (mean, use)
    assert use["held_idle_gpu_hours"] * 3600 == pytest.approx(held, rel=0.01), (held, use)
    assert use["busy_gpu_hours"] == pytest.approx(use["covered_gpu_hours"] * use["util_mean_pct"] / 100, rel=1e-4)
    assert use["util_max_pct"] == 90 and use["gpu_mem_max_mib"] == 4000, use
    gpus = sorted(j["gpus"], key=lambda g: g["util_max_pct"])
    assert [g["util_max_pct"] for g in gpus] == [0, 90], gpus
    assert gpus[0]["held_idle_s"] > 10 and len(gpus[1]["util_profile"]) == 120, gpus
    kinds = [f["kind"] for f in j["findings"]]
    assert "idle_gpu" in kinds and "gpu_too_large" in kinds, j["findings"]
    idle = next(f for f in j["findings"] if f["kind"] == "idle_gpu")
    assert idle["advice"] == "ask for 1 GPU" and idle["evidence"]["gpu"] == gpus[0]["gpu"], idle

    text = _gpuclust(_conf(prometheus, tmp_path / "state"), "job", job)
    assert text.returncode == 0 and f"job {job}" in text.stdout and "ask for 1 GPU" in text.stdout, text


def test_running_job_of_the_unprivileged_user_asked_by_that_user(slurm_lab, prometheus, tmp_path):  # noqa: F811
    user = slurm_lab["unprivileged_user"]
    # The job only sleeps; the test sets its GPU's utilisation from outside (slurm-lab gpu-set, as root): a lab
    # from a Debian root has no Python inside it that the unprivileged user may run.
    sb = _as_user_sbatch(user, slurm_lab.slurm_conf,
                         ["-N1", "--gres=gpu:h100:1", "-A", "physics", "-t", "10", "-o", "/dev/null",
                          "--wrap", "sleep 300"])
    try:
        node, gpu = _node_and_gpu(sb)
        run_cmd([str(REPO / "tests" / "slurm_lab" / "slurm-lab"), "--name", slurm_lab["name"], "gpu-set", node, gpu,
                 "--util", "70"])
        conf = _conf(prometheus, tmp_path / "state")
        deadline = time.monotonic() + 90
        while True:
            cp = _as_user(user, slurm_lab.slurm_conf, ["--config", str(conf), "job", "--json", sb])
            if cp.returncode == 2 and "no such job" in cp.stderr:  # slurmdbd has not recorded the start yet
                assert time.monotonic() < deadline, cp.stderr
                time.sleep(1)
                continue
            assert cp.returncode == 0, cp.stderr
            (j,) = json.loads(cp.stdout)["jobs"]
            if j["running"] and j["source"] == "prometheus" and (j["gpu_use"]["util_max_pct"] or 0) >= 70 \
                    and j["gpu_use"]["covered_gpu_hours"] * 3600 >= 5:
                break
            assert time.monotonic() < deadline, j
            time.sleep(1)
        assert j["user"] == user and j["end"] is None, j
        assert j["gpu_use"]["util_max_pct"] == 70, j
        assert j["gpu_use"]["held_idle_gpu_hours"] == 0, j
    finally:
        run_cmd(["scancel", sb], check=False)
    other = _as_user(user, slurm_lab.slurm_conf, ["--config", str(conf), "job", "999999999"])
    assert other.returncode == 2 and "job 999999999: sacct knows no such job" in other.stderr, other


def _node_and_gpu(job: str) -> tuple[str, str]:
    """The running job's node and its GPU's index (`scontrol show job -d`: GRES=gpu:h100:1(IDX:2)), once it runs."""
    deadline = time.monotonic() + 120
    while True:
        shown = run_cmd(["scontrol", "show", "job", "-d", job], check=False).stdout
        found = re.search(r"\bNodes=(\S+) .*?GRES=\S*?\(IDX:(\d+)", shown)
        if found and "JobState=RUNNING" in shown:
            return found.group(1), found.group(2)
        assert time.monotonic() < deadline, shown
        time.sleep(0.5)


def _as_user_sbatch(user: str, slurm_conf: str, argv: list[str]) -> str:
    cmd = f"SLURM_CONF={shlex.quote(slurm_conf)} sbatch --parsable " + " ".join(shlex.quote(a) for a in argv)
    cp = run_cmd(["su", user, "-s", "/bin/sh", "-c", cmd], timeout=60)
    return cp.stdout.strip().split(";")[0]
