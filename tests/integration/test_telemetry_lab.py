"""Lab telemetry end to end: a job's GPU utilisation reaches the lab's real Prometheus with the job's id.

`slurm-lab up --telemetry` runs a real node_exporter per node and a real Prometheus; the lab's Slurm Prolog maps the
job's GPUs (dcgm-exporter's --hpc-job-mapping-dir layout) and fake-dcgm, the stand-in for dcgm-exporter on the
fake GPUs, writes DCGM_FI_DEV_* series into each node's textfile directory.  Here a 1-node, 2-GPU job sets its GPUs
to 95 % for about 6 s, then to 0 % for about 6 s, and the test reads the series back through Prometheus's HTTP API.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, lab_env_json, run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm

FAKE_DCGM = REPO / "tests" / "slurm_lab" / "fake-dcgm"
# no proxy from the environment: the lab's Prometheus listens on the lab bridge address
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def prometheus(slurm_lab) -> Iterator[str]:
    """`slurm-lab up --telemetry` (idempotent on a running lab); yields SLURM_LAB_PROMETHEUS."""
    cp = subprocess.run(
        [str(SLURM_LAB), "--name", slurm_lab.name, "up", "--telemetry"],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )
    if cp.returncode != 0:
        msg = f"slurm-lab up --telemetry rc={cp.returncode}:\n{cp.stderr[-3000:]}"
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    url = lab_env_json(slurm_lab.name)["env"].get("SLURM_LAB_PROMETHEUS")
    assert url, "slurm-lab env exports no SLURM_LAB_PROMETHEUS although telemetry is up"
    yield url


def _api(base: str, path: str, **params: Any) -> Any:
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with _OPENER.open(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def _job_gpus(job_id: str, timeout: float = 60) -> tuple[str, set[str]]:
    """(node, GPU indices) of a running 1-node job from `scontrol show job -d` (GRES=gpu:h100:2(IDX:0-1); an
    ended job shows no IDX any more)."""
    deadline = time.monotonic() + timeout
    while True:
        out = run_cmd(["scontrol", "show", "job", "-d", "-o", job_id]).stdout
        m = re.search(r"\bNodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=\S*?IDX:([0-9,-]+)", out)
        if m:
            break
        assert "JobState=PENDING" in out or "JobState=CONFIGURING" in out, f"job ran without GPU indices: {out}"
        assert time.monotonic() < deadline, f"job {job_id} not running after {timeout} s: {out}"
        time.sleep(0.3)
    gpus: set[str] = set()
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        gpus |= {str(i) for i in range(int(lo), int(hi or lo) + 1)}
    return m.group(1), gpus


def test_job_gpu_utilisation_reaches_prometheus_with_hpc_job_label(slurm_lab, prometheus):
    query = "DCGM_FI_DEV_GPU_UTIL{hpc_job=\"%s\"}"
    fd = f"{sys.executable} {FAKE_DCGM}"  # the venv's Python: a Debian root (other Slurm versions) has no python3
    script = f"{fd} set --util 95 && sleep 6 && {fd} set --util 0 && sleep 6"
    out = f"/tmp/gpuclust-telemetry-{uuid.uuid4().hex[:8]}.out"
    t_submit = time.time()
    job = submit(["-N1", "--gres=gpu:h100:2", "-A", "ml", "-J", "telemetry-util", "-o", out, "--wrap", script])
    node, gpus = _job_gpus(job)
    assert len(gpus) == 2, gpus
    state = wait_job_done(job, timeout=120)
    log = open(out).read() if os.path.exists(out) else "(no output)"
    assert state == "COMPLETED", f"job {job}: {state}\n{log}"

    # the epilog unmaps the job; once Prometheus has scraped that, the job's series are stale (gone)
    deadline = time.monotonic() + 30
    while _api(prometheus, "/api/v1/query", query=query % job)["result"]:
        assert time.monotonic() < deadline, f"job {job}'s series still present 30 s after it ended"
        time.sleep(0.5)
    t_gone = time.time()

    data = _api(prometheus, "/api/v1/query_range", query=query % job, start=f"{t_submit - 5:.3f}",
                end=f"{time.time():.3f}", step="1")
    series = data["result"]
    assert len(series) == 2, json.dumps(series)[:2000]
    assert {s["metric"]["gpu"] for s in series} == gpus
    for s in series:
        labels = s["metric"]
        assert labels["instance"] == node and labels["Hostname"] == node, labels
        assert labels["job"] == "node" and labels["modelName"] == "NVIDIA H100 80GB HBM3", labels
        values = [(float(t), v) for t, v in s["values"]]
        assert {v for _, v in values} <= {"0", "95"}, values
        high = [t for t, v in values if v == "95"]
        assert high, f"no 95 % sample for GPU {labels['gpu']}: {values}"
        assert any(v == "0" and t > max(high) for t, v in values), f"no 0 % after the 95 % phase: {values}"
        assert values[-1][0] <= t_gone + 1, values  # nothing after the series went stale

    # the same GPUs go on, unmapped (no hpc_job label) and idle -- unless a later job (another session on this
    # lab) took one already
    now = _api(prometheus, "/api/v1/query", query=f'DCGM_FI_DEV_GPU_UTIL{{instance="{node}"}}')["result"]
    taken = {s["metric"]["gpu"] for s in now if s["metric"].get("hpc_job")}
    idle = {s["metric"]["gpu"]: s["value"][1] for s in now if not s["metric"].get("hpc_job")}
    for g in gpus - taken:
        assert idle.get(g) == "0", (g, idle)


def _sacct_dump(job_ids: list[str], path: str) -> None:
    """The jobs' rows and steps, --parsable2 with a header, in the registry's fetch order (what `--input` reads)."""
    from gpuclust.accounting.ingest.schema import RAW_FIELDS

    cp = run_cmd(["sacct", "-a", "-D", "--parsable2", "-j", ",".join(job_ids), "-o", ",".join(RAW_FIELDS)],
                 timeout=30)
    with open(path, "w", encoding="utf-8") as f:
        f.write(cp.stdout)


def _hand_figures(base: str, job: str, step: float = 1.0, gap_factor: float = 3.0) -> tuple[float, float]:
    """(mean utilisation over the job's GPUs, held-idle GPU-seconds) from the job's raw 1 s points in [Start, End),
    by telemetry.py's documented rule (its module docstring, "Held durations and coverage"), written out again
    here: with G = gap_factor x step, a point holds its value until the next one when that is at most G away,
    else one step and the time after it has no data; the first point holds back to Start only when it came at
    most G after it (on a loaded machine the first scrape can come later: that time is not covered); the last
    holds until End under the same bound. The mean is busy / covered summed over the GPUs; held-idle = runs
    under 10 % that hold >= 10 s, a run ending where the data does."""
    row = run_cmd(["sacct", "-a", "-X", "-n", "-P", "-j", job, "-o", "Start,End"]).stdout.split()[0]
    start, end = (time.mktime(time.strptime(t, "%Y-%m-%dT%H:%M:%S")) for t in row.split("|"))
    data = _api(base, "/api/v1/query_range", query=f'DCGM_FI_DEV_GPU_UTIL{{hpc_job="{job}"}}',
                start=f"{start:.0f}", end=f"{end - 1:.0f}", step="1")
    gap = gap_factor * step
    integral = covered = held = 0.0
    for series in data["result"]:
        points = [(float(t), float(v)) for t, v in series["values"]]
        run = 0.0
        for k, (t, v) in enumerate(points):
            following = (points[k + 1][0] if k + 1 < len(points) else end) - t
            pause = following > gap
            held_for = min(step, following) if pause else following
            if k == 0 and t - start <= gap:
                held_for += t - start
            integral += v * held_for
            covered += held_for
            if v < 10:
                run += held_for
            else:
                held += run if run >= 10 else 0
                run = 0.0
            if pause:
                held += run if run >= 10 else 0
                run = 0.0
        held += run if run >= 10 else 0
    assert covered > 0, f"no samples of job {job}"
    return integral / covered, held


def test_report_busy_and_held_idle_from_prometheus_match_the_jobs_we_ran(slurm_lab, prometheus, tmp_path):
    """Three jobs whose GPUs we set: busy (2 GPUs at 90 %), idle (1 GPU at 0 %) and half (1 GPU at 80 % for 12 s,
    then 0 % for 12 s). `report build` with the lab's Prometheus as [telemetry] must give, per job, covered, busy
    and held-idle GPU-hours that match the samples we wrote (shared/gpu-hours-glossary.md):
      busy = covered x mean utilisation; held-idle = the GPU-time of stretches under idle_threshold that lasted at
      least idle_min (10 s here); coverage = covered / allocated. A GPU-less job is not in the table.
    Sampling: Prometheus scrapes every 1 s and the script's first `set` runs a moment after the job starts (the
    prolog maps the GPU at 0 %), so the hand-computed means get a tolerance of a few samples, not more."""
    from gpuclust.accounting import pipeline
    from gpuclust.config import parse_config

    fd = f"{sys.executable} {FAKE_DCGM}"
    scripts = {
        "busy": (2, f"{fd} set --util 90 && sleep 24"),
        "idle": (1, f"{fd} set --util 0 && sleep 24"),
        "half": (1, f"{fd} set --util 80 && sleep 12 && {fd} set --util 0 && sleep 12"),
    }
    tag = uuid.uuid4().hex[:6]
    jobs = {role: submit(["-N1", f"--gres=gpu:h100:{n}", "-A", "ml", "-J", f"use-{role}-{tag}",
                          "-o", "/dev/null", "--wrap", s]) for role, (n, s) in scripts.items()}
    cpu_job = submit(["-N1", "-A", "ml", "-J", f"use-cpu-{tag}", "-o", "/dev/null", "--wrap", "sleep 2"])
    for role, job in [*jobs.items(), ("cpu", cpu_job)]:
        assert wait_job_done(job, timeout=180) == "COMPLETED", (role, job)
    from tests.integration.labutil import wait_for_sacct
    for job in [*jobs.values(), cpu_job]:
        wait_for_sacct(job)
    time.sleep(3)  # the epilog's unmapping reaches Prometheus by the next scrape

    dump = str(tmp_path / "sacct.txt")
    _sacct_dump([*jobs.values(), cpu_job], dump)
    conf = (f"[site]\ncluster_name = lab\ntimezone = UTC\nstate_dir = {tmp_path}/state\n"
            f"report_dir = {tmp_path}/reports\n\n"
            f"[telemetry]\nprometheus_url = {prometheus}\nstep = 1\nidle_threshold = 10\nidle_min = 10s\n")
    config = parse_config(conf)
    report, parsed = pipeline.build(config, None, input_path=dump)
    assert parsed is not None and parsed.rejected == 0, parsed.problems if parsed else None
    table = report.tables["gpu_use_jobs"]
    rows = {str(r["job_id"]): r for r in table.to_dict("records")}
    assert set(rows) == set(jobs.values()), f"only the GPU jobs, each once: {sorted(rows)}"  # no cpu job
    for role, job in jobs.items():
        r = rows[job]
        assert r["telemetry"] == "prometheus", (role, r)
        coverage = r["covered_gpu_hours"] / r["allocated_gpu_hours"]
        assert 0.8 <= coverage <= 1.05, (role, coverage, r)
        # the oracle: the raw 1 s samples of the job's GPUs, read back from Prometheus and summed by hand
        mean, held = _hand_figures(prometheus, job)
        assert r["util_mean_pct"] == pytest.approx(mean, abs=0.5), (role, mean, r)
        assert r["held_idle_gpu_hours"] * 3600 == pytest.approx(held, abs=1e-6), (role, held, r)
        assert r["busy_gpu_hours"] == pytest.approx(r["covered_gpu_hours"] * r["util_mean_pct"] / 100)
    # and what the scripts did, with room for a loaded machine (the first `set` lands a moment after the start)
    busy, idle, half = rows[jobs["busy"]], rows[jobs["idle"]], rows[jobs["half"]]
    assert busy["util_mean_pct"] > 60 and busy["held_idle_gpu_hours"] == 0 and busy["util_max_pct"] == 90, busy
    assert idle["util_mean_pct"] == 0 and idle["busy_gpu_hours"] == 0, idle
    assert idle["held_idle_gpu_hours"] == idle["covered_gpu_hours"] > 0, idle
    assert 20 < half["util_mean_pct"] < 65 and half["util_max_pct"] == 80, half
    # held-idle counts the stretch under the threshold that lasted at least idle_min (its 12 s at 0 %), not the
    # job's mean: the glossary's "during which a GPU ran under the idle threshold for longer than the minimum"
    assert half["held_idle_gpu_hours"] * 3600 >= 10, half

    nodes = report.tables["telemetry_nodes"].set_index("node")  # node_exporter, per node over the period
    assert {"node1", "node2", "node3", "node4"} <= set(nodes.index), nodes
    assert (nodes["net_receive_errs"].fillna(0) == 0).all(), nodes  # the lab's veths lose nothing
    totals = report.data["gpu_use"]["totals"]
    assert totals["unknown_jobs"] == 0 and totals["jobs"] == 3, totals
    want_idle = idle["covered_gpu_hours"] + half["held_idle_gpu_hours"]
    assert totals["held_idle_gpu_hours"] == pytest.approx(want_idle), totals
