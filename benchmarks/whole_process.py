"""Whole-process time of `gpuclust report build`, as a user meets it (not a test).

    .venv/bin/python benchmarks/whole_process.py [--rows 1000000] [--messy] [--repeat 3] [--dir /tmp/whole-process]
        [--compare OTHER_CHECKOUT] [--budget 900]

The scale goal: `report build` of a dump takes at most twice what pyarrow takes to read a clean copy of the same
rows, both timed as whole processes (interpreter start, imports, work, output, exit). accounting_bench.py times
the work only, after the imports, against a floor that tokenises the messy file itself; this script times what a
reviewer times with a stopwatch:

* build: `gpuclust report build --input DUMP --format json --out DIR` (the console script next to this
  interpreter, PYTHONPATH set to the checkout timed);
* floor: a fresh `python -c` reading the clean copy with pyarrow.csv.read_csv (`|`, types inferred);
* small: the same build of a 1,000-line dump (the fixed cost: interpreter, imports, set-up, output);
* imports only: a fresh `python -c` importing numpy, pyarrow (compute, csv) and pandas, which every build
  imports: the part of the small build that gpuclust's own code cannot cut.

The dump is made by accounting_bench.generate (`--messy`: step rows, newlines and pipes in names and comments;
`--usage`: usage TRES on the steps). The clean copy holds the same records, one per line, only the columns the
report reads that the dump fills (no WCKey; no usage columns without --usage), `|` and newlines in values
turned into spaces. Every checkout timed is byte-compiled first (`python -m compileall`), as an install leaves
it. The commands run in fresh processes, in turn (round-robin: a change in the shared machine's load falls on
all of them), `--repeat` times after one untimed warm-up round; medians and min-max are printed, with each
process's own CPU time (user + sys) and peak RSS (wait4). `--compare` times another checkout's package through
the same console script in the same rounds (before/after: `git archive COMMIT | tar -x -C /tmp/before`).

Then the fixed cost of the small build, once: `python -X importtime` summed by top-level package, the slowest
imports, and the time from the process's start to its first line of work (pipeline.read_input called).

Bounded: every process has --timeout seconds; no new round starts after --budget seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

DELIMITERS = {"fetch": "\x1f|\x1e", "pipe-hash": "|#|"}

# The libraries every build imports, alone: the part of the small build's time gpuclust cannot cut.
IMPORTS = "import numpy, pyarrow, pyarrow.compute, pyarrow.csv, pandas"
FLOOR = ("import sys, pyarrow.csv as c; "
         "t = c.read_csv(sys.argv[1], parse_options=c.ParseOptions(delimiter='|')); print(t.num_rows)")

# Runs the CLI as the console script does, with pipeline.read_input wrapped (when its module loads, not before:
# the import order stays the CLI's own) to print the wall clock at the first line of work.
FIRST_WORK = """
import importlib.abc, importlib.machinery, sys, time
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "gpuclust.accounting.pipeline":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            read = module.read_input
            def read_input(*a, **k):
                print(f"FIRST_WORK {time.time():.6f}", file=sys.stderr, flush=True)
                return read(*a, **k)
            module.read_input = read_input
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
sys.argv = ["gpuclust", *sys.argv[1:]]
from gpuclust.cli.main import main
main()
"""


@dataclass
class Timing:
    label: str
    argv: list[str]
    env: dict[str, str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)

    def sample(self, timeout: float, counted: bool) -> None:
        errors = tempfile.TemporaryFile()  # (a file, not a pipe: a full pipe would stall the child)
        t0 = time.perf_counter()
        proc = subprocess.Popen(self.argv, env=self.env, stdout=subprocess.DEVNULL, stderr=errors)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                raise SystemExit(f"{self.label}: over {timeout:.0f} s, killed")
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            errors.seek(0)
            raise SystemExit(f"{self.label}: exit {proc.returncode}\n{errors.read().decode(errors='replace')[-2000:]}")
        errors.close()
        if counted:
            self.wall.append(wall)
            self.cpu.append(usage.ru_utime + usage.ru_stime)
            self.rss_mb.append(usage.ru_maxrss / 1024)

    def row(self) -> dict[str, Any]:
        return {"label": self.label, "runs": len(self.wall), "median_s": round(statistics.median(self.wall), 3),
                "min_s": round(min(self.wall), 3), "max_s": round(max(self.wall), 3),
                "cpu_median_s": round(statistics.median(self.cpu), 3),
                "peak_rss_mb_median": round(statistics.median(self.rss_mb))}


def dump_path(work: Path, rows: int, messy: bool, usage: bool, delimiter: str) -> Path:
    return work / f"sacct-{rows}{'-messy' if messy else ''}{'-usage' if usage else ''}-{delimiter}.txt"


def make_dump(path: Path, rows: int, messy: bool, usage: bool, delimiter: str) -> None:
    if path.exists():
        return
    from accounting_bench import generate

    t = time.perf_counter()
    tmp = path.with_suffix(".part")
    generate(tmp, rows, messy=messy, delimiter=DELIMITERS[delimiter], usage=usage)
    tmp.rename(path)
    print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.0f} s", file=sys.stderr)


def make_clean_copy(dump: Path, clean: Path, delimiter: str, usage: bool) -> tuple[int, int]:
    """The dump's records, one per line, `|`-delimited, only the columns the report reads that the dump fills.
    A record of the dump ends at the newline after its last delimiter (values may hold newlines)."""
    from gpuclust.accounting.ingest.registry import REGISTRY

    d = DELIMITERS[delimiter]
    with dump.open(encoding="utf-8", newline="") as src:
        header = src.readline().rstrip("\n").split(d)
        read = {fd.name for fd in REGISTRY.fields if usage or not fd.step_usage} - {"WCKey"}
        keep = [i for i, name in enumerate(header) if name in read]
        width = len(header) - 1
        if clean.exists():
            return len(keep), sum(1 for _ in clean.open("rb")) - 1
        records = 0
        tmp = clean.with_suffix(".part")
        with tmp.open("w", encoding="utf-8", newline="") as out:
            out.write("|".join(header[i] for i in keep) + "\n")
            pending = ""
            for line in src:
                pending += line
                if pending.count(d) < width:
                    continue
                values = pending.rstrip("\n").split(d)
                pending = ""
                out.write("|".join(" ".join(values[i].replace("|", " ").replace('"', "'").split("\n"))
                                   for i in keep) + "\n")
                records += 1
        tmp.rename(clean)
    return len(keep), records


def byte_compile(python: str, package: Path) -> None:
    subprocess.run([python, "-m", "compileall", "-q", str(package)], check=True, stdout=subprocess.DEVNULL,
                   timeout=300)


def env_for(checkout: Path) -> dict[str, str]:
    """No site config from the caller (the build then uses the defaults, as a user without one meets it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUCLUST_CONFIG", "SLURM_CONF", "PYTHONPATH")}
    env["PYTHONPATH"] = str(checkout)
    return env


def import_summary(python: str, argv: list[str], env: dict[str, str], top: int = 12) -> dict[str, Any]:
    """One run under `python -X importtime`: self time summed by top-level package, and the slowest imports
    that a module of gpuclust (or the entry point) asked for, with their cumulative time."""
    cp = subprocess.run([python, "-X", "importtime", *argv], env=env, capture_output=True, text=True, timeout=300,
                        check=True)
    entries = []
    for line in cp.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|")
        entries.append(((len(name) - len(name.lstrip(" "))) // 2, name.strip(), int(self_us), int(cum_us)))
    by_package: dict[str, float] = defaultdict(float)
    for _, name, self_us, _ in entries:
        by_package[name.split(".")[0]] += self_us / 1e6
    # The parent of an entry is the next one printed at a lesser depth (children print first).
    asked: list[tuple[str, str, float]] = []
    for i, (depth, name, _, cum_us) in enumerate(entries):
        parent = next((e[1] for e in entries[i + 1:] if e[0] < depth), "(entry point)")
        if name.startswith("gpuclust") or parent.startswith("gpuclust") or parent == "(entry point)":
            if not name.startswith("gpuclust") or parent == "(entry point)":
                asked.append((name, parent, cum_us / 1e6))
    return {"total_s": round(sum(e[2] for e in entries) / 1e6, 3),
            "by_package_s": {k: round(v, 3) for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])[:top]},
            "slowest_s": [{"module": n, "imported_by": p, "cumulative_s": round(s, 3)}
                          for n, p, s in sorted(asked, key=lambda x: -x[2])[:top]]}


def first_work_s(python: str, args: list[str], env: dict[str, str]) -> float:
    t0 = time.time()
    cp = subprocess.run([python, "-c", FIRST_WORK, *args], env=env, capture_output=True, text=True, timeout=300,
                        check=True)
    marks = [float(line.split()[1]) for line in cp.stderr.splitlines() if line.startswith("FIRST_WORK ")]
    return round(marks[0] - t0, 3) if marks else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--small-rows", type=int, default=1000)
    ap.add_argument("--messy", action="store_true", help="steps, newlines and pipes in values (as users' dumps)")
    ap.add_argument("--usage", action="store_true", help="with --messy: usage TRES on the step rows")
    ap.add_argument("--delimiter", choices=sorted(DELIMITERS), default="fetch")
    ap.add_argument("--dir", default="/tmp/whole-process")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gpuclust", default=str(Path(sys.executable).parent / "gpuclust"),
                    help="the console script (default: next to this interpreter)")
    ap.add_argument("--compare", default=None, help="another checkout to time in the same rounds (before/after)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds any one process may take")
    ap.add_argument("--budget", type=float, default=900, help="no new round after this many seconds")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the fixed-cost breakdown")
    ap.add_argument("--json", dest="json_out", help="also write the figures as JSON here")
    args = ap.parse_args()
    started = time.perf_counter()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    python = sys.executable

    big = dump_path(work, args.rows, args.messy, args.usage, args.delimiter)
    small = dump_path(work, args.small_rows, args.messy, args.usage, args.delimiter)
    make_dump(big, args.rows, args.messy, args.usage, args.delimiter)
    make_dump(small, args.small_rows, args.messy, args.usage, args.delimiter)
    clean = big.with_name(big.stem + "-clean.psv")
    columns, records = make_clean_copy(big, clean, args.delimiter, args.usage)

    checkouts = {"": REPO, **({"before": Path(args.compare).resolve()} if args.compare else {})}
    for checkout in checkouts.values():
        byte_compile(python, checkout / "gpuclust")
    out = Path(tempfile.mkdtemp(prefix="whole-process-out.", dir=work))
    timings: list[Timing] = []
    for tag, checkout in checkouts.items():
        env = env_for(checkout)
        name = f" ({tag})" if tag else ""
        timings.append(Timing(f"build{name}", [args.gpuclust, "report", "build", "--input", str(big), "--format",
                                               "json", "--out", str(out / f"big{tag}")], env))
        timings.append(Timing(f"small{name}", [args.gpuclust, "report", "build", "--input", str(small), "--format",
                                               "json", "--out", str(out / f"small{tag}")], env))
    timings.insert(1, Timing("floor", [python, "-c", FLOOR, str(clean)], env_for(REPO)))
    timings.append(Timing("imports only", [python, "-c", IMPORTS], env_for(REPO)))

    rounds = 0
    try:
        for i in range(args.repeat + 1):  # (the first round warms the page cache, untimed)
            if i > 1 and time.perf_counter() - started > args.budget:
                print(f"budget of {args.budget:.0f} s spent: {rounds} timed round(s)", file=sys.stderr)
                break
            for timing in timings:
                timing.sample(args.timeout, counted=i > 0)
            rounds += i > 0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    rows = {t.label: t.row() for t in timings}

    breakdown: dict[str, Any] = {}
    if not args.no_breakdown:
        for tag, checkout in checkouts.items():
            env = env_for(checkout)
            with tempfile.TemporaryDirectory(dir=work) as tmp:
                build_args = ["report", "build", "--input", str(small), "--format", "json", "--out", tmp]
                breakdown[tag or "this"] = {
                    "first_work_s": first_work_s(python, build_args, env),
                    "importtime": import_summary(python, [args.gpuclust, *build_args], env),
                }

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "python": platform.python_version(),
        "cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
        "dump": {"path": str(big), "mb": round(big.stat().st_size / 1e6), "small": str(small)},
        "clean_copy": {"path": str(clean), "mb": round(clean.stat().st_size / 1e6), "columns": columns,
                       "records": records},
        "rounds": rounds, "timings": rows,
        "ratio_median": {k.replace("build", "build / floor"): round(r["median_s"] / rows["floor"]["median_s"], 2)
                         for k, r in rows.items() if k.startswith("build")},
        "ratio_per_round": {t.label: [round(a / b, 2) for a, b in zip(t.wall, timings[1].wall, strict=True)]
                            for t in timings if t.label.startswith("build")},
        "breakdown": breakdown,
    }
    print(f"# {result['date']}, Python {result['python']}, {result['cpus']} CPUs, load {result['load_avg']}, "
          f"{rounds} rounds (+1 warm-up); dump {result['dump']['mb']} MB, clean copy {result['clean_copy']['mb']} MB "
          f"({columns} columns, {records} records)")
    print("| process | median s | min-max s | CPU median s | peak RSS MB |")
    print("|---|---|---|---|---|")
    for r in rows.values():
        print(f"| {r['label']} | {r['median_s']:.3f} | {r['min_s']:.3f}-{r['max_s']:.3f} | {r['cpu_median_s']:.3f} | "
              f"{r['peak_rss_mb_median']} |")
    for label, ratio in result["ratio_median"].items():
        print(f"{label} (medians): {ratio}  per round: {result['ratio_per_round'][label.replace('build / floor', 'build')]}")
    for tag, b in breakdown.items():
        imp = b["importtime"]
        print(f"\nfixed cost of the small build ({tag}): first line of work at {b['first_work_s']:.3f} s; "
              f"imports {imp['total_s']:.3f} s (-X importtime, which inflates them)")
        print("  by package: " + ", ".join(f"{k} {v:.3f}" for k, v in imp["by_package_s"].items()))
        print("  slowest:    " + ", ".join(f"{s['module']} {s['cumulative_s']:.3f} (by {s['imported_by']})"
                                           for s in imp["slowest_s"][:8]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
