"""Per-job GPU figures and per-node health figures from Prometheus: dcgm-exporter (with its HPC job mapping:
each GPU series of a Slurm job carries ``job_label="<JobIDRaw>"``) and node_exporter. Stdlib HTTP only.

Names follow shared/gpu-hours-glossary.md (busy, held-idle, coverage, unknown). Everything below can be
computed by hand from the series Prometheus returns.

Queries (never one per job)
    The period [start, end) is cut into one grid of points ``start + i*step`` (i = 0, 1, ... while < end);
    the grid is split into windows of ``chunk_hours`` (at most 10,000 steps each, under Prometheus's 11,000
    points per series), and for each metric ONE ``POST /api/v1/query_range`` per window asks for all jobs at
    once: ``METRIC{job_label!=""}``. GPU memory size is one more query, ``FB_USED{..} + FB_FREE{..}``
    (same label sets, joined by Prometheus). So the DCGM queries are 7 x windows, whatever the number of jobs
    (none when no job overlaps the period). Node figures are 6 instant queries at ``end``. ``queries`` counts
    every HTTP request made.

Join by node ([telemetry] join = node, for sites whose dcgm-exporter has no HPC job mapping)
    The selector is ``METRIC{node_label!=""}`` (every GPU's series), each window takes the points of the GPUs
    of its nodes (``JobWindow.nodes``, the job's NodeList), and a job window is attributed ONLY where that is
    unambiguous: no other job window overlaps it on any of its nodes, and its GPUs per node equal the GPUs
    with series on each node (a whole-node job). Any other window is unknown, with one counted warning:
    without the job label, which of a shared node's GPUs were whose cannot be told, and it is never guessed.

Attribution
    A returned series belongs to the job whose id is its job label, on GPU (node label, gpu label, GPU instance
    label: GPU_I_ID, empty for a whole GPU); series with the same (job, node, gpu, instance) (e.g. a driver-version
    label change, an Xid code change) are merged by time, the larger value winning a tie. A job window is clipped to the period: [max(job.start, start),
    min(job.end, end)). Of a series of job J, a window of J takes the points t with window start <= t < window
    end (so a requeued job's executions, which share J, each take their own points). Points are Prometheus's
    evaluations on the grid: the latest raw sample within its lookback (5 min by default).

MIG instances (shared/gpu-hours-glossary.md: a MIG slice is one GPU of its job)
    A series with a non-empty GPU instance label is a MIG instance. dcgm-exporter gives it metric.util
    (DCGM_FI_DEV_GPU_UTIL) as 0 whatever it does (dcgm-exporter issue #216), so those points are never read:
    in each query window whose utilisation answer has MIG instances, one more query_range asks
    ``MIG_UTIL{job_label!="",instance_label!=""}`` ([telemetry] mig_util_metric, default
    DCGM_FI_PROF_GR_ENGINE_ACTIVE, a 0-1 ratio) and its values x mig_util_scale (default 100) are the instances'
    utilisation in percent. A window without MIG instances asks nothing more.
    Which slice is the job's (join = hpc_job): dcgm-exporter's HPC job mapping names a file per GPU index, so
    every instance of a card carries the labels of every job on that card (a mapping per instance, as
    dcgm-exporter issue #369's patch writes, labels only the job's own). A job window keeps the MIG instances that
    carry its label and whose profile (gpu_profile_label) is one of its allocation's MIG types (JobWindow.gpu_type;
    any profile when it names none), where no profile has more such instances than the job holds slices of it
    (nor more in all than its GPUs). Otherwise which slice was its cannot be told from the labels: its MIG
    instances are dropped (unknown, never guessed, counted in one warning), so they count against its coverage
    and never as held-idle; a job left without a series is absent.

Points are sorted by time and deduplicated (the larger value winning) before use, whatever order the answer
gave them in; a point whose time is not a finite number is dropped and counted like an impossible value.

Held durations and coverage (shared/gpu-hours-glossary.md: coverage counts only time that has samples)
    In a window [s, e) with points t1 < t2 < ... < tn and G = gap_factor x step ([telemetry], default 3 x
    step): point k holds its value from tk to t(k+1) when that is at most G away, else for one step only, and
    the time up to t(k+1) has no data (a series that pauses). The last point holds until e when e - tn <= G,
    else one step (a series that stops early); the first holds back to s when t1 - s <= G, else the time
    before it has no data (a series that starts late). On clean data (a point every step) the durations add
    up to e - s exactly; otherwise their sum is the GPU's covered seconds.

Job figures (``JobTelemetry``; a job whose windows have no utilisation point is ABSENT: unknown, never 0)
    gpus_seen         distinct (node, gpu) with utilisation points in the window
    covered_gpu_s     the held durations summed over the seen GPUs, x w, where w = min(1, gpus / gpus_seen):
                      more series than GPUs allocated (a named warning) never make extra GPU-hours
    busy_gpu_s        sum(value x duration) / 100 summed over the seen GPUs, x w: the covered part only
    util_mean_pct     busy / covered x 100 (the time-weighted mean per GPU over the covered part)
    util_max_pct      the largest utilisation point
    held_idle_gpu_s   per GPU: maximal runs of consecutive points under ``idle_threshold_pct``, a run ending
                      at a gap (no data); a run whose summed duration is >= ``idle_min_s`` counts in full;
                      summed over the seen GPUs, x w (GPU-s)
    So held_idle <= covered <= gpus x (e - s) and busy <= covered for every job, by construction (and held so
    by _job_figures); a job whose coverage is under 1 is named in one counted warning.
    fb_used_max_mib   the largest memory-used point; fb_total_mib: the largest (used + free) point
    power_mean_w      per GPU as util_mean_pct, then the mean over GPUs; energy_j: sum(value x duration)
                      summed over GPUs
    temp_max_c        the largest point
    xid_errors        DCGM_FI_DEV_XID_ERRORS is a gauge (the GPU's last Xid code), not a counter: the number
                      of points whose value is non-zero and differs from the GPU's previous point in the
                      window (the first point counts when non-zero), summed over GPUs
    ecc_dbe           counter increase: over consecutive points, the rise, or after a drop (a reset) the new
                      value; summed over GPUs (nothing is extrapolated before the first point)
    A figure whose metric has no point in the window is None.

Node figures (``nodes``, one dict per node; a figure without data is None)
    Instant queries at ``end`` over ``[R]`` = the period, all nodes at once, grouped by the node label with
    its ``:port`` stripped (label_replace), summed over devices:
    disk_read_latency_ms = 1000 x increase(node_disk_read_time_seconds_total) / increase(
    node_disk_reads_completed_total) (writes alike; None when nothing was read), net_{receive,transmit}_
    {errs,drop} = increase(node_network_..._total). increase() is Prometheus's (extrapolated to the edges).

Network reads are bounded (gpuclust.prometheus, the client shared with the guard): ``timeout_s`` is a deadline for the WHOLE request, from connect through the last
byte and the JSON parse (every send and receive waits only for the time left: a server that trickles bytes is
cut off at the deadline); an answer over ``max_response_mib`` is a failed query; JSON nested deeper than the
parser's recursion limit (about 1,000 levels; Prometheus's answers are 6 deep), bare NaN/Infinity tokens,
wrong types and numbers out of float range are a malformed answer. Text from the server is escaped before it
goes into a warning.

Errors never raise: connection refused, timeout (``timeout_s`` for a whole request), HTTP 4xx/5xx, JSON with
status "error", a malformed body, an empty result -> a warning naming the URL and the metric; the figures
that query would have given stay unknown (a window overlapping a failed utilisation query is absent; other
metrics give None). After a connection failure or a timeout the remaining queries are skipped (named in
one warning) rather than each waiting for its own timeout. A point that cannot be (utilisation outside
0-100, any other metric negative, NaN or infinite) is dropped and counted in a warning.
"""

