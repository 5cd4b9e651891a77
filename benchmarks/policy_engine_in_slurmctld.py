"""The submit policy engine timed inside a real slurmctld, on slurmctld's own job_desc (issue 18 item 1).

benchmarks/policy_engine.py times the engine in Debian's lua5.1 with a stand-in job_desc (a Lua table behind an
`__index` function). Here the oracle is slurmctld itself: the lab policy plus --extra-accounts synthetic accounts
is rendered as usual, and a timing wrapper is appended around `slurm_job_submit`. For a job whose --comment holds
`bench_n=N` the wrapper, inside slurmctld (job_submit.lua runs under the job write lock), calls the engine N times
in a loop and logs the CPU time per call (`os.clock`) of:

  real        the engine on slurmctld's job_desc (every field read is slurmctld's C `__index`), the same job again
              (the engine's memos answer: comment and GPU string seen before)
  plain       the same on a plain Lua table holding the job_desc fields the engine reads (copied once): the engine
              alone, without slurmctld's field reads; real - plain is what those reads cost
  stand_in    the same behind an `__index` function, as benchmarks/policy_engine.py's stand-in
  plain_new   plain, with a comment the engine has not seen in every call (N distinct comments made before the
              clock starts): the engine's label check in full
  real_new    an estimate for slurmctld's job_desc with a new comment per job: plain_new + (real - plain)

and, per field the engine may read, the CPU time of one read of job_desc[field] (less a plain table read). Then
the job itself goes through the engine once more and is accepted (it is --hold and is cancelled). The wrapper
is a benchmark artefact; it never goes into a rendered job_submit.lua. os.clock is slurmctld's process CPU time (all
threads; the lab is idle otherwise), so each figure is the median over --jobs submits, with its range.

Usage: python benchmarks/policy_engine_in_slurmctld.py [--name perf] [--n 20000] [--jobs 7] [--extra-accounts 500]
                                                       [--json]
Run it on a 22.05 lab and on a 24.11 one (`slurm-lab --name perf24 up --slurm 24.11`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.render import render_lua

sys.path.insert(0, str(Path(__file__).resolve().parent))
from policy_sbatch_throughput import REPO, install, lab_context, run  # noqa: E402

ENGINE = REPO / "gpuclust" / "policy" / "engine.lua"
COMMENT = "team=physics project=bench note=gpuclust-in-slurmctld"
JOB = ["-A", "physics", "--gres=gpu:h100:2", "-N", "1", "-t", "30", "--hold", "-o", "/dev/null", "--parsable",
       "--wrap", "true"]
READS_LINE = re.compile(r"gpuclust-bench-reads n=(\d+) plain=([0-9.]+) ((?:[a-z_]+=[0-9.]+ ?)+)")
LOG_LINE = re.compile(r"gpuclust-bench n=(\d+) fields=(\d+) real=([0-9.]+) plain=([0-9.]+) stand_in=([0-9.]+) "
                      r"plain_new=([0-9.]+) loop=([0-9.]+)")

WRAPPER = """
-- ===== benchmark wrapper (benchmarks/policy_engine_in_slurmctld.py; never part of a rendered policy) =====
local BENCH_FIELDS = { %(fields)s }
local bench_engine = slurm_job_submit
function slurm_job_submit(job_desc, part_list, submit_uid)
  local c = job_desc.comment
  local n = type(c) == "string" and tonumber(string.match(c, "bench_n=(%%d+)"))
  if n then
    local clock = os.clock
    local plain = {}
    for i = 1, #BENCH_FIELDS do plain[BENCH_FIELDS[i]] = job_desc[BENCH_FIELDS[i]] end
    local stand_in = setmetatable({}, { __index = function(_, k) return plain[k] end })
    local fresh = {}
    for i = 1, n do fresh[i] = "%(comment)s run=" .. i .. " bench_n=" .. n end
    bench_engine(job_desc, part_list, submit_uid) -- the memos learn this job
    local t0 = clock()
    for _ = 1, n do bench_engine(job_desc, part_list, submit_uid) end
    local t1 = clock()
    for _ = 1, n do bench_engine(plain, part_list, submit_uid) end
    local t2 = clock()
    for _ = 1, n do bench_engine(stand_in, part_list, submit_uid) end
    local t3 = clock()
    for i = 1, n do
      plain.comment = fresh[i]
      bench_engine(plain, part_list, submit_uid)
    end
    local t4 = clock()
    for i = 1, n do plain.comment = fresh[i] end
    local t5 = clock()
    local per_field = {}
    for f = 1, #BENCH_FIELDS do -- one field read n times: slurmctld's __index for that name
      local k = BENCH_FIELDS[f]
      local r0 = clock()
      for _ = 1, n do local _ = job_desc[k] end
      per_field[f] = k .. "=" .. string.format("%%.6f", clock() - r0)
    end
    local r0 = clock()
    for _ = 1, n do local _ = plain.comment end
    slurm.log_info("gpuclust-bench-reads n=%%d plain=%%.6f %%s", n, clock() - r0, table.concat(per_field, " "))
    slurm.log_info("gpuclust-bench n=%%d fields=%%d real=%%.6f plain=%%.6f stand_in=%%.6f plain_new=%%.6f loop=%%.6f",
      n, #BENCH_FIELDS, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
  end
  return bench_engine(job_desc, part_list, submit_uid)
end
"""


def engine_fields() -> list[str]:
    """The job_desc fields engine.lua reads (`job.<name>` and get(job, "<name>"))."""
    text = ENGINE.read_text()
    names = set(re.findall(r"\bjob\.([a-z_]+)\b", text)) | set(re.findall(r'get\(job, "([a-z_]+)"\)', text))
    return sorted(names)


def bench_lua(conf: str) -> str:
    lua = render_lua(compile_policy(parse_config(conf, "lab-site.conf")))
    head, sep, tail = lua.rpartition("return slurm.SUCCESS")
    if not sep:
        raise SystemExit("rendered policy has no final `return slurm.SUCCESS`")
    fields = ", ".join(f'"{f}"' for f in engine_fields())
    return head + WRAPPER % {"fields": fields, "comment": COMMENT} + sep + tail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=os.environ.get("SLURM_LAB_NAME", "perf"), help="slurm-lab instance")
    parser.add_argument("--n", type=int, default=20000, help="engine calls per loop")
    parser.add_argument("--jobs", type=int, default=7, help="timed submits (each runs every loop once)")
    parser.add_argument("--extra-accounts", type=int, default=500, help="synthetic accounts added to the lab policy")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    info, env, conf = lab_context(args.name, args.extra_accounts)
    log = Path(info["log_dir"]) / "slurmctld.log"
    samples: list[dict[str, float]] = []
    field_reads: dict[str, list[float]] = {}
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "job_submit.lua"
        script.write_text(bench_lua(conf))
        try:
            install(args.name, str(script), env)
            for _ in range(args.jobs):
                offset = log.stat().st_size
                cp = run(["sbatch", *JOB, "--comment", f"{COMMENT} bench_n={args.n}"], env, check=False)
                if cp.returncode != 0:
                    raise SystemExit(f"sbatch failed (the policy must accept the benchmark job): {cp.stderr.strip()}")
                run(["scancel", cp.stdout.strip().split(";")[0]], env, check=False)
                match = reads = None
                for _ in range(50):  # slurmctld's log line lands after the submit returns
                    with log.open("rb") as f:
                        f.seek(offset)
                        text = f.read().decode("utf-8", "replace")
                    match, reads = LOG_LINE.search(text), READS_LINE.search(text)
                    if match and reads:
                        break
                    time.sleep(0.1)
                if not match or not reads:
                    raise SystemExit(f"no gpuclust-bench line in {log}")
                base = float(reads[2])
                for item in reads[3].split():
                    field, secs = item.split("=")
                    field_reads.setdefault(field, []).append((float(secs) - base) * 1e6 / int(reads[1]))
                n, fields = int(match[1]), int(match[2])
                real, plain, stand_in, plain_new, loop = (float(match[i]) for i in range(3, 8))
                us = 1e6 / n
                samples.append({"real": real * us, "plain": plain * us, "stand_in": stand_in * us,
                                "plain_new": (plain_new - loop) * us,
                                "real_new": (plain_new - loop + real - plain) * us,
                                "reads": (real - plain) * us, "fields": fields})
        finally:
            install(args.name, "default", env)
    keys = ["real", "plain", "stand_in", "plain_new", "real_new", "reads"]
    summary = {k: {"median": statistics.median(s[k] for s in samples), "min": min(s[k] for s in samples),
                   "max": max(s[k] for s in samples)} for k in keys}
    result = {"slurm": info["slurm"], "lab": args.name, "n": args.n, "jobs": args.jobs,
              "policy_accounts": 2 + args.extra_accounts, "fields_read_list": engine_fields(),
              "read_us_by_field": {k: statistics.median(v) for k, v in sorted(field_reads.items())},
              "us_per_job": summary, "samples": samples, "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"Slurm {info['slurm']} lab {args.name}: {2 + args.extra_accounts} accounts, {args.n} calls per loop, "
          f"{args.jobs} submits; µs per job, median [min-max]")
    for k in keys:
        s = summary[k]
        print(f"  {k:<10} {s['median']:7.2f} [{s['min']:.2f}-{s['max']:.2f}]")
    print("  one read of each field, µs (slurmctld's __index, less a plain table read): " + ", ".join(
        f"{k} {v:.2f}" for k, v in result["read_us_by_field"].items()))
    print(f"load avg at start {load_start}, at end {result['loadavg_end']}")


if __name__ == "__main__":
    main()
