"""A year of history (issue 31 item 3; not a test): a synthetic store of N job rows over 365 days, then
`gpuclust report build --since 365d` timed as a whole process, and the raw per-day aggregation of the same
Parquet days by two engines (DuckDB, pyarrow.dataset).

    .venv/bin/python benchmarks/store_year.py --rows 1000000 [--state /tmp/store-year] [--engines] [--cold]
        [--heavy-user-share 0.3] [--compare]

The store is written as `report fetch` writes it (store.staged, one UTC day at a time, then trend.refresh: the
per-day aggregates of the last 90 days). Each day's jobs are drawn with numpy (no sacct text: the parser has its
own benchmark, accounting_bench.py): Submit uniform over the day, queue wait ~ exp(10 min), run ~ exp(2 h) + 30 s
(some cross midnight), 1-16 GPUs, 400 users, 6 accounts, 3 partitions, 93% COMPLETED; 12% fail and are
resubmitted (same user, account and name) within 2 h of the failure, some across midnight; one chain of daily
failed retries that runs for 45 days (a run that spans months). A job running across midnight is in each UTC day
file it touches: RUNNING (End unknown) in the earlier windows, its final state in the last, as a daily fetch
sees it.

Every measured step runs in its own process under `/usr/bin/time -v` (whole-process wall time and peak RSS),
niced. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DAYS = 365
CONF = """[site]
cluster_name = year
timezone = UTC
state_dir = {state}
retry_window = 24h
report_labels = team
[gpu_type h100]
price_per_gpu_hour = 2.5
[gpu_type a100]
price_per_gpu_hour = 1.6
[partition gpu]
gpu_type = h100
price_per_gpu_hour = 2.5
[partition a100]
gpu_type = a100
price_per_gpu_hour = 1.6
[partition debug]
gpu_type = h100
price_per_gpu_hour = 1.0
"""
USERS = np.array([f"user{i:03d}" for i in range(400)], dtype=object)
ACCOUNTS = np.array(["physics", "ml", "bio", "chem", "vision", "nlp"], dtype=object)
PARTS = np.array(["gpu", "a100", "debug"], dtype=object)
GTYPES = np.array(["h100", "a100", "h100"], dtype=object)
GPUS = np.array([1, 1, 2, 4, 8, 8, 16])
CHAIN_DAYS = 45


def _jobs(rng: np.random.Generator, day0: float, n: int, first_id: int, heavy_share: float = 0.0
          ) -> dict[str, np.ndarray]:
    """`n` allocation rows submitted on the day starting at `day0` (epoch s): final states, ids from `first_id`.
    `heavy_share`: the share of the jobs that user 0 submits (a pipeline account), the others uniform."""
    fail = rng.random(n) < 0.12
    k = n + int(fail.sum())  # (each failure is resubmitted once)
    submit = day0 + rng.random(n) * 86400
    run = rng.exponential(7200, n) + 30
    start = submit + rng.exponential(600, n)
    end = start + np.where(fail, run / 3, run)
    user, acct, part = rng.integers(0, 400, n), rng.integers(0, 6, n), rng.integers(0, 3, n)
    if heavy_share:
        user[rng.random(n) < heavy_share] = 0
    name = rng.integers(0, 20000, n)
    gpus = GPUS[rng.integers(0, len(GPUS), n)]
    # The resubmissions of the failed ones: same user, account, partition and name, within 2 h of the failure.
    f = np.flatnonzero(fail)
    r_submit = end[f] + rng.random(len(f)) * 7200
    r_start = r_submit + rng.exponential(600, len(f))
    r_end = r_start + run[f]
    state = np.where(fail, "FAILED", np.where(rng.random(n) < 0.93, "COMPLETED", "CANCELLED"))
    cols = {
        "job_id_raw": np.arange(first_id, first_id + k),
        "submit": np.r_[submit, r_submit], "start": np.r_[start, r_start], "end": np.r_[end, r_end],
        "user": np.r_[user, user[f]], "account": np.r_[acct, acct[f]], "partition": np.r_[part, part[f]],
        "name": np.r_[name, name[f]], "gpus": np.r_[gpus, gpus[f]],
        "state": np.r_[state, np.full(len(f), "COMPLETED", dtype=state.dtype)],
    }
    return cols


def _table(cols: dict[str, np.ndarray], running: np.ndarray, schema: pa.Schema) -> pa.Table:
    """Rows in the normalized schema (`running`: rows shown as still running: End unknown)."""
    n = len(cols["job_id_raw"])
    ts = pa.timestamp("s", tz="UTC")
    state = np.where(running, "RUNNING", cols["state"]).astype(object)
    end = np.where(running, 0, cols["end"]).astype(np.int64)
    elapsed = np.where(running, 0, cols["end"] - cols["start"]).astype(np.int64)
    ids = cols["job_id_raw"]
    values: dict[str, pa.Array] = {
        "line": pa.array(np.arange(n)), "job_id": pa.array(ids.astype(str)), "job_id_raw": pa.array(ids),
        "job_base": pa.array(ids),
        "job_name": pa.array(np.char.add("train-", cols["name"].astype(str)).astype(object)),
        "user": pa.array(USERS[cols["user"]]), "account": pa.array(ACCOUNTS[cols["account"]]),
        "partition": pa.array(PARTS[cols["partition"]]), "qos": pa.array(np.full(n, "normal", dtype=object)),
        "comment": pa.array(np.char.add("team=", ACCOUNTS[cols["account"]].astype(str)).astype(object)),
        "nodelist": pa.array(np.full(n, "node[1-2]", dtype=object)),
        "state": pa.array(state), "state_raw": pa.array(state), "reason": pa.array(np.full(n, "None", dtype=object)),
        "exit_code": pa.array(np.where(state == "FAILED", 1, 0)), "exit_signal": pa.array(np.zeros(n, np.int64)),
        "exit_code_known": pa.array(np.ones(n, bool)),
        "submit": pa.array(cols["submit"].astype(np.int64)).cast(ts),
        "eligible": pa.array(cols["submit"].astype(np.int64)).cast(ts),
        "start": pa.array(cols["start"].astype(np.int64)).cast(ts),
        "end": pa.array(end, mask=running).cast(ts), "elapsed_s": pa.array(elapsed),
        "nnodes": pa.array(np.maximum(1, cols["gpus"] // 4)),
        "alloc_tres": pa.array(np.char.add("gres/gpu=", cols["gpus"].astype(str)).astype(object)),
        "gpus": pa.array(cols["gpus"]), "gpu_type": pa.array(GTYPES[cols["partition"]]),
    }
    return pa.table([values[f.name] if f.name in values else pa.nulls(n, f.type) for f in schema], schema=schema)


def generate(state: Path, rows: int, last_day: date, seed: int = 31, heavy_share: float = 0.0) -> dict[str, float]:
    """The store of `rows` rows (about: each job once, plus its copies in the earlier windows it crosses)."""
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.figures import trend
    from gpuclust.accounting.history import store
    from gpuclust.accounting.ingest.schema import SCHEMA
    from gpuclust.config import parse_config

    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    conf = state / "site.conf"
    conf.write_text(CONF.format(state=state))
    config = parse_config(conf.read_text())
    rng = np.random.default_rng(seed)
    days = [last_day - timedelta(days=DAYS - 1 - i) for i in range(DAYS)]
    per_day = max(1, round(rows / DAYS / 1.12 / 1.05))  # (resubmissions and midnight copies on top)
    pending: dict[date, list[pa.Table]] = {}
    next_id, written = 1_000_000, 0
    t = time.perf_counter()
    root = store.store_dir(str(state))
    with store.staged(root, days, cluster=config.cluster_name) as stage:
        for i, day in enumerate(days):
            day0 = datetime.combine(day, datetime.min.time(), timezone.utc).timestamp()
            cols = _jobs(rng, day0, per_day, next_id, heavy_share)
            next_id += len(cols["job_id_raw"])
            if i < CHAIN_DAYS:  # one run of daily retries (failed, resubmitted 20 h later), completed on its last day
                c = {key: v[:1].copy() for key, v in cols.items()}
                c["job_id_raw"] = np.array([next_id])
                next_id += 1
                c["user"], c["account"], c["partition"], c["name"], c["gpus"] = [np.array([0])] * 4 + [np.array([8])]
                c["name"] = np.array([99999])
                c["submit"] = np.array([day0 + 3600.0])
                c["start"], c["end"] = c["submit"] + 60, c["submit"] + 7200
                c["state"] = np.array(["COMPLETED" if i == CHAIN_DAYS - 1 else "FAILED"])
                cols = {key: np.r_[cols[key], c[key]] for key in cols}
            first = np.floor(cols["start"] / 86400).astype(np.int64)
            last = np.floor(cols["end"] / 86400).astype(np.int64)
            base = int(day0 // 86400)
            for k in range(int((last - first).max()) + 1):
                for d in np.unique(first[last - first >= k] + k).tolist():
                    on = (first + k == d) & (last - first >= k)
                    sub = {key: v[on] for key, v in cols.items()}
                    target = day + timedelta(days=d - base)
                    if target <= days[-1]:
                        pending.setdefault(target, []).append(_table(sub, last[on] != d, SCHEMA))
            tables = pending.pop(day, [])
            table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
            written += table.num_rows
            stage.write_day(day, table)
            del tables, table
    fetch_s = time.perf_counter() - t
    t = time.perf_counter()
    weeks = trend.refresh(root, config, pipeline.lookback_of(config))
    return {"rows": written, "write_s": round(fetch_s, 1), "aggregates_s": round(time.perf_counter() - t, 1),
            "aggregate_weeks": weeks}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """`cmd` under /usr/bin/time -v, niced: wall seconds and peak RSS (MB) of the whole process."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as log:
        proc = subprocess.run(["/usr/bin/time", "-v", "-o", log.name, "nice", "-n", "10", *cmd],
                              capture_output=True, text=True, env=env)
        text = Path(log.name).read_text()
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    seconds = (int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))) if wall else None
    out: dict[str, object] = {"rc": proc.returncode, "wall_s": seconds,
                              "peak_rss_mb": round(int(rss.group(1)) / 1024) if rss else None}
    if proc.returncode:
        out["stderr"] = proc.stderr[-2000:]
    else:
        out["stdout"] = proc.stdout.strip()[-500:]
    return out


