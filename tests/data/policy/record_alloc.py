"""Record, on a running lab, what slurmctld hands job_submit.lua AND what Slurm then allocates, per sbatch line.

Oracle for the policy's GPU upper bound (tests/unit/test_policy_bounds.py: the engine's count must be >= every
allocation real Slurm made). Two phases on an idle lab:
  1. probe_job_submit_v2.lua installed: each sbatch is rejected and its job_desc fields are printed;
  2. pass-through policy: each job runs (sleep), its NumNodes/NumTasks/AllocTRES are read while RUNNING.

    python tests/data/policy/record_alloc.py LABNAME > tests/data/policy/alloc-probe-<version>.json
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAB = HERE.parent.parent / "slurm_lab" / "slurm-lab"

CASES = [
    ["--gres=gpu:h100:1"],
    ["--gres=gpu:h100:4", "-N", "4"],
    ["--gres=gpu:h100:1", "-N", "2-4"],
    ["--gres=gpu:1", "-N", "1-3"],
    ["--gpus-per-node=h100:2", "-N", "1-3"],
    ["--gres=gpu:h100:1", "-n", "16", "-c", "2"],
    ["--gres=gpu:h100:1", "-n", "4", "--ntasks-per-node=1"],
    ["--gres=gpu:h100:1", "-N", "1-3", "--ntasks-per-node=2"],
    ["--gpus=3", "-N", "2-4"],
    ["-G", "4"],
    ["--gpus=h100:6"],
    ["--gpus-per-task=1", "-n", "8", "-N", "1-4"],
    ["--gpus-per-task=h100:1", "-n", "2", "-N", "1-4", "--ntasks-per-node=2"],
    ["--gpus-per-task=1", "-n", "3"],
    ["--gpus-per-task=1", "--ntasks-per-node=2", "-N", "2", "-n", "4"],
    ["--gpus-per-socket=1", "--sockets-per-node=2", "-N", "2"],
    ["--gpus-per-task=1", "-n", "4", "--ntasks-per-socket=1", "--sockets-per-node=2"],
    ["--ntasks-per-gpu=2", "-n", "4"],
    ["--ntasks-per-gpu=2", "--gpus=2"],
    ["--exclusive"],
    ["--exclusive", "-N", "2"],
    ["--exclusive", "--gres=gpu:h100:1"],
    ["--exclusive=user", "--gres=gpu:h100:1"],
    ["--array=0-1", "--gres=gpu:h100:2"],
    ["--gres=gpu:h100:1", "-w", "node[1-3]"],
    ["--gres=gpu:h100:2,gpu:h100:1"],
]


def lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAB), "--name", NAME, *args], capture_output=True, text=True, check=True)


def sbatch(args, wrap):
    return subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", wrap],
                          capture_output=True, text=True, timeout=30)


NAME = sys.argv[1]
env = json.loads(lab("env", "--json").stdout)
import os  # noqa: E402

os.environ.update(env["env"])
version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.strip()
lab("policy", str(HERE / "probe_job_submit_v2.lua"))
time.sleep(1.1)
out = []
for args in CASES:
    cp = sbatch(args, "true")
    m = re.search(r"PROBE (\{.*\})", cp.stderr)
    out.append({"args": args, "job_desc": json.loads(m.group(1)) if m else None,
                "sbatch_error": None if m else cp.stderr.strip()})
lab("policy", "default")
time.sleep(1.1)
for entry in out:
    if entry["job_desc"] is None:
        continue
    cp = sbatch(entry["args"], "sleep 5")
    if cp.returncode != 0:
        entry["alloc"] = {"error": cp.stderr.strip()}
        continue
    job = cp.stdout.strip().split(";")[0]
    shown = ""
    for _ in range(40):
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        if "JobState=RUNNING" in shown or "JobState=COMPLETED" in shown:
            break
        time.sleep(0.5)
    tres = re.search(r"\bAllocTRES=(\S*)", shown) or re.search(r" TRES=(\S*)", shown)
    gpus = re.search(r"gres/gpu=(\d+)", tres.group(1) if tres else "")
    entry["alloc"] = {
        "state": (re.search(r"JobState=(\S+)", shown) or [None, None])[1],
        "num_nodes": (re.search(r"NumNodes=(\S+)", shown) or [None, None])[1],
        "num_tasks": (re.search(r"NumTasks=(\S+)", shown) or [None, None])[1],
        "tres": tres.group(1) if tres else None,
        "gpus": int(gpus.group(1)) if gpus else 0,
    }
    subprocess.run(["scancel", job], capture_output=True)
    for _ in range(20):
        if not subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(0.5)
print(json.dumps({"slurm_version": version, "cases": out}, indent=1))