from __future__ import annotations

import math
import sys
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuclust.config.telemetry import (
    MAX_STEPS_PER_QUERY,
    MIN_CHUNK_HOURS,
    MIN_STEP_S,
    TelemetryConfig,
    parse_prometheus_url,
)
from gpuclust.output import terminal_safe
from gpuclust.prometheus import MIB, PrometheusClient, QueryFailed
from gpuclust.slurm.gpushare import mig_profile

_FINITE = sys.float_info.max
_NODE_LABEL = "gpuclust_node"  # the label label_replace() writes: the node label without its :port

__all__ = ["GpuTelemetry", "JobTelemetry", "JobWindow", "PROFILE_BUCKETS", "TelemetryResult", "fetch_telemetry",
           "node_figures", "MAX_STEPS_PER_QUERY"]


@dataclass(frozen=True)
class JobWindow:
    """One job execution to find GPU figures for: its job label, its window [start, end), its GPUs and nodes."""
    job: str  # the job id as the job label carries it (JobIDRaw as a decimal string)
    start: datetime  # tz-aware
    end: datetime  # tz-aware (for a running job: the period end)
    gpus: int  # GPUs allocated (from AllocTRES)
    key: object = None  # the caller's row key, returned as is (a requeued job's executions share `job`)
    nodes: tuple[str, ...] = ()  # the job's nodes (NodeList expanded); read only with [telemetry] join = node
    gpu_type: str | None = None  # AllocTRES's GPU type, or the mix `1g.10gb=1,h100=2`: tells its MIG slices


PROFILE_BUCKETS = 120  # GpuTelemetry.util_profile: enough for a terminal-wide sparkline, small to store


@dataclass
class GpuTelemetry:
    """One GPU's figures in one job window (the held durations of the module docstring). Unlike the job's,
    these are not weighed: they are what this GPU's series says."""
    node: str
    gpu: str
    covered_s: float  # seconds with samples
    busy_s: float  # sum(util x held duration) / 100: busy GPU-seconds
    util_mean_pct: float | None  # busy / covered x 100
    util_max_pct: float | None
    idle_s: float  # held-idle seconds (runs under the threshold lasting >= idle_min_s, as the job's)
    under_threshold_s: float  # every second under the threshold, however short the run
    longest_idle_s: float  # the longest run under the threshold (a gap ends a run)
    longest_idle_start: float | None  # its first point (epoch seconds)
    trailing_idle_s: float  # the run under the threshold still open at the window's end (0 after a gap)
    fb_used_max_mib: float | None = None
    fb_total_mib: float | None = None
    power_mean_w: float | None = None
    power_max_w: float | None = None
    energy_j: float | None = None
    temp_max_c: float | None = None
    xid_errors: float | None = None
    ecc_dbe: float | None = None
    # Mean utilisation in PROFILE_BUCKETS equal slices of the window (None: no sample held in that slice).
    util_profile: tuple[float | None, ...] = ()
    instance: str = ""  # the MIG GPU instance id (GPU_I_ID); "" for a whole GPU
    profile: str = ""  # the MIG profile (GPU_I_PROFILE), e.g. 1g.10gb; "" for a whole GPU

    @property
    def name(self) -> str:
        """The GPU as messages name it: its index, and a MIG slice's profile and instance."""
        return f"{self.gpu} (MIG {self.profile or '?'} instance {self.instance})" if self.instance else self.gpu


@dataclass
class JobTelemetry:
    """One job's figures over its windows (Job figures in the module docstring), and per GPU."""
    gpus_seen: int
    util_mean_pct: float | None
    util_max_pct: float | None
    fb_used_max_mib: float | None
    fb_total_mib: float | None
    power_mean_w: float | None
    energy_j: float | None
    temp_max_c: float | None
    xid_errors: float | None
    ecc_dbe: float | None
    held_idle_gpu_s: float
    covered_gpu_s: float
    busy_gpu_s: float
    gpus: list[GpuTelemetry] = field(default_factory=list)  # per (node, gpu), sorted


