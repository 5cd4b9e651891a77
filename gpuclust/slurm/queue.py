"""The live queue: the running jobs with their GPUs (one `squeue` call) and cancelling one (`scancel`).

Read by the guard. `squeue -O` with a `|` after each field prints the fields unpadded; the comment, the only
free text, comes last so a `|` inside it stays in it. Times are UTC (the client pins TZ and
SLURM_TIME_FORMAT).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

from gpuclust.errors import SlurmCommandError, SlurmOutputError
from gpuclust.slurm.hostlist import expand

FIELDS = ("JobID", "UserName", "Account", "Partition", "QOS", "StartTime", "NodeList", "tres-alloc", "Comment")
SQUEUE_ARGS = ("--noheader", "--states=RUNNING", "--Format=" + ",".join(f + ":|" for f in FIELDS[:-1])
               + "," + FIELDS[-1] + ":")
_GPU_TRES = re.compile(r"^gres/gpu(?::([^=]+))?=([0-9]+)$")


@runtime_checkable
class QueueClient(Protocol):
    def squeue(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...

    def scancel(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...


@dataclass(frozen=True)
class RunningJob:
    """One running job as squeue lists it, with its GPUs: what the guard reads of it."""

    job_id: str  # JobIDRaw: what dcgm-exporter's job label carries
    user: str
    account: str
    partition: str
    qos: str
    start: datetime  # tz-aware UTC
    nodes: tuple[str, ...]
    gpus: int
    gpu_type: str | None
    comment: str


def parse_tres_gpus(tres: str) -> tuple[int, str | None]:
    """(GPUs, type) from an AllocTRES string: gres/gpu=2 and gres/gpu:h100=2 count once."""
    total = 0
    gpu_type = None
    typed = 0
    for item in tres.split(","):
        m = _GPU_TRES.match(item.strip())
        if not m:
            continue
        if m.group(1):
            gpu_type = gpu_type or m.group(1)
            typed += int(m.group(2))
        else:
            total = int(m.group(2))
    return (total or typed), gpu_type


def parse_running(text: str) -> list[RunningJob]:
    jobs: list[RunningJob] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", len(FIELDS) - 1)
        if len(parts) != len(FIELDS):
            raise SlurmOutputError(f"squeue line {number}: expected {len(FIELDS)} fields, got {line!r}")
        job_id, user, account, partition, qos, start, nodelist, tres, comment = (p.strip() for p in parts)
        if not job_id.isdigit():
            raise SlurmOutputError(f"squeue line {number}: job id {job_id!r} is not a number")
        try:
            started = datetime.fromisoformat(start).replace(tzinfo=timezone.utc)
        except ValueError:
            raise SlurmOutputError(f"squeue line {number}: start time {start!r} is not a time") from None
        gpus, gpu_type = parse_tres_gpus(tres)
        nodes = tuple(expand(nodelist))
        jobs.append(RunningJob(job_id, user, account, partition, qos, started, nodes, gpus, gpu_type,
                               "" if comment == "(null)" else comment))
    return jobs


def running_gpu_jobs(client: QueueClient, timeout: float | None = None) -> list[RunningJob]:
    """Every running job that holds at least one GPU (one squeue call)."""
    return [job for job in parse_running(client.squeue(list(SQUEUE_ARGS), timeout=timeout)) if job.gpus > 0]


def cancel_job(client: QueueClient, job_id: str, timeout: float | None = None) -> bool:
    """scancel JOB; False when Slurm says the job is gone already (it ended between read and act)."""
    try:
        client.scancel([job_id], timeout=timeout)
    except SlurmCommandError as exc:
        if "invalid job id" in (exc.stderr or "").lower() or "already completing" in (exc.stderr or "").lower():
            return False
        raise
    return True
