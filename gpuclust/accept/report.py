"""`gpuclust accept report`: gate acceptance results per partition, name outlier nodes, check declared against
detected GPUs, compare each node with its own history (bandwidth baseline, version drift).

Verdicts use Nagios states: OK, WARNING, CRITICAL, and UNKNOWN when there is nothing (readable) to judge.
Each finding names the node, the check, the job and a message; a node's verdict is its worst finding.

Checks
- gate (CRITICAL): per the job's partition in the site config. all_reduce busbw is the median over the sizes
  >= busbw_min_size (never the average over the whole sweep) against expect_busbw_gbps x (1 - busbw_tolerance);
  staging/checkpoint MB/s per node against expect_* x (1 - storage_tolerance); restore seconds against
  expect_restore_seconds x (1 + storage_tolerance). A failed or incorrect run is CRITICAL.
- outlier (CRITICAL for a node, WARNING for a link): pairwise figures, median/MAD over the pairs sharing a node.
- gres (CRITICAL): the node's Slurm GRES (scontrol show node) against the partition's gpus_per_node/gpu_type,
  against the GPU device files found on the node, and the job's per-node allocation against the devices
  bound to its ranks (CUDA_VISIBLE_DEVICES); on GPU also each rank's torch.cuda.device_count() against what
  was bound to it. GPU model vs GRES type: WARNING. On a MIG node the device files are its physical cards,
  against the cards Slurm's MIG instances fill (gpuclust.accept.topology.MigCards; WARNING where unknown).
- baseline (WARNING): a node's figure below the median of its own last runs by more than the tolerance;
  where the whole run dropped (per-node figures, 3+ healthy nodes: the run's median against earlier runs'),
  one run-level finding instead, and a node named only if it fell further than the run by more than that.
- topology (CRITICAL): the partition's announced topology (gpus_per_node, nics_per_node, nic_speed_mbps,
  nvlink) against what the job saw on each node (gpuclust.accept.topology); the comparison is kept in
  report.json under "topology".
- drift (WARNING): driver/CUDA/NCCL/torch changed since the node's previous result, or differs from the
  strict majority of the job's nodes (a tie: one run-level warning); gpuclust.accept.drift, as audit judges it.

Findings are gpuclust.findings.Finding, the model audit uses too; the text output's first line is a Nagios
status line with performance data (jobs, nodes, nodes_critical, nodes_warning, unknown, problems).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuclust.accept import drift, stats, verdict
from gpuclust.accept import results as R
from gpuclust.accept.measures import DEFAULT_PARTITION, large_size_busbw, node_metrics
from gpuclust.config.site import PartitionConfig, SiteConfig
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Finding, Perf, natural_key, status_line
from gpuclust.nagiosrange import Thresholds
from gpuclust.slurm import hostlist
from gpuclust.slurm.gres import gres_gpu_count, gres_gpu_type

if TYPE_CHECKING:
    from gpuclust.accept.topology import MigCards

PAIR_MIN_DROP = verdict.PAIR_MIN_DROP  # the pairwise verdict is gpuclust.accept.verdict.judge, the job's own
BASELINE_MIN_RUNS = 3
BASELINE_WINDOW = 10
PEER_MIN_NODES = 3  # fewer healthy nodes in a run: no peers to tell a node's drop from the run's
JOB_WIDE_METRICS = frozenset({"allreduce_busbw_gbps"})  # one figure per job, copied to each node
REASON_MAX = 240  # the status line's reason; Nagios shows the first line, and the rest follows it anyway


def _finding(node: str | None, status: Nagios, check: str, message: str, job_id: str | None = None,
             kind: str | None = None) -> Finding:
    """A finding about one node (None: about the run as a whole), in the model every plane shares."""
    return Finding.make(check, status, message, [node] if node is not None else (), job_id=job_id, kind=kind)


@dataclass
class NodeVerdict:
    """One node's verdict (its worst finding), its findings and jobs, and the findings of superseded runs."""

    node: str
    status: Nagios = Nagios.OK
    findings: list[Finding] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    last_finished: datetime | None = None
    history: list[Finding] = field(default_factory=list)  # from runs a later run of the same kind superseded

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)
        self.status = Nagios.worst(self.status, finding.status)


@dataclass
class JobSummary:
    """One judged job: what ran where and when, whether it passed, its headline and its own verdict."""

    job_id: str
    kind: str
    partition: str | None
    nodes: tuple[str, ...]
    finished: datetime
    passed: bool
    headline: str
    status: Nagios = Nagios.OK  # the job's own verdict, current or not
    current: bool = True  # False: every node of it ran the same kind again later; its findings are history


