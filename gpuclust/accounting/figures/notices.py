"""Per-recipient notices of a built report (`gpuclust report notify`, issue 43 item 3): one per user, and one per
account whose owner is known, each with the report's own figures for it.

The figures are the report's, copied, never recomputed: `gpu_use` is report.json gpu_use.by_user's (by_account's)
record, `runs` runs.by_user's (by_account's). Added here from the report's per-job table (gpu_use_jobs): the
cost of the held-idle GPU-hours at the site's price (config.price_per_gpu_hour of each job's GPU type and
partition) and the recipient's worst jobs by held-idle GPU-hours, each with the advice of the one-job waste
detectors (figures/waste.py) that the report has the facts for: a job's GPU memory peak against its GPU's
memory (gpu_too_large), its time limit where the table carries one (time_limit), and for a one-GPU job its
held-idle share (idle_gpu: the job's one GPU is the job). The per-GPU stretches, the node records and the
partition shares are not in the report: those detectors stay for `gpuclust job`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuclust.accounting.figures import waste
from gpuclust.accounting.figures.jsonrecords import iso_utc
from gpuclust.errors import SlurmOutputError
from gpuclust.slurm import hostlist

if TYPE_CHECKING:
    import pandas as pd

    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.config import SiteConfig

KINDS = ("user", "account")


@dataclass
class WorstJob:
    """One of a recipient's worst jobs by held-idle GPU-hours: its figures, cost and the detectors' findings."""

    job_id: str
    job_name: str | None
    partition: str | None
    gpu_type: str | None
    gpus: int
    node_list: str | None
    start: str | None
    end: str | None
    allocated_gpu_hours: float
    busy_gpu_hours: float | None
    held_idle_gpu_hours: float
    util_mean_pct: float | None
    telemetry: str | None
    cost: float | None  # allocated GPU-hours at the site's price (None: unpriced)
    held_idle_cost: float | None
    findings: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class UseNotice:
    """One recipient's figures: a user's, or an account's (with its users')."""

    kind: str  # user | account
    name: str
    cluster: str
    period_start: str
    period_end: str
    currency: str
    idle_threshold_pct: float
    gpu_use: dict[str, Any] | None  # report.json gpu_use.by_<kind>'s record (None: no GPU job ended in the period)
    runs: dict[str, Any] | None  # report.json runs.by_<kind>'s record
    held_idle_cost: float | None  # None: no priced held-idle GPU-hour known
    unpriced_held_idle_gpu_hours: float
    worst_jobs: list[WorstJob] = field(default_factory=list)
    users: list[dict[str, Any]] = field(default_factory=list)  # an account's: its users' gpu_use figures
    notes: list[str] = field(default_factory=list)
    account: str = ""  # a user's: the account of most of their allocated GPU-hours (an address template's {account})

    @property
    def allocated_gpu_hours(self) -> float:
        return float((self.gpu_use or {}).get("allocated_gpu_hours") or 0.0)

    def as_dict(self) -> dict[str, Any]:
        out = {k: val for k, val in self.__dict__.items() if k != "worst_jobs"}
        out["worst_jobs"] = [j.as_dict() for j in self.worst_jobs]
        return out


def _num(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text or None


def job_facts(row: dict[str, Any], config: SiteConfig, price: float | None) -> waste.JobFacts:
    """The waste detectors' facts of one gpu_use_jobs row: only what the report holds (module docstring)."""
    tel = config.telemetry
    gpus = int(row.get("gpus") or 0)
    covered_h, held_h = _num(row.get("covered_gpu_hours")), _num(row.get("held_idle_gpu_hours"))
    gpu_type = _text(row.get("gpu_type"))
    node_list = _text(row.get("node_list"))
    nodes = _node_count(node_list)
    gpu_facts: tuple[waste.GpuFacts, ...] = ()
    if gpus == 1 and covered_h is not None and held_h is not None:
        node = node_list if node_list and nodes == 1 else f"one of {node_list}" if node_list else "its node"
        gpu_facts = (waste.GpuFacts(node, gpu_type or "", covered_h * 3600,
                                    _num(row.get("util_mean_pct")), held_h * 3600),)
    timelimit = _num(row.get("timelimit_s"))
    return waste.JobFacts(
        job_id=str(row.get("job_id")), running=False, elapsed_s=_num(row.get("elapsed_s")) or 0.0,
        timelimit_s=timelimit if timelimit and timelimit > 0 else None, gpus=gpus, nodes=nodes, alloc_cpus=None,
        mem_mb=None, gpu_type=gpu_type, idle_threshold_pct=float(tel.idle_threshold_pct),
        idle_min_s=float(tel.idle_min_s), gpu_facts=gpu_facts, gpu_mem_max_mib=_num(row.get("gpu_mem_max_mib")),
        gpu_mem_total_mib=_num(row.get("gpu_mem_total_mib")), price_per_gpu_hour=price, currency=config.currency)


def _node_count(node_list: str | None) -> int:
    if not node_list:
        return 1
    try:
        return max(1, len(hostlist.expand(node_list)))
    except SlurmOutputError:
        return 1


def _price(config: SiteConfig, row: dict[str, Any]) -> float | None:
    return config.price_per_gpu_hour(_text(row.get("gpu_type")), _text(row.get("partition")))


