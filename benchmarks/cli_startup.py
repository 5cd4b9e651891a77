"""Whole-process start-up time of the `gpuclust` CLI (issue 30 item 1), for BENCHMARKS.md.

Each figure is a fresh process (the installed `gpuclust` console script, as NHC, Nagios and cron run it), timed
from fork to exit, REPEATS times after WARMUP untimed runs, the commands taken in turn (round-robin, so that a
change in the machine's load falls on all of them); the median and the maximum are printed, with the median CPU
time (user + sys) of the child. Nothing here is a pass/fail check: the tests assert on which modules get imported
(tests/unit/test_cli_startup.py), never on time.

Commands timed:
  --version, --help                      nothing but the CLI itself
  policy check (offline)                 --slurm-version and --gres-types given: no Slurm command runs
  accept node-status NODE                reads the acceptance results store, no Slurm command
  audit partition PART --json            Slurm commands: their own time is measured apart (below)
  policy check (lab)                     asks sbatch --version and scontrol show config

For the commands that run Slurm, the Slurm commands gpuclust runs are first recorded (one traced run, in a child
process with CommandSlurmClient.run wrapped), then run back to back, REPEATS times, with the same environment
the client gives them: "slurm" is their own time, and gpuclust's overhead is the difference of the medians.

The lab commands run when SLURM_CONF is set (`eval "$(tests/slurm_lab/slurm-lab env)"`); --no-lab skips them.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 15] [--config tests/slurm_lab/lab-site.conf]
        [--node node1] [--partition gpu] [--json OUT.json] [--pythonpath OTHER_CHECKOUT]

--pythonpath times another checkout's package through the same console script, for a before/after:
`git worktree add /tmp/before COMMIT`, then `--pythonpath /tmp/before`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Runs in the traced child: wraps the Slurm edge so that every command gpuclust runs is appended to a file,
# then runs the CLI exactly as the console script does.
_TRACE = """
import json, sys
from gpuclust.slurm.client import CommandSlurmClient
out, argv = sys.argv[1], sys.argv[2:]
original = CommandSlurmClient.run
def run(self, tool, args, **kwargs):
    with open(out, "a") as f:
        f.write(json.dumps({"argv": [tool, *args], "env": self.base_env(), "input": kwargs.get("input_text")}) + "\\n")
    return original(self, tool, args, **kwargs)
