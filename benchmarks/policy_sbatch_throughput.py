"""sbatch throughput on the slurm-lab with the rendered policy vs the pass-through job_submit.lua, same run.

Rounds alternate the two modes (ABBA order) so drift on the shared machine hits both. In each block,
--concurrency submitters (threads, each running sbatch one call after another) submit --n held, compliant jobs in
all (sbatch --hold: nothing runs; each with a --comment the engine has not seen, unless --same-comment); the jobs
are cancelled afterwards. slurmctld runs job_submit under its job write
lock, so the engine's time is serialised across the submitters. Per mode: jobs/s per block (median, range) and the
p50/p99 latency of single sbatch calls over all its blocks; slurmctld's own CPU time per job (from /proc, the
submit and the cancel), which the other load on a shared machine disturbs far less than the rates; the ratio policy/pass-through of the medians, and of
each ABBA pair. The pass-through script is restored at the end whatever happens.

The estimate (issue 18): many short blocks (default 24 per mode of 64 jobs), ABBA order; the verdict figure is
the median of the per-round ratios policy/pass-through with a 95% confidence interval, both a distribution-free
one (order statistics of the ratios, binomial) and a bootstrap one (percentile, 4000 resamples, fixed seed). The
low-noise figure is slurmctld's CPU per job (one warm-up job per submitter after each script swap, untimed, so
that slurmctld's reload of the script is not counted): the median per mode, and the median of the per-round differences
policy - pass-through (what the policy adds inside slurmctld, under its job write lock) with the same intervals.

--extra-accounts K adds K synthetic accounts (each with allowed_partitions and max_gpus_per_job, every 5th with a
typed limit) to the lab policy and to the gpu partition's allowed_accounts, so the engine runs site-size tables.

Usage: python benchmarks/policy_sbatch_throughput.py [--name perf] [--n 64] [--concurrency 8] [--rounds 24]
                                                     [--extra-accounts 500] [--same-comment] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.render import write_lua

REPO = Path(__file__).resolve().parent.parent
LAB = REPO / "tests" / "slurm_lab" / "slurm-lab"
JOB_HEAD = ["-A", "physics", "--gres=gpu:h100:1", "-t", "5", "--hold", "-o", "/dev/null", "--parsable"]
COMMENT = "team=physics project=bench"


class Comments:
    """The --comment of each sbatch call. By default every job of the run brings a comment the engine has not seen
    (`run=N` after the labels, N counting over the whole run, both modes alike): the engine's memo of comments
    never answers, so the blocks time its full label check. --same-comment sends one comment throughout."""

    def __init__(self, distinct: bool) -> None:
        self.distinct = distinct
        self.counter = 0
        self.lock = threading.Lock()

    def next(self) -> str:
        if not self.distinct:
            return COMMENT
        with self.lock:
            self.counter += 1
            return f"{COMMENT} run={self.counter}"


def run(argv: list[str], env: dict[str, str], check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=check, timeout=120)


def install(name: str, what: str, env: dict[str, str]) -> None:
    run([str(LAB), "--name", name, "policy", what], env)
    time.sleep(1.1)  # slurmctld notices script changes by mtime at 1 s granularity


def block(n: int, concurrency: int, env: dict[str, str], comments: Comments) -> tuple[float, list[float]]:
    """n sbatch calls spread over `concurrency` threads: (jobs per second, latency of each call in s)."""
    ids: list[str] = []
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    per = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    start = threading.Barrier(concurrency + 1)

    def submitter(count: int) -> None:
        start.wait()
        for _ in range(count):
            argv = ["sbatch", *JOB_HEAD, "--comment", comments.next(), "--wrap", "true"]
            t0 = time.perf_counter()
            cp = run(argv, env, check=False)
            dt = time.perf_counter() - t0
            with lock:
                if cp.returncode == 0:
                    ids.append(cp.stdout.strip().split(";")[0])  # cancelled afterwards, even if retried
                    latencies.append(dt)
                # a retry: slurmctld refused and sbatch slept (e.g. MaxJobCount), so the block is not clean
                if cp.returncode != 0 or "retrying" in cp.stderr:
                    errors.append(cp.stderr.strip())

    threads = [threading.Thread(target=submitter, args=(c,)) for c in per]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for i in range(0, len(ids), 200):
        run(["scancel", *ids[i:i + 200]], env, check=False)
    if errors:
        raise SystemExit(f"{len(errors)} sbatch calls failed, e.g.: {errors[0]}")
    return n / elapsed, latencies


def ctld_cpu_s(state_dir: str) -> float | None:
    """slurmctld's CPU time so far (user + system, all threads), from /proc; None when it cannot be read."""
    try:
        pid = int((Path(state_dir) / "run" / "slurmctld.pid").read_text().split()[0])
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]  # nearest rank


