"""Checkpoint write and cold restore of the acceptance harness against dd on the same filesystem (issue 18).

    flock /work/wt/bench.lock .venv/bin/python benchmarks/accept_checkpoint_vs_dd.py \
        [--dir DIR] [--size-mib 1024] [--rounds 8] [--kinds dd,dd-again,harness,...] [--thp] [--json]

Each round writes and then cold-reads SIZE with every kind, in alternating order (ABBA: forward in even rounds,
reversed in odd ones); round 0 warms up and is discarded. Kinds (write / read):
  dd-zero    dd if=/dev/zero bs=1M conv=fsync / dd bs=1M of=/dev/null (the issue's literal baseline; zeros may be
             stored or read cheaply by the host of a virtual disk, so it is not like for like)
  dd         dd bs=1M conv=fsync from a file of random bytes in /dev/shm (data like a checkpoint's) / dd bs=1M
  dd-again   the same as dd, measured separately: dd-again/dd is the noise floor of any ratio on this machine
  dd-16M     dd bs=16M (write and read): does the request size matter on this disk
  dd-direct  dd bs=16M oflag=direct conv=fsync / iflag=direct
  harness    gpuclust.accept.storage.save_checkpoint / restore_checkpoint, what the storage job runs (O_DIRECT)
  harness-falloc  the harness with preallocate=True (posix_fallocate of the estimated size before the writes)
  harness-buffered  the same with direct=False: torch.save(path) + fsync / torch.load (the harness before)
  raw        the tensors' bytes, no format: os.writev of memoryviews (64 MiB per call) + fsync / readinto one
             fresh buffer (buffered, 64 MiB calls)
  raw-direct the tensors' bytes through the harness's O_DIRECT writer / the harness's O_DIRECT reader
  harness-prev  the harness's restore as it was before run 6: torch.load(meta), then the O_DIRECT read, 4 x 16 MiB
             requests in flight, no prefault thread (the write is the harness's)
  raw-4x16   raw-direct with the reader as before run 6 (4 x 16 MiB in flight, each reader faults its own chunk)
  raw-8x16-nopf  raw-direct, 8 x 16 MiB in flight, no prefault thread
  raw-4x64   raw-direct, 4 x 64 MiB in flight, prefault thread
  raw-16x16  raw-direct, 16 x 16 MiB in flight, prefault thread
  raw-nohuge raw-direct with 4 KiB pages (no MADV_HUGEPAGE), prefault thread
  dcp        torch.distributed.checkpoint save/load, one process, no process group, FileSystemWriter defaults
             (sync_files, one thread); load into tensors allocated before the timer, as a model's parameters are
  dcp-t4     the same with thread_count=4
Before EVERY read (every kind): `sync; echo 3 > /proc/sys/vm/drop_caches` when we may (root), and fsync +
POSIX_FADV_DONTNEED on the file; the host's cache of a virtual disk stays out of reach. Every read is checked
(dd: byte count; harness/raw: the harness's sha256 digest, untimed; dcp: every tensor compared).
Per round also: `touch`, the seconds to first-touch SIZE of fresh anonymous memory (on a VM whose balloon reports
free pages to the host, this is the part that varies most, and every kind pays it: page cache or buffers).
Reported: MB/s (1e6 bytes/s) per round, medians and ranges, and the median (range) over rounds of each kind's
ratio to dd (and to dd-zero) of the same round; load average before and after.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpuclust.accept.storage import (
    DirectWriter,
    drop_cached,
    make_state_dict,
    read_file_into,
    restore_checkpoint,
    save_checkpoint,
    state_digest,
)

ALL_KINDS = ["dd-zero", "dd", "dd-again", "dd-16M", "dd-direct", "harness", "harness-prev", "harness-falloc",
             "harness-buffered", "raw", "raw-direct", "raw-4x16", "raw-8x16-nopf", "raw-4x64", "raw-16x16",
             "raw-nohuge", "dcp",
             "dcp-t4"]
PREV_READER: dict[str, Any] = {"threads": 4, "prefault": False}  # the reader before run 6


def drop_all(path: Path) -> bool:
    """Cold cache for the next read: drop_caches where allowed, and the file's own pages; True if drop_caches ran."""
    files = list(path.iterdir()) if path.is_dir() else [path]
    for f in files:
        drop_cached(f)
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def dd(*args: str) -> None:
    subprocess.run(["dd", *args, "status=none"], check=True)


