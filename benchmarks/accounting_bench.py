"""Accounting scale benchmark (not a test): 1M realistic sacct rows -> full report.

    .venv/bin/python benchmarks/accounting_bench.py [--rows 1000000] [--dir /tmp/acct-bench] [--repeat 3]

Generates a `sacct --parsable2` file in the fetch's format (multi-character delimiter) with arrays, requeues,
het jobs, failures and resubmissions, pending jobs, and odd names (`|`, newlines, quotes, unicode). Then, each
in a fresh child process (so peak RSS is its own):

* floor: pyarrow.csv reading the same file, every column as a string (split on the byte the direct reader
  splits on; quoting off; rows broken by newlines skipped) -- the cost of just tokenising the bytes;
* full: ingest (`pipeline.read_input`: read, parse, normalise) and the full report (dedupe, runs, waits,
  cost, sizing, and the GPU use figures, which `report build` always adds) written as html, csv, json and
  prom, in a process set up as `gpuclust report build` sets up its own (`memory.before_pyarrow_loads` and
  `memory.keep_freed_memory`: freed arrays are reused, not faulted in again);
* bare (with --usage): the full build of the same file with the usage fields taken out of the registry: their
  bytes are tokenised by pyarrow but not converted, and no usage figure is made. What the build costs on that
  file before any usage work: the least any build of it that reads the usage TRES can cost.

Both time only their own work: the imports (pyarrow; gpuclust, pandas, numpy) happen before the clock starts.

Prints JSON with wall times, peak RSS and the ratio full / floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

CONF = """
[site]
cluster_name = bench
retry_window = 24h
report_labels = team, project, model
target_completed_runs_per_month = 500
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
[account physics]
labels = team=physics
[account ml]
labels = team=ml
"""


DELIMITERS = {"fetch": "\x1f|\x1e", "pipe-hash": "|#|"}  # the fetch's own; one users' exports use
# Column orders of users' dumps: the fetch's; free text last (as many sites' `sacct --format` lines end in
# Comment); free text first.
FREE_TEXT = ("JobName", "Comment")
# A site's own short `--format` (no JobIDRaw, QOS, Eligible, Elapsed, NNodes, ExitCode, Reason, WCKey, usage):
# the reader derives or marks unknown what it lacks.
NARROW = ("JobID", "JobName", "User", "Account", "Partition", "State", "Submit", "Start", "End", "AllocTRES",
          "NodeList", "Comment")
ORDERS = ("fetch", "text-last", "text-first", "narrow")


def column_order(order: str) -> tuple[str, ...]:
    from gpuclust.accounting.ingest.schema import FETCH_FIELDS

    rest = tuple(f for f in FETCH_FIELDS if f not in FREE_TEXT)
    return {"fetch": FETCH_FIELDS, "text-last": rest + FREE_TEXT, "text-first": FREE_TEXT[::-1] + rest,
            "narrow": NARROW}[order]
# The pending reasons sacct keeps (mostly None once a job started), by JobIDRaw (no draw from the generator's rng).
REASONS = ("None",) * 12 + ("AssocGrpGRES", "Priority", "Resources", "Dependency", "JobHeldUser")


def generate(path: Path, rows: int, seed: int = 7, *, messy: bool = False, delimiter: str = "\x1f|\x1e",
             usage: bool = False, order: str = "fetch") -> None:
    """`rows` lines of a `--parsable2` dump. `messy`: as real dumps are (users' own `sacct` exports, without
    -X): step rows (``.batch``, ``.extern``, ``.0``) after most jobs, newlines and pipes in comments, more
    pipes and newlines in names, pending array ranges. `usage` (with `messy`): the step rows carry usage TRES
    as 24.05.1+ prints them (CU Boulder Alpine's recorded shape: cpu, energy, fs/disk, gres/gpumem,
    gres/gpuutil summed over the step's GPUs, mem, pages, vmem) and ConsumedEnergyRaw, as `report fetch` asks."""
    FETCH_FIELDS = column_order(order)  # noqa: N806 (the generator writes this order)
    rng = random.Random(seed)
    d = delimiter
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc).timestamp()
    users = [f"user{i:03d}" for i in range(400)]
    accounts = ["physics", "ml", "bio", "chem", "vision", "nlp"]
    parts = [("gpu", "h100"), ("a100", "a100"), ("debug", "h100")]
    odd = ['eval|ablation', 'multi\nline run', 'quote"d \'name\'', 'ünïcødé-训练', 'a|b|c', "tab\tname"]
    fmt = "%Y-%m-%dT%H:%M:%S"

    def ts(x: float) -> str:
        return datetime.fromtimestamp(x, tz=timezone.utc).strftime(fmt)

    def el(s: int) -> str:
        dd, r = divmod(s, 86400)
        return (f"{dd}-" if dd else "") + f"{r // 3600:02d}:{r % 3600 // 60:02d}:{r % 60:02d}"

    jid = 100000
    n = 0
    with open(path, "w", encoding="utf-8", newline="") as out:
        out.write(d.join(FETCH_FIELDS) + "\n")

        def emit(job_id: str, raw: int, name: str, user: str, acct: str, part: str, gtype: str, state: str,
                 exit_code: str, submit: float, eligible: float, start: float | None, end: float | None, gpus: int,
                 comment: str) -> None:
            nonlocal n
            elapsed = int(end - start) if start is not None and end is not None else 0
            tres = f"billing={gpus * 8},cpu={gpus * 8},gres/gpu:{gtype}={gpus},gres/gpu={gpus},mem={gpus * 64}G,node={max(1, gpus // 4)}" if start else ""
            rec = {
                "JobID": job_id, "JobIDRaw": str(raw), "JobName": name, "Comment": comment, "WCKey": "",
                "User": user, "Account": acct, "Partition": part, "QOS": "normal", "State": state,
                "ExitCode": exit_code, "Submit": ts(submit), "Eligible": ts(eligible),
                "Start": ts(start) if start else "Unknown", "End": ts(end) if end else "Unknown",
                "Elapsed": el(elapsed), "AllocTRES": tres, "NodeList": "node[1-2]" if start else "None assigned",
                "NNodes": str(max(1, gpus // 4)), "Reason": REASONS[raw % len(REASONS)],
            }
            out.write(d.join(rec.get(f, "") for f in FETCH_FIELDS) + "\n")
            n += 1
            if messy and start is not None and end is not None and not job_id.endswith("]"):
                # The steps a dump without -X lists after the allocation (dropped by the reader).
                steps = ["batch", "extern"] + (["0"] if rng.random() < 0.3 else [])
                for step in steps:
                    use = {}
                    if usage:
                        util = 0 if step == "extern" else rng.randrange(0, 101) * gpus
                        text = (f"cpu={el(rng.randrange(0, max(1, elapsed)))},energy=0,fs/disk={rng.randrange(10**9)},"
                                f"gres/gpumem={rng.randrange(1, 80000)}M,gres/gpuutil={util},"
                                f"mem={rng.randrange(1, 10**8)}K,pages={rng.randrange(5000)},vmem={rng.randrange(10**8)}K")
                        use = {"TRESUsageInAve": text, "TRESUsageInMax": text, "TRESUsageInTot": text,
                               "TRESUsageOutTot": f"energy=0,fs/disk={rng.randrange(10**6)}",
                               "ConsumedEnergyRaw": str(rng.randrange(10**7))}
                    out.write(d.join({**rec, "JobID": f"{job_id}.{step}", "JobName": step if step != "0" else "python",
                                      "User": "", "Account": acct, "Comment": "", "Partition": "",
                                      "AllocTRES": f"cpu={gpus * 8},gres/gpu={gpus},mem={gpus * 64}G,node=1",
                                      "QOS": "", **use}.get(f, "") for f in FETCH_FIELDS) + "\n")
                    n += 1

        while n < rows:
            user = rng.choice(users)
            acct = rng.choice(accounts)
            part, gtype = rng.choice(parts)
            name = rng.choice(odd) if rng.random() < (0.05 if messy else 0.02) else f"train-{rng.randrange(20000)}"
            comment = f"team={acct} project=p{rng.randrange(50)} model=m{rng.randrange(10)}"
            if messy and rng.random() < 0.03:
                comment += rng.choice(["\nsecond line", "|see ticket 42", "\n", " note: a|b\nc"])
            gpus = rng.choice([1, 1, 2, 4, 8, 8, 16])
            submit = t0 + rng.random() * 29 * 86400
            kind = rng.random()
            jid += 1
            wait = rng.expovariate(1 / 600)
            run = rng.expovariate(1 / 7200) + 30
            if kind < 0.08:  # array of 2-20 tasks, one may fail
                tasks = rng.randrange(2, 21)
                bad = rng.randrange(tasks)
                for t in range(tasks):
                    s = submit + wait + t * 5
                    st, ec = ("FAILED", "1:0") if t == bad and rng.random() < 0.5 else ("COMPLETED", "0:0")
                    emit(f"{jid}_{t}", jid + t + 1 if t < tasks - 1 else jid, name, user, acct, part, gtype, st, ec,
                         submit, submit, s, s + run, gpus, comment)
                jid += tasks
            elif kind < 0.11:  # requeued then completed
                s1 = submit + wait
                emit(str(jid), jid, name, user, acct, part, gtype, "REQUEUED", "0:0", submit, submit, s1, s1 + run / 3, gpus, comment)
                s2 = s1 + run / 3 + 120
                emit(str(jid), jid, name, user, acct, part, gtype, "COMPLETED", "0:0", s1 + run / 3, s2, s2 + 10, s2 + run, gpus, comment)
            elif kind < 0.13:  # het job
                s = submit + wait
                emit(f"{jid}+0", jid, name, user, acct, part, gtype, "COMPLETED", "0:0", submit, submit, s, s + run, gpus, comment)
                emit(f"{jid}+1", jid + 1, name, user, acct, part, gtype, "COMPLETED", "0:0", submit, submit, s, s + run, 2, comment)
                jid += 1
            elif kind < 0.25:  # failure then resubmission(s)
                s = submit + wait
                end = s + run
                emit(str(jid), jid, name, user, acct, part, gtype, rng.choice(["FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"]),
                     "1:0", submit, submit, s, end, gpus, comment)
                for _ in range(rng.randrange(1, 3)):
                    jid += 1
                    sub = end + rng.random() * 7200
                    s = sub + rng.expovariate(1 / 600)
                    end = s + run
                    emit(str(jid), jid, name, user, acct, part, gtype, "COMPLETED", "0:0", sub, sub, s, end, gpus, comment)
            elif kind < 0.27 and messy and rng.random() < 0.3:  # an array still pending at the dump
                emit(f"{jid}_[{rng.randrange(5)}-{rng.randrange(5, 50)}]", jid, name, user, acct, part, gtype, "PENDING",
                     "0:0", submit, submit, None, None, gpus, comment)
            elif kind < 0.27:  # cancelled while pending
                emit(str(jid), jid, name, user, acct, part, gtype, "CANCELLED by 0", "0:0", submit, submit, None, submit + 60, gpus, comment)
            else:
                s = submit + wait
                st, ec = ("COMPLETED", "0:0") if rng.random() < 0.93 else ("CANCELLED by 1001", "0:15")
                emit(str(jid), jid, name, user, acct, part, gtype, st, ec, submit, submit, s, s + run, gpus, comment)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_floor(path: str, delimiter: str) -> dict:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from gpuclust.accounting.ingest.fast.direct import split_at

    t = time.perf_counter()
    # Split on the byte the direct reader splits on (one that occurs once in the delimiter: \x1f of
    # "\x1f|\x1e", # of "|#|"), so the floor tokenises exactly as much as the reader does.
    at = split_at(delimiter.encode())
    d0 = delimiter[at or 0]
    with open(path, encoding="utf-8") as fh:
        columns = len(fh.readline().rstrip("\n").split(delimiter))  # (the file's own header: any order or width)
    names = [f"c{i}" for i in range((columns - 1) * delimiter.count(d0) + 1)]
    table = pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, block_size=1 << 24),
        parse_options=pacsv.ParseOptions(delimiter=d0, quote_char=False, newlines_in_values=False,
                                         invalid_row_handler=lambda row: "skip"),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names}),
    )
    return {"seconds": time.perf_counter() - t, "rows": table.num_rows, "peak_rss_mb": peak_rss_mb()}


