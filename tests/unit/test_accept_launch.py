"""What a rank captures, and the GPU path (backend, device, CUDA-event timer, versions) with fakes on CPU."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from gpuclust.accept import launch
from gpuclust.errors import InputError, UnsafeValueError
from gpuclust.slurm import gres


def test_parse_job_node_gres_recorded(data_dir: Path) -> None:
    text = (data_dir / "accept" / "scontrol_show_job_d_running_2node_gres2.txt").read_text()
    assert gres.parse_job_node_gres(text) == {"node1": "gpu:h100:2(IDX:0-1)", "node2": "gpu:h100:2(IDX:0-1)"}


def test_parse_node_gres_recorded(data_dir: Path) -> None:
    text = (data_dir / "accept" / "scontrol_show_node_o_node1-2.txt").read_text()
    assert gres.parse_node_gres(text) == {"node1": "gpu:h100:4", "node2": "gpu:h100:4"}


def test_gres_counts() -> None:
    assert gres.gres_gpu_count("gpu:h100:2(IDX:0-1)") == 2
    assert gres.gres_gpu_count("gpu:h100:4(S:0-1)") == 4
    assert gres.gres_gpu_count("") == 0
    assert gres.gres_gpu_count(None) is None
    assert gres.gres_gpu_type("gpu:h100:4") == "h100"
    assert gres.gres_gpu_type("gpu:2") is None


def test_choose_backend() -> None:
    assert launch.choose_backend("auto", True) == "nccl"
    assert launch.choose_backend("auto", False) == "gloo"
    assert launch.choose_backend("gloo", True) == "gloo"
    with pytest.raises(InputError):
        launch.choose_backend("nccl", False)


def slurm_env(**extra: str) -> dict[str, str]:
    env = {"SLURM_JOB_ID": "77", "SLURM_PROCID": "3", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "4",
           "SLURM_LOCALID": "1", "SLURMD_NODENAME": "node2", "SLURM_JOB_NODELIST": "node[1-4]",
           "SLURM_STEP_NODELIST": "node[3-4]", "SLURM_JOB_PARTITION": "gpu"}
    env.update(extra)
    return env


def test_task_env_from_slurm() -> None:
    task = launch.task_env(slurm_env(MASTER_PORT="29500"))
    assert (task.rank, task.world_size, task.local_rank, task.node) == (3, 4, 1, "node2")
    assert task.master_addr == "node3"  # the step's first node, not the job's
    assert task.master_port == 29500 and task.partition == "gpu"
    assert launch.task_env(slurm_env()).master_port == 23000 + 10 * 77


def test_task_env_refuses_bad_values() -> None:
    with pytest.raises(UnsafeValueError):
        launch.task_env(slurm_env(MASTER_ADDR="node1;id"))
    with pytest.raises(InputError):
        launch.task_env({"SLURM_JOB_ID": ""})


# ---- fakes for the GPU path ----


class FakeEvent:
    clock = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None
        self.synced = False

    def record(self) -> None:
        FakeEvent.clock += 12.5
        self.t = FakeEvent.clock

    def synchronize(self) -> None:
        self.synced = True

    def elapsed_time(self, end: FakeEvent) -> float:
        assert end.synced, "must synchronize the end event before reading it"
        assert self.t is not None and end.t is not None
        return end.t - self.t  # ms


def fake_torch(cuda: bool, nccl: Any = (2, 21, 5), devices: int = 4) -> Any:
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", uuid="0e2b1c3a-aaaa-bbbb-cccc-1234567890ab")
    current: dict[str, int] = {}
    cuda_ns = types.SimpleNamespace(
        is_available=lambda: cuda, device_count=lambda: devices if cuda else 0,
        set_device=lambda i: current.__setitem__("dev", i), Event=FakeEvent,
        get_device_properties=lambda d: props, nccl=types.SimpleNamespace(version=lambda: nccl),
    )
    return types.SimpleNamespace(
        __version__="2.13.0+cu124", version=types.SimpleNamespace(cuda="12.4" if cuda else None), cuda=cuda_ns,
        device=_Device,
        _current=current,
    )


class _Device:
    def __init__(self, kind: str, index: int | None = None) -> None:
        self.type, self.index = kind, index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def test_pick_device_nccl_uses_local_rank_modulo() -> None:
    torch = fake_torch(True, devices=4)
    dev = launch.pick_device(torch, "nccl", local_rank=5)
    assert str(dev) == "cuda:1" and torch._current["dev"] == 1
    assert str(launch.pick_device(fake_torch(False), "gloo", 0)) == "cpu"
    with pytest.raises(InputError):
        launch.pick_device(fake_torch(True, devices=0), "nccl", 0)


def test_cuda_event_timer() -> None:
    torch = fake_torch(True)
    calls: list[str] = []
    timer = launch.make_timer(torch, _Device("cuda", 0), barrier=lambda: calls.append("barrier"))
    assert isinstance(timer, launch.CudaEventTimer)
    timer.start()
    assert timer.stop() == pytest.approx(0.0125)  # 12.5 ms between the two events
    assert calls == ["barrier"]
    assert isinstance(launch.make_timer(torch, _Device("cpu", None)), launch.MonotonicTimer)


def test_versions_on_gpu(tmp_path: Path) -> None:
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
                      "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    v = launch.capture_versions(fake_torch(True), driver_path=str(driver))
    assert (v.driver, v.cuda, v.nccl, v.torch) == ("550.54.15", "12.4", "2.21.5", "2.13.0+cu124")
    open_kernel = tmp_path / "open"
    open_kernel.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build\n")
    assert launch.nvidia_driver_version(str(open_kernel)) == "560.35.03"


def test_versions_on_cpu_and_old_nccl(tmp_path: Path) -> None:
    v = launch.capture_versions(fake_torch(False), driver_path=str(tmp_path / "absent"))
    assert (v.driver, v.cuda, v.nccl) == (None, None, None)
    assert launch.nccl_version_text(fake_torch(True, nccl=22105)) == "2.21.5"


def test_gpu_identity() -> None:
    model, uuid = launch.gpu_identity(fake_torch(True), _Device("cuda", 0))
    assert model == "NVIDIA H100 80GB HBM3" and uuid == "GPU-0e2b1c3a-aaaa-bbbb-cccc-1234567890ab"
    assert launch.gpu_identity(fake_torch(False), _Device("cpu", None)) == (None, None)


def test_capture_rank_counts_bound_and_found(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"nvidia{i}").write_text("")
    (tmp_path / "nvidiactl").write_text("")
    task = launch.task_env(slurm_env())
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "0,1", "ACCEPT_GPU_DEVICE_GLOB": f"{tmp_path}/nvidia[0-9]*"}
    rec = launch.capture_rank(fake_torch(True), task, "allreduce", "nccl", _Device("cuda", 1), env=env)
    assert (rec.gpus_seen, rec.gpus_bound, rec.devices_found) == (4, 2, 4)
    assert rec.gpu_model and rec.versions.nccl == "2.21.5" and rec.slurm_job_gpus == "0,1"


def test_torch_is_not_imported_by_the_core() -> None:
    import subprocess
    import sys

    code = ("import sys; import gpuclust.cli.main, gpuclust.accept.results, gpuclust.accept.report, "
            "gpuclust.accept.submit, gpuclust.accept.allreduce, gpuclust.accept.storage, gpuclust.accept.pairwise; "
            "sys.exit(1 if 'torch' in sys.modules or 'mpi4py' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_parse_gres_recorded_on_slurm_24_11(data_dir: Path) -> None:
    """24.11 (lab, Debian 13 root) adds a JOB_GRES=gpu:h100:4 line and writes TresPerNode=gres/gpu:h100:2; the
    per-node GRES=...(IDX:...) lines are the same form as 22.05 (here IDX:1-2: another job held device 0)."""
    text = (data_dir / "accept" / "scontrol_show_job_d_running_2node_gres2_24.11.txt").read_text()
    assert gres.parse_job_node_gres(text) == {"node1": "gpu:h100:2(IDX:1-2)", "node2": "gpu:h100:2(IDX:1-2)"}
    nodes = (data_dir / "accept" / "scontrol_show_node_o_node1-2_24.11.txt").read_text()
    assert gres.parse_node_gres(nodes) == {"node1": "gpu:h100:4", "node2": "gpu:h100:4"}