@dataclass
class Report:
    """The acceptance report: its status, each node's verdict, the jobs judged, run-level findings, problems."""

    status: Nagios
    nodes: dict[str, NodeVerdict]
    jobs: list[JobSummary]
    findings: list[Finding]  # run-level ones (node None), input problems included
    problems: list[str]
    topology: dict[str, dict[str, Any]] = field(default_factory=dict)  # job id -> node -> announced vs seen
    health: dict[str, dict[str, Any]] = field(default_factory=dict)  # job id -> node -> sources, nvbandwidth, dcgm
    history: list[Finding] = field(default_factory=list)  # run-level findings of superseded jobs
    thresholds: Thresholds | None = None  # -w/-c on nodes_critical; None: any CRITICAL node is CRITICAL

    def figures(self) -> dict[str, int]:
        """Jobs judged, nodes judged, nodes per verdict, run-level UNKNOWN findings, unreadable inputs."""
        verdicts = [v.status for v in self.nodes.values()]
        return {"jobs": len(self.jobs), "nodes": len(self.nodes),
                "nodes_critical": verdicts.count(Nagios.CRITICAL), "nodes_warning": verdicts.count(Nagios.WARNING),
                "unknown": sum(1 for f in self.findings if f.severity == Nagios.UNKNOWN),
                "problems": len(self.problems)}

    def perf(self) -> list[Perf]:
        figures = self.figures()
        limits = self.thresholds or Thresholds()
        return [Perf(name, value, min=0, max=figures["nodes"] if name.startswith("nodes_") else None,
                     warn=str(limits.warning) if name == "nodes_critical" and limits.warning else None,
                     crit=str(limits.critical) if name == "nodes_critical" and limits.critical else None)
                for name, value in figures.items()]

    def reason(self) -> str:
        """Why the status is what it is, for the status line: the first finding at the status's level (the run's,
        else a node's), and how many more there are; with -w/-c, the failing nodes against the range they left."""
        level = self.status
        if level == Nagios.OK:
            return ""
        run = [f for f in self.findings if f.status == level]
        at_level = sorted((n for n, v in self.nodes.items() if v.status == level), key=natural_key)
        if self.thresholds is not None:
            failing = sorted((n for n, v in self.nodes.items() if v.status == Nagios.CRITICAL), key=natural_key)
            at_level = [n for n in at_level if n not in failing]
            if failing and self.thresholds.judge(len(failing)) == level:
                flag, limit = (("-c", self.thresholds.critical) if level == Nagios.CRITICAL
                               else ("-w", self.thresholds.warning))
                more = len(failing) - 1
                return (f"{len(failing)} failing node(s), outside {flag} {limit}: "
                        f"{_clip(self._node_reason(failing[0], Nagios.CRITICAL))}"
                        + (f" (and {more} more)" if more else ""))
        if run:
            first, more = run[0].message, len(run) - 1 + len(at_level)
        elif at_level:
            first, more = self._node_reason(at_level[0], level), len(at_level) - 1
        else:
            return level.name.lower()
        return _clip(first) + (f" (and {more} more)" if more else "")

    def _node_reason(self, node: str, level: Nagios) -> str:
        top = next((f for f in self.nodes[node].findings if f.status == level), None)
        return f"{node}: [{top.check}] {top.message}" if top else f"{node} {level.name}"

    def summary_line(self) -> str:
        """The Nagios status line, the reason first: `acceptance: CRITICAL - node3: [outlier] slow node: ...;
        2 job(s), 4 node(s): 1 critical | jobs=2;;;0 ...`."""
        figures = self.figures()
        judged = [f"{figures['nodes_critical']} critical" if figures["nodes_critical"] else "",
                  f"{figures['nodes_warning']} warning" if figures["nodes_warning"] else ""]
        verdict = ", ".join(x for x in judged if x) or "none failing"
        counts = (f"{figures['jobs']} job(s), {figures['nodes']} node(s): {verdict}"
                  + (f"; {figures['problems']} unreadable" if figures["problems"] else ""))
        why = self.reason()
        text = f"{why}; {counts}" if why else counts
        return status_line("acceptance", self.status, text, self.perf())

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.name,
            "exit_code": int(self.status),
            "figures": self.figures(),
            "jobs": [
                {"job_id": j.job_id, "kind": j.kind, "partition": j.partition, "nodes": list(j.nodes),
                 "finished": R.format_time(j.finished), "passed": j.passed, "status": j.status.name,
                 "headline": j.headline, "current": j.current}
                for j in self.jobs
            ],
            "nodes": {
                name: {"status": v.status.name, "jobs": v.jobs,
                       "last_finished": R.format_time(v.last_finished) if v.last_finished else None,
                       "reasons": [_reason(f) for f in v.findings],
                       "history": [_reason(f) for f in v.history]}
                for name, v in sorted(self.nodes.items())
            },
            "findings": [_reason(f) for f in self.findings],
            "history": [_reason(f) for f in self.history],
            "problems": self.problems,
            "topology": self.topology,
            "health": self.health,
            "summary": self.summary_line().split(" | ", 1)[0],
            "thresholds": self.thresholds.as_dict() if self.thresholds else None,
        }


def _clip(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 3] + "..."


