"""Acceptance freshness per node, read from the acceptance results store (gpuclust.accept.results).

  acceptance.store      WARNING   no results directory, or unreadable result lines (counted, first one shown)
  acceptance.all_reduce WARNING   no passing all_reduce (allreduce or pairwise job) for a node, or the last one
                                  is older than [site] acceptance_stale_days; OK with the oldest age otherwise;
                                  OK "not run" for nodes whose GPUs are all MIG slices (NCCL has no P2P between
                                  MIG instances: acceptance skips all_reduce there, gpuclust.accept.submit)
  acceptance.storage    WARNING   the same for storage jobs
  acceptance.failures   CRITICAL  a job after the node's last pass named the node in failed_nodes;
                        WARNING   a job after the last pass failed without naming a culprit
  acceptance.versions   WARNING   driver/CUDA/NCCL/torch on a node differs from the partition's strict majority,
                                  or differs with no majority (a tie names nobody); from each node's most
                                  recent job with rank records, judged by gpuclust.accept.drift
  acceptance.drain      WARNING   nodes drained by `gpuclust accept report --drain` (reason "gpuclust:<class>:..."),
                                  shown as gpuclust's own (check_gpuclust_drains)

"Passing" is JobResult.node_passed: correctness, not the performance gates `accept report` applies.
Jobs recorded for another cluster (job.cluster set and different) are ignored: node names repeat across sites.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

from gpuclust.accept import VERSION_FIELDS as ACCEPT_VERSION_FIELDS
from gpuclust.accept import JobResult, Versions, drift_across, last_pass_by_node, scan_results
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.hostlist import fold
from gpuclust.slurm.records import NodeRecord

from .checks import format_age
from .findings import Finding

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("all_reduce", ("allreduce", "pairwise")),
    ("storage", ("storage",)),
)
VERSION_FIELDS = ACCEPT_VERSION_FIELDS


def check_acceptance(results_dir: str, nodes: Sequence[str], cluster: str | None, stale_days: int,
                     now: datetime, mig_only: Sequence[str] = ()) -> list[Finding]:
    if not results_dir or not Path(results_dir).is_dir():
        return [Finding.make("acceptance.store", Nagios.WARNING,
                             f"no acceptance results store at {results_dir or '(results_dir unset)'}: "
                             "acceptance was never run here (gpuclust accept)", nodes)]
    scan = scan_results(results_dir)
    out: list[Finding] = []
    if scan.problems:
        first = scan.problems[0]
        out.append(Finding.make("acceptance.store", Nagios.WARNING,
                                f"{len(scan.problems)} problem(s) reading {results_dir}; first: {first}",
                                problems=[str(p) for p in scan.problems[:20]]))
    jobs = [j for j in scan.jobs if not cluster or not j.job.cluster or j.job.cluster == cluster]
    stale = timedelta(days=stale_days)
    for label, kinds in CATEGORIES:
        judged = [n for n in nodes if n not in mig_only] if label == "all_reduce" else nodes
        out.extend(_freshness(label, kinds, jobs, judged, stale, now))
    skipped = [n for n in nodes if n in mig_only]
    if skipped:
        out.append(Finding.make("acceptance.all_reduce", Nagios.OK, "all_reduce not run: the nodes' GPUs are MIG "
                                "slices (NCCL has no P2P between MIG instances)", skipped))
    out.extend(_failures_since(jobs, nodes))
    out.extend(_version_drift(jobs, nodes))
    return out


def _freshness(label: str, kinds: tuple[str, ...], jobs: Sequence[JobResult], nodes: Sequence[str],
               stale: timedelta, now: datetime) -> list[Finding]:
    last = last_pass_by_node(jobs, kinds)
    check = f"acceptance.{label}"
    never = [n for n in nodes if n not in last]
    old = [n for n in nodes if n in last and now - last[n] > stale]
    fresh = [n for n in nodes if n in last and now - last[n] <= stale]
    out: list[Finding] = []
    if never:
        out.append(Finding.make(check, Nagios.WARNING, f"no passing {label} result", never))
    # One finding per node for stale ones: each has its own age, which is the point of the check.
    for node in old:
        out.append(Finding.make(check, Nagios.WARNING,
                                f"last passing {label} {format_age(now - last[node])} ago "
                                f"(stale after {stale.days}d)", [node], last_pass=last[node].isoformat()))
    if fresh:
        oldest = min(last[n] for n in fresh)
        out.append(Finding.make(check, Nagios.OK,
                                f"passing {label} within {stale.days}d (oldest {format_age(now - oldest)} ago)",
                                fresh, last_pass={n: last[n].isoformat() for n in fresh}))
    return out


def _failures_since(jobs: Sequence[JobResult], nodes: Sequence[str]) -> list[Finding]:
    out: list[Finding] = []
    for label, kinds in CATEGORIES:
        last = last_pass_by_node(jobs, kinds)
        named: dict[str, list[JobResult]] = {}
        unattributed: dict[str, list[JobResult]] = {}
        for job in jobs:
            if job.kind not in kinds:
                continue
            for node in job.nodes:
                if node not in nodes or job.node_passed(node):
                    continue
                if node in last and job.job.finished <= last[node]:
                    continue
                target = named if node in job.job.failed_nodes else unattributed
                target.setdefault(node, []).append(job)
        for node, failed in sorted(named.items()):
            latest = failed[-1]
            out.append(Finding.make(
                "acceptance.failures", Nagios.CRITICAL,
                f"{len(failed)} {label} job(s) since the last pass named this node as failed; latest "
                f"{latest.kind} job {latest.job_id}: {'; '.join(latest.job.reasons) or 'no reason recorded'}",
                [node], jobs=[j.job_id for j in failed]))
        for node, failed in sorted(unattributed.items()):
            if node in named:
                continue
            latest = failed[-1]
            out.append(Finding.make(
                "acceptance.failures", Nagios.WARNING,
                f"{len(failed)} failed {label} job(s) since the last pass (no culprit named); latest "
                f"{latest.kind} job {latest.job_id}: {'; '.join(latest.job.reasons) or 'no reason recorded'}",
                [node], jobs=[j.job_id for j in failed]))
    return out


def _version_drift(jobs: Sequence[JobResult], nodes: Sequence[str]) -> list[Finding]:
    """Each node's latest versions, judged across the partition by gpuclust.accept.drift (as accept report
    judges a job's nodes): a strict majority names the odd nodes out; a tie names nobody, and is a warning."""
    latest: dict[str, Versions] = {}
    for job in jobs:  # oldest first, so later jobs overwrite
        for node, versions in job.node_versions().items():
            if node in nodes:
                latest[node] = versions
    out: list[Finding] = []
    per_node = {node: v.as_dict() for node, v in latest.items()}
    for judged in drift_across(per_node, VERSION_FIELDS):
        name = judged.field
        if judged.uniform:
            value, group = judged.groups[0]
            out.append(Finding.make("acceptance.versions", Nagios.OK,
                                    f"{name} {_shown(value)} on all {len(group)} nodes with results", group))
        elif judged.majority is None:
            spread = "; ".join(f"{_shown(value)} on {fold(group)}" for value, group in judged.groups)
            out.append(Finding.make("acceptance.versions", Nagios.WARNING,
                                    f"{name} differs with no majority: {spread}", per_node, field=name,
                                    values={_shown(v): fold(g) for v, g in judged.groups}))
        else:
            value, majority = judged.majority
            for odd_value, odd_nodes in judged.odd:
                out.append(Finding.make(
                    "acceptance.versions", Nagios.WARNING,
                    f"{name} {_shown(odd_value)} on {fold(odd_nodes)}, but {fold(majority)} (majority) "
                    f"{'has' if len(majority) == 1 else 'have'} {_shown(value)}", odd_nodes,
                    field=name, value=odd_value, majority_value=value))
    return out