@dataclass
class TelemetryResult:
    """What fetch_telemetry gives: each job's figures by key, the node figures, warnings and the queries made."""
    jobs: dict[object, JobTelemetry]  # by JobWindow.key; jobs without utilisation points are absent
    nodes: list[dict[str, Any]]
    warnings: list[str]
    queries: int
    source: str
    util_failed: int = 0  # utilisation query windows without an answer (the guard acts on none of its jobs then)


NODE_FIGURES = (
    "disk_read_latency_ms",
    "disk_write_latency_ms",
    "net_receive_errs",
    "net_transmit_errs",
    "net_receive_drop",
    "net_transmit_drop",
)


# ---- HTTP ------------------------------------------------------------------------------------------------


# ---- series ----------------------------------------------------------------------------------------------


class _Series:
    __slots__ = ("times", "values", "ordered")

    def __init__(self) -> None:
        self.times = array("d")
        self.values = array("d")
        self.ordered = True

    def extend(self, times: list[float], values: list[float]) -> None:
        """Points of one answer. Prometheus returns a series' points in time order; any other order (within
        the answer, or against the points before it) is settled before use."""
        if not times:
            return
        if self.times and times[0] <= self.times[-1]:
            self.ordered = False  # merged series, or a repeated window edge
        elif self.ordered and any(b <= a for a, b in zip(times, times[1:], strict=False)):
            self.ordered = False  # out of order or repeated within the answer
        self.times.extend(times)
        self.values.extend(values)

    def settle(self) -> None:
        """Sorted by time, one value per time (the larger: merged series, repeated chunk edges)."""
        if self.ordered:
            return
        merged: dict[float, float] = {}
        for t, value in zip(self.times, self.values, strict=True):
            if t not in merged or value > merged[t]:
                merged[t] = value
        keys = sorted(merged)
        self.times = array("d", keys)
        self.values = array("d", (merged[t] for t in keys))
        self.ordered = True

    def window(self, s: float, e: float, step: float,
               gap: float) -> tuple[Sequence[float], list[float], list[bool], Sequence[float]] | None:
        """The points in [s, e) with their held durations and gap marks (module docstring, Held durations),
        or None when there is none."""
        i = bisect_left(self.times, s)
        j = bisect_left(self.times, e)
        if i >= j:
            return None
        ts = self.times[i:j]
        vs = self.values[i:j]
        durations: list[float] = []
        gaps: list[bool] = []
        for k in range(len(ts)):
            following = (ts[k + 1] if k + 1 < len(ts) else e) - ts[k]
            if following <= gap:
                durations.append(following)
                gaps.append(False)
            else:  # a series that stops or pauses: its point holds one step, then there is no data
                durations.append(min(step, following))
                gaps.append(True)
        if ts[0] - s <= gap:
            durations[0] += ts[0] - s
        return vs, durations, gaps, ts


@dataclass
class _Metric:
    """One figure queried per window: its PromQL, the bounds its points must fall in, and what the answers gave."""
    name: str  # the config key's figure: util, fb_used, fb_total, power, temp, xid, ecc_dbe
    query: str
    label: str  # what warnings call it
    high: float  # points outside [0, high] (and NaN) cannot be: dropped and counted
    low: float = 0.0
    scale: float = 1.0  # each value x this (mig_util_metric's ratio -> percent)
    mig: bool = False  # the MIG instances' utilisation query (mig_util_metric)
    series: dict[tuple[str, str, str, str], _Series] = field(default_factory=dict)  # (job, node, gpu, instance)
    failed: list[tuple[float, float]] = field(default_factory=list)  # query windows without an answer
    dropped: int = 0
    dropped_example: str = ""
    returned: int = 0  # series returned, over all windows
    mig_windows: list[tuple[float, float]] = field(default_factory=list)  # util: query windows with MIG instances
    profiles: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (node, gpu, instance) -> profile


def _all_within(values: list[float], low: float, high: float) -> bool:
    total = sum(values)  # (min and max may step over a NaN; a sum never does)
    return low <= min(values) and max(values) <= high and total == total


def _selector(metric: str, job_label: str) -> str:
    return f'{metric}{{{job_label}!=""}}'


def _metrics(cfg: TelemetryConfig) -> list[_Metric]:
    sel = lambda m: _selector(m, cfg.node_label if cfg.join == "node" else cfg.job_label)  # noqa: E731
    return [
        _Metric("util", sel(cfg.metric_util), cfg.metric_util, 100.0),
        _Metric("fb_used", sel(cfg.metric_fb_used), cfg.metric_fb_used, _FINITE),
        _Metric("fb_total", f"{sel(cfg.metric_fb_used)} + {sel(cfg.metric_fb_free)}",
                f"{cfg.metric_fb_used} + {cfg.metric_fb_free}", _FINITE),
        _Metric("power", sel(cfg.metric_power), cfg.metric_power, _FINITE),
        _Metric("temp", sel(cfg.metric_temp), cfg.metric_temp, _FINITE),
        _Metric("xid", sel(cfg.metric_xid), cfg.metric_xid, _FINITE),
        _Metric("ecc_dbe", sel(cfg.metric_ecc_dbe), cfg.metric_ecc_dbe, _FINITE),
    ]


def _mig_metric(cfg: TelemetryConfig) -> _Metric:
    sel = _selector(cfg.mig_util_metric, cfg.node_label if cfg.join == "node" else cfg.job_label)
    query = sel[:-1] + f',{cfg.gpu_instance_label}!=""}}'
    return _Metric("util", query, cfg.mig_util_metric, 100.0, scale=cfg.mig_util_scale, mig=True)


