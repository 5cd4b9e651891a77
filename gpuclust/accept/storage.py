"""`python -m gpuclust.accept.storage`: dataset staging, checkpoint write/restore, aggregate bandwidth.

One rank per node under `srun --mpi=pmix` with Open MPI, or `--mpi=pmi2` with MPICH where Slurm has no pmix
(gpuclust.accept.mpiplugin; mpi4py must see SLURM_NTASKS ranks or the run fails). The job record's "mpi" object
says which plugin and library ran.
Measurements (ACCEPT_STORAGE_TESTS, default all):

- staging: every node copies the dataset (ACCEPT_STAGE_SRC, or one generated in the shared dir) to its
  node-local scratch, with fsync; MB/s per node.
- checkpoint: rank 0 torch.save()s a model-like state dict (ACCEPT_CKPT_SIZE) to the shared dir with O_DIRECT
  (save_checkpoint) and fsyncs; a rank on a DIFFERENT node restores it (restore_checkpoint: O_DIRECT into one
  buffer) and checks every tensor; write MB/s, read MB/s, restore seconds; each record's "method" says how.
- dcp: a sharded torch.distributed.checkpoint save across ranks, then a load in which each rank reads the
  shard another node saved, checked element by element.
- aggregate: each rank writes ACCEPT_AGG_SIZE bytes (fsync) between two mpi4py barriers, then reads another
  rank's file the same way; aggregate MB/s = all bytes / time between the barriers.

MB/s is 1e6 bytes/s. Rank 0 writes `<results_dir>/storage-<job>.jsonl`.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import io
import mmap
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuclust.accept import container, launch, mpiplugin
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


DIRECT_ALIGN = 4096  # O_DIRECT: file offsets, lengths and memory addresses on page boundaries (safe for any device)
DIRECT_CHUNK = 16 * 1024 * 1024  # one O_DIRECT request (write or read)
DIRECT_THREADS = 4  # requests in flight: one synchronous O_DIRECT request at a time leaves the device idle between
HUGE = 2 * 1024 * 1024


def _address(view: memoryview) -> int:
    import numpy as np

    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data) if view.nbytes else 0


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view.nbytes:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class DirectWriter(io.RawIOBase):
    """A write-only file object for torch.save that writes with O_DIRECT (no page cache), several requests in flight.

    torch.save hands a file object each zip header and each tensor's bytes as a memoryview of the tensor's own
    memory. A piece that starts on an aligned file offset from page-aligned memory (a tensor allocated on a page
    boundary, e.g. with THP_MEM_ALLOC_ENABLE=1, in a record aligned by storage_alignment) is written from that memory
    without a copy (in DIRECT_CHUNK requests, all finished before write() returns: the caller may free it);
    everything else is copied into page-aligned staging buffers that are written out whole while the next fills.
    close() waits for every request, writes the last partial page padded and truncates the file to its length."""

    def __init__(self, fd: int, threads: int = DIRECT_THREADS, stage_bytes: int = DIRECT_CHUNK):
        super().__init__()
        from concurrent.futures import ThreadPoolExecutor

        self.fd = fd
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="ckpt-write")
        self.stage_bytes = stage_bytes
        self.free: list[mmap.mmap] = [mmap.mmap(-1, stage_bytes) for _ in range(max(1, threads) + 1)]
        self.pending: list[tuple[Any, mmap.mmap | None]] = []
        self.stage = self.free.pop()
        self.fill = 0  # bytes in self.stage, which starts at file offset self.start (aligned)
        self.start = 0
        self.zero_copy = 0  # bytes written straight from the caller's memory

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.start + self.fill

    def _submit(self, view: memoryview, offset: int, stage: mmap.mmap | None) -> None:
        self.pending.append((self.pool.submit(_pwrite_all, self.fd, view, offset), stage))

    def _wait_one(self) -> None:
        future, stage = self.pending.pop(0)
        future.result()
        if stage is not None:
            self.free.append(stage)

    def _send_stage(self, length: int) -> None:
        self._submit(memoryview(self.stage)[:length], self.start, self.stage)
        self.start += length
        self.fill = 0
        while not self.free:
            self._wait_one()
        self.stage = self.free.pop()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        n = view.nbytes
        direct = n >= DIRECT_ALIGN and _address(view) % DIRECT_ALIGN == 0
        if direct and self.fill and (self.start + self.fill) % DIRECT_ALIGN == 0:
            self._send_stage(self.fill)  # send what is staged (whole pages) so this piece goes without a copy
        if direct and not self.fill:
            whole = n - n % DIRECT_ALIGN
            if whole:
                mine = len(self.pending)
                for at in range(0, whole, DIRECT_CHUNK):
                    self._submit(view[at : min(whole, at + DIRECT_CHUNK)], self.start + at, None)
                while len(self.pending) > mine:  # the caller's memory must be written before we return
                    self._wait_one()
                self.start += whole
                self.zero_copy += whole
                view = view[whole:]
        while view.nbytes:
            take = min(view.nbytes, self.stage_bytes - self.fill)
            self.stage[self.fill : self.fill + take] = view[:take]
            self.fill += take
            view = view[take:]
            if self.fill == self.stage_bytes:
                self._send_stage(self.fill)
        return n

    def close(self) -> None:
        if self.closed:
            return
        try:
            end = self.start + self.fill
            if self.fill:
                padded = -(-self.fill // DIRECT_ALIGN) * DIRECT_ALIGN
                self.stage[self.fill : padded] = bytes(padded - self.fill)
                self._send_stage(padded)
            while self.pending:
                self._wait_one()
            os.ftruncate(self.fd, end)
        finally:
            for future, _ in self.pending:
                future.cancel()
            self.pool.shutdown(wait=True)
            for stage in [self.stage, *self.free]:
                stage.close()
            super().close()


def _o_direct() -> int:
    return getattr(os, "O_DIRECT", 0)


def _torch_save(torch: Any, state: dict[str, Any], target: Any, crc32: bool, alignment: int | None) -> None:
    """torch.save with its CRC32 option and record alignment set for this call only (both are process-global)."""
    ser = torch.serialization
    try:  # torch >= 2.6; a submodule that `import torch` does not import
        config: Any = importlib.import_module("torch.utils.serialization.config")
    except ImportError:
        config = None
    save_cfg: Any = getattr(config, "save", None)
    before_crc = ser.get_crc32_options() if hasattr(ser, "get_crc32_options") else None
    before_align = getattr(save_cfg, "storage_alignment", None) if save_cfg is not None else None
    try:
        if before_crc is not None and before_crc != crc32:
            ser.set_crc32_options(crc32)
        if alignment and before_align is not None:
            save_cfg.storage_alignment = alignment
        torch.save(state, target)
    finally:
        if before_crc is not None and before_crc != crc32:
            ser.set_crc32_options(before_crc)
        if alignment and before_align is not None:
            save_cfg.storage_alignment = before_align


def _storage_bytes(torch: Any, obj: Any, seen: dict[int, int]) -> int:
    """Bytes of the distinct tensor storages in a (nested) state dict."""
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    elif isinstance(obj, dict):
        for value in obj.values():
            _storage_bytes(torch, value, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _storage_bytes(torch, value, seen)
    return sum(seen.values())


def save_checkpoint(torch: Any, state: dict[str, Any], path: Path, *, crc32: bool = False, direct: bool = True,
                    preallocate: bool = False, info: dict[str, Any] | None = None) -> float:
    """torch.save + fsync; seconds for all of it (what a training job waits for). The file is a normal torch.save
    file (torch.load reads it).

    direct (default): records aligned to 4 KiB (torch's storage_alignment) and written with O_DIRECT through
    DirectWriter, so the 1 GiB does not first go through fresh page-cache pages (on this VM, first touches of
    memory are what vary most; BENCHMARKS.md); falls back to buffered where the filesystem refuses O_DIRECT.
    Buffered: torch.save given the path (its C++ writer writes each record straight from the tensor's memory).
    torch.save's CRC32 of every record is off by default: it costs CPU time in the measured write (BENCHMARKS.md,
    "Checkpoint write and cold restore at 1 GiB vs dd"), torch.load does not need it, and the harness checks the
    restored data with its own digest (state_digest). One fsync.
    preallocate: posix_fallocate the file's estimated size first (O_DIRECT only; trimmed to the real size at the end;
    measured in BENCHMARKS.md, off by default). `info`, when given, gets "method" (what was used)."""
    t0 = time.perf_counter()
    method = "torch.save, buffered"
    fd = -1
    if direct and _o_direct():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _o_direct(), 0o644)
        except OSError:
            fd = -1
    if fd >= 0:
        try:
            if preallocate:
                seen: dict[int, int] = {}
                os.posix_fallocate(fd, 0, _storage_bytes(torch, state, seen) + (2 * len(seen) + 16) * DIRECT_ALIGN)
            writer = DirectWriter(fd)
            try:
                _torch_save(torch, state, writer, crc32, DIRECT_ALIGN)
            finally:
                writer.close()
            os.fsync(fd)
            method = "torch.save, O_DIRECT" + (", preallocated" if preallocate else "")
        except OSError:  # a filesystem that takes the flag but not the I/O: buffered instead
            os.close(fd)
            fd = -1
        else:
            os.close(fd)
    if fd < 0:
        _torch_save(torch, state, str(path), crc32, None)
        fsync_path(path)
    if info is not None:
        info["method"] = method + ("" if crc32 else ", CRC32 off")
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


DIRECT_READ_THREADS = 8  # read requests in flight (each DIRECT_CHUNK: 4 device requests at virtio-blk's 4 MiB)
MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault pages in (allocated, zeroed, writable) without touching them


@functools.cache
def _libc_madvise() -> Any | None:
    """libc's madvise, looked up once (the prefault thread calls it per chunk); None where libc has none."""
    import ctypes

    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def _populate(address: int, length: int) -> bool:
    """madvise(MADV_POPULATE_WRITE) on [address, address + length); False where the kernel or libc cannot."""
    madvise = _libc_madvise()
    return madvise is not None and bool(madvise(address, length, MADV_POPULATE_WRITE) == 0)