def dd_read(path: Path, *args: str) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(["dd", f"if={path}", "of=/dev/null", *args], check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if f"{path.stat().st_size} bytes" not in out.stderr:
        raise SystemExit(f"dd read of {path} did not read the whole file: {out.stderr}")
    return seconds


def touch_seconds(nbytes: int) -> float:
    """Seconds to first-touch nbytes of fresh anonymous memory (one page fault per 4 KiB page)."""
    buf = mmap.mmap(-1, nbytes)
    t0 = time.perf_counter()
    torch.frombuffer(buf, dtype=torch.uint8).fill_(1)
    seconds = time.perf_counter() - t0
    buf.close()
    return seconds


def views(state: dict[str, Any]) -> list[memoryview]:
    return [memoryview(t.contiguous().view(torch.uint8).numpy()) for t in state.values()]


def raw_write(state: dict[str, Any], path: Path) -> float:
    parts = views(state)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(0, len(parts), 16):
            group = parts[i : i + 16]
            want = sum(v.nbytes for v in group)
            if os.writev(fd, group) != want:
                raise SystemExit("short writev")
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def raw_direct_write(state: dict[str, Any], path: Path) -> float:
    parts = views(state)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        writer = DirectWriter(fd)
        try:
            for v in parts:
                writer.write(v)
        finally:
            writer.close()
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def raw_read(path: Path, direct: bool, expect: bytes, **reader: Any) -> float:
    t0 = time.perf_counter()
    if direct:
        buf, size, _ = read_file_into(path, direct=True, **reader)
    else:
        size = path.stat().st_size
        buf = mmap.mmap(-1, size)
        view = memoryview(buf)
        with open(path, "rb", buffering=0) as handle:
            got = 0
            while got < size:
                n = handle.readinto(view[got : got + 64 * 1024 * 1024])
                if not n:
                    break
                got += n
        view.release()
    seconds = time.perf_counter() - t0
    import hashlib

    if hashlib.sha256(memoryview(buf)[:size]).digest() != expect:
        raise SystemExit(f"raw read of {path} returned different bytes")
    buf.close()
    return seconds


def dcp_write(state: dict[str, Any], path: Path, threads: int) -> float:
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(path), sync_files=True, thread_count=threads),
             no_dist=True)
    return time.perf_counter() - t0