def _grid_windows(start: float, end: float, step: float, chunk_hours: float) -> list[tuple[float, float]]:
    # (as many as gpuclust.config.telemetry.query_windows counts)
    """(first point, last point) of each query window of the grid start + i*step < end."""
    points = math.ceil((end - start) / step)  # the number of grid points in [start, end)
    per_window = max(1, min(int(chunk_hours * 3600 / step), MAX_STEPS_PER_QUERY))
    return [(start + a * step, start + (min(a + per_window, points) - 1) * step) for a in range(0, points, per_window)]


def _fmt(ts: float) -> str:
    return f"{ts:.3f}"


# ---- per window figures ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _UtilGpu:
    """One GPU's utilisation in one window: percent-seconds, covered and idle seconds, idle stretches, profile."""
    integral: float  # sum(value x held duration): percent-seconds
    covered: float  # seconds with samples
    max: float
    idle: float  # held-idle seconds
    under: float = 0.0  # every second under the threshold
    longest: float = 0.0
    longest_start: float | None = None
    trailing: float = 0.0
    profile: tuple[float | None, ...] = ()


@dataclass
class _Win:
    """A job window clipped to the period, [s, e) in epoch seconds, and its place in the caller's list."""
    index: int  # position in the caller's list (keys may repeat: None)
    job: str
    s: float
    e: float
    gpus: int
    key: object
    nodes: tuple[str, ...] = ()
    gpu_type: str | None = None


def _overlaps(win: _Win, failed: Iterable[tuple[float, float]], step: float) -> bool:
    # a failed query window [a, b] lacks the points a..b; held values reach up to b + step
    return any(a < win.e and win.s < b + step for a, b in failed)


def _aggregate(metric: _Metric, wins_by_job: dict[str, list[_Win]], cfg: TelemetryConfig,
               out: dict[int, dict[str, Any]]) -> None:
    """Adds this metric's figures to out[window index] (a dict of figure -> value)."""
    for (job, node, gpu, instance), series in metric.series.items():
        series.settle()
        for win in wins_by_job.get(job, ()):
            got = series.window(win.s, win.e, cfg.step_s, cfg.gap_factor * cfg.step_s)
            if got is None:
                continue
            vs, ds, gaps, ts = got
            acc = out.setdefault(win.index, {})
            per = acc.setdefault(metric.name, {})
            per[(node, gpu, instance)] = _per_gpu(metric.name, vs, ds, gaps, cfg, ts, win)
    metric.series.clear()  # the points are no longer needed: free them before the next metric


def _profile(vs: Sequence[float], ds: Sequence[float], ts: Sequence[float], win: _Win,
             gap: float) -> tuple[float | None, ...]:
    """Time-weighted mean utilisation per slice of the window; a held duration is split across the slices it
    spans (the first point's reaches back to the window start when _Series.window let it)."""
    span = win.e - win.s
    if span <= 0:
        return ()
    width = span / PROFILE_BUCKETS
    weight = [0.0] * PROFILE_BUCKETS
    total = [0.0] * PROFILE_BUCKETS
    for k, (v, d, t) in enumerate(zip(vs, ds, ts, strict=True)):
        a = win.s if k == 0 and t - win.s <= gap else t
        b = min(a + d, win.e)
        while a < b:
            slot = min(int((a - win.s) / width), PROFILE_BUCKETS - 1)
            edge = min(b, win.s + (slot + 1) * width)
            if edge <= a:  # (float rounding at a slice edge)
                edge = b
            weight[slot] += edge - a
            total[slot] += v * (edge - a)
            a = edge
    return tuple(total[i] / weight[i] if weight[i] > 0 else None for i in range(PROFILE_BUCKETS))


def _per_gpu(name: str, vs: Sequence[float], ds: Sequence[float], gaps: Sequence[bool],
             cfg: TelemetryConfig, ts: Sequence[float] = (), win: _Win | None = None) -> Any:
    total = sum(ds)  # the covered seconds of this GPU
    if name in ("util", "power"):
        integral = sum(v * d for v, d in zip(vs, ds, strict=True))
        if name == "power":
            return (integral / total if total > 0 else sum(vs) / len(vs), integral, max(vs))
        idle = run = under = longest = 0.0
        run_start: float | None = None
        longest_start: float | None = None
        for k, (v, d, gap) in enumerate(zip(vs, ds, gaps, strict=True)):
            if v < cfg.idle_threshold_pct:
                if run == 0.0:
                    run_start = ts[k] if ts else None
                run += d
                under += d
                if run > longest:
                    longest, longest_start = run, run_start
            else:
                if run >= cfg.idle_min_s:
                    idle += run
                run = 0.0
            if gap:  # an idle stretch ends where the data does: what came after is unseen
                if run >= cfg.idle_min_s:
                    idle += run
                run = 0.0
        if run >= cfg.idle_min_s:
            idle += run
        profile = _profile(vs, ds, ts, win, cfg.gap_factor * cfg.step_s) if ts and win is not None else ()
        return _UtilGpu(integral, total, max(vs), idle, under, longest, longest_start, run, profile)
    if name == "xid":
        events, previous = 0, 0.0
        for v in vs:
            if v != 0 and v != previous:
                events += 1
            previous = v
        return float(events)
    if name == "ecc_dbe":
        rise = 0.0
        for a, b in zip(vs, vs[1:], strict=False):
            rise += b - a if b >= a else b
        return rise
    return max(vs)  # fb_used, fb_total, temp


