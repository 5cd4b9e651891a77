"""Lua engine time per job for a policy of 50 accounts and 20 rules.

Two runtimes: lupa's Lua 5.1 (the loop runs inside Lua, so no Python<->Lua crossing is timed) and Debian's
lua5.1 binary (a driver script with the 22.05 `slurm` mock). CPU time (process_time / os.clock), best of R. Each job shape is timed
over N calls, best of R repeats. Usage: python benchmarks/policy_engine.py [--n 200000] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import _MOCK, LuaPolicy
from gpuclust.policy.render import render_lua
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
    "rejected at the last rule (untyped)": ["-A", "acct40", "-p", "debug", "--gpus=2",
                                            "--comment", "team=team9 project=res-77 cost=cc-1"],
    "rejected at the first rule (no -A)": ["--gres=gpu:h100:1"],
}

DRIVER = r"""
local src, n = arg[1], tonumber(arg[2])
local known = {}
for name in string.gmatch(arg[3], "[^,]+") do known[name] = true end
local fields = {}
for kv in string.gmatch(arg[4], "[^\1]+") do
  local k, t, v = string.match(kv, "^([^=]+)=(.)(.*)$")
  if t == "n" then fields[k] = tonumber(v) else fields[k] = v end
end
dofile(src)
local job = fields
if arg[6] ~= "plain" then job = setmetatable({}, {__index = function(_, k) if known[k] then return fields[k] end end}) end
local rc = slurm_job_submit(job, {}, 0)
local best = math.huge
for r = 1, tonumber(arg[5]) do
  local t0 = os.clock()
  for i = 1, n do rc = slurm_job_submit(job, {}, 0) end
  best = math.min(best, os.clock() - t0)
end
print(string.format("%.6f %s", best / n * 1e6, tostring(rc)))
"""


def run_lupa(text: str, job: dict, n: int, repeats: int, plain: bool) -> float:
    lua = LuaPolicy(text)
    lua.bench(job, 100, plain=plain)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()  # CPU time: the machine is shared, wall time would count other work
        lua.bench(job, n, plain=plain)
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def run_lua51(text: str, job: dict, n: int, repeats: int, plain: bool) -> float | None:
    exe = shutil.which("lua5.1")
    if not exe:
        return None
    from gpuclust.policy.luasim import JOB_DESC_FIELDS

    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job_submit.lua"
        script.write_text(_MOCK.split("local function proxy")[0] + "\n" + text)  # the mock's slurm table + the script
        driver = Path(tmp) / "driver.lua"
        driver.write_text(DRIVER)
        encoded = "\1".join(f"{k}={'n' if isinstance(v, (int, float)) else 's'}{v}" for k, v in job.items() if v is not None)
        out = subprocess.run([exe, str(driver), str(script), str(n), ",".join(sorted(JOB_DESC_FIELDS)), encoded, str(repeats), "plain" if plain else "proxy"],
                             capture_output=True, text=True, check=True).stdout.split()
        return float(out[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200_000, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per job shape (best is kept)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    policy = compile_policy(parse_config(big_config(), "bench.conf"))
    text = render_lua(policy)
    py = Evaluator(policy)
    rows = []
    for label, sbatch_args in JOBS.items():
        job = job_desc_from_options(sbatch_args, user="alice", default_account="acct00")
        verdict = py.submit(job)
        t0 = time.process_time()
        for _ in range(20_000):
            py.submit(job)
        py_us = (time.process_time() - t0) / 20_000 * 1e6
        row: dict = {"job": label, "verdict": verdict.rule, "python_evaluator_us": round(py_us, 2)}
        for plain in (True, False):
            kind = "plain" if plain else "proxy"
            row[f"lupa_{kind}_us"] = round(run_lupa(text, job, args.n, args.repeats, plain), 2)
            lua51 = run_lua51(text, job, args.n, args.repeats, plain)
            row[f"lua5.1_{kind}_us"] = round(lua51, 2) if lua51 is not None else None
        rows.append(row)
    result = {"accounts": len(policy.accounts), "partitions": len(policy.partitions), "rules": policy.rule_count,
              "non_account_rules": policy.rule_count - sum(bool(a.allowed_partitions is not None) + bool(a.max_gpus)
                                                           for a in policy.accounts.values()),
              "n": args.n, "repeats": args.repeats, "machine": platform.platform(), "python": platform.python_version(),
              "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"policy: {result['accounts']} accounts, {result['partitions']} partitions, {result['non_account_rules']} "
              f"partition/label/global rules (+{result['rules'] - result['non_account_rules']} per-account rules)")
        print("  us per job: engine alone (plain-table job_desc) | with a Lua-function __index proxy job_desc")
        for row in rows:
            print(f"  {row['job']:<38} {row['verdict']:<16} lupa {row['lupa_plain_us']:6.2f} | {row['lupa_proxy_us']:6.2f}   "
                  f"lua5.1 {row['lua5.1_plain_us']} | {row['lua5.1_proxy_us']}   python {row['python_evaluator_us']:.1f}")


if __name__ == "__main__":
    main()
