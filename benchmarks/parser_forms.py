"""Does each second parser form pay for itself? (issue 31 item 2; not a test)

    .venv/bin/python benchmarks/parser_forms.py FILE [--delimiter fetch|pipe-hash] [--repeat 3]

The direct reader keeps, beside each field's vectorised parser (the one form every reader has), a byte kernel for
the usual shape of three kinds of field: `fixed_times` (Submit, Eligible, Start, End: `YYYY-MM-DDTHH:MM:SS`),
`fixed_clock` (Elapsed `HH:MM:SS`) and `job_ids_swar` (JobID `123`, `123_4`, and the job part of step ids). Each
variant below turns one kernel off (it answers "not my shape" for every row, so every row takes the vectorised
parser) and times the whole `report build --input` work as accounting_bench.py's `full` child does (read, parse,
metrics, write), each run in a fresh process, variants interleaved. A kernel stays if turning it off costs at least
10% of the whole build. Prints JSON: per variant the median seconds (with min-max, every run, and each repeat
against the shipped run of the same repeat), the median CPU seconds of the same work (every thread), peak RSS,
and the cost of its absence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VARIANTS = ("shipped", "no-time-kernel", "no-clock-kernel", "no-jobid-kernel")


def _not_my_shape(*args: object, out: tuple | None = None, **kwargs: object) -> tuple:
    """A fixed-width kernel that takes no row: every row goes to the field's vectorised parser."""
    import numpy as np

    rows = int(args[2])  # type: ignore[call-overload]
    values, ok = out if out is not None else (np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=bool))
    ok[:] = False
    return values, ok


def _no_job_ids(data: object, offsets: object, block_rows: int = 0, ends: object = None) -> tuple:
    import numpy as np

    rows = len(offsets) - 1 if ends is None else len(offsets)  # type: ignore[arg-type]
    zeros = np.zeros(rows, dtype=np.int64)
    return zeros, zeros.copy(), np.zeros(rows, dtype=bool), np.zeros(rows, dtype=bool)


def apply(variant: str) -> None:
    from gpuclust.accounting.ingest import registry
    from gpuclust.accounting.ingest.fast import swar

    if variant == "no-jobid-kernel":
        swar.job_ids_swar = _no_job_ids  # type: ignore[assignment]
    kernel = {"no-time-kernel": swar.fixed_times, "no-clock-kernel": swar.fixed_clock}.get(variant)
    if kernel is None:
        return
    for fd in registry.REGISTRY.fields:
        if fd.fixed is not None and fd.fixed.kernel is kernel:
            # (a frozen dataclass: the benchmark swaps the kernel in place, the reader is unchanged)
            object.__setattr__(fd, "fixed", registry.FixedRead(_not_my_shape, fd.fixed.width, fd.fixed.like))


def child(variant: str, path: str, delimiter: str) -> dict:
    sys.path.insert(0, str(HERE))
    import accounting_bench

    apply(variant)
    with tempfile.TemporaryDirectory() as out:
        cpu = time.process_time()
        got = accounting_bench.child_full(path, out, delimiter)
        # CPU seconds of the same work, every thread: on a loaded machine they move less than the wall time.
        return {**got, "cpu_s": time.process_time() - cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file")
    ap.add_argument("--delimiter", choices=("fetch", "pipe-hash"), default="fetch")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    delimiter = "\x1f|\x1e" if args.delimiter == "fetch" else "|#|"
    if args.child:
        print(json.dumps(child(args.child, args.file, delimiter)))
        return
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    for _ in range(args.repeat):
        for variant in VARIANTS:
            cp = subprocess.run([sys.executable, __file__, args.file, "--delimiter", args.delimiter,
                                 "--child", variant], capture_output=True, text=True, check=True)
            runs[variant].append(json.loads(cp.stdout))
    base = statistics.median(r["seconds"] for r in runs["shipped"])
    out = {}
    for variant, got in runs.items():
        seconds = statistics.median(r["seconds"] for r in got)
        out[variant] = {"seconds_median": round(seconds, 3),
                        "seconds_min_max": [round(min(r["seconds"] for r in got), 3),
                                            round(max(r["seconds"] for r in got), 3)],
                        "seconds_all": [round(r["seconds"], 3) for r in got],
                        # (each repeat against the shipped run of the same repeat: load drifts between repeats)
                        "vs_shipped_per_repeat": [round(r["seconds"] / s["seconds"], 3)
                                                  for r, s in zip(got, runs["shipped"], strict=True)],
                        "cpu_s_median": round(statistics.median(r["cpu_s"] for r in got), 3),
                        "cpu_s_min_max": [round(min(r["cpu_s"] for r in got), 3), round(max(r["cpu_s"] for r in got), 3)],
                        "cpu_vs_shipped": round(statistics.median(r["cpu_s"] for r in got) / statistics.median(
                            r["cpu_s"] for r in runs["shipped"]), 3),
                        "parse_s_median": round(statistics.median(
            r["parse_s"] for r in got), 3), "peak_rss_mb_median": round(statistics.median(
                r["peak_rss_mb"] for r in got)), "whole_build_vs_shipped": round(seconds / base, 3),
            "rows": got[0]["rows"], "runs": got[0]["runs"]}
    print(json.dumps({"file": args.file, "delimiter": args.delimiter, "repeat": args.repeat, "variants": out},
                     indent=2))


if __name__ == "__main__":
    main()