def _gpu_figures(acc: dict[str, Any], profiles: dict[tuple[str, str, str], str]) -> list[GpuTelemetry]:
    util: dict[tuple[str, str, str], _UtilGpu] = acc["util"]

    def of(name: str, where: tuple[str, str, str]) -> Any:
        return acc.get(name, {}).get(where)

    out: list[GpuTelemetry] = []
    for where in sorted(util):
        u = util[where]
        power = of("power", where)
        out.append(GpuTelemetry(
            node=where[0], gpu=where[1], covered_s=u.covered, busy_s=u.integral / 100.0,
            util_mean_pct=u.integral / u.covered if u.covered > 0 else u.max, util_max_pct=u.max,
            idle_s=u.idle, under_threshold_s=u.under, longest_idle_s=u.longest,
            longest_idle_start=u.longest_start, trailing_idle_s=u.trailing,
            fb_used_max_mib=of("fb_used", where), fb_total_mib=of("fb_total", where),
            power_mean_w=power[0] if power else None, power_max_w=power[2] if power else None,
            energy_j=power[1] if power else None, temp_max_c=of("temp", where),
            xid_errors=of("xid", where), ecc_dbe=of("ecc_dbe", where), util_profile=u.profile,
            instance=where[2], profile=profiles.get(where, "") if where[2] else "",
        ))
    return out


def _job_figures(win: _Win, acc: dict[str, Any],
                 profiles: dict[tuple[str, str, str], str] | None = None) -> JobTelemetry:
    util: dict[tuple[str, str, str], _UtilGpu] = acc["util"]
    seen = len(util)
    integral = sum(u.integral for u in util.values())
    covered_raw = sum(u.covered for u in util.values())
    mean = integral / covered_raw if covered_raw > 0 else sum(u.max for u in util.values()) / seen
    # More GPU series than GPUs allocated (a stale label, a foreign series): the job's figures are those of
    # its GPUs, each series weighing gpus / seen, never extra GPU-hours (a warning names it).
    scale = min(1.0, max(win.gpus, 0) / seen)
    span = (win.e - win.s) * max(win.gpus, 0)
    covered = min(covered_raw * scale, span)
    busy = min(integral * scale / 100.0, covered)
    held = min(sum(u.idle for u in util.values()) * scale, covered)
    power = acc.get("power")

    def largest(name: str) -> float | None:
        return max(acc[name].values()) if name in acc else None

    def summed(name: str) -> float | None:
        return float(sum(acc[name].values())) if name in acc else None

    return JobTelemetry(
        gpus_seen=seen,
        util_mean_pct=mean,
        util_max_pct=max(u.max for u in util.values()),
        fb_used_max_mib=largest("fb_used"),
        fb_total_mib=largest("fb_total"),
        power_mean_w=sum(p[0] for p in power.values()) / len(power) if power else None,
        energy_j=sum(p[1] for p in power.values()) if power else None,
        temp_max_c=largest("temp"),
        xid_errors=summed("xid"),
        ecc_dbe=summed("ecc_dbe"),
        held_idle_gpu_s=held,
        covered_gpu_s=covered,
        busy_gpu_s=busy,
        gpus=_gpu_figures(acc, profiles or {}),
    )


# ---- the queries -----------------------------------------------------------------------------------------


def _exclusive_by_node(wins: list[_Win], warnings: list[str], url: str) -> dict[str, list[_Win]]:
    """join = node: node -> the windows on it that share none of their nodes with another window in time."""
    by_node: dict[str, list[_Win]] = {}
    for win in wins:
        for node in win.nodes:
            by_node.setdefault(node, []).append(win)
    shared: set[int] = {w.index for w in wins if not w.nodes}
    for on_node in by_node.values():
        on_node.sort(key=lambda w: w.s)
        latest: _Win | None = None  # the window reaching furthest so far
        for win in on_node:
            if latest is not None and win.s < latest.e:
                shared |= {win.index, latest.index}
            if latest is None or win.e > latest.e:
                latest = win
    if shared:
        warnings.append(f"{url}: join = node: {len(shared)} job window(s) share a node with another job in time "
                        "(or have no NodeList): without the job label, which GPUs were theirs is unknown (unknown, "
                        "not 0)")
    return {node: [w for w in on_node if w.index not in shared] for node, on_node in by_node.items()}


def _whole_node_only(by_node: dict[str, list[_Win]], util: _Metric, warnings: list[str],
                     url: str) -> dict[str, list[_Win]]:
    """join = node: keep the windows whose GPUs per node equal the GPUs with utilisation series on each of
    their nodes (a job on part of a node cannot be told from the GPUs beside it)."""
    gpus_on: dict[str, set[tuple[str, str]]] = {}
    for _job, node, gpu, instance in util.series:
        gpus_on.setdefault(node, set()).add((gpu, instance))  # (a MIG instance is one GPU of the node's)
    partial: set[int] = set()
    for on_node in by_node.values():
        for win in on_node:
            per_node = win.gpus / max(len(win.nodes), 1)
            if any(len(gpus_on.get(node, ())) != per_node for node in win.nodes):
                partial.add(win.index)
    if partial:
        warnings.append(f"{url}: join = node: {len(partial)} job window(s) hold only part of a node's GPUs: which "
                        "of them were theirs is unknown without the job label (unknown, not 0)")
    return {node: [w for w in on_node if w.index not in partial] for node, on_node in by_node.items()}


def _collect(client: PrometheusClient, metric: _Metric, cfg: TelemetryConfig, jobs: set[str],
             windows: list[tuple[float, float]], warnings: list[str]) -> None:
    for a, b in windows:
        params = {"query": metric.query, "start": _fmt(a), "end": _fmt(b), "step": f"{cfg.step_s:g}"}
        try:
            doc = client.call("/api/v1/query_range", params)
            if _take_matrix(doc, metric, cfg, jobs):
                metric.mig_windows.append((a, b))
        except QueryFailed as exc:
            metric.failed.append((a, b))
            if not exc.skipped:
                warnings.append(f"{client.url}: query_range {metric.query} [{_fmt(a)}, {_fmt(b)}]: {exc}; "
                                f"its figures stay unknown for the jobs in that window")


