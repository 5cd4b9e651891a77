"""Waste detectors over one job's facts (issue 43 item 5): `gpuclust job` runs them on each job it shows, and the
nightly report and the notices can run the same ones later. Pure Python over small dataclasses: no pandas.

Each detector reads a JobFacts and gives Findings; a Finding carries its evidence (the numbers it was judged on,
under stable names) and concrete advice. Names follow shared/gpu-hours-glossary.md: held-idle is time under the
idle threshold in stretches of at least idle_min, counted only where there are samples (coverage).

Detectors (the thresholds are the named constants below, the idle threshold and idle_min [telemetry]'s):

idle_gpu            a GPU held idle for at least IDLE_GPU_SHARE of its covered time (and at least idle_min):
                    "GPU 3 on node2 was idle for 2 h 10 min: ask for 3 GPUs" (the job's GPUs less its idle ones)
idle_stretch        a GPU whose mean utilisation looks fine (>= LOOKS_FINE_PCT) with a stretch under the
                    threshold of at least idle_min: when and how long; with the node's disk latency and network
                    errors over that stretch when they rose (NodeDuring: latency >= LATENCY_RISE x the job's and
                    >= LATENCY_FLOOR_MS, or any network error or drop that the job's window did not explain)
gpu_too_large       the peak GPU memory under GPU_MEM_SMALL_SHARE of the GPU's memory: a smaller GPU or a MIG
                    slice would do
time_limit          an ended job that used under TIME_LIMIT_USE of its limit, with at least TIME_LIMIT_SLACK_S
                    left: --time = its Elapsed x TIME_LIMIT_HEADROOM rounded up to whole hours
cpu_share           CPUs per GPU beyond the partition's share (its nodes' CPUs / GPUs) x (1 + SHARE_TOLERANCE)
mem_share           memory per GPU beyond the partition's share (its nodes' RealMemory / GPUs), alike
multi_node          a job on several nodes whose GPUs (and CPUs) one node of its partition holds
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gpuclust.slurm.parse import format_slurm_duration

IDLE_GPU_SHARE = 0.9  # idle_gpu: held-idle / covered at least this
LOOKS_FINE_PCT = 50.0  # idle_stretch: a GPU's mean utilisation at least this
GPU_MEM_SMALL_SHARE = 0.25  # gpu_too_large: peak GPU memory under this share of the GPU's
TIME_LIMIT_USE = 0.5  # time_limit: Elapsed / Timelimit under this
TIME_LIMIT_SLACK_S = 3600.0  # ... and at least this much of the limit left unused
TIME_LIMIT_HEADROOM = 2.0  # the advised --time: Elapsed x this, rounded up to whole hours
SHARE_TOLERANCE = 0.25  # cpu_share, mem_share: beyond the partition's share x (1 + this)
LATENCY_RISE = 2.0  # idle_stretch: the node's disk latency during the stretch >= this x over the whole job
LATENCY_FLOOR_MS = 5.0  # ... and at least this (a rise from 0.1 ms to 0.3 ms says nothing)
NET_FIGURES = ("net_receive_errs", "net_transmit_errs", "net_receive_drop", "net_transmit_drop")
LATENCY_FIGURES = ("disk_read_latency_ms", "disk_write_latency_ms")


@dataclass(frozen=True)
class NodeDuring:
    """A node's figures (telemetry.NODE_FIGURES) over an idle stretch and over the job's whole window."""
    node: str
    start: float  # epoch seconds
    end: float
    during: dict[str, float | None]
    whole_job: dict[str, float | None]


@dataclass(frozen=True)
class GpuFacts:
    """One GPU of a job: coverage, mean utilisation, held-idle time and its longest idle stretch, memory."""
    node: str
    gpu: str
    covered_s: float
    util_mean_pct: float | None
    idle_s: float  # held-idle seconds
    longest_idle_s: float = 0.0
    longest_idle_start: float | None = None  # epoch seconds
    fb_used_max_mib: float | None = None
    fb_total_mib: float | None = None


@dataclass(frozen=True)
class PartitionShare:
    """A partition's GPU nodes, from the node records (scontrol show node)."""
    name: str
    cpus_per_gpu: float | None
    mem_mb_per_gpu: float | None
    gpus_per_node: int | None  # the most GPUs one of its nodes holds
    cpus_per_node: int | None  # the most CPUs one of its nodes holds (with that many GPUs)


