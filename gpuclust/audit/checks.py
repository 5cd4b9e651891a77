"""The audit's checks over typed records. Each check returns Findings; severities are chosen as an admin
on call would want them paged:

node state
  node.down          CRITICAL  DOWN, FAIL/FAILING, NOT_RESPONDING (`*`) or INVALID nodes, with the full reason,
                               who set it and how long ago
  node.drain         WARNING   drained or draining nodes (full reason, user, age); CRITICAL when more than half
                               of the partition's nodes are unavailable (down + drained)
                               (audit partition -w/-c: ranges on the unavailable nodes set both severities)
  node.other         OK        maintenance, reboot pending, powered down: listed, not alarming
  node.gres_used     CRITICAL  more GPUs in use than configured on a node (Slurm's books are wrong); else OK
                               with the partition's GPUs in use
  node.gres_drained  WARNING   GPUs drained on an otherwise usable node
homogeneity (the majority configuration vs the odd nodes out, as folded node sets)
  homogeneity.gres     CRITICAL  GPU type or count differs
  homogeneity.cpus     WARNING
  homogeneity.memory   WARNING   RealMemory
  homogeneity.features WARNING
  homogeneity.version  WARNING   slurmd version
  config.gpus          CRITICAL  nodes whose GPU count/type differs from the site config (gpus_per_node, gpu_type)
limits
  partition.state      CRITICAL  partition DOWN or INACTIVE; WARNING when DRAIN; CRITICAL with no nodes
  limits.maxtime       WARNING   no MaxTime and no site max_time; or MaxTime shorter than the site policy's
                                 max_time (the policy admits jobs Slurm will never start)
  limits.oversubscribe WARNING   OverSubscribe=YES or FORCE on a GPU partition
  limits.gpu           WARNING   a QOS or association GPU limit (GrpTRES, MaxTRES, MaxTRESPU, MaxTRESPA,
                                 MaxTRESPerNode) above what the partition has: it can never bind here
  limits.typed_tres    WARNING   a typed GPU limit (gres/gpu:TYPE), or the partition's GPU type, with no
                                 matching AccountingStorageTRES entry: Slurm neither counts nor enforces it
  limits.accounts      WARNING   accounts allowed on the partition (AllowAccounts, site allowed_accounts) with
                                 no association, or allowed by the site policy but denied by Slurm
  limits.accounting    UNKNOWN   sacctmgr could not be read: limits not checked
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from gpuclust.config.site import PartitionConfig, SiteConfig
from gpuclust.exitcodes import Nagios
from gpuclust.nagiosrange import Thresholds
from gpuclust.slurm.hostlist import fold
from gpuclust.slurm.parse import format_slurm_duration
from gpuclust.slurm.records import NodeRecord, PartitionRecord, TresLimits

from .collect import ClusterSnapshot
from .findings import Finding


def format_age(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


# ---- node state ---------------------------------------------------------------------------------------

def _reason_text(node: NodeRecord, now: datetime) -> str:
    text = node.reason or "no reason given"
    who = []
    if node.reason_user:
        who.append(f"by {node.reason_user}")
    if node.reason_time:
        who.append(f"{format_age(now - node.reason_time)} ago ({node.reason_time.strftime('%Y-%m-%dT%H:%M:%SZ')})")
    return f"{text!r}" + (f", set {' '.join(who)}" if who else "")


def _group_by_reason(nodes: Sequence[NodeRecord]) -> dict[tuple[str, str | None, str | None], list[NodeRecord]]:
    groups: dict[tuple[str, str | None, str | None], list[NodeRecord]] = {}
    for node in nodes:
        key = (node.state_text, node.reason, node.reason_user)
        groups.setdefault(key, []).append(node)
    return groups


def check_node_state(nodes: Sequence[NodeRecord], now: datetime, thresholds: Thresholds | None = None) -> list[Finding]:
    """`thresholds` (audit partition -w/-c) on the number of unavailable (down + drained) nodes decide the
    severity of node.down and node.drain instead of the defaults: a site with 200 nodes pages on its own count,
    not on the first drained node."""
    out: list[Finding] = []
    down = [n for n in nodes if n.is_down]
    drained = [n for n in nodes if n.is_drain and not n.is_down]
    unavailable = len(down) + len(drained)
    most = len(nodes) > 0 and unavailable * 2 > len(nodes)
    gated = thresholds.judge(unavailable) if thresholds is not None else None
    gate_note = (f"; {unavailable} of {len(nodes)} nodes unavailable (-w {thresholds.warning or '-'} "
                 f"-c {thresholds.critical or '-'})" if thresholds is not None else "")
    for (state, reason, user), group in _group_by_reason(down).items():
        first = min(group, key=lambda n: n.reason_time or now)
        out.append(Finding.make(
            "node.down", Nagios.CRITICAL if gated is None else gated, f"{state}: {_reason_text(first, now)}{gate_note}",
            [n.name for n in group],
            state=state, reason=reason, reason_user=user,
            reason_time=first.reason_time.isoformat() if first.reason_time else None,
        ))
    for (state, reason, user), group in _group_by_reason(drained).items():
        first = min(group, key=lambda n: n.reason_time or now)
        busy = first.state in ("ALLOCATED", "MIXED", "COMPLETING")
        what = "draining (jobs still running)" if busy else "drained"
        sev = gated if gated is not None else Nagios.CRITICAL if most else Nagios.WARNING
        extra = gate_note or (f"; {unavailable} of {len(nodes)} nodes unavailable" if most else "")
        out.append(Finding.make(
            "node.drain", sev, f"{what}: {_reason_text(first, now)}{extra}", [n.name for n in group],
            state=state, reason=reason, reason_user=user,
            reason_time=first.reason_time.isoformat() if first.reason_time else None,
        ))
    other_flags = {"MAINTENANCE", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN", "POWERING_UP",
                   "POWERING_DOWN", "POWER_DOWN", "PLANNED", "RESERVED"}
    others = [n for n in nodes if n.flags & other_flags and not n.is_down and not n.is_drain]
    for state, names in _by(others, lambda n: n.state_text).items():
        out.append(Finding.make("node.other", Nagios.OK, f"{state}", names))
    if not down and not drained:
        out.append(Finding.make("node.state", Nagios.OK, f"all {len(nodes)} nodes up, none drained",
                                [n.name for n in nodes]))
    out.extend(check_gres_usage(nodes))
    return out


def check_gres_usage(nodes: Sequence[NodeRecord]) -> list[Finding]:
    out: list[Finding] = []
    over = [n for n in nodes if n.gpus_used > n.gpu_count]
    for node in over:
        out.append(Finding.make("node.gres_used", Nagios.CRITICAL,
                                f"{node.gpus_used} GPUs in use but only {node.gpu_count} configured", [node.name]))
    usable = [n for n in nodes if not n.is_down and not n.is_drain]
    drained_gres = [n for n in usable if n.gpus_drained]
    for count, group in _by(drained_gres, lambda n: n.gpus_drained).items():
        out.append(Finding.make("node.gres_drained", Nagios.WARNING, f"{count} GPU(s) drained per node", group))
    if not over:
        used = sum(n.gpus_used for n in nodes)
        total = sum(n.gpu_count for n in nodes)
        available = sum(n.gpu_count for n in usable) - sum(n.gpus_drained for n in usable)
        out.append(Finding.make("node.gres_used", Nagios.OK,
                                f"{used} of {total} GPUs in use; {available} on usable nodes",
                                [n.name for n in nodes if n.gpus_used], used=used, total=total,
                                available=available))
    return out


def _by(nodes: Iterable[NodeRecord], key: Callable[[NodeRecord], Any]) -> dict[Any, list[str]]:
    groups: dict[Any, list[str]] = {}
    for node in nodes:
        groups.setdefault(key(node), []).append(node.name)
    return groups


# ---- homogeneity --------------------------------------------------------------------------------------

HOMOGENEITY_FIELDS: tuple[tuple[str, str, str, Nagios], ...] = (
    # (check suffix, config() key, label, severity when inhomogeneous)
    ("gres", "gres", "GRES", Nagios.CRITICAL),
    ("cpus", "cpus", "CPUs", Nagios.WARNING),
    ("memory", "real_memory_mb", "RealMemory (MB)", Nagios.WARNING),
    ("features", "features", "features", Nagios.WARNING),
    ("version", "version", "slurmd version", Nagios.WARNING),
)


def majority_groups(values: dict[str, Any]) -> list[tuple[Any, list[str]]]:
    """{node: value} -> [(value, nodes)], largest group first (ties: by value text), so [0] is the majority."""
    groups: dict[Any, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value, []).append(node)
    return sorted(groups.items(), key=lambda kv: (-len(kv[1]), str(kv[0])))


def check_homogeneity(nodes: Sequence[NodeRecord]) -> list[Finding]:
    out: list[Finding] = []
    if not nodes:
        return out
    configs = {n.name: n.config() for n in nodes}
    for suffix, key, label, severity in HOMOGENEITY_FIELDS:
        groups = majority_groups({name: cfg[key] for name, cfg in configs.items()})
        value, majority = groups[0]
        shown = _show(value)
        if len(groups) == 1:
            out.append(Finding.make(f"homogeneity.{suffix}", Nagios.OK, f"{label} {shown} on all {len(majority)} nodes",
                                    majority))
            continue
        tie = len(groups[1][1]) == len(majority)
        basis = f"{fold(majority)} ({'no majority; largest group' if tie else 'majority'}) {_have(majority)} {shown}"
        for odd_value, odd_nodes in groups[1:]:
            out.append(Finding.make(
                f"homogeneity.{suffix}", severity,
                f"{label} {_show(odd_value)} on {fold(odd_nodes)}, but {basis}", odd_nodes,
                value=odd_value, majority_value=value, majority_nodes=fold(majority),
            ))
    return out


def _have(nodes: Sequence[str]) -> str:
    return "has" if len(nodes) == 1 else "have"


def _show(value: Any) -> str:
    return "(none)" if value in (None, "") else str(value)


def check_site_expectations(nodes: Sequence[NodeRecord], part_cfg: PartitionConfig | None) -> list[Finding]:
    if part_cfg is None:
        return []
    out: list[Finding] = []
    if part_cfg.gpus_per_node is not None:
        wrong = [n for n in nodes if n.gpu_count != part_cfg.gpus_per_node]
        for count, group in _by(wrong, lambda n: n.gpu_count).items():
            out.append(Finding.make("config.gpus", Nagios.CRITICAL,
                                    f"{count} GPUs per node, site config expects gpus_per_node = "
                                    f"{part_cfg.gpus_per_node}", group))
    if part_cfg.gpu_type:
        wrong = [n for n in nodes if n.gpu_count and n.gpu_types != (part_cfg.gpu_type,)]
        for types, group in _by(wrong, lambda n: n.gpu_types).items():
            out.append(Finding.make("config.gpus", Nagios.CRITICAL,
                                    f"GPU type {','.join(types)}, site config expects gpu_type = {part_cfg.gpu_type}",
                                    group))
    if not out:
        out.append(Finding.make("config.gpus", Nagios.OK, "GPU count and type match the site config",
                                [n.name for n in nodes]))
    return out


# ---- partition and limits -----------------------------------------------------------------------------

def check_partition(part: PartitionRecord, part_cfg: PartitionConfig | None) -> list[Finding]:
    out: list[Finding] = []
    if not part.nodes:
        out.append(Finding.make("partition.state", Nagios.CRITICAL, "partition has no nodes"))
    elif part.state in ("DOWN", "INACTIVE"):
        out.append(Finding.make("partition.state", Nagios.CRITICAL,
                                f"partition State={part.state}: no jobs start here", part.nodes))
    elif part.state == "DRAIN":
        out.append(Finding.make("partition.state", Nagios.WARNING,
                                "partition State=DRAIN: accepts no new jobs", part.nodes))
    else:
        out.append(Finding.make("partition.state", Nagios.OK, f"State={part.state}, {len(part.nodes)} nodes, "
                                f"{part.total_gpus} GPUs"))
    policy_max = part_cfg.max_time_s if part_cfg else None
    unlimited = part.max_time_s is None or part.max_time_s < 0
    if unlimited and policy_max is None:
        out.append(Finding.make("limits.maxtime", Nagios.WARNING if part.total_gpus else Nagios.OK,
                                "MaxTime=UNLIMITED and no max_time in the site config: jobs can hold GPUs forever"))
    elif unlimited:
        out.append(Finding.make("limits.maxtime", Nagios.OK,
                                f"MaxTime=UNLIMITED; the site policy caps jobs at {_dur(policy_max)} (job_submit)"))
    elif policy_max is not None and part.max_time_s is not None and policy_max > part.max_time_s:
        out.append(Finding.make("limits.maxtime", Nagios.WARNING,
                                f"MaxTime={_dur(part.max_time_s)} is shorter than the site policy's max_time "
                                f"{_dur(policy_max)}: jobs the policy admits stay pending (PartitionTimeLimit)"))
    else:
        out.append(Finding.make("limits.maxtime", Nagios.OK, f"MaxTime={_dur(part.max_time_s)}"))
    mode = part.oversubscribe.split(":")[0]
    if part.total_gpus and mode in ("YES", "FORCE"):
        out.append(Finding.make("limits.oversubscribe", Nagios.WARNING,
                                f"OverSubscribe={part.oversubscribe} on a GPU partition: jobs share CPUs and memory "
                                "of GPU nodes (GPUs themselves are never shared) and slow each other down"))
    else:
        out.append(Finding.make("limits.oversubscribe", Nagios.OK, f"OverSubscribe={part.oversubscribe}"))
    return out


def _dur(seconds: int | None) -> str:
    if seconds is None or seconds < 0:
        return "UNLIMITED"
    return format_slurm_duration(seconds)


def _account_allowed(part: PartitionRecord, account: str) -> bool:
    if account in part.deny_accounts:
        return False
    return part.allow_accounts is None or account in part.allow_accounts


def relevant_limits(snap: ClusterSnapshot, part: PartitionRecord) -> list[TresLimits]:
    """QOS usable on the partition (its QoS=, AllowQos or every QOS) and associations that can run here."""
    out: list[TresLimits] = []
    for qos in snap.qos or []:
        if qos.name == part.qos or part.allow_qos is None or qos.name in part.allow_qos:
            out.append(qos.gpu)
    for assoc in snap.assocs or []:
        if assoc.partition not in (None, part.name) or not _account_allowed(part, assoc.account):
            continue
        out.append(assoc.gpu)
    return out


def check_limits(snap: ClusterSnapshot, part: PartitionRecord, nodes: Sequence[NodeRecord]) -> list[Finding]:
    if snap.qos is None or snap.assocs is None:
        return [Finding.make("limits.accounting", Nagios.UNKNOWN,
                             f"QOS/association limits not checked: {snap.accounting_error}")]
    out: list[Finding] = []
    total = part.total_gpus
    by_type: Counter[str] = Counter()
    for node in nodes:
        for g in node.gres:
            if g.name == "gpu" and g.type:
                by_type[g.type] += g.count
    per_node = max((n.gpu_count for n in nodes), default=0)
    for lim in relevant_limits(snap, part):
        for column, keys in sorted(lim.limits.items()):
            for key, value in sorted(keys.items()):
                gtype = key.split(":", 1)[1] if ":" in key else None
                cap = per_node if column == "MaxTRESPerNode" else (by_type[gtype] if gtype else total)
                where = f"per node of partition {part.name}" if column == "MaxTRESPerNode" else \
                    f"in partition {part.name}" + (f" of type {gtype}" if gtype else "")
                if total and value > cap:
                    out.append(Finding.make(
                        "limits.gpu", Nagios.WARNING,
                        f"{lim.owner}: {column} {key}={value} is above the {cap} GPUs {where}: it can never bind here",
                        owner=lim.owner, column=column, tres=key, limit=value, partition_gpus=cap,
                    ))
    if not out:
        out.append(Finding.make("limits.gpu", Nagios.OK,
                                f"every QOS/association GPU limit usable here is at most the partition's {total} GPUs"))
    out.extend(check_typed_tres(snap, part, by_type))
    return out


def check_typed_tres(snap: ClusterSnapshot, part: PartitionRecord, by_type: Counter[str]) -> list[Finding]:
    out: list[Finding] = []
    tres = snap.accounting_tres
    if part.total_gpus and "gres/gpu" not in tres:
        out.append(Finding.make("limits.typed_tres", Nagios.WARNING,
                                "AccountingStorageTRES lacks gres/gpu: GPU use is not accounted and GPU limits "
                                "are not enforced"))
    for gtype in sorted(by_type):
        if f"gres/gpu:{gtype}" not in tres:
            out.append(Finding.make("limits.typed_tres", Nagios.WARNING,
                                    f"the partition's GPUs are type {gtype}, but AccountingStorageTRES lacks "
                                    f"gres/gpu:{gtype}: typed usage is not accounted and typed limits not enforced"))
    for lim in relevant_limits(snap, part):
        for column, keys in sorted(lim.limits.items()):
            for key in sorted(keys):
                if ":" in key and key not in tres:
                    out.append(Finding.make(
                        "limits.typed_tres", Nagios.WARNING,
                        f"{lim.owner}: {column} {key}={keys[key]} is not enforced: AccountingStorageTRES lacks {key}",
                        owner=lim.owner, column=column, tres=key,
                    ))
    return out


def check_site_typed_limits(site: SiteConfig | None, tres: frozenset[str]) -> list[Finding]:
    """Typed GPU limits in the site config (gpu_limit.TYPE, max_gpus_per_user.TYPE) that Slurm cannot enforce."""
    if site is None:
        return []
    out = []
    owners: list[tuple[str, dict[str, int]]] = []
    for acct in site.accounts.values():
        owners.append((f"site config [account {acct.name}] gpu_limit", acct.limits.gpu_limit_by_type))
    for qos in site.qos.values():
        owners.append((f"site config [qos {qos.name}] gpu_limit", qos.limits.gpu_limit_by_type))
        owners.append((f"site config [qos {qos.name}] max_gpus_per_user", qos.limits.max_gpus_per_user_by_type))
    for owner, typed in owners:
        for gtype, value in sorted(typed.items()):
            if f"gres/gpu:{gtype}" not in tres:
                out.append(Finding.make("limits.typed_tres", Nagios.WARNING,
                                        f"{owner}.{gtype} = {value} cannot be enforced: AccountingStorageTRES lacks "
                                        f"gres/gpu:{gtype}", owner=owner, tres=f"gres/gpu:{gtype}"))
    return out


def check_accounts(snap: ClusterSnapshot, part: PartitionRecord, part_cfg: PartitionConfig | None) -> list[Finding]:
    if snap.assocs is None:
        return []
    out: list[Finding] = []
    with_assoc = {a.account for a in snap.assocs if a.partition in (None, part.name)}
    for account in part.allow_accounts or ():
        if account not in with_assoc:
            out.append(Finding.make("limits.accounts", Nagios.WARNING,
                                    f"AllowAccounts names {account}, which has no association in cluster "
                                    f"{snap.cluster}: nobody can submit under it", account=account))
    for account in (part_cfg.allowed_accounts or ()) if part_cfg else ():
        if account not in with_assoc:
            out.append(Finding.make("limits.accounts", Nagios.WARNING,
                                    f"site config allowed_accounts names {account}, which has no association in "
                                    f"cluster {snap.cluster}", account=account))
        elif not _account_allowed(part, account):
            out.append(Finding.make("limits.accounts", Nagios.WARNING,
                                    f"site config allows account {account} here, but the partition's "
                                    "AllowAccounts/DenyAccounts refuse it", account=account))
    if not out:
        out.append(Finding.make("limits.accounts", Nagios.OK, "every account allowed here has an association"))
    return out
