"""The pairwise verdict: one judgement, used by the job (`python -m gpuclust.accept.pairwise collect`, which
also picks the pairs to measure again) and by `gpuclust accept report`, so both always name the same nodes.

The arithmetic is stats.judge_pairs; this module turns result records into its figures and its analysis into
reasons. Constants live here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuclust.accept import results as R
from gpuclust.accept import stats

# A pair must be at least this much slower than its reference to count as slow (on top of the noise test:
# z x the run's own noise sigma on a log scale). A real fault (a 50mbit link, a sick NIC) costs far more
# than 2x; host noise is measured and raises the bar further.
PAIR_MIN_DROP = 0.6  # 2.5x: a healthy pair on a busy 2-core host measured 2x below the others (see tests/data/accept/noise)
PAIR_LINK_MIN_DROP = 0.75  # a link (one pair) must be 4x slower: see stats.judge_pairs
PAIR_Z = 3.0


def pair_figure(pair: R.PairRecord) -> stats.PairFigure:
    attempts = tuple(
        stats.PairAttemptFigure(a.busbw_gbps if a.status == "ok" else None, a.samples_gbps) for a in pair.attempts
    )
    return stats.PairFigure(pair.nodes, pair.busbw_gbps if pair.status == "ok" else None, attempts)


@dataclass(frozen=True)
class PairwiseVerdict:
    """A pairwise run's verdict: the analysis, the pairs with wrong elements or never measured, the node count."""

    analysis: stats.PairAnalysis
    wrong: tuple[tuple[tuple[str, str], int], ...]  # pairs whose all_reduce gave wrong elements
    failed: tuple[tuple[str, str], ...]  # pairs never measured successfully (status not ok)
    node_count: int
    measured_again: bool = True  # False for records written before pairs were measured again

    @property
    def nodes(self) -> tuple[str, ...]:
        """The named (slow) nodes."""
        return tuple(sorted(self.analysis.node_outliers))

    @property
    def passed(self) -> bool:
        return self.analysis.passed and not self.wrong and not self.failed

    def node_message(self, node: str) -> str:
        o = self.analysis.node_outliers[node]
        return (f"slow node: its best pair {o.value:.3f} GB/s vs {o.median:.3f} for the pairs without it "
                f"({o.drop:.0%} lower, {_noise_text(o.z)}{self._confirmed_text})")

    def link_message(self, pair: tuple[str, str]) -> str:
        o = self.analysis.link_outliers[pair]
        return (f"slow link {pair[0]}-{pair[1]}: busbw {o.value:.3f} GB/s, {o.drop:.0%} below the median pair "
                f"{o.median:.3f} ({_noise_text(o.z)}{self._confirmed_text})")

    @property
    def _confirmed_text(self) -> str:
        return "; confirmed by a second measurement" if self.measured_again else ""

    def reasons(self) -> list[str]:
        a = self.analysis
        out = []
        for node in sorted(a.node_outliers):
            out.append(f"{node}: {self.node_message(node)}")
        for pair in sorted(a.link_outliers):
            out.append(self.link_message(pair))
        if a.unconfirmed:
            out.append("slow but measured once only (not confirmed, nothing named): "
                       + ", ".join(f"{x}-{y}" for x, y in a.unconfirmed))
        for (x, y), n in self.wrong:
            out.append(f"pair {x}-{y}: {n} wrong elements")
        for x, y in self.failed:
            out.append(f"pair {x}-{y}: no successful measurement")
        return out

    def notes(self) -> list[str]:
        out = [f"noise sigma {self.analysis.noise_sigma:.3f} (log busbw); a pair counts as slow below "
               f"{self.threshold_factor:.1f}x under its reference"]
        if not self.analysis.enough_nodes:
            out.append(f"only {self.node_count} nodes: pairwise needs 3 or more to name a node")
        return out

    @property
    def threshold_factor(self) -> float:
        import math

        return max(1.0 / (1.0 - PAIR_MIN_DROP), math.exp(PAIR_Z * self.analysis.noise_sigma))


def judge(pairs: Iterable[R.PairRecord]) -> PairwiseVerdict:
    """THE verdict on a pairwise run's pair records."""
    records = list(pairs)
    analysis = stats.judge_pairs((pair_figure(p) for p in records), z_threshold=PAIR_Z, min_drop=PAIR_MIN_DROP,
                                 link_min_drop=PAIR_LINK_MIN_DROP)
    wrong = tuple((p.nodes, p.wrong) for p in records if p.wrong)
    failed = tuple(p.nodes for p in records if p.status != "ok")
    nodes = {n for p in records for n in p.nodes}
    return PairwiseVerdict(analysis, wrong, failed, len(nodes), any(p.attempts for p in records))


def pair_analysis(result: R.JobResult) -> stats.PairAnalysis:
    """The analysis of a pairwise result's pairs (`judge`'s, without the reasons)."""
    return judge(result.pairs).analysis


def _noise_text(z: float) -> str:
    import math

    return f"{z:.1f} x the run's noise" if math.isfinite(z) else "no noise measured"
