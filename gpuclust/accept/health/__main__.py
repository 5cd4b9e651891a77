"""`python -m gpuclust.accept.health snapshot --phase before|after --job JOBID --out DIR [--since ISO]`

Run once per node (srun --ntasks-per-node=1). Writes DIR/<node>-<phase>.json atomically and prints its path.
Exit 0 when the snapshot was written (sources that could not be read are recorded as unavailable, not as
an error), 2 on bad usage or an output directory that cannot be written. See gpuclust.accept.health.collect
for the JSON shape, gpuclust.accept.health.kit.HealthPaths for the GPUCLUST_HEALTH_* overrides.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime

from gpuclust.accept.health.collect import PHASES, HealthPaths, snapshot, write_snapshot
from gpuclust.accept.health.kit import parse_iso_time
from gpuclust.errors import GpuclustError
from gpuclust.exitcodes import EXIT_INPUT, EXIT_OK


def _since(text: str) -> datetime:
    try:
        return parse_iso_time(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO 8601 time such as 2025-01-31T12:00:00+00:00, got {text!r}") from None


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, 3600], got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuclust.accept.health",
                                     description="Snapshot this node's hardware-health counters.")
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="write DIR/<node>-<phase>.json")
    snap.add_argument("--phase", required=True, choices=PHASES)
    snap.add_argument("--job", required=True, help="the Slurm job id the snapshot belongs to")
    snap.add_argument("--out", required=True, help="directory (shared between the nodes)")
    snap.add_argument("--since", type=_since, help="only Xid events at or after this time (the before snapshot's)")
    snap.add_argument("--nvidia-smi-timeout", type=_timeout,
                      default=_timeout(os.environ.get("GPUCLUST_HEALTH_NVIDIA_SMI_TIMEOUT", "30")),
                      help="seconds (default 30, or $GPUCLUST_HEALTH_NVIDIA_SMI_TIMEOUT; [health] nvidia_smi_timeout)")
    snap.add_argument("--node", help="node name (default: $SLURMD_NODENAME, else the short hostname)")
    snap.add_argument("--dcgm-level", type=int, choices=(0, 1, 2, 3, 4), default=0,
                      help="before phase: also run dcgmi diag -r N -j (0: no)")
    snap.add_argument("--nvbandwidth", action="store_true", help="before phase: also run nvbandwidth's CE tests")
    job = sub.add_parser("job", help="inside an acceptance job's batch script: snapshot every node of the job "
                                     "(one srun step, one task per node) into RESULTS_DIR/health/JOB")
    job.add_argument("--phase", required=True, choices=PHASES)
    args = parser.parse_args(argv)
    if args.command == "job":
        from gpuclust.accept.health.job import snapshot_job

        try:
            return snapshot_job(args.phase)
        except GpuclustError as exc:
            print(f"gpuclust.accept.health job: {exc}", file=sys.stderr)
            return EXIT_INPUT
    try:
        data = snapshot(args.phase, args.job, paths=HealthPaths.from_env(), since=args.since,
                        nvidia_smi_timeout=args.nvidia_smi_timeout, node=args.node,
                        dcgm_level=args.dcgm_level, nvbandwidth=args.nvbandwidth)
        path = write_snapshot(args.out, data)
    except GpuclustError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    print(path)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
