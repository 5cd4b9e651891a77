"""`python -m gpuclust.accept.pairwise plan|run|suspects|collect`: find a slow node or link from node pairs.

The template (sbatch_templates/pairwise.sbatch) asks `plan` for rounds of disjoint node pairs (every pair once,
circle method) and runs each round's pairs as concurrent `srun -N2 -n2 -w a,b` steps that call `run`
(attempt 1). It then asks `suspects` which pairs are slow beyond the run's own noise and measures those again
(attempt 2, ACCEPT_PAIR_CONFIRM passes), and ends with `collect`, which writes
`<results_dir>/pairwise-<job>.jsonl` with every measurement of every pair and the verdict. Suspects and the
verdict come from one judgement, gpuclust.accept.verdict.judge, which `gpuclust accept report` uses too.

Each pair does one correctness all_reduce, one timed warm-up, then as many timed iterations (up to
ACCEPT_PAIR_ITERS) as fit in ACCEPT_PAIR_BUDGET seconds, so a throttled node costs seconds, not minutes.
Each iteration is timed alone (its busbw, ranks averaged, is a sample: the noise of the measurement); the
measurement's figure is the median iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuclust.accept import container, launch, stats, verdict
from gpuclust.accept import results as R
from gpuclust.accept.allreduce import count_wrong, fill_pattern, gather_ranks
from gpuclust.accept.params import read_params
from gpuclust.atomicfile import write_atomic
from gpuclust.config.values import parse_abs_path, parse_slurm_name
from gpuclust.errors import InputError, UnsafeValueError
from gpuclust.slurm import hostlist

PARAM_NAMES = ["ACCEPT_BACKEND", "ACCEPT_PAIR_SIZE", "ACCEPT_PAIR_ITERS", "ACCEPT_PAIR_BUDGET",
               "ACCEPT_PAIR_CONFIRM", "ACCEPT_GPU_DEVICE_GLOB"]
PAIR_MIN_DROP = verdict.PAIR_MIN_DROP  # kept name; the judgement's constants live in gpuclust.accept.verdict
_PART = re.compile(r"^pair-(.+)--(.+)\.([0-9]+)\.jsonl$")
_PLANNED = "attempt-{}.planned"
MAX_ATTEMPTS = 10


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


def part_name(a: str, b: str, attempt: int = 1) -> str:
    return f"pair-{a}--{b}.{attempt}.jsonl"


def iterations_for_budget(warm_seconds: float, budget: float, max_iters: int) -> int:
    """As many timed iterations as fit in the budget after one warm-up took warm_seconds (>= 1)."""
    if budget <= 0 or warm_seconds <= 0:
        return max_iters
    return max(1, min(max_iters, int(budget / warm_seconds)))


def run_pair(parts_dir: str, attempt: int = 1) -> int:
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
        mine = torch.tensor([seconds, float(wrong), *per_iter], dtype=torch.float64, device=device)
        both = [torch.empty_like(mine) for _ in range(2)]
        dist.all_gather(both, mine)
        times = [float(t[0]) for t in both]
        total_wrong = int(sum(float(t[1]) for t in both))
        iter_times = [(float(both[0][2 + i]) + float(both[1][2 + i])) / 2 for i in range(iters)]
        rank = launch.capture_rank(torch, task, "pairwise", backend, device)
        ranks = gather_ranks(torch, replace(rank, wrong=wrong), 2)
    finally:
        launch.shutdown_distributed(torch)
    if task.rank == 0:
        a, b = ranks[0].node, ranks[1].node
        pair = pair_measurement(task.job_id, (a, b), count * 4, times, iter_times, total_wrong, attempt,
                                step_id=task.step_id, backend=backend,
                                budget_limited=iters < params["ACCEPT_PAIR_ITERS"])
        lines = [R.record_to_dict(pair), *(R.record_to_dict(r) for r in ranks)]
        # concurrent pair steps write side by side: a unique temp name each, fsynced before the rename
        write_atomic(Path(parts_dir) / part_name(a, b, attempt),
                     "".join(json.dumps(line) + "\n" for line in lines), make_parents=True)
        mean = sum(times) / 2
        print(f"{a} {b} attempt {attempt}: busbw {pair.busbw_gbps:.3f} GB/s ({iters} iters, {mean * 1e3:.1f} ms "
              f"each, {total_wrong} wrong)")
    return 0 if wrong == 0 else 1


def pair_measurement(job_id: str, nodes: tuple[str, str], size: int, rank_times: list[float],
                     iter_times: list[float], wrong: int, attempt: int, *, step_id: str | None = None,
                     backend: str | None = None, budget_limited: bool = False) -> R.PairRecord:
    """One measurement of a pair as a record: figures from the ranks' median iteration times (averaged over
    the two ranks), and every iteration's busbw as a sample of the measurement's noise."""
    mean = sum(rank_times) / len(rank_times)
    busbw = stats.busbw_gbps(size, mean, 2)
    samples = tuple(stats.busbw_gbps(size, t, 2) for t in iter_times if t > 0)
    return R.PairRecord(
        job_id=job_id, kind="pairwise", nodes=nodes, size=size, iters=len(iter_times), time_us=mean * 1e6,
        algbw_gbps=stats.algbw_gbps(size, mean), busbw_gbps=busbw, wrong=wrong, status="ok", step_id=step_id,
        attempts=(R.PairAttempt(attempt, "ok", busbw, len(iter_times), mean * 1e6, samples),),
        extra={"budget_limited": budget_limited, "time_us_max": max(rank_times) * 1e6,
               **({"backend": backend} if backend else {})},
    )


def merge_attempts(job_id: str, measured: list[R.PairRecord], planned: dict[int, list[tuple[str, str]]],
                   size: int) -> list[R.PairRecord]:
    """One record per pair with all its attempts in order: a planned attempt without a result is a failed
    attempt. The record's own figures are its best attempt's (the judged figure)."""
    def key(pair: tuple[str, str]) -> tuple[str, str]:
        return (pair[0], pair[1]) if pair[0] <= pair[1] else (pair[1], pair[0])

    by_pair: dict[tuple[str, str], list[R.PairRecord]] = {}
    for rec in measured:
        by_pair.setdefault(key(rec.nodes), []).append(rec)
    wanted: dict[tuple[str, str], set[int]] = {}
    for attempt, pairs in planned.items():
        for pair in pairs:
            wanted.setdefault(key(pair), set()).add(attempt)
    out = []
    for pair in sorted(set(by_pair) | set(wanted)):
        recs = by_pair.get(pair, [])
        attempts = {a.attempt: a for rec in recs for a in rec.attempts}
        for attempt in wanted.get(pair, ()):
            attempts.setdefault(attempt, R.PairAttempt(attempt, "failed", None))
        ordered = tuple(attempts[k] for k in sorted(attempts))
        ok = [(rec, a) for rec in recs for a in rec.attempts if a.status == "ok"]
        if ok:
            best, _ = max(ok, key=lambda ra: ra[1].busbw_gbps or 0.0)
            extra = dict(best.extra)
            out.append(replace(best, nodes=pair, attempts=ordered, wrong=sum(r.wrong for r in recs), extra=extra))
        else:
            out.append(R.PairRecord(job_id=job_id, kind="pairwise", nodes=pair, size=size, iters=0, time_us=None,
                                    algbw_gbps=None, busbw_gbps=None, wrong=sum(r.wrong for r in recs),
                                    status="failed", attempts=ordered))
    return out


def read_parts(parts_dir: str, job_id: str) -> tuple[list[R.PairRecord], list[R.RankRecord], list[str]]:
    """Pair measurements and rank records from the part files (ranks of a pair's first readable attempt
    only); problems as strings (never silently dropped)."""
    pairs: list[R.PairRecord] = []
    ranks: list[R.RankRecord] = []
    problems: list[str] = []
    directory = Path(parts_dir)
    if not directory.is_dir():
        return pairs, ranks, [f"{parts_dir}: no pair results at all"]
    ranked: set[tuple[str, str]] = set()
    for path in sorted(directory.glob("pair-*.jsonl"), key=lambda p: (_attempt_of(p.name), p.name)):
        text = R.read_result_text(path)
        header = R.record_to_dict(_placeholder_job(job_id))
        result, found = R.parse_result_text(json.dumps(header) + "\n" + text, str(path))
        problems.extend(f"{p.file}:{p.line - 1 if p.line else ''}: {p.message}" for p in found)
        if result is not None:
            pairs.extend(result.pairs)
            for pair in result.pairs:
                if pair.nodes not in ranked:
                    ranked.add(pair.nodes)
                    ranks.extend(r for r in result.ranks if r.node in pair.nodes)
    return pairs, ranks, problems


def _attempt_of(name: str) -> int:
    match = _PART.match(name)
    return int(match.group(3)) if match else 0


def read_planned(parts_dir: str, nodes: list[str]) -> dict[int, list[tuple[str, str]]]:
    """Which pairs each attempt was meant to measure: attempt 1 is every pair; later ones were written by
    `suspects`."""
    planned = {1: [pair for round_pairs in stats.round_robin_pairs(nodes) for pair in round_pairs]}
    for attempt in range(2, MAX_ATTEMPTS + 1):
        path = Path(parts_dir) / _PLANNED.format(attempt)
        if not path.is_file():
            continue
        pairs = []
        for line in path.read_text(encoding="utf-8").split():
            a, _, b = line.partition(",")
            if a in nodes and b in nodes and a != b:
                pairs.append((a, b) if nodes.index(a) < nodes.index(b) else (b, a))
        planned[attempt] = pairs
    return planned


def gathered(parts_dir: str, nodelist: str, job_id: str) -> tuple[list[str], list[R.PairRecord],
                                                                   list[R.RankRecord], list[str]]:
    nodes = _nodes(nodelist)
    measured, ranks, problems = read_parts(parts_dir, job_id)
    pairs = merge_attempts(job_id, measured, read_planned(parts_dir, nodes),
                           read_params(["ACCEPT_PAIR_SIZE"])["ACCEPT_PAIR_SIZE"])
    return nodes, pairs, ranks, problems


def suspects(parts_dir: str, nodelist: str, attempt: int) -> int:
    """Print, as rounds of disjoint pairs, the suspect pairs (slow beyond the run's noise by the judgement,
    or failed) measured once so far; record them as the plan of attempt `attempt`. A later pass finds the
    suspects that only appeared once earlier suspects were measured again (the reference moved)."""
    if not 2 <= attempt <= MAX_ATTEMPTS:
        raise InputError(f"--attempt must be 2..{MAX_ATTEMPTS}, got {attempt}")
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise InputError("suspects runs inside the pairwise job (SLURM_JOB_ID unset)")
    _, pairs, _, _ = gathered(parts_dir, nodelist, job_id)
    judged = verdict.judge(pairs)
    tries = {p.nodes: len(p.attempts) for p in pairs}
    # a suspect measured once is measured again; one already measured twice has had its confirmation
    again = [pair for pair in judged.analysis.suspects if tries.get(pair, 0) < 2]
    again += [pair for pair in judged.failed if pair not in again and tries.get(pair, 0) < 2]
    write_atomic(Path(parts_dir) / _PLANNED.format(attempt), "".join(f"{a},{b}\n" for a, b in again),
                 make_parents=True)
    for round_pairs in stats.disjoint_rounds(again):
        print(" ".join(f"{a},{b}" for a, b in round_pairs))
    return 0


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
    nodes, pairs, ranks, problems = gathered(parts_dir, nodelist, job_id)
    judged = verdict.judge(pairs)
    reasons = list(problems) + judged.reasons()
    notes = judged.notes()
    failed_nodes = judged.nodes
    passed = judged.passed and not problems
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
        extra=container.job_extra({"node_scores": judged.analysis.node_scores, "noise_sigma": judged.analysis.noise_sigma,
               "slow_links": [list(pair) for pair in sorted(judged.analysis.link_outliers)],
               **({"warnings": warnings} if warnings else {}), "notes": notes}),
    )
    ranks = [replace(r, declared_gres=job_gres.get(r.node, r.declared_gres)) for r in ranks]
    path = R.write_result(launch.results_dir(), R.JobResult("", job, tuple(ranks), (), tuple(pairs)))
    for p in sorted(pairs, key=lambda p: p.nodes):
        tries = " ".join(f"{a.busbw_gbps:.3f}" if a.busbw_gbps is not None else a.status for a in p.attempts)
        print(f"{p.nodes[0]:>12} {p.nodes[1]:>12}  {tries:<24} GB/s  {p.status}")
    print("outlier nodes: " + (", ".join(failed_nodes) or "none"))
    for reason in judged.reasons():
        print(f"reason: {reason}")
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
    p_run.add_argument("--attempt", type=int, default=1, help="which measurement of the pair this is (1, 2, ...)")
    p_sus = sub.add_parser("suspects", help="print rounds of the pairs to measure again ('a,b c,d')")
    p_sus.add_argument("--parts", required=True)
    p_sus.add_argument("--nodes", required=True)
    p_sus.add_argument("--attempt", type=int, required=True)
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
        if not 1 <= args.attempt <= MAX_ATTEMPTS:
            raise InputError(f"--attempt must be 1..{MAX_ATTEMPTS}, got {args.attempt}")
        return run_pair(parts, args.attempt)
    if args.cmd == "suspects":
        return suspects(parts, args.nodes, args.attempt)
    return collect(parts, args.nodes, args.started, args.keep_parts)


def entry() -> None:
    launch.run_program(main, "gpuclust.accept.pairwise", also=(ValueError,))


if __name__ == "__main__":
    entry()
