"""Replay the pairwise judgement on real measurements recorded on the lab under CPU load (tests/data/accept/
noise, see manifest.json): the job's own verdict and the report's are the same, and resampled runs still name
exactly the throttled node (and nobody on a clean run), every time.

Two resamplings, both seeded (reproducible):
- bootstrap: each recorded measurement's iterations are drawn again with replacement and its figure recomputed
  as their median; the judgement is replayed on the whole run;
- synthetic runs: a whole pairwise job is replayed from the pool of every recorded measurement: each pair's
  first measurement is drawn from the recorded ones of its kind (a pair with the throttled node, or a healthy
  pair, from any loaded run), the judgement picks the suspects, each suspect gets a second draw, and the final
  verdict must name exactly the throttled node (chosen at random), or nobody when none is throttled.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept import stats, verdict
from gpuclust.config import parse_config

NODES = ("node1", "node2", "node3", "node4")
REPLAYS = 20  # per recorded run: the requirement is 20 of 20
SYNTHETIC = 200
CONFIRM_PASSES = 2  # the default of ACCEPT_PAIR_CONFIRM
LAB_TOLERANCE = "[site]\ncluster_name = lab\nresults_dir = /x\n[partition gpu]\nbusbw_tolerance = 50%\n"  # lab-site.conf's


def _noise_dir(data_dir: Path) -> Path:
    return data_dir / "accept" / "noise"


def _manifest(data_dir: Path) -> dict[str, dict[str, object]]:
    runs: dict[str, dict[str, object]] = json.loads((_noise_dir(data_dir) / "manifest.json").read_text())["runs"]
    return runs


def _runs(data_dir: Path) -> list[tuple[R.JobResult, str | None]]:
    manifest = _manifest(data_dir)
    scan = R.scan_results(_noise_dir(data_dir))
    assert not scan.problems
    by_id = {r.job_id: r for r in scan.jobs}
    assert set(by_id) == set(manifest)
    out = []
    for job, info in sorted(manifest.items(), key=lambda kv: int(kv[0])):
        throttled = info["throttled"]
        assert throttled is None or isinstance(throttled, str)
        out.append((by_id[job], throttled))
    return out


def test_recorded_runs_one_verdict(data_dir: Path) -> None:
    """The judgement names exactly the throttled node (nobody on a clean run) on every recorded run; what a job
    running this code wrote as its verdict is what the judgement, and so `accept report`, says of its file."""
    config = parse_config("[site]\ncluster_name = lab\nresults_dir = /x\n[partition gpu]\n", "t.conf")
    scan = R.scan_results(_noise_dir(data_dir))
    manifest = _manifest(data_dir)
    for result, throttled in _runs(data_dir):
        judged = verdict.judge(result.pairs)
        assert judged.nodes == ((throttled,) if throttled else ()), result.job_id
        assert judged.passed == (throttled is None), result.job_id
        if not manifest[result.job_id].get("verdict_by_older_code"):
            assert result.job.failed_nodes == judged.nodes and result.job.passed == judged.passed
        report = rep.evaluate(scan, config, job=result.job_id)
        assert rep.nodes_with(report, "outlier") == list(judged.nodes)



def test_recorded_history_baseline_names_no_healthy_node(data_dir: Path) -> None:
    """Each recorded run judged against the ones before it, at the lab's tolerance: a node's own baseline names
    at most the throttled node. The whole loaded run being slower than the history is one run-level finding
    (runs 8 and 22 named healthy node1 and node2 for it before)."""
    config = parse_config(LAB_TOLERANCE, "lab.conf")
    scan = R.scan_results(_noise_dir(data_dir))
    run_level = []
    for result, throttled in _runs(data_dir):
        report = rep.evaluate(scan, config, job=result.job_id)
        assert set(rep.nodes_with(report, "baseline")) <= {throttled}, (result.job_id, report.as_dict())
        assert all(v.status.name == "OK" for n, v in report.nodes.items() if n != throttled), result.job_id
        run_level += [result.job_id for f in report.findings if f.check == "baseline" and not f.node_list]
    assert run_level == ["8", "22"]  # loaded, throttled node3: the healthy nodes' median 50-60% below history


def test_loaded_ci_history_names_nobody(data_dir: Path) -> None:
    """The CI rehearsal's four lab runs (tests/data/accept/loaded_history): the clean run under load, judged
    against the three before it, names no node; the throttled runs name exactly their node."""
    config = parse_config(LAB_TOLERANCE, "lab.conf")
    folder = data_dir / "accept" / "loaded_history"
    runs = json.loads((folder / "manifest.json").read_text())["runs"]
    scan = R.scan_results(folder)
    assert not scan.problems and sorted(r.job_id for r in scan.jobs) == sorted(runs)
    for job, info in runs.items():
        report = rep.evaluate(scan, config, job=job)
        named = [info["throttled"]] if info["throttled"] else []
        assert [n for n, v in report.nodes.items() if v.status.name != "OK"] == named, (job, report.as_dict())
    assert rep.evaluate(scan, config, job="2542").status.name == "OK"


def _redraw(a: R.PairAttempt, rng: random.Random) -> stats.PairAttemptFigure:
    if a.status != "ok" or not a.samples_gbps:
        return stats.PairAttemptFigure(a.busbw_gbps if a.status == "ok" else None, a.samples_gbps)
    draw = tuple(rng.choice(a.samples_gbps) for _ in a.samples_gbps)
    return stats.PairAttemptFigure(stats.median(draw), draw)


def _judge(figures: list[stats.PairFigure]) -> stats.PairAnalysis:
    return stats.judge_pairs(figures, z_threshold=verdict.PAIR_Z, min_drop=verdict.PAIR_MIN_DROP,
                             link_min_drop=verdict.PAIR_LINK_MIN_DROP)


def _figure(nodes: tuple[str, str], attempts: tuple[stats.PairAttemptFigure, ...]) -> stats.PairFigure:
    return stats.PairFigure(nodes, max((x.busbw_gbps or 0.0) for x in attempts), attempts)


def test_bootstrap_replays_name_exactly_the_throttled_node(data_dir: Path) -> None:
    """Each measurement's iterations drawn again; a pair that the redraw makes a new suspect gets its second
    measurement as the job would give it: another draw from that pair's own iterations."""
    rng = random.Random(13)
    for result, throttled in _runs(data_dir):
        hits = 0
        for _ in range(REPLAYS):
            measured = {p.nodes: tuple(_redraw(a, rng) for a in p.attempts) for p in result.pairs}
            records = {p.nodes: p for p in result.pairs}
            for _ in range(CONFIRM_PASSES):
                again = [n for n in _judge([_figure(n, a) for n, a in measured.items()]).suspects
                         if len(measured[n]) < 2]
                if not again:
                    break
                measured.update({n: measured[n] + (_redraw(records[n].attempts[0], rng),) for n in again})
            judged = _judge([_figure(n, a) for n, a in measured.items()])
            expected = {throttled} if throttled else set()
            hits += set(judged.node_outliers) == expected and not judged.link_outliers and not judged.unconfirmed
        assert hits == REPLAYS, f"job {result.job_id}: {hits} of {REPLAYS}"