def dcp_read(state: dict[str, Any], path: Path) -> float:
    import torch.distributed.checkpoint as dcp

    into = {k: torch.empty_like(v) for k, v in state.items()}  # the model's parameters exist before a restore
    t0 = time.perf_counter()
    dcp.load(into, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
    seconds = time.perf_counter() - t0
    if not all(torch.equal(into[k], state[k]) for k in state):
        raise SystemExit("dcp load returned different data")
    return seconds


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "range": [round(min(values), 3), round(max(values), 3)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/var/lib/gpuclust-lab")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--kinds", default=",".join(ALL_KINDS), help="comma-separated, from: " + ",".join(ALL_KINDS))
    ap.add_argument("--thp", action="store_true", help="run with THP_MEM_ALLOC_ENABLE=1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    if args.thp and os.environ.get("THP_MEM_ALLOC_ENABLE") != "1":
        argv = [a for a in sys.argv if a != "--thp"]
        os.execve(sys.executable, [sys.executable, *argv], {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"})
    names = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(names) - set(ALL_KINDS))
    if unknown or "dd" not in names:
        raise SystemExit(f"--kinds: unknown {unknown}" if unknown else "--kinds must include dd (the ratios' base)")
    load_before = os.getloadavg()
    mib = args.size_mib
    directory = Path(args.dir) / f"accept-bench-{os.getpid()}"
    directory.mkdir(parents=True)
    source = Path("/dev/shm") / f"accept-bench-{os.getpid()}.bin"
    state = make_state_dict(torch, mib * 1024 * 1024, seed=1)
    digest = state_digest(torch, state)
    import hashlib

    raw_digest = hashlib.sha256(b"".join(bytes(v) for v in views(state))).digest()

    def harness_read(path: Path, direct: bool, **options: Any) -> float:
        loaded, seconds = restore_checkpoint(torch, path, direct=direct, **options)
        if state_digest(torch, loaded) != digest:
            raise SystemExit(f"harness restore of {path} returned different data")
        del loaded
        return seconds

    kinds: dict[str, tuple[Callable[[Path], float], Callable[[Path], float]]] = {
        "dd-zero": (lambda p: timed(lambda: dd("if=/dev/zero", f"of={p}", "bs=1M", f"count={mib}", "conv=fsync")),
                    lambda p: dd_read(p, "bs=1M")),
        "dd": (lambda p: timed(lambda: dd(f"if={source}", f"of={p}", "bs=1M", "conv=fsync")),
               lambda p: dd_read(p, "bs=1M")),
        "dd-again": (lambda p: timed(lambda: dd(f"if={source}", f"of={p}", "bs=1M", "conv=fsync")),
                     lambda p: dd_read(p, "bs=1M")),
        "dd-16M": (lambda p: timed(lambda: dd(f"if={source}", f"of={p}", "bs=16M", "conv=fsync")),
                   lambda p: dd_read(p, "bs=16M")),
        "dd-direct": (lambda p: timed(lambda: dd(f"if={source}", f"of={p}", "bs=16M", "oflag=direct", "conv=fsync")),
                      lambda p: dd_read(p, "bs=16M", "iflag=direct")),
        "harness": (lambda p: save_checkpoint(torch, state, p), lambda p: harness_read(p, True)),
        "harness-prev": (lambda p: save_checkpoint(torch, state, p),
                         lambda p: harness_read(p, True, overlap=False, **PREV_READER)),
        "harness-falloc": (lambda p: save_checkpoint(torch, state, p, preallocate=True), lambda p: harness_read(p, True)),
        "harness-buffered": (lambda p: save_checkpoint(torch, state, p, direct=False),
                             lambda p: harness_read(p, False)),
        "raw": (lambda p: raw_write(state, p), lambda p: raw_read(p, False, raw_digest)),
        "raw-direct": (lambda p: raw_direct_write(state, p), lambda p: raw_read(p, True, raw_digest)),
        "raw-4x16": (lambda p: raw_direct_write(state, p), lambda p: raw_read(p, True, raw_digest, **PREV_READER)),
        "raw-8x16-nopf": (lambda p: raw_direct_write(state, p),
                          lambda p: raw_read(p, True, raw_digest, threads=8, prefault=False)),
        "raw-4x64": (lambda p: raw_direct_write(state, p),
                     lambda p: raw_read(p, True, raw_digest, threads=4, chunk=64 * 1024 * 1024)),
        "raw-16x16": (lambda p: raw_direct_write(state, p), lambda p: raw_read(p, True, raw_digest, threads=16)),
        "raw-nohuge": (lambda p: raw_direct_write(state, p), lambda p: raw_read(p, True, raw_digest, huge=False)),
        "dcp": (lambda p: dcp_write(state, p, 1), lambda p: dcp_read(state, p)),
        "dcp-t4": (lambda p: dcp_write(state, p, 4), lambda p: dcp_read(state, p)),
    }
    kinds = {k: v for k, v in kinds.items() if k in names}
    mbps: dict[str, dict[str, list[float]]] = {k: {"write": [], "read": []} for k in kinds}
    touch: list[float] = []
    load: list[float] = []
    dropped = False
    try:
        with open(source, "wb") as handle:
            handle.write(b"".join(bytes(v) for v in views(state)))  # dd's input: the same bytes as the tensors
        for r in range(args.rounds + 1):
            order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
            for kind in order:
                write, read = kinds[kind]
                path = directory / kind
                w = write(path)
                nbytes = size_of(path)
                dropped = drop_all(path)
                rd = read(path)
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                if r:
                    mbps[kind]["write"].append(nbytes / 1e6 / w)
                    mbps[kind]["read"].append(nbytes / 1e6 / rd)
            print(f"round {r}: " + " ".join(f"{k} {mbps[k]['write'][-1]:.0f}/{mbps[k]['read'][-1]:.0f}" for k in kinds)
                  if r else "round 0 (warm-up) done", file=sys.stderr, flush=True)
            t = touch_seconds(mib * 1024 * 1024)
            if r:
                touch.append(mib * 1024 * 1024 / 1e6 / t)
                load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        source.unlink(missing_ok=True)
    load_after = os.getloadavg()
    out: dict[str, Any] = {
        "size_mib": mib, "dir": args.dir, "rounds": args.rounds, "drop_caches": dropped,
        "thp": os.environ.get("THP_MEM_ALLOC_ENABLE") == "1", "loadavg_before": load_before,
        "loadavg_after": load_after, "loadavg_1min_per_round": load,
        "touch_fresh_memory_mbps": [round(x) for x in touch], "touch_median_mbps": round(statistics.median(touch)),
        "kinds": {},
    }
    for kind, v in mbps.items():
        row: dict[str, Any] = {}
        for op in ("write", "read"):
            row[op + "_mbps"] = [round(x) for x in v[op]]
            row[op + "_median_mbps"] = round(statistics.median(v[op]))
            row[op + "_range_mbps"] = [round(min(v[op])), round(max(v[op]))]
            for base in ("dd", "dd-zero"):
                if base in mbps:
                    ratios = [a / b for a, b in zip(v[op], mbps[base][op], strict=True)]
                    row[f"{op}_ratio_to_{base}"] = summary(ratios)
        out["kinds"][kind] = row
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{mib} MiB in {args.dir}, {args.rounds} rounds, drop_caches={dropped}, THP={out['thp']}, "
          f"load avg before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"first touch of fresh memory: {out['touch_median_mbps']} MB/s median, rounds {out['touch_fresh_memory_mbps']}")
    for kind, row in out["kinds"].items():
        print(f"{kind:<17} write {row['write_median_mbps']:5} MB/s {row['write_range_mbps']}  x dd "
              f"{row['write_ratio_to_dd']['median']:.2f} {row['write_ratio_to_dd']['range']}   read "
              f"{row['read_median_mbps']:5} MB/s {row['read_range_mbps']}  x dd {row['read_ratio_to_dd']['median']:.2f} "
              f"{row['read_ratio_to_dd']['range']}")
        print(f"{'':<17} rounds write {row['write_mbps']} read {row['read_mbps']}")


if __name__ == "__main__":
    main()