def _take_matrix(doc: dict[str, Any], metric: _Metric, cfg: TelemetryConfig, jobs: set[str]) -> bool:
    """The answer's points into metric.series; True when it holds a MIG instance's metric.util series (whose
    points are never read: dcgm-exporter gives them as 0)."""
    mig = False
    data = doc["data"]
    result = data.get("result")
    if data.get("resultType") != "matrix" or not isinstance(result, list):
        raise QueryFailed(f"malformed answer (resultType {data.get('resultType')!r}, expected matrix)")
    try:
        for item in result:
            labels = item["metric"]
            if not isinstance(labels, dict):
                raise TypeError("a series' metric is not an object")
            metric.returned += 1
            # join = node: the series is keyed by its node, and the windows of that node's whole-node jobs take it
            job = labels.get(cfg.node_label if cfg.join == "node" else cfg.job_label)
            if not isinstance(job, str) or job not in jobs:
                continue
            node = labels.get(cfg.node_label, "")
            gpu = labels.get(cfg.gpu_label, "")
            instance = labels.get(cfg.gpu_instance_label, "")
            if not isinstance(node, str) or not isinstance(gpu, str) or not isinstance(instance, str):
                raise TypeError(f"label {cfg.node_label}, {cfg.gpu_label} or {cfg.gpu_instance_label} is not a "
                                "string")
            if instance:
                if metric.name == "util" and not metric.mig:
                    mig = True  # (DCGM_FI_DEV_GPU_UTIL of a MIG instance: 0 whatever it does; mig_util_metric's)
                    continue
                profile = labels.get(cfg.gpu_profile_label, "")
                if isinstance(profile, str) and profile:
                    metric.profiles[(node, gpu, instance)] = terminal_safe(profile)[:64]
            points = item["values"]
            if not isinstance(points, list):
                raise TypeError("a series' values is not a list")
            times = [float(t) for t, _ in points]
            values = [float(raw) for _, raw in points]
            if metric.scale != 1.0:
                values = [value * metric.scale for value in values]
            # A time that is no number (NaN, Inf) and a value that cannot be are dropped, counted.
            if values and not (_all_within(values, metric.low, metric.high) and _all_within(times, 0.0, _FINITE)):
                keep = [k for k, value in enumerate(values) if metric.low <= value <= metric.high
                        and 0.0 <= times[k] <= _FINITE]
                kept = set(keep)
                bad = next(points[k] for k in range(len(values)) if k not in kept)
                metric.dropped += len(values) - len(keep)
                what = bad[1] if not metric.low <= float(bad[1]) <= metric.high else f"time {bad[0]}"
                metric.dropped_example = metric.dropped_example or terminal_safe(
                    f"{what} for job {job} on {node} gpu {gpu}"[:200])
                times = [times[k] for k in keep]
                values = [values[k] for k in keep]
            series = metric.series.get((job, node, gpu, instance))
            if series is None:
                series = metric.series[(job, node, gpu, instance)] = _Series()
            series.extend(times, values)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, IndexError) as exc:
        raise QueryFailed(f"malformed answer ({type(exc).__name__}: {terminal_safe(str(exc))[:200]})") from None
    return mig


def _collect_mig(client: PrometheusClient, util: _Metric, cfg: TelemetryConfig, jobs: set[str],
                 warnings: list[str], url: str) -> list[tuple[float, float]]:
    """The MIG instances' utilisation (mig_util_metric x mig_util_scale) in the query windows whose metric.util
    answer had MIG instances, into util's series; returns the windows that failed (their instances stay
    unknown)."""
    mig = _mig_metric(cfg)
    _collect(client, mig, cfg, jobs, util.mig_windows, warnings)
    if mig.dropped:
        warnings.append(f"{url}: {mig.label} x {cfg.mig_util_scale:g}: {mig.dropped} point(s) dropped as impossible "
                        f"values (outside 0-100 %: is mig_util_scale right?) (e.g. {mig.dropped_example})")
    if mig.returned == 0 and len(mig.failed) < len(util.mig_windows):
        warnings.append(f"{url}: query_range {mig.query}: empty result where {cfg.metric_util} has MIG instances; "
                        f"their utilisation is unknown (not 0: {cfg.metric_util} reads 0 on a MIG instance)")
    util.series.update(mig.series)  # (keys with an instance: never one of metric.util's)
    util.profiles.update(mig.profiles)
    return mig.failed


def _job_mig_types(gpu_type: str | None) -> dict[str, int] | None:
    """The MIG profiles (by name, 1g.10gb) a job's AllocTRES type holds, with their counts; None when it names no
    type (any profile may be its). `1g.10gb` alone counts as the job's GPUs (filled in by the caller)."""
    if not gpu_type:
        return None
    out: dict[str, int] = {}
    for item in gpu_type.split(","):
        name, _, count = item.partition("=")
        profile = mig_profile(name.strip())
        if profile is not None:
            out[profile.name] = out.get(profile.name, 0) + (int(count) if count.strip().isdigit() else -1)
    return out


