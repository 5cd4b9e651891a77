"""Lua engine time per job for policies of 50 and 500 accounts (issue 18: <= 5 us per job in Lua 5.1).

Runtime: Debian's lua5.1 binary (the same Lua 5.1 that slurmctld's job_submit_lua.so links), with the 22.05 `slurm`
mock of gpuclust.policy.luasim, whose log functions keep only the last message here (as slurmctld's, which format
and append to one per-job buffer); optionally lupa's bundled Lua 5.1 too (--lupa). The loop runs inside Lua, so
nothing else is timed. CPU time (os.clock), best of --repeats per process; --rounds processes per variant,
alternated, and the median and range over rounds are reported (the machine is shared).

Variants per job shape:
  proxy / plain   job_desc behind a metatable whose __index is a function (as slurmctld's, which is a C call per
                  read) / a plain table (the engine alone).
  hit / cmiss / miss
                  the same job again and again (its GPU strings and comment were seen before: the engine's memos
                  answer) / a new comment per call (GPU strings seen before: a site sends few distinct ones) /
                  a new comment per call and the GPU memo off (every string parsed; the worst case).
  --compare OLD   another engine.lua (e.g. `git show main:gpuclust/policy/engine.lua > /tmp/old.lua`), rendered
                  with the same policy tables and timed in the same rounds, alternating.

Usage: python benchmarks/policy_engine.py [--shape big,wide] [--accounts 50,500] [--n 100000] [--repeats 5]
                                          [--rounds 3] [--distinct 20000] [--only TEXT] [--plain]
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


def wide_config(n_accounts: int = 500) -> str:
    """Another site shape (--shape wide): n_accounts accounts, each with a subset of the 4 partitions, a job limit,
    typed GPU limits (two types) and a per-user limit; partitions with allowed_accounts, a wckey rule and a QOS;
    6 required labels, several with many globs (prefix, suffix, infix, ?, several *) besides exact values."""
    accounts = [f"grp-{i:03d}.lab" for i in range(n_accounts)]
    parts = (("h100", "h100"), ("a100", "a100"), ("l40", "l40"), ("cpu", None))
    lines = ["[site]", "cluster_name = bench", ""]
    for name, gtype in parts:
        lines += [f"[partition {name}]", *([f"gpu_type = {gtype}", "require_gpu = yes", "require_typed_gpu = yes",
                                            "gpus_per_node = 8"] if gtype else []),
                  f"max_gpus_per_job = {128 if gtype else 8}", "max_time = 3-00:00:00",
                  f"allowed_accounts = {', '.join(accounts)}", *(["qos = gpuq"] if gtype == "l40" else []), ""]
    for i, acct in enumerate(accounts):
        allowed = [p for j, (p, _) in enumerate(parts) if (i + j) % 4 != 3] + (["h100"] if i % 4 == 0 else [])
        lines += [f"[account {acct}]", f"labels = team=t{i % 40}, project=p{i}",
                  f"allowed_partitions = {', '.join(dict.fromkeys(allowed))}", f"max_gpus_per_job = {64 + i}",
                  f"gpu_limit.h100 = {16 + i % 32}", f"gpu_limit.a100 = {8 + i % 16}", f"max_gpus_per_user = {8 + i % 8}", ""]
    lines += ["[qos gpuq]", "gpu_limit.l40 = 64", "",
              "[policy]", "fail_mode = closed", "require_account = yes", "default_partition = h100",
              "required_labels = team, project, cost, env, model, owner",
              "label.team = " + ", ".join(f"team-{i}" for i in range(40)) + ", ext-*, *-guest",
              "label.project = proj-*, res-*, *-prod, *-dev, lab?-*, x*y*z, p??-*, grant-20??-*, *.exp",
              "label.cost = cc-*, *-cc, ledger-????",
              "label.env = prod, dev, staging, test, ci-*",
              "label.model = *",
              "label.owner = *@*, svc-*",
              "exempt_users = root, slurm", "reject_untyped_gpu_where_typed_limits = yes"]
    return "\n".join(lines) + "\n"


SHAPES = {"big": lambda n: big_config(n), "wide": lambda n: wide_config(n)}


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


# Per shape: job label -> sbatch options. "{i}" in the comment is replaced by a number: 0 for every call in the
# memo-hit variant, a different one per call in the memo-miss variant (every comment new to the engine).
JOBS = {
    "big": {
        "accepted (typed, labels, 2 nodes)": ["-A", "acct42", "-p", "h100", "-N", "2", "--gres=gpu:h100:4", "-t", "1-00:00:00",
                                              "--comment", "team=team9 project=res-77{i} cost=cc-1{i}"],
        "accepted (per-task GPUs, 2x4 tasks)": ["-A", "acct123", "-p", "a100", "-N", "2", "--ntasks-per-node", "4",
                                                "--gpus-per-task=a100:1", "-t", "12:00:00",
                                                "--comment", "team=team3 project=proj-9{i} cost=cc-7{i}"],
        "rejected at the last rule (untyped)": ["-A", "acct40", "-p", "debug", "--gpus=2",
                                                "--comment", "team=team9 project=res-77{i} cost=cc-1{i}"],
        "rejected at the first rule (no -A)": ["--gres=gpu:h100:1"],
    },
    "wide": {
        "accepted (typed, 6 labels, globs late)": [
            "-A", "grp-042.lab", "-p", "h100", "-N", "2", "--gres=gpu:h100:4", "-t", "1-00:00:00",
            "--comment", "note=x{i};team=ext-q{i}, project=grant-2026-r{i} cost=ledger-0042 env=ci-{i} model=llama{i} "
                         "owner=al{i}@lab.example"],
        "accepted (per-task GPUs, 2x4 tasks)": [
            "-A", "grp-124.lab", "-p", "a100", "-N", "2", "--ntasks-per-node", "4", "--gpus-per-task=a100:1",
            "-t", "12:00:00", "--comment", "team=team-39 project=run{i}.exp cost=x{i}-cc env=prod model=m{i} owner=svc-{i}"],
        "rejected at the last rule (untyped)": [
            "-A", "grp-041.lab", "-p", "cpu", "--gpus=2",
            "--comment", "team=team-7 project=proj-{i} cost=cc-{i} env=dev model=m{i} owner=a{i}@b"],
        "rejected at a label (owner value)": [
            "-A", "grp-042.lab", "-p", "h100", "--gres=gpu:h100:1",
            "--comment", "team=team-7 project=proj-{i} cost=cc-{i} env=dev model=m{i} owner=nobody{i}"],
    },
}

DRIVER = r"""
local src, n, repeats, mode, comments_file = arg[1], tonumber(arg[2]), tonumber(arg[5]), arg[6], arg[7]
local known = {}
for name in string.gmatch(arg[3], "[^,]+") do known[name] = true end
local fields = {}
for kv in string.gmatch(arg[4], "[^\1]+") do
  local k, t, v = string.match(kv, "^([^=]+)=(.)(.*)$")
  if t == "n" then fields[k] = tonumber(v) else fields[k] = v end
