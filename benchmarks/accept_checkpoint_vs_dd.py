"""Checkpoint write MB/s of the acceptance harness (gpuclust.accept.storage.save_checkpoint: torch.save +
fsync) against `dd if=/dev/zero bs=1M count=N conv=fsync` of the same size in the same directory.

    .venv/bin/python benchmarks/accept_checkpoint_vs_dd.py [--dir DIR] [--size-mib 256] [--runs 6]

Runs alternate (harness, dd, harness, dd, ...); the first pair is discarded (cold caches) and medians are
reported. MB/s = 1e6 bytes/s. Target: harness >= 0.8 x dd.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import torch

from gpuclust.accept.storage import make_state_dict, save_checkpoint


def dd_write(path: Path, mib: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "conv=fsync"], check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/var/lib/gpuclust-lab")
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args()
    directory = Path(args.dir) / f"accept-bench-{os.getpid()}"
    directory.mkdir(parents=True)
    state = make_state_dict(torch, args.size_mib * 1024 * 1024, seed=1)
    harness, dd = [], []
    try:
        for _ in range(args.runs):
            path = directory / "ckpt.pt"
            seconds = save_checkpoint(torch, state, path)
            harness.append(path.stat().st_size / 1e6 / seconds)
            path.unlink()
            ddpath = directory / "dd.bin"
            seconds = dd_write(ddpath, args.size_mib)
            dd.append(ddpath.stat().st_size / 1e6 / seconds)
            ddpath.unlink()
    finally:
        for p in directory.iterdir():
            p.unlink()
        directory.rmdir()
    h, d = statistics.median(harness[1:]), statistics.median(dd[1:])
    print(json.dumps({"size_mib": args.size_mib, "dir": args.dir, "runs": args.runs,
                      "harness_mbps": [round(x, 1) for x in harness], "dd_mbps": [round(x, 1) for x in dd],
                      "harness_median_mbps": round(h, 1), "dd_median_mbps": round(d, 1), "ratio": round(h / d, 3)},
                     indent=1))


if __name__ == "__main__":
    main()
