"""`python -m gpuclust.accept.failed --kind K --rc N`: the templates' last word when a step failed.

If the program died before writing its result (a crash, a kill, a node failure), this writes a "job" record
with passed=false and the exit status, so `accept report` and the audit see a failed run instead of nothing.
An existing result file is left alone.
"""

from __future__ import annotations

import argparse
import os

from gpuclust.accept import launch
from gpuclust.accept import results as R
from gpuclust.errors import InputError
from gpuclust.slurm import hostlist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuclust.accept.failed", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, choices=R.KINDS)
    parser.add_argument("--rc", required=True, type=int)
    parser.add_argument("--started", type=float, default=None, help="job start, epoch seconds")
    parser.add_argument("--reason", default=None, help="why it failed (default: the step exited RC)")
    args = parser.parse_args(argv)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise InputError("SLURM_JOB_ID is not set: run inside the acceptance job")
    out_dir = launch.results_dir()
    target = os.path.join(out_dir, R.result_file_name(args.kind, job_id))
    if os.path.exists(target):
        return 0
    from datetime import datetime, timezone

    now = R.utcnow()
    started = datetime.fromtimestamp(args.started, timezone.utc) if args.started else now
    nodes = tuple(hostlist.expand(os.environ.get("SLURM_JOB_NODELIST", "")))
    job = R.JobRecord(
        job_id=job_id, kind=args.kind, cluster=os.environ.get("SLURM_CLUSTER_NAME") or None,
        partition=os.environ.get("ACCEPT_PARTITION") or os.environ.get("SLURM_JOB_PARTITION") or None,
        nodes=nodes, started=started, finished=now, passed=False,
        reasons=(args.reason or f"the {args.kind} step exited {args.rc} before writing a result",),
    )
    path = R.write_result(out_dir, R.JobResult("", job))
    print(f"# wrote {path} (failed run)")
    return 0


if __name__ == "__main__":
    launch.run_program(main, "gpuclust.accept.failed")