def _reason(finding: Finding) -> dict[str, Any]:
    """A finding in the report JSON: the shared model's keys, plus `status` (= severity), the name this JSON
    used before the findings were one model."""
    return {"status": finding.severity.name, **finding.as_dict()}


# ---- selection -------------------------------------------------------------------------------------------


def select(jobs: list[R.JobResult], job: str | None = None, since: datetime | None = None) -> list[R.JobResult]:
    """--job: that job's results; --since: every result finished since; neither: the latest result of each
    kind in each partition."""
    if job is not None:
        return [r for r in jobs if r.job_id == job]
    if since is not None:
        return [r for r in jobs if r.job.finished >= since]
    latest: dict[tuple[str, str | None], R.JobResult] = {}
    for r in jobs:
        key = (r.kind, r.job.partition)
        if key not in latest or r.job.finished >= latest[key].job.finished:
            latest[key] = r
    return sorted(latest.values(), key=lambda r: r.job.finished)


# ---- checks ----------------------------------------------------------------------------------------------


def gate_findings(result: R.JobResult, part: PartitionConfig | None) -> list[Finding]:
    f: list[Finding] = []
    job, kind = result.job_id, result.kind

    def add(node: str | None, status: Nagios, message: str, check: str = "gate") -> None:
        f.append(_finding(node, status, check, message, job, kind))

    if result.skipped:  # all_reduce on MIG slices (gpuclust.accept.migskip): a note, nothing to gate
        add(None, Nagios.OK, f"{kind} job {job}: {result.skipped}", "skipped")
        return f
    # pairwise: the pairs themselves say who is slow (outlier_findings); only a run without pairs is a crash
    explained = kind == "pairwise" and bool(result.pairs)
    if not result.job.passed and not explained:
        culprits = result.job.failed_nodes or result.nodes
        why = "; ".join(result.job.reasons) or "the run did not pass"
        for node in culprits:
            add(node, Nagios.CRITICAL, f"{kind} job {job} failed: {why}", "run")
        if not result.nodes:
            add(None, Nagios.CRITICAL, f"{kind} job {job} failed: {why}", "run")
    if part is None:
        add(None, Nagios.WARNING, f"partition {result.job.partition!r} is not in the site config: no gates applied")
        return f
    if kind == "allreduce":
        wrong = sum(s.wrong for s in result.sweep)
        if wrong and result.job.passed:  # a result that says passed but carries wrong elements
            for node in result.nodes:
                add(node, Nagios.CRITICAL, f"{wrong} wrong elements in the sweep")
        if part.expect_busbw_gbps is not None:
            figure = large_size_busbw(result, part.busbw_min_size)
            floor = part.expect_busbw_gbps * (1 - part.busbw_tolerance)
            if figure is None:
                top = max((s.size for s in result.sweep), default=0)
                add(None, Nagios.WARNING, f"sweep stopped at {top} bytes, below busbw_min_size "
                                          f"{part.busbw_min_size}: busbw not gated")
            elif figure < floor:
                for node in result.nodes:
                    add(node, Nagios.CRITICAL, f"all_reduce busbw {figure:.3f} GB/s at sizes >= "
                                               f"{part.busbw_min_size} B is below {floor:.3f} "
                                               f"({part.expect_busbw_gbps:g} - {part.busbw_tolerance:.0%})")
    elif kind == "storage":
        tol = part.storage_tolerance
        expect = {"staging": part.expect_staging_mbps, "checkpoint_write": part.expect_checkpoint_write_mbps,
                  "checkpoint_read": part.expect_checkpoint_read_mbps}
        for rec in result.storage:
            node = rec.read_node or rec.node
            if not rec.ok:
                targets = [node] if node != "*" else list(result.nodes)
                for t in targets:
                    add(t, Nagios.CRITICAL, f"{rec.metric} failed its check")
                continue
            want = expect.get(rec.metric)
            if want is not None and rec.mbps < want * (1 - tol):
                add(node, Nagios.CRITICAL, f"{rec.metric} {rec.mbps:.1f} MB/s is below {want * (1 - tol):.1f} "
                                           f"({want:g} - {tol:.0%})")
            if rec.metric == "checkpoint_read" and part.expect_restore_seconds is not None:
                limit = part.expect_restore_seconds * (1 + tol)
                if rec.seconds > limit:
                    add(node, Nagios.CRITICAL, f"restore of the checkpoint written on {rec.write_node} took "
                                               f"{rec.seconds:.1f} s, over {limit:.1f} s")
    return f