def child_full(path: str, out: str, delimiter: str, bare: bool = False) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    from gpuclust.accounting.ingest.fast.memory import (
        before_numpy_loads,
        before_pyarrow_loads,
        keep_freed_memory,
    )

    before_pyarrow_loads()  # as `gpuclust report` does first
    before_numpy_loads()
    from gpuclust.accounting.figures import gpuuse
    from gpuclust.accounting.figures.metrics import build_report
    from gpuclust.accounting.history.store import latest_state
    from gpuclust.accounting.output.render import write_report
    from gpuclust.accounting.pipeline import input_period, read_input
    from gpuclust.config import parse_config

    keep_freed_memory()  # as `gpuclust report build` does first
    config = parse_config(CONF)
    usage = "-usage" in Path(path).name
    t = time.perf_counter()
    if usage:  # the usage TRES rolled up by the 24.05.1+ rule, as `report build --slurm-version 24.11` reads them
        from dataclasses import replace

        from gpuclust.accounting.ingest.normalize import DEFAULT_OPTIONS
        from gpuclust.accounting.ingest.registry import REGISTRY, Registry

        options = replace(DEFAULT_OPTIONS, slurm_version="24.11")
        if bare:
            options = replace(options, registry=Registry(tuple(fd for fd in REGISTRY.fields if not fd.step_usage)))
        parsed = read_input(path, delimiter, options=options)
    else:
        parsed = read_input(path, delimiter)  # what `gpuclust report build --input` calls
    t_parse = time.perf_counter() - t
    table = latest_state(parsed.table)
    # The report and the use figures (gpu_use_*) as `report build` makes them: the use figures beside it.
    with ThreadPoolExecutor(max_workers=1) as beside:
        use = beside.submit(gpuuse.use_sums, table, config, input_period(parsed))
        report = build_report(table, config, input_period(parsed))
        gpuuse.attach_sums(report, use.result(), config, usage_warnings=parsed.usage_warnings)
    t_report = time.perf_counter() - t - t_parse
    write_report(report, Path(out), ("html", "csv", "json", "prom"))
    total = time.perf_counter() - t
    return {"seconds": total, "parse_s": t_parse, "metrics_s": t_report, "write_s": total - t_parse - t_report,
            "rows": parsed.table.num_rows, "rejected": parsed.rejected, "runs": report.data["totals"]["runs"],
            "steps_dropped": parsed.steps_dropped, "reader": parsed.reader, "peak_rss_mb": peak_rss_mb()}


