"""The option conflicts of each release (issue 29) against the lab's real sbatch: `sbatch --test-only` refuses a line
on the client side exactly when gpuclust's reader does, and with the same message, for the lab's release.

--test-only sends nothing that queues and needs no job_submit.lua, so the lab is left as it was. A line the
controller refuses (no such partition, resources) counts as read by sbatch: only sbatch's own refusals count.
By hand against a running lab, without `slurm-lab up`:

    eval "$(tests/slurm_lab/slurm-lab env)" && .venv/bin/python tests/integration/test_policy_rules_lab.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuclust.policy.sbatch import SbatchRefusal, read_sbatch, table_for  # noqa: E402

pytestmark = pytest.mark.slurm

# each line once per release; what sbatch says differs by release (tables in gpuclust/policy/sbatch_options/)
CASES: list[list[str]] = [
    ["--mem=1G", "--mem-per-cpu=1G"],
    ["--mem-per-cpu=1G", "--mem-per-gpu=1G", "--gpus=1"],
    ["--mem=1G", "--mem=2G"],
    ["--exclusive", "-s"],
    ["--exclusive=user", "--oversubscribe"],
    ["--ntasks-per-gpu=2", "--gpus-per-task=1"],
    ["--ntasks-per-gpu=2", "--gpus-per-socket=1", "--sockets-per-node=1"],
    ["--ntasks-per-gpu=2", "--ntasks-per-node=1", "--gpus=2"],
    ["--ntasks-per-gpu=1", "--tasks-per-node=1", "--gpus=1"],
    ["--ntasks-per-tres=2", "--gpus-per-task=1"],
    ["--cpus-per-gpu=2", "-c", "2", "--gpus=1"],
    ["--gres=gpu:1", "--gpus-per-node=1"],
    ["--gres=gpu:h100:1", "--gpus-per-node=h100:1"],
    ["--gres=none", "--gpus-per-node=1"],
    ["--gpus=2", "--gpus-per-node=1"],
    ["-S", "1", "--thread-spec=1"],
    ["--core-spec=1", "--thread-spec=1"],
    ["--tres-per-task=gres/gpu:1", "--gpus-per-task=1"],
    ["--tres-per-task=cpu:2", "-c", "2"],
    ["--tres-per-task=cpu=2", "-c", "2"],
    ["--tres-per-task=gres/gpu:h100=1", "--gpus-per-task=h100:1"],
]
_CONTROLLER = ("Batch job submission failed", "to start at", "allocation failure")


def sbatch_says(args: list[str]) -> str | None:
    """sbatch's own refusal (its first message, without `sbatch: [fatal|error]: `), or None when it read the line."""
    cp = subprocess.run(["sbatch", "--test-only", "--wrap=true", *args], stdin=subprocess.DEVNULL,
                        capture_output=True, text=True, timeout=60)
    text = cp.stderr + cp.stdout
    if cp.returncode == 0 or any(marker in text for marker in _CONTROLLER):
        return None
    first = text.strip().splitlines()[0]
    for prefix in ("sbatch: ", "fatal: ", "error: "):
        first = first.removeprefix(prefix)
    return first


def reader_says(args: list[str], version: str) -> str | None:
    try:
        read_sbatch(["--wrap=true", *args], version=version)
    except SbatchRefusal as exc:
        return exc.problems[0].message
    return None


def compare(version: str) -> list[str]:
    """Every case where the reader and the lab's sbatch disagree (refused or not, or the message)."""
    bad = []
    for args in CASES:
        live, ours = sbatch_says(args), reader_says(args, version)
        if live != ours:
            bad.append(f"{' '.join(args)}: sbatch {live!r}, policy check {ours!r}")
    return bad


def lab_version() -> str:
    return table_for(subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=30).stdout)


def test_rules_match_live_sbatch(slurm_lab):
    assert compare(lab_version()) == []


if __name__ == "__main__":
    version = lab_version()
    problems = compare(version)
    print(f"Slurm {version}: {len(CASES) - len(problems)}/{len(CASES)} lines agree")
    print("\n".join(problems))
    sys.exit(1 if problems else 0)
