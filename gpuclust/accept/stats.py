"""The arithmetic of acceptance: nccl-tests' bandwidth figures, size sweeps, robust outliers, version drift.

Pure functions, no torch: unit-tested against nccl-tests' own definitions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

# ---- nccl-tests figures ----------------------------------------------------------------------------
# nccl-tests (src/common.cu, src/all_reduce.cu):
#   algBw = (double)(count * typesize) / 1.0E9 / sec        (sec = time per iteration)
#   busBw = algBw * (2 * (nranks - 1)) / nranks              (AllReduceGetBw)
# i.e. GB/s with G = 1e9 bytes, and busbw is the per-link traffic of a ring all_reduce.


def allreduce_bus_factor(nranks: int) -> float:
    """2(n-1)/n, nccl-tests' all_reduce bus factor (0 for a single rank: no traffic)."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    return 2.0 * (nranks - 1) / nranks


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """Bytes per iteration / time per iteration, in GB/s (1e9). 0-time gives inf (nccl-tests prints inf too)."""
    if seconds <= 0:
        return math.inf
    return size_bytes / 1.0e9 / seconds


def busbw_gbps(size_bytes: int, seconds: float, nranks: int) -> float:
    return algbw_gbps(size_bytes, seconds) * allreduce_bus_factor(nranks)


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """min, min*f, ... up to and including max (nccl-tests -b/-e/-f); max is added if the steps skip it."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min ({min_bytes}) <= max ({max_bytes})")
    if factor < 2:
        raise ValueError(f"factor must be >= 2, got {factor}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def element_count(size_bytes: int, element_size: int) -> int:
    """Elements in a message of size_bytes (rounded down, as nccl-tests does); 0 when smaller than one element."""
    return size_bytes // element_size


def expected_allreduce_value(index: int, nranks: int, period: int = 8) -> int:
    """The input of rank r at element i is (r + 1) + (i % period); their sum over ranks is this integer.
    Small integers are exact in every dtype the harness allows, so a wrong element is really wrong."""
    return nranks * (nranks + 1) // 2 + nranks * (index % period)


# ---- robust statistics ------------------------------------------------------------------------------

MAD_SCALE = 1.4826  # MAD * 1.4826 estimates sigma for normal data


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of nothing")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation (unscaled)."""
    centre = median(values)
    return median([abs(v - centre) for v in values])


@dataclass(frozen=True)
class Outlier:
    """A value far below its peers: their median and spread, its robust z, and its drop below the median."""

    value: float
    median: float
    mad: float
    z: float  # robust z: (median - value) / (1.4826 * max(MAD, floor)); positive = slower than the rest
    drop: float  # 1 - value/median


def low_outliers(
    values: Mapping[K, float], *, z_threshold: float = 3.5, min_drop: float = 0.25, mad_floor: float = 0.05
) -> dict[K, Outlier]:
    """Keys whose value is far BELOW the others (slow is bad; fast is never an outlier).

    Each key is judged against the median and MAD of the OTHER keys (leave-one-out): with 4 nodes, one slow
    node would otherwise inflate the MAD it is measured with and hide itself. Needs at least 3 values. Both
    must hold: robust z >= z_threshold, and value at least min_drop below that median (so tight, healthy
    figures with a tiny MAD do not flag noise). The MAD is floored at mad_floor * median for the same
    reason: with the other values identical the raw MAD is 0.
    """
    if len(values) < 3:
        return {}
    out: dict[K, Outlier] = {}
    for key, value in values.items():
        others = [v for k, v in values.items() if k != key]
        centre = median(others)
        if centre <= 0:
            continue
        spread = mad(others)
        scale = MAD_SCALE * max(spread, mad_floor * centre)
        z = (centre - value) / scale
        drop = 1.0 - value / centre
        if z >= z_threshold and drop >= min_drop:
            out[key] = Outlier(value, centre, spread, z, drop)
    return out


@dataclass(frozen=True)
class PairAttemptFigure:
    """One measurement of a pair: its figure (None: the step failed) and the per-iteration busbw figures it
    was made of (the noise inside one measurement; empty when unknown)."""

    busbw_gbps: float | None
    samples_gbps: tuple[float, ...] = ()


@dataclass(frozen=True)
class PairFigure:
    """Everything measured for one node pair. busbw_gbps: the pair's figure (None: failed). attempts: every
    measurement in order when the run recorded them (a suspect pair is measured again); () for a record
    written before measurements were kept, which is then judged on busbw_gbps alone, as a confirmed figure."""

    nodes: tuple[str, str]
    busbw_gbps: float | None  # None: the pair failed (counts as 0 for scoring)
    attempts: tuple[PairAttemptFigure, ...] = ()

    @property
    def figure(self) -> float:
        """The pair's judged figure: the best of its measurements (a fault is slow every time, a noise burst
        is not), a failed measurement counting as 0."""
        if self.attempts:
            return max((a.busbw_gbps or 0.0) for a in self.attempts)
        return self.busbw_gbps if self.busbw_gbps is not None else 0.0

    @property
    def confirmed(self) -> bool:
        """Measured at least twice, or a record that predates repeat measurements (nothing more to ask of it)."""
        return len(self.attempts) != 1


