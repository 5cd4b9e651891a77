"""GPU quotas: bring QOS and association limits in slurmdbd in line with the site config.

Managed keys (only these TRES are ever touched; other TRES in the same field are left alone, because
sacctmgr's `set GrpTRES=gres/gpu=4` merges into the existing list):

| config key                              | sacctmgr field                              |
|-----------------------------------------|---------------------------------------------|
| [account A] / [qos Q] gpu_limit[.TYPE]   | GrpTRES gres/gpu[:TYPE]                     |
| [account A] / [qos Q] gpu_hours_budget   | GrpTRESMins gres/gpu (hours x 60)           |
| [account A] / [qos Q] max_gpus_per_job   | MaxTRES (per job) gres/gpu                  |
| [qos Q] max_gpus_per_user[.TYPE]         | MaxTRESPerUser gres/gpu[:TYPE]              |
| [account A] max_gpus_per_user            | GrpTRES gres/gpu on each user association   |

A key absent from the config is not managed (never cleared). Typed keys need `gres/gpu:TYPE` in
AccountingStorageTRES; without it slurmdbd cannot hold the limit, so the plan warns and leaves it out.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from gpuclust.config.site import GpuLimits, SiteConfig
from gpuclust.config.values import parse_slurm_name
from gpuclust.errors import SlurmError
from gpuclust.slurm.client import SlurmClient
from gpuclust.slurm.parse import accounting_tres, parse_parsable, parse_show_config, parse_tres

QOS_FORMAT = "format=Name,GrpTRES,GrpTRESMins,MaxTRES,MaxTRESPerUser"
ASSOC_FORMAT = "format=Cluster,Account,User,Partition,GrpTRES,GrpTRESMins,MaxTRES"
# sacctmgr's header for each field above (MaxTRESPerUser prints as MaxTRESPU).
_HEADER = {"GrpTRES": "GrpTRES", "GrpTRESMins": "GrpTRESMins", "MaxTRES": "MaxTRES", "MaxTRESPerUser": "MaxTRESPU"}


@dataclass(frozen=True)
class Command:
    """One sacctmgr invocation (argv after `sacctmgr`) and why it is needed."""

    args: tuple[str, ...]
    reason: str

    @property
    def argv(self) -> list[str]:
        return ["sacctmgr", *self.args]

    @property
    def line(self) -> str:
        return shlex.join(self.argv)

    @property
    def stdin_line(self) -> str:
        """The same command for an interactive `sacctmgr -i` session (values are validated names, no quoting)."""
        return " ".join(a for a in self.args if a != "-i")


@dataclass
class QuotaPlan:
    """The sacctmgr commands that bring the cluster's GPU limits in line with the site config, and warnings."""

    cluster: str
    commands: list[Command] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "cluster": self.cluster,
            "commands": [{"argv": c.argv, "reason": c.reason} for c in self.commands],
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class SlurmQuotaState:
    """What slurmdbd holds now: the QOS rows, the cluster's association rows, and the accounting TRES."""

    qos: dict[str, dict[str, str]]  # name -> row
    assocs: list[dict[str, str]]  # rows of the config's cluster
    accounting_tres: frozenset[str]


def read_state(client: SlurmClient, cluster: str) -> SlurmQuotaState:
    qos_rows = parse_parsable(client.sacctmgr(["show", "qos", QOS_FORMAT, "--parsable2"]))
    assoc_rows = parse_parsable(client.sacctmgr(["show", "assoc", "where", f"cluster={cluster}", ASSOC_FORMAT, "--parsable2"]))
    return SlurmQuotaState(
        qos={row["Name"]: row for row in qos_rows},
        assocs=[row for row in assoc_rows if row.get("Cluster", cluster) == cluster],
        accounting_tres=accounting_tres(parse_show_config(client.scontrol(["show", "config"]))),
    )


def _gpu_tres(untyped: int | None, by_type: dict[str, int]) -> dict[str, int]:
    """{'gres/gpu': N, 'gres/gpu:h100': M} from an untyped limit and typed ones (types sorted)."""
    tres: dict[str, int] = {}
    if untyped is not None:
        tres["gres/gpu"] = untyped
    for gtype, n in sorted(by_type.items()):
        tres[f"gres/gpu:{gtype}"] = n
    return tres


def _desired(limits: GpuLimits, *, qos: bool) -> dict[str, dict[str, int]]:
    """{sacctmgr field: {tres: value}} for one QOS or account association."""
    out: dict[str, dict[str, int]] = {}
    grp = _gpu_tres(limits.gpu_limit, limits.gpu_limit_by_type)
    if grp:
        out["GrpTRES"] = grp
    if limits.gpu_hours_budget is not None:
        out["GrpTRESMins"] = {"gres/gpu": int(round(limits.gpu_hours_budget * 60))}
    if limits.max_gpus_per_job is not None:
        out["MaxTRES"] = {"gres/gpu": limits.max_gpus_per_job}
    if qos:
        per_user = _gpu_tres(limits.max_gpus_per_user, limits.max_gpus_per_user_by_type)
        if per_user:
            out["MaxTRESPerUser"] = per_user
    return out


def _drift(desired: dict[str, dict[str, int]], row: dict[str, str] | None) -> dict[str, dict[str, int]]:
    """The subset of desired whose values differ from the row's."""
    out: dict[str, dict[str, int]] = {}
    for fld, tres in desired.items():
        current = parse_tres(row.get(_HEADER[fld], "")) if row is not None else {}
        diff = {k: v for k, v in tres.items() if current.get(k) != str(v)}
        if diff:
            out[fld] = diff
    return out