def outlier_findings(result: R.JobResult) -> list[Finding]:
    """The pairwise verdict, exactly as the job reached it (gpuclust.accept.verdict.judge): named nodes are
    CRITICAL, confirmed slow links and pairs never measured WARNING, wrong elements CRITICAL."""
    if result.kind != "pairwise":
        return []
    judged = verdict.judge(result.pairs)
    analysis = judged.analysis
    f = []
    for node in sorted(analysis.node_outliers):
        f.append(_finding(node, Nagios.CRITICAL, "outlier", judged.node_message(node), result.job_id, result.kind))
    for pair in sorted(analysis.link_outliers):
        for node in pair:
            f.append(_finding(node, Nagios.WARNING, "outlier", judged.link_message(pair), result.job_id, result.kind))
    if analysis.unconfirmed:
        f.append(_finding(None, Nagios.WARNING, "outlier",
                         "slow pairs measured once only, nothing named on them: "
                         + ", ".join(f"{a}-{b}" for a, b in analysis.unconfirmed), result.job_id, result.kind))
    named = set(analysis.node_outliers)
    for pair in judged.failed:
        if set(pair) & named or pair in analysis.link_outliers:
            continue  # already the verdict's
        for node in pair:
            f.append(_finding(node, Nagios.WARNING, "outlier", f"pair {pair[0]}-{pair[1]}: no successful "
                                                              f"measurement", result.job_id, result.kind))
    for (a, b), wrong in judged.wrong:
        for node in (a, b):
            f.append(_finding(node, Nagios.CRITICAL, "gate", f"pair {a}-{b}: {wrong} wrong elements",
                             result.job_id, result.kind))
    if not analysis.enough_nodes and result.pairs:
        f.append(_finding(None, Nagios.OK, "outlier", "fewer than 3 nodes: pairwise cannot name a node",
                         result.job_id, result.kind))
    return f


def gres_findings(result: R.JobResult, part: PartitionConfig | None,
                  mig: Mapping[str, MigCards] | None = None) -> list[Finding]:
    """`mig`: the job's MIG nodes (gpuclust.accept.topology.mig_cards), whose device files are their physical
    cards while Slurm declares one GPU per MIG instance: those are compared in cards."""
    f: list[Finding] = []

    def add(node: str, status: Nagios, message: str) -> None:
        f.append(_finding(node, status, "gres", message, result.job_id, result.kind))

    for node in result.nodes:
        ranks = result.ranks_on(node)
        configured = result.job.node_gres.get(node)
        cfg_count = gres_gpu_count(configured) if configured is not None else None
        cfg_type = gres_gpu_type(configured) if configured else None
        shown = configured or "no GPUs"
        if part is not None and cfg_count is not None:
            if part.gpus_per_node is not None and cfg_count != part.gpus_per_node:
                add(node, Nagios.CRITICAL, f"Slurm declares {shown} on {node}; partition {part.name} expects "
                                           f"{part.gpus_per_node} GPUs per node")
            if part.gpu_type and cfg_type and cfg_type != part.gpu_type:
                add(node, Nagios.CRITICAL, f"Slurm declares GPU type {cfg_type} on {node}; partition {part.name} "
                                           f"expects {part.gpu_type}")
        found = [r.devices_found for r in ranks if r.devices_found is not None]
        cards = (mig or {}).get(node)
        glob = next((r.device_glob for r in ranks if r.device_glob), "?")
        if found and cards is not None:
            declared = f"Slurm declares {cfg_count} GPUs on {node} ({shown}), MIG instances of {cards.basis()}"
            if cards.cards is None:
                add(node, Nagios.WARNING, f"{declared}; the node's {max(found)} GPU devices ({glob}) not compared")
            elif max(found) != cards.cards:
                add(node, Nagios.CRITICAL, f"{declared}, but the node has {max(found)} GPU devices ({glob})")
        elif found and cfg_count is not None and max(found) != cfg_count:
            add(node, Nagios.CRITICAL, f"Slurm declares {cfg_count} GPUs on {node} ({shown}) but the node has "
                                       f"{max(found)} GPU devices ({glob})")
        alloc = result.job.declared_gres.get(node)
        alloc_count = gres_gpu_count(alloc) if alloc else 0
        if alloc_count:
            unbound = [r.rank for r in ranks if r.cuda_visible_devices is None]
            if unbound:
                add(node, Nagios.CRITICAL, f"job {result.job_id} was allocated {alloc} on {node} but rank(s) "
                                           f"{','.join(map(str, unbound))} had no CUDA_VISIBLE_DEVICES (nothing bound)")
            elif ranks:
                bound = {d.strip() for r in ranks for d in (r.cuda_visible_devices or "").split(",") if d.strip()}
                if len(bound) != alloc_count:
                    add(node, Nagios.CRITICAL, f"job {result.job_id} was allocated {alloc_count} GPUs on {node} "
                                               f"({alloc}) but its ranks were bound to {len(bound)}")
        for r in ranks:
            cuda_rank = r.backend == "nccl" or r.gpus_seen > 0
            if cuda_rank and r.gpus_bound is not None and r.gpus_seen != r.gpus_bound:
                add(node, Nagios.CRITICAL, f"rank {r.rank} on {node}: torch sees {r.gpus_seen} GPUs of the "
                                           f"{r.gpus_bound} bound to it")
            # (a MIG node's several types: a MIG device's name carries its own profile, one of them)
            types = [t for t in (cfg_type or "").split(",") if t] if cards is not None else [cfg_type or ""]
            model = (r.gpu_model or "").lower().replace(" ", "")
            if r.gpu_model and cfg_type and not any(t.lower() in model for t in types):
                add(node, Nagios.WARNING, f"rank {r.rank} on {node} runs on a {r.gpu_model}, GRES type is {cfg_type}")
    return f