def _shown(value: str | None) -> str:
    return "(none)" if value is None else value


# = gpuclust.accept.drain.OWN_PREFIXES (not imported: no cycle): the taxonomy `gpuclust:<class>:<detail>` and
# the earlier `gpuclust accept:` form
GPUCLUST_DRAIN_PREFIXES = ("gpuclust:", "gpuclust accept:")


def check_gpuclust_drains(nodes: Sequence[NodeRecord]) -> list[Finding]:
    """acceptance.drain WARNING: nodes drained by `gpuclust accept report --drain` (reason
    'gpuclust:<class>:<detail> ...', or the earlier 'gpuclust accept: ...'), shown as gpuclust's own: the same command resumes them once an acceptance run passes again.
    Drains with any other reason are someone else's (node.drain reports them; gpuclust never touches them)."""
    ours = [n for n in nodes if n.is_drain and (n.reason or "").startswith(GPUCLUST_DRAIN_PREFIXES)]
    groups: dict[str, list[NodeRecord]] = {}
    for node in ours:
        groups.setdefault(node.reason or "", []).append(node)
    out = []
    for reason, group in sorted(groups.items()):
        first = min((n.reason_time for n in group if n.reason_time), default=None)
        out.append(Finding.make(
            "acceptance.drain", Nagios.WARNING,
            f"drained by gpuclust acceptance (its own drain; `gpuclust accept report --drain` resumes it once it "
            f"passes again): {reason!r}", [n.name for n in group],
            owner="gpuclust", reason=reason, drained_at=first.isoformat() if first else None))
    return out
