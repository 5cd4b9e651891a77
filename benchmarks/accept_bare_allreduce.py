"""A bare torch.distributed all_reduce loop: the reference the harness is compared with (no gpuclust code).

Run under srun with MASTER_ADDR/MASTER_PORT set; prints one JSON line per size from rank 0:
{"size": bytes, "time_us": mean per-iteration time over ranks, "busbw_gbps": nccl-tests' busbw}.
A 4th argument `--check` runs the harness's correctness step first at each size (gpuclust's own pattern fill,
one all_reduce, element check, zero), so its effect on the timed loop can be measured in isolation.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")]
    iters, warmup = int(sys.argv[2]), int(sys.argv[3])
    check = sys.argv[4:5] == ["--check"]
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=rank, world_size=world)
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32)
        if check:
            from gpuclust.accept.allreduce import count_wrong, fill_pattern

            fill_pattern(torch, buf, rank)
            dist.all_reduce(buf)
            assert count_wrong(torch, buf, world) == 0
            buf.zero_()
        for _ in range(warmup):
            dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sec = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(sec)
        mean = float(sec) / world
        if rank == 0:
            print(json.dumps({"size": size, "time_us": mean * 1e6,
                              "busbw_gbps": size / 1e9 / mean * 2 * (world - 1) / world}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
