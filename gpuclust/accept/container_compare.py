"""`gpuclust accept report --compare-container`: per node, the figures of the latest containerised run against
the latest bare-metal run (all_reduce busbw, pairwise score, storage MB/s: the same per-node figures the
report's baseline uses), and the versions each saw (driver/CUDA/NCCL/torch, OS, Python, C library).

A containerised result is one whose job record carries "container" (gpuclust.accept.container.job_extra). One
without a digest is left out with a note: without it nobody can tell which image produced the figures.

Status (Nagios): CRITICAL when a containerised figure falls short of bare metal by more than the partition's
`container_tolerance` (default 10%); WARNING when results were left out (no digest); UNKNOWN when no node has
both a containerised and a bare-metal figure (the project's order: WARNING ranks above UNKNOWN); OK otherwise. Versions are shown, never judged: a production
image is expected to carry its own userland.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuclust.accept import results as R
from gpuclust.accept.measures import node_metrics
from gpuclust.config.site import SiteConfig
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Perf, status_line

DEFAULT_TOLERANCE = 0.10
VERSION_KEYS = ("driver", "cuda", "nccl", "torch", "os", "python", "libc")


@dataclass(frozen=True)
class Side:
    """One run seen from one node."""

    job_id: str
    kind: str
    finished: datetime
    figures: dict[str, float]
    versions: dict[str, str | None]
    container: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "kind": self.kind, "finished": R.format_time(self.finished),
                "figures": self.figures, "versions": self.versions, "container": self.container}


@dataclass(frozen=True)
class MetricGap:
    """A node's figure bare and in the container; flagged: the container's falls short beyond the tolerance."""

    metric: str
    bare: float
    container: float
    gap: float  # (container - bare) / bare; negative: the container is slower
    flagged: bool

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "bare": self.bare, "container": self.container, "gap": round(self.gap, 4),
                "flagged": self.flagged}


@dataclass
class NodeComparison:
    """One node's latest containerised and bare-metal runs, the gaps in their figures, the versions that differ."""

    node: str
    partition: str | None
    tolerance: float
    bare: list[Side] = field(default_factory=list)  # the latest bare run of each kind
    container: list[Side] = field(default_factory=list)  # the latest containerised run of each kind
    gaps: list[MetricGap] = field(default_factory=list)
    version_changes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # key: (bare, inside)
    status: Nagios = Nagios.OK

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "partition": self.partition, "status": self.status.name,
                "tolerance": self.tolerance, "gaps": [g.as_dict() for g in self.gaps],
                "versions_differ": {k: {"bare": b, "container": c} for k, (b, c) in self.version_changes.items()},
                "bare": [s.as_dict() for s in self.bare], "container": [s.as_dict() for s in self.container]}


@dataclass
class ContainerComparison:
    """Every node's comparison, the overall Nagios status and why, and notes on what was left out."""

    status: Nagios
    nodes: list[NodeComparison]
    notes: list[str]
    reason: str = ""  # why the status is not OK, for the status line

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status.name, "nodes": [n.as_dict() for n in self.nodes], "notes": self.notes,
                "summary": self.summary_line().split(" | ", 1)[0]}

    def summary_line(self) -> str:
        """The Nagios status line: `container vs bare metal: CRITICAL - node2: ... | nodes=2;;;0 ...`."""
        compared = sum(1 for n in self.nodes if n.gaps)
        gaps = sum(1 for n in self.nodes for g in n.gaps if g.flagged)
        text = self.reason or f"{compared} node(s) compared, no gap beyond the tolerance"
        perf = [Perf("nodes", len(self.nodes), min=0), Perf("nodes_compared", compared, min=0),
                Perf("gaps", gaps, min=0)]
        return status_line("container vs bare metal", self.status, text, perf)


def container_of(result: R.JobResult) -> dict[str, Any] | None:
    info = result.job.extra.get("container")
    return info if isinstance(info, dict) else None


def node_versions(result: R.JobResult, node: str) -> dict[str, str | None]:
    """What the node's first rank saw ({} when the result has no rank there, e.g. storage-only records)."""
    ranks = sorted((r for r in result.ranks if r.node == node), key=lambda r: r.rank)
    if not ranks:
        return {}
    rank = ranks[0]
    seen = rank.extra.get("seen") if isinstance(rank.extra.get("seen"), dict) else {}
    out: dict[str, str | None] = {**rank.versions.as_dict()}
    for key in ("os", "python", "libc"):
        value = seen.get(key) if isinstance(seen, dict) else None
        out[key] = str(value) if value is not None else None
    return out