def _day_pieces(path: str, days: int) -> list[tuple[int, int]]:
    """The file's body cut in `days` pieces at record starts (a newline then a digit: JobID comes first,
    and no continuation line of the generator starts with a digit): one sacct window each."""
    import mmap

    with open(path, "rb") as fh:
        data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        start = data.find(b"\n") + 1
        size = len(data)
        cuts = [start]
        for k in range(1, days):
            at = data.find(b"\n", max(cuts[-1], start + (size - start) * k // days))
            while at >= 0 and not data[at + 1 : at + 2].isdigit():
                at = data.find(b"\n", at + 1)
            if at < 0:
                break
            cuts.append(at + 1)
        cuts.append(size)
        data.close()
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _reset_peak_rss() -> bool:
    """Start a new peak-RSS measurement (Linux: /proc/self/clear_refs); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _peak_rss_since_reset_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return peak_rss_mb()


def child_store(path: str, state: str, delimiter: str, days: int, build_only: bool = False) -> dict:
    """The nightly path on the generated rows: each of `days` pieces read as one day's sacct output and
    written to the store as it is read (store.staged, as `report fetch`), then the report built from the
    store (`pipeline.build`, as `report build`). Peak RSS: one day's bytes and table, then the build.
    `build_only`: the store is there already (a run before); only the build, in this fresh process, as cron
    runs `report build` after `report fetch`."""
    import shutil
    from datetime import date, datetime, timedelta, timezone

    from gpuclust.accounting.ingest.fast.memory import (
        before_numpy_loads,
        before_pyarrow_loads,
        keep_freed_memory,
    )

    before_pyarrow_loads()  # as `gpuclust report` does first
    before_numpy_loads()
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.history import store
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.accounting.ingest.text import parse_parsable
    from gpuclust.config import parse_config

    keep_freed_memory()
    config = parse_config(CONF.replace("[site]\n", f"[site]\nstate_dir = {state}\n", 1))
    root = store.store_dir(state)
    first = date(2026, 11, 1)
    day_list = [first + timedelta(days=k) for k in range(days)]
    t = time.perf_counter()
    rows = 0
    parse_s = 0.0
    if not build_only:
        shutil.rmtree(state, ignore_errors=True)
        with open(path, "rb") as fh:
            header = fh.readline()
            pieces = _day_pieces(path, days)
            with store.staged(root, day_list) as stage:
                for day, (a, b) in zip(day_list, pieces, strict=False):
                    fh.seek(a)
                    raw = header + fh.read(b - a)
                    p0 = time.perf_counter()
                    result = parse_parsable(raw, delimiter, f"window {day}")
                    parse_s += time.perf_counter() - p0
                    rows += result.table.num_rows
                    stage.write_day(day, result.table)
                    del raw, result
    t_fetch = time.perf_counter() - t
    fetch_rss = peak_rss_mb()
    separate = _reset_peak_rss()
    start = datetime.combine(first, datetime.min.time(), timezone.utc)
    report, _ = pipeline.build(config, Period(start, start + timedelta(days=days)))
    total = time.perf_counter() - t
    return {"seconds": total, "fetch_s": t_fetch, "parse_s": parse_s, "build_s": total - t_fetch,
            "rows": rows or report.data["input"]["rows"], "runs": report.data["totals"]["runs"],
            "fetch_peak_rss_mb": fetch_rss,
            "build_peak_rss_mb": _peak_rss_since_reset_mb() if separate else float("nan"),
            "peak_rss_mb": peak_rss_mb(), "loadavg_1m": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/acct-bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--messy", action="store_true", help="steps, newlines and pipes in comments (as users' dumps)")
    ap.add_argument("--delimiter", choices=sorted(DELIMITERS), default="fetch")
    ap.add_argument("--usage", action="store_true", help="with --messy: usage TRES on the step rows (issue 26)")
    ap.add_argument("--order", choices=ORDERS, default="fetch", help="column order of the dump (issue 31)")
    ap.add_argument("--store-days", type=int, default=0,
                    help="instead: the rows as this many days' sacct output through the store, then build")
    ap.add_argument("--build-only", action="store_true",
                    help="with --store-days: only `report build` on the store a --store-days run left (fresh process)")
    ap.add_argument("--child", choices=["floor", "full", "bare", "store"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    work = Path(args.dir)
    delimiter = DELIMITERS[args.delimiter]
    data = work / f"sacct-{args.rows}{'-messy' if args.messy else ''}{'-usage' if args.usage else ''}{'' if args.order == 'fetch' else '-' + args.order}-{args.delimiter}.txt"
    if args.child == "floor":
        print(json.dumps(child_floor(str(data), delimiter)))
        return
    if args.child in ("full", "bare"):
        print(json.dumps(child_full(str(data), str(work / "report"), delimiter, bare=args.child == "bare")))
        return
    if args.child == "store":
        print(json.dumps(child_store(str(data), str(work / "state"), delimiter, args.store_days, args.build_only)))
        return
    work.mkdir(parents=True, exist_ok=True)
    if not data.exists() and not args.build_only:
        t = time.perf_counter()
        generate(data, args.rows, messy=args.messy, delimiter=delimiter, usage=args.usage, order=args.order)
        print(f"generated {data} ({data.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    common = ["--rows", str(args.rows), "--dir", str(work), "--delimiter", args.delimiter,
              *(["--messy"] if args.messy else []), *(["--usage"] if args.usage else []), "--order", args.order]
    if args.store_days:
        only = ["--build-only"] if args.build_only else []
        done = [json.loads(subprocess.run([sys.executable, __file__, *common, "--store-days", str(args.store_days),
                                           *only, "--child", "store"], capture_output=True, text=True, check=True).stdout)
                for _ in range(args.repeat)]
        file_mb = round(data.stat().st_size / 1e6, 1) if data.exists() else None
        print(json.dumps({"rows": args.rows, "file_mb": file_mb, "days": args.store_days, "build_only": args.build_only,
                          "median": {k: round(statistics.median(r[k] for r in done), 3) for k in done[0]},
                          "all_runs": done}, indent=2))
        return
    modes = ("floor", "full", "bare") if args.usage else ("floor", "full")
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for _ in range(args.repeat):
        for mode in modes:
            cp = subprocess.run([sys.executable, __file__, *common, "--child", mode],
                                capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(cp.stdout))
    best = {mode: min(r, key=lambda x: x["seconds"]) for mode, r in runs.items()}
    # The machine is shared: medians over the repeats are the figures to quote; floor and full of one repeat
    # run back to back, so each repeat's own ratio is also given.
    median = {mode: {key: round(statistics.median(x[key] for x in r), 3) for key in r[0]
                     if isinstance(r[0][key], int | float) and key != "rows"}
              for mode, r in runs.items()}
    print(json.dumps({
        "rows": args.rows, "file_mb": round(data.stat().st_size / 1e6, 1), "cpus": os.cpu_count(),
        "floor": best["floor"], "full": best["full"],
        "ratio_full_over_floor": round(best["full"]["seconds"] / best["floor"]["seconds"], 2),
        "median": median,
        "ratio_median": round(median["full"]["seconds"] / median["floor"]["seconds"], 2),
        "ratio_per_repeat": [round(f["seconds"] / fl["seconds"], 2) for fl, f in zip(runs["floor"], runs["full"], strict=True)],
        **({"ratio_bare_median": round(median["bare"]["seconds"] / median["floor"]["seconds"], 2)} if args.usage else {}),
        "all_runs": runs,
    }, indent=2))


if __name__ == "__main__":
    main()
