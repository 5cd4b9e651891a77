"""Whole-process time of `gpuclust job JOBID --json` for an ended job answered from the store (issue 43 item 1),
for BENCHMARKS.md "gpuclust job: one ended job".

Fresh processes, timed fork to exit, paired and alternating with `gpuclust --version` (the CLI's own floor), so
a change in the machine's load falls on both. sacct runs for real (the lab: `eval "$(tests/slurm_lab/slurm-lab
--name NAME env)"`); the site config has no [telemetry], so the GPU figures come from the store. The store's
reader (figures.storedtelemetry.load_job_telemetry, item 4) returns nothing yet, so each child replaces it with
one that returns a fixed summary: what is timed is everything but that read (sacct, the figures, the detectors,
the JSON). Nothing here is a pass/fail check.

    .venv/bin/python benchmarks/job_view.py JOBID [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_CHILD = """
import sys
from gpuclust.accounting.figures import jobview, storedtelemetry
from gpuclust.accounting.figures.telemetry import JobTelemetry
def stored(root, ids):
    return {i: JobTelemetry(gpus_seen=1, util_mean_pct=40.0, util_max_pct=90.0, fb_used_max_mib=4000.0,
                            fb_total_mib=81559.0, power_mean_w=None, energy_j=None, temp_max_c=None, xid_errors=None,
                            ecc_dbe=None, held_idle_gpu_s=0.0, covered_gpu_s=10.0, busy_gpu_s=4.0) for i in ids}
storedtelemetry.load_job_telemetry = jobview.load_job_telemetry = stored
sys.argv = ["gpuclust", *sys.argv[1:]]
from gpuclust.cli.main import main
main()
"""


def _time(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    cp = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)
    took = time.perf_counter() - t0
    if cp.returncode != 0:
        raise SystemExit(f"{argv}: exit {cp.returncode}: {cp.stderr[-500:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job", help="an ended job with GPUs")
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="gpuclust-job-bench-")
    conf = Path(state) / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\nstate_dir = {state}\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = [sys.executable, "-c", _CHILD, "--config", str(conf), "job", "--json", args.job]
    version = [sys.executable, "-c", _CHILD, "--version"]
    for _ in range(2):
        _time(job, env)
        _time(version, env)
    got: dict[str, list[float]] = {"job": [], "version": []}
    for _ in range(args.repeats):
        got["job"].append(_time(job, env))
        got["version"].append(_time(version, env))
    for name, times in got.items():
        print(f"{name}: median {statistics.median(times):.3f} s, max {max(times):.3f} s ({len(times)} runs)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
