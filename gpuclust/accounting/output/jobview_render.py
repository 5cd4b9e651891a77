"""`gpuclust job`'s output: one JSON object per job (--json) and the text a person reads, with a utilisation
sparkline per GPU on a terminal.

The JSON document (stable; new keys may be added, none renamed or removed):

    {"jobs": [JOB, ...], "errors": [{"job_id": "123", "error": "..."}], "warnings": ["..."]}

JOB: job_id, job_id_raw, requested (the id given), user, account, partition, qos, state, exit_code, running,
start, end (ISO 8601 UTC; end null while running), elapsed_s, timelimit_s, executions (a requeued job's: the
latest shown), nodes (names), node_count, gpu_count, gpu_type, alloc_cpus, mem_mb;
a job of MIG slices, shards or MPS also: gpu_equivalents (its share of physical GPUs, null: unknown), mig_profiles
({type: slices}), shards, mps, gpu_share_basis (how it was counted) and gpu_share_warnings, after gpu_type;
source (prometheus | store | usage_tres | null) and source_notes (why an earlier source did not answer);
gpu_use: report.json gpu_use's per-job names (allocated_gpu_hours, covered_gpu_hours, coverage, busy_gpu_hours,
held_idle_gpu_hours, util_mean_pct, util_max_pct, gpu_mem_max_mib, gpu_mem_total_mib, energy_kwh,
cpu_efficiency, mem_efficiency) and time_limit_efficiency, held_idle_cost, currency (null: unknown); a job of
slices, shards or MPS counts its GPU-hours in GPU-equivalents (allocated null where its share is unknown) and adds
gpu_device_hours (its devices x Elapsed, a slice as one) and gpu_util_rule (mig, shard, mps: why its utilisation
is unknown; summed, last-gpu: the usage TRES rule), its held_idle_cost priced per GPU-equivalent hour (a price
per slice-hour / the slice's share, figures/prices.card_price, as the report prices it);
gpus: per (node, GPU; a MIG slice also instance and profile): node, gpu, covered_s, busy_s, util_mean_pct, util_max_pct, held_idle_s,
under_threshold_s, longest_idle_s, longest_idle_start (ISO), fb_used_max_mib, fb_total_mib, power_mean_w,
power_max_w, energy_j, temp_max_c, xid_errors, ecc_dbe, util_profile (utilisation in 120 equal slices of the
job's window, null: no sample);
findings: [{kind, message, advice, evidence}] (figures/waste.py).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from gpuclust.accounting.figures.jobview import JobFigures
from gpuclust.accounting.figures.waste import Finding, duration

BARS = "▁▂▃▄▅▆▇█"


def _iso(value: datetime | float | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value, timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _r(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(float(value), digits)


def job_document(fig: JobFigures, findings: Sequence[Finding], price: float | None, currency: str) -> dict[str, Any]:
    r = fig.record
    hours = (lambda s: None if s is None else round(s / 3600, 6))  # noqa: E731
    cost = None
    if price is not None and fig.held_idle_gpu_s is not None:
        cost = round(fig.held_idle_gpu_s / 3600 * price, 6)
    share: dict[str, Any] = {}
    use_share: dict[str, Any] = {}
    if r.share is not None:  # (a job of MIG slices, shards or MPS; a job of whole GPUs has none of these keys)
        share = {"gpu_equivalents": _r(r.share.gpu_equivalents), "mig_profiles": dict(r.share.mig_profiles),
                 "shards": r.share.shards, "mps": r.share.mps, "gpu_share_basis": r.share.basis,
                 "gpu_share_warnings": list(r.share.warnings)}
        use_share = {"gpu_device_hours": hours(fig.device_gpu_s), "gpu_util_rule": fig.gpu_util_rule}
    return {
        "job_id": r.job_id, "job_id_raw": r.job_id_raw, "requested": r.requested, "user": r.user,
        "account": r.account, "partition": r.partition, "qos": r.qos, "state": r.state, "exit_code": r.exit_code,
        "running": r.running, "start": _iso(r.start), "end": _iso(r.end), "elapsed_s": r.elapsed_s,
        "timelimit_s": r.timelimit_s, "executions": r.executions, "nodes": list(r.nodes), "node_count": r.nnodes,
        "gpu_count": r.gpus, "gpu_type": r.gpu_type, **share, "alloc_cpus": r.alloc_cpus, "mem_mb": r.mem_mb,
        "source": fig.source, "source_notes": list(fig.source_notes),
        "gpu_use": {
            "allocated_gpu_hours": hours(fig.allocated_gpu_s) if fig.allocated_known else None,
            "covered_gpu_hours": hours(fig.covered_gpu_s),
            "coverage": _r(fig.coverage), "busy_gpu_hours": hours(fig.busy_gpu_s),
            "held_idle_gpu_hours": hours(fig.held_idle_gpu_s), "util_mean_pct": _r(fig.util_mean_pct, 4),
            "util_max_pct": _r(fig.util_max_pct, 4), "gpu_mem_max_mib": _r(fig.gpu_mem_max_mib, 3),
            "gpu_mem_total_mib": _r(fig.gpu_mem_total_mib, 3),
            "energy_kwh": None if fig.energy_j is None else round(fig.energy_j / 3.6e6, 9),
            "cpu_efficiency": _r(fig.cpu_efficiency), "mem_efficiency": _r(fig.mem_efficiency),
            "time_limit_efficiency": _r(fig.time_limit_efficiency), "held_idle_cost": cost,
            "currency": currency or None, **use_share,
        },
        "gpus": [{
            "node": g.node, "gpu": g.gpu, "covered_s": _r(g.covered_s, 3), "busy_s": _r(g.busy_s, 3),
            "util_mean_pct": _r(g.util_mean_pct, 4), "util_max_pct": _r(g.util_max_pct, 4),
            "held_idle_s": _r(g.idle_s, 3), "under_threshold_s": _r(g.under_threshold_s, 3),
            "longest_idle_s": _r(g.longest_idle_s, 3), "longest_idle_start": _iso(g.longest_idle_start),
            "fb_used_max_mib": _r(g.fb_used_max_mib, 3), "fb_total_mib": _r(g.fb_total_mib, 3),
            "power_mean_w": _r(g.power_mean_w, 3), "power_max_w": _r(g.power_max_w, 3),
            "energy_j": _r(g.energy_j, 3), "temp_max_c": _r(g.temp_max_c, 3), "xid_errors": g.xid_errors,
            "ecc_dbe": g.ecc_dbe, "util_profile": [_r(v, 2) for v in g.util_profile],
            **({"instance": g.instance, "profile": g.profile} if g.instance else {}),  # (a MIG slice)
        } for g in fig.gpus],
        "findings": [f.as_dict() for f in findings],
    }


def sparkline(profile: Sequence[float | None], width: int) -> str:
    """Utilisation over time in `width` characters (at most one per slice of the profile): each the mean of its
    slices' known values, ▁ (0%) to █ (100%); a space where no slice has a sample."""
    n = len(profile)
    if n == 0 or width <= 0:
        return ""
    width = min(width, n)
    out = []
    for i in range(width):
        a, b = i * n // width, max((i + 1) * n // width, i * n // width + 1)
        known = [v for v in profile[a:b] if v is not None]
        if not known:
            out.append(" ")
            continue
        level = min(len(BARS) - 1, max(0, int(sum(known) / len(known) / 100 * len(BARS))))
        out.append(BARS[level])
    return "".join(out)


