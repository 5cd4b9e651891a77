"""`python -m gpuclust.accept.storage`: dataset staging, checkpoint write/restore, aggregate bandwidth.

One rank per node under `srun --mpi=pmix` (Open MPI; mpi4py must see SLURM_NTASKS ranks or the run fails).
Measurements (ACCEPT_STORAGE_TESTS, default all):

- staging: every node copies the dataset (ACCEPT_STAGE_SRC, or one generated in the shared dir) to its
  node-local scratch, with fsync; MB/s per node.
- checkpoint: rank 0 torch.save()s a model-like state dict (ACCEPT_CKPT_SIZE) to the shared dir and fsyncs;
  a rank on a DIFFERENT node torch.load()s it and checks every tensor; write MB/s, read MB/s, restore seconds.
- dcp: a sharded torch.distributed.checkpoint save across ranks, then a load in which each rank reads the
  shard another node saved, checked element by element.
- aggregate: each rank writes ACCEPT_AGG_SIZE bytes (fsync) between two mpi4py barriers, then reads another
  rank's file the same way; aggregate MB/s = all bytes / time between the barriers.

MB/s is 1e6 bytes/s. Rank 0 writes `<results_dir>/storage-<job>.jsonl`.
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuclust.accept import container, launch
from gpuclust.accept import results as R
from gpuclust.accept.allreduce import gather_ranks
from gpuclust.accept.params import read_params
from gpuclust.atomicfile import fsync_path
from gpuclust.errors import InputError

PARAM_NAMES = ["ACCEPT_STORAGE_TESTS", "ACCEPT_SHARED_DIR", "ACCEPT_LOCAL_DIR", "ACCEPT_STAGE_SRC",
               "ACCEPT_STAGE_SIZE", "ACCEPT_CKPT_SIZE", "ACCEPT_AGG_SIZE", "ACCEPT_GPU_DEVICE_GLOB"]
CHUNK = 4 * 1024 * 1024
LAYER_BYTES = 4 * 1024 * 1024  # the state dict is a stack of 4 MiB float32 "layers", like a model's


def mbps(nbytes: int, seconds: float) -> float:
    return nbytes / 1e6 / seconds if seconds > 0 else float("inf")


def write_file_fsync(path: Path, nbytes: int, seed: int) -> None:
    """nbytes of pseudo-random data (not zeros: no filesystem may compress or skip them), fsynced."""
    block = hashlib.shake_256(str(seed).encode()).digest(min(CHUNK, max(1, nbytes)))
    with open(path, "wb") as handle:
        left = nbytes
        while left > 0:
            piece = block[: min(left, len(block))]
            handle.write(piece)
            left -= len(piece)
        handle.flush()
        os.fsync(handle.fileno())


def copy_fsync(src: Path, dst: Path) -> int:
    """Copy a file or a directory tree, fsync every file; returns bytes copied."""
    total = 0
    if src.is_dir():
        dst.mkdir(parents=True, exist_ok=True)
        for child in sorted(src.iterdir()):
            total += copy_fsync(child, dst / child.name)
        return total
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while True:
            data = fin.read(CHUNK)
            if not data:
                break
            fout.write(data)
            total += len(data)
        fout.flush()
        os.fsync(fout.fileno())
    return total


def read_all(path: Path) -> int:
    total = 0
    with open(path, "rb") as handle:
        try:  # ask the kernel to forget cached pages first; the other node's cache is out of reach anyway
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        except (AttributeError, OSError):
            pass
        while True:
            data = handle.read(CHUNK)
            if not data:
                break
            total += len(data)
    return total


def save_checkpoint(torch: Any, state: dict[str, Any], path: Path, *, crc32: bool = False) -> float:
    """torch.save + one fsync; seconds for all of it (what a training job waits for).

    torch.save is given the path, so its C++ writer writes each tensor's storage straight from the tensor's memory
    (a Python file object adds a call per record). Its CRC32 of every record is switched off by default: it costs
    about 0.2 s of CPU per 512 MiB here (BENCHMARKS.md), torch.load does not need it, and the harness checks the
    restored data with its own digest (state_digest). fsync is called once, on the closed file's inode.
    """
    t0 = time.perf_counter()
    before = torch.serialization.get_crc32_options() if hasattr(torch.serialization, "get_crc32_options") else None
    if before is not None and before != crc32:
        torch.serialization.set_crc32_options(crc32)
    try:
        torch.save(state, str(path))
    finally:
        if before is not None and before != crc32:
            torch.serialization.set_crc32_options(before)
    fsync_path(path)
    return time.perf_counter() - t0


def drop_cached(path: Path) -> None:
    """Make the next read of `path` come from the device: fsync (dirty pages cannot be dropped), then
    POSIX_FADV_DONTNEED. Only this node's page cache: a host that caches the virtual disk is out of reach."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass
    finally:
        os.close(fd)