@dataclass(frozen=True)
class JobFacts:
    """What the detectors read of one job: its allocation and times, per-GPU and per-node figures, its price."""
    job_id: str
    running: bool
    elapsed_s: float
    timelimit_s: float | None  # None: unknown or unlimited
    gpus: int
    nodes: int
    alloc_cpus: int | None
    mem_mb: float | None  # memory allocated, all nodes
    gpu_type: str | None = None
    idle_threshold_pct: float = 10.0
    idle_min_s: float = 600.0
    gpu_facts: tuple[GpuFacts, ...] = ()
    gpu_mem_max_mib: float | None = None  # the job's peak (all GPUs), where no per-GPU figure is known
    gpu_mem_total_mib: float | None = None
    share: PartitionShare | None = None
    price_per_gpu_hour: float | None = None
    currency: str = ""
    node_during: tuple[NodeDuring, ...] = ()
    # GPU-equivalents of one of its GPU devices (a 1g.10gb slice: 1/7): a device's idle seconds count as that
    # share of GPU-seconds in held-idle GPU-hours and their cost (price_per_gpu_hour is per GPU-equivalent hour)
    gpu_share: float = 1.0


@dataclass(frozen=True)
class Finding:
    """What one detector found: its kind, message and advice, and the evidence it was judged on."""
    kind: str
    message: str
    advice: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "advice": self.advice, "evidence": dict(self.evidence)}