def _pct(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v * 100:.{digits}f}%"


def _num(v: float | None, fmt: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{fmt}}{unit}"


def _gb(mib: float | None) -> str:
    return "n/a" if mib is None else f"{mib / 1024:.1f} GB"


def render_text(doc: dict[str, Any], width: int | None, style: Callable[[str], str] = lambda s: s) -> str:
    """The text view of `doc` (job_document); `width`: the terminal's columns for the sparklines (None: not a
    terminal, no sparkline)."""
    j, u = doc, doc["gpu_use"]
    lines = [style(f"job {j['job_id']}") + f" ({j['user'] or '?'}, account {j['account'] or '?'}, partition "
             f"{j['partition'] or '?'}): {j['state']}" + (" (running)" if j["running"] else "")]
    if j["executions"] > 1:
        lines.append(f"  requeued: {j['executions']} executions, the latest shown")
    limit = "n/a" if j["timelimit_s"] is None else duration(j["timelimit_s"])
    nodes = ",".join(j["nodes"]) or "none"
    lines.append(f"  elapsed {duration(j['elapsed_s'])} of {limit} ({_pct(u['time_limit_efficiency'])}), "
                 f"{j['gpu_count']} GPU(s){' ' + j['gpu_type'] if j['gpu_type'] else ''} on {j['node_count']} "
                 f"node(s) ({nodes}), {j['alloc_cpus'] or '?'} CPU(s)")
    shared = "gpu_equivalents" in j  # (a job of MIG slices, shards or MPS)
    if shared:
        eq = "unknown" if j["gpu_equivalents"] is None else f"{j['gpu_equivalents']:.3g}"
        lines.append(f"  GPU-equivalents {eq}: {j['gpu_share_basis']}")
        lines.extend(f"    ({w})" for w in j["gpu_share_warnings"])
    lines.append(f"  CPU efficiency {_pct(u['cpu_efficiency'], 1)}, memory efficiency {_pct(u['mem_efficiency'], 1)}")
    lines.append(f"  GPU figures from: {j['source'] or 'none (unknown, not 0)'}")
    for note in j["source_notes"] if j["source"] != "prometheus" else []:
        lines.append(f"    ({note})")
    if j["gpu_count"] or shared:
        def h(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.3f}"
        cost = ""
        if u["held_idle_cost"] is not None:
            cost = f" (cost {u['held_idle_cost']:.2f}{' ' + u['currency'] if u['currency'] else ''})"
        lines.append(f"  GPU-hours: allocated {h(u['allocated_gpu_hours'])}, covered {h(u['covered_gpu_hours'])} "
                     f"(coverage {_pct(u['coverage'])}), busy {h(u['busy_gpu_hours'])}, held-idle "
                     f"{h(u['held_idle_gpu_hours'])}{cost}")
        if shared:
            rule = f"; utilisation rule {u['gpu_util_rule']}" if u["gpu_util_rule"] else ""
            lines.append(f"    (in GPU-equivalents; device-hours {h(u['gpu_device_hours'])}, a slice as one{rule})")
        lines.append(f"  utilisation mean {_num(u['util_mean_pct'], '.1f', '%')}, max "
                     f"{_num(u['util_max_pct'], '.0f', '%')}; GPU memory peak {_gb(u['gpu_mem_max_mib'])}"
                     f"{' of ' + _gb(u['gpu_mem_total_mib']) if u['gpu_mem_total_mib'] else ''}")
    for g in j["gpus"]:
        mig = f" (MIG {g['profile'] or '?'} instance {g['instance']})" if g.get("instance") else ""
        lines.append(f"  {g['node']} GPU {g['gpu']}{mig}: util mean {_num(g['util_mean_pct'], '.1f', '%')} max "
                     f"{_num(g['util_max_pct'], '.0f', '%')}; under the threshold {duration(g['under_threshold_s'])}"
                     f" (longest {duration(g['longest_idle_s'])}); memory {_gb(g['fb_used_max_mib'])} of "
                     f"{_gb(g['fb_total_mib'])}")
        energy = "n/a" if g["energy_j"] is None else f"{g['energy_j'] / 3.6e6:.3f} kWh"
        events = f"Xid {_num(g['xid_errors'], 'g')}, ECC DBE {_num(g['ecc_dbe'], 'g')}"
        lines.append(f"    power mean {_num(g['power_mean_w'], '.0f', ' W')} max {_num(g['power_max_w'], '.0f', ' W')}, "
                     f"energy {energy}, temperature max {_num(g['temp_max_c'], '.0f', ' C')}, {events}")
        if width is not None and g["util_profile"]:
            label = "    util |"
            spark = sparkline(g["util_profile"], max(10, width - len(label) - 1))
            lines.append(f"{label}{spark}|")
    if j["findings"]:
        lines.append(style("  findings:"))
        for f in j["findings"]:
            lines.append(f"  - {f['message']}")
    if shared and width is not None:  # (a terminal: long lines folded under their indent, the sparklines kept)
        lines = [folded for line in lines for folded in _fold(line, width)]
    return "\n".join(lines)


def _fold(line: str, width: int) -> list[str]:
    if len(line) <= width or line.rstrip().endswith("|"):
        return [line]
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    return textwrap.wrap(line, width=max(width, 40), subsequent_indent=indent, break_on_hyphens=False) or [line]
