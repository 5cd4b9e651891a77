"""sbatch throughput on the slurm-lab with the rendered policy vs the pass-through job_submit.lua, same run.

Rounds alternate the two modes (ABBA order) so drift on the shared machine hits both; each block submits N held,
compliant jobs one after another (sbatch --hold: nothing runs) and cancels them afterwards. The pass-through
script is restored at the end whatever happens.
Usage: python benchmarks/policy_sbatch_throughput.py [--name policy] [--n 60] [--rounds 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.render import write_lua

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "tests" / "slurm_lab" / "slurm-lab"
JOB = ["-A", "physics", "--gres=gpu:h100:1", "--comment", "team=physics project=bench", "-t", "5", "--hold",
       "-o", "/dev/null", "--parsable", "--wrap", "true"]


def run(argv: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=check, timeout=120)


def install(name: str, what: str, env: dict[str, str]) -> None:
    run([str(LAB), "--name", name, "policy", what], env)
    time.sleep(1.1)  # slurmctld notices script changes by mtime at 1 s granularity


def block(n: int, env: dict[str, str]) -> float:
    ids = []
    t0 = time.perf_counter()
    for _ in range(n):
        cp = run(["sbatch", *JOB], env)
        ids.append(cp.stdout.strip().split(";")[0])
    elapsed = time.perf_counter() - t0
    run(["scancel", *ids], env, check=False)
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default=os.environ.get("SLURM_LAB_NAME", "policy"), help="slurm-lab instance")
    parser.add_argument("--n", type=int, default=60, help="sbatch calls per block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks per mode")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    info = json.loads(run([str(LAB), "--name", args.name, "env", "--json"], dict(os.environ)).stdout)
    env = {**os.environ, **info["env"]}
    conf = (REPO / "tests" / "data" / "policy" / "lab-site.conf").read_text()
    conf = conf.replace("cluster_name = policy", f"cluster_name = {info['cluster_name']}")
    with tempfile.TemporaryDirectory() as tmp:
        lua = write_lua(compile_policy(parse_config(conf, "lab-site.conf")), Path(tmp) / "job_submit.lua")
        rates: dict[str, list[float]] = {"passthrough": [], "policy": []}
        try:
            for r in range(args.rounds):
                order = ("passthrough", "policy") if r % 2 == 0 else ("policy", "passthrough")
                for mode in order:
                    install(args.name, "default" if mode == "passthrough" else str(lua), env)
                    rates[mode].append(block(args.n, env))
        finally:
            install(args.name, "default", env)
    med = {k: statistics.median(v) for k, v in rates.items()}
    result = {"n_per_block": args.n, "rounds": args.rounds, "jobs_per_s": rates, "median_jobs_per_s": med,
              "ratio_policy_over_passthrough": med["policy"] / med["passthrough"]}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for mode, values in rates.items():
            print(f"{mode:<12} median {med[mode]:6.1f} jobs/s   blocks: {', '.join(f'{v:.1f}' for v in values)}")
        print(f"ratio policy/passthrough: {result['ratio_policy_over_passthrough']:.3f}")


if __name__ == "__main__":
    main()
