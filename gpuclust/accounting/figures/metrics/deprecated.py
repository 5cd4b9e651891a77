"""Figures renamed to their glossary names (shared/gpu-hours-glossary.md: "useful" alone is no name, a unit cost
names its numerator and its denominator), and the old names still written for one release.

report.json keys, CSV columns and Prometheus metric names are a contract for scripts: each old name below is
still written, with exactly the value of its new name, until the next release (CHANGELOG, Deprecated). They are
added at the edge (report.json by reportdoc.stamp, CSV/Parquet by render.write_report, gpuclust.prom by the
collector, `report show --format json`), so nothing in gpuclust reads them and no page or terminal shows them.
Each is declared with its figure in figures.catalog (old_names, old_places, old_prom); this module says where
they are written. Removing them is deleting those declarations (and reportdoc's typed fields of them).

Two old figures had the same name and different definitions: sizing.effective_unit_cost (cost / completed runs:
the same figure as totals.cost_per_completed_run, which it now repeats) and economics effective_unit_cost
(total cost, every term / accepted units: now total_cost_per_accepted_unit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gpuclust.accounting.figures import catalog

# ---- report.json and CSV: old key -> new key, per place (the catalogue's old_names) --------------------------

RUN_KEYS = catalog.aliases(catalog.RUNS)  # totals, runs.by_*, runs_by_* and totals tables
SIZING_KEYS = catalog.aliases(catalog.SIZING)
# sizing.effective_unit_cost repeats totals.cost_per_completed_run (one figure, defined once, in the totals).
SIZING_FROM_TOTALS = {old: f.name for old, f in catalog.aliases_from(catalog.SIZING)}
ECONOMICS_ROW_KEYS = catalog.aliases(catalog.ECONOMICS)
# The economics rows' `terms` key useful is now completed_run with no alias: the terms add up to the capacity
# and the total cost, and a script summing every term would count an alias twice (CHANGELOG, Changed). Likewise
# the `term` label of gpuclust_report_economics_gpu_seconds and _cost.
ECONOMICS_TERMS_COLUMNS = catalog.aliases(catalog.ECONOMICS_TERMS, catalog.ECONOMICS)  # economics_terms.csv
BASELINE_KEYS = catalog.aliases(catalog.ECONOMICS_BASELINES)
ECONOMICS_SIZING_KEYS = catalog.aliases(catalog.ECONOMICS_SIZING)
WEIGHTED_KEYS = catalog.aliases(catalog.ECONOMICS_WEIGHTED)  # economics rows' utilisation_weighted

# CSV/Parquet tables: table name (or prefix ending in "_") -> its column aliases
TABLE_COLUMNS: dict[str, Mapping[str, str]] = {
    "totals": RUN_KEYS, "runs_by_": RUN_KEYS, "sizing": SIZING_KEYS,
    "economics_terms": ECONOMICS_TERMS_COLUMNS, "economics_baselines": BASELINE_KEYS,
}

# ---- gpuclust.prom: old family suffix (after gpuclust_report_) -> new ---------------------------------------

PROM: dict[str, str] = catalog.prom_aliases()
PROM_ALIASES: dict[str, str] = {new: old for old, new in PROM.items()}  # new -> old

# Every old name, for the tests that keep "useful" and "effective unit cost" out of everything else.
NAMES: frozenset[str] = frozenset({*RUN_KEYS, *SIZING_KEYS, *SIZING_FROM_TOTALS, *ECONOMICS_ROW_KEYS,
                                   *ECONOMICS_TERMS_COLUMNS, *BASELINE_KEYS,
                                   *ECONOMICS_SIZING_KEYS, *WEIGHTED_KEYS, *PROM})


def _alias(record: Any, keys: Mapping[str, str]) -> None:
    """Add each old key after the others, with its new key's value (a record without the new key: nothing)."""
    if isinstance(record, dict):
        for old, new in keys.items():
            if new in record and old not in record:
                record[old] = record[new]


def add_keys(data: dict[str, Any]) -> dict[str, Any]:
    """report.json's data (plain JSON values) with the old keys added, in place; returned for chaining."""
    totals = data.get("totals")
    _alias(totals, RUN_KEYS)
    runs = data.get("runs") or {}
    for key, rows in runs.items():
        groups = rows.values() if key == "by_label" and isinstance(rows, dict) else [rows]
        for group in groups:
            for row in group if isinstance(group, list) else []:
                _alias(row, RUN_KEYS)
    sizing = data.get("sizing")
    _alias(sizing, SIZING_KEYS)
    if isinstance(sizing, dict) and isinstance(totals, dict):
        for old, new in SIZING_FROM_TOTALS.items():
            sizing.setdefault(old, totals.get(new))
    econ = data.get("economics")
    if isinstance(econ, dict):
        for row in [*(econ.get("by_partition") or []), econ.get("total")]:
            if not isinstance(row, dict):
                continue
            _alias(row, ECONOMICS_ROW_KEYS)
            _alias(row.get("utilisation_weighted"), WEIGHTED_KEYS)
        for row in econ.get("baselines") or []:
            _alias(row, BASELINE_KEYS)
        _alias(econ.get("sizing"), ECONOMICS_SIZING_KEYS)
    return data


def with_run_keys(row: dict[str, Any]) -> dict[str, Any]:
    """A runs row (`report show` groups, jsonl runs rows) with its old keys added, in place; returned."""
    _alias(row, RUN_KEYS)
    return row


def columns_for(name: str) -> Mapping[str, str]:
    """The column aliases of table `name` ({} for none)."""
    for key, aliases in TABLE_COLUMNS.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            return aliases
    return {}


def add_columns(name: str, frame: pd.DataFrame, totals: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Table `name` as written to CSV/Parquet: its old column names appended (a copy; `frame` when none).
    `totals` (report.json totals) gives the sizing table its effective_unit_cost."""
    aliases = dict(columns_for(name))
    extra: dict[str, Any] = {old: frame[new] for old, new in aliases.items()
                             if new in frame.columns and old not in frame.columns}
    if name == "sizing" and totals is not None and len(frame):
        extra.update({old: totals.get(new) for old, new in SIZING_FROM_TOTALS.items() if old not in frame.columns})
    if not extra:
        return frame
    return frame.assign(**extra)