def _set_args(changes: dict[str, dict[str, int]]) -> list[str]:
    return [f"{fld}=" + ",".join(f"{k}={v}" for k, v in tres.items()) for fld, tres in changes.items()]


def _reason(changes: dict[str, dict[str, int]], row: dict[str, str] | None) -> str:
    parts = []
    for fld, tres in changes.items():
        current = parse_tres(row.get(_HEADER[fld], "")) if row is not None else {}
        for key, value in tres.items():
            parts.append(f"{fld} {key}: {current.get(key, 'unset')} -> {value}")
    return "; ".join(parts)


def _filter_known(desired: dict[str, dict[str, int]], known: frozenset[str], where: str, warnings: list[str]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for fld, tres in desired.items():
        kept = {}
        for key, value in tres.items():
            if key in known:
                kept[key] = value
            else:
                warnings.append(f"{where}: {fld} {key}={value} needs {key} in AccountingStorageTRES "
                                f"(slurm.conf), which has only {','.join(sorted(t for t in known if t.startswith('gres/'))) or 'no gres'}; "
                                "skipped")
        if kept:
            out[fld] = kept
    return out


def plan_quotas(config: SiteConfig, state: SlurmQuotaState) -> QuotaPlan:
    """The sacctmgr commands that bring slurmdbd's limits in line with the config (empty when in sync)."""
    cluster = config.cluster_name
    plan = QuotaPlan(cluster)
    known = state.accounting_tres
    for name in sorted(config.qos):
        desired = _filter_known(_desired(config.qos[name].limits, qos=True), known, f"[qos {name}]", plan.warnings)
        row = state.qos.get(name)
        if row is None:
            plan.commands.append(Command(("-i", "add", "qos", parse_slurm_name(name)), f"QOS {name} does not exist"))
        qchanges = _drift(desired, row)
        if qchanges:
            plan.commands.append(Command(
                ("-i", "modify", "qos", "where", f"name={parse_slurm_name(name)}", "set", *_set_args(qchanges)),
                f"qos {name}: {_reason(qchanges, row)}"))
    for name in sorted(config.accounts):
        acct = config.accounts[name]
        where = f"[account {name}]"
        desired = _filter_known(_desired(acct.limits, qos=False), known, where, plan.warnings)
        per_user = ({"GrpTRES": {"gres/gpu": acct.limits.max_gpus_per_user}}
                    if acct.limits.max_gpus_per_user is not None else {})
        per_user = _filter_known(per_user, known, where + " max_gpus_per_user", plan.warnings)
        if not desired and not per_user:
            continue
        rows = [r for r in state.assocs if r.get("Account") == name]
        account_rows = [r for r in rows if not r.get("User")]
        if not account_rows:
            plan.warnings.append(f"{where}: no association for account {name} on cluster {cluster}; create it first "
                                 f"(sacctmgr add account {name} cluster={cluster}); its limits were not planned")
            continue
        changes: dict[str, dict[str, int]] = {}
        for row in account_rows:  # the account row, and any per-partition account rows
            for fld, tres in _drift(desired, row).items():
                changes.setdefault(fld, {}).update(tres)
        if changes:
            plan.commands.append(Command(
                ("-i", "modify", "account", "where", f"name={parse_slurm_name(name)}", f"cluster={parse_slurm_name(cluster)}",
                 "set", *_set_args(changes)),
                f"account {name}: {_reason(changes, account_rows[0])}"))
        if per_user:
            users = sorted({r["User"] for r in rows if r.get("User")})
            for user in users:
                try:
                    safe_user = parse_slurm_name(user)
                except ValueError:
                    plan.warnings.append(f"{where}: user name {user!r} is not a safe Slurm name; skipped")
                    continue
                user_rows = [r for r in rows if r.get("User") == user]
                uchanges: dict[str, dict[str, int]] = {}
                for row in user_rows:
                    for fld, tres in _drift(per_user, row).items():
                        uchanges.setdefault(fld, {}).update(tres)
                if uchanges:
                    plan.commands.append(Command(
                        ("-i", "modify", "user", "where", f"name={safe_user}", f"account={parse_slurm_name(name)}",
                         f"cluster={parse_slurm_name(cluster)}", "set", *_set_args(uchanges)),
                        f"user {user} in account {name}: {_reason(uchanges, user_rows[0])}"))
    return plan


def plan_from_slurm(config: SiteConfig, client: SlurmClient) -> QuotaPlan:
    return plan_quotas(config, read_state(client, config.cluster_name))


@dataclass
class ApplyResult:
    """What apply_plan did: the commands run, sacctmgr's output, and the plan made again afterwards."""

    applied: list[Command]
    output: str
    remaining: QuotaPlan


def apply_plan(config: SiteConfig, client: SlurmClient, plan: QuotaPlan) -> ApplyResult:
    """Run the plan in ONE `sacctmgr -i` session on stdin (each sacctmgr start costs ~0.4 s), then re-read
    slurmdbd and re-plan; anything still pending is an error naming the commands that did not take."""
    if not plan.commands:
        return ApplyResult([], "", plan)
    script = "".join(c.stdin_line + "\n" for c in plan.commands)
    output = client.sacctmgr(["-i"], input_text=script)
    remaining = plan_from_slurm(config, client)
    if remaining.commands:
        pending = "\n".join(c.line for c in remaining.commands)
        raise SlurmError(f"sacctmgr ran, but these limits are still not in place:\n{pending}\nsacctmgr said:\n{output.strip()}")
    return ApplyResult(list(plan.commands), output, remaining)
