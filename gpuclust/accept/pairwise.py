"""`python -m gpuclust.accept.pairwise plan|run|collect`: find a slow node or link from node pairs.

The template (sbatch_templates/pairwise.sbatch) asks `plan` for rounds of disjoint node pairs (every pair once,
circle method), runs each round's pairs as concurrent `srun -N2 -n2 -w a,b` steps that call `run`, and ends
with `collect`, which writes `<results_dir>/pairwise-<job>.jsonl` and names outliers: each node's score is the
median busbw over the pairs that share it, judged by median/MAD against the other nodes (gpuclust.accept.stats).

Each pair does one correctness all_reduce, one timed warm-up, then as many timed iterations (up to
ACCEPT_PAIR_ITERS) as fit in ACCEPT_PAIR_BUDGET seconds, so a throttled node costs seconds, not minutes.
Each iteration is timed alone; the pair's time is the median iteration (mean of its two ranks).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from gpuclust.accept import launch, stats
from gpuclust.accept import results as R
from gpuclust.accept.allreduce import count_wrong, fill_pattern, gather_ranks
from gpuclust.accept.params import read_params
from gpuclust.config.values import parse_abs_path, parse_slurm_name
from gpuclust.errors import InputError, UnsafeValueError
from gpuclust.slurm import hostlist

PARAM_NAMES = ["ACCEPT_BACKEND", "ACCEPT_PAIR_SIZE", "ACCEPT_PAIR_ITERS", "ACCEPT_PAIR_BUDGET",
               "ACCEPT_GPU_DEVICE_GLOB"]
# A pair or node must be at least this much slower than the median to be named (on top of the MAD test):
# a real fault (a 50mbit link, a sick NIC) costs far more than 2x, host noise costs less.
PAIR_MIN_DROP = 0.5
_PART = re.compile(r"^pair-(.+)--(.+)\.jsonl$")


def _nodes(text: str) -> list[str]:
    nodes = hostlist.expand(text)
    for node in nodes:
        try:
            parse_slurm_name(node)
        except ValueError as exc:
            raise UnsafeValueError(f"node name: {exc}") from None
    return nodes


def plan(nodelist: str) -> list[list[tuple[str, str]]]:
    nodes = _nodes(nodelist)
    if len(nodes) < 2:
        raise InputError(f"pairwise needs at least 2 nodes, got {nodes}")
    return stats.round_robin_pairs(nodes)


def part_name(a: str, b: str) -> str:
    return f"pair-{a}--{b}.jsonl"


def iterations_for_budget(warm_seconds: float, budget: float, max_iters: int) -> int:
    """As many timed iterations as fit in the budget after one warm-up took warm_seconds (>= 1)."""
    if budget <= 0 or warm_seconds <= 0:
        return max_iters
    return max(1, min(max_iters, int(budget / warm_seconds)))


def run_pair(parts_dir: str) -> int:
    params = read_params(PARAM_NAMES)
    task = launch.task_env()
    if task.world_size != 2:
        raise InputError(f"a pair step must have 2 tasks, this one has {task.world_size}")
    torch = launch.import_torch()
    dist = torch.distributed
    backend = launch.choose_backend(params["ACCEPT_BACKEND"], bool(torch.cuda.is_available()))
    device = launch.pick_device(torch, backend, task.local_rank)
    launch.init_distributed(torch, task, backend, timeout_s=max(120.0, 20 * float(params["ACCEPT_PAIR_BUDGET"])))
    try:
        count = stats.element_count(params["ACCEPT_PAIR_SIZE"], 4)
        buf = torch.empty(count, dtype=torch.float32, device=device)
        fill_pattern(torch, buf, task.rank)
        dist.all_reduce(buf)
        wrong = count_wrong(torch, buf, 2)
        buf.zero_()
        timer = launch.make_timer(torch, device, barrier=dist.barrier)
        timer.start()
        dist.all_reduce(buf)
        warm = timer.stop()
        n_iters = torch.tensor([iterations_for_budget(warm, params["ACCEPT_PAIR_BUDGET"], params["ACCEPT_PAIR_ITERS"])],
                               dtype=torch.int64, device=device)
        dist.broadcast(n_iters, src=0)  # both ranks must run the same number of collectives
        iters = int(n_iters.item())
        dist.barrier()
        per_iter = []
        for _ in range(iters):
            # each iteration timed alone and the median kept: one scheduler hiccup on a busy host must not
            # make a healthy pair look slow (a throttled pair is slow on every iteration)
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            if device.type == "cuda":
                torch.cuda.synchronize()
            per_iter.append(time.perf_counter() - t0)
        seconds = stats.median(per_iter)
        del buf
        mine = torch.tensor([seconds, float(wrong)], dtype=torch.float64, device=device)
        both = [torch.empty_like(mine) for _ in range(2)]
        dist.all_gather(both, mine)
        times = [float(t[0]) for t in both]
        total_wrong = int(sum(float(t[1]) for t in both))
        rank = launch.capture_rank(torch, task, "pairwise", backend, device)
        from dataclasses import replace

        ranks = gather_ranks(torch, replace(rank, wrong=wrong), 2)
    finally:
        launch.shutdown_distributed(torch)
    if task.rank == 0:
        a, b = ranks[0].node, ranks[1].node
        mean = sum(times) / 2
        size = count * 4
        pair = R.PairRecord(
            job_id=task.job_id, kind="pairwise", nodes=(a, b), size=size, iters=iters, time_us=mean * 1e6,
            algbw_gbps=stats.algbw_gbps(size, mean), busbw_gbps=stats.busbw_gbps(size, mean, 2), wrong=total_wrong,
            status="ok", step_id=task.step_id,
            extra={"budget_limited": iters < params["ACCEPT_PAIR_ITERS"], "time_us_max": max(times) * 1e6,
                   "backend": backend},
        )
        directory = Path(parts_dir)
        directory.mkdir(parents=True, exist_ok=True)
        lines = [R.record_to_dict(pair), *(R.record_to_dict(r) for r in ranks)]
        tmp = directory / f".{part_name(a, b)}.tmp"
        tmp.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        os.replace(tmp, directory / part_name(a, b))
        print(f"{a} {b} busbw {pair.busbw_gbps:.3f} GB/s ({iters} iters, {mean * 1e3:.1f} ms each, "
              f"{total_wrong} wrong)")
    return 0 if wrong == 0 else 1


def read_parts(parts_dir: str, job_id: str) -> tuple[list[R.PairRecord], list[R.RankRecord], list[str]]:
    """Pair and rank records from the part files; problems as strings (never silently dropped)."""
    pairs: list[R.PairRecord] = []
    ranks: list[R.RankRecord] = []
    problems: list[str] = []
    directory = Path(parts_dir)
    if not directory.is_dir():
        return pairs, ranks, [f"{parts_dir}: no pair results at all"]
    for path in sorted(directory.glob("pair-*.jsonl")):
        text = path.read_text(encoding="utf-8")
        header = R.record_to_dict(_placeholder_job(job_id))
        result, found = R.parse_result_text(json.dumps(header) + "\n" + text, str(path))
        problems.extend(f"{p.file}:{p.line - 1 if p.line else ''}: {p.message}" for p in found)
        if result is not None:
            pairs.extend(result.pairs)
            ranks.extend(result.ranks)
    return pairs, ranks, problems


def _placeholder_job(job_id: str) -> R.JobRecord:
    now = R.utcnow()
    return R.JobRecord(job_id=job_id, kind="pairwise", cluster=None, partition=None, nodes=(), started=now,
                       finished=now, passed=False)


def collect(parts_dir: str, nodelist: str, started_epoch: float | None = None, keep_parts: bool = False) -> int:
    params = read_params(PARAM_NAMES)
    env = os.environ
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise InputError("collect runs inside the pairwise job (SLURM_JOB_ID unset)")
    nodes = _nodes(nodelist)
    pairs, ranks, problems = read_parts(parts_dir, job_id)
    have = {tuple(sorted(p.nodes)) for p in pairs}
    size = params["ACCEPT_PAIR_SIZE"]
    for round_pairs in stats.round_robin_pairs(nodes):
        for a, b in round_pairs:
            if tuple(sorted((a, b))) not in have:
                pairs.append(R.PairRecord(job_id=job_id, kind="pairwise", nodes=(a, b), size=size, iters=0,
                                          time_us=None, algbw_gbps=None, busbw_gbps=None, wrong=0, status="failed"))
    analysis = stats.analyse_pairs((stats.PairFigure(p.nodes, p.busbw_gbps if p.status == "ok" else None)
                                    for p in pairs), min_drop=PAIR_MIN_DROP)
    reasons = list(problems)
    for node, out in sorted(analysis.node_outliers.items()):
        reasons.append(f"{node}: median busbw {out.value:.3f} GB/s over its pairs, {out.drop:.0%} below the median "
                       f"node {out.median:.3f} (robust z {out.z:.1f})")
    for (a, b), out in sorted(analysis.link_outliers.items()):
        reasons.append(f"link {a}-{b}: busbw {out.value:.3f} GB/s, {out.drop:.0%} below the median pair {out.median:.3f}")
    for p in pairs:
        if p.status != "ok":
            reasons.append(f"pair {p.nodes[0]}-{p.nodes[1]}: {p.status}")
        elif p.wrong:
            reasons.append(f"pair {p.nodes[0]}-{p.nodes[1]}: {p.wrong} wrong elements")
    notes = [] if analysis.enough_nodes else [f"only {len(nodes)} nodes: pairwise needs 3 or more to name a node"]
    failed_nodes = tuple(sorted(analysis.node_outliers))
    passed = not analysis.node_outliers and not analysis.link_outliers and not problems and all(
        p.status == "ok" and not p.wrong for p in pairs)
    job_gres, node_gres, warnings = launch.slurm_declared(job_id, tuple(nodes))
    now = R.utcnow()
    from datetime import datetime, timezone

    started = datetime.fromtimestamp(started_epoch, timezone.utc) if started_epoch else now
    job = R.JobRecord(
        job_id=job_id, kind="pairwise", cluster=env.get("SLURM_CLUSTER_NAME") or None,
        partition=read_params(["ACCEPT_PARTITION"])["ACCEPT_PARTITION"] or env.get("SLURM_JOB_PARTITION") or None,
        nodes=tuple(nodes), started=started, finished=now, passed=passed, failed_nodes=failed_nodes,
        reasons=tuple(reasons), world_size=2, backend=_backend(pairs),
        params=dict(params), declared_gres=job_gres, node_gres=node_gres,
        extra={"node_scores": analysis.node_scores, **({"warnings": warnings} if warnings else {}),
               **({"notes": notes} if notes else {})},
    )
    from dataclasses import replace

    ranks = [replace(r, declared_gres=job_gres.get(r.node, r.declared_gres)) for r in ranks]
    path = R.write_result(launch.results_dir(), R.JobResult("", job, tuple(ranks), (), tuple(pairs)))
    for p in sorted(pairs, key=lambda p: p.nodes):
        bw = f"{p.busbw_gbps:.3f}" if p.busbw_gbps is not None else "-"
        print(f"{p.nodes[0]:>12} {p.nodes[1]:>12} {bw:>8} GB/s  {p.status}")
    print("outlier nodes: " + (", ".join(failed_nodes) or "none"))
    for note in notes:
        print(f"note: {note}")
    print(f"# wrote {path}")
    if not keep_parts:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return 0 if passed else 1


def _backend(pairs: list[R.PairRecord]) -> str | None:
    for p in pairs:
        value: Any = p.extra.get("backend")
        if isinstance(value, str):
            return value
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuclust.accept.pairwise", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_plan = sub.add_parser("plan", help="print rounds of disjoint pairs, one round per line ('a,b c,d')")
    p_plan.add_argument("nodelist")
    p_run = sub.add_parser("run", help="run one pair (inside a 2-task srun step)")
    p_run.add_argument("--parts", required=True)
    p_col = sub.add_parser("collect", help="merge the pairs into the job's result file and name outliers")
    p_col.add_argument("--parts", required=True)
    p_col.add_argument("--nodes", required=True)
    p_col.add_argument("--started", type=float, default=None, help="job start, epoch seconds")
    p_col.add_argument("--keep-parts", action="store_true")
    args = parser.parse_args(argv)
    if args.cmd == "plan":
        for round_pairs in plan(args.nodelist):
            print(" ".join(f"{a},{b}" for a, b in round_pairs))
        return 0
    parts = parse_abs_path(args.parts)
    if not re.fullmatch(r"/[A-Za-z0-9._/+-]*", parts):
        raise UnsafeValueError(f"--parts {parts!r} is not a safe path")
    if args.cmd == "run":
        return run_pair(parts)
    return collect(parts, args.nodes, args.started, args.keep_parts)


def entry() -> None:
    launch.run_program(main, "gpuclust.accept.pairwise", also=(ValueError,))


if __name__ == "__main__":
    entry()
