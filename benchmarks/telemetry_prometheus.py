"""Telemetry scale benchmark (not a test): 10,000 jobs' DCGM series in a REAL Prometheus -> fetch_telemetry.

    .venv/bin/python benchmarks/telemetry_prometheus.py [--jobs 10000] [--step 30] [--chunk-hours 6] [--dir DIR]

Generates one day of dcgm-exporter series with the HPC job mapping (label hpc_job): nodes of 8 GPUs filled one
after the other with jobs of 1, 2, 4 or 8 GPUs (weights 50/25/15/10 %) lasting 5-60 min, one sample every 30 s
per GPU of 4 metrics (GPU_UTIL, FB_USED, POWER_USAGE, GPU_TEMP; FB_FREE, XID and ECC absent: their queries
come back empty, as on a site that does not export them). Backfills it with `promtool tsdb
create-blocks-from openmetrics`, starts /usr/bin/prometheus on 127.0.0.1, then times fetch_telemetry for all
jobs over the day in a fresh child process (so its peak RSS is its own; imports happen before the clock).

Prints JSON: series, samples, queries, fetch seconds, peak RSS (ru_maxrss) of the child, jobs with figures.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DAY = datetime(2024, 3, 1, tzinfo=timezone.utc)
T0 = int(DAY.timestamp())
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP")


def schedule(n_jobs: int, seed: int = 7) -> list[dict[str, object]]:
    """Jobs packed onto 8-GPU nodes over one day: {job, node, gpus: [..], start, end} (epoch seconds)."""
    rng = random.Random(seed)
    jobs: list[dict[str, object]] = []
    node = 0
    while len(jobs) < n_jobs:
        node += 1
        free = [T0] * 8
        full = 0
        while len(jobs) < n_jobs and full < 20:
            g = rng.choices((1, 2, 4, 8), weights=(50, 25, 15, 10))[0]
            groups = [list(range(a, a + g)) for a in range(0, 8, g)]
            group = min(groups, key=lambda gs: max(free[i] for i in gs))
            start = max(free[i] for i in group) + rng.randrange(0, 5) * 30
            end = start + rng.randrange(10, 121) * 30  # 5-60 min
            if end > T0 + 86400:
                full += 1
                continue
            for i in group:
                free[i] = end
            jobs.append({"job": str(1_000_000 + len(jobs)), "node": f"node{node:03d}", "gpus": group,
                         "start": start, "end": end})
    return jobs


def write_openmetrics(jobs: list[dict[str, object]], path: Path, seed: int = 11) -> tuple[int, int]:
    """One family after the other (OpenMetrics), streamed to disk; returns (series, samples)."""
    rng = random.Random(seed)
    series = samples = 0
    with path.open("w") as fh:
        for metric in METRICS:
            fh.write(f"# TYPE {metric} gauge\n")
            for j in jobs:
                base_util = rng.choice((2.0, 30.0, 60.0, 95.0))
                for gpu in j["gpus"]:  # type: ignore[attr-defined]
                    lab = f'{metric}{{gpu="{gpu}",Hostname="{j["node"]}",hpc_job="{j["job"]}"}}'
                    lines = []
                    for ts in range(int(j["start"]), int(j["end"]), 30):  # type: ignore[call-overload]
                        if metric == "DCGM_FI_DEV_GPU_UTIL":
                            value = min(100.0, max(0.0, base_util + rng.uniform(-2, 2)))
                        elif metric == "DCGM_FI_DEV_FB_USED":
                            value = 1000.0 + base_util * 700
                        elif metric == "DCGM_FI_DEV_POWER_USAGE":
                            value = 80.0 + base_util * 6
                        else:
                            value = 35.0 + base_util * 0.4
                        lines.append(f"{lab} {value:.1f} {ts}\n")
                    fh.write("".join(lines))
                    series += 1
                    samples += len(lines)
        fh.write("# EOF\n")
    return series, samples


def child(url: str, jobs_file: str, step: float, chunk_hours: float) -> None:
    from gpuclust.accounting.figures.telemetry import JobWindow, fetch_telemetry
    from gpuclust.config.site import TelemetryConfig

    raw = json.loads(Path(jobs_file).read_text())
    windows = [JobWindow(j["job"], datetime.fromtimestamp(j["start"], timezone.utc),
                         datetime.fromtimestamp(j["end"], timezone.utc), len(j["gpus"]), key=j["job"]) for j in raw]
    del raw
    cfg = TelemetryConfig(prometheus_url=url, step_s=step, chunk_hours=chunk_hours, timeout_s=120)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    began = time.perf_counter()
    result = fetch_telemetry(cfg, windows, DAY, DAY + timedelta(days=1))
    seconds = time.perf_counter() - began
    print(json.dumps({
        "fetch_seconds": round(seconds, 2),
        "queries": result.queries,
        "jobs_with_figures": len(result.jobs),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_before_fetch_mib": round(rss_before / 1024, 1),
        "warnings": len(result.warnings),
        "busy_gpu_hours": round(sum(t.busy_gpu_s for t in result.jobs.values()) / 3600, 1),
        "held_idle_gpu_hours": round(sum(t.held_idle_gpu_s for t in result.jobs.values()) / 3600, 1),
    }))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--step", type=float, default=30.0)
    ap.add_argument("--chunk-hours", type=float, default=6.0)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--child", nargs=2, metavar=("URL", "JOBS_JSON"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.step, args.chunk_hours)
        return

    from tests.unit.test_telemetry_prometheus import OpenMetrics, prometheus_missing, running_prometheus

    why = prometheus_missing()
    if why:
        sys.exit(f"telemetry_prometheus: {why}")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        work = Path(tmp)
        jobs = schedule(args.jobs)
        jobs_file = work / "jobs.json"
        jobs_file.write_text(json.dumps(jobs))
        began = time.perf_counter()
        data_file = work / "pre.om"
        series, samples = write_openmetrics(jobs, data_file)
        generated = time.perf_counter() - began

        class Prewritten(OpenMetrics):  # the harness writes data.om from this file, already generated
            def write(self, path: Path) -> None:
                data_file.replace(path)

        began = time.perf_counter()
        with running_prometheus(Prewritten(), work / "prom") as url:
            loaded = time.perf_counter() - began
            out = subprocess.run([sys.executable, __file__, "--step", str(args.step), "--chunk-hours",
                                  str(args.chunk_hours), "--child", url, str(jobs_file)],
                                 check=True, capture_output=True, text=True)
        figures = json.loads(out.stdout)
        nodes = len({j["node"] for j in jobs})
        print(json.dumps({
            "jobs": len(jobs), "nodes": nodes, "gpus": nodes * 8, "series": series, "samples": samples,
            "step_s": args.step, "chunk_hours": args.chunk_hours, "generate_seconds": round(generated, 1),
            "backfill_and_start_seconds": round(loaded, 1), **figures,
        }, indent=2))


if __name__ == "__main__":
    main()