# (epoch() differences, not date_diff('second', ...): on TIMESTAMP WITH TIME ZONE DuckDB's date_diff goes through
# the ICU calendar and made this query 6x slower: 9 s, not 1.5 s, at 10M rows.)
ENGINE_DUCKDB = """
import sys, duckdb
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
con.execute("SET threads = 2")
con.execute("SET enable_progress_bar = false")
# (an ended execution's latest row is the one of its End's day window: the earlier windows show it running)
rows = con.execute('''
  SELECT day, count(*) AS attempts,
         sum(gpus * (epoch("end") - epoch(start))) / 3600.0 AS gpu_hours,
         quantile_cont(epoch(start) - epoch(eligible), 0.9) AS p90_wait_s
  FROM read_parquet(?, hive_partitioning = true)
  WHERE "end" IS NOT NULL AND start IS NOT NULL
  GROUP BY day ORDER BY day''', [sys.argv[1] + "/**/part.parquet"]).fetchall()
print(len(rows), sum(r[1] for r in rows), round(sum(r[2] for r in rows), 3), round(sum(r[3] for r in rows), 3))
"""

# pyarrow.dataset, day file by day file (memory of one day, not the year); the same rows as ENGINE_DUCKDB.
ENGINE_ARROW = """
import sys, numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.dataset as ds
dataset = ds.dataset(sys.argv[1], format="parquet", partitioning="hive")
cols = ["job_id_raw", "start", "end", "eligible", "gpus"]
total, out = 0, []
for fragment in sorted(dataset.get_fragments(), key=lambda f: f.path):  # (one day file each)
    day = fragment.path.split("day=")[1][:10]
    t = fragment.to_table(columns=cols)
    ended = t.filter(pc.is_valid(t.column("end")))
    sec = lambda name: pc.cast(pc.cast(ended.column(name), pa.timestamp("s", "UTC")), pa.int64()).to_numpy()  # (ms in Parquet)
    e, s = sec("end"), sec("start")
    w = s - sec("eligible")
    g = ended.column("gpus").to_numpy()
    out.append((day, len(e), float((g * (e - s)).sum()) / 3600, float(np.quantile(w, 0.9)) if len(w) else None))
    total += len(e)
print(len(out), total, round(sum(r[2] for r in out), 3), round(sum(r[3] for r in out), 3))
"""