def read_file_into(path: Path, direct: bool = True, threads: int = DIRECT_READ_THREADS,
                   chunk: int = DIRECT_CHUNK, prefault: bool = True, huge: bool = True) -> tuple[mmap.mmap, int, bool]:
    """The whole file in one fresh page-aligned anonymous buffer; (buffer, size, direct).

    Read in `chunk` requests, `threads` in flight, with O_DIRECT where the filesystem allows it (straight into the
    buffer, no page cache), else buffered. huge: MADV_HUGEPAGE on the buffer (one fault per 2 MiB). prefault: a
    thread faults the buffer in (MADV_POPULATE_WRITE) chunk by chunk ahead of the reads, and each read waits for
    its chunk, so the page faults and the kernel's zeroing of fresh memory (the part of a cold restore that dd's
    read, into reused page cache, does not pay) run on another core while the device reads; without it every
    reader faults its own chunk in before its request goes out. Where the kernel has no MADV_POPULATE_WRITE the
    readers fault their chunks themselves."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    size = os.path.getsize(path)
    buf = mmap.mmap(-1, max(HUGE, -(-size // HUGE) * HUGE))
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass
    view = memoryview(buf)
    offsets = list(range(0, size, chunk)) or [0]
    ready = [threading.Event() for _ in offsets]
    if not prefault:
        for event in ready:
            event.set()

    def populate() -> None:
        base = _address(view)
        try:
            for i, offset in enumerate(offsets):
                if not _populate(base + offset, min(chunk, len(buf) - offset)):
                    break
                ready[i].set()
        finally:
            for event in ready:  # on any failure the readers fault their chunks themselves
                event.set()

    def read_all_with(flags: int) -> int:
        fd = os.open(path, os.O_RDONLY | flags)

        def one(i: int) -> int:
            ready[i].wait()
            offset = offsets[i]
            want = min(chunk, len(buf) - offset)
            got = 0
            while got < want:
                n = os.preadv(fd, [view[offset + got : offset + want]], offset + got)
                if n == 0:
                    break
                got += n
            return got

        try:
            with ThreadPoolExecutor(max(1, threads), thread_name_prefix="ckpt-read") as pool:
                return min(size, sum(pool.map(one, range(len(offsets)))))
        finally:
            os.close(fd)

    toucher = threading.Thread(target=populate, name="ckpt-prefault", daemon=True) if prefault else None
    used_direct = bool(direct and _o_direct())
    try:
        if toucher is not None:
            toucher.start()
        try:
            got = read_all_with(_o_direct() if used_direct else 0)
        except OSError:
            if not used_direct:
                raise
            used_direct = False  # a filesystem that refuses O_DIRECT (at open or at read): buffered
            got = read_all_with(0)
    finally:
        if toucher is not None:
            toucher.join()
        view.release()
    if got != size:
        raise OSError(f"{path}: read {got} of {size} bytes")
    return buf, size, used_direct


class _NoRecordOffset(Exception):
    """torch.load(map_location="meta") gave a storage without its record's file offset (torch before ~2.5)."""