def _keep_own_slices(win: _Win, figures: dict[str, Any], profiles: dict[tuple[str, str, str], str]) -> str | None:
    """join = hpc_job: keep, of the MIG instances carrying the job's label, those that are its slices (module
    docstring, MIG instances); drop the others from every figure. Returns why its instances were dropped (None:
    none were, or it has none)."""
    util = figures["util"]
    mig = [where for where in util if where[2]]
    if not mig:
        return None
    types = _job_mig_types(win.gpu_type)
    if types is not None and "=" not in (win.gpu_type or "") and types:
        types = {name: max(win.gpus, 0) for name in types}  # one type: all the job's GPUs are of it
    keep = mig
    why: str | None = None
    if types is not None:
        def name_of(where: tuple[str, str, str]) -> str | None:
            got = mig_profile(profiles.get(where, ""))
            return got.name if got else None

        keep = [where for where in mig if name_of(where) in types]
        per: dict[str | None, int] = {}
        for where in keep:
            per[name_of(where)] = per.get(name_of(where), 0) + 1
        over = [f"{n} {name} instances, {types[name or '']} held" for name, n in sorted(per.items(), key=str)
                if n > types[name or '']]
        if not types:
            why = f"{len(mig)} MIG instance(s) carry its label but it holds no MIG type ({win.gpu_type})"
            keep = []
        elif over:
            why = "; ".join(over)
            keep = []
    if why is None and len(keep) > max(win.gpus, 0):
        why = f"{len(keep)} MIG instances carry its label, {win.gpus} GPU(s) held"
        keep = []
    dropped = set(mig) - set(keep)
    if dropped:
        for name in list(figures):
            per_gpu = figures[name]
            for where in dropped:
                per_gpu.pop(where, None)
            if not per_gpu:
                del figures[name]
    return why


def _node_queries(cfg: TelemetryConfig, range_s: int) -> dict[str, str]:
    def by_node(counter: str) -> str:
        inner = f"increase({counter}[{range_s}s])"
        relabelled = f'label_replace({inner}, "{_NODE_LABEL}", "$1", "{cfg.node_exporter_node_label}", "(.*?)(?::[0-9]+)?")'
        return f"sum by ({_NODE_LABEL}) ({relabelled})"

    return {
        "disk_read_latency_ms": f"1000 * {by_node('node_disk_read_time_seconds_total')} / "
                                f"{by_node('node_disk_reads_completed_total')}",
        "disk_write_latency_ms": f"1000 * {by_node('node_disk_write_time_seconds_total')} / "
                                 f"{by_node('node_disk_writes_completed_total')}",
        "net_receive_errs": by_node("node_network_receive_errs_total"),
        "net_transmit_errs": by_node("node_network_transmit_errs_total"),
        "net_receive_drop": by_node("node_network_receive_drop_total"),
        "net_transmit_drop": by_node("node_network_transmit_drop_total"),
    }


def _fetch_nodes(client: PrometheusClient, cfg: TelemetryConfig, start: float, end: float,
                 warnings: list[str]) -> list[dict[str, Any]]:
    nodes: dict[str, dict[str, Any]] = {}
    range_s = max(1, math.ceil(end - start))
    for figure, query in _node_queries(cfg, range_s).items():
        try:
            doc = client.call("/api/v1/query", {"query": query, "time": _fmt(end)})
            data = doc["data"]
            result = data.get("result")
            if data.get("resultType") != "vector" or not isinstance(result, list):
                raise QueryFailed(f"malformed answer (resultType {data.get('resultType')!r}, expected vector)")
            if not result:
                warnings.append(f"{client.url}: query {query}: empty result; {figure} is unknown for every node")
            try:
                for item in result:
                    node = item["metric"].get(_NODE_LABEL, "")
                    value = float(item["value"][1])
                    if not isinstance(node, str):
                        raise TypeError(f"label {_NODE_LABEL} is not a string")
                    node = terminal_safe(node)
                    if not node:
                        continue
                    row = nodes.setdefault(node, {"node": node, **dict.fromkeys(NODE_FIGURES)})
                    # NaN / Inf: nothing read or written (0/0, x/0), and a negative increase cannot be
                    row[figure] = value if 0 <= value < math.inf else None
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
                raise QueryFailed(f"malformed answer ({type(exc).__name__}: {terminal_safe(str(exc))[:200]})") from None
        except QueryFailed as exc:
            if not exc.skipped:
                warnings.append(f"{client.url}: query {query}: {exc}; {figure} is unknown for every node")
    return [nodes[name] for name in sorted(nodes)]


