"""Lua engine time per job for policies of 50 and 500 accounts (issue 18: <= 5 us per job in Lua 5.1).

Runtime: Debian's lua5.1 binary (the same Lua 5.1 that slurmctld's job_submit_lua.so links), with the 22.05 `slurm`
mock of gpuclust.policy.luasim, whose log functions keep only the last message here (as slurmctld's, which format
and append to one per-job buffer); optionally lupa's bundled Lua 5.1 too (--lupa). The loop runs inside Lua, so
nothing else is timed. CPU time (os.clock), best of --repeats per process; --rounds processes per variant,
alternated, and the median and range over rounds are reported (the machine is shared).

Variants per job shape:
  proxy / plain   job_desc behind a metatable whose __index is a function (as slurmctld's, which is a C call per
                  read) / a plain table (the engine alone).
  memo hit / miss the same job again and again (its GPU strings and comment were seen before: the engine's memo
                  answers) / every job's strings new (the memo is disabled by rendering CACHE_LEN = -1).
  --compare OLD   another engine.lua (e.g. `git show main:gpuclust/policy/engine.lua > /tmp/old.lua`), rendered
                  with the same policy tables and timed in the same rounds, alternating.

Usage: python benchmarks/policy_engine.py [--accounts 50,500] [--n 100000] [--repeats 5] [--rounds 3]
                                          [--compare OLD.lua] [--lupa] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import _MOCK, JOB_DESC_FIELDS, LuaPolicy
from gpuclust.policy.render import engine_source, render_lua
from gpuclust.policy.sbatch import job_desc_from_options

ACCOUNT_COUNTS = (50, 500)


def big_config(n_accounts: int = 50) -> str:
    """A site of n_accounts accounts (each with labels, allowed_partitions and max_gpus_per_job; every 5th with a typed
    GPU limit, every 7th with a per-user limit), 4 partitions that allow every account, 3 required labels."""
    accounts = [f"acct{i:02d}" for i in range(n_accounts)]
    lines = ["[site]", "cluster_name = bench", ""]
    # 4 partitions x 4 rules = 16 partition rules
    for name, gtype in (("h100", "h100"), ("a100", "a100"), ("l40", "l40"), ("debug", None)):
        lines += [f"[partition {name}]", *( [f"gpu_type = {gtype}", "require_gpu = yes", "require_typed_gpu = yes"] if gtype else []),
                  "max_gpus_per_job = 64", "max_time = 2-00:00:00", f"allowed_accounts = {', '.join(accounts)}", ""]
    for i, acct in enumerate(accounts):
        lines += [f"[account {acct}]", f"labels = team=team{i % 10}, project=proj-{i}",
                  "allowed_partitions = h100, a100, l40, debug", f"max_gpus_per_job = {32 + i}",
                  *( [f"gpu_limit.h100 = {8 + i}"] if i % 5 == 0 else []),
                  *( [f"max_gpus_per_user = {4 + i % 8}"] if i % 7 == 0 else []), ""]
    lines += ["[qos normal]", "max_gpus_per_user = 16", "",
              "[policy]", "fail_mode = closed", "require_account = yes", "default_partition = h100",
              "required_labels = team, project, cost",
              "label.team = " + ", ".join(f"team{i}" for i in range(10)),
              "label.project = proj-*, res-*, ?x?", "label.cost = cc-*",
              "exempt_users = root", "reject_untyped_gpu_where_typed_limits = yes"]
    return "\n".join(lines) + "\n"


JOBS = {
    "accepted (typed, labels, 2 nodes)": ["-A", "acct42", "-p", "h100", "-N", "2", "--gres=gpu:h100:4", "-t", "1-00:00:00",
                                          "--comment", "team=team9 project=res-77 cost=cc-1"],
    "accepted (per-task GPUs, 2x4 tasks)": ["-A", "acct123", "-p", "a100", "-N", "2", "--ntasks-per-node", "4",
                                            "--gpus-per-task=a100:1", "-t", "12:00:00",
                                            "--comment", "team=team3 project=proj-9 cost=cc-7"],
    "rejected at the last rule (untyped)": ["-A", "acct40", "-p", "debug", "--gpus=2",
                                            "--comment", "team=team9 project=res-77 cost=cc-1"],
    "rejected at the first rule (no -A)": ["--gres=gpu:h100:1"],
}

DRIVER = r"""
local src, n, repeats, mode = arg[1], tonumber(arg[2]), tonumber(arg[5]), arg[6]
local known = {}
for name in string.gmatch(arg[3], "[^,]+") do known[name] = true end
local fields = {}
for kv in string.gmatch(arg[4], "[^\1]+") do
  local k, t, v = string.match(kv, "^([^=]+)=(.)(.*)$")
  if t == "n" then fields[k] = tonumber(v) else fields[k] = v end
end
dofile(src)
local last_msg, last_log
slurm.user_msg = function(msg) last_msg = msg end -- one message kept, as slurmctld's per-job buffer
slurm.log = function(level, msg) last_log = msg end
slurm.error = function(msg) last_log = msg end
local reads = 0
local counting = setmetatable({}, {__index = function(_, k) reads = reads + 1; if known[k] then return fields[k] end end})
local rc = slurm_job_submit(counting, {}, 0)
local job = fields
if mode ~= "plain" then job = setmetatable({}, {__index = function(_, k) if known[k] then return fields[k] end end}) end
local times = {}
for r = 1, repeats do
  local t0 = os.clock()
  for i = 1, n do rc = slurm_job_submit(job, {}, 0) end
  times[r] = (os.clock() - t0) / n * 1e6
