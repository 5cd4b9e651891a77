"""Whole-process time of `gpuclust job JOBID --json` for an ended job answered from the store (issue 43 item 1),
for BENCHMARKS.md "gpuclust job: one ended job".

The job comes from a recorded sacct dump (`--input`, default tests/data/accounting/usage/lab-22.05-steps-pipe.txt,
real Slurm 22.05.8, job 2: two GPUs for 40 s); the site config has no [telemetry], so the GPU figures come from the
store, which this script writes first (storedtelemetry.write_day: one stored summary for the job, on its day, in
a store of DAYS days of JOBS_PER_DAY other 4-GPU jobs, so the reader searches a realistic store). Fresh processes
through the console script next to the interpreter, timed fork to exit, paired and alternating with `gpuclust
--version` (the CLI's own floor), so a change in the machine's load falls on both. Nothing here is a pass/fail check.

    PYTHONPATH=. .venv/bin/python benchmarks/job_view.py [--repeats 15] [--days 30] [--jobs-per-day 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DUMP = REPO / "tests" / "data" / "accounting" / "usage" / "lab-22.05-steps-pipe.txt"
JOB = "2"
JOB_START = datetime(2026, 12, 4, 16, 10, 9, tzinfo=timezone.utc)  # (the dump's Start and End of job 2)
JOB_END = datetime(2026, 12, 4, 16, 10, 49, tzinfo=timezone.utc)


def _summary(gpus: int, start: datetime, end: datetime) -> object:
    from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry

    span = (end - start).total_seconds()
    per = [GpuTelemetry("node1", str(g), span, span * 0.5, 50.0, 90.0, 0.0, 0.0, 0.0, None, 0.0, 1000.0, 81559.0,
                        300.0, 350.0, 300.0 * span, 70.0, 0.0, 0.0, tuple([50.0] * 120)) for g in range(gpus)]
    return JobTelemetry(gpus, 50.0, 90.0, 1000.0, 81559.0, 300.0, 300.0 * span * gpus, 70.0, 0.0, 0.0, 0.0,
                        span * gpus, span * gpus * 0.5, per)


def write_store(state: Path, days: int, per_day: int) -> None:
    from gpuclust.accounting.figures import storedtelemetry as st

    snap = state / "accounting" / "snapshots" / "s1"
    first = JOB_START.date() - timedelta(days=days - 1)
    job = 100_000
    for d in range(days):
        day = first + timedelta(days=d)
        where = snap / "cluster=lab" / f"day={day.isoformat()}"
        where.mkdir(parents=True)
        (where / "part.parquet").write_bytes(b"")
        rows = []
        for k in range(per_day):
            job += 1
            start = datetime(day.year, day.month, day.day, tzinfo=timezone.utc) + timedelta(seconds=k)
            end = start + timedelta(hours=1)
            rows.append(st.StoredTelemetry(str(job), start, start, end, False, 4, {"step_s": 30.0},
                                           _summary(4, start, end)))
        if day == JOB_START.date():
            rows.append(st.StoredTelemetry(JOB, JOB_START, JOB_START, JOB_END, False, 2, {"step_s": 30.0},
                                           _summary(2, JOB_START, JOB_END)))
        st.write_day(where, rows)  # type: ignore[arg-type]
    (state / "accounting" / "current").symlink_to("snapshots/s1")


def _time(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    cp = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"{argv}: exit {cp.returncode}: {cp.stderr[-500:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--jobs-per-day", type=int, default=500)
    args = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="gpuclust-job-bench-"))
    write_store(state, args.days, args.jobs_per_day)
    conf = state / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\nstate_dir = {state}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = str(Path(sys.executable).with_name("gpuclust"))
    job = [sys.executable, script, "--config", str(conf), "job", "--json", "--input", str(DUMP), JOB]
    version = [sys.executable, script, "--version"]
    answer = subprocess.run(job, env=env, capture_output=True, text=True, timeout=60)
    source = json.loads(answer.stdout)["jobs"][0]["source"]
    if source != "store":
        raise SystemExit(f"the job was answered from {source!r}, not the store: {answer.stdout[-800:]}")
    for _ in range(2):
        _time(job, env)
        _time(version, env)
    got: dict[str, list[float]] = {"job": [], "version": []}
    for _ in range(args.repeats):
        got["job"].append(_time(job, env))
        got["version"].append(_time(version, env))
    print(f"store: {args.days} days x {args.jobs_per_day} jobs + the job; load average before the runs: "
          f"{os.getloadavg()}")
    for name, times in got.items():
        print(f"{name}: median {statistics.median(times):.3f} s, min {min(times):.3f} s, max {max(times):.3f} s "
              f"({len(times)} runs)")


if __name__ == "__main__":
    main()