@dataclass(frozen=True)
class PairAnalysis:
    """A pairwise sweep judged: node scores, slow nodes and links, the run's noise, the pairs to measure again."""

    node_scores: dict[str, float]  # per node: median busbw of the pairs that share it
    node_outliers: dict[str, Outlier]
    link_outliers: dict[tuple[str, str], Outlier]  # slow pairs not explained by a slow node
    enough_nodes: bool
    noise_sigma: float = 0.0  # the run's own noise: robust sigma of log(busbw), pooled
    suspects: tuple[tuple[str, str], ...] = ()  # pairs slow beyond the noise (to measure again)
    unconfirmed: tuple[tuple[str, str], ...] = ()  # suspects measured once only: nothing is named on them

    @property
    def passed(self) -> bool:
        return not self.node_outliers and not self.link_outliers and not self.unconfirmed


# Every figure below this (GB/s) is taken as this, so a failed pair (0) has a finite logarithm.
_FLOOR_GBPS = 1e-9


def _log(value: float) -> float:
    return math.log(max(value, _FLOOR_GBPS))


def _robust_sigma(values: Sequence[float]) -> float:
    return MAD_SCALE * mad(values) if len(values) >= 3 else 0.0


def pair_noise(pairs: Sequence[PairFigure]) -> float:
    """The run's own noise, as a robust sigma of log(busbw): the larger of (a) the median spread of the
    iterations inside one measurement and (b) the median disagreement between two measurements of the same
    pair. Computed from the run itself, so a busy host raises the bar a pair must clear to count as slow."""
    within = [_robust_sigma([_log(s) for s in a.samples_gbps]) for p in pairs for a in p.attempts
              if len(a.samples_gbps) >= 3]
    repeat = []
    for p in pairs:
        ok = [a.busbw_gbps for a in p.attempts if a.busbw_gbps]
        if len(ok) >= 2:
            repeat.append(abs(_log(ok[0]) - _log(ok[1])) / math.sqrt(2))
    return max(median(within) if within else 0.0, median(repeat) if repeat else 0.0)


# A pair is a suspect (measured again) when it is below its reference by this fraction of the log threshold:
# a looser bar than naming, so the final verdict rarely meets a slow pair that was measured only once.
SUSPECT_FRACTION = 0.5