def restore_checkpoint(torch: Any, path: Path) -> tuple[dict[str, Any], float]:
    """A cold restore: the file's cached pages dropped first, then torch.load into memory; (state, seconds).

    Nearly all of torch.load's own cost is the page faults of the fresh memory it reads into (about as much as the
    read itself here); THP_MEM_ALLOC_ENABLE=1 in the environment makes torch's CPU allocator ask for huge pages."""
    drop_cached(path)
    t0 = time.perf_counter()
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    return state, time.perf_counter() - t0


def make_state_dict(torch: Any, nbytes: int, seed: int) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    layers = max(1, nbytes // LAYER_BYTES)
    per = max(1, min(nbytes, LAYER_BYTES) // 4)
    return {f"layers.{i}.weight": torch.randn(per, generator=gen) for i in range(layers)}


def state_digest(torch: Any, state: dict[str, Any]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Run:
    """State shared by the measurements of one storage job."""

    def __init__(self, torch: Any, task: launch.TaskEnv, params: dict[str, Any], shared: Path, local: Path):
        self.torch = torch
        self.task = task
        self.params = params
        self.shared = shared
        self.local = local
        self.records: list[R.StorageRecord] = []
        self.reasons: list[str] = []
        self.bad_nodes: list[str] = []

    @property
    def dist(self) -> Any:
        return self.torch.distributed

    def nodes_by_rank(self) -> list[str]:
        everyone: list[Any] = [None] * self.task.world_size
        self.dist.all_gather_object(everyone, self.task.node)
        return [str(n) for n in everyone]

    def add(self, metric: str, node: str, nbytes: int, seconds: float, ok: bool = True, *,
            write_node: str | None = None, read_node: str | None = None, ranks: int | None = None,
            path: str | None = None, extra: dict[str, Any] | None = None) -> None:
        self.records.append(R.StorageRecord(
            job_id=self.task.job_id, kind="storage", metric=metric, node=node, bytes=nbytes, seconds=seconds,
            mbps=mbps(nbytes, seconds), ok=ok, write_node=write_node, read_node=read_node, ranks=ranks, path=path,
            extra=extra or {}))

    def gather(self, value: Any) -> list[Any]:
        everyone: list[Any] = [None] * self.task.world_size
        self.dist.all_gather_object(everyone, value)
        return everyone

    # ---- staging ----
    def staging(self) -> None:
        src_param = self.params["ACCEPT_STAGE_SRC"]
        src = Path(src_param) if src_param else self.shared / "dataset"
        if not src_param and self.task.rank == 0:
            src.mkdir(parents=True, exist_ok=True)
            size = int(self.params["ACCEPT_STAGE_SIZE"])
            files = max(1, min(8, size // CHUNK))
            for i in range(files):
                write_file_fsync(src / f"part-{i:03d}.bin", size // files, seed=i)
        self.dist.barrier()
        dst = self.local / "staged"
        error = None
        t0 = time.perf_counter()
        try:
            nbytes = copy_fsync(src, dst)
        except OSError as exc:
            nbytes, error = 0, f"{self.task.node}: staging {src} -> {dst} failed: {exc}"
        seconds = time.perf_counter() - t0
        shutil.rmtree(dst, ignore_errors=True)
        for node, (nb, sec, err) in zip(self.nodes_by_rank(), self.gather((nbytes, seconds, error)), strict=True):
            self.add("staging", node, nb, sec, ok=err is None, path=str(src))
            if err:
                self.reasons.append(err)
                self.bad_nodes.append(node)

    # ---- checkpoint: torch.save + fsync on one node, torch.load on another ----
    def checkpoint(self) -> None:
        torch = self.torch
        nodes = self.nodes_by_rank()
        writer = 0
        reader = next((r for r, n in enumerate(nodes) if n != nodes[writer]), None)
        path = self.shared / "checkpoint.pt"
        info: Any = None
        if self.task.rank == writer:
            state = make_state_dict(torch, int(self.params["ACCEPT_CKPT_SIZE"]), seed=1234)
            digest = state_digest(torch, state)
            seconds = save_checkpoint(torch, state, path)
            info = (path.stat().st_size, seconds, digest)
            del state
        info = self.gather(info)[writer]
        size, write_seconds, digest = info
        self.add("checkpoint_write", nodes[writer], size, write_seconds, write_node=nodes[writer], path=str(path))
        if reader is None:
            self.reasons.append("checkpoint restore needs a second node: every rank is on " + nodes[writer])
            self.dist.barrier()
            return
        result: Any = None
        if self.task.rank == reader:
            loaded, seconds = restore_checkpoint(torch, path)
            ok = state_digest(torch, loaded) == digest
            del loaded
            result = (seconds, ok)
        seconds, ok = self.gather(result)[reader]
        self.add("checkpoint_read", nodes[reader], size, seconds, ok=ok, write_node=nodes[writer],
                 read_node=nodes[reader], path=str(path))
        if not ok:
            self.reasons.append(f"checkpoint written on {nodes[writer]} read back different on {nodes[reader]}")
        if self.task.rank == writer:
            path.unlink(missing_ok=True)

    # ---- sharded torch.distributed.checkpoint ----
    def dcp(self) -> None:
        import torch.distributed.checkpoint as dcp

        torch = self.torch
        n = self.task.world_size
        rank = self.task.rank
        share = max(4, int(self.params["ACCEPT_CKPT_SIZE"]) // n)
        target = self.shared / "dcp"
        gen = torch.Generator().manual_seed(5000 + rank)
        state: dict[str, Any] | None = {f"shard.{rank}": torch.randn(share // 4, generator=gen)}
        self.dist.barrier()
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=str(target))
        save_seconds = time.perf_counter() - t0
        self.dist.barrier()
        src = (rank + 1) % n  # read the shard another rank (another node, one rank per node) saved
        into: dict[str, Any] | None = {f"shard.{src}": torch.empty(share // 4)}
        t0 = time.perf_counter()
        assert into is not None
        dcp.load(into, checkpoint_id=str(target))
        load_seconds = time.perf_counter() - t0
        expected = torch.randn(share // 4, generator=torch.Generator().manual_seed(5000 + src))
        wrong = int((into[f"shard.{src}"] != expected).sum().item())
        # the known gloo shutdown abort: drop every tensor before the process group goes (see launch)
        state = None
        into = None
        del expected
        gc.collect()
        everyone = self.gather((save_seconds, load_seconds, wrong))
        total = share // 4 * 4 * n
        self.add("dcp_save", "*", total, max(e[0] for e in everyone), ranks=n, path=str(target))
        bad = sum(e[2] for e in everyone)
        self.add("dcp_load", "*", total, max(e[1] for e in everyone), ok=bad == 0, ranks=n, path=str(target),
                 extra={"wrong": bad})
        if bad:
            self.reasons.append(f"sharded checkpoint: {bad} wrong elements after loading across ranks")
        self.dist.barrier()
        if rank == 0:
            shutil.rmtree(target, ignore_errors=True)

    # ---- aggregate write/read between mpi4py barriers ----
    def aggregate(self, comm: Any) -> None:
        from mpi4py import MPI

        n = comm.Get_size()
        rank = comm.Get_rank()
        nbytes = int(self.params["ACCEPT_AGG_SIZE"])
        directory = self.shared / "aggregate"
        if rank == 0:
            directory.mkdir(parents=True, exist_ok=True)
        comm.Barrier()
        t0 = MPI.Wtime()
        write_file_fsync(directory / f"rank-{rank}.bin", nbytes, seed=rank)
        comm.Barrier()
        write_seconds = MPI.Wtime() - t0
        t0 = MPI.Wtime()
        got = read_all(directory / f"rank-{(rank + 1) % n}.bin")
        comm.Barrier()
        read_seconds = MPI.Wtime() - t0
        got_all = comm.allreduce(got, op=MPI.SUM)
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
        self.add("aggregate_write", "*", nbytes * n, write_seconds, ranks=n)
        ok = got_all == nbytes * n
        self.add("aggregate_read", "*", got_all, read_seconds, ok=ok, ranks=n)
        if not ok:
            self.reasons.append(f"aggregate read {got_all} bytes, expected {nbytes * n}")


def mpi_comm(expected_size: int) -> Any:
    """COMM_WORLD, checked: MPICH launched with the wrong PMI gives every rank a world of 1 and exits 0."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != expected_size:
        raise InputError(
            f"mpi4py sees {comm.Get_size()} ranks but the step has {expected_size} tasks: launch with "
            "`srun --mpi=pmix` (Open MPI) or `--mpi=pmi2` (MPICH) and check which MPI mpi4py loaded"
        )
    return comm


def main(argv: list[str] | None = None) -> int:
    params = read_params(PARAM_NAMES)
    tests = params["ACCEPT_STORAGE_TESTS"]
    task = launch.task_env()
    out_dir = launch.results_dir()
    comm = mpi_comm(task.world_size) if "aggregate" in tests else None
    shared_root = Path(params["ACCEPT_SHARED_DIR"] or os.path.join(out_dir, ".scratch"))
    shared = shared_root / f"storage-{task.job_id}"
    local_root = Path((params["ACCEPT_LOCAL_DIR"] or os.environ.get("TMPDIR") or "/tmp").replace("%n", task.node))
    local = local_root / f"gpuclust-accept-{task.job_id}-{task.rank}"
    local.mkdir(parents=True, exist_ok=True)
    if task.rank == 0:
        shared.mkdir(parents=True, exist_ok=True)
    torch = launch.import_torch()
    started = R.utcnow()
    launch.init_distributed(torch, task, "gloo")
    run = Run(torch, task, params, shared, local)
    try:
        run.dist.barrier()
        for name in ("staging", "checkpoint", "dcp"):
            if name in tests:
                getattr(run, name)()
        if comm is not None:
            run.aggregate(comm)
        rank = launch.capture_rank(torch, task, "storage", "gloo", torch.device("cpu"))
        ranks = gather_ranks(torch, rank, task.world_size)
        run.dist.barrier()
    finally:
        gc.collect()
        launch.shutdown_distributed(torch)
        shutil.rmtree(local, ignore_errors=True)
    passed = not run.reasons and all(r.ok for r in run.records)
    if task.rank == 0:
        shutil.rmtree(shared, ignore_errors=True)
        nodes = tuple(dict.fromkeys(r.node for r in ranks))
        job_gres, node_gres, warnings = launch.slurm_declared(task.job_id, nodes)
        job = R.JobRecord(
            job_id=task.job_id, kind="storage", cluster=task.cluster, partition=task.partition, nodes=nodes,
            started=started, finished=R.utcnow(), passed=passed, failed_nodes=tuple(dict.fromkeys(run.bad_nodes)),
            reasons=tuple(run.reasons), world_size=task.world_size, backend="gloo",
            params={k: (list(v) if isinstance(v, tuple) else v) for k, v in params.items()},
            declared_gres=job_gres, node_gres=node_gres, extra=container.job_extra({"warnings": warnings} if warnings else {}),
        )
        ranks = [replace(r, declared_gres=job_gres.get(r.node)) for r in ranks]
        path = R.write_result(out_dir, R.JobResult("", job, tuple(ranks), storage=tuple(run.records)))
        for rec in run.records:
            where = f"{rec.write_node}->{rec.read_node}" if rec.read_node else rec.node
            print(f"{rec.metric:>17} {where:>14} {rec.bytes:>12} B {rec.seconds:8.3f} s {rec.mbps:9.1f} MB/s"
                  f"{'' if rec.ok else '  FAILED'}")
        print(f"# wrote {path}")
    return 0 if passed else 1


def entry() -> None:
    launch.run_program(main, "gpuclust.accept.storage")


if __name__ == "__main__":
    entry()
