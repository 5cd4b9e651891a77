"""`python -m gpuclust.accept.allreduce`: the all_reduce size sweep, one rank per task, under srun.

Per size: one correctness all_reduce on a rank-dependent input whose sum is known exactly, `warmup` untimed
iterations, then `iters` timed ones (CUDA events on GPU; a barrier then the monotonic clock on CPU).
time = mean per-iteration time averaged over ranks (nccl-tests' default), algbw = bytes/time,
busbw = algbw * 2(n-1)/n. Rank 0 writes `<results_dir>/allreduce-<job>.jsonl`. Exit 0 when every element
was right, 1 otherwise; parameters come from ACCEPT_* variables (see gpuclust.accept.params).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuclust.accept import container, launch, stats
from gpuclust.accept import results as R
from gpuclust.accept.params import read_params

PERIOD = 8
PARAM_NAMES = [
    "ACCEPT_BACKEND", "ACCEPT_MIN_SIZE", "ACCEPT_MAX_SIZE", "ACCEPT_STEP_FACTOR", "ACCEPT_ITERS", "ACCEPT_WARMUP",
    "ACCEPT_DTYPE", "ACCEPT_GPU_DEVICE_GLOB",
]


@dataclass(frozen=True)
class SizeResult:
    """One message size as this rank measured it: bytes, elements, seconds per timed iteration, wrong elements."""

    size: int
    count: int
    seconds_per_iter: float  # this rank
    wrong: int  # this rank


def torch_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32}[name]


def fill_pattern(torch: Any, buf: Any, rank: int, period: int = PERIOD) -> None:
    """buf[i] = (rank + 1) + (i % period), written without an index tensor as big as buf."""
    row = torch.arange(period, dtype=buf.dtype, device=buf.device) + (rank + 1)
    _write_periodic(buf, row, period)


def count_wrong(torch: Any, buf: Any, nranks: int, period: int = PERIOD) -> int:
    """Elements that differ from the exact all_reduce sum of fill_pattern's inputs (stats.expected_*)."""
    row = torch.tensor([stats.expected_allreduce_value(i, nranks, period) for i in range(period)],
                       dtype=buf.dtype, device=buf.device)
    full = (buf.numel() // period) * period
    wrong = 0
    if full:
        wrong += int((buf[:full].view(-1, period) != row).sum().item())
    if buf.numel() > full:
        wrong += int((buf[full:] != row[: buf.numel() - full]).sum().item())
    return wrong


def _write_periodic(buf: Any, row: Any, period: int) -> None:
    full = (buf.numel() // period) * period
    if full:
        buf[:full].view(-1, period).copy_(row.expand(full // period, period))
    if buf.numel() > full:
        buf[full:].copy_(row[: buf.numel() - full])


def run_size(torch: Any, device: Any, size: int, dtype_name: str, iters: int, warmup: int, rank: int,
             nranks: int) -> SizeResult:
    dist = torch.distributed
    dtype = torch_dtype(torch, dtype_name)
    elsize = torch.empty((), dtype=dtype).element_size()
    count = stats.element_count(size, elsize)
    buf = torch.empty(count, dtype=dtype, device=device)
    fill_pattern(torch, buf, rank)
    dist.all_reduce(buf)
    wrong = count_wrong(torch, buf, nranks)
    # Zeros keep the in-place sums from growing n-fold per iteration (overflow to inf/wrap in long runs);
    # the bytes moved are the same.
    buf.zero_()
    for _ in range(warmup):
        dist.all_reduce(buf)
    timer = launch.make_timer(torch, device, barrier=dist.barrier if device.type == "cpu" else None)
    if device.type == "cuda":
        torch.cuda.synchronize()
        dist.barrier()
    timer.start()
    for _ in range(iters):
        dist.all_reduce(buf)
    seconds = timer.stop() / iters
    del buf
    return SizeResult(count * elsize, count, seconds, wrong)


def gather_figures(torch: Any, device: Any, local: list[SizeResult], nranks: int, dtype: str, iters: int,
                   warmup: int, job_id: str) -> list[R.SweepRecord]:
    """Every rank's (time, wrong) per size -> sweep records (same on every rank)."""
    dist = torch.distributed
    mine = torch.tensor([[r.seconds_per_iter, float(r.wrong)] for r in local], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(nranks)]
    dist.all_gather(everyone, mine)
    table = torch.stack(everyone).cpu()  # ranks x sizes x 2
    records = []
    for i, r in enumerate(local):
        times = [float(t) for t in table[:, i, 0]]
        wrong = int(sum(float(w) for w in table[:, i, 1]))
        mean = sum(times) / len(times)
        records.append(figures(job_id, r.size, r.count, dtype, iters, warmup, mean, max(times), wrong, nranks))
    return records


def figures(job_id: str, size: int, count: int, dtype: str, iters: int, warmup: int, seconds: float,
            seconds_max: float, wrong: int, nranks: int, kind: str = "allreduce") -> R.SweepRecord:
    return R.SweepRecord(
        job_id=job_id, kind=kind, size=size, count=count, dtype=dtype, iters=iters, warmup=warmup,
        time_us=seconds * 1e6, time_us_max=seconds_max * 1e6, algbw_gbps=stats.algbw_gbps(size, seconds),
        busbw_gbps=stats.busbw_gbps(size, seconds, nranks), wrong=wrong, world_size=nranks,
    )


def gather_ranks(torch: Any, record: R.RankRecord, nranks: int) -> list[R.RankRecord]:
    everyone: list[Any] = [None] * nranks
    torch.distributed.all_gather_object(everyone, record)
    return sorted(everyone, key=lambda r: r.rank)


def attach_declared(ranks: list[R.RankRecord], job_gres: dict[str, str]) -> list[R.RankRecord]:
    return [replace(r, declared_gres=job_gres.get(r.node, r.declared_gres)) for r in ranks]


def main(argv: list[str] | None = None) -> int:
    params = read_params(PARAM_NAMES)
    task = launch.task_env()
    out_dir = launch.results_dir()
    sizes = stats.sweep_sizes(params["ACCEPT_MIN_SIZE"], params["ACCEPT_MAX_SIZE"], params["ACCEPT_STEP_FACTOR"])
    torch = launch.import_torch()
    backend = launch.choose_backend(params["ACCEPT_BACKEND"], bool(torch.cuda.is_available()))
    device = launch.pick_device(torch, backend, task.local_rank)
    started = R.utcnow()
    launch.init_distributed(torch, task, backend)
    try:
        elsize = torch.empty((), dtype=torch_dtype(torch, params["ACCEPT_DTYPE"])).element_size()
        sizes = [s for s in sizes if s >= elsize]
        local = [run_size(torch, device, s, params["ACCEPT_DTYPE"], params["ACCEPT_ITERS"], params["ACCEPT_WARMUP"],
                          task.rank, task.world_size) for s in sizes]
        sweep = gather_figures(torch, device, local, task.world_size, params["ACCEPT_DTYPE"], params["ACCEPT_ITERS"],
                               params["ACCEPT_WARMUP"], task.job_id)
        mine = launch.capture_rank(torch, task, "allreduce", backend, device)
        mine = replace(mine, wrong=sum(r.wrong for r in local))
        ranks = gather_ranks(torch, mine, task.world_size)
    finally:
        launch.shutdown_distributed(torch)
    total_wrong = sum(s.wrong for s in sweep)
    if task.rank == 0:
        nodes = tuple(dict.fromkeys(r.node for r in ranks))
        job_gres, node_gres, warnings = launch.slurm_declared(task.job_id, nodes)
        reasons = [f"{s.wrong} wrong elements at {s.size} bytes" for s in sweep if s.wrong]
        bad_nodes = tuple(dict.fromkeys(r.node for r in ranks if r.wrong))
        job = R.JobRecord(
            job_id=task.job_id, kind="allreduce", cluster=task.cluster, partition=task.partition, nodes=nodes,
            started=started, finished=R.utcnow(), passed=total_wrong == 0,
            failed_nodes=bad_nodes if len(bad_nodes) < len(nodes) else (), reasons=tuple(reasons),
            world_size=task.world_size, backend=backend, params=_jsonable(params), declared_gres=job_gres,
            node_gres=node_gres, extra=container.job_extra({"warnings": warnings} if warnings else {}),
        )
        path = R.write_result(out_dir, R.JobResult("", job, tuple(attach_declared(ranks, job_gres)), tuple(sweep)))
        print(format_sweep(sweep))
        print(f"# wrote {path}")
    return 0 if total_wrong == 0 else 1


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in params.items()}


def format_sweep(sweep: list[R.SweepRecord]) -> str:
    """nccl-tests-like table."""
    lines = [f"# {'size':>12} {'count':>12} {'type':>8} {'time(us)':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7}"]
    for s in sweep:
        lines.append(f"  {s.size:>12} {s.count:>12} {s.dtype:>8} {s.time_us:>11.1f} {s.algbw_gbps:>8.3f} "
                     f"{s.busbw_gbps:>8.3f} {s.wrong:>7}")
    return "\n".join(lines)


def entry() -> None:
    launch.run_program(main, "gpuclust.accept.allreduce")


if __name__ == "__main__":
    entry()