def judge_pairs(
    pairs: Iterable[PairFigure], *, z_threshold: float = 3.0, min_drop: float = 0.5, link_min_drop: float = 0.75
) -> PairAnalysis:
    """THE pairwise judgement (the job's verdict and `accept report` both come from here).

    Figures are compared on a log scale; the threshold is tau = max(log(1/(1 - min_drop)), z * sigma), with
    sigma the run's own noise (pair_noise: the spread of each measurement's iterations and of repeated
    measurements). A node X is a candidate when even the best of the pairs containing X is below the median
    of the pairs without X by more than tau. A candidate is named when its best pair is also below (nearly)
    every pair that involves no candidate by more than tau (the pairs containing it are slow while the pairs
    without it are not), and only when every one of its pairs was measured again and stayed slow
    (PairFigure.confirmed). Several slow nodes can be named when enough pairs involve none of them.
    Among the other nodes (4 or more), a pair below the median of the rest by more than
    max(log(1/(1 - link_min_drop)), z * sigma), sigma here also covering the spread of those pairs, is a
    slow link (a healthy pair on a busy host can measure 3x below the others twice in a row; a node's
    several pairs do not all do that). Pairs past half the threshold are `suspects`, which the job measures
    again; slow pairs measured once are `unconfirmed`: nothing is named on them. Needs 3 or more nodes.
    """
    figures = list(pairs)
    noise = pair_noise(figures)
    floor = -math.log(1.0 - min_drop) if min_drop < 1 else math.inf
    link_floor = -math.log(1.0 - link_min_drop) if link_min_drop < 1 else math.inf
    per_node: dict[str, list[float]] = {}
    for pair in figures:
        for node in pair.nodes:
            per_node.setdefault(node, []).append(pair.figure)
    scores = {node: median(values) for node, values in per_node.items()}
    enough = len(scores) >= 3
    node_out: dict[str, Outlier] = {}
    link_out: dict[tuple[str, str], Outlier] = {}
    suspects: dict[tuple[str, str], None] = {}
    unconfirmed: dict[tuple[str, str], None] = {}
    if not enough:
        return PairAnalysis(scores, node_out, link_out, enough, noise)

    def threshold(spread: Sequence[float], at_least: float) -> tuple[float, float]:
        sigma = max(noise, _robust_sigma(spread))
        return max(at_least, z_threshold * sigma), sigma

    def outlier(value_log: float, ref: float, sigma: float) -> Outlier:
        value, centre = math.exp(value_log), math.exp(ref)
        gap = ref - value_log
        return Outlier(value, centre, sigma, gap / sigma if sigma > 0 else math.inf, 1.0 - value / centre)

    tau = max(floor, z_threshold * noise)
    candidates: dict[str, tuple[list[PairFigure], float]] = {}
    for node in sorted(scores):
        mine = [p for p in figures if node in p.nodes]
        others = [p for p in figures if node not in p.nodes]
        if not mine or not others:
            continue
        ref = median([_log(p.figure) for p in others])
        best = max(_log(p.figure) for p in mine)
        if ref - best > SUSPECT_FRACTION * tau:
            suspects.update((p.nodes, None) for p in mine)
        if ref - best > tau:
            candidates[node] = (mine, best)
    for node, (mine, best) in candidates.items():
        # the pairs without it AND without any other candidate must ALL (beyond 10 of them: 90%) be faster,
        # by more than the threshold: a group of slow pairs, cleanly apart from a group of healthy ones
        # (a pair never measured is a fault of its own, reported as such: it is no reference)
        clean = sorted(_log(p.figure) for p in figures if not set(p.nodes) & set(candidates) and p.figure > 0)
        if not clean:
            continue
        low = clean[len(clean) // 10]
        if low - best <= tau:
            continue
        if all(p.confirmed for p in mine):
            node_out[node] = outlier(best, median(clean), noise)
        else:
            unconfirmed.update((p.nodes, None) for p in mine if not p.confirmed)
    active = set(scores) - set(candidates)
    rest = [p for p in figures if set(p.nodes) <= active]
    # a link needs a reference that shows the run's spread between pairs: 4 or more nodes (6 or more pairs)
    if len(active) >= 4 and len(rest) >= 6:
        all_logs = [_log(p.figure) for p in rest]
        for pair in rest:
            ref_logs = [_log(p.figure) for p in rest if p is not pair]
            ref = median(ref_logs)
            tau, sigma = threshold(all_logs, link_floor)
            gap = ref - _log(pair.figure)
            if gap > SUSPECT_FRACTION * tau:
                suspects[pair.nodes] = None
            if gap > tau:
                if pair.confirmed:
                    link_out[pair.nodes] = outlier(_log(pair.figure), ref, sigma)
                else:
                    unconfirmed[pair.nodes] = None
    return PairAnalysis(scores, node_out, link_out, enough, noise, tuple(suspects), tuple(unconfirmed))


def analyse_pairs(
    pairs: Iterable[PairFigure], *, z_threshold: float = 3.0, min_drop: float = 0.5, link_min_drop: float = 0.75
) -> PairAnalysis:
    """Kept name for judge_pairs."""
    return judge_pairs(pairs, z_threshold=z_threshold, min_drop=min_drop, link_min_drop=link_min_drop)


def disjoint_rounds(pairs: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Pairs packed greedily into rounds in which no node appears twice (they can run at the same time)."""
    rounds: list[list[tuple[str, str]]] = []
    busy: list[set[str]] = []
    for pair in pairs:
        for i, used in enumerate(busy):
            if not used & set(pair):
                rounds[i].append(pair)
                used.update(pair)
                break
        else:
            rounds.append([pair])
            busy.append(set(pair))
    return rounds


def round_robin_pairs(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every unordered pair once, in rounds of disjoint pairs (circle method): n-1 rounds for even n, n for
    odd n (one node sits out each round). Pairs in one round can run at the same time."""
    items: list[str | None] = list(nodes)
    if len(items) < 2:
        return []
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds: list[list[tuple[str, str]]] = []
    for _ in range(n - 1):
        this_round = []
        for i in range(n // 2):
            a, b = items[i], items[n - 1 - i]
            if a is not None and b is not None:
                this_round.append((a, b) if nodes.index(a) < nodes.index(b) else (b, a))
        rounds.append(this_round)
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


# ---- history: baselines (version drift: gpuclust.accept.drift) ---------------------------------------


def baseline(history: Sequence[float], min_runs: int = 3, window: int = 10) -> float | None:
    """The node's own baseline: median of its last `window` figures, once it has at least `min_runs`."""
    recent = list(history)[-window:]
    if len(recent) < min_runs:
        return None
    return median(recent)
