"""Differential table: sbatch command lines and batch scripts -> what the real sbatch + slurmctld did with them.

    eval "$(tests/slurm_lab/slurm-lab --name NAME env)"
    tests/slurm_lab/slurm-lab --name NAME policy tests/data/policy/probe_job_submit.lua
    python tests/data/policy/record_sbatch_grammar.py > tests/data/policy/sbatch-grammar-<version>.json

Each case runs `sbatch --hold ARGV` in an empty directory (a case's `script` is written there as job.sh; `files`
lists the operands that exist). The probe job_submit.lua prints the job_desc fields it was handed and accepts the
held job, so slurmctld's own checks after job_submit run too; every job that got queued is cancelled at once.
Recorded per case: sbatch's exit code, its `error:`/getopt lines, the job_desc the probe saw (null when sbatch
refused before sending), and whether slurmctld then queued the job.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

S = "#!/bin/bash\n"
CASES: list[dict] = [
    # issue 13's cases
    {"args": ["-G", "64"]},
    {"args": ["-G", "64", "-A", "ml"], "wrap": False},
    {"args": ["-G64", "-p", "gpu"]},
    {"args": ["--frobnicate", "yes", "-A", "ml"]},
    {"args": ["--acc=physics", "--gres=gpu:h100:1"]},
    {"args": ["--gpus-per-n=4", "-N", "2"]},
    {"args": ["--gpus-per=4"]},
    {"args": ["--gres=gpu:-1"]},
    {"args": ["--gres=gpu:h100:-1"]},
    {"args": ["-A", "ops", "-p", "gpu", "--gres=gpu:h100:4", "-N", "4-64", "--comment", "team=ops,project=x"]},
    {"args": [], "script": S + "#SBATCH -G 64\n#SBATCH -A ml\nsrun true\n"},
    {"args": [], "script": S + "#SBATCH --gres\n#SBATCH -A ml\nsrun true\n"},
    {"args": [], "script": S + "#SBATCH --gres=gpu:2\n#SBATCH --gres\nsrun true\n"},
    # getopt grammar
    {"args": ["-N2", "-n", "8"]},
    {"args": ["-N", "2", "-n8", "--ntasks-per-node=4"]},
    {"args": ["-N=2"]},
    {"args": ["-HN2"]},
    {"args": ["-HNs"]},
    {"args": ["--nodes", "3", "--account", "ml"]},
    {"args": ["--account"]},
    {"args": ["-A"]},
    {"args": ["-A", "--gpus=2"]},
    {"args": ["--gpus", "-1"]},
    {"args": ["--g=1"]},
    {"args": ["--gp=1"]},
    {"args": ["--gpus-per-t=2", "-n", "3"]},
    {"args": ["--gpus-per-s=1", "--sockets-per-node=2"]},
    {"args": ["--hold=yes"]},
    {"args": ["--exclusive", "-N", "2"]},
    {"args": ["--exclusive=user", "-N", "2"]},
    {"args": ["--nice", "-N", "2"]},
    {"args": ["--nice", "5"], "wrap": False},
    {"args": ["--nice=5", "-N", "2"]},
    {"args": ["-k", "-N", "2"]},
    {"args": ["-Z"]},
    {"args": ["--", "-N", "2"], "wrap": False},
    {"args": ["-N", "2", "--", "job.sh", "-N", "4"], "script": S + "#SBATCH -N 1\nsrun true\n"},
    {"args": ["-N", "2", "job.sh", "-N", "4", "--gpus=8"], "script": S + "srun true\n"},
    {"args": ["job.sh", "-G", "8"], "script": S + "#SBATCH -G 1\nsrun true\n"},
    {"args": ["-G", "2", "job.sh"], "script": S + "#SBATCH -G 1\n#SBATCH -N 3\nsrun true\n"},
    {"args": ["--tasks-per-node=2", "-N", "2"]},
    {"args": ["--ntasks-per=2", "-N", "2"]},
    {"args": ["--cpu_bind=none"]},
    {"args": ["--wrap"]},
    {"args": ["-t", "90", "-t", "30"]},
    {"args": ["--time=1-2", "--time-min=10"]},
    {"args": ["-t", "soon"]},
    # multiplying fields
    {"args": ["--gres=gpu:h100:4", "-N", "4-64"]},
    {"args": ["--gpus-per-node=2", "-N", "2-8", "-n", "16"]},
    {"args": ["--gpus-per-task=1", "-n", "64"]},
    {"args": ["--gpus-per-task=2", "--ntasks-per-node=4", "-N", "3"]},
    {"args": ["--gpus-per-socket=2", "--sockets-per-node=2", "-N", "2"]},
    {"args": ["--gpus-per-socket=2", "-B", "2:4:1", "-N", "2"]},
    {"args": ["--gpus-per-task=1", "--ntasks-per-socket=2", "--sockets-per-node=2", "-N", "2"]},
    {"args": ["--gpus=8", "--cpus-per-gpu=4", "--mem-per-gpu=1000"]},
    {"args": ["--gpus=h100:8", "--ntasks-per-gpu=2"]},
    {"args": ["--gpus-per-node=h100:2", "--gres=gpu:h100:2"]},
    {"args": ["--gres=gpu:h100:2", "--gpus=3"]},
    {"args": ["--gres=gpu:h100:2", "--gpus-per-task=1", "-n", "2"]},
    {"args": ["--gres=none"]},
    {"args": ["--gres=gpu"]},
    {"args": ["--gres=gpu:h100"]},
    {"args": ["--gres=gpu:0"]},
    {"args": ["--gres=gpu:2k"]},
    {"args": ["--gres=gpu:1x"]},
    {"args": ["--gres=foo:1"]},
    {"args": ["--gres="]},
    {"args": ["--gpus=0"]},
    {"args": ["--gpus=-1"]},
    {"args": ["--gpus=abc"]},
    {"args": ["--gpus-per-node="]},
    {"args": ["-N", "0"]},
    {"args": ["-N", "-1"]},
    {"args": ["-N", "4-2"]},
    {"args": ["-N", "2-"]},
    {"args": ["-N", "x"]},
    {"args": ["-n", "0"]},
    {"args": ["-n", "-2"]},
    {"args": ["-n", "4x"]},
    {"args": ["--ntasks-per-node=0"]},
    {"args": ["--sockets-per-node=-1"]},
    # scripts
    {"args": [], "script": S + "#SBATCH -A ml --partition=gpu\n#SBATCH --gpus-per-node=h100:2 -N 2\n"
                               "#SBATCH --comment \"team=ml project=llm\"\n#SBATCH -t 1:30:00\nsrun true\n"},
    {"args": ["-A", "physics", "-N", "1"], "script": S + "#SBATCH -A ml -N 4 --gpus=4\nsrun true\n"},
    {"args": [], "script": S + "\n# plain comment\n   # indented comment\n#SBATCH -N 3\n\n#SBATCH -n 6\nsrun true\n#SBATCH -G 9\n"},
    {"args": [], "script": S + "hostname\n#SBATCH -G 9\n"},
    {"args": [], "script": S + " #SBATCH -G 9\n#SBATCH -N 2\n"},
    {"args": [], "script": S + "#SBATCH --comment='a b' -N 2 # trailing -G 9\n"},
    {"args": [], "script": S + "#SBATCH --comment=a#b -G 2\n"},
    {"args": [], "script": S + "#SBATCH --comment=\"x\\\"y\" -G 2\n"},
    {"args": [], "script": S + "#SBATCH --comment=\"unterminated -G 2\n"},
    {"args": [], "script": S + "#SBATCH \"\" -G 2\n#SBATCH -N 2\n"},
    {"args": [], "script": S + "#SBATCH -N2 stray -G 2\n"},
    {"args": [], "script": S + "#SBATCH -N2 -- -G 2\n"},
    {"args": [], "script": S + "#SBATCH -N2 --\n#SBATCH -G 3\n"},
    {"args": [], "script": S + "#SBATCH --frob\n"},
    {"args": [], "script": S + "#SBATCH --gpus-per-n=4\n#SBATCH --acc=ml\n"},
    {"args": [], "script": S + "#SBATCH-N2\n#SBATCH\t-G\t2\n"},
    {"args": [], "script": S + "#sbatch -G 2\n#SLURM -N 2\n"},
    {"args": [], "script": S + "#SBATCH -G :2\n"},
    {"args": [], "script": S + "#SBATCH --comment caf\xe9 -G 1\n", "latin1": True},
    {"args": [], "script": "#SBATCH -G 2\nsrun true\n"},
    {"args": [], "script": S + "#SBATCH -G 2\r\nsrun true\r\n"},
    {"args": [], "script": ""},
    {"args": [], "script": "   \n"},
    {"args": [], "script": S + "#SBATCH -G 2\n#SBATCH hetjob\n#SBATCH -G 4\n"},
    {"args": ["-G", "1", ":", "-G", "2"]},
    # forms that differ between releases (24.11: gres/ prefix, tres_per_task with cpu=)
    {"args": ["--gpus-per-task=h100:1", "-n", "2"]},
    {"args": ["--gpus-per-task=1", "-c", "4", "-n", "2"]},
    {"args": ["-c", "4", "-n", "2"]},
    {"args": ["--tres-per-task=gres/gpu:1", "-n", "2"]},
    {"args": ["--tres-per-task=gres:gpu:1", "-n", "2"]},
    {"args": ["--ntasks-per-node=4", "-n", "8"]},
    {"args": ["--ntasks-per-node=4", "-N", "2-4"]},
    {"args": ["--cpus-per-gpu=2", "-c", "2", "--gpus=1"]},
    {"args": ["--gpus-per-task=2", "-N", "2"]},
    {"args": [], "script": S + "#SBATCH --comment=a\\ b -G 1\n#SBATCH --wckey=c\\d\n"},
]

# One case per option of the table with a value valid on the lab, then `-N 2` to show parsing went on after it
# (`--wait` is left out: it blocks on the held job; -M/--cluster(s) leave the local cluster).
SAMPLES = {
    "account": "ml", "acctg-freq": "task=30", "array": "0-3", "batch": "h100", "bb": "x", "begin": "now+60",
    "chdir": "/tmp", "cluster-constraint": "x", "comment": "c", "constraint": "h100", "container": "/tmp",
    "context": "x", "core-spec": "1", "cores-per-socket": "2", "cpu-freq": "high", "cpus-per-gpu": "2",
    "cpus-per-task": "2", "deadline": "now+3600", "delay-boot": "5", "dependency": "singleton",
    "distribution": "block", "error": "/dev/null", "exclude": "node4", "export": "ALL", "export-file": "/dev/null",
    "extra-node-info": "2:2:1", "gid": "0", "gpu-bind": "closest", "gpu-freq": "high", "gpus": "4",
    "gpus-per-node": "2", "gpus-per-socket": "1", "gpus-per-task": "1", "gres": "gpu:h100:2",
    "gres-flags": "enforce-binding", "hint": "nomultithread", "input": "/dev/null", "job-name": "j",
    "kill-on-invalid-dep": "yes", "licenses": "x", "mail-type": "END", "mail-user": "root", "mcs-label": "x",
    "mem": "1000", "mem-bind": "local", "mem-per-cpu": "100", "mem-per-gpu": "1000", "mincpus": "1",
    "network": "x", "nodefile": "/dev/null", "nodelist": "node1", "nodes": "3", "ntasks": "4",
    "ntasks-per-core": "1", "ntasks-per-gpu": "1", "ntasks-per-node": "2", "ntasks-per-socket": "1",
    "ntasks-per-tres": "1", "open-mode": "append", "output": "/dev/null", "partition": "gpu", "power": "x",
    "prefer": "h100", "priority": "10", "profile": "none", "qos": "normal", "reservation": "x",
    "signal": "USR1@60", "sockets-per-node": "2", "switches": "1", "tasks-per-node": "2", "thread-spec": "1",
    "threads-per-core": "1", "time": "10", "time-min": "5", "tmp": "100", "uid": "0", "wait-all-nodes": "1",
    "wckey": "w", "tres-per-task": "gres/gpu:1", "tres-bind": "gres/gpu:closest", "segment": "1",
    "oom-kill-step": "1", "mem-per-tres": "x", "cpus-per-tres": "x",
}
FLAGS = ["contiguous", "exclusive", "get-user-env", "hold", "ignore-pbs", "nice", "no-kill", "no-requeue",
         "overcommit", "oversubscribe", "parsable", "quiet", "reboot", "requeue", "spread-job", "test-only",
         "use-min-nodes", "verbose", "spread-segments", "x11"]
for _name, _value in SAMPLES.items():
    CASES.append({"args": [f"--{_name}={_value}", "-N", "2"]})
for _name in FLAGS:
    CASES.append({"args": [f"--{_name}", "-N", "2"]})


def _fields(text: str) -> dict | None:
    for line in text.splitlines():
        if "PROBE " in line:
            return json.loads(line.split("PROBE ", 1)[1])
    return None


def run_case(case: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        argv = list(case["args"])
        if case.get("script") is not None:
            data = case["script"].encode("latin-1" if case.get("latin1") else "utf-8")
            with open(os.path.join(tmp, "job.sh"), "wb") as fh:
                fh.write(data)
            if "job.sh" not in argv:
                argv.append("job.sh")
            full = ["--hold", *argv]
        elif case.get("wrap", True):
            full = ["--hold", "--wrap=true", *argv]
        else:
            full = ["--hold", *argv]
        cp = subprocess.run(["sbatch", *full], cwd=tmp, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
        err = cp.stderr.decode("utf-8", "replace")
        out = cp.stdout.decode("utf-8", "replace")
        queued = re.search(r"Submitted batch job (\d+)", out)
        if queued:
            subprocess.run(["scancel", queued.group(1)], check=False)
        elif cp.returncode == 0:  # --quiet hides the job id (and the probe's line): cancel what is pending in the lab
            subprocess.run(["scancel", "--state=PENDING", "--user=root"], check=False)
        lines = [ln for ln in err.splitlines() if "PROBE " not in ln and "Try \"sbatch --help\"" not in ln]
        return {
            "argv": full,
            "script": case.get("script"),
            "script_encoding": "latin-1" if case.get("latin1") else "utf-8",
            "rc": cp.returncode,
            "stderr": lines,
            "job_desc": _fields(err),
            "queued": cp.returncode == 0,
        }


def main() -> None:
    version = subprocess.run(["sbatch", "--version"], capture_output=True, text=True).stdout.split()[-1]
    cases = [run_case(c) for c in CASES]
    print(json.dumps({"slurm_version": version, "recorded_by": "tests/data/policy/record_sbatch_grammar.py",
                      "cases": cases}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
