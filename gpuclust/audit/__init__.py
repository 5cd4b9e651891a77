"""Partition audit: is a GPU partition healthy, homogeneous and correctly limited?

`audit_partitions(client, names, ...)` reads Slurm once (gpuclust.audit.collect), runs the checks in
gpuclust.audit.checks (node state, homogeneity, limits), gpuclust.audit.acceptance (acceptance freshness) and
gpuclust.audit.baseline (--baseline diff), and returns one AuditReport per partition. Severities are the Nagios
states; a report's status is the worst of its findings, and the command exits with it (0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN). UNKNOWN alone means the audit could not look: Slurm unreachable (the caller catches
SlurmError), no such partition, or sacctmgr/baseline unreadable for those checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone

from gpuclust.config.site import SITE, SiteConfig
from gpuclust.exitcodes import Nagios
from gpuclust.nagiosrange import Thresholds
from gpuclust.slurm.client import SlurmClient

from . import acceptance, baseline, checks, lemon, mig
from .collect import ClusterSnapshot, collect_snapshot
from .findings import AuditReport, Finding, PartitionFigures, worst

CHECK_FAMILIES = ("state", "homogeneity", "limits", "acceptance", "lemon")

__all__ = ["AuditReport", "CHECK_FAMILIES", "Finding", "audit_partitions", "audit_snapshot", "unknown_report",
           "worst"]


def unknown_report(partition: str, message: str, check: str = "slurm") -> AuditReport:
    return AuditReport(partition, [Finding.make(check, Nagios.UNKNOWN, message)],
                       generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def audit_snapshot(
    snap: ClusterSnapshot,
    partition: str,
    site: SiteConfig | None = None,
    *,
    now: datetime | None = None,
    baseline_path: str | None = None,
    skip: Sequence[str] = (),
    results_dir: str | None = None,
    thresholds: Thresholds | None = None,
    lemon_days: int | None = None,  # None: [lemon] audit_lookback
) -> AuditReport:
    now = now or datetime.now(timezone.utc)
    report = AuditReport(partition, cluster=snap.cluster, generated_at=now.isoformat(timespec="seconds"),
                         thresholds=thresholds)
    part = snap.partitions.get(partition)
    if part is None:
        known = ", ".join(sorted(snap.partitions)) or "none"
        report.add([Finding.make("partition", Nagios.UNKNOWN, f"no partition {partition!r} (known: {known})")])
        return report
    missing = [n for n in part.nodes if n not in snap.nodes]
    nodes = [snap.nodes[n] for n in part.nodes if n in snap.nodes]
    report.figures = PartitionFigures(
        nodes=len(part.nodes), gpus=sum(n.gpu_count for n in nodes), gpus_used=sum(n.gpus_used for n in nodes),
        down=sum(1 for n in nodes if n.is_down), drained=sum(1 for n in nodes if n.is_drain and not n.is_down))
    report.nodes = {n.name: {**n.config(), "state": n.state_text, "reason": n.reason} for n in nodes}
    for note in snap.notes:
        report.add([Finding.make("source", Nagios.OK, note)])
    if missing:
        report.add([Finding.make("partition.nodes", Nagios.UNKNOWN,
                                 "nodes listed by the partition but unknown to scontrol show node", missing)])
    part_cfg = site.partitions.get(partition) if site else None
    gpu_shares = site.gpu_type_shares if site else None  # ([gpu_type] gpu_share: the layout every plane reads)
    if "state" not in skip:
        report.add(checks.check_partition(part, part_cfg)[:1])
        report.add(checks.check_node_state(nodes, now, thresholds))
    if "homogeneity" not in skip:
        report.add(checks.check_homogeneity(nodes))
        report.add(checks.check_site_expectations(nodes, part_cfg))
        report.add(mig.check_layout(nodes, gpu_shares))
    if "limits" not in skip:
        report.add(checks.check_partition(part, part_cfg)[1:])
        report.add(checks.check_limits(snap, part, nodes))
        report.add(checks.check_site_typed_limits(site, snap.accounting_tres))
        report.add(checks.check_accounts(snap, part, part_cfg))
    if "acceptance" not in skip:
        report.add(acceptance.check_gpuclust_drains(nodes))
        rdir = results_dir if results_dir is not None else (site.results_dir if site else "")
        stale_days = site.acceptance_stale_days if site else SITE.default("acceptance_stale_days")
        if rdir:
            report.add(acceptance.check_acceptance(rdir, part.nodes, snap.cluster, stale_days, now,
                                                   mig_only=mig.mig_only_nodes(nodes, gpu_shares)))
        else:
            report.add([Finding.make("acceptance", Nagios.OK,
                                     "acceptance not checked: no results_dir (site config or --results-dir)")])
        report.add(mig.check_mig_report(rdir or None, nodes, gpu_shares))
    if "lemon" not in skip:
        report.add(lemon.check_lemons(site, part.nodes, now, lemon_days))
    if baseline_path:
        report.add(baseline.diff_baseline(baseline_path, partition, {n.name: n for n in nodes}))
    return report


def audit_partitions(
    client: SlurmClient,
    partitions: Sequence[str] | None,
    site: SiteConfig | None = None,
    *,
    source: str = "auto",
    now: datetime | None = None,
    baseline_path: str | None = None,
    skip: Sequence[str] = (),
    results_dir: str | None = None,
    thresholds: Thresholds | None = None,
    lemon_days: int | None = None,  # None: [lemon] audit_lookback
) -> list[AuditReport]:
    """Audit the named partitions (None: every partition). Raises SlurmError when scontrol cannot be read."""
    snap = collect_snapshot(client, source, accounting="limits" not in skip)
    names = list(partitions) if partitions is not None else list(snap.partitions)  # scontrol's order
    return [audit_snapshot(snap, name, site, now=now, baseline_path=baseline_path, skip=skip,
                           results_dir=results_dir, thresholds=thresholds, lemon_days=lemon_days) for name in names]