end
table.sort(times)
print(string.format("%.6f %s %d", times[1], tostring(rc), reads))
"""

MEMO_LINE = "local CACHE_MAX, CACHE_LEN = 1024, 512"


def lua51_script(text: str, tmp: Path, tag: str) -> Path:
    script = tmp / f"job_submit-{tag}.lua"
    script.write_text(_MOCK.split("local function proxy")[0] + "\n" + text)  # the mock's slurm table + the script
    return script


def run_lua51(exe: str, script: Path, driver: Path, job: dict, n: int, repeats: int, plain: bool) -> tuple[float, str, int]:
    encoded = "\1".join(f"{k}={'n' if isinstance(v, (int, float)) else 's'}{v}" for k, v in job.items() if v is not None)
    out = subprocess.run([exe, str(driver), str(script), str(n), ",".join(sorted(JOB_DESC_FIELDS)), encoded, str(repeats),
                          "plain" if plain else "proxy"], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), out[1], int(out[2])


def run_lupa(text: str, job: dict, n: int, repeats: int, plain: bool) -> float:
    lua = LuaPolicy(text)
    lua.bench(job, 100, plain=plain)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()  # CPU time: the machine is shared, wall time would count other work
        lua.bench(job, n, plain=plain)
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "rounds": [round(v, 3) for v in values]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="50,500", help="comma-separated account counts")
    parser.add_argument("--n", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per process (best is kept)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant, alternated (median reported)")
    parser.add_argument("--compare", type=Path, help="another engine.lua timed alongside (before/after)")
    parser.add_argument("--lupa", action="store_true", help="also time lupa's Lua 5.1 (slower to run)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    exe = shutil.which("lua5.1")
    if not exe:
        raise SystemExit("lua5.1 not found (apt-get install lua5.1)")
    engines = {"current": engine_source()}
    if args.compare:
        engines["compare"] = args.compare.read_text()
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        driver = tmp / "driver.lua"
        driver.write_text(DRIVER)
        for n_accounts in (int(x) for x in args.accounts.split(",")):
            policy = compile_policy(parse_config(big_config(n_accounts), "bench.conf"))
            text = render_lua(policy)
            py = Evaluator(policy)
            scripts: dict[str, Path] = {}
            texts: dict[str, str] = {}
            for name, source in engines.items():
                t = text.replace(engine_source(), source)
                texts[name] = t
                if MEMO_LINE in source:
                    scripts[f"{name}/hit"] = lua51_script(t, tmp, f"{n_accounts}-{name}-hit")
                    scripts[f"{name}/miss"] = lua51_script(t.replace(MEMO_LINE, "local CACHE_MAX, CACHE_LEN = 1024, -1"),
                                                           tmp, f"{n_accounts}-{name}-miss")
                else:
                    scripts[f"{name}"] = lua51_script(t, tmp, f"{n_accounts}-{name}")
            for label, sbatch_args in JOBS.items():
                job = job_desc_from_options(sbatch_args, user="alice", default_account="acct00")
                verdict = py.submit(job)
                t0 = time.process_time()
                for _ in range(20_000):
                    py.submit(job)
                py_us = (time.process_time() - t0) / 20_000 * 1e6
                row: dict = {"accounts": n_accounts, "job": label, "verdict": verdict.rule, "python_evaluator_us": round(py_us, 2),
                             "lua5.1": {}}
                times: dict[str, list[float]] = {}
                reads: dict[str, int] = {}
                for r in range(args.rounds):
                    keys = [(k, plain) for k in scripts for plain in (False, True)]
                    if r % 2:
                        keys.reverse()
                    for key, plain in keys:
                        us, rc, nreads = run_lua51(exe, scripts[key], driver, job, args.n, args.repeats, plain)
                        if (rc == "0") != verdict.accepted:
                            raise SystemExit(f"{key}: Lua verdict rc={rc} differs from Python's {verdict.rule}")
                        variant = f"{key} {'plain' if plain else 'proxy'}"
                        times.setdefault(variant, []).append(us)
                        reads[key] = nreads
                row["lua5.1"] = {k: summary(v) for k, v in times.items()}
                row["field_reads"] = reads
                if args.lupa:
                    row["lupa_proxy_us"] = {name: round(run_lupa(t, job, args.n, args.repeats, False), 3)
                                            for name, t in texts.items()}
                results.append(row)
    result = {"n": args.n, "repeats": args.repeats, "rounds": args.rounds, "machine": platform.platform(),
              "cpus": os.cpu_count(), "loadavg_end": os.getloadavg(), "python": platform.python_version(), "rows": results}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("us per job, lua5.1, median [min-max] over rounds (best of repeats within each)")
    for row in results:
        print(f"{row['accounts']:>4} accounts  {row['job']:<38} {row['verdict']:<16} python {row['python_evaluator_us']:.1f} us"
              f"  field reads {row['field_reads']}")
        for variant, st in row["lua5.1"].items():
            print(f"        {variant:<22} {st['median']:7.3f}  [{st['min']:.3f}-{st['max']:.3f}]")
        if "lupa_proxy_us" in row:
            print(f"        lupa proxy {row['lupa_proxy_us']}")
    print(f"load average at the end: {result['loadavg_end']}")


if __name__ == "__main__":
    main()