def fetch_telemetry(cfg: TelemetryConfig, jobs: Sequence[JobWindow], start: datetime, end: datetime, *,
                    util_only: bool = False) -> TelemetryResult:
    """The jobs' GPU figures and the nodes' figures over [start, end) (module docstring: exact rules).
    `util_only`: only the utilisation metric and no node figures (the guard: 1 query per window); the other
    figures are None. Never raises for what the server does; raises ValueError for naive datetimes (a caller's
    bug)."""
    for when in (start, end, *(t for j in jobs for t in (j.start, j.end))):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"fetch_telemetry needs tz-aware datetimes, got {when!r}")
    source = cfg.prometheus_url or ""
    result = TelemetryResult(jobs={}, nodes=[], warnings=[], queries=0, source=source)
    if cfg.prometheus_url is None:
        result.warnings.append("telemetry: [telemetry] prometheus_url is not set; every telemetry figure is unknown")
        return result
    try:
        url = parse_prometheus_url(cfg.prometheus_url)
    except ValueError as exc:
        result.warnings.append(f"telemetry: [telemetry] prometheus_url: {exc}; every telemetry figure is unknown")
        return result
    if not (cfg.step_s >= MIN_STEP_S and cfg.chunk_hours >= MIN_CHUNK_HOURS and cfg.timeout_s > 0
            and cfg.gap_factor >= 1 and cfg.max_response_mib >= 1
            and all(math.isfinite(x) for x in (cfg.step_s, cfg.chunk_hours, cfg.timeout_s, cfg.gap_factor))):
        result.warnings.append(f"{url}: step must be >= {MIN_STEP_S:g} s, chunk_hours >= {MIN_CHUNK_HOURS:g}, "
                               "gap_factor >= 1 and timeout and max_response_mib > 0 (`gpuclust config check`); "
                               "every telemetry figure is unknown")
        return result
    t0, t1 = start.timestamp(), end.timestamp()
    if not t1 > t0:
        result.warnings.append(f"{url}: empty period [{start.isoformat()}, {end.isoformat()}); nothing queried")
        return result
    client = PrometheusClient(url, cfg.timeout_s, int(cfg.max_response_mib) * MIB)
    warnings = result.warnings

    wins: list[_Win] = []
    for index, job in enumerate(jobs):
        s, e = max(job.start.timestamp(), t0), min(job.end.timestamp(), t1)
        if s < e:
            wins.append(_Win(index, str(job.job).strip(), s, e, job.gpus, job.key, tuple(job.nodes), job.gpu_type))
    wins_by_job: dict[str, list[_Win]] = {}
    if cfg.join == "node":
        wins_by_job = _exclusive_by_node(wins, warnings, url)
    else:
        for win in wins:
            wins_by_job.setdefault(win.job, []).append(win)

    acc: dict[int, dict[str, Any]] = {}
    metrics = _metrics(cfg)[:1] if util_only else _metrics(cfg)
    mig_failed: list[tuple[float, float]] = []
    if wins:
        windows = _grid_windows(t0, t1, cfg.step_s, cfg.chunk_hours)
        for metric in metrics:
            _collect(client, metric, cfg, set(wins_by_job), windows, warnings)
            if metric is metrics[0] and metric.mig_windows:
                mig_failed = _collect_mig(client, metric, cfg, set(wins_by_job), warnings, url)
            if cfg.join == "node" and metric is metrics[0]:
                wins_by_job = _whole_node_only(wins_by_job, metric, warnings, url)
            if metric.dropped:
                warnings.append(f"{url}: {metric.label}: {metric.dropped} point(s) dropped as impossible values "
                                f"(e.g. {metric.dropped_example})")
            if metric.returned == 0 and len(metric.failed) < len(windows):
                warnings.append(f"{url}: query_range {metric.query}: empty result over the period; "
                                f"its figures are unknown for every job")
            _aggregate(metric, wins_by_job, cfg, acc)

    util_failed = metrics[0].failed
    profiles = metrics[0].profiles
    missing: list[str] = []
    partial: list[str] = []
    untold: list[str] = []
    for win in wins:
        figures = acc.get(win.index, {})
        if "util" in figures and cfg.join != "node":
            why = _keep_own_slices(win, figures, profiles)
            if why:
                untold.append(f"{win.job} ({why})")
        if "util" not in figures or _overlaps(win, util_failed, cfg.step_s):
            missing.append(win.job)
            continue
        for metric in metrics[1:]:
            if metric.name in figures and _overlaps(win, metric.failed, cfg.step_s):
                del figures[metric.name]
        tel = _job_figures(win, figures, profiles)
        if tel.gpus_seen > win.gpus:
            warnings.append(f"{url}: job {win.job}: {tel.gpus_seen} GPUs have series, {win.gpus} allocated; "
                            f"covered counts {win.gpus} (each series weighs {win.gpus}/{tel.gpus_seen}: never extra "
                            "GPU-hours)")
        whole = (win.e - win.s) * win.gpus
        if whole > 0 and tel.covered_gpu_s < whole * (1 - 1e-9):
            partial.append(f"{win.job} ({tel.covered_gpu_s / whole:.2f})")
        if win.key in result.jobs:
            warnings.append(f"telemetry: two job windows share the key {win.key!r}; the later one is kept")
        result.jobs[win.key] = tel
    if untold:
        shown = "; ".join(untold[:10]) + ("; ..." if len(untold) > 10 else "")
        warnings.append(f"{url}: {len(untold)} job window(s) on MIG slices: which instance was theirs cannot be "
                        f"told from the {cfg.job_label} labels (dcgm-exporter's job mapping labels every instance of "
                        f"a card), so those slices are unknown (not 0, never held-idle; they count against "
                        f"coverage): job (why) {shown}")
    if missing:
        shown = ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")
        warnings.append(f"{url}: {len(missing)} of {len(wins)} job window(s) have no {cfg.metric_util} points "
                        f"(unknown, not 0): {shown}")
    if partial:
        shown = ", ".join(partial[:10]) + (", ..." if len(partial) > 10 else "")
        warnings.append(f"{url}: {len(partial)} of {len(wins)} job window(s) have {cfg.metric_util} samples for "
                        f"only part of their GPU time (a series that starts late, stops early or pauses for more "
                        f"than gap_factor x step = {cfg.gap_factor * cfg.step_s:g} s, or a GPU without a series: "
                        f"no data there, in neither busy nor held-idle): job (coverage) {shown}")

    result.util_failed = len(util_failed) + len(mig_failed)
    if not util_only:
        result.nodes = _fetch_nodes(client, cfg, t0, t1, warnings)
    if client.dead is not None:
        warnings.append(f"{client.dead}: {client.skipped} further quer{'y' if client.skipped == 1 else 'ies'} "
                        f"skipped; their figures are unknown")
    result.queries = client.queries
    return result


def node_figures(cfg: TelemetryConfig, node: str, start: datetime, end: datetime) -> tuple[dict[str, Any] | None,
                                                                                             list[str]]:
    """One node's NODE_FIGURES over [start, end) (an idle stretch of `gpuclust job`): the same 6 instant queries
    as the report's node figures (one per figure, all nodes at once), this node's row kept. (None, warnings)
    when Prometheus is off or has nothing for it; never raises for what the server does."""
    warnings: list[str] = []
    if cfg.prometheus_url is None:
        return None, warnings
    try:
        url = parse_prometheus_url(cfg.prometheus_url)
    except ValueError as exc:
        return None, [f"telemetry: [telemetry] prometheus_url: {exc}"]
    t0, t1 = start.timestamp(), end.timestamp()
    if not t1 > t0:
        return None, warnings
    client = PrometheusClient(url, cfg.timeout_s, int(cfg.max_response_mib) * MIB)
    rows = _fetch_nodes(client, cfg, t0, t1, warnings)
    return next((row for row in rows if row["node"] == node), None), warnings
