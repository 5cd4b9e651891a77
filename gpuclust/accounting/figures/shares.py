"""GPU-equivalents of the job table's rows (glossary: "GPU-equivalent", "allocated", "device-hours").

Each row's AllocTRES counts as its share of physical GPUs (gpuclust.slurm.gpushare: MIG slices by profile or
`[gpu_type NAME] gpu_share`, shards and MPS by the node's layout). The shares are computed once per distinct
AllocTRES value (the ingest dictionary-encodes it), and once per distinct (AllocTRES, NodeList, Partition)
only for the few values whose share depends on the node (shards, MPS, untyped GPUs on a MIG node). A table
without slices, shards or MPS gives `equivalents` None: every figure is then made of the `gpus` column, as
before (byte-identical).

An unknown share (an unknown profile, shards without a known layout, a node whose layout changed in the
period, ...) is NaN with a named warning, counted like an attempt without AllocTRES: never 0, never a whole GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from gpuclust.accounting.figures.metrics.attempts import coded
from gpuclust.accounting.ingest import fields
from gpuclust.errors import SlurmOutputError
from gpuclust.slurm import gpushare, hostlist
from gpuclust.slurm.gpushare import NodeLayout, ShareWarning

if TYPE_CHECKING:
    from gpuclust.accounting.history.events import EventSource, Node
    from gpuclust.accounting.history.store import RowShares
    from gpuclust.config import SiteConfig

# Warning codes of this stage (beside gpushare's).
NODE_LAYOUT_CHANGED = "node_layout_changed"
SHARDS_LAYOUT_UNKNOWN = "shard_layout_unknown"
NODE_LAYOUTS_DIFFER = "node_layouts_differ"
UNKNOWN_SHARE = "unknown_share"  # (a row's unknown share without a warning of its own: not expected)
MAX_WARNING_EXAMPLES = 20


@dataclass
class TableShares:
    """Per row of the table: its GPU-equivalents (NaN: unknown); None where every row is whole GPUs."""

    equivalents: np.ndarray | None = None
    warnings: dict[tuple[str, str], int] = field(default_factory=dict)  # (code, detail) -> rows
    # Per row, where asked for (table_shares(reasons=True)) and some share is not whole GPUs: the code of the
    # first warning that made its share unknown, None where it is known.
    reasons: list[str | None] | None = None

    def unknown(self) -> np.ndarray | None:
        return None if self.equivalents is None else np.isnan(self.equivalents)

    def warning_list(self) -> list[dict[str, Any]]:
        """The warnings as report.json lists them: code, detail, rows (sorted by code, then detail)."""
        return [{"code": code, "detail": detail, "rows": rows}
                for (code, detail), rows in sorted(self.warnings.items())][:MAX_WARNING_EXAMPLES]


@dataclass(frozen=True)
class Layouts:
    """What a row's node-dependent share reads: each node's layout, the nodes whose layout changed in the
    period, and each partition's configured shards per GPU."""

    nodes: Mapping[str, NodeLayout] = field(default_factory=dict)
    changed: Mapping[str, str] = field(default_factory=dict)  # node -> why
    shards_per_gpu: Mapping[str, int] = field(default_factory=dict)

    @property
    def any_mig(self) -> bool:
        return any(layout.slices for layout in self.nodes.values())


def overrides(config: SiteConfig) -> dict[str, Fraction]:
    return dict(config.gpu_type_shares)


def layouts_of(config: SiteConfig, nodes: Iterable[Node] | None, events: EventSource | None = None) -> Layouts:
    """Each inventory node's layout, the nodes whose GPU GRES changed in the period (its events' TRES differ
    from each other or from the inventory's) and the partitions' configured shards_per_gpu."""
    share_of = overrides(config)
    by_node = {nd.name: gpushare.node_layout(list(nd.gres), share_of) for nd in nodes or ()}
    changed: dict[str, str] = {}
    node_events = events.events.nodes if events is not None and events.events is not None else []
    seen: dict[str, dict[str, int]] = {}
    inventory = {nd.name: dict(nd.gpu_types) for nd in nodes or ()}
    for ev in node_events:
        if not ev.gpu_types:  # (an event without typed TRES says nothing of the layout)
            continue
        before = seen.setdefault(ev.node, ev.gpu_types)
        now = inventory.get(ev.node)
        if before != ev.gpu_types or (now and now != ev.gpu_types):
            old = before if before != ev.gpu_types else ev.gpu_types
            new = ev.gpu_types if before != ev.gpu_types else now
            changed[ev.node] = (f"node {ev.node}: GPU GRES {_types_text(old)} in a node event, "
                                f"{_types_text(new or {})} {'later' if before != ev.gpu_types else 'in the inventory'}")
    per_gpu = {name: part.shards_per_gpu for name, part in config.partitions.items() if part.shards_per_gpu}
    return Layouts(by_node, changed, per_gpu)