def median_ci_rank(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: the order statistics (k, n+1-k) that cover it with probability
    >= level under Binomial(n, 1/2); the full range when n is too small."""
    s, n = sorted(values), len(values)
    best = 0
    for k in range(1, n // 2 + 1):
        cover = 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if cover >= level:
            best = k
    if best == 0:
        return s[0], s[-1]
    return s[best - 1], s[n - best]


def median_ci_bootstrap(values: list[float], level: float = 0.95, resamples: int = 4000) -> tuple[float, float]:
    rng = random.Random(18)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    lo = meds[int((1 - level) / 2 * resamples)]
    hi = meds[min(resamples - 1, int((1 + level) / 2 * resamples))]
    return lo, hi


def estimate(values: list[float]) -> dict:
    return {"median": statistics.median(values), "ci95_rank": median_ci_rank(values),
            "ci95_bootstrap": median_ci_bootstrap(values), "n": len(values)}


def geometric_mean_ci(ratios: list[float], level_z: float = 1.96) -> dict:
    """The geometric mean of paired ratios with a normal 95% interval on their logs (a second estimator beside the
    median: it uses every round's size, where the median uses only their order)."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = level_z * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("inf")
    return {"geometric_mean": math.exp(mean), "ci95": (math.exp(mean - half), math.exp(mean + half)), "n": len(logs)}


def pooled_difference(a: list[float], b: list[float], resamples: int = 4000) -> dict:
    """mean(a) - mean(b) over paired rounds, with a bootstrap 95% interval that resamples whole rounds. Per-block
    CPU is counted in 10 ms clock ticks; pooling all blocks makes the resolution one tick over all the jobs."""
    pairs = list(zip(a, b, strict=False))
    rng = random.Random(18)
    diffs = []
    for _ in range(resamples):
        sample = rng.choices(pairs, k=len(pairs))
        diffs.append(statistics.fmean(x for x, _ in sample) - statistics.fmean(y for _, y in sample))
    diffs.sort()
    return {"difference": statistics.fmean(a) - statistics.fmean(b), "mean_a": statistics.fmean(a),
            "mean_b": statistics.fmean(b), "ci95_bootstrap": (diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples)])}


def lab_policy(conf: str, extra_accounts: int) -> str:
    if not extra_accounts:
        return conf
    names = [f"site{i:03d}" for i in range(extra_accounts)]
    conf = conf.replace("allowed_accounts = physics, ml", "allowed_accounts = physics, ml, " + ", ".join(names))
    sections = []
    for i, acct in enumerate(names):
        sections += [f"[account {acct}]", "allowed_partitions = gpu, debug", f"max_gpus_per_job = {4 + i % 5}",
                     *([f"gpu_limit.h100 = {4 + i % 7}"] if i % 5 == 0 else []), ""]
    return conf.replace("[qos ", "\n".join(sections) + "\n[qos ", 1)


