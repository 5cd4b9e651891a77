"""Checkpoint write and cold restore of the acceptance harness against dd on the same filesystem (issue 18).

    .venv/bin/python benchmarks/accept_checkpoint_vs_dd.py [--dir DIR] [--size-mib 1024] [--rounds 5] [--thp] [--json]

Each round does, in alternating order (ABBA), one write and one cold read of each of:
  dd         write: dd if=/dev/zero bs=1M count=N conv=fsync; read: dd of=/dev/null bs=1M
  harness    gpuclust.accept.storage.save_checkpoint (torch.save to the path, CRC32 off, one fsync) and
             restore_checkpoint (torch.load, what the storage job runs)
  torch-default  torch.save to a Python file object with CRC32 (the harness before issue 18) + flush + fsync,
             and torch.load of that file
  dcp        torch.distributed.checkpoint.save/load, one process, no process group (FileSystemWriter fsyncs its files);
             load into tensors allocated before the timer, as a model's parameters are
Before every read the file's pages are dropped (fsync, then POSIX_FADV_DONTNEED): a cold sequential read on this
node (a host that caches a virtual disk is out of reach). The state dict is the harness's: 4 MiB float32 layers.
--thp re-runs the benchmark with THP_MEM_ALLOC_ENABLE=1 (torch's CPU allocator asks for huge pages), which cuts
the page-fault cost of the fresh memory torch.load reads into.
Reported: MB/s (1e6 bytes/s) per round, medians, and the median of the per-round ratios to dd of the same round.
"""

from __future__ import annotations

import argparse
import json
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

from gpuclust.accept.storage import drop_cached, make_state_dict, restore_checkpoint, save_checkpoint


def dd_write(path: Path, mib: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fsync"], check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def dd_read(path: Path) -> float:
    drop_cached(path)
    t0 = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], check=True, capture_output=True)
    return time.perf_counter() - t0


def default_write(state: dict[str, Any], path: Path) -> float:
    t0 = time.perf_counter()
    with open(path, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    return time.perf_counter() - t0


def dcp_write(state: dict[str, Any], path: Path) -> float:
    import torch.distributed.checkpoint as dcp

    t0 = time.perf_counter()
    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(path), sync_files=True), no_dist=True)
    return time.perf_counter() - t0


def dcp_read(state: dict[str, Any], path: Path) -> float:
    import torch.distributed.checkpoint as dcp

    for f in path.iterdir():
        drop_cached(f)
    into = {k: torch.empty_like(v) for k, v in state.items()}  # the model's parameters exist before a restore
    t0 = time.perf_counter()
    dcp.load(into, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
    seconds = time.perf_counter() - t0
    if not all(torch.equal(into[k], state[k]) for k in ("layers.0.weight", f"layers.{len(state) - 1}.weight")):
        raise SystemExit("dcp load returned different data")
    return seconds


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default="/var/lib/gpuclust-lab")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--thp", action="store_true", help="run with THP_MEM_ALLOC_ENABLE=1")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    if args.thp and os.environ.get("THP_MEM_ALLOC_ENABLE") != "1":
        argv = [a for a in sys.argv if a != "--thp"]
        os.execve(sys.executable, [sys.executable, *argv], {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"})
    directory = Path(args.dir) / f"accept-bench-{os.getpid()}"
    directory.mkdir(parents=True)
    state = make_state_dict(torch, args.size_mib * 1024 * 1024, seed=1)

    def harness_read(path: Path) -> float:
        loaded, seconds = restore_checkpoint(torch, path)
        del loaded
        return seconds

    def default_read(path: Path) -> float:
        drop_cached(path)
        t0 = time.perf_counter()
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
        seconds = time.perf_counter() - t0
        del loaded
        return seconds

    kinds: dict[str, tuple[Callable[[Path], float], Callable[[Path], float]]] = {
        "dd": (lambda p: dd_write(p, args.size_mib), dd_read),
        "harness": (lambda p: save_checkpoint(torch, state, p), harness_read),
        "torch-default": (lambda p: default_write(state, p), default_read),
        "dcp": (lambda p: dcp_write(state, p), lambda p: dcp_read(state, p)),
    }
    mbps: dict[str, dict[str, list[float]]] = {k: {"write": [], "read": []} for k in kinds}
    load: list[float] = []
    try:
        for r in range(args.rounds + 1):  # round 0 warms up and is discarded
            order = list(kinds) if r % 2 == 0 else list(kinds)[::-1]
            for kind in order:
                write, read = kinds[kind]
                path = directory / kind
                w = write(path)
                nbytes = size_of(path)
                rd = read(path)
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
                if r:
                    mbps[kind]["write"].append(nbytes / 1e6 / w)
                    mbps[kind]["read"].append(nbytes / 1e6 / rd)
            load.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    out: dict[str, Any] = {"size_mib": args.size_mib, "dir": args.dir, "rounds": args.rounds,
                           "thp": os.environ.get("THP_MEM_ALLOC_ENABLE") == "1", "loadavg_1min": load[1:], "kinds": {}}
    for kind, v in mbps.items():
        row: dict[str, Any] = {}
        for op in ("write", "read"):
            row[op + "_mbps"] = [round(x, 1) for x in v[op]]
            row[op + "_median_mbps"] = round(statistics.median(v[op]), 1)
            ratios = [a / b for a, b in zip(v[op], mbps["dd"][op], strict=True)]
            row[op + "_ratio_to_dd_median"] = round(statistics.median(ratios), 3)
            row[op + "_ratio_to_dd_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
        out["kinds"][kind] = row
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{args.size_mib} MiB in {args.dir}, {args.rounds} rounds, THP={out['thp']}, load avg {min(load):.1f}-{max(load):.1f}")
    for kind, row in out["kinds"].items():
        print(f"{kind:<14} write median {row['write_median_mbps']:7.1f} MB/s ratio {row['write_ratio_to_dd_median']:.3f} "
              f"{row['write_ratio_to_dd_range']}   read median {row['read_median_mbps']:7.1f} MB/s ratio "
              f"{row['read_ratio_to_dd_median']:.3f} {row['read_ratio_to_dd_range']}")


if __name__ == "__main__":
    main()
