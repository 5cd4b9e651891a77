"""What every acceptance program does inside a Slurm step: read the task's place from Slurm's environment,
pick the backend, set up torch.distributed, time collectives, and capture what the rank saw.

torch is imported lazily (inside functions) so gpuclust imports without the `bench` extra. Everything that
touches CUDA goes through small functions taking the torch module as an argument, so the GPU path is
unit-tested on CPU with fakes.
"""

from __future__ import annotations

import gc
import glob
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

from gpuclust.accept import container
from gpuclust.accept import results as R
from gpuclust.accept.params import default_master_port, read_param
from gpuclust.accept.params import results_dir as results_dir  # the programs call launch.results_dir()
from gpuclust.errors import GpuclustError, InputError, UnsafeValueError
from gpuclust.exitcodes import EXIT_INPUT
from gpuclust.slurm import hostlist
from gpuclust.slurm.gres import declared_gres

_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,252}$")


@dataclass(frozen=True)
class TaskEnv:
    """This task's place in the job and step, from srun's variables."""

    job_id: str
    step_id: str | None
    rank: int
    world_size: int
    local_rank: int
    node: str
    hostname: str
    master_addr: str
    master_port: int
    partition: str | None
    cluster: str | None
    job_nodes: tuple[str, ...]
    step_nodes: tuple[str, ...]


def run_program(main: Callable[[], int], prog: str, *, also: tuple[type[Exception], ...] = ()) -> NoReturn:
    """Entry point of an acceptance program run by a template: a library error (or one of `also`) becomes one
    line on stderr and exit 2, so the job fails with a reason instead of a traceback."""
    caught: tuple[type[Exception], ...] = (GpuclustError, *also)
    try:
        code = main()
    except caught as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        code = EXIT_INPUT
    raise SystemExit(code)


