"""What an acceptance result measured, per node: the figures that `accept report` gates and holds against each
node's own history, and that `--compare-container` sets side by side."""

from __future__ import annotations

from gpuclust.accept import results as R
from gpuclust.accept import stats, verdict
from gpuclust.config.site import PartitionConfig

DEFAULT_PARTITION = PartitionConfig("", 0)  # a partition missing from the site config: the keys' defaults


def large_size_busbw(result: R.JobResult, min_size: int) -> float | None:
    """Median busbw over the sweep sizes >= min_size; None when the sweep never got that large."""
    large = [s.busbw_gbps for s in result.sweep if s.size >= min_size]
    return stats.median(large) if large else None


def node_metrics(result: R.JobResult, part: PartitionConfig | None) -> dict[str, dict[str, float]]:
    """Per node, the figures compared with the node's own history."""
    out: dict[str, dict[str, float]] = {}
    if result.kind == "allreduce":
        figure = large_size_busbw(result, (part or DEFAULT_PARTITION).busbw_min_size)
        if figure is None and result.sweep:
            figure = max(result.sweep, key=lambda s: s.size).busbw_gbps
        if figure is not None and result.job.passed:
            for node in result.nodes:
                out.setdefault(node, {})["allreduce_busbw_gbps"] = figure
    elif result.kind == "pairwise":
        for node, score in verdict.pair_analysis(result).node_scores.items():
            out.setdefault(node, {})["pairwise_busbw_gbps"] = score
    elif result.kind == "storage":
        for rec in result.storage:
            if not rec.ok:
                continue
            if rec.metric in ("staging", "checkpoint_write"):
                out.setdefault(rec.node, {})[f"{rec.metric}_mbps"] = rec.mbps
            elif rec.metric == "checkpoint_read":
                out.setdefault(rec.read_node or rec.node, {})["checkpoint_read_mbps"] = rec.mbps
    return out