def _pools(data_dir: Path) -> tuple[list[stats.PairAttemptFigure], list[stats.PairAttemptFigure]]:
    slow: list[stats.PairAttemptFigure] = []
    healthy: list[stats.PairAttemptFigure] = []
    for result, throttled in _runs(data_dir):
        for pair in result.pairs:
            for a in pair.attempts:
                fig = stats.PairAttemptFigure(a.busbw_gbps if a.status == "ok" else None, a.samples_gbps)
                (slow if throttled in pair.nodes else healthy).append(fig)
    return slow, healthy


@pytest.mark.parametrize("throttled", [None, "node1", "node2", "node3", "node4"])
def test_synthetic_loaded_runs_name_exactly_the_throttled_node(data_dir: Path, throttled: str | None) -> None:
    slow, healthy = _pools(data_dir)
    assert len(slow) >= 6 and len(healthy) >= 12
    rng = random.Random(f"17-{throttled}")
    pairs = [p for r in stats.round_robin_pairs(list(NODES)) for p in r]
    hits = 0
    for _ in range(SYNTHETIC):
        def draw(pair: tuple[str, str]) -> stats.PairAttemptFigure:
            return rng.choice(slow if throttled in pair else healthy)

        def judge(measured: dict[tuple[str, str], tuple[stats.PairAttemptFigure, ...]]) -> stats.PairAnalysis:
            figures = [stats.PairFigure(p, max((x.busbw_gbps or 0.0) for x in a), a) for p, a in measured.items()]
            return stats.judge_pairs(figures, z_threshold=verdict.PAIR_Z, min_drop=verdict.PAIR_MIN_DROP,
                                 link_min_drop=verdict.PAIR_LINK_MIN_DROP)

        measured = {pair: (draw(pair),) for pair in pairs}
        for _ in range(CONFIRM_PASSES):  # as pairwise.sbatch: suspects measured once get a second measurement
            again = [p for p in judge(measured).suspects if len(measured[p]) < 2]
            if not again:
                break
            measured.update({p: measured[p] + (draw(p),) for p in again})
        judged = judge(measured)
        expected = {throttled} if throttled else set()
        hits += set(judged.node_outliers) == expected and not judged.link_outliers and not judged.unconfirmed
    assert hits == SYNTHETIC, f"{hits} of {SYNTHETIC}"