def figures_by_metric(result: R.JobResult, part: PartitionConfig | None,
                      healthy_only: bool = False) -> dict[str, dict[str, float]]:
    """node_metrics per metric, then node; healthy_only: less the nodes the run found at fault."""
    out: dict[str, dict[str, float]] = {}
    for node, figures in node_metrics(result, part).items():
        if healthy_only and not result.node_passed(node):
            continue
        for metric, value in figures.items():
            out.setdefault(metric, {})[node] = value
    return out


def baseline_findings(result: R.JobResult, history: list[R.JobResult], part: PartitionConfig | None) -> list[Finding]:
    """Each node's figure against the median of its own earlier runs of the same kind and partition, leaving out
    the runs that found the node at fault.

    A per-node figure (pairwise, storage) is first set against the run as a whole: the median over the run's
    healthy nodes (PEER_MIN_NODES or more) against the median of the earlier runs' medians. When the run fell
    as a whole (CPU contention, a busy fabric or file system), that is one finding without a node, and a node is
    named only where it fell further than the run by more than the tolerance. A job-wide figure (all_reduce
    busbw) names each of the job's nodes."""
    f: list[Finding] = []
    prior = sorted((h for h in history if h.kind == result.kind and h.job.partition == result.job.partition
                    and h.job.finished < result.job.finished), key=lambda h: h.job.finished)
    if not prior:
        return f
    series: dict[tuple[str, str], list[float]] = {}  # (node, metric) -> the node's figures, oldest first
    run_series: dict[str, list[float]] = {}  # metric -> each earlier run's median over its healthy nodes
    for h in prior:
        for metric, figures in figures_by_metric(h, part, healthy_only=True).items():
            for node, value in figures.items():
                series.setdefault((node, metric), []).append(value)
            run_series.setdefault(metric, []).append(stats.median(list(figures.values())))
    noise_drop = pairwise_noise_drop(result, prior) if result.kind == "pairwise" else 0.0
    gates = part or DEFAULT_PARTITION
    for metric, values in figures_by_metric(result, part).items():
        tol = max(gates.busbw_tolerance if "busbw" in metric else gates.storage_tolerance, noise_drop)
        run_ratio = 1.0  # capped at 1: a run that improved overall still names a node below its own baseline
        healthy = [value for node, value in values.items() if result.node_passed(node)]
        run_base = stats.baseline(run_series.get(metric, []), BASELINE_MIN_RUNS, BASELINE_WINDOW)
        if metric not in JOB_WIDE_METRICS and len(healthy) >= PEER_MIN_NODES and run_base:
            run_median = stats.median(healthy)
            run_ratio = min(1.0, run_median / run_base)
            if run_ratio < 1 - tol:
                runs = min(len(run_series[metric]), BASELINE_WINDOW)
                f.append(_finding(None, Nagios.WARNING, "baseline",
                                 f"{metric}: the run's median {run_median:.3f} over {len(healthy)} nodes is "
                                 f"{1 - run_ratio:.0%} below the median {run_base:.3f} of its last {runs} runs: a "
                                 f"drop of the whole run (load, fabric, file system), not of one node",
                                 result.job_id, result.kind))
        for node, value in sorted(values.items()):
            base = stats.baseline(series.get((node, metric), []), BASELINE_MIN_RUNS, BASELINE_WINDOW)
            if base is None or base <= 0:
                continue
            ratio = value / base
            if ratio >= 1 - tol or ratio / run_ratio >= 1 - tol:
                continue
            runs = min(len(series[(node, metric)]), BASELINE_WINDOW)
            message = (f"{metric} {value:.3f} is {1 - ratio:.0%} below {node}'s own baseline {base:.3f} "
                       f"(median of its last {runs} runs)")
            if run_ratio < 1.0:
                message += f", the whole run being {1 - run_ratio:.0%} below its own"
            f.append(_finding(node, Nagios.WARNING, "baseline", message, result.job_id, result.kind))
    return f


def pairwise_noise_drop(result: R.JobResult, prior: list[R.JobResult]) -> float:
    """The drop a pairwise figure can show by noise alone against its baseline: each run measured its own noise
    (sigma of log busbw); the figure and the baseline (the last BASELINE_WINDOW of `prior`, oldest first, their
    median sigma) are both that noisy, so PAIR_Z combined sigmas."""
    now = verdict.pair_analysis(result).noise_sigma
    recent = prior[-BASELINE_WINDOW:]
    before = stats.median([verdict.pair_analysis(h).noise_sigma for h in recent]) if recent else 0.0
    return 1.0 - math.exp(-verdict.PAIR_Z * math.hypot(now, before))


