"""Record what 22.05's slurmctld presents to job_submit.lua for a set of sbatch option lists.

Run against a lab with probe_job_submit.lua installed (it rejects every job and prints the fields):
    tests/slurm_lab/slurm-lab --name policy policy tests/data/policy/probe_job_submit.lua
    python tests/data/policy/record_probe.py > tests/data/policy/jobdesc-probe.json
    tests/slurm_lab/slurm-lab --name policy policy default
"""

import json
import subprocess

SCRIPT = """#!/bin/bash
#SBATCH -A ml --partition=gpu
#SBATCH --gpus-per-node=h100:2 -N 2
#SBATCH --comment "team=ml project=llm"
#SBATCH -t 1:30:00
srun true
"""

CASES = [
    ["-A", "physics", "--gres=gpu:h100:2", "-N2"],
    ["--gres=gpu:2"],
    ["--gres=gpu:h100:1,gpu:h100:1"],
    ["--gpus=3", "-p", "gpu", "-A", "ml"],
    ["--gpus=h100:3"],
    ["--gpus-per-node=1", "-N", "3"],
    ["--gpus-per-node=h100:2", "--gres=gpu:h100:2"],
    ["--gpus-per-task=1", "-n", "4"],
    ["--gpus-per-task=h100:1", "--ntasks-per-node=2", "-N2"],
    ["--gpus-per-socket=1", "--sockets-per-node=2"],
    ["-N", "2-4", "-t", "90"],
    ["-t", "2-00:00:00"],
    ["-t", "1:30"],
    ["-t", "10:00:01"],
    ["-t", "UNLIMITED"],
    ["--comment=team=physics project=qcd", "--wckey=lattice", "--qos=gpu-normal", "-J", "x"],
    ["-p", "gpu,debug"],
    ["-Aml", "-pdebug", "-n2"],
]


def probe(args, script=None):
    argv = ["sbatch", *args] + ([] if script else ["--wrap", "true"])
    cp = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=30)
    for line in cp.stderr.splitlines():
        if "PROBE " in line:
            return json.loads(line.split("PROBE ", 1)[1])
    raise SystemExit(f"no probe output for {argv}: {cp.stderr}")


out = [{"args": args, "script": None, "job_desc": probe(args)} for args in CASES]
out.append({"args": ["-t", "45"], "script": SCRIPT, "job_desc": probe(["-t", "45"], SCRIPT)})
out.append({"args": [], "script": SCRIPT, "job_desc": probe([], SCRIPT)})
print(json.dumps(out, indent=1))