def lab_context(name: str, extra_accounts: int) -> tuple[dict, dict[str, str], str]:
    """The running lab's description (`slurm-lab env --json`), the environment for its clients, and the lab policy
    (tests/data/policy/lab-site.conf for this lab's cluster, plus `extra_accounts` synthetic accounts)."""
    info = json.loads(run([str(LAB), "--name", name, "env", "--json"], dict(os.environ)).stdout)
    env = {**os.environ, **info["env"]}
    conf = (REPO / "tests" / "data" / "policy" / "lab-site.conf").read_text()
    conf = conf.replace("cluster_name = policy", f"cluster_name = {info['cluster_name']}")
    return info, env, lab_policy(conf, extra_accounts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=os.environ.get("SLURM_LAB_NAME", "policy"), help="slurm-lab instance")
    parser.add_argument("--n", type=int, default=64, help="sbatch calls per block (all submitters together)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent submitters")
    parser.add_argument("--rounds", type=int, default=24, help="blocks per mode (ABBA order)")
    parser.add_argument("--extra-accounts", type=int, default=500, help="synthetic accounts added to the lab policy")
    parser.add_argument("--same-comment", action="store_true",
                        help="one --comment for every job (default: a new comment per job, as distinct runs send)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    comments = Comments(distinct=not args.same_comment)
    info, env, conf = lab_context(args.name, args.extra_accounts)
    rates: dict[str, list[float]] = {"passthrough": [], "policy": []}
    lats: dict[str, list[float]] = {"passthrough": [], "policy": []}
    load: list[float] = []
    load_start = os.getloadavg()
    ctld_ms: dict[str, list[float]] = {"passthrough": [], "policy": []}
    with tempfile.TemporaryDirectory() as tmp:
        lua = write_lua(compile_policy(parse_config(conf, "lab-site.conf")), Path(tmp) / "job_submit.lua")
        try:
            install(args.name, "default", env)
            block(max(args.concurrency, 16), args.concurrency, env, comments)  # warm-up, not counted
            for r in range(args.rounds):
                order = ("passthrough", "policy") if r % 4 in (0, 3) else ("policy", "passthrough")
                for mode in order:
                    install(args.name, "default" if mode == "passthrough" else str(lua), env)
                    # slurmctld (re)loads the script at the first job after a change: warm it up outside the timed
                    # block, so the blocks time steady-state submits (loading the 500-account script is ms of CPU)
                    block(args.concurrency, args.concurrency, env, comments)
                    c0 = ctld_cpu_s(info["state_dir"])
                    rate, latencies = block(args.n, args.concurrency, env, comments)
                    c1 = ctld_cpu_s(info["state_dir"])
                    if c0 is not None and c1 is not None:  # includes the scancel of the block's jobs
                        ctld_ms[mode].append(1000 * (c1 - c0) / args.n)
                    rates[mode].append(rate)
                    lats[mode].extend(latencies)
                    load.append(os.getloadavg()[0])
        finally:
            install(args.name, "default", env)
    med = {k: statistics.median(v) for k, v in rates.items()}
    pairs = [p / q for p, q in zip(rates["policy"], rates["passthrough"], strict=True)]
    ctld_diff = [p - q for p, q in zip(ctld_ms["policy"], ctld_ms["passthrough"], strict=False)]
    result = {
        "n_per_block": args.n, "concurrency": args.concurrency, "rounds": args.rounds,
        "policy_accounts": 2 + args.extra_accounts, "jobs_per_s": rates, "median_jobs_per_s": med,
        "ratio_policy_over_passthrough": med["policy"] / med["passthrough"],
        "ratio_per_round": pairs,
        "ratio_per_round_estimate": estimate(pairs),
        "ratio_per_round_geometric_mean": geometric_mean_ci(pairs),
        "distinct_comments": comments.distinct,
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
        "latency_ms": {k: {"p50": 1000 * percentile(v, 50), "p99": 1000 * percentile(v, 99), "max": 1000 * max(v),
                           "calls": len(v)} for k, v in lats.items()},
        "loadavg_1min_per_block": load,
        "slurmctld_cpu_ms_per_job": ctld_ms,
        "slurmctld_cpu_ms_per_job_median": {k: statistics.median(v) for k, v in ctld_ms.items() if v},
        "slurmctld_cpu_ms_per_job_added_by_policy": estimate(ctld_diff) if ctld_diff else None,
        "slurmctld_cpu_ms_per_job_added_pooled": (pooled_difference(ctld_ms["policy"], ctld_ms["passthrough"])
                                                  if ctld_diff else None),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for mode, values in rates.items():
            lat = result["latency_ms"][mode]
            print(f"{mode:<12} median {med[mode]:6.1f} jobs/s   blocks: {', '.join(f'{v:.1f}' for v in values)}   "
                  f"latency p50 {lat['p50']:.1f} ms  p99 {lat['p99']:.1f} ms  max {lat['max']:.1f} ms")
        for mode, values in ctld_ms.items():
            if values:
                print(f"{mode:<12} slurmctld CPU per job (submit + cancel): median {statistics.median(values):.3f} ms   "
                      f"blocks: {', '.join(f'{v:.3f}' for v in values)}")
        print(f"ratio of medians policy/passthrough: {result['ratio_policy_over_passthrough']:.3f}   per round: "
              f"{', '.join(f'{p:.2f}' for p in pairs)}")
        e = result["ratio_per_round_estimate"]
        print(f"median of per-round ratios: {e['median']:.3f}   95% CI rank {e['ci95_rank'][0]:.3f}-{e['ci95_rank'][1]:.3f}"
              f"   bootstrap {e['ci95_bootstrap'][0]:.3f}-{e['ci95_bootstrap'][1]:.3f}   ({e['n']} rounds)")
        g = result["ratio_per_round_geometric_mean"]
        print(f"geometric mean of per-round ratios: {g['geometric_mean']:.3f}   95% CI {g['ci95'][0]:.3f}-{g['ci95'][1]:.3f}"
              f"   ({'a new comment per job' if comments.distinct else 'one comment for every job'})")
        d = result["slurmctld_cpu_ms_per_job_added_by_policy"]
        if d:
            print(f"slurmctld CPU added by the policy per job (per-round differences): median {d['median']:.3f} ms   "
                  f"95% CI rank {d['ci95_rank'][0]:.3f}-{d['ci95_rank'][1]:.3f}   bootstrap "
                  f"{d['ci95_bootstrap'][0]:.3f}-{d['ci95_bootstrap'][1]:.3f}")
        pooled = result["slurmctld_cpu_ms_per_job_added_pooled"]
        if pooled:
            print(f"slurmctld CPU per job, all blocks pooled: policy {pooled['mean_a']:.4f} ms, pass-through "
                  f"{pooled['mean_b']:.4f} ms, added {pooled['difference']:.4f} ms   95% CI bootstrap "
                  f"{pooled['ci95_bootstrap'][0]:.4f}-{pooled['ci95_bootstrap'][1]:.4f}")
        print(f"load avg (1 min) per block {min(load):.1f}-{max(load):.1f}; at start {load_start}, at end {result['loadavg_end']}")


if __name__ == "__main__":
    main()
