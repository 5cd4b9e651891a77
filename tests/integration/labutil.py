"""Helpers for integration tests against the slurm-lab cluster (tests/slurm_lab/slurm-lab).

All functions shell out with argv lists and use the current os.environ (the `slurm_lab` fixture puts
SLURM_CONF etc. there), unless `env` is given.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SLURM_LAB = REPO / "tests" / "slurm_lab" / "slurm-lab"

TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
    }
)
SACCT_FIELDS = (
    "JobID",
    "JobName",
    "Partition",
    "Account",
    "User",
    "State",
    "ExitCode",
    "NNodes",
    "NodeList",
    "AllocTRES",
    "Comment",
)


class LabCommandError(RuntimeError):
    pass


def run_cmd(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 60.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run argv (no shell), capture text output; raise LabCommandError on failure when check."""
    cp = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        errors="surrogateescape",  # job names and comments come back in whatever bytes the tests gave them
        timeout=timeout,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
    )
    if check and cp.returncode != 0:
        raise LabCommandError(f"{list(argv)} -> rc={cp.returncode}\nstdout: {cp.stdout}\nstderr: {cp.stderr}")
    return cp


def lab_env_json(name: str | None = None) -> dict:
    """`slurm-lab env --json` for the named lab (default: SLURM_LAB_NAME / gpuclust)."""
    argv = [str(SLURM_LAB)] + (["--name", name] if name else []) + ["env", "--json"]
    return json.loads(run_cmd(argv).stdout)


def submit(argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
    """sbatch --parsable ARGV...; returns the job id (as a string, cluster suffix stripped).

    argv are sbatch arguments, e.g. ["-N2", "--gres=gpu:h100:1", "-o", "/dev/null", "--wrap", "srun hostname"];
    a leading "sbatch" is accepted and dropped.
    """
    args = list(argv)
    if args and os.path.basename(args[0]) == "sbatch":
        args = args[1:]
    cp = run_cmd(["sbatch", "--parsable", *args], env=env, timeout=timeout)
    job_id = cp.stdout.strip().splitlines()[-1].split(";")[0].strip()
    if not job_id.split("_")[0].isdigit():
        raise LabCommandError(f"unexpected sbatch --parsable output: {cp.stdout!r}")
    return job_id


def job_state(job_id: str, *, env: Mapping[str, str] | None = None) -> str | None:
    """Current JobState from `scontrol show job -o` (None if slurmctld no longer knows the job)."""
    cp = run_cmd(["scontrol", "show", "job", "-o", str(job_id)], env=env, check=False, timeout=15)
    for tok in cp.stdout.split():
        if tok.startswith("JobState="):
            return tok.split("=", 1)[1]
    return None


def wait_job_done(job_id: str, timeout: float = 120.0, *, env: Mapping[str, str] | None = None) -> str:
    """Poll until the job is in a terminal state; return that state (e.g. "COMPLETED").

    Uses scontrol (immediate); if slurmctld has already purged the job (MinJobAge), falls back to sacct.
    Raises TimeoutError.
    """
    deadline = time.monotonic() + timeout
    delay = 0.1
    while True:
        st = job_state(job_id, env=env)
        if st is None:
            row = _sacct_row(job_id, env=env)
            st = row["State"].split()[0] if row else None
        if st in TERMINAL_STATES:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} not finished after {timeout}s (state {st})")
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def quiet_start(timeout: float = 180.0, *, env: Mapping[str, str] | None = None) -> datetime:
    """Wait until the lab runs no job (earlier tests' jobs ended), then until the next whole second, and return it:
    a report window starting there holds only jobs submitted after this call (sacct's times are whole seconds, so a
    job that ended in this call's second would otherwise fall inside it)."""
    deadline = time.monotonic() + timeout
    while run_cmd(["squeue", "-h", "-o", "%i"], env=env, timeout=15).stdout.strip():
        if time.monotonic() > deadline:
            raise TimeoutError(f"lab still runs jobs after {timeout}s")
        time.sleep(0.5)
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    time.sleep(max(0.0, (start - datetime.now(timezone.utc)).total_seconds()))
    return start


def _sacct_row(
    job_id: str, *, fields: Sequence[str] = SACCT_FIELDS, env: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    cp = run_cmd(
        ["sacct", "-a", "-X", "-n", "-P", "-j", str(job_id), "-o", ",".join(fields)],
        env=env,
        check=False,
        timeout=15,
    )
    for line in cp.stdout.splitlines():
        parts = line.split("|")
        if len(parts) != len(fields):
            continue
        row = dict(zip(fields, parts, strict=True))
        if row.get("JobID") == str(job_id):
            return row
    return None


def wait_for_sacct(
    job_id: str,
    timeout: float = 30.0,
    *,
    fields: Sequence[str] = SACCT_FIELDS,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Poll `sacct -a -X -P -j ID` until the settled row is there; return it as {field: value}.

    Settled = non-empty Partition, JobName not the placeholder "allocation", State terminal.  sacct lags
    0.5-5 s behind the end of a job.  `fields` must include JobID, JobName, Partition and State.
    """
    deadline = time.monotonic() + timeout
    delay = 0.2
    row: dict[str, str] | None = None
    while True:
        row = _sacct_row(job_id, fields=fields, env=env)
        if (
            row
            and row["Partition"]
            and row["JobName"] != "allocation"
            and row["State"].split()[0] in TERMINAL_STATES
        ):
            return row
        if time.monotonic() > deadline:
            raise TimeoutError(f"sacct row for job {job_id} not settled after {timeout}s (last: {row})")
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)


def wait_for_recorded_start(job_id: str, timeout: float = 60.0, *, env: Mapping[str, str] | None = None) -> str:
    """Poll sacct until the accounting database holds the job's start (a Start time, state RUNNING): slurmctld
    reports a start to slurmdbd after the job already shows RUNNING, and an action taken in between (a requeue)
    leaves an execution with no Start in the database. Returns the Start."""
    deadline = time.monotonic() + timeout
    row: dict[str, str] | None = None
    while True:
        row = _sacct_row(job_id, fields=("JobID", "State", "Start"), env=env)
        if row and row["State"].split()[0] == "RUNNING" and row["Start"] not in ("", "Unknown", "None"):
            return row["Start"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id}: no recorded start in sacct after {timeout}s (last: {row})")
        time.sleep(0.2)


def lab_exec(
    node: str, argv: Sequence[str], *, name: str | None = None, timeout: float = 60.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run argv inside lab node `node` (its netns + hostname + lab /etc/hosts), e.g. for tc fault injection."""
    cmd = [str(SLURM_LAB)] + (["--name", name] if name else []) + ["exec", node, "--", *argv]
    return run_cmd(cmd, timeout=timeout, check=check)