def duration(seconds: float) -> str:
    """2 h 10 min, 25 min, 40 s: as a person reads a duration."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _gib(mib: float) -> str:
    gib = mib / 1024
    return f"{gib:.0f}" if gib >= 10 else f"{gib:.1f}"


def _cost(facts: JobFacts, gpu_s: float) -> dict[str, Any]:
    if facts.price_per_gpu_hour is None:
        return {}
    return {"cost": round(gpu_s * facts.gpu_share / 3600 * facts.price_per_gpu_hour, 6), "currency": facts.currency}


def _cost_text(evidence: dict[str, Any]) -> str:
    if "cost" not in evidence:
        return ""
    currency = f" {evidence['currency']}" if evidence.get("currency") else ""
    return f" (cost {evidence['cost']:.2f}{currency} at the site's price)"


def idle_gpus(facts: JobFacts) -> list[Finding]:
    idle = [g for g in facts.gpu_facts if g.covered_s > 0 and g.idle_s >= facts.idle_min_s
            and g.idle_s >= IDLE_GPU_SHARE * g.covered_s]
    out: list[Finding] = []
    keep = facts.gpus - len(idle)
    for g in idle:
        evidence: dict[str, Any] = {"node": g.node, "gpu": g.gpu, "held_idle_s": round(g.idle_s, 3),
                                    "covered_s": round(g.covered_s, 3), "util_mean_pct": g.util_mean_pct,
                                    "idle_threshold_pct": facts.idle_threshold_pct, "gpus": facts.gpus,
                                    **_cost(facts, g.idle_s)}
        if keep > 0:
            advice = f"ask for {keep} GPU{'s' if keep != 1 else ''}"
        else:
            advice = ("check that the program uses the GPU (its device setting, CUDA_VISIBLE_DEVICES), or run it "
                      "on a CPU partition")
        out.append(Finding("idle_gpu", f"GPU {g.gpu} on {g.node} was idle for {duration(g.idle_s)}"
                           f"{_cost_text(evidence)}: {advice}", advice, evidence))
    return out


def _rose(stretch: NodeDuring) -> dict[str, Any]:
    """The node figures that rose during the stretch (empty: none did)."""
    rose: dict[str, Any] = {}
    for name in LATENCY_FIGURES:
        during, whole = stretch.during.get(name), stretch.whole_job.get(name)
        if during is not None and during >= LATENCY_FLOOR_MS and (whole is None or during >= LATENCY_RISE * whole):
            rose[name] = {"during": round(during, 3), "whole_job": None if whole is None else round(whole, 3)}
    for name in NET_FIGURES:
        during = stretch.during.get(name)
        if during is not None and during > 0:
            rose[name] = {"during": round(during, 3), "whole_job": stretch.whole_job.get(name)}
    return rose


def _rose_text(rose: dict[str, Any]) -> str:
    parts = []
    for name, v in rose.items():
        if name in LATENCY_FIGURES:
            what = name.replace("_ms", "").replace("_", " ")
            base = "" if v["whole_job"] is None else f" against {v['whole_job']:.1f} ms over the job"
            parts.append(f"{what} {v['during']:.1f} ms{base}")
        else:
            parts.append(f"{name.replace('_', ' ')} {v['during']:g}")
    return ", ".join(parts)


def idle_stretches(facts: JobFacts) -> list[Finding]:
    out: list[Finding] = []
    for g in facts.gpu_facts:
        if (g.util_mean_pct is None or g.util_mean_pct < LOOKS_FINE_PCT or g.longest_idle_s < facts.idle_min_s
                or g.longest_idle_start is None):
            continue
        when = datetime.fromtimestamp(g.longest_idle_start, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        evidence: dict[str, Any] = {"node": g.node, "gpu": g.gpu, "util_mean_pct": round(g.util_mean_pct, 3),
                                    "longest_idle_s": round(g.longest_idle_s, 3),
                                    "longest_idle_start": g.longest_idle_start,
                                    "idle_threshold_pct": facts.idle_threshold_pct,
                                    **_cost(facts, g.longest_idle_s)}
        message = (f"GPU {g.gpu} on {g.node} averaged {g.util_mean_pct:.0f}% but sat under "
                   f"{facts.idle_threshold_pct:g}% for {duration(g.longest_idle_s)} from {when}")
        advice = ("look at what the job waited for then (data loading, a checkpoint, a barrier): overlapping it "
                  "with compute gives the GPU-time back")
        node = next((n for n in facts.node_during if n.node == g.node
                     and n.start <= g.longest_idle_start < n.end), None)
        if node is not None:
            rose = _rose(node)
            evidence["node_during_stretch"] = rose
            if rose:
                message += f"; meanwhile on {g.node}: {_rose_text(rose)}"
                advice = (f"the node's storage or network was slow then ({_rose_text(rose)}): stage the data on "
                          "local disk, or ask the admins about that storage/network")
        out.append(Finding("idle_stretch", message, advice, evidence))
    return out


def gpu_too_large(facts: JobFacts) -> list[Finding]:
    per = [(g.fb_used_max_mib, g.fb_total_mib) for g in facts.gpu_facts
           if g.fb_used_max_mib is not None and g.fb_total_mib]
    if per:
        peak, total = max(u for u, _ in per), max(t for _, t in per if t)
    elif facts.gpu_mem_max_mib is not None and facts.gpu_mem_total_mib:
        peak, total = facts.gpu_mem_max_mib, facts.gpu_mem_total_mib
    else:
        return []
    assert total is not None
    if total <= 0 or peak >= GPU_MEM_SMALL_SHARE * total:
        return []
    evidence = {"gpu_mem_max_mib": round(peak, 3), "gpu_mem_total_mib": round(total, 3),
                "share": round(peak / total, 6), "gpu_type": facts.gpu_type}
    advice = "a smaller GPU or a MIG slice would do"
    return [Finding("gpu_too_large", f"peak GPU memory {_gib(peak)} GB of {_gib(total)}: {advice}", advice, evidence)]


def time_limit(facts: JobFacts) -> list[Finding]:
    limit = facts.timelimit_s
    if facts.running or limit is None or limit <= 0 or facts.elapsed_s <= 0:
        return []
    use = facts.elapsed_s / limit
    if use >= TIME_LIMIT_USE or limit - facts.elapsed_s < TIME_LIMIT_SLACK_S:
        return []
    advised = max(3600.0, math.ceil(facts.elapsed_s * TIME_LIMIT_HEADROOM / 3600) * 3600.0)
    if advised >= limit:
        return []
    advised_time = format_slurm_duration(int(advised))
    advice = f"--time={advised_time} starts sooner (the backfill scheduler fits shorter jobs into gaps)"
    evidence = {"elapsed_s": facts.elapsed_s, "timelimit_s": limit, "time_limit_efficiency": round(use, 6),
                "advised_time_s": advised}
    return [Finding("time_limit", f"used {duration(facts.elapsed_s)} of a {duration(limit)} limit: "
                    f"--time={advised_time} starts sooner", advice, evidence)]


def shares(facts: JobFacts) -> list[Finding]:
    share = facts.share
    if share is None or facts.gpus <= 0:
        return []
    out: list[Finding] = []
    if facts.alloc_cpus and share.cpus_per_gpu:
        per = facts.alloc_cpus / facts.gpus
        if per > share.cpus_per_gpu * (1 + SHARE_TOLERANCE):
            fair = math.floor(share.cpus_per_gpu * facts.gpus)
            advice = (f"ask for at most {fair} CPUs ({share.cpus_per_gpu:g} per GPU), or more GPUs' worth of work: "
                      "the node's other GPUs wait for CPUs meanwhile")
            out.append(Finding("cpu_share", f"{per:g} CPUs per GPU, partition {share.name}'s share is "
                               f"{share.cpus_per_gpu:g}: {advice}", advice,
                               {"cpus": facts.alloc_cpus, "gpus": facts.gpus, "cpus_per_gpu": round(per, 6),
                                "partition_cpus_per_gpu": share.cpus_per_gpu}))
    if facts.mem_mb and share.mem_mb_per_gpu:
        per = facts.mem_mb / facts.gpus
        if per > share.mem_mb_per_gpu * (1 + SHARE_TOLERANCE):
            fair_mb = share.mem_mb_per_gpu * facts.gpus
            advice = (f"ask for at most {fair_mb / 1024:.0f}G ({share.mem_mb_per_gpu / 1024:.0f}G per GPU): the node's "
                      "other GPUs wait for memory meanwhile")
            out.append(Finding("mem_share", f"{per / 1024:.1f} GB of memory per GPU, partition {share.name}'s share "
                               f"is {share.mem_mb_per_gpu / 1024:.1f} GB: {advice}", advice,
                               {"mem_mb": facts.mem_mb, "gpus": facts.gpus, "mem_mb_per_gpu": round(per, 3),
                                "partition_mem_mb_per_gpu": share.mem_mb_per_gpu}))
    return out


def multi_node(facts: JobFacts) -> list[Finding]:
    share = facts.share
    if facts.nodes <= 1 or share is None or not share.gpus_per_node or facts.gpus > share.gpus_per_node:
        return []
    if facts.alloc_cpus and share.cpus_per_node and facts.alloc_cpus > share.cpus_per_node:
        return []
    advice = "--nodes=1 keeps its GPUs on one node (no network between them; fewer nodes held)"
    return [Finding("multi_node", f"{facts.nodes} nodes for {facts.gpus} GPUs: one node of partition {share.name} "
                    f"holds {share.gpus_per_node}: {advice}", advice,
                    {"nodes": facts.nodes, "gpus": facts.gpus, "partition_gpus_per_node": share.gpus_per_node})]


DETECTORS = (idle_gpus, idle_stretches, gpu_too_large, time_limit, shares, multi_node)


def findings(facts: JobFacts) -> list[Finding]:
    """Every detector's findings, in DETECTORS order."""
    return [f for detector in DETECTORS for f in detector(facts)]