def drift_findings(result: R.JobResult, history: list[R.JobResult]) -> list[Finding]:
    """gpuclust.accept.drift's judgement, as audit's acceptance.versions makes it: a node's versions against
    its own previous result, and the job's nodes against each other (a strict majority names the odd ones;
    a tie names nobody and is a run-level warning)."""
    f: list[Finding] = []
    current = {node: v.as_dict() for node, v in result.node_versions().items()}
    for node, versions in current.items():
        previous = None
        for h in sorted(history, key=lambda h: h.job.finished, reverse=True):
            if h.job.finished < result.job.finished and node in h.node_versions():
                previous = h
                break
        if previous is None:
            continue
        for d in drift.changes(node, previous.node_versions()[node].as_dict(), versions, previous.job_id):
            f.append(_finding(node, Nagios.WARNING, "drift",
                              f"{d.field} changed on {node}: {d.before} -> {d.after} (since job {d.since_job})",
                              result.job_id, result.kind))
    if len(current) < 2:
        return f
    for judged in drift.across(current):
        if judged.majority is None:
            spread = "; ".join(f"{value} on {hostlist.fold(nodes)}" for value, nodes in judged.groups)
            f.append(_finding(None, Nagios.WARNING, "drift", f"{judged.field} differs with no majority: {spread}",
                              result.job_id, result.kind))
            continue
        majority = judged.majority[0]
        for value, nodes in judged.odd:
            for node in nodes:
                f.append(_finding(node, Nagios.WARNING, "drift",
                                  f"{judged.field} on {node} is {value}, the job's other nodes run {majority}",
                                  result.job_id, result.kind))
    return f