def compare(scan: R.ResultScan, config: SiteConfig, since: datetime | None = None,
            jobs: tuple[str, ...] = ()) -> ContainerComparison:
    """`accept report --compare-container` over a results directory's scan (results.scan_results, read first):
    the latest bare and the latest containerised (with digest) result of each kind for every node, within
    `since` (or the given job ids); figures compared per node. What is picked and what it lacks come first,
    the figures (measures) after: the results travel one way."""
    notes: list[str] = []
    candidates = [r for r in scan.jobs if (since is None or r.job.finished >= since) and (not jobs or r.job_id in jobs)]
    latest: dict[tuple[str, str, bool], R.JobResult] = {}  # (node, kind, containerised) -> result
    for result in sorted(candidates, key=lambda r: r.job.finished):
        info = container_of(result)
        if info is not None and not info.get("digest"):
            notes.append(f"{result.kind}-{result.job_id}: ran in container {info.get('image')!r} without an image "
                         "digest; left out of the comparison (submit with `gpuclust accept submit --container`)")
            continue
        for node in result.nodes:
            latest[(node, result.kind, info is not None)] = result
    missing = _missing(scan, candidates, latest, since, jobs)  # (said only when no node is compared)
    nodes: dict[str, NodeComparison] = {}
    for (node, kind, inside), result in sorted(latest.items()):
        part_name = result.job.partition
        part = config.partitions.get(part_name or "")
        tol = part.container_tolerance if part is not None else DEFAULT_TOLERANCE
        comp = nodes.setdefault(node, NodeComparison(node, part_name, tol))
        versions, info = node_versions(result, node), container_of(result)
        side = Side(result.job_id, kind, result.job.finished, node_metrics(result, part).get(node, {}), versions,
                    info)
        (comp.container if inside else comp.bare).append(side)
    compared = 0
    for comp in nodes.values():
        bare_fig = {m: v for s in comp.bare for m, v in s.figures.items()}
        cont_fig = {m: v for s in comp.container for m, v in s.figures.items()}
        for metric in sorted(set(bare_fig) & set(cont_fig)):
            bare, boxed = bare_fig[metric], cont_fig[metric]
            gap = (boxed - bare) / bare if bare > 0 else 0.0
            flagged = bare > 0 and boxed < bare * (1 - comp.tolerance)
            comp.gaps.append(MetricGap(metric, bare, boxed, gap, flagged))
            if flagged:
                comp.status = Nagios.CRITICAL
        compared += bool(comp.gaps)
        bare_v = next((s.versions for s in comp.bare if s.versions), {})
        cont_v = next((s.versions for s in comp.container if s.versions), {})
        if bare_v and cont_v:
            comp.version_changes = {k: (bare_v.get(k), cont_v.get(k)) for k in VERSION_KEYS
                                    if bare_v.get(k) != cont_v.get(k)}
    status = Nagios.worst(Nagios.OK, *(c.status for c in nodes.values()))
    reason = ""
    short = [(c.node, g) for c in nodes.values() for g in c.gaps if g.flagged]
    if short:
        first, widest = short[0]
        reason = (f"{first}: {widest.metric} {widest.container:.4g} in the container vs {widest.bare:.4g} bare "
                  f"({widest.gap:+.0%}, tolerance -{nodes[first].tolerance:.0%})"
                  + (f" (and {len(short) - 1} more)" if len(short) > 1 else ""))
    if notes:
        status = Nagios.worst(status, Nagios.WARNING)
        reason = reason or notes[0]
    if compared == 0:
        notes.append(missing)
        status = Nagios.worst(status, Nagios.UNKNOWN)
        reason = missing if status == Nagios.UNKNOWN else reason
    return ContainerComparison(status, [nodes[n] for n in sorted(nodes)], notes, reason)


def _missing(scan: R.ResultScan, candidates: list[R.JobResult], latest: dict[tuple[str, str, bool], R.JobResult],
             since: datetime | None, jobs: tuple[str, ...]) -> str:
    """What a comparison lacked, and how to get it: no results, no containerised run, no bare-metal run, or
    both but never of the same kind on the same node."""
    where = scan.root or "the results directory"
    scope = (f" for job(s) {', '.join(jobs)}" if jobs else "") + (f" since {since.isoformat()}" if since else "")
    inside = sorted({f"{r.kind}-{r.job_id}" for (_, _, boxed), r in latest.items() if boxed})
    bare = sorted({f"{r.kind}-{r.job_id}" for (_, _, boxed), r in latest.items() if not boxed})
    head = "no node has both a containerised and a bare-metal figure to compare: "
    if not candidates:
        return f"{head}no acceptance results{scope} under {where}"
    if not inside:
        return (f"{head}no containerised run with an image digest{scope} under {where} ({len(bare)} bare-metal "
                "run(s)); run one with `gpuclust accept submit KIND --container IMAGE`")
    if not bare:
        return (f"{head}no bare-metal run{scope} under {where} ({len(inside)} containerised: {', '.join(inside)}); "
                "run the same kind without --container on the same nodes")
    return (f"{head}none ran the same kind both ways (containerised: "
            f"{', '.join(inside)}; bare metal: {', '.join(bare)}); run the same kind both ways on the same nodes")


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def render_table(comp: ContainerComparison) -> str:
    from gpuclust.output import format_table, terminal_lines

    lines = [comp.summary_line()]
    rows = []
    for node in comp.nodes:
        images = sorted({f"{s.container.get('image')} ({s.container.get('runtime')}, {str(s.container.get('digest'))[:19]})"
                         for s in node.container if s.container})
        for gap in node.gaps:
            rows.append([node.node, gap.metric, _fmt(gap.bare), _fmt(gap.container), f"{gap.gap * 100:+.1f}%",
                         f"-{node.tolerance * 100:.0f}%", "GAP" if gap.flagged else "ok", ", ".join(images)])
        if not node.gaps:
            rows.append([node.node, "-", "-" if not node.bare else "bare only" if not node.container else "-",
                         "-" if node.bare else "container only", "-", "-", "-", ", ".join(images)])
    if rows:
        lines.append("")
        lines.extend(format_table(["NODE", "FIGURE", "BARE", "CONTAINER", "GAP", "TOLERANCE", "", "IMAGE"],
                                  rows).splitlines())
    changed = [(n.node, k, b, c) for n in comp.nodes for k, (b, c) in sorted(n.version_changes.items())]
    if changed:
        lines.append("")
        lines.extend(format_table(["NODE", "VERSION", "BARE", "CONTAINER"],
                                  [[n, k, b or "-", c or "-"] for n, k, b, c in changed]).splitlines())
    for note in comp.notes:
        if note != comp.reason:  # already on the status line
            lines.append(f"note: {note}")
    return terminal_lines(lines)
