"""Config sections for unit economics (`gpuclust report`): [costs], [baseline NAME], and the [site] and
[account] keys the report's denominator, capacity and refusal count read.

Kept apart from site.py: site.py only lists the specs (ECONOMICS_SECTIONS, SITE_KEYS, ACCOUNT_KEYS) and calls
`economics_config` once; the typed objects and their cross-checks live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection, SectionSpec
from gpuclust.errors import Problem

COST_TERMS = ("network", "storage", "support", "operations")


def parse_denominator(text: str) -> str:
    low = text.strip().lower()
    if low not in ("runs", "units"):
        raise ValueError(f"expected runs (completed runs) or units (accepted units), got {text!r}")
    return low


SITE_KEYS = (
    Key("slurmctld_log", v.parse_abs_path, "slurmctld's log file; `report fetch` counts the submit policy's refusals "
        "from it (and from its logrotate siblings .1, .2.gz ...)."),
    Key("denominator", parse_denominator, "Unit economics denominator: runs (completed runs, default) or units "
        "(accepted units: the units_label in a completed job's --comment, else its account's units_per_job).",
        default="runs"),
    Key("units_label", v.parse_slurm_name, "The --comment key holding a job's accepted units, e.g. units=128.",
        default="units"),
)

ACCOUNT_KEYS = (
    Key("units_per_job", v.parse_nonneg_float, "Accepted units of a completed job of this account whose comment "
        "has no units label (denominator = units)."),
)

COSTS = SectionSpec(
    "costs",
    "Fixed costs per month, prorated to the report period (month = 730 h), and an optional amortised compute cost.",
    (
        Key("currency", v.parse_currency, "Currency of every price and cost (required when any cost is set)."),
        Key("network", v.parse_nonneg_float, "Network cost per month."),
        Key("storage", v.parse_nonneg_float, "Storage cost per month."),
        Key("support", v.parse_nonneg_float, "Support cost per month."),
        Key("operations", v.parse_nonneg_float, "Operations (staff, power, space) cost per month."),
        Key("compute_per_month", v.parse_nonneg_float, "Amortised compute cost per month; when set it replaces "
            "the per-GPU-hour prices as the compute term (spread over capacity GPU-hours)."),
    ),
)

BASELINE = SectionSpec(
    "baseline",
    "An alternative to the cluster, compared on the same denominator: kind = gpu_hour (rental: a price per "
    "GPU-hour per GPU type) or kind = unit (a managed API: a price per accepted unit).",
    (
        Key("kind", v.parse_choice("gpu_hour", "unit"), "gpu_hour or unit.", required=True),
        Key("price_per_gpu_hour", v.parse_nonneg_float, "gpu_hour: price of one GPU-hour for any GPU type "
            "without its own price."),
        Key("price_per_gpu_hour.*", v.parse_nonneg_float, "gpu_hour: price of one GPU-hour replacing the site's "
            "GPU type TYPE (price_per_gpu_hour.h100 = 3.9)."),
        Key("speed", v.parse_nonneg_float, "gpu_hour: the rented GPU's speed against the site's (1.2 = 20% faster: "
            "the same work takes GPU-hours / 1.2).", default=1.0),
        Key("price_per_unit", v.parse_nonneg_float, "unit: price of one accepted unit."),
    ),
    named=True,
)

ECONOMICS_SECTIONS = (COSTS, BASELINE)


@dataclass(frozen=True)
class CostsConfig:
    """[costs]: the currency, the fixed costs per month and the optional amortised compute cost."""

    currency: str | None = None
    network: float = 0.0
    storage: float = 0.0
    support: float = 0.0
    operations: float = 0.0
    compute_per_month: float | None = None

    def monthly(self) -> dict[str, float]:
        return {term: getattr(self, term) for term in COST_TERMS}


@dataclass(frozen=True)
class BaselineConfig:
    """One [baseline NAME]: an alternative to the cluster, priced per GPU-hour (by type) or per accepted unit."""

    name: str
    line: int
    kind: str
    price_per_gpu_hour: float | None = None
    price_by_type: dict[str, float] = field(default_factory=dict)
    speed: float = 1.0
    price_per_unit: float | None = None

    def gpu_hour_price(self, gpu_type: str | None) -> float | None:
        if gpu_type and gpu_type in self.price_by_type:
            return self.price_by_type[gpu_type]
        return self.price_per_gpu_hour


@dataclass(frozen=True)
class EconomicsConfig:
    """Unit economics: [costs], the [baseline NAME] sections, and the [site] and [account] keys they read."""

    costs: CostsConfig = field(default_factory=CostsConfig)
    baselines: dict[str, BaselineConfig] = field(default_factory=dict)
    slurmctld_log: str | None = None
    denominator: str = "runs"
    units_label: str = "units"
    units_per_job: dict[str, float] = field(default_factory=dict)  # account -> default units
    configured: bool = False  # any of [costs], [baseline NAME], slurmctld_log (see `enabled`)

    @property
    def currency(self) -> str | None:
        return self.costs.currency

    @property
    def enabled(self) -> bool:
        """Unit economics is on (`report fetch` reads node events, inventory, sreport and the log) when
        the site config has a [costs] or [baseline NAME] section, or slurmctld_log."""
        return self.configured


_GPU_HOUR_KEYS = ("price_per_gpu_hour", "speed")
_UNIT_KEYS = ("price_per_unit",)


def economics_config(
    path: str,
    site: ParsedSection | None,
    accounts: list[ParsedSection],
    costs: list[ParsedSection],
    baselines: list[ParsedSection],
) -> tuple[EconomicsConfig, list[Problem]]:
    """The typed economics config and its cross-section problems (file:line)."""
    problems: list[Problem] = []
    cost_cfg = CostsConfig()
    if costs:
        s = costs[0]
        values: dict[str, Any] = {k: s.values[k] for k in ("currency", *COST_TERMS, "compute_per_month") if k in s.values}
        cost_cfg = CostsConfig(**values)
        money_keys = [k for k in (*COST_TERMS, "compute_per_month") if k in s.values]
        if money_keys and cost_cfg.currency is None:
            problems.append(Problem(path, s.lines[money_keys[0]], f"[costs] {money_keys[0]} is set but [costs] has "
                                    "no currency; add currency = EUR (or USD, ...)", money_keys[0]))
    out_baselines: dict[str, BaselineConfig] = {}
    for s in baselines:
        assert s.name is not None
        kind = s.get("kind")
        if kind is None:  # (reported by the schema as a missing required key)
            continue
        by_type = s.family("price_per_gpu_hour")
        wrong = _UNIT_KEYS if kind == "gpu_hour" else (*_GPU_HOUR_KEYS, *[f"price_per_gpu_hour.{t}" for t in by_type])
        for key in wrong:
            if key in s.values:
                problems.append(Problem(path, s.lines[key], f"[baseline {s.name}] {key} does not apply to "
                                        f"kind = {kind}", key))
        if kind == "gpu_hour" and s.get("price_per_gpu_hour") is None and not by_type:
            problems.append(Problem(path, s.line, f"[baseline {s.name}] kind = gpu_hour needs price_per_gpu_hour "
                                    "or price_per_gpu_hour.TYPE"))
        if kind == "unit" and s.get("price_per_unit") is None:
            problems.append(Problem(path, s.line, f"[baseline {s.name}] kind = unit needs price_per_unit"))
        if "speed" in s.values and s.values["speed"] <= 0:
            problems.append(Problem(path, s.lines["speed"], f"[baseline {s.name}] speed must be > 0", "speed"))
        if cost_cfg.currency is None:
            problems.append(Problem(path, s.line, f"[baseline {s.name}] has prices but [costs] has no currency; "
                                    "add a [costs] section with currency = EUR (or USD, ...)"))
        out_baselines[s.name] = BaselineConfig(
            s.name, s.line, kind, s.get("price_per_gpu_hour"), by_type, s.get("speed") or 1.0,
            s.get("price_per_unit"))
    units = {s.name: s.values["units_per_job"] for s in accounts if s.name and "units_per_job" in s.values}
    cfg = EconomicsConfig(
        costs=cost_cfg,
        baselines=out_baselines,
        slurmctld_log=site.get("slurmctld_log") if site else None,
        denominator=site.get("denominator") if site else "runs",
        units_label=site.get("units_label") if site else "units",
        units_per_job=units,
        configured=bool(costs or baselines or (site is not None and "slurmctld_log" in site.values)),
    )
    return cfg, problems
