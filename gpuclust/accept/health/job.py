"""`python -m gpuclust.accept.health job --phase before|after`: the acceptance templates' one line per phase.

Run by the batch script (not under srun): it starts ONE srun step with one task per node of the job, each
running `python -m gpuclust.accept.health snapshot`, into RESULTS_DIR/health/JOBID/ (the shared results
directory the result files already use). The after phase passes the earliest before-snapshot's time as --since,
so only the run's Xid events count. Snapshots run on the host even when the benchmark steps run in a
container: the counters belong to the node.

Parameters (environment, validated like every template parameter, gpuclust.accept.params):
    ACCEPT_HEALTH       1 (default) or 0: snapshot nothing
    ACCEPT_DCGM_LEVEL   0 (default) or 1-4: the before phase also runs `dcgmi diag -r N -j` where dcgmi exists
    ACCEPT_NVBANDWIDTH  auto (default: run it where the binary exists) or 0
The nvidia-smi timeout is [health] nvidia_smi_timeout of the site config.

A failed snapshot never fails the acceptance job: the report judges a node without both snapshots UNKNOWN.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from gpuclust.accept import params
from gpuclust.accept.health import collect
from gpuclust.accept.health.collect import load_snapshots
from gpuclust.accept.health.kit import parse_iso_time
from gpuclust.accept.health.sources.dcgm import DCGM_TIMEOUT_S
from gpuclust.accept.health.sources.nvbandwidth import NVBANDWIDTH_TIMEOUT_S
from gpuclust.errors import GpuclustError, InputError, SlurmCommandError, SlurmTimeout
from gpuclust.slurm.runner import run_command

HEALTH_DIR = "health"
STEP_SLACK_S = 120.0  # srun start-up and the sysfs/tc/journalctl reads, on top of the bounded commands


def latest_nvidia_smi(results_dir: str, names: Iterable[str]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Per node of `names`, (job id, snapshot) of its latest health snapshot under RESULTS_DIR/health/ whose
    nvidia_smi entry is ok and fits its shape (latest by the snapshot's time): what the node's GPUs last reported
    (the audit compares its MIG devices with Slurm's Gres). The snapshot carries "phase" and the checked
    "nvidia_smi" entry. Unreadable files are passed over: no snapshot, not an error."""
    wanted = set(names)
    root = Path(results_dir) / HEALTH_DIR
    best: dict[str, tuple[str, str, Mapping[str, Any]]] = {}
    try:
        jobs = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return {}
    for job in jobs:
        try:
            if not job.is_dir():
                continue
            files = [e for e in os.scandir(job.path) if e.name.endswith(".json")]
        except OSError:
            continue
        for entry in files:
            node, _, phase = entry.name[:-len(".json")].rpartition("-")
            if node not in wanted or phase not in ("before", "after"):
                continue
            try:
                if entry.stat().st_size > collect.MAX_SNAPSHOT_BYTES:
                    continue
                data = json.loads(Path(entry.path).read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                continue
            if not isinstance(data, dict) or not isinstance(data.get("sources"), dict):
                continue
            nv = collect.checked_source("nvidia_smi", data["sources"].get("nvidia_smi"))
            if nv.get("status") != "ok":
                continue
            when = str(data.get("time") or "")
            if node not in best or when >= best[node][0]:
                best[node] = (when, job.name, {**data, "phase": phase, "nvidia_smi": nv})
    return {node: (job_id, snap) for node, (_, job_id, snap) in best.items()}


def health_dir(results_dir: str | os.PathLike[str], job_id: str) -> Path:
    """Where a job's snapshots go: RESULTS_DIR/health/JOBID."""
    if not job_id.isdigit():
        raise InputError(f"job id {job_id!r} is not a Slurm job id (digits)")
    return Path(results_dir) / HEALTH_DIR / job_id


def _nvidia_smi_timeout() -> float:
    from gpuclust.config import load_config

    try:
        return float(load_config().health.nvidia_smi_timeout_s)
    except GpuclustError:
        from gpuclust.config.health import HealthConfig

        return HealthConfig().nvidia_smi_timeout_s


def earliest_before(directory: Path) -> datetime | None:
    snaps, _ = load_snapshots(directory) if directory.is_dir() else ({}, [])
    times = []
    for phases in snaps.values():
        before = phases.get("before")
        if before:
            try:
                times.append(parse_iso_time(str(before.get("time"))))
            except ValueError:
                continue
    return min(times) if times else None


def step_argv(phase: str, job_id: str, nodes: int, out_dir: Path, *, python: str, nvidia_smi_timeout: float,
              since: datetime | None, dcgm_level: int, nvbandwidth: bool) -> list[str]:
    argv = ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
            f"--job-name=gpuclust-health-{phase}", python, "-m", "gpuclust.accept.health", "snapshot",
            "--phase", phase, "--job", job_id, "--out", str(out_dir),
            "--nvidia-smi-timeout", f"{nvidia_smi_timeout:g}"]
    if since is not None:
        argv += ["--since", since.isoformat()]
    if phase == "before" and dcgm_level:
        argv += ["--dcgm-level", str(dcgm_level)]
    if phase == "before" and nvbandwidth:
        argv.append("--nvbandwidth")
    return argv


def snapshot_job(phase: str, env: Mapping[str, str] | None = None,
                 run: Callable[..., Any] = run_command) -> int:
    """Snapshot every node of the current job; 0 unless the job context itself is wrong (see the docstring)."""
    env = os.environ if env is None else env
    values = params.read_params(["ACCEPT_HEALTH", "ACCEPT_DCGM_LEVEL", "ACCEPT_NVBANDWIDTH"], env)
    if not values["ACCEPT_HEALTH"]:
        return 0
    job_id = env.get("SLURM_JOB_ID", "")
    nodes_text = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if not job_id.isdigit() or not nodes_text.isdigit() or int(nodes_text) < 1:
        raise InputError("not inside a Slurm batch job (SLURM_JOB_ID and SLURM_JOB_NUM_NODES)")
    out_dir = health_dir(params.results_dir(env), job_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    timeout = _nvidia_smi_timeout()
    dcgm_level = int(values["ACCEPT_DCGM_LEVEL"])
    nvbandwidth = values["ACCEPT_NVBANDWIDTH"] == "auto"
    since = earliest_before(out_dir) if phase == "after" else None
    argv = step_argv(phase, job_id, int(nodes_text), out_dir, python=sys.executable, nvidia_smi_timeout=timeout,
                     since=since, dcgm_level=dcgm_level, nvbandwidth=nvbandwidth)
    limit = timeout + STEP_SLACK_S
    if phase == "before":
        limit += DCGM_TIMEOUT_S.get(dcgm_level, 0.0) + (NVBANDWIDTH_TIMEOUT_S if nvbandwidth else 0.0)
    try:
        result = run(argv, timeout=limit, check=False)
    except (SlurmTimeout, SlurmCommandError) as exc:
        print(f"gpuclust health {phase}: {exc} (the report will judge the nodes without a snapshot UNKNOWN)",
              file=sys.stderr)
        return 0
    if result.returncode != 0:
        print(f"gpuclust health {phase}: srun exited {result.returncode}: {result.stderr.strip()[:500]}",
              file=sys.stderr)
    print(f"gpuclust health {phase}: snapshots in {out_dir}")
    return 0
