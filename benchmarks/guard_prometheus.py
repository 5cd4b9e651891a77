"""Guard scale benchmark (not a test): 10,000 running GPU jobs, a synthetic squeue answer, their utilisation in a
REAL Prometheus (backfilled with promtool, as benchmarks/telemetry_prometheus.py) -> one `run_guard`.

    .venv/bin/python benchmarks/guard_prometheus.py [--jobs 10000] [--lookback-hours 3] [--dir DIR]

Every job runs at "now" on 8-GPU nodes (1, 2, 4 or 8 GPUs, weights 50/25/15/10 %), started 1-4 h earlier, one
utilisation sample every 30 s per GPU; a quarter of the jobs idle (0 %) for their last 1-3 h. The backfilled data
is in the past, so the run's "now" is the data's end and the clock-skew and staleness limits are opened wide.
The guard runs with action = warn and an SMTP port nobody listens on (the notices stay in the outbox: delivery
is not what is timed). Prints JSON: jobs, series, samples, queries, run seconds, actions.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NOW = 1_709_280_000  # 2024-03-01T08:00:00Z


def jobs_and_data(n: int, path: Path, seed: int = 5) -> tuple[str, int, int]:
    rng = random.Random(seed)
    lines_sq: list[str] = []
    series = samples = 0
    node, used = 0, 8
    with path.open("w") as fh:
        fh.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        for k in range(n):
            g = rng.choices((1, 2, 4, 8), weights=(50, 25, 15, 10))[0]
            if used + g > 8:
                node, used = node + 1, 0
            gpus = range(used, used + g)
            used += g
            job = str(2_000_000 + k)
            start = NOW - rng.randrange(60, 241) * 60
            idle_from = NOW - rng.randrange(60, 181) * 60 if rng.random() < 0.25 else NOW + 1
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start))
            lines_sq.append(f"{job}|user{k % 500}|acct{k % 20}|gpu|normal|{stamp}|gn{node:04d}|"
                            f"cpu=8,node=1,gres/gpu={g},gres/gpu:h100={g}|")
            for gpu in gpus:
                lab = f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}",Hostname="gn{node:04d}",hpc_job="{job}"}}'
                out = [f"{lab} {0.0 if ts >= idle_from else 85.0} {ts}\n" for ts in range(start, NOW + 1, 30)]
                fh.write("".join(out))
                series += 1
                samples += len(out)
        fh.write("# EOF\n")
    return "\n".join(lines_sq) + "\n", series, samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--lookback-hours", type=float, default=3.0)
    ap.add_argument("--dir")
    args = ap.parse_args()
    from gpuclust.config import parse_config
    from gpuclust.guard import run_guard
    from gpuclust.slurm.queue import SQUEUE_ARGS
    from gpuclust.slurm.replay import ReplaySlurmClient
    from tests.smtpsink import free_port
    from tests.unit.test_telemetry_prometheus import OpenMetrics, prometheus_missing, running_prometheus

    why = prometheus_missing()
    if why:
        sys.exit(f"guard_prometheus: {why}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        data_file = work / "pre.om"
        squeue, series, samples = jobs_and_data(args.jobs, data_file)

        class Prewritten(OpenMetrics):
            def write(self, path: Path) -> None:
                data_file.replace(path)

        with running_prometheus(Prewritten(), work / "prom") as url:
            site = parse_config(
                f"[site]\ncluster_name = bench\nstate_dir = {work / 'state'}\n[telemetry]\nprometheus_url = {url}\n"
                f"step = 30\ntimeout = 120s\n[guard]\nlookback = {int(args.lookback_hours * 3600)}\n"
                "warn_after = 60m\ncancel_after = 2h\nmax_clock_skew = 1000000000\nmax_staleness = 1000000000\n"
                f"address_template = {{user}}@example.org\nsmtp_host = 127.0.0.1\nsmtp_port = {free_port()}\n"
                "smtp_timeout = 2s\n", "bench.conf")
            client = ReplaySlurmClient()
            client.add("squeue", SQUEUE_ARGS, squeue)
            began = time.perf_counter()
            report = run_guard(site, client, now=float(NOW))
            seconds = time.perf_counter() - began
        print(json.dumps({"jobs": args.jobs, "series": series, "samples": samples, "status": report.status,
                          "prometheus_queries": report.queries, "run_seconds": round(seconds, 2),
                          "counters": report.counters, "warnings": len(report.warnings)}, indent=2))


if __name__ == "__main__":
    main()