def health_summary(snapshots: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per node: each source's state in the after-snapshot (`ok` or `unavailable: why`), nvbandwidth's sums
    (GB/s per test case, recorded beside all_reduce) and dcgmi diag's failed tests, where the before-snapshot
    ran them."""
    out: dict[str, Any] = {}
    for node, phases in sorted(snapshots.items()):
        after, before = phases.get("after") or {}, phases.get("before") or {}
        sources = (after or before).get("sources", {})
        entry: dict[str, Any] = {"sources": {name: src.get("status") if src.get("status") == "ok"
                                             else f"unavailable: {src.get('reason')}"
                                             for name, src in sorted(sources.items())
                                             if name not in ("dcgm", "nvbandwidth")}}
        nvb = before.get("sources", {}).get("nvbandwidth") or {}
        if nvb.get("status") == "ok":
            entry["nvbandwidth_gbps"] = {r.get("testcase") or "?": r.get("sum_gbps") for r in nvb.get("results", [])}
        dcgm = before.get("sources", {}).get("dcgm") or {}
        if dcgm:
            entry["dcgm"] = ({"level": dcgm.get("level"),
                              "failed": sorted({r.get("test") for r in dcgm.get("results", [])
                                                if r.get("status") == "fail"})}
                             if dcgm.get("status") == "ok" else f"unavailable: {dcgm.get('reason')}")
        out[node] = entry
    return out


def health_findings(result: R.JobResult, results_root: str | None, config: SiteConfig,
                    summaries: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """The job's hardware-health findings from its before/after snapshots (gpuclust.accept.health): one per
    fault, check `health-<class>`. A job run without snapshots (ACCEPT_HEALTH=0, or older than them) has none;
    a job with snapshots for only some nodes is UNKNOWN for the others. Findings at OK level (a source that
    is not there, say no nvidia-smi on a CPU node) are kept: visible in --json, never a failure."""
    from gpuclust.accept.health.collect import load_snapshots
    from gpuclust.accept.health.job import HEALTH_DIR
    from gpuclust.accept.health.kit import to_finding
    from gpuclust.accept.health.rules import judge_job
    from gpuclust.accept.health.sources.dcgm import DcgmResult, judge_dcgm

    if not results_root:
        return []
    directory = Path(results_root) / HEALTH_DIR / result.job_id
    if not directory.is_dir():
        return []
    snapshots, problems = load_snapshots(directory)
    if summaries is not None:
        summaries[result.job_id] = health_summary(snapshots)
    found = judge_job(snapshots, config.health, result.nodes)
    for node, phases in snapshots.items():
        dcgm = (phases.get("before") or {}).get("sources", {}).get("dcgm") or {}
        if dcgm.get("status") == "ok":
            found.extend(judge_dcgm(node, [DcgmResult.from_dict(r) for r in dcgm.get("results", [])]))
    out = [to_finding(hf, result.job_id, result.kind, config.health) for hf in found]
    out.extend(_finding(None, Nagios.UNKNOWN, "health-input", str(p), result.job_id, result.kind) for p in problems)
    return out


def attribute_job_wide(findings: list[Finding], result: R.JobResult) -> list[Finding]:
    """A job-wide judgement (the all_reduce busbw gate, a failed run without culprits) is copied to every node
    of the job: one figure cannot say which node. When the job's own health counters name some of its nodes
    CRITICAL (the cause), that judgement stays on those nodes, and for the others becomes one run-level
    finding: their counters were clean, so they are not named and `--drain` does not drain them."""
    nodes = set(result.nodes)
    causes = {n for f in findings if f.check.startswith("health-") and f.status == Nagios.CRITICAL
              for n in f.node_list}
    if not causes or causes >= nodes:
        return findings
    by_message: dict[tuple[str, str], set[str]] = {}
    for f in findings:
        if f.check in ("gate", "run") and len(f.node_list) == 1:
            by_message.setdefault((f.check, f.message), set()).update(f.node_list)
    job_wide = {key for key, seen in by_message.items() if seen == nodes}
    out: list[Finding] = []
    for f in findings:
        key = (f.check, f.message)
        if key in job_wide and f.node_list[0] not in causes:
            continue
        out.append(f)
    for check, message in sorted(job_wide):
        out.append(_finding(None, Nagios.CRITICAL, check, f"{message} (the job as a whole; attributed to "
                            f"{hostlist.fold(sorted(causes))}, whose health counters failed)",
                            result.job_id, result.kind))
    return out


def headline(result: R.JobResult, part: PartitionConfig | None) -> str:
    if result.skipped:
        return result.skipped
    if result.kind == "allreduce":
        if not result.sweep:
            return "no sweep figures"
        top = max(result.sweep, key=lambda s: s.size)
        large = large_size_busbw(result, (part or DEFAULT_PARTITION).busbw_min_size)
        wrong = sum(s.wrong for s in result.sweep)
        tail = f", busbw(>= min size) {large:.3f}" if large is not None else ""
        return f"{len(result.ranks)} ranks, busbw {top.busbw_gbps:.3f} GB/s at {top.size} B{tail}, {wrong} wrong"
    if result.kind == "pairwise":
        analysis = verdict.pair_analysis(result)
        links = [f"{a}-{b}" for a, b in sorted(analysis.link_outliers)]
        return (f"{len(result.pairs)} pairs, outlier nodes: {', '.join(sorted(analysis.node_outliers)) or 'none'}"
                + (f", slow links: {', '.join(links)}" if links else ""))
    parts = []
    for rec in result.storage:
        where = f"{rec.write_node}->{rec.read_node}" if rec.read_node else rec.node
        parts.append(f"{rec.metric}[{where}] {rec.mbps:.0f} MB/s")
    return ", ".join(parts) or "no storage figures"


def latest_runs(chosen: list[R.JobResult]) -> dict[tuple[str, str], R.JobResult]:
    """(node, kind) -> the run that is the node's latest evidence of that kind: the one finished last (of two
    finished at once, the later in the list). A later pass makes an earlier failure history, and the reverse."""
    latest: dict[tuple[str, str], R.JobResult] = {}
    for result in sorted(chosen, key=lambda r: r.job.finished):
        for node in result.nodes:
            latest[(node, result.kind)] = result
    return latest


def judge_results(results_dir: str, config: SiteConfig, job: str | None = None, since: datetime | None = None,
                  thresholds: Thresholds | None = None) -> Report:
    """`accept report`: `evaluate` over the results directory."""
    return evaluate(R.scan_results(results_dir), config, job=job, since=since, thresholds=thresholds)


def evaluate(scan: R.ResultScan, config: SiteConfig, job: str | None = None,
             since: datetime | None = None, thresholds: Thresholds | None = None) -> Report:
    """Judge the selected results. A node's state is its latest evidence: per kind, the node's last run (by the
    result's finish time); its earlier runs' findings are kept as the node's history and do not count in the
    status. Run-level findings of a job whose every node ran the same kind again later are history too."""
    from gpuclust.accept import topology

    history = scan.jobs
    chosen = sorted(select(history, job=job, since=since), key=lambda r: r.job.finished)
    latest = latest_runs(chosen)
    old_findings: list[Finding] = []
    nodes: dict[str, NodeVerdict] = {}
    run_findings: list[Finding] = []
    summaries: list[JobSummary] = []
    problems = [str(p) for p in scan.problems
                if job is None or p.file.endswith(f"-{job}.jsonl")]  # --job: only that job's files count
    topologies: dict[str, dict[str, Any]] = {}
    healths: dict[str, dict[str, Any]] = {}
    for result in chosen:
        part = config.partitions.get(result.job.partition or "")
        mig = topology.mig_cards(result, scan.root, config.gpu_type_shares)  # (MIG nodes: counted in cards)
        findings = [*gate_findings(result, part), *outlier_findings(result), *gres_findings(result, part, mig),
                    *baseline_findings(result, history, part), *drift_findings(result, history)]
        findings.extend(health_findings(result, scan.root, config, healths))
        findings = attribute_job_wide(findings, result)
        compared, topo_findings = topology.compare(result, part, mig)  # announced vs seen (gpuclust.accept.topology)
        findings.extend(topo_findings)
        if compared:
            topologies[result.job_id] = compared
        job_status = Nagios.worst(*(x.status for x in findings)) if findings else Nagios.OK

        def superseded(node: str, result: R.JobResult = result) -> bool:
            return latest.get((node, result.kind), result) is not result

        current = not result.nodes or not all(superseded(n) for n in result.nodes)
        summaries.append(JobSummary(result.job_id, result.kind, result.job.partition, result.nodes,
                                    result.job.finished, result.job.passed, headline(result, part), job_status,
                                    current))
        for node in result.nodes:
            verdict = nodes.setdefault(node, NodeVerdict(node))
            verdict.jobs.append(f"{result.kind}-{result.job_id}")
            if verdict.last_finished is None or result.job.finished > verdict.last_finished:
                verdict.last_finished = result.job.finished
        for finding in findings:
            if not finding.node_list:
                (run_findings if current else old_findings).append(finding)
            for node in finding.node_list:
                verdict = nodes.setdefault(node, NodeVerdict(node))
                if superseded(node):
                    verdict.history.append(finding)
                else:
                    verdict.add(finding)
    root = scan.root or "the results directory"
    if problems:
        run_findings.append(_finding(None, Nagios.UNKNOWN, "input",
                                     f"{len(problems)} unreadable result line(s)/file(s): {problems[0]}"
                                     + (" (see problems)" if len(problems) > 1 else "")))
    if not chosen:
        what = f"for job {job}" if job else (f"since {since.isoformat()}" if since else "at all")
        seen = f" ({len(history)} other result(s) there)" if history and (job or since) else ""
        run_findings.append(_finding(None, Nagios.UNKNOWN, "input",
                                     f"no acceptance results {what} under {root}{seen}; run `gpuclust accept "
                                     f"submit` or point --results-dir at the results"))
    node_states = [v.status for v in nodes.values()]
    if thresholds is not None:  # -w/-c decide what the CRITICAL nodes make of the status
        failing = node_states.count(Nagios.CRITICAL)
        node_states = [s for s in node_states if s != Nagios.CRITICAL] + [thresholds.judge(failing)]
    status = Nagios.worst(Nagios.OK, *node_states, *(f.status for f in run_findings))
    return Report(status, nodes, summaries, run_findings, problems, topologies, healths, old_findings, thresholds)


def _action_note(finding: Finding) -> str:
    """ -> ACTION for a health finding that has one (NVIDIA's Xid catalog or gpuclust's per class)."""
    action = finding.details.get("action") if finding.check.startswith("health-") else None
    return f" -> {action}" if isinstance(action, str) and action else ""


def render_table(report: Report) -> str:
    from gpuclust.output import format_table, terminal_lines

    lines = [report.summary_line()]
    if report.jobs:
        lines.append("")
        lines.extend(format_table(
            ["JOB", "KIND", "PARTITION", "FINISHED", "STATUS", "SUMMARY"],
            [[j.job_id, j.kind, j.partition or "-", j.finished.strftime("%Y-%m-%d %H:%M"),
              j.status.name if j.current else f"{j.status.name} (history)", j.headline]
             for j in report.jobs]).splitlines())
    if report.nodes:
        lines.append("")
        rows = []
        for name, v in sorted(report.nodes.items()):
            reasons = [f"[{f.check}] {f.message}{_action_note(f)}" for f in v.findings if f.status != Nagios.OK] \
                or ["-"]
            rows.append([name, v.status.name, reasons[0]])
            rows.extend(["", "", extra] for extra in reasons[1:])
        lines.extend(format_table(["NODE", "STATUS", "REASONS"], rows).splitlines())
    for finding in report.findings:
        lines.append(f"{finding.status.name}: [{finding.check}] {finding.message}")
    earlier = [(name, f) for name, v in sorted(report.nodes.items()) for f in v.history if f.status != Nagios.OK]
    earlier += [("-", f) for f in report.history if f.status != Nagios.OK]
    if earlier:
        lines.append("")
        lines.append("history: findings of earlier runs, superseded by a later run of the same kind on the node "
                     "(not counted in the status)")
        finished = {j.job_id: j.finished.strftime("%Y-%m-%d %H:%M") for j in report.jobs}
        lines.extend(format_table(["NODE", "JOB", "FINISHED", "STATUS", "REASON"],
                                  [[name, f"{f.kind}-{f.job_id}", finished.get(f.job_id or "", "-"), f.status.name,
                                    f"[{f.check}] {f.message}"] for name, f in earlier]).splitlines())
    for problem in report.problems:
        lines.append(f"problem: {problem}")
    # Every line escaped on its own: a message's newline or escape sequence stays inside its line.
    return terminal_lines(lines)


def nodes_with(report: Report, check: str, status: Nagios | None = None) -> list[str]:
    """Nodes that have a finding of this check (and status); for tests and scripts."""
    return sorted(n for n, v in report.nodes.items()
                  if any(f.check == check and (status is None or f.status == status) for f in v.findings))