def _types_text(types: Mapping[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(types.items())) or "(untyped)"


def node_warnings(layouts: Layouts) -> list[dict[str, Any]]:
    """The inventory's own warnings (a MIG node with whole GPUs, an unknown profile in a node's Gres, shards
    on a node without GPUs) and the nodes whose layout changed: code, node, detail."""
    out = [{"code": w.code, "node": name, "detail": w.detail}
           for name, layout in sorted(layouts.nodes.items()) for w in layout.warnings]
    out += [{"code": NODE_LAYOUT_CHANGED, "node": name, "detail": why} for name, why in sorted(layouts.changed.items())]
    return out


def node_equivalents(node: Node, config: SiteConfig) -> float | None:
    """A node's capacity in GPU-equivalents where its layout has MIG slices (7 x 1g.10gb: 1.0); its GPU count
    otherwise (shards and MPS add nothing). None: a slice of unknown share."""
    layout = gpushare.node_layout(list(node.gres), overrides(config))
    if not layout.slices:
        return float(node.gpus)
    return None if layout.gpu_equivalents is None else float(layout.gpu_equivalents)


# ---- rows ----------------------------------------------------------------------------------------------

_PLAIN, _FIXED, _PER_NODE = 0, 1, 2


def _classify(text: str | None, share_of: Mapping[str, Fraction], any_mig: bool
              ) -> tuple[int, float, list[ShareWarning]]:
    """(how the share of AllocTRES `text` is known, its share where it needs no node, warnings)."""
    if not text or ("gres/gpu:" not in text and "gres/shard" not in text and "gres/mps" not in text):
        if any_mig and text and "gres/gpu=" in text:
            return _PER_NODE, 0.0, []
        return _PLAIN, 0.0, []
    try:
        tres = fields.parse_tres(text)
        fields.gpu_facts(tres)
    except SlurmOutputError:
        return _PLAIN, 0.0, []  # (the ingest counted the row bad: its gpus stand)
    typed = [key[len("gres/gpu:"):] for key in tres if key.startswith("gres/gpu:")]
    sliced = any(gpushare.is_mig_type(t, share_of) or (t in share_of and share_of[t] != 1) for t in typed)
    shared = any(int(tres.get(k, "0") or 0) for k in ("gres/shard", "gres/mps"))
    typed_n = sum(int(tres[f"gres/gpu:{t}"]) for t in typed)
    untyped_left = "gres/gpu" in tres and int(tres["gres/gpu"]) > typed_n
    if shared or (any_mig and untyped_left):
        return _PER_NODE, 0.0, []
    if not sliced:
        return _PLAIN, 0.0, []
    share, warnings = gpushare.allocation_equivalents(tres, None, share_of)
    return _FIXED, (np.nan if share is None else float(share)), warnings


def _layout_for(nodelist: str | None, partition: str | None, layouts: Layouts
                ) -> tuple[list[NodeLayout], ShareWarning | None]:
    try:
        names = hostlist.expand(nodelist or "")
    except SlurmOutputError:
        names = []
    for name in names:
        if name in layouts.changed:
            return [], ShareWarning(NODE_LAYOUT_CHANGED, layouts.changed[name])
    found = [layouts.nodes[n] for n in names if n in layouts.nodes]
    if names and len(found) == len(names):
        return found, None
    per_gpu = layouts.shards_per_gpu.get(partition or "")
    if per_gpu:  # ([partition X] shards_per_gpu: one GPU of N shards)
        return [NodeLayout(whole_gpus=1, shards=per_gpu, gpu_equivalents=Fraction(1))], None
    return [], None


def _per_node_share(text: str, nodelist: str | None, partition: str | None, layouts: Layouts,
                    share_of: Mapping[str, Fraction]) -> tuple[float, list[ShareWarning]]:
    tres = fields.parse_tres(text)
    found, warning = _layout_for(nodelist, partition, layouts)
    if warning is not None:
        return np.nan, [warning]
    if not found:
        share, warnings = gpushare.allocation_equivalents(tres, None, share_of)
        if share is None and not warnings:
            warnings = [ShareWarning(SHARDS_LAYOUT_UNKNOWN, f"{text!r} on {nodelist or 'no node'} (partition "
                                     f"{partition or '-'}): shards per GPU unknown; give the node inventory (--nodes) "
                                     "or [partition NAME] shards_per_gpu")]
        return (np.nan if share is None else float(share)), warnings
    answers = [gpushare.allocation_equivalents(tres, layout, share_of) for layout in found]
    shares = {a[0] for a in answers}
    warnings = [w for _, ws in answers for w in ws]
    if len(shares) > 1:
        return np.nan, [ShareWarning(NODE_LAYOUTS_DIFFER, f"{text!r} on {nodelist}: the nodes' layouts give "
                                     "different shares; the allocation's split over them is unknown")]
    share = shares.pop()
    if share is None and not warnings:
        warnings = [ShareWarning(SHARDS_LAYOUT_UNKNOWN, f"{text!r} on {nodelist}: share unknown")]
    return (np.nan if share is None else float(share)), warnings


def table_shares(table: pa.Table, config: SiteConfig, layouts: Layouts | None = None, *,
                 reasons: bool = False) -> TableShares:
    """The GPU-equivalents of every row of `table` (see TableShares); `reasons`: with each unknown row's warning
    code (TableShares.reasons: what `report fetch` stores)."""
    out = TableShares()
    if not table.num_rows or "alloc_tres" not in table.column_names:
        return out
    layouts = layouts or Layouts()
    share_of = overrides(config)
    tres = coded(table.column("alloc_tres"))
    kinds = [_classify(v, share_of, layouts.any_mig) for v in tres.values]
    if all(kind == _PLAIN for kind, _, _ in kinds):
        return out
    mode = np.array([k for k, _, _ in kinds] + [_PLAIN], dtype=np.int8)
    fixed = np.array([s for _, s, _ in kinds] + [0.0], dtype=np.float64)
    gpus = table.column("gpus").to_numpy()
    eq = np.nan_to_num(np.asarray(gpus, dtype=np.float64))
    row_mode = mode[tres.codes]
    at = row_mode == _FIXED
    eq[at] = fixed[tres.codes[at]]
    for code, (kind, _, warnings) in enumerate(kinds):
        if kind == _FIXED and warnings:
            n = int(np.count_nonzero(tres.codes == code))
            for w in warnings:
                out.warnings[(w.code, w.detail)] = out.warnings.get((w.code, w.detail), 0) + n
    why: list[str | None] | None = None
    if reasons:
        why = [None] * len(eq)
        fixed_why = [warnings[0].code if warnings else None for _, _, warnings in kinds]
        for r in np.flatnonzero(at & np.isnan(eq)).tolist():
            why[r] = fixed_why[tres.codes[r]] or UNKNOWN_SHARE
    rows = np.flatnonzero(row_mode == _PER_NODE)
    if len(rows):
        nodes = coded(table.column("nodelist").take(pa.array(rows)))
        parts = coded(table.column("partition").take(pa.array(rows)))
        key = (tres.codes[rows].astype(np.int64) * (len(nodes.values) + 1) + nodes.codes) \
            * (len(parts.values) + 1) + parts.codes
        uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        values = np.empty(len(uniq), dtype=np.float64)
        counts = np.bincount(inverse, minlength=len(uniq))
        unknown_of: list[str | None] = [None] * len(uniq)
        for i, r in enumerate(first.tolist()):
            text = tres.values[tres.codes[rows[r]]]
            node_v = nodes.values[nodes.codes[r]] if nodes.codes[r] < len(nodes.values) else None
            part_v = parts.values[parts.codes[r]] if parts.codes[r] < len(parts.values) else None
            values[i], warnings = _per_node_share(text, node_v, part_v, layouts, share_of)
            for w in warnings:
                out.warnings[(w.code, w.detail)] = out.warnings.get((w.code, w.detail), 0) + int(counts[i])
            if why is not None and np.isnan(values[i]):
                unknown_of[i] = warnings[0].code if warnings else UNKNOWN_SHARE
        eq[rows] = values[inverse]
        if why is not None:
            for r, u in zip(rows.tolist(), inverse.tolist(), strict=True):
                if unknown_of[u] is not None:
                    why[r] = unknown_of[u]
    out.equivalents = eq
    out.reasons = why
    return out


# ---- one period's shares, for every table read of it ------------------------------------------------------

class PeriodShares:
    """The shares of the tables of one period (the in-memory build's one table, the partitioned build's buckets,
    the trend's weeks): the node inventory read once, the node events only where some table or node has slices,
    shards or MPS (the layouts that changed in the period). Each table's answer is the same share per row
    whichever of them reads it; warnings add up over the tables read (`warning_list`)."""

    def __init__(self, config: SiteConfig, nodes: Iterable[Node] | None,
                 events: Callable[[], EventSource | None] | None = None):
        self.config = config
        self.nodes = list(nodes) if nodes is not None else None
        self.base = layouts_of(config, self.nodes)
        self._events = events
        self._full: Layouts | None = None
        self.sliced_nodes = any(lay.slices or lay.shards or lay.mps for lay in self.base.nodes.values())
        self.used = False  # some table or node needed shares: the report says so (notes, warnings)
        self.warnings: dict[tuple[str, str], int] = {}

    def layouts(self) -> Layouts:
        """The layouts with the nodes whose layout changed in the period (the events read once)."""
        if self._full is None:
            self._full = self.base
            source = self._events() if self._events is not None else None
            if source is not None and source.events is not None and source.events.nodes:
                self._full = layouts_of(self.config, self.nodes, source)
        return self._full

    def of(self, table: pa.Table, *, reasons: bool = False) -> TableShares | None:
        """`table`'s shares; None where it has no slice, shard or MPS and no node has (every figure as before).
        `reasons`: with each unknown row's warning code (table_shares)."""
        got = table_shares(table, self.config, self.base, reasons=reasons)
        if got.equivalents is None and not self.sliced_nodes:
            return None
        self.used = True
        full = self.layouts()
        if full.changed:
            got = table_shares(table, self.config, full, reasons=reasons)
        for key, rows in got.warnings.items():
            self.warnings[key] = self.warnings.get(key, 0) + rows
        return got

    def equivalents(self, table: pa.Table) -> np.ndarray | None:
        got = self.of(table)
        return None if got is None else got.equivalents

    def warning_list(self) -> list[dict[str, Any]]:
        """Row warnings (summed over the tables read), then node warnings: report.json input.gpu_share_warnings."""
        rows = TableShares(warnings=self.warnings).warning_list()
        return rows + node_warnings(self.layouts()) if self.used else rows


def stored_shares(shares: PeriodShares, table: pa.Table) -> RowShares:
    """What `report fetch` stores of each row of `table` (store.RowShares: columns alloc_gpu_equivalents and
    gpu_share_unknown): its shares as a report reads them with the same inventory and events, the `gpus` column
    where every row is whole GPUs."""
    from gpuclust.accounting.history.store import RowShares

    got = shares.of(table, reasons=True)
    if got is None or got.equivalents is None:
        gpus = table.column("gpus").to_numpy(zero_copy_only=False) if table.num_rows else np.zeros(0)
        return RowShares(np.nan_to_num(np.asarray(gpus, dtype=np.float64)))
    return RowShares(got.equivalents, got.reasons)


def inventory(nodes_text: str | None, label: str = "scontrol show node -o") -> list[Node] | None:
    """The nodes of `scontrol show node -o` text (None: none given, or records the economics names as bad)."""
    if not nodes_text:
        return None
    # (a build without an inventory never needs the events module)
    from gpuclust.accounting.history.events import parse_nodes
    from gpuclust.errors import InputError

    try:
        return parse_nodes(nodes_text, label)
    except InputError:
        return None  # (the economics' reading of the same records names the file and the fault)


def price_units(config: SiteConfig) -> dict[str, str]:
    """The unit each [gpu_type] price applies in (card | slice: metrics.attempts.price_unit)."""
    from gpuclust.accounting.figures.metrics.attempts import price_unit

    return {name: price_unit(config, name) for name in sorted(config.gpu_type_prices)}


def note(info: dict[str, Any], warnings: list[dict[str, Any]], config: SiteConfig) -> None:
    """report.json input.gpu_share_warnings (named, per row and per node), and a note on the price units: which
    unit applied to each priced GPU type (input.gpu_price_units)."""
    if warnings:
        info["gpu_share_warnings"] = warnings
    units = price_units(config)
    slice_priced = sorted(name for name, unit in units.items() if unit == "slice")
    if units:
        info["gpu_price_units"] = units
    defaulted = sorted(name for name in slice_priced if name not in config.gpu_type_price_units)
    info.setdefault("notes", []).append(
        "GPU-hours count GPU-equivalents (MIG slices, shards and MPS as shares of one physical GPU; definitions "
        "gpu_equivalents); gpu_device_hours counts GRES devices, a slice as one. Prices are per GPU-equivalent "
        "hour (price_unit = card)" + (f", except per device-hour of one slice for {', '.join(slice_priced)} "
                                      "(price_unit = slice)" if slice_priced else "")
        + (f"; {', '.join(defaulted)} gave no price_unit: a MIG type's price is per slice-hour by default"
           if defaulted else "") + ".")