def _int_env(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        text = env.get(name)
        if text:
            if not text.isdigit():
                raise UnsafeValueError(f"{name}={text!r} is not a number")
            return int(text)
    raise InputError(f"not inside a Slurm step: none of {', '.join(names)} is set (run me with srun)")


def task_env(env: Mapping[str, str] | None = None) -> TaskEnv:
    """RANK = SLURM_PROCID, WORLD_SIZE = the step's task count, LOCAL_RANK = SLURM_LOCALID; MASTER_ADDR and
    MASTER_PORT as the template exported them (the first host of the step's node list otherwise)."""
    env = os.environ if env is None else env
    env = container.task_env_fallback(env)  # Slurm 22.05 OCI containers: no per-task variables
    job_id = env.get("SLURM_JOB_ID", "")
    if not re.fullmatch(r"\d+", job_id):
        raise InputError("SLURM_JOB_ID is not set: run me inside a Slurm job (sbatch, then srun)")
    step_nodes = tuple(hostlist.expand(env.get("SLURM_STEP_NODELIST", "") or env.get("SLURM_JOB_NODELIST", "")))
    job_nodes = tuple(hostlist.expand(env.get("SLURM_JOB_NODELIST", "")))
    master = env.get("MASTER_ADDR") or (step_nodes[0] if step_nodes else "")
    if not _HOST_RE.match(master):
        raise UnsafeValueError(f"MASTER_ADDR={master!r} is not a host name")
    port_text = env.get("MASTER_PORT") or ""
    port = int(port_text) if port_text.isdigit() else (read_param("ACCEPT_MASTER_PORT", env) or default_master_port(job_id))
    if not 1024 <= port <= 65535:
        raise UnsafeValueError(f"MASTER_PORT={port} out of range")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    return TaskEnv(
        job_id=job_id,
        step_id=env.get("SLURM_STEP_ID"),
        rank=_int_env(env, "SLURM_PROCID"),
        world_size=_int_env(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
        local_rank=_int_env(env, "SLURM_LOCALID"),
        node=node,
        hostname=socket.gethostname(),
        master_addr=master,
        master_port=port,
        partition=read_param("ACCEPT_PARTITION", env) or env.get("SLURM_JOB_PARTITION") or None,
        cluster=env.get("SLURM_CLUSTER_NAME") or None,
        job_nodes=job_nodes,
        step_nodes=step_nodes,
    )


# ---- backend and device ------------------------------------------------------------------------------


def choose_backend(requested: str, cuda_available: bool) -> str:
    """auto -> nccl when CUDA is available, gloo otherwise; an explicit nccl without CUDA is an error."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        raise InputError("ACCEPT_BACKEND=nccl but torch.cuda.is_available() is False on this node")
    if requested not in ("gloo", "nccl"):
        raise UnsafeValueError(f"unknown backend {requested!r}")
    return requested


def pick_device(torch: Any, backend: str, local_rank: int) -> Any:
    """cuda:<local_rank mod visible devices> for NCCL (and set it current), cpu for gloo."""
    if backend == "nccl":
        count = torch.cuda.device_count()
        if count < 1:
            raise InputError("NCCL backend but no CUDA device is visible to this task")
        index = local_rank % count
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


# ---- timers ------------------------------------------------------------------------------------------


class MonotonicTimer:
    """CPU: a barrier lines the ranks up, then the monotonic clock (perf_counter) times the loop."""

    def __init__(self, barrier: Any = None) -> None:
        self._barrier = barrier
        self._t0 = 0.0

    def start(self) -> None:
        if self._barrier is not None:
            self._barrier()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        """Seconds since start(). Collectives on gloo are synchronous, so the work is done when they return."""
        return time.perf_counter() - self._t0


class CudaEventTimer:
    """GPU: CUDA events on the current stream; elapsed_time() is in ms once the end event has completed."""

    def __init__(self, torch: Any, barrier: Any = None) -> None:
        self._torch = torch
        self._barrier = barrier
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        if self._barrier is not None:
            self._barrier()
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1000.0


def make_timer(torch: Any, device: Any, barrier: Any = None) -> MonotonicTimer | CudaEventTimer:
    if getattr(device, "type", "cpu") == "cuda":
        return CudaEventTimer(torch, barrier)
    return MonotonicTimer(barrier)


# ---- version and device capture ---------------------------------------------------------------------

_DRIVER_RE = re.compile(r"Kernel Module(?: for [A-Za-z0-9_]+)?\s+([0-9]+(?:\.[0-9]+)+)")


def nvidia_driver_version(path: str = "/proc/driver/nvidia/version") -> str | None:
    """The NVIDIA kernel driver version without nvidia-smi: /proc/driver/nvidia/version reads
    'NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...'. None when absent (CPU node)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    match = _DRIVER_RE.search(text)
    return match.group(1) if match else None


def nccl_version_text(torch: Any) -> str | None:
    """torch.cuda.nccl.version() is a tuple (2, 21, 5) in recent torch, an int 22105 in old ones."""
    try:
        value = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - no NCCL in a CPU build: not an error, just absent
        return None
    if isinstance(value, tuple):
        return ".".join(str(v) for v in value)
    if isinstance(value, int):  # 22105 -> 2.21.5 (major*10000 + minor*100 + patch since 2.9)
        major, rest = divmod(value, 10000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(value)


def capture_versions(torch: Any, driver_path: str = "/proc/driver/nvidia/version") -> R.Versions:
    cuda_available = bool(torch.cuda.is_available())
    return R.Versions(
        driver=nvidia_driver_version(driver_path),
        cuda=getattr(torch.version, "cuda", None),
        nccl=nccl_version_text(torch) if cuda_available else None,
        torch=str(torch.__version__),
    )


def gpu_identity(torch: Any, device: Any) -> tuple[str | None, str | None]:
    """(model, UUID) of the rank's GPU from torch's device properties; (None, None) on CPU."""
    if getattr(device, "type", "cpu") != "cuda":
        return None, None
    props = torch.cuda.get_device_properties(device)
    uuid = getattr(props, "uuid", None)
    uuid_text = None
    if uuid is not None:
        uuid_text = str(uuid)
        if not uuid_text.startswith("GPU-"):
            uuid_text = f"GPU-{uuid_text}"  # nvidia-smi's spelling
    return str(props.name), uuid_text


def count_device_files(pattern: str) -> int:
    return len([p for p in glob.glob(pattern) if not os.path.isdir(p)])


def capture_rank(
    torch: Any, task: TaskEnv, kind: str, backend: str, device: Any, env: Mapping[str, str] | None = None,
    declared_gres: str | None = None,
) -> R.RankRecord:
    env = os.environ if env is None else env
    model, uuid = gpu_identity(torch, device)
    device_glob = str(read_param("ACCEPT_GPU_DEVICE_GLOB", env))
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    return R.RankRecord(
        job_id=task.job_id, kind=kind, rank=task.rank, local_rank=task.local_rank, world_size=task.world_size,
        hostname=task.hostname, node=task.node, step_id=task.step_id, gpu_model=model, gpu_uuid=uuid,
        versions=capture_versions(torch), cuda_visible_devices=cvd, slurm_job_gpus=env.get("SLURM_JOB_GPUS"),
        slurm_step_gpus=env.get("SLURM_STEP_GPUS"),
        gpus_seen=int(torch.cuda.device_count()) if torch.cuda.is_available() else 0,
        gpus_bound=R.count_visible_devices(cvd), devices_found=count_device_files(device_glob),
        device_glob=device_glob, declared_gres=declared_gres, backend=backend, device=str(device),
        extra={"seen": container.seen_here(), **_topology_extra(torch, task)},
    )


def _topology_extra(torch: Any, task: TaskEnv) -> dict[str, Any]:
    """Once per node (local rank 0): the node's GPUs, NICs and NVLink as the job sees them."""
    if task.local_rank != 0:
        return {}
    from gpuclust.accept import topology

    try:
        return {"topology": topology.capture(torch)}
    except Exception as exc:  # never lose the acceptance run over the topology probe
        return {"topology_error": f"{type(exc).__name__}: {exc}"}


# ---- what Slurm declares (parsing: gpuclust.slurm.gres) ---------------------------------------------


def slurm_declared(job_id: str, nodes: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(per-node GRES of this job, per-node configured Gres, warnings), read with scontrol through
    gpuclust.slurm.gres; a failure is a warning in the result, not a failed acceptance run."""
    from gpuclust.slurm.client import CommandSlurmClient

    if not os.environ.get("SLURM_CONF") and not os.path.exists("/etc/slurm/slurm.conf"):
        # without a config scontrol falls back to a DNS SRV lookup; don't send one
        return {}, {}, ["no SLURM_CONF and no /etc/slurm/slurm.conf: declared GRES not read"]
    return declared_gres(CommandSlurmClient(timeout=30), job_id, nodes)


# ---- torch.distributed ---------------------------------------------------------------------------------


def import_torch() -> Any:
    try:
        import torch
        import torch.distributed
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise InputError(f"torch is not installed in {sys.executable}: install gpuclust[bench] ({exc})") from None
    return torch


def init_distributed(torch: Any, task: TaskEnv, backend: str, timeout_s: float = 300.0) -> None:
    dist = torch.distributed
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{task.master_addr}:{task.master_port}",
        rank=task.rank,
        world_size=task.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def shutdown_distributed(torch: Any) -> None:
    """Free tensors before the process group goes: gloo's worker thread freeing a tensor during interpreter
    shutdown aborts with "terminate called without an active exception" (see the lab notes)."""
    gc.collect()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
