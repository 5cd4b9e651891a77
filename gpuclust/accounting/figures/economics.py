"""Unit economics of `gpuclust report`: capacity, idle and unavailable GPU-hours, fixed costs, the accepted-unit
denominator, baselines, break-even and sizing, and the submit policy's refusals.

Input: the normalized job table (gpuclust.accounting.ingest.schema), the site config, the period, the node events and
inventory (gpuclust.accounting.history.events) and the refusals (gpuclust.accounting.history.refusals). Output: one plain dict
(report.json's `economics`) and its tables; `DEFINITIONS` (from figures.catalog) says exactly what each figure is.

    total_cost_per_accepted_unit = total cost / accepted units, where total cost =
        completed-run + retries/failures + in progress + idle + unavailable    [GPU-hour terms]
        + network + storage + support + operations                            [fixed terms]
    idle = capacity - allocated - unavailable
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics.attempts import card_price, mix_weight
from gpuclust.accounting.figures.metrics.waits import ValueCounts
from gpuclust.accounting.figures.shares import NODE_LAYOUT_CHANGED, layouts_of, node_equivalents
from gpuclust.accounting.history import sources
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import SiteConfig
from gpuclust.config.economics import COST_TERMS
from gpuclust.slurm.gpushare import is_mig_type, type_share
from gpuclust.slurm.hostlist import expand

if TYPE_CHECKING:  # (the sources' readers load only where a source is read: sources.given_sources, stored_sources)
    from gpuclust.accounting.history.events import EventSource, Node
    from gpuclust.accounting.history.refusals import RefusalSource

MONTH_HOURS = 730.0  # 365 * 24 / 12
HOUR_TERMS = ("completed_run", "retries_failures", "in_progress", "idle", "unavailable")
TERMS = (*HOUR_TERMS, *COST_TERMS)
TOTAL = "(total)"

DEFINITIONS: dict[str, str] = catalog.definitions(catalog.ECONOMICS)  # (report.json: economics.<key>)


@dataclass(frozen=True)
class Window:
    """The economics' time span in epoch seconds: the period's start to the earlier of its end and as_of."""

    start: float
    end: float  # min(period end, as_of)

    @property
    def hours(self) -> float:
        return max(0.0, self.end - self.start) / 3600.0


def _col(table: pa.Table, name: str) -> pa.ChunkedArray | None:
    return table.column(name) if name in table.column_names else None


def _floats(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name)
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.int64())
    return np.asarray(pc.fill_null(pc.cast(col, pa.float64()), np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)


def _mix(gpu_type: str, config: SiteConfig | None = None) -> dict[str, float]:
    """'h100' -> {'h100': 1}; 'a100=1,h100=3' -> shares; '' -> {'': 1} (the partition's type). With `config`, a
    MIG slice in a mix weighs by its GPU-equivalents, not its device count ('1g.10gb=1,h100=2': 1/7 against 2)."""
    if "=" not in gpu_type:
        return {gpu_type: 1.0}
    parts = {}
    for item in gpu_type.split(","):
        name, _, count = item.partition("=")
        parts[name] = float(count) if count.isdigit() else 0.0
        if config is not None and name != "*":
            parts[name] *= mix_weight(config, name)
    total = sum(parts.values()) or 1.0
    return {("" if k == "*" else k): v / total for k, v in parts.items()}


class Pricing:
    """Price per GPU-hour of a (GPU type, partition); None when nothing is priced."""

    def __init__(self, config: SiteConfig, compute_rate: float | None):
        self.config = config
        self.compute_rate = compute_rate

    def price(self, gpu_type: str, partition: str) -> float | None:
        if self.compute_rate is not None:
            return self.compute_rate
        total, priced = 0.0, False
        for kind, share in _mix(gpu_type, self.config).items():
            p = card_price(self.config, kind or self.config.partition_gpu_type(partition), partition)
            if p is not None:
                total += p * share
                priced = True
        return total if priced else None

    def node_price(self, node: Node, partition: str) -> float | None:
        if self.compute_rate is not None:
            return self.compute_rate
        if len(node.gpu_types) > 1 and any(is_mig_type(k, self.config.gpu_type_shares) for k in node.gpu_types):
            return self._slices_price(node, partition)
        if len(node.gpu_types) > 1:
            return self.price(",".join(f"{k}={v}" for k, v in sorted(node.gpu_types.items())), partition)
        return self.price(next(iter(node.gpu_types), ""), partition)


    def _slices_price(self, node: Node, partition: str) -> float | None:
        """A MIG node's price per GPU-equivalent hour: its slice types weighed by their GPU-equivalents."""
        weights = {k: v * float(type_share(k, self.config.gpu_type_shares)[0] or 0) for k, v in node.gpu_types.items()}
        total = sum(weights.values())
        money = [(card_price(self.config, k, partition), w) for k, w in weights.items()]
        if not total or all(p is None for p, _ in money):
            return None
        return sum(p * w for p, w in money if p is not None) / total


def _equivalent_nodes(nodes: list[Node], config: SiteConfig) -> tuple[list[Node], list[str]]:
    """The nodes with their GPUs counted as GPU-equivalents (figures.shares.node_equivalents), and the names of
    those whose share is unknown. A node of whole GPUs stays as it is."""
    out: list[Node] = []
    unknown: list[str] = []
    for nd in nodes:
        eq = node_equivalents(nd, config)
        if eq is None:
            unknown.append(nd.name)
            out.append(nd)
        elif eq != nd.gpus:
            out.append(replace(nd, gpus=eq))  # type: ignore[arg-type]
        else:
            out.append(nd)
    return out, unknown


def _changed_layouts(nodes: list[Node], config: SiteConfig, events: EventSource | None) -> list[str]:
    """The nodes whose GPU layout changed in the period (figures.shares.layouts_of), where the inventory or the
    node events have MIG slices, shards or MPS (a cluster of whole GPUs: none, its capacity as before)."""
    if events is None or events.events is None or not events.events.nodes:
        return []
    share_of = config.gpu_type_shares
    sliced = any(any(g.name in ("shard", "mps") or (g.name == "gpu" and is_mig_type(g.type, share_of))
                     for g in nd.gres) for nd in nodes) \
        or any(is_mig_type(t, share_of) for ev in events.events.nodes for t in ev.gpu_types)
    if not sliced:
        return []
    return sorted(layouts_of(config, nodes, events).changed)


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _units_of(comment: str, label: str) -> float | None:
    match = re.search(r"(?:^|[,;\s])" + re.escape(label) + r"=([0-9]+(?:\.[0-9]+)?)(?=$|[,;\s])", comment)
    return float(match.group(1)) if match else None


PENDING_CLASSES = ("priority", "resources", "quota", "dependency", "held", "other", "none (not kept)")


def pending_class(reason: str) -> str:
    r = reason.strip()
    if r in ("", "None"):
        return "none (not kept)"
    if r == "Priority":
        return "priority"
    if r in ("Resources", "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved_for_jobs_in_higher_priority_"
             "partitions", "ReqNodeNotAvail", "NodeDown", "PartitionNodeLimit") or r.startswith("Resources"):
        return "resources"
    if r.startswith(("AssocGrp", "AssocMax", "QOSGrp", "QOSMax", "QOSMin")):
        return "quota"
    if r.startswith("Dependency") or r == "DependencyNeverSatisfied":
        return "dependency"
    if r in ("JobHeldUser", "JobHeldAdmin", "BeginTime") or r.startswith("JobHeld"):
        return "held"
    return "other"


@dataclass
class RowSums:
    """What the economics read of the job rows, as sums that add up over disjoint sets of rows (a partitioned
    build's buckets; one table is one set): add_row_sums merges two, economics_from finishes them."""

    # (partition, GPU type, term index into HOUR_TERMS) -> [GPU-hours in the window, GPUs, rows]
    hours: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    partitions: set[str] = field(default_factory=set)  # the partitions the rows name
    units: dict[str, list[float]] = field(default_factory=dict)  # partition -> [accepted units, completed]
    units_total: float = 0.0
    completed_total: int = 0
    without_units: int = 0
    held: dict[str, float] = field(default_factory=dict)  # node -> allocated GPU-hours inside its events
    waits: ValueCounts | None = None  # queue wait by pending-reason class (labels: PENDING_CLASSES)
    reason_known: bool = False  # some row has a Reason


def add_row_sums(a: RowSums, b: RowSums) -> RowSums:
    out = RowSums(hours={k: list(v) for k, v in a.hours.items()}, partitions=a.partitions | b.partitions,
                  units={k: list(v) for k, v in a.units.items()}, units_total=a.units_total + b.units_total,
                  completed_total=a.completed_total + b.completed_total,
                  without_units=a.without_units + b.without_units, held=dict(a.held),
                  waits=b.waits if a.waits is None else a.waits if b.waits is None else ValueCounts.merge(
                      [a.waits, b.waits]), reason_known=a.reason_known or b.reason_known)
    for key, values in b.hours.items():
        out.hours[key] = [x + y for x, y in zip(out.hours.get(key, [0.0] * len(values)), values, strict=True)]
    for name, values in b.units.items():
        out.units[name] = [x + y for x, y in zip(out.units.get(name, [0.0] * len(values)), values, strict=True)]
    for node, h in b.held.items():
        out.held[node] = out.held.get(node, 0.0) + h
    return out


def _window(period: Period, events: EventSource | None) -> Window:
    as_of = events.as_of if events is not None and events.as_of is not None else None
    return Window(float(period.start_epoch), min(float(period.end_epoch), as_of) if as_of else float(period.end_epoch))


def _event_intervals(events: EventSource | None, win: Window) -> dict[str, list[tuple[float, float]]]:
    """Per node (of the events, inventory or not): its events clipped to the window; {} without events."""
    ev_by_node: dict[str, list[tuple[float, float]]] = {}
    if events is None or events.events is None or events.nodes is None:
        return ev_by_node
    for ev in events.events.nodes:
        es, ee = max(ev.start, win.start), min(ev.end if ev.end is not None else win.end, win.end)
        if ee > es:
            ev_by_node.setdefault(ev.node, []).append((es, ee))
    return ev_by_node


def row_sums(table: pa.Table, config: SiteConfig, period: Period, events: EventSource | None,
             equivalents: np.ndarray | None = None) -> RowSums:
    """The RowSums of the rows of `table`. `equivalents`: each row's GPU-equivalents (figures.shares; NaN:
    unknown, counted as none here as in the totals); None: its GPUs are whole GPUs."""
    econ = config.economics
    win = _window(period, events)
    out = RowSums()
    # Before the per-row arrays below exist: its own arrays are freed by then (peak memory at 10M lines).
    out.waits, out.reason_known = _pending_wait_values(table, period, events.reasons if events is not None else None)

    # ---- allocated GPU-hours per row (numpy over dictionary codes: a million rows take well under a second) ----
    n = table.num_rows
    start = _floats(table, "start")
    end = _floats(table, "end")
    gpus = np.nan_to_num(_floats(table, "gpus") if equivalents is None else equivalents)
    alloc = _alloc_mask(table)
    running = np.isnan(end) & ~np.isnan(start)
    end_eff = np.where(running, win.end, end)
    s = np.maximum(start, win.start)
    e = np.minimum(end_eff, win.end)
    # An ended attempt's GPU-hours are the report's own (Elapsed x GPUs: Slurm's Elapsed leaves out time
    # suspended), of which the window holds its share of the attempt's span; so an attempt inside the window
    # counts here exactly as in the totals. A running one (or one without Elapsed) counts its span in the window.
    elapsed = _floats(table, "elapsed_s")
    with np.errstate(invalid="ignore", divide="ignore"):
        span = end - start
        in_window = np.where(alloc & ~np.isnan(s) & (e > s), e - s, 0.0)
        by_elapsed = ~running & ~np.isnan(elapsed) & (span > 0)
        seconds = np.where(by_elapsed, elapsed * (in_window / np.where(by_elapsed, span, 1.0)), in_window)
        hours = seconds / 3600.0 * gpus
    state_codes, state_values = _codes(table, "state")
    code = np.nan_to_num(_floats(table, "exit_code"), nan=-1)
    sig = np.nan_to_num(_floats(table, "exit_signal"), nan=-1)
    known = np.asarray(pc.fill_null(table.column("exit_code_known"), True).to_numpy(zero_copy_only=False),
                       dtype=bool) if n else np.zeros(0, dtype=bool)
    completed_state = np.array([v == "COMPLETED" for v in state_values] + [False], dtype=bool)[state_codes]
    done = completed_state & (((code == 0) & (sig == 0)) | ~known)
    kind = np.where(running, 2, np.where(done, 0, 1))  # 0 completed-run, 1 retries/failures, 2 in progress
    pcodes, pvalues = _codes(table, "partition")
    gcodes, gvalues = _codes(table, "gpu_type")
    het = np.nan_to_num(_floats(table, "het_offset"), nan=0)
    pnames = [v or "(none)" for v in pvalues] + ["(none)"]
    gnames = [v or "" for v in gvalues] + [""]
    out.partitions = {v for v in pvalues if v}

    sel = np.flatnonzero(hours > 0)
    if len(sel):
        # sums per (partition, GPU type, term): few groups, priced once each (economics_from)
        combo = (pcodes[sel].astype(np.int64) * (len(gnames)) + gcodes[sel]) * 3 + kind[sel]
        inverse, keys = sorting.factorize(combo)
        group_hours = np.bincount(inverse, weights=hours[sel], minlength=len(keys))
        group_gpus = np.bincount(inverse, weights=gpus[sel], minlength=len(keys))
        group_n = np.bincount(inverse, minlength=len(keys))
        for key, h, g, cnt in zip(keys.tolist(), group_hours.tolist(), group_gpus.tolist(), group_n.tolist(),
                                  strict=True):
            gi = (key // 3) % len(gnames)
            pi = key // 3 // len(gnames)
            into = out.hours.setdefault((pnames[pi], gnames[gi], key % 3), [0.0, 0.0, 0.0])
            into[0] += h
            into[1] += g
            into[2] += cnt

    # ---- units ----
    with np.errstate(invalid="ignore"):
        ended_in = done & ~np.isnan(end) & (end >= period.start_epoch) & (end < period.end_epoch) & (het <= 0) & alloc
    at = np.flatnonzero(ended_in)
    if econ.denominator == "units" and len(at):
        ccodes, cvalues = _codes(table, "comment")
        acodes, avalues = _codes(table, "account")
        from_comment = np.array([_units_of(v or "", econ.units_label) if v else None for v in cvalues] + [None],
                                dtype=float)[ccodes[at]]
        default = np.array([econ.units_per_job.get(v or "") for v in avalues] + [None], dtype=float)[acodes[at]]
        units = np.where(np.isnan(from_comment), default, from_comment)
        out.without_units = int(np.isnan(units).sum())
        units = np.nan_to_num(units)
    else:
        units = np.ones(len(at))
    if len(at):
        unit_sums = np.bincount(pcodes[at], weights=units, minlength=len(pnames))
        unit_counts = np.bincount(pcodes[at], minlength=len(pnames))
        for pi in np.flatnonzero(unit_counts).tolist():
            into = out.units.setdefault(pnames[pi], [0.0, 0.0])
            into[0] += float(unit_sums[pi])
            into[1] += int(unit_counts[pi])
        out.units_total = float(units.sum())
        out.completed_total = len(at)

    # ---- allocations inside node events (unavailable = events - these) ----
    by_node = {nd.name for nd in (events.nodes or [])} if events is not None else set()
    intervals = {k: v for k, v in _event_intervals(events, win).items() if k in by_node}
    if intervals:
        for name, (js, je, jg) in _node_allocations(table, hours > 0, s, e, gpus, intervals).items():
            held = 0.0
            for a, b in _merge(intervals[name]):  # (few intervals; the rows are arrays)
                ov = np.minimum(je, b) - np.maximum(js, a)
                held += float((np.clip(ov, 0.0, None) * jg).sum()) / 3600.0
            out.held[name] = held
    return out


def economics_from(
    sums: RowSums,
    config: SiteConfig,
    period: Period,
    events: EventSource | None,
    refusal_source: RefusalSource | None,
    *,
    target: float | None = None,
    restore_measured: dict[str, float] | None = None,
) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """report.json's `economics` block and its tables (economics_terms, economics_baselines, refusals_by_*,
    wait_by_pending_reason), from the rows' RowSums.

    The steps, in order: `_input_notes` (what the events and inventory leave unknown), `_pricing` (the GPU-hour
    price, the compute cost spread over capacity), `_allocated_terms` and `_add_units` (the rows' sums per
    partition and in total), with node events `_unavailable_per_node`, `_capacity_and_unavailable` and `_idle`
    (else `_unknown_idle`), `_fixed_costs`, `_finish` of each row, the cross-checks, baselines and sizing on
    the finished total, `_refusals_block`, `_tables`."""
    econ = config.economics
    win = _window(period, events)
    nodes = events.nodes if events is not None else None
    have_events = events is not None and events.events is not None
    capacity_known = have_events and nodes is not None
    notes = _input_notes(events, nodes is not None)
    waits, wait_note = _pending_waits_of(sums.waits, sums.reason_known,
                                         events.reasons if events is not None else None)
    node_list = nodes or []
    if node_list:  # (capacity in GPU-equivalents: a MIG node's slices sum to its cards)
        node_list, unknown_nodes = _equivalent_nodes(node_list, config)
        if unknown_nodes:
            capacity_known = False
            notes.append("Capacity, idle and unavailable are unknown: the GPU-equivalents of node(s) "
                         f"{', '.join(unknown_nodes)} are unknown (a MIG profile of unknown share in their Gres; "
                         "input.gpu_share_warnings names it).")
        changed = _changed_layouts(node_list, config, events)
        if changed:
            capacity_known = False
            notes.append("Capacity, idle and unavailable are unknown: the GPU layout of node(s) "
                         f"{', '.join(changed)} changed in the period (MIG slices, shards or GPUs re-cut: "
                         f"{NODE_LAYOUT_CHANGED} in input.gpu_share_warnings), so their GPU-equivalents over it "
                         "are unknown.")
    cap_total_h: float | None = sum(nd.gpus for nd in node_list) * win.hours if capacity_known else None
    pricing = _pricing(config, win, cap_total_h, notes)

    parts = sorted(sums.partitions | {p for nd in node_list for p in nd.partitions})
    rows: dict[str, dict[str, Any]] = {p: _empty_row() for p in [*parts, TOTAL]}
    by_type_hours = _allocated_terms(rows, sums, pricing, config)
    _add_units(rows, sums)
    if capacity_known and events is not None and events.events is not None:
        unavailable_node = _unavailable_per_node(events, win, node_list, sums.held, notes)
        total_share = _capacity_and_unavailable(rows, parts, node_list, unavailable_node, pricing, cap_total_h, win)
        _idle(rows, parts, node_list, pricing, win, notes)
    else:
        total_share = 0.0
        _unknown_idle(rows)
    _fixed_costs(rows, parts, total_share, econ.costs.monthly(), win, notes)

    out_rows = [_finish(name, row, econ.currency) for name, row in rows.items()]
    total_row = out_rows[-1]
    cross = _cross_check(events, total_row, period) if capacity_known and events is not None else None
    registered = _registered_capacity(events, win)
    baselines = _baselines(config, total_row, by_type_hours)
    sizing = _sizing(config, total_row, target, out_rows, restore_measured)
    for r in out_rows:
        for k in ("attempts", "attempt_gpus", "_price"):
            r.pop(k)
    refusals_block = _refusals_block(refusal_source)
    if wait_note:
        notes.append(wait_note)
    data = {
        "currency": econ.currency,
        "denominator": econ.denominator,
        "units_label": econ.units_label if econ.denominator == "units" else None,
        "completed_without_units": sums.without_units if econ.denominator == "units" else None,
        "capacity": "known" if capacity_known else "unknown",
        "window": {"start": period.start.isoformat(), "hours": round(win.hours, 6)},
        "by_partition": out_rows[:-1],
        "total": total_row,
        "baselines": baselines,
        "sizing": sizing,
        "sreport_cross_check": cross,
        "registered_capacity_gpu_hours": _r(registered),
        "refusals": refusals_block,
        "pending_reason_wait": waits,
        "notes": notes,
    }
    return data, _tables(out_rows, baselines, waits, refusals_block)


def _input_notes(events: EventSource | None, have_nodes: bool) -> list[str]:
    """The notes on what the node events and inventory leave unknown or low (the first of the block's notes)."""
    notes: list[str] = []
    if events is None or events.events is None:
        notes.append("No node events (sacctmgr show event) for the period: capacity, idle and unavailable GPU-hours "
                     "are unknown. `report fetch` stores them when the site config has [costs], a [baseline NAME] "
                     "or slurmctld_log; with --input give --events and --nodes.")
    elif not have_nodes:
        notes.append("No node inventory (scontrol show node): capacity and idle are unknown.")
    if events is not None and events.missing and events.events is not None:
        notes.append(f"Node events missing for day(s) {', '.join(events.missing)}: unavailable GPU-hours may be low.")
    if events is not None and events.events is not None and events.events.problems:
        bad = events.events.problems
        notes.append(f"{len(bad)} node event row(s) could not be read and are left out, so unavailable GPU-hours may "
                     f"be low: {'; '.join(str(p) for p in bad[:3])}{' ...' if len(bad) > 3 else ''} (fix the file, "
                     "or record it again with `sacctmgr show event -P`)")
    return notes


def _pricing(config: SiteConfig, win: Window, cap_total_h: float | None, notes: list[str]) -> Pricing:
    """The price of a GPU-hour: the site's prices, or with [costs] compute_per_month that cost of the window
    spread evenly over the capacity GPU-hours (none at all, with a note, where capacity is unknown)."""
    econ = config.economics
    compute_rate = None
    if econ.costs.compute_per_month is not None:
        if cap_total_h:
            compute_rate = econ.costs.compute_per_month * win.hours / MONTH_HOURS / cap_total_h
        else:
            notes.append("compute_per_month is set but capacity is unknown: the compute term cannot be spread over "
                         "GPU-hours, so the GPU-hour terms are unpriced.")
            compute_rate = math.nan
    pricing = Pricing(config, None if compute_rate is not None and math.isnan(compute_rate) else compute_rate)
    if compute_rate is not None and math.isnan(compute_rate):
        pricing.price = lambda gpu_type, partition: None  # type: ignore[method-assign]
    return pricing


def _allocated_terms(rows: dict[str, dict[str, Any]], sums: RowSums, pricing: Pricing,
                     config: SiteConfig) -> dict[str, float]:
    """The allocated GPU-hour terms, their cost (else unpriced hours) and the attempts, into each partition's
    row and the total's; returns the ended attempts' GPU-hours per GPU type (a mix split by its shares), which
    the baselines price."""
    by_type_hours: dict[str, float] = {}
    for (p_name, g_name, term_index), (h, g, cnt) in sums.hours.items():
        price = pricing.price(g_name, "" if p_name == "(none)" else p_name)
        term = HOUR_TERMS[term_index]
        for target_row in (rows.setdefault(p_name, _empty_row()), rows[TOTAL]):
            target_row[term]["gpu_hours"] += h
            if price is None:
                target_row["unpriced_gpu_hours"] += h
            else:
                target_row[term]["cost"] += h * price
            if term != "in_progress":
                target_row["attempts"] += int(cnt)
                target_row["attempt_gpus"] += g
        if term != "in_progress":
            fallback = config.partition_gpu_type(p_name) or ""
            for t, share in _mix(g_name or fallback, config).items():
                t = t or fallback
                by_type_hours[t] = by_type_hours.get(t, 0.0) + h * share
    return by_type_hours


def _add_units(rows: dict[str, dict[str, Any]], sums: RowSums) -> None:
    """The accepted units and completed attempts into each partition's row and the total's."""
    for p_name, (unit_sum, unit_count) in sums.units.items():
        row = rows.setdefault(p_name, _empty_row())
        row["units"] += unit_sum
        row["completed"] += int(unit_count)
    rows[TOTAL]["units"] += sums.units_total
    rows[TOTAL]["completed"] += sums.completed_total


def _unavailable_per_node(events: EventSource, win: Window, node_list: list[Node], held: dict[str, float],
                          notes: list[str]) -> dict[str, float]:
    """Per inventory node: its GPU-hours inside its merged events less the jobs' GPU-hours held there meanwhile
    (a draining node finishes its jobs: those count as allocated); events of other nodes are noted, left out."""
    by_node = {nd.name: nd for nd in node_list}
    ev_by_node = _event_intervals(events, win)
    unknown_nodes = sorted(set(ev_by_node) - set(by_node))
    if unknown_nodes:
        notes.append(f"Node events of node(s) not in the inventory are left out: {', '.join(unknown_nodes)}.")
    unavailable_node: dict[str, float] = {}
    for name, ivs in ev_by_node.items():
        if name not in by_node:
            continue
        merged = _merge(ivs)
        g = by_node[name].gpus
        total = sum((b - a) for a, b in merged) / 3600.0 * g
        unavailable_node[name] = max(0.0, total - held.get(name, 0.0))
    return unavailable_node


def _capacity_and_unavailable(rows: dict[str, dict[str, Any]], parts: list[str], node_list: list[Node],
                              unavailable_node: dict[str, float], pricing: Pricing, cap_total_h: float | None,
                              win: Window) -> float:
    """Capacity, nodes and unavailable GPU-hours (priced at each node's price) of each partition (over its
    nodes) and of the total (over distinct nodes); returns the partitions' capacity summed, the share base of
    the fixed costs."""
    shares: dict[str, float] = {}
    for p in parts:
        members = [nd for nd in node_list if p in nd.partitions]
        cap = sum(nd.gpus for nd in members) * win.hours
        rows[p]["capacity_gpu_hours"] = cap
        rows[p]["nodes"] = len(members)
        shares[p] = cap
        for nd in members:
            h = unavailable_node.get(nd.name, 0.0)
            rows[p]["unavailable"]["gpu_hours"] += h
            price = pricing.node_price(nd, p)
            if price is not None:
                rows[p]["unavailable"]["cost"] += h * price
    rows[TOTAL]["capacity_gpu_hours"] = cap_total_h
    rows[TOTAL]["nodes"] = len(node_list)
    for nd in node_list:
        h = unavailable_node.get(nd.name, 0.0)
        rows[TOTAL]["unavailable"]["gpu_hours"] += h
        price = pricing.node_price(nd, nd.partitions[0] if nd.partitions else "")
        if price is not None:
            rows[TOTAL]["unavailable"]["cost"] += h * price
    return sum(shares.values())


def _idle(rows: dict[str, dict[str, Any]], parts: list[str], node_list: list[Node], pricing: Pricing, win: Window,
          notes: list[str]) -> None:
    """Idle = capacity - allocated - unavailable of each row, priced at its nodes' capacity-weighted price (a
    row without capacity: idle and unavailable unknown); with disjoint partitions the total's idle cost is
    theirs summed."""
    for name, row in rows.items():
        cap = row["capacity_gpu_hours"]
        if cap is None:  # a partition the inventory does not have (removed, or no partition): unknown
            row["idle"] = {"gpu_hours": None, "cost": None}
            row["unavailable"] = {"gpu_hours": None, "cost": None}
            continue
        allocated = sum(row[t]["gpu_hours"] for t in ("completed_run", "retries_failures", "in_progress"))
        idle = cap - allocated - row["unavailable"]["gpu_hours"]
        row["idle"]["gpu_hours"] = idle
        row["idle"]["cost"] = idle * _capacity_price(row, name, node_list, pricing, win)
    if all(len(nd.partitions) <= 1 for nd in node_list) and not any(
            rows[p]["capacity_gpu_hours"] is None for p in parts):
        # disjoint partitions: the total's idle is theirs, each at its own price (the average price of all
        # nodes would misprice idle GPUs that sit mostly in one partition)
        rows[TOTAL]["idle"]["cost"] = sum(rows[p]["idle"]["cost"] for p in parts)
        # (`name` and `idle`: the loop's last row, and the last idle it computed)
        if idle < -1e-6:
            notes.append(f"{name}: allocated + unavailable exceed capacity by {-idle:.3f} GPU-hours (the node "
                         "inventory changed during the period, or partitions overlap).")


def _unknown_idle(rows: dict[str, dict[str, Any]]) -> None:
    """Without node events or inventory: idle and unavailable unknown in every row (never 0)."""
    for row in rows.values():
        row["idle"] = {"gpu_hours": None, "cost": None}
        row["unavailable"] = {"gpu_hours": None, "cost": None}


def _fixed_costs(rows: dict[str, dict[str, Any]], parts: list[str], total_share: float, monthly: dict[str, float],
                 win: Window, notes: list[str]) -> None:
    """The fixed cost terms of the window (per month x hours / 730) in the total, split over the partitions by
    their share of capacity (None in each where capacity is unknown, with a note)."""
    for term in COST_TERMS:
        period_cost = monthly[term] * win.hours / MONTH_HOURS
        rows[TOTAL][term]["cost"] = period_cost
        for p in parts:
            if total_share > 0:
                rows[p][term]["cost"] = period_cost * (rows[p]["capacity_gpu_hours"] or 0.0) / total_share
            else:
                rows[p][term]["cost"] = None
    if any(monthly.values()) and total_share <= 0:
        notes.append("Fixed costs are not split over partitions without a known capacity: they appear in the total "
                     "only.")


def _registered_capacity(events: EventSource | None, win: Window) -> float | None:
    """GPU-hours of slurmdbd's 'Cluster Registered TRES' events in the window (the GPUs slurmctld registered),
    the capacity's cross-check; None without them."""
    if events is None or events.events is None or not events.events.cluster:
        return None
    registered = 0.0
    for ct in events.events.cluster:
        a, b = max(ct.start, win.start), min(ct.end if ct.end is not None else win.end, win.end)
        if b > a:
            registered += ct.gpus * (b - a) / 3600.0
    return registered


def _refusals_block(refusal_source: RefusalSource | None) -> dict[str, Any]:
    """The block's `refusals`: the submit policy's rejections counted by rule, account, user and partition,
    or why they are not known; beside them, `would_refuse`: the jobs rules in warn mode accepted and would have
    refused, counted the same way."""
    if refusal_source is None or refusal_source.refusals is None:
        return {"known": False, "why": "no slurmctld log read (site slurmctld_log + `report fetch`, or "
                "--slurmctld-log with --input)"}
    from gpuclust.accounting.history.refusals import counts

    real = [r for r in refusal_source.refusals if not r.warn]
    warned = [r for r in refusal_source.refusals if r.warn]
    return {"known": True, "total": len(real),
            "ignored_log_lines": refusal_source.ignored_lines,
            "unreadable_lines": refusal_source.bad_lines,
            "missing_days": refusal_source.missing_days,
            **counts(real),
            "would_refuse": {"total": len(warned), **counts(warned, "would_refuse")}}


def _tables(out_rows: list[dict[str, Any]], baselines: list[dict[str, Any]], waits: list[dict[str, Any]],
            refusals_block: dict[str, Any]) -> dict[str, pd.DataFrame]:
    """The block's tables: economics_terms, economics_baselines, wait_by_pending_reason, refusals_by_* (known)."""
    tables = {
        "economics_terms": _terms_table(out_rows),
        "economics_baselines": pd.DataFrame(baselines),
        "wait_by_pending_reason": pd.DataFrame(waits),
    }
    if refusals_block["known"]:
        for dim in ("rule", "account", "user", "partition"):
            tables[f"refusals_by_{dim}"] = pd.DataFrame(refusals_block[f"by_{dim}"], columns=[dim, "refusals"])
            if refusals_block["would_refuse"]["total"]:
                tables[f"would_refuse_by_{dim}"] = pd.DataFrame(refusals_block["would_refuse"][f"by_{dim}"],
                                                                columns=[dim, "would_refuse"])
    return tables


def _empty_row() -> dict[str, Any]:
    row: dict[str, Any] = {t: {"gpu_hours": 0.0, "cost": 0.0} for t in HOUR_TERMS}
    row.update({t: {"gpu_hours": None, "cost": 0.0} for t in COST_TERMS})
    row.update(capacity_gpu_hours=None, nodes=None, units=0.0, completed=0, unpriced_gpu_hours=0.0, attempts=0,
               attempt_gpus=0.0)
    return row


def _capacity_price(row: dict[str, Any], name: str, nodes: list[Node], pricing: Pricing, win: Window) -> float:
    """GPU-hour price of idle capacity: the capacity-weighted price of the partition's nodes (all nodes for the
    total); 0 where unpriced."""
    members = nodes if name == TOTAL else [nd for nd in nodes if name in nd.partitions]
    weight, money = 0.0, 0.0
    for nd in members:
        p = pricing.node_price(nd, name if name != TOTAL else (nd.partitions[0] if nd.partitions else ""))
        if p is not None:
            weight += nd.gpus
            money += nd.gpus * p
    return money / weight if weight else 0.0


def _node_allocations(table: pa.Table, rows: np.ndarray, s: np.ndarray, e: np.ndarray, gpus: np.ndarray,
                      intervals: dict[str, list[tuple[float, float]]]) -> dict[str, tuple[np.ndarray, ...]]:
    """Per node with events: the (start, end, GPUs on that node) arrays of the allocation rows on it that overlap
    some event (GPUs split evenly over the row's nodes). Each distinct NodeList is expanded once."""
    out: dict[str, tuple[np.ndarray, ...]] = {}
    merged = _merge([iv for ivs in intervals.values() for iv in ivs])
    if not merged or not rows.any():
        return out
    starts = np.array([a for a, _ in merged])
    ends = np.array([b for _, b in merged])
    idx = np.flatnonzero(rows)
    k = np.searchsorted(starts, e[idx], side="left") - 1  # the last event interval starting before the row ends
    idx = idx[(k >= 0) & (ends[np.maximum(k, 0)] > s[idx])]
    if not len(idx):
        return out
    ncodes, nvalues = _codes(table, "nodelist")
    per = gpus[idx] / np.maximum(1.0, np.nan_to_num(_floats(table, "nnodes"), nan=1.0)[idx])
    codes_at = ncodes[idx]
    members: dict[str, list[int]] = {}
    for c in np.unique(codes_at).tolist():
        text = nvalues[c] if c < len(nvalues) else None
        for name in expand(text) if text else []:
            if name in intervals:
                members.setdefault(name, []).append(c)
    for name, codes in members.items():
        on = np.isin(codes_at, codes)
        out[name] = (s[idx][on], e[idx][on], per[on])
    return out


def _codes(table: pa.Table, name: str) -> tuple[np.ndarray, list[str | None]]:
    """A string column as integer codes into its distinct values; the code len(values) stands for null (and for
    a column the input lacks)."""
    col = _col(table, name)
    if col is None or table.num_rows == 0:
        return np.zeros(table.num_rows, dtype=np.int64), []
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    values = col.dictionary.to_pylist()
    indices = col.indices
    codes = np.asarray((pc.fill_null(indices, len(values)) if indices.null_count else indices).to_numpy(
        zero_copy_only=False), dtype=np.int64)
    return codes, values


def _alloc_mask(table: pa.Table) -> np.ndarray:
    """Rows with an allocation (AllocTRES not empty): a job cancelled while pending has none."""
    codes, values = _codes(table, "alloc_tres")
    return np.array([bool(v) for v in values] + [False], dtype=bool)[codes]


def _r(v: float | None, nd: int = 6) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(v, nd)


def _finish(name: str, row: dict[str, Any], currency: str | None) -> dict[str, Any]:
    terms = {t: {"gpu_hours": _r(row[t]["gpu_hours"]), "cost": _r(row[t]["cost"])} for t in TERMS}
    costs = [terms[t]["cost"] for t in TERMS]
    total_cost = None if any(c is None for c in costs) else round(sum(c for c in costs if c is not None), 6)
    allocated = sum(row[t]["gpu_hours"] for t in ("completed_run", "retries_failures", "in_progress"))
    cap = row["capacity_gpu_hours"]
    units = row["units"]
    return {
        "partition": name,
        "nodes": row["nodes"],
        "capacity_gpu_hours": _r(cap),
        "allocated_gpu_hours": _r(allocated),
        "terms": terms,
        "total_cost": total_cost,
        "unpriced_gpu_hours": _r(row["unpriced_gpu_hours"]),
        "completed": row["completed"],
        "accepted_units": _r(units),
        "total_cost_per_accepted_unit": _r(total_cost / units) if total_cost is not None and units else None,
        "completed_run_share_of_capacity": _r(row["completed_run"]["gpu_hours"] / cap) if cap else None,
        "currency": currency,
        "attempts": row["attempts"],
        "attempt_gpus": row["attempt_gpus"],
        "_price": (row["completed_run"]["cost"] + row["retries_failures"]["cost"]) / (
            row["completed_run"]["gpu_hours"] + row["retries_failures"]["gpu_hours"])
        if row["completed_run"]["gpu_hours"] + row["retries_failures"]["gpu_hours"] > 0 else None,
    }


def _terms_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    records = []
    for r in rows:
        rec: dict[str, Any] = {"partition": r["partition"], "capacity_gpu_hours": r["capacity_gpu_hours"],
                               "allocated_gpu_hours": r["allocated_gpu_hours"]}
        for t in TERMS:
            if t in HOUR_TERMS:
                rec[f"{t}_gpu_hours"] = r["terms"][t]["gpu_hours"]
            rec[f"{t}_cost"] = r["terms"][t]["cost"]
        rec.update(total_cost=r["total_cost"], accepted_units=r["accepted_units"],
                   total_cost_per_accepted_unit=r["total_cost_per_accepted_unit"],
                   completed_run_share_of_capacity=r["completed_run_share_of_capacity"])
        records.append(rec)
    return pd.DataFrame(records)


def _baselines(config: SiteConfig, total: dict[str, Any], by_type_hours: dict[str, float]) -> list[dict[str, Any]]:
    units = total["accepted_units"] or 0.0
    cluster = total["total_cost_per_accepted_unit"]
    share = total["completed_run_share_of_capacity"]
    out = []
    for b in config.economics.baselines.values():
        unit_cost: float | None
        note = None
        if b.kind == "unit":
            unit_cost = b.price_per_unit
        else:
            money, missing = 0.0, []
            for t, h in sorted(by_type_hours.items()):
                price = b.gpu_hour_price(t)
                if price is None:
                    missing.append(t or "(untyped)")
                else:
                    money += h * price / b.speed
            unit_cost = money / units if units and not missing else None
            if missing:
                note = f"no price for GPU type(s) {', '.join(missing)}"
        break_even = None
        if unit_cost and cluster is not None and share is not None:
            break_even = cluster * share / unit_cost
        out.append({"baseline": b.name, "kind": b.kind, "cost_per_accepted_unit": _r(unit_cost),
                    "cluster_total_cost_per_accepted_unit": cluster,
                    "cluster_vs_baseline": _r(cluster / unit_cost) if cluster is not None and unit_cost else None,
                    "break_even_completed_run_share_of_capacity": _r(break_even), "note": note})
    return out


def _sizing(config: SiteConfig, total: dict[str, Any], target: float | None, rows: list[dict[str, Any]],
            restore_measured: dict[str, float] | None = None) -> dict[str, Any]:
    cap = total["capacity_gpu_hours"]
    units = total["accepted_units"] or 0.0
    per_gpu_month = units / (cap / MONTH_HOURS) if cap else None
    goal = target if target is not None else config.target_completed_runs_per_month
    required = goal / per_gpu_month if goal is not None and per_gpu_month else None
    what_if = []
    for r in rows[:-1]:
        part = config.partitions.get(r["partition"])
        measured = (restore_measured or {}).get(r["partition"])
        restore = measured if measured is not None else (part.expect_restore_seconds if part else None)
        attempts = r["attempts"]
        if not attempts:
            continue
        mean_h = (r["terms"]["completed_run"]["gpu_hours"] + r["terms"]["retries_failures"]["gpu_hours"]) / attempts
        mean_gpus = r["attempt_gpus"] / attempts
        lost = mean_h / 2 + (restore or 0.0) / 3600.0 * mean_gpus
        price = r["_price"]
        what_if.append({"partition": r["partition"], "restore_seconds": restore,
                        "restore_source": "measured (acceptance storage, median)" if measured is not None
                        else ("expect_restore_seconds" if restore is not None else None),
                        "mean_attempt_gpu_hours": _r(mean_h),
                        "mean_attempt_gpus": _r(mean_gpus), "gpu_hours_lost_per_node_loss": _r(lost),
                        "cost_per_node_loss": _r(lost * price) if price is not None else None,
                        "note": None if restore is not None else "no restore time measured or expected for this "
                        "partition: restart time counted as 0"})
    return {"accepted_units_per_capacity_gpu_month": _r(per_gpu_month), "target_per_month": goal,
            "required_gpu_capacity": _r(required), "gpu_month_hours": MONTH_HOURS, "node_loss_what_if": what_if}


def _cross_check(events: EventSource, total: dict[str, Any], period: Period) -> dict[str, Any] | None:
    if events.sreport is None:
        return None
    sr = events.sreport
    window = events.sreport_window
    same = window is None or (window[0] == period.start_epoch and window[1] == period.end_epoch)
    return {"sreport_gpu_hours": sr.as_dict(),
            "sreport_window": None if window is None else [_iso_utc(window[0]), _iso_utc(window[1])],
            "same_window": same,
            "gpuclust_gpu_hours": {"capacity": total["capacity_gpu_hours"], "allocated": total["allocated_gpu_hours"],
                                   "unavailable": total["terms"]["unavailable"]["gpu_hours"],
                                   "idle": total["terms"]["idle"]["gpu_hours"]},
            "note": "sreport reads slurmdbd's hourly rollups (the current hour is missing until rolled up) and "
                    "prints whole GPU-minutes; its Down covers drained nodes too (lab, 22.05), so it compares with "
                    "unavailable; its Reported follows the GPUs slurmctld registered (see "
                    "registered_capacity_gpu_hours)"
                    + ("" if same else "; `report fetch` stores sreport per UTC day, so it covers whole days here "
                       "while the report period does not")}


def _iso_utc(epoch: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pending_waits(table: pa.Table, period: Period,
                   reasons: dict[tuple[int, float], str] | None) -> tuple[list[dict[str, Any]], str]:
    """Queue wait of attempts started in the period, by the class of the pending reason sacct kept.

    The reason is the table's `reason` column (sacct's Reason, read with the jobs by every reader); `reasons`
    (an older store's reasons.txt, or `report build --reasons FILE`: (JobIDRaw, Start epoch) -> Reason) wins
    where it has the row. Unknown when neither says anything: a dump or stored day without the column reads
    null, and a row whose reason is known nowhere counts as 'none (not kept)'."""
    return _pending_waits_of(*_pending_wait_values(table, period, reasons), reasons)


def _pending_wait_values(table: pa.Table, period: Period, reasons: dict[tuple[int, float], str] | None
                         ) -> tuple[ValueCounts, bool]:
    """_pending_waits' waits as ValueCounts by class, and whether some row has a Reason (where none has, and
    `reasons` is None, the waits are unknown: _pending_waits_of says so). (Computed either way: in a partitioned
    build another bucket's rows may have a Reason, and then these count as 'none (not kept)'.)"""
    column = table.column("reason") if "reason" in table.column_names else None
    reason_known = column is not None and column.null_count < len(column)
    start = _floats(table, "start")
    with np.errstate(invalid="ignore"):
        chosen = (start >= period.start_epoch) & (start < period.end_epoch) & _alloc_mask(table)
    # The other columns only for the rows started in the period (memory: a store build holds the whole period).
    rows = np.flatnonzero(chosen)
    del chosen
    picked = table.select(["eligible", "submit", "job_id_raw", "het_offset"]).take(pa.array(rows))
    keep = np.nan_to_num(_floats(picked, "het_offset"), nan=0) <= 0
    at = rows[keep]
    start = start[at]
    eligible = _floats(picked, "eligible")[keep]
    since = np.where(np.isnan(eligible), _floats(picked, "submit")[keep], eligible)
    raw_at = np.nan_to_num(_floats(picked, "job_id_raw"), nan=-1).astype(np.int64)[keep]
    del picked, rows, eligible
    none_class = PENDING_CLASSES.index("none (not kept)")
    cls = np.full(len(at), none_class, dtype=np.int64)
    if column is not None and reason_known:
        enc = pc.dictionary_encode(pc.cast(column.take(pa.array(at)), pa.string())).combine_chunks()
        per_value = np.array([PENDING_CLASSES.index(pending_class(v)) for v in enc.dictionary.to_pylist()]
                             + [none_class], dtype=np.int64)
        codes = np.asarray(pc.fill_null(enc.indices, len(enc.dictionary)).to_numpy(zero_copy_only=False))
        cls = per_value[codes]
    if reasons:
        cls = _file_reasons(reasons, raw_at, start, cls)
    return ValueCounts.of(list(PENDING_CLASSES), cls, start - since), reason_known


def _pending_waits_of(waits: ValueCounts | None, reason_known: bool,
                      reasons: dict[tuple[int, float], str] | None) -> tuple[list[dict[str, Any]], str]:
    """_pending_waits' rows and note from the waits by class."""
    if waits is None or (reasons is None and not reason_known):
        return [], ("Queue wait by pending reason: unknown for this input (`report fetch` stores sacct's Reason "
                    "with the jobs; with --input, a dump with the Reason column, or --reasons FILE: "
                    "`sacct -a -D -X -P -n -o JobIDRaw,Start,Reason`).")
    by_class: dict[Any, Any] = {row["label"]: row for row in waits.summary().to_dict("records")}
    out = []
    for c in PENDING_CLASSES:
        row = by_class.get(c)
        out.append({"pending_reason": c, "jobs": int(row["jobs"]) if row else 0,
                    "wait_s_total": _r(float(row["total"])) if row else 0.0,
                    "median_s": _r(float(row["median"])) if row else None,
                    "max_s": _r(float(row["max"])) if row else None})
    return out, ("Queue wait by pending reason uses the one Reason sacct keeps per job: the last one slurmctld sent "
                 "to slurmdbd (text and --json alike, 22.05 and 24.11). A job that waited on Resources or Priority "
                 "mostly shows None once it started (lab, 22.05), while quota reasons such as AssocGrpGRES stayed: "
                 "'none (not kept)' is wait whose reason sacct did not keep.")


def _file_reasons(reasons: dict[tuple[int, float], str], raw: np.ndarray, start: np.ndarray,
                  cls: np.ndarray) -> np.ndarray:
    """`cls` with the class of each row that `reasons` ((JobIDRaw, Start epoch) -> Reason) has."""
    names = sorted(set(reasons.values()))
    klass = [PENDING_CLASSES.index(pending_class(r)) for r in names]
    rkeys = np.array([(raw_id << 32) | int(st) for raw_id, st in reasons], dtype=np.int64)
    rclass = np.array([klass[names.index(v)] for v in reasons.values()], dtype=np.int64) if reasons else \
        np.zeros(0, dtype=np.int64)
    order = np.argsort(rkeys)
    rkeys, rclass = rkeys[order], rclass[order]
    keys = (raw << 32) | start.astype(np.int64)
    pos = np.minimum(np.searchsorted(rkeys, keys), max(len(rkeys) - 1, 0))
    found = (rkeys[pos] == keys) if len(rkeys) else np.zeros(len(keys), dtype=bool)
    return np.where(found, rclass[pos] if len(rkeys) else cls, cls)


# ---- hooks: build ---------------------------------------------------------------------------------------


def attach(report: Any, table: pa.Table, config: SiteConfig, period: Period, *, events_path: str | None = None,
           nodes_path: str | None = None, sreport_path: str | None = None, log_path: str | None = None,
           reasons_path: str | None = None, offline: bool = False, target: float | None = None,
           period_inferred: bool = False, equivalents: np.ndarray | None = None) -> None:
    """Add the economics block, its tables and definitions to a built Report (from the store, or offline from
    the files given beside --input). `period_inferred`: the window came from the dump's rows, not from the user:
    an sreport file that does not say its own window cannot be taken to cover it."""
    if offline:
        source, refusal_source = sources.given_sources(config, period, events_path=events_path,
                                                       nodes_path=nodes_path, sreport_path=sreport_path,
                                                       log_path=log_path, reasons_path=reasons_path)
    else:
        source, refusal_source = sources.stored_sources(config, period)
    attach_sums(report, row_sums(table, config, period, source, equivalents), config, period, source, refusal_source,
                target=target, period_inferred=period_inferred)


def attach_sums(report: Any, sums: RowSums, config: SiteConfig, period: Period, source: EventSource | None,
                refusal_source: RefusalSource | None, *, target: float | None = None,
                period_inferred: bool = False) -> None:
    """attach, from the rows' RowSums and the sources they were summed with."""
    data, tables = economics_from(sums, config, period, source, refusal_source, target=target,
                                  restore_measured=sources.measured_restore_seconds(config.results_dir))
    cross = data.get("sreport_cross_check")
    if period_inferred and cross and cross.get("sreport_window") is None:
        # (--sreport FILE: sreport's -n output names no window; only a window the user gave can be the one it
        # was asked for)
        from gpuclust.accounting.history import events as events_mod

        cross["same_window"] = None
        cross["note"] += ("; unknown whether the sreport file covers the report window, which was inferred "
                          "from the dump's rows: give --since/--until and run `sreport "
                          + " ".join(events_mod.sreport_args(period.start, period.end)) + "`")
    report.data["economics"] = data
    report.tables.update(tables)
    report.data["definitions"] = {**report.data.get("definitions", {}), **{f"economics.{k}": v
                                                                             for k, v in DEFINITIONS.items()}}


def note_unknown_allocations(report: Any, column_missing: bool = False) -> None:
    """Where attempts ran without an AllocTRES (counted in report.json input.unknown; `column_missing`: the dump
    has no such column), say in the economics notes that allocated and idle are bounds."""
    unknown = sum(e["count"] or 0 for e in report.data["input"].get("unknown", []) if e["missing"] == "AllocTRES")
    econ = report.data.get("economics")
    if isinstance(econ, dict) and (unknown or column_missing):
        econ.setdefault("notes", []).append(
            f"{unknown} attempt(s) ran without an AllocTRES: their GPU-hours are unknown, so allocated leaves "
            "them out and idle (capacity - allocated - unavailable) holds them: both are bounds, not figures.")