CommandSlurmClient.run = run
sys.argv = ["gpuclust", *argv]
from gpuclust.cli.main import main
main()
"""


Call = tuple[list[str], dict[str, str], "str | None"]  # argv, environment, stdin


@dataclass
class Timing:
    label: str
    command: str
    calls: list[Call]  # one sample runs them all, in turn
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    exit_codes: set[int] = field(default_factory=set)

    def row(self) -> dict[str, Any]:
        return {"label": self.label, "command": self.command, "runs": len(self.wall),
                "median_s": round(statistics.median(self.wall), 4), "max_s": round(max(self.wall), 4),
                "min_s": round(min(self.wall), 4), "cpu_median_s": round(statistics.median(self.cpu), 4),
                "exit_codes": sorted(self.exit_codes)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def sample(timing: Timing, counted: bool) -> None:
    """One sample: the timing's calls in turn, fresh processes, output discarded."""
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    for argv, env, input_text in timing.calls:
        proc = subprocess.run(argv, env=env, input=input_text.encode() if input_text is not None else None,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        timing.exit_codes.add(proc.returncode)
    wall = time.perf_counter() - t0
    if counted:
        timing.wall.append(wall)
        timing.cpu.append(_children_cpu() - cpu0)


def run_rounds(timings: list[Timing], repeats: int, warmup: int) -> None:
    """Round-robin: each round samples every timing once, so a change in the machine's load during the run
    falls on all of them alike instead of on whichever ran last."""
    for i in range(warmup + repeats):
        for timing in timings:
            sample(timing, counted=i >= warmup)


def traced_slurm_commands(python: str, args: list[str], env: dict[str, str]) -> list[Call]:
    """The Slurm commands one run of `gpuclust ARGS` runs, in order, each with the environment the client gives
    it on top of `env`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "slurm.jsonl"
        out.touch()
        subprocess.run([python, "-c", _TRACE, str(out), *args], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        calls = [json.loads(line) for line in out.read_text().splitlines()]
    return [([str(a) for a in c["argv"]], {**env, **c["env"]}, c["input"]) for c in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed runs of each command (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--gpuclust", default=str(Path(sys.executable).parent / "gpuclust"),
                        help="the console script (default: next to this interpreter)")
    parser.add_argument("--config", default=str(REPO / "tests/slurm_lab/lab-site.conf"), help="site config")
    parser.add_argument("--node", default="node1", help="node for accept node-status (default node1)")
    parser.add_argument("--partition", default="gpu", help="partition for audit partition (default gpu)")
    parser.add_argument("--no-lab", action="store_true", help="skip the commands that need the Slurm lab")
    parser.add_argument("--json", dest="json_out", help="also write the figures as JSON here")
    parser.add_argument("--pythonpath", default=None,
                        help="put this directory first on PYTHONPATH: time another checkout's gpuclust package "
                             "with the same console script (e.g. a `git worktree` of the commit before)")
    opts = parser.parse_args()

    gpuclust = opts.gpuclust
    env = {**os.environ, "GPUCLUST_CONFIG": opts.config}
    if opts.pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (opts.pythonpath, env.get("PYTHONPATH", "")) if p)
    offline_env = {k: v for k, v in env.items() if k != "SLURM_CONF"}
    sbatch_args = ["--", "-A", "ml", "-p", "gpu", "--gres=gpu:h100:2", "--comment", "team=ml,project=bench",
                   "--time", "1:00:00", "--wrap", "true"]
    cases: list[tuple[str, list[str], dict[str, str], bool]] = [  # label, args, env, runs Slurm
        ("--version", ["--version"], offline_env, False),
        ("--help", ["--help"], offline_env, False),
        ("policy check (offline)", ["policy", "check", "--slurm-version", "22.05", "--gres-types", "gpu",
                                    *sbatch_args], offline_env, False),
        ("accept node-status", ["accept", "node-status", opts.node], offline_env, False),
    ]
    lab = bool(os.environ.get("SLURM_CONF")) and not opts.no_lab
    if lab:
        cases += [
            ("audit partition --json", ["audit", "partition", opts.partition, "--json"], env, True),
            ("policy check (lab)", ["policy", "check", *sbatch_args], env, True),
        ]

    pairs: list[tuple[Timing, Timing | None]] = []
    for label, args, case_env, slurm in cases:
        timing = Timing(label, " ".join(["gpuclust", *args]), [([gpuclust, *args], case_env, None)])
        own = None
        if slurm:
            calls = traced_slurm_commands(sys.executable, args, case_env)
            own = Timing(f"{label}: Slurm", "; ".join(" ".join(a) for a, _, _ in calls), calls)
        pairs.append((timing, own))
    run_rounds([t for pair in pairs for t in pair if t is not None], opts.repeats, opts.warmup)

    rows: list[dict[str, Any]] = []
    for timing, own in pairs:
        row = timing.row()
        if own is not None:
            row["slurm"] = own.row()
            row["overhead_median_s"] = round(row["median_s"] - row["slurm"]["median_s"], 4)
        rows.append(row)

    machine = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
               "load_avg": [round(x, 2) for x in os.getloadavg()], "lab": lab,
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"# {machine['date']}, Python {machine['python']}, {machine['cpus']} CPUs, "
          f"load {machine['load_avg']}, {opts.repeats} runs + {opts.warmup} warm-up each")
    print("| command | median s | max s | CPU median s | Slurm's own median s | gpuclust overhead s | exit |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        slurm_row = row.get("slurm")
        own_s = f"{slurm_row['median_s']:.3f}" if isinstance(slurm_row, dict) else "-"
        overhead = f"{row['overhead_median_s']:.3f}" if "overhead_median_s" in row else "-"
        print(f"| `{row['command']}` | {row['median_s']:.3f} | {row['max_s']:.3f} | {row['cpu_median_s']:.3f} | "
              f"{own_s} | {overhead} | {','.join(map(str, row['exit_codes']))} |")
    for row in rows:
        if isinstance(row.get("slurm"), dict):
            print(f"\nSlurm commands of `{row['command']}`: {row['slurm']['command']}")
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps({"machine": machine, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
