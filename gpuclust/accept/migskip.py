"""all_reduce on MIG slices is skipped, with a note: NCCL has no peer-to-peer path between MIG instances (not
between two instances of one GPU, nor through NVLink to another GPU), so an all_reduce across MIG slices measures
the host's network and copies through host memory, never the GPU fabric acceptance is for. The node's other
tests (storage; pairwise and all_reduce where the partition has whole GPUs) run as before.

Two places decide:
  - `gpuclust accept submit` (skip_note): the partition's GPU type in the site config is a MIG type
    (gpuclust.slurm.gpushare.is_mig_type): the allreduce job is not submitted, the note says why;
  - the allreduce template, in the job (`python -m gpuclust.accept.migskip --kind allreduce`): the GPUs Slurm
    allocated (scontrol show job -d, through gpuclust.accept.launch.slurm_declared) are all MIG types. It writes
    a result marked skipped (JobRecord.extra["skipped"], passed: nothing failed) so `accept report` shows the note
    instead of "no results", and exits 0; it exits 1 when the job's GPUs are not all MIG slices (run the test).
    Any error exits non-zero too: the template then runs the test as before.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from gpuclust.slurm.gpushare import is_mig_type
from gpuclust.slurm.parse import parse_gres

SKIPPED_KINDS = ("allreduce",)
WHY = "NCCL has no P2P between MIG instances"


def skip_note(kind: str, gpu_types: list[str | None]) -> str | None:
    """Why a `kind` run on GPUs of these types is skipped, or None to run it. Untyped GPUs are whole GPUs."""
    if kind not in SKIPPED_KINDS or not gpu_types or not all(is_mig_type(t) for t in gpu_types):
        return None
    shown = ", ".join(sorted({str(t) for t in gpu_types}))
    return f"all_reduce skipped: the GPUs are MIG slices ({shown}); {WHY}"


def job_gpu_types(job_gres: Mapping[str, str]) -> list[str | None]:
    """The GPU types of a job's per-node GRES (`gpu:1g.10gb:1(IDX:0)`), one entry per GRES item it holds (Slurm
    also lists the node's other types with count 0: `gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:0(IDX:)`)."""
    return [item.type for text in job_gres.values() for item in parse_gres(text)
            if item.name == "gpu" and item.count]


def main(argv: list[str] | None = None) -> int:
    from gpuclust.accept import launch
    from gpuclust.accept import results as R
    from gpuclust.errors import InputError
    from gpuclust.slurm import hostlist

    parser = argparse.ArgumentParser(prog="python -m gpuclust.accept.migskip", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, choices=R.KINDS)
    parser.add_argument("--started", type=float, default=None, help="job start, epoch seconds")
    args = parser.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise InputError("SLURM_JOB_ID is not set: run inside the acceptance job")
    nodes = tuple(hostlist.expand(os.environ.get("SLURM_JOB_NODELIST", "")))
    job_gres, node_gres, warnings = launch.slurm_declared(job_id, nodes)
    note = skip_note(args.kind, job_gpu_types(job_gres))
    if note is None:
        return 1
    from datetime import datetime, timezone

    now = R.utcnow()
    job = R.JobRecord(
        job_id=job_id, kind=args.kind, cluster=os.environ.get("SLURM_CLUSTER_NAME") or None,
        partition=os.environ.get("ACCEPT_PARTITION") or os.environ.get("SLURM_JOB_PARTITION") or None,
        nodes=nodes, started=datetime.fromtimestamp(args.started, timezone.utc) if args.started else now,
        finished=now, passed=True, declared_gres=job_gres, node_gres=node_gres,
        extra={"skipped": note, **({"warnings": warnings} if warnings else {})},
    )
    path = R.write_result(launch.results_dir(), R.JobResult("", job))
    print(f"accept-{args.kind}: {note}")
    print(f"# wrote {path} (skipped)")
    return 0


if __name__ == "__main__":
    from gpuclust.accept import launch

    launch.run_program(main, "gpuclust.accept.migskip")