end
-- memo miss: the comments of the calls, made before the clock starts (string creation is not timed)
local C, nc = {}, 0
if comments_file ~= "" then
  for line in io.lines(comments_file) do nc = nc + 1; C[nc] = line end
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
  if nc > 0 then
    local j = 0
    for i = 1, n do
      j = j + 1
      if j > nc then j = 1 end
      fields.comment = C[j]
      rc = slurm_job_submit(job, {}, 0)
    end
  else
    for i = 1, n do rc = slurm_job_submit(job, {}, 0) end
  end
  times[r] = (os.clock() - t0) / n * 1e6
end
table.sort(times)
print(string.format("%.6f %s %d", times[1], tostring(rc), reads))
"""

# The memo-miss variant renders the GPU-string memo off (every GPU string is parsed, as when each is new; a site
# cannot send thousands of distinct ones that mean the same job) and feeds every call a comment not seen before
# (the label memo misses, and takes its insertions and drops as in slurmctld).
MEMO_LINE = "local GPU_CACHE_LEN = CACHE_LEN"
MISS_LINE = "local GPU_CACHE_LEN = -1"
OLD_MEMO_LINE = "local CACHE_MAX, CACHE_LEN = 1024, 512"
OLD_MISS_LINE = "local CACHE_MAX, CACHE_LEN = 1024, -1"


def lua51_script(text: str, tmp: Path, tag: str) -> Path:
    script = tmp / f"job_submit-{tag}.lua"
    script.write_text(_MOCK.split("local function proxy")[0] + "\n" + text)  # the mock's slurm table + the script
    return script


def run_lua51(exe: str, script: Path, driver: Path, job: dict, n: int, repeats: int, plain: bool,
              comments: Path | None) -> tuple[float, str, int]:
    encoded = "\1".join(f"{k}={'n' if isinstance(v, (int, float)) else 's'}{v}" for k, v in job.items() if v is not None)
    out = subprocess.run([exe, str(driver), str(script), str(n), ",".join(sorted(JOB_DESC_FIELDS)), encoded, str(repeats),
                          "plain" if plain else "proxy", str(comments) if comments else ""],
                         capture_output=True, text=True, check=True).stdout.split()
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


def comments_file(tmp: Path, tag: str, template: str, count: int) -> Path:
    path = tmp / f"comments-{tag}.txt"
    path.write_text("".join(template.replace("{i}", str(i)) + "\n" for i in range(1, count + 1)))
    return path


def time_shape(args: argparse.Namespace, exe: str, tmp: Path, driver: Path, engines: dict[str, str], shape: str,
               n_accounts: int) -> list[dict]:
    policy = compile_policy(parse_config(SHAPES[shape](n_accounts), "bench.conf"))
    text = render_lua(policy)
    py = Evaluator(policy)
    scripts: dict[str, Path] = {}
    texts: dict[str, str] = {}
    for name, source in engines.items():
        t = text.replace(engine_source(), source)
        texts[name] = t
        tag = f"{shape}-{n_accounts}-{name}"
        if MEMO_LINE in source:
            scripts[f"{name}/hit"] = lua51_script(t, tmp, f"{tag}-hit")
            scripts[f"{name}/cmiss"] = scripts[f"{name}/hit"]  # the same script, fed a new comment per call
            scripts[f"{name}/miss"] = lua51_script(t.replace(MEMO_LINE, MISS_LINE), tmp, f"{tag}-miss")
        elif OLD_MEMO_LINE in source:  # an engine from before the GPU memo had its own switch: both memos off
            scripts[f"{name}/hit"] = lua51_script(t, tmp, f"{tag}-hit")
            scripts[f"{name}/cmiss"] = scripts[f"{name}/hit"]
            scripts[f"{name}/miss"] = lua51_script(t.replace(OLD_MEMO_LINE, OLD_MISS_LINE), tmp, f"{tag}-miss")
        else:
            scripts[f"{name}"] = lua51_script(t, tmp, tag)
    rows = []
    for k, (label, template) in enumerate(JOBS[shape].items()):
        if args.only not in label:
            continue
        sbatch_args = [a.replace("{i}", "0") for a in template]
        job = job_desc_from_options(sbatch_args, user="alice", default_account="acct00")
        verdict = py.submit(job)
        comment = next((template[i + 1] for i, a in enumerate(template[:-1]) if a == "--comment"), None)
        miss_comments = None
        if comment and "{i}" in comment:
            count = min(args.n, args.distinct)  # > the memo's 1024 entries: every call misses
            miss_comments = comments_file(tmp, f"{shape}-{n_accounts}-{k}", comment, count)
            for i in (1, 2, count):  # the varied comments must not change the verdict
                v = py.submit({**job, "comment": comment.replace("{i}", str(i))})
                if v.rule != verdict.rule:
                    raise SystemExit(f"{label}: comment {i} gives {v.rule}, not {verdict.rule}")
        t0 = time.process_time()
        for _ in range(20_000):
            py.submit(job)
        py_us = (time.process_time() - t0) / 20_000 * 1e6
        row: dict = {"shape": shape, "accounts": n_accounts, "job": label, "verdict": verdict.rule,
                     "python_evaluator_us": round(py_us, 2), "lua5.1": {}}
        times: dict[str, list[float]] = {}
        reads: dict[str, int] = {}
        for r in range(args.rounds):
            keys = [(key, plain) for key in scripts for plain in ((False, True) if args.plain else (False,))]
            if r % 2:
                keys.reverse()
            for key, plain in keys:
                cf = miss_comments if key.endswith("miss") else None
                us, rc, nreads = run_lua51(exe, scripts[key.replace("/cmiss", "/hit")], driver, job, args.n, args.repeats,
                                           plain, cf)
                if (rc == "0") != verdict.accepted:
                    raise SystemExit(f"{key}: Lua verdict rc={rc} differs from Python's {verdict.rule}")
                variant = f"{key} {'plain' if plain else 'proxy'}"
                times.setdefault(variant, []).append(us)
                reads[key] = nreads
        row["lua5.1"] = {v: summary(t) for v, t in times.items()}
        row["field_reads"] = reads
        if args.lupa:
            row["lupa_proxy_us"] = {name: round(run_lupa(t, job, args.n, args.repeats, False), 3)
                                    for name, t in texts.items()}
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--accounts", default="50,500", help="comma-separated account counts")
    parser.add_argument("--shape", default="big", help="comma-separated policy shapes: big (big_config), wide (wide_config)")
    parser.add_argument("--n", type=int, default=100_000, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=5, help="timings per process (best is kept)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per variant, alternated (median reported)")
    parser.add_argument("--compare", type=Path, help="another engine.lua timed alongside (before/after)")
    parser.add_argument("--distinct", type=int, default=20_000,
                        help="distinct comments cycled in the miss variants (> 1024, the memo's bound)")
    parser.add_argument("--plain", action="store_true", help="also time a plain-table job_desc (the engine alone)")
    parser.add_argument("--only", default="", help="time only the jobs whose label contains this text")
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
        for shape in args.shape.split(","):
            for n_accounts in (int(x) for x in args.accounts.split(",")):
                results += time_shape(args, exe, tmp, driver, engines, shape, n_accounts)
    result = {"n": args.n, "repeats": args.repeats, "rounds": args.rounds, "machine": platform.platform(),
              "cpus": os.cpu_count(), "loadavg_end": os.getloadavg(), "python": platform.python_version(), "rows": results}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print("us per job, lua5.1, median [min-max] over rounds (best of repeats within each)")
    for row in results:
        print(f"{row['shape']:<5} {row['accounts']:>4} accounts  {row['job']:<38} {row['verdict']:<16} python {row['python_evaluator_us']:.1f} us"
              f"  field reads {row['field_reads']}")
        for variant, st in row["lua5.1"].items():
            print(f"        {variant:<22} {st['median']:7.3f}  [{st['min']:.3f}-{st['max']:.3f}]")
        if "lupa_proxy_us" in row:
            print(f"        lupa proxy {row['lupa_proxy_us']}")
    print(f"load average at the end: {result['loadavg_end']}")


if __name__ == "__main__":
    main()