def engines(state: Path) -> dict[str, object]:
    """The raw per-day aggregation of the Parquet days (attempts, allocated GPU-hours, p90 wait per day)."""
    current = str(state / "accounting" / "current")
    py = str(REPO / ".venv" / "bin" / "python")
    return {"duckdb": timed([py, "-c", ENGINE_DUCKDB, current]),
            "pyarrow_dataset": timed([py, "-c", ENGINE_ARROW, current])}


def compare(state: Path) -> dict[str, object]:
    """The partitioned build against the one-table build of the same store and year, in this process: every
    figure of report.json's totals, sizing, runs, waits, holds, top failures, economics and GPU use, floats to
    1e-9 relative. (Needs the memory of the one-table build: run it on a store that fits.)"""
    import math

    from gpuclust.accounting import pipeline
    from gpuclust.accounting.ingest.period import resolve_period
    from gpuclust.config import load_config

    config = load_config(str(state / "site.conf"))
    period = resolve_period("365d", None, None, config.timezone)
    assert period is not None
    one, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=10**12)
    split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0)
    differ: list[str] = []
    count = 0

    def walk(a: object, b: object, path: str) -> None:
        nonlocal count
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(set(a) | set(b)):
                walk(a.get(key), b.get(key), f"{path}.{key}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{path}[{i}]")
        else:
            count += 1
            same = math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) if isinstance(a, float) and isinstance(b, float) \
                else a == b
            if not same:
                differ.append(f"{path}: {a!r} != {b!r}")

    for name in ("totals", "sizing", "runs", "queue_wait", "hold", "top_failures", "economics", "gpu_use"):
        walk(one.data.get(name), split.data.get(name), name)
    return {"figures_compared": count, "differ": differ[:20], "buckets": split.data["input"]["partitioned"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--state", default="/tmp/store-year")
    ap.add_argument("--reuse", action="store_true", help="the store is there already (same --rows)")
    ap.add_argument("--engines", action="store_true", help="also time DuckDB and pyarrow.dataset over the days")
    ap.add_argument("--cold", action="store_true", help="also time the build without the cached aggregates")
    ap.add_argument("--no-build", action="store_true", help="do not time the build (with --reuse --engines)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each engine (the median is what to quote)")
    ap.add_argument("--compare", action="store_true",
                    help="compare every figure of the partitioned build with the one-table build (in process)")
    ap.add_argument("--heavy-user-share", type=float, default=0.0,
                    help="share of the jobs of one user (a pipeline account: the partitioned build splits it)")
    args = ap.parse_args()
    state = Path(args.state)
    last_day = datetime.now(timezone.utc).date() - timedelta(days=1)
    result: dict[str, object] = {"rows_asked": args.rows, "days": DAYS, "cpus": os.cpu_count()}
    if not args.reuse:
        result["store"] = generate(state, args.rows, last_day, heavy_share=args.heavy_user_share)
    gpuclust = str(REPO / ".venv" / "bin" / "gpuclust")
    out = state / "report"
    build = [gpuclust, "--config", str(state / "site.conf"), "report", "build", "--since", "365d",
             "--format", "json", "--out", str(out)]
    if not args.no_build:
        result["build_warm"] = timed(build)
    if args.cold and not args.no_build:
        snap = (state / "accounting" / "current").resolve()
        shutil.rmtree(snap / "cluster=year" / "_daily", ignore_errors=True)
        result["build_cold"] = timed(build)  # (computes and caches the trend's weeks again)
    if args.engines:
        result["engines"] = [engines(state) for _ in range(args.repeat)]
    if args.compare:
        result["compare"] = compare(state)
    report = out / "report.json"
    if report.exists() and not args.no_build:
        data = json.loads(report.read_text())
        result["report"] = {"rows": data["input"]["rows"], "runs": data["totals"]["runs"],
                            "trend_days": data.get("trend", {}).get("days")}
    print(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
