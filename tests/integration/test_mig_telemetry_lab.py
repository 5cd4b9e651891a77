"""Utilisation on MIG end to end (issue 44 part 2): node5 is one H100 cut into 1g.10gb x 4 and 3g.40gb x 1, and
fake-dcgm serves its slices as dcgm-exporter serves MIG instances: DCGM_FI_DEV_GPU_UTIL 0 whatever they do (as
real, dcgm-exporter issue #216), DCGM_FI_PROF_GR_ENGINE_ACTIVE their activity, and the HPC job mapping per card
(every instance carries every job on the card, as hpc.go reads it).

A busy job on the 3g.40gb slice (engine activity 0.9, set from the host with `slurm-lab gpu-set --engine-active`)
must never be called held idle by `gpuclust report build` or `gpuclust job`, though its DCGM_FI_DEV_GPU_UTIL read 0
all along; an idle one on the same slice must be; a 1g.10gb job beside the busy one (four instances of its profile
carry its label: which was its cannot be told) is unknown, never held idle.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, run_cmd, submit, wait_for_sacct, wait_job_done
from tests.integration.test_telemetry_lab import FAKE_DCGM, _job_gpus, prometheus  # noqa: F401 (fixture)

pytestmark = pytest.mark.slurm

RUN_S = 16  # each job's sleep; idle_min 8 s: the busy job's first seconds (engine 0 until gpu-set) are never idle


def _gpuclust(conf: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), *argv],
                          capture_output=True, text=True, timeout=180, env=env, stdin=subprocess.DEVNULL)


def _mig_job(gres: str, name: str) -> str:
    return submit(["-p", "mig", f"--gres=gpu:{gres}:1", "-A", "ml", "-t", "10", "-J", name, "-o", "/dev/null",
                   "--wrap", f"sleep {RUN_S}"])


def test_busy_mig_slice_is_never_held_idle_and_an_idle_one_is(slurm_lab, prometheus, tmp_path):  # noqa: F811
    since = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=5)
    busy = _mig_job("3g.40gb", "mig-busy")
    node, devices = _job_gpus(busy)
    assert (node, devices) == ("node5", {"4"})
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "gpu-set", "node5", "4", "--engine-active", "0.9"])
    busy_from = datetime.now(timezone.utc)  # (at the latest: engine activity 0 from the job's start until then)
    beside = _mig_job("1g.10gb", "mig-beside")
    shown = run_cmd([sys.executable, str(FAKE_DCGM), "--state", slurm_lab.env["SLURM_LAB_STATE"], "show", "node5"]).stdout
    gr = [line for line in shown.splitlines() if 'GPU_I_ID="2"' in line and f'hpc_job="{busy}"' in line]
    assert any(line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") and line.endswith(" 0.900000") for line in gr), gr
    assert any(line.startswith("DCGM_FI_DEV_GPU_UTIL{") and line.endswith(" 0") for line in gr), gr  # as real
    assert wait_job_done(busy, timeout=120) == "COMPLETED" and wait_job_done(beside, timeout=120) == "COMPLETED"
    idle = _mig_job("3g.40gb", "mig-idle")  # the same slice, nothing set: engine activity 0
    assert wait_job_done(idle, timeout=120) == "COMPLETED"
    for job in (busy, beside, idle):
        wait_for_sacct(job)
    until = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=5)

    state = tmp_path / "state"
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\ntimezone = UTC\nstate_dir = {state}\n\n"
                    f"[telemetry]\nprometheus_url = {prometheus}\nstep = 1\nidle_threshold = 10\nidle_min = 8s\n")
    window = ["--since", since.isoformat(), "--until", until.isoformat()]
    fetched = _gpuclust(conf, "report", "fetch", *window, "--json")
    assert fetched.returncode == 0, fetched.stderr
    out = tmp_path / "out"
    built = _gpuclust(conf, "report", "build", *window, "--out", str(out), "--format", "json,csv")
    assert built.returncode == 0, built.stderr
    with (out / "gpu_use_jobs.csv").open() as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    b, i, side = rows[busy], rows[idle], rows[beside]
    # 90% from busy_from (its next scrape, 1 s, a second more under load) to the end, 0 before: the mean of a
    # loaded machine's later set is lower, never below that share of 90
    start, end = (datetime.fromisoformat(b[k].replace("Z", "+00:00")) for k in ("start", "end"))
    busy_share = max(0.0, (end - busy_from).total_seconds() - 2) / max(1.0, (end - start).total_seconds())
    assert b["telemetry"] == "prometheus" and 90 * busy_share - 0.5 <= float(b["util_mean_pct"]) <= 90 + 1e-6, (
        b, busy_share)
    assert float(b["held_idle_gpu_hours"]) == 0, b  # DCGM_FI_DEV_GPU_UTIL read 0 all along
    assert i["telemetry"] == "prometheus" and float(i["util_mean_pct"]) < 10, i
    # held idle, in GPU-equivalent hours (the glossary's allocated unit): a 3g.40gb slice is 3/7 of its card
    assert float(i["held_idle_gpu_hours"]) * 3600 >= (RUN_S - 8) * 3 / 7, i
    assert float(i["held_idle_gpu_hours"]) <= float(i["allocated_gpu_hours"]) * (1 + 1e-9), i
    assert side["telemetry"] == "" and side["held_idle_gpu_hours"] == "" and side["covered_gpu_hours"] == "", side
    doc = json.loads((out / "report.json").read_text())
    warnings = doc["gpu_use"]["prometheus"]["warning_list"]
    assert any("on MIG slices" in w and f"{beside} (4 1g.10gb instances, 1 held)" in w for w in warnings), warnings

    shown_jobs = _gpuclust(conf, "job", "--json", busy, idle)
    assert shown_jobs.returncode == 0, shown_jobs.stderr
    by_id = {j["job_id"]: j for j in json.loads(shown_jobs.stdout)["jobs"]}
    for job, held in ((busy, False), (idle, True)):
        j = by_id[job]
        assert j["source"] == "prometheus", j
        (gpu,) = j["gpus"]
        assert (gpu["node"], gpu["gpu"], gpu["instance"], gpu["profile"]) == ("node5", "0", "2", "3g.40gb"), gpu
        assert (j["gpu_use"]["held_idle_gpu_hours"] > 0) is held, j["gpu_use"]
