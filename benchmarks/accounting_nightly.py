"""The nightly path on a real Slurm (not a test): `report fetch` then `report build`, phase by phase.

    eval "$(tests/slurm_lab/slurm-lab --name NAME env)"
    .venv/bin/python benchmarks/accounting_nightly.py --since 2026-12-03 --days 1 [--repeat 3] [--state /tmp/x]

Phases (wall seconds, median of --repeat runs; each run a fresh store):

* sacct: the `sacct` command of each UTC day (`CommandSlurmClient.sacct_bytes`, raw bytes);
* parse: the reader over those bytes (`fetch.fetch_day`'s reader, which says which one ran);
* store: the day written to the staged snapshot and the swap (`store.staged`);
* build: `pipeline.build` from the store (load, latest state, metrics) and `write_report` (html, csv, json).

Also printed: rows, sacct's bytes per day, the reader, and the peak RSS of this process.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.history import store
    from gpuclust.accounting.history.fetch import sacct_args
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.accounting.ingest.schema import FETCH_DELIMITER
    from gpuclust.accounting.ingest.text import parse_parsable
    from gpuclust.config import parse_config
    from gpuclust.slurm.client import CommandSlurmClient

    ap = argparse.ArgumentParser()
    ap.add_argument("--since", required=True, help="first UTC day, YYYY-MM-DD")
    ap.add_argument("--days", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--state", default=None)
    args = ap.parse_args()

    first = date.fromisoformat(args.since)
    days = [first + timedelta(days=k) for k in range(args.days)]
    client = CommandSlurmClient()
    runs: list[dict[str, float]] = []
    info: dict[str, object] = {}
    for _ in range(args.repeat):
        state = Path(tempfile.mkdtemp(dir=args.state))
        cfg = parse_config(f"[site]\ncluster_name = lab\nstate_dir = {state}\n[gpu_type h100]\nprice_per_gpu_hour = 2\n")
        root = store.store_dir(str(state))
        t = {"sacct": 0.0, "parse": 0.0, "store": 0.0}
        rows = 0
        size = 0
        readers = set()
        t0 = time.perf_counter()
        with store.staged(root, days) as stage:
            for day in days:
                a = time.perf_counter()
                raw = client.sacct_bytes(sacct_args(day), timeout=600)
                b = time.perf_counter()
                result = parse_parsable(raw, FETCH_DELIMITER, f"sacct window {day}")
                c = time.perf_counter()
                stage.write_day(day, result.table, [str(p) for p in result.problems] or None)
                d = time.perf_counter()
                t["sacct"] += b - a
                t["parse"] += c - b
                t["store"] += d - c
                rows += result.table.num_rows
                size += len(raw)
                readers.add(result.reader)
                del raw, result
        t["store"] += time.perf_counter() - t0 - (t["sacct"] + t["parse"] + t["store"])
        a = time.perf_counter()
        start = datetime.combine(first, datetime.min.time(), timezone.utc)
        report, _ = pipeline.build(cfg, Period(start, start + timedelta(days=args.days)))
        (state / "out").mkdir()
        pipeline.write_report(report, state / "out", ["html", "csv", "json"])
        t["build"] = time.perf_counter() - a
        t["total"] = sum(t.values())
        runs.append(t)
        info = {"rows": rows, "sacct_bytes": size, "reader": sorted(readers)}
    out = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    out.update(info)
    out["repeat"] = args.repeat
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