def _record_offset(storage: Any) -> int:
    offset = getattr(storage, "_checkpoint_offset", None)  # set by torch.load for meta storages (private)
    if offset is None:
        raise _NoRecordOffset
    return int(offset)


def _rebuild(torch: Any, meta: Any, buf: mmap.mmap) -> Any:
    """The loaded object with every meta tensor replaced by a view of `buf` at its record's file offset."""
    if isinstance(meta, torch.Tensor):
        storage = meta.untyped_storage()
        count = storage.nbytes() // meta.element_size()
        if count == 0:  # an empty storage has no bytes in the file (torch.frombuffer refuses count 0)
            return torch.empty(0, dtype=meta.dtype).as_strided(meta.size(), meta.stride(), meta.storage_offset())
        flat = torch.frombuffer(buf, dtype=meta.dtype, count=count, offset=_record_offset(storage))
        return flat.as_strided(meta.size(), meta.stride(), meta.storage_offset())
    if isinstance(meta, dict):
        return type(meta)((k, _rebuild(torch, v, buf)) for k, v in meta.items())
    if isinstance(meta, (list, tuple)):
        return type(meta)(_rebuild(torch, v, buf) for v in meta)
    return meta


def restore_checkpoint(torch: Any, path: Path, *, direct: bool = True, overlap: bool = True,
                       info: dict[str, Any] | None = None, **reader: Any) -> tuple[dict[str, Any], float]:
    """A cold restore: the file's cached pages dropped first, then the file into memory; (state, seconds).

    direct (default): torch.load(map_location="meta") reads only the pickle and the zip directory (each storage's
    record offset), the whole file is read with O_DIRECT into one fresh huge-page buffer (read_file_into; `reader`
    passes its options), and each tensor is a view of it: memory is touched once, by the device's DMA, as dd's read
    touches its page cache once. overlap (default): the read starts first and torch.load(meta) runs while it is in
    flight. torch.load instead reads through the page cache and copies into a fresh allocation per record (two
    fresh touches per byte; BENCHMARKS.md). Not direct: torch.load. The tensors are ordinary writable CPU tensors
    either way. `info`, when given, gets "method"."""
    from concurrent.futures import ThreadPoolExecutor

    drop_cached(path)
    t0 = time.perf_counter()
    method = "torch.load"
    if direct:
        with ThreadPoolExecutor(1, thread_name_prefix="ckpt-restore") as background:
            reading = background.submit(read_file_into, path, **reader) if overlap else None
            meta = torch.load(str(path), map_location="meta", weights_only=True)
            buf, _size, used_direct = reading.result() if reading is not None else read_file_into(path, **reader)
        try:
            state = _rebuild(torch, meta, buf)
            method = "meta torch.load + " + ("O_DIRECT" if used_direct else "buffered") + " read into one buffer"
        except _NoRecordOffset:  # an older torch: plain torch.load, timed on its own from a cold cache
            del buf, meta
            direct = False
            method = "torch.load (this torch gives no record offsets)"
            drop_cached(path)
            t0 = time.perf_counter()
    if not direct:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    seconds = time.perf_counter() - t0
    if info is not None:
        info["method"] = method
    return state, seconds


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
            how: dict[str, Any] = {}
            seconds = save_checkpoint(torch, state, path, info=how)
            info = (path.stat().st_size, seconds, digest, how.get("method"))
            del state
        info = self.gather(info)[writer]
        size, write_seconds, digest, write_method = info
        self.add("checkpoint_write", nodes[writer], size, write_seconds, write_node=nodes[writer], path=str(path),
                 extra={"method": write_method})
        if reader is None:
            self.reasons.append("checkpoint restore needs a second node: every rank is on " + nodes[writer])
            self.dist.barrier()
            return
        result: Any = None
        if self.task.rank == reader:
            read_how: dict[str, Any] = {}
            loaded, seconds = restore_checkpoint(torch, path, info=read_how)
            ok = state_digest(torch, loaded) == digest
            del loaded
            result = (seconds, ok, read_how.get("method"))
        seconds, ok, read_method = self.gather(result)[reader]
        self.add("checkpoint_read", nodes[reader], size, seconds, ok=ok, write_node=nodes[writer],
                 read_node=nodes[reader], path=str(path), extra={"method": read_method})
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
            "`srun --mpi=pmix` (Open MPI) or `--mpi=pmi2` (MPICH) and check which MPI mpi4py loaded "
            f"(SLURM_MPI_TYPE={os.environ.get('SLURM_MPI_TYPE', '')!r}, "
            f"MPI4PY_MPIABI={os.environ.get('MPI4PY_MPIABI', '')!r})"
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
            declared_gres=job_gres, node_gres=node_gres, extra=container.job_extra(
                {**({"warnings": warnings} if warnings else {}), "mpi": mpiplugin.job_record(comm)}),
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