def _worst_job(row: dict[str, Any], config: SiteConfig) -> WorstJob:
    price = _price(config, row)
    allocated = _num(row.get("allocated_gpu_hours")) or 0.0
    held = _num(row.get("held_idle_gpu_hours")) or 0.0
    found = [f.as_dict() for f in waste.findings(job_facts(row, config, price))] if "elapsed_s" in row else []
    return WorstJob(
        job_id=str(row.get("job_id")), job_name=_text(row.get("job_name")), partition=_text(row.get("partition")),
        gpu_type=_text(row.get("gpu_type")), gpus=int(row.get("gpus") or 0), node_list=_text(row.get("node_list")),
        start=iso_utc(row.get("start")), end=iso_utc(row.get("end")), allocated_gpu_hours=allocated,
        busy_gpu_hours=_num(row.get("busy_gpu_hours")), held_idle_gpu_hours=held,
        util_mean_pct=_num(row.get("util_mean_pct")), telemetry=_text(row.get("telemetry")),
        cost=None if price is None else allocated * price, held_idle_cost=None if price is None else held * price,
        findings=found)


def _rows(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    if frame is None or not len(frame):
        return []
    return [{str(k): val for k, val in r.items()} for r in frame.to_dict(orient="records")]


def notices(report: Report, config: SiteConfig, *, worst: int = 5,
            accounts: set[str] | frozenset[str] = frozenset()) -> list[UseNotice]:
    """A notice per user the report knows (gpu_use.by_user and runs.by_user, in name order), then one per
    account of `accounts` that the report knows."""
    data = report.data
    use = data.get("gpu_use") or {}
    runs = data.get("runs") or {}
    period = data.get("period") or {}
    jobs_frame = report.tables.get("gpu_use_jobs")
    jobs = _rows(jobs_frame)
    notes: list[str] = []
    if jobs_frame is None:
        # A partitioned build keeps no per-job table: the worst jobs come from the report's cluster-wide list.
        jobs = [dict(r) for r in use.get("worst_held_idle") or []]
        notes.append("the worst jobs are those of the report's cluster-wide list (gpu_use.worst_held_idle): this "
                     "period was built in parts, without a per-job table")
    out: list[UseNotice] = []
    for kind in KINDS:
        use_by = {str(r[kind]): r for r in use.get(f"by_{kind}") or []}
        runs_by = {str(r[kind]): r for r in runs.get(f"by_{kind}") or []}
        names = sorted(set(use_by) | set(runs_by))
        if kind == "account":
            names = [n for n in names if n in accounts]
        by_name: dict[str, list[dict[str, Any]]] = {}
        for row in jobs:
            by_name.setdefault(str(row.get(kind)), []).append(row)
        for name in names:
            mine = by_name.get(name, [])
            held_cost = 0.0
            priced = False
            unpriced = 0.0
            for row in mine:
                held = _num(row.get("held_idle_gpu_hours"))
                if not held:
                    continue
                price = _price(config, row)
                if price is None:
                    unpriced += held
                else:
                    held_cost += held * price
                    priced = True
            ranked = sorted((r for r in mine if (_num(r.get("held_idle_gpu_hours")) or 0) > 0),
                            key=lambda r: (-(_num(r.get("held_idle_gpu_hours")) or 0.0), str(r.get("job_id"))))
            users: list[dict[str, Any]] = []
            account = ""
            if kind == "account":
                users = _account_users(mine)
            elif mine:
                weight: dict[str, float] = {}
                for row in mine:
                    acct = str(row.get("account") or "")
                    weight[acct] = weight.get(acct, 0.0) + (_num(row.get("allocated_gpu_hours")) or 0.0)
                account = min(weight, key=lambda a: (-weight[a], a))
            out.append(UseNotice(
                kind=kind, name=name, cluster=str(data.get("cluster") or config.cluster_name),
                period_start=str(period.get("start", "")), period_end=str(period.get("end", "")),
                currency=config.currency, idle_threshold_pct=float(use.get("idle_threshold_pct",
                                                                           config.telemetry.idle_threshold_pct)),
                gpu_use=use_by.get(name), runs=runs_by.get(name),
                held_idle_cost=held_cost if priced else None, unpriced_held_idle_gpu_hours=unpriced,
                worst_jobs=[_worst_job(r, config) for r in ranked[:worst]], users=users, notes=list(notes), account=account))
    return out


def _account_users(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An account's users by allocated GPU-hours (largest first): their jobs, allocated, busy and held-idle."""
    sums: dict[str, dict[str, Any]] = {}
    for row in jobs:
        user = str(row.get("user"))
        s = sums.setdefault(user, {"user": user, "jobs": 0, "allocated_gpu_hours": 0.0, "busy_gpu_hours": None,
                                   "held_idle_gpu_hours": None})
        s["jobs"] += 1
        s["allocated_gpu_hours"] += _num(row.get("allocated_gpu_hours")) or 0.0
        for name in ("busy_gpu_hours", "held_idle_gpu_hours"):
            value = _num(row.get(name))
            if value is not None:
                s[name] = (s[name] or 0.0) + value
    return sorted(sums.values(), key=lambda s: (-s["allocated_gpu_hours"], s["user"]))
