"""The site config: sections, keys, typed objects, and loading with file:line errors.

Search order: an explicit path (--config), then $GPUCLUST_CONFIG, then /etc/gpuclust/site.conf.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpuclust.config import values as v
from gpuclust.config.economics import (
    ACCOUNT_KEYS,
    ECONOMICS_SECTIONS,
    SITE_KEYS,
    EconomicsConfig,
    economics_config,
)
from gpuclust.config.guard import GUARD, GuardConfig, guard_config
from gpuclust.config.health import HEALTH, HealthConfig, health_config
from gpuclust.config.ini import decode_config, parse_ini
from gpuclust.config.lemon import LEMON, LemonConfig, lemon_config
from gpuclust.config.notify import NOTIFY, NotifyConfig, notify_config
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, suggest, validate
from gpuclust.config.telemetry import TELEMETRY, TelemetryConfig, telemetry_config
from gpuclust.errors import ConfigError, Problem
from gpuclust.slurm.gpushare import parse_share as _parse_share

DEFAULT_CONFIG_PATH = "/etc/gpuclust/site.conf"
CONFIG_ENV = "GPUCLUST_CONFIG"
# The Lua runtimes a job_submit_lua.so may link ([policy] lua).
LUA_VERSIONS = ("5.1", "5.2", "5.3", "5.4", "luajit")
# The rules a submit policy checks, in the engine's order (gpuclust/policy/engine.lua); mode.RULE names one.
POLICY_RULES = (
    "account_missing", "gres_syntax", "mig_profile", "label_missing", "label_value", "partition_account", "partition_wckey",
    "partition_gpu", "partition_typed_gpu", "partition_gpu_type", "partition_max_gpus", "gpu_unbounded",
    "partition_max_time", "partition_cpus_per_gpu", "partition_mem_per_gpu", "partition_qos", "account_partition",
    "account_max_gpus", "untyped_gpu",
)

SITE = SectionSpec(
    "site",
    "Cluster-wide settings.",
    (
        Key("cluster_name", v.parse_slurm_name, "Slurm ClusterName this config describes.", required=True),
        Key("timezone", v.parse_timezone, "IANA time zone for report periods (sacct is always read in UTC).", default="UTC"),
        Key("state_dir", v.parse_abs_path, "Where gpuclust keeps its accounting store and history.", default="/var/lib/gpuclust"),
        Key("results_dir", v.parse_abs_path, "Where acceptance jobs write results (default: STATE_DIR/results)."),
        Key("report_dir", v.parse_abs_path, "Default output directory of `report build` (default: STATE_DIR/reports)."),
        Key("retry_window", v.parse_duration, "A resubmission within this long after a failed attempt continues the run.", default=24 * 3600),
        Key("report_labels", v.parse_name_list, "Comment label keys reported as dimensions, e.g. team, project, model.", default=()),
        Key("target_completed_runs_per_month", v.parse_nonneg_float, "Sizing target for `report build`."),
        Key("acceptance_stale_days", v.parse_positive_int, "A node's last passing acceptance result goes stale after this.", default=7),
        *SITE_KEYS,
    ),
    required=True,
)

PARTITION = SectionSpec(
    "partition",
    "One Slurm partition: GPU type and price, acceptance expectations, and submit policy rules.",
    (
        Key("gpu_type", v.parse_slurm_name, "GRES type of the partition's GPUs (e.g. h100); used when AllocTRES has no type, "
            "and the submit policy refuses GPU requests of any other type (partition_gpu_type)."),
        Key("gpus_per_node", v.parse_nonneg_int, "GPUs each node is expected to have (0 for a CPU partition)."),
        Key("price_per_gpu_hour", v.parse_nonneg_float, "Fallback price when the GPU type has none."),
        Key("expect_busbw_gbps", v.parse_nonneg_float, "Expected all_reduce busbw (GB/s) at the large sizes."),
        Key("busbw_tolerance", v.parse_fraction, "Allowed shortfall before CRITICAL, e.g. 0.15 or 15%.", default=0.15),
        Key("busbw_min_size", v.parse_size, "Sizes at or above this count as 'large' for the busbw gate (default 64M).", default=64 * 1024**2),
        Key("expect_staging_mbps", v.parse_nonneg_float, "Expected dataset staging MB/s per node."),
        Key("expect_checkpoint_write_mbps", v.parse_nonneg_float, "Expected checkpoint write MB/s."),
        Key("expect_checkpoint_read_mbps", v.parse_nonneg_float, "Expected checkpoint restore MB/s."),
        Key("expect_restore_seconds", v.parse_nonneg_float, "Maximum checkpoint restore time in seconds."),
        Key("storage_tolerance", v.parse_fraction, "Allowed shortfall on storage figures before CRITICAL.", default=0.2),
        Key("container_tolerance", v.parse_fraction, "accept report --compare-container: allowed shortfall of a "
            "containerised figure against bare metal on the same node before CRITICAL.", default=0.10),
        Key("max_time", v.parse_duration, "Policy: longest time limit a job may ask for (also checked against MaxTime)."),
        Key("require_gpu", v.parse_bool, "Policy: jobs here must request at least one GPU.", default=False),
        Key("require_typed_gpu", v.parse_bool, "Policy: GPU requests must name a type (gpu:h100:N).", default=False),
        Key("max_gpus_per_job", v.parse_positive_int, "Policy: most GPUs one job may request."),
        Key("allowed_accounts", v.parse_name_list, "Policy: only these accounts may submit here."),
        Key("require_wckey", v.parse_bool, "Policy: jobs here must set --wckey.", default=False),
        Key("qos", v.parse_slurm_name, "The partition QOS that carries its GPU limits, if any."),
        Key("shards_per_gpu", v.parse_positive_int, "Shards of one GPU on this partition's nodes (Gres=gpu:4,shard:32: "
            "8): the submit policy's count_gpus = equivalents counts a shard as 1/N of a GPU, and the report does "
            "where no node inventory gives the node's own."),
        Key("max_cpus_per_gpu", v.parse_positive_int, "Policy: most CPUs a job may ask for per GPU (partition_cpus_per_gpu)."),
        Key("max_mem_per_gpu", v.parse_mem_mb, "Policy: most memory a job may ask for per GPU, as --mem writes it (64G, "
            "64000 in MB) (partition_mem_per_gpu)."),
        Key("allowed_qos", v.parse_name_list, "Policy: jobs here must name (or default to) one of these QOS (partition_qos); "
            "a job with neither --qos nor a default QOS job_submit.lua sees is accepted (Slurm picks its QOS later)."),
        Key("require_qos", v.parse_bool, "Policy: with allowed_qos, also refuse a job with neither --qos nor a default "
            "QOS job_submit.lua sees (partition_qos).", default=False),
        # the topology the vendor announced; `accept report` compares it with what the jobs saw (check topology)
        Key("nics_per_node", v.parse_nonneg_int, "Announced: fabric NICs per node (those matching nic_names)."),
        Key("nic_speed_mbps", v.parse_positive_int, "Announced: speed of each fabric NIC in Mb/s (e.g. 200000 for HDR)."),
        Key("nvlink", v.parse_bool, "Announced: GPUs linked by NVLink (checked in `nvidia-smi topo -m`)."),
        Key("nic_names", v.parse_list, "Interfaces that count as fabric NICs: names or globs (default: all but lo)."),
    ),
    named=True,
)

GPU_TYPE = SectionSpec(
    "gpu_type",
    "Per GPU model (or MIG profile): price per GPU-hour, and its share of one physical GPU.",
    (
        Key("price_per_gpu_hour", v.parse_nonneg_float, "Price of one GPU-hour of this type (per price_unit). "
            "Required unless the section gives gpu_share."),
        Key("price_unit", v.parse_choice("card", "slice"), "card: the price is per GPU-equivalent hour (one "
            "whole card); slice: per device-hour of one GRES of this type (a MIG slice). Default: slice for a MIG "
            "type (a profile name such as 1g.10gb, or a gpu_share below 1: `price_per_gpu_hour = 0.40` is that "
            "slice's hour), card for a whole GPU."),
        Key("gpu_share", _parse_share, "This type's share of one physical GPU (1/7, 0.25) where its name does "
            "not say it (a site's own MIG type names)."),
    ),
    named=True,
)

_LIMIT_KEYS = (
    Key("gpu_limit", v.parse_nonneg_int, "GrpTRES=gres/gpu=N: GPUs in use at once."),
    Key("gpu_limit.*", v.parse_nonneg_int, "GrpTRES=gres/gpu:TYPE=N: typed GPUs in use at once."),
    Key("gpu_hours_budget", v.parse_nonneg_float, "GrpTRESMins=gres/gpu=N*60: GPU-hours budget."),
    Key("max_gpus_per_job", v.parse_positive_int, "MaxTRES(PerJob)=gres/gpu=N."),
)

ACCOUNT = SectionSpec(
    "account",
    "One Slurm account: its labels, the partitions it may use, and its GPU quotas (association limits).",
    (
        Key("labels", v.parse_label_pairs, "Labels reported for this account, e.g. team=physics, project=lattice."),
        Key("allowed_partitions", v.parse_name_list, "Policy: partitions this account may submit to."),
        *_LIMIT_KEYS,
        Key("max_gpus_per_user", v.parse_positive_int, "GrpTRES=gres/gpu=N on each user association under the account."),
        *ACCOUNT_KEYS,
    ),
    named=True,
)

QOS = SectionSpec(
    "qos",
    "One QOS and its GPU limits.",
    (
        *_LIMIT_KEYS,
        Key("max_gpus_per_user", v.parse_positive_int, "MaxTRESPerUser=gres/gpu=N."),
        Key("max_gpus_per_user.*", v.parse_positive_int, "MaxTRESPerUser=gres/gpu:TYPE=N."),
    ),
    named=True,
)

POLICY = SectionSpec(
    "policy",
    "Submit policy rendered into job_submit.lua (see `gpuclust policy render`).",
    (
        Key("fail_mode", v.parse_choice("open", "closed"), "On an internal error: open accepts the job, closed rejects it.", default="closed"),
        Key("require_account", v.parse_bool, "Jobs must pass --account explicitly.", default=False),
        Key("required_labels", v.parse_name_list, "Keys that must appear as key=value in --comment.", default=()),
        Key("label.*", v.parse_list, "Allowed values of a label: exact values or globs with * and ?."),
        Key("exempt_users", v.parse_name_list, "Users the policy never rejects.", default=()),
        Key("exempt_accounts", v.parse_name_list, "Accounts the policy never rejects.", default=()),
        Key("reject_untyped_gpu_where_typed_limits", v.parse_bool, "Reject untyped gpu requests on partitions/accounts with typed limits.", default=True),
        Key("default_partition", v.parse_slurm_name, "The partition (Default=YES in slurm.conf) whose rules apply to jobs without -p."),
        Key("mode", v.parse_choice("enforce", "warn"), "enforce: a job that fails a rule is refused. warn: it is accepted, "
            "the user is told what will be refused and from when, and a gpuclust-policy-warn line is logged (gres_syntax "
            "is always enforced).", default="enforce"),
        Key("mode.*", v.parse_choice("enforce", "warn"), "The mode of one rule, overriding mode: mode.partition_max_gpus = warn."),
        Key("enforce_from", v.parse_date, "The date (YYYY-MM-DD) users are told warn-mode rules will be enforced from; "
            "enforcing is still `mode = enforce` and a re-render."),
        Key("enforce_from.*", v.parse_date, "The enforcement date of one rule, overriding enforce_from."),
        Key("count_gpus", v.parse_choice("devices", "equivalents"), "How max_gpus_per_job counts: devices (a MIG slice, "
            "a GPU) or equivalents (a MIG slice, shard or MPS share counts as its share of one GPU, gpuclust.slurm.gpushare).",
            default="devices"),
        Key("lua", v.parse_choice(*LUA_VERSIONS), "The Lua slurmctld's job_submit_lua.so links (5.1, 5.2, 5.3, 5.4, "
            "luajit): `policy render --out` validates the script under it. Default: read from the plugin's "
            "shared-library dependencies, else 5.1."),
    ),
)

SLURM = SectionSpec(
    "slurm",
    "How gpuclust reads Slurm.",
    (
        Key("backend", v.parse_choice("cli", "pyslurm"),
            "cli: the Slurm commands (always the primary interface). pyslurm: `audit partition` reads nodes through "
            "a pyslurm built against this site's Slurm (README \"pyslurm\"); every other read stays on the "
            "commands. --backend overrides it.", default="cli"),
    ),
)

SECTIONS = (SITE, PARTITION, GPU_TYPE, ACCOUNT, QOS, POLICY, *ECONOMICS_SECTIONS, TELEMETRY, HEALTH, LEMON, SLURM, GUARD,
            NOTIFY)


@dataclass(frozen=True)
class GpuLimits:
    """GPU limits of an account association or a QOS; None means not managed by gpuclust."""

    gpu_limit: int | None = None
    gpu_limit_by_type: dict[str, int] = field(default_factory=dict)
    gpu_hours_budget: float | None = None
    max_gpus_per_job: int | None = None
    max_gpus_per_user: int | None = None
    max_gpus_per_user_by_type: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionConfig:
    """One [partition NAME]: GPU type and price, acceptance expectations, and submit policy rules."""

    name: str
    line: int
    gpu_type: str | None = None
    gpus_per_node: int | None = None
    price_per_gpu_hour: float | None = None
    expect_busbw_gbps: float | None = None
    busbw_tolerance: float = PARTITION.default("busbw_tolerance")
    busbw_min_size: int = PARTITION.default("busbw_min_size")
    expect_staging_mbps: float | None = None
    expect_checkpoint_write_mbps: float | None = None
    expect_checkpoint_read_mbps: float | None = None
    expect_restore_seconds: float | None = None
    storage_tolerance: float = PARTITION.default("storage_tolerance")
    container_tolerance: float = PARTITION.default("container_tolerance")
    max_time_s: int | None = None
    require_gpu: bool = PARTITION.default("require_gpu")
    require_typed_gpu: bool = PARTITION.default("require_typed_gpu")
    max_gpus_per_job: int | None = None
    allowed_accounts: tuple[str, ...] | None = None
    require_wckey: bool = PARTITION.default("require_wckey")
    qos: str | None = None
    shards_per_gpu: int | None = None
    max_cpus_per_gpu: int | None = None
    max_mem_per_gpu: int | None = None  # MB
    allowed_qos: tuple[str, ...] | None = None
    require_qos: bool = PARTITION.default("require_qos")
    nics_per_node: int | None = None
    nic_speed_mbps: int | None = None
    nvlink: bool | None = None
    nic_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class AccountConfig:
    """One [account NAME]: its labels, the partitions it may use, and its GPU limits."""

    name: str
    line: int
    labels: dict[str, str] = field(default_factory=dict)
    allowed_partitions: tuple[str, ...] | None = None
    limits: GpuLimits = field(default_factory=GpuLimits)


@dataclass(frozen=True)
class QosConfig:
    """One [qos NAME] and its GPU limits."""

    name: str
    line: int
    limits: GpuLimits = field(default_factory=GpuLimits)


@dataclass(frozen=True)
class PolicyConfig:
    """[policy]: the submit policy rendered into job_submit.lua: its rules, modes, dates and exemptions."""

    fail_mode: str = POLICY.default("fail_mode")
    require_account: bool = POLICY.default("require_account")
    required_labels: tuple[str, ...] = POLICY.default("required_labels")
    label_patterns: dict[str, tuple[str, ...]] = field(default_factory=dict)  # key -> allowed globs; absent = any value
    exempt_users: tuple[str, ...] = POLICY.default("exempt_users")
    exempt_accounts: tuple[str, ...] = POLICY.default("exempt_accounts")
    reject_untyped_gpu_where_typed_limits: bool = POLICY.default("reject_untyped_gpu_where_typed_limits")
    default_partition: str | None = None
    mode: str = POLICY.default("mode")
    rule_modes: dict[str, str] = field(default_factory=dict)  # rule -> enforce | warn (mode.RULE)
    enforce_from: str | None = None  # YYYY-MM-DD
    rule_enforce_from: dict[str, str] = field(default_factory=dict)  # rule -> YYYY-MM-DD (enforce_from.RULE)
    lua: str | None = None  # the Lua slurmctld links; None: detect
    count_gpus: str = POLICY.default("count_gpus")  # devices | equivalents


@dataclass(frozen=True)
class SiteConfig:
    """The site config, parsed and cross-checked: the [site] keys and every other section."""

    path: str
    cluster_name: str
    timezone: str = SITE.default("timezone")
    state_dir: str = SITE.default("state_dir")
    results_dir: str = ""
    report_dir: str = ""
    retry_window_s: int = SITE.default("retry_window")
    report_labels: tuple[str, ...] = SITE.default("report_labels")
    target_completed_runs_per_month: float | None = None
    acceptance_stale_days: int = SITE.default("acceptance_stale_days")
    partitions: dict[str, PartitionConfig] = field(default_factory=dict)
    gpu_type_prices: dict[str, float] = field(default_factory=dict)
    gpu_type_price_units: dict[str, str] = field(default_factory=dict)  # [gpu_type] price_unit given: card | slice (the unit applied: metrics.attempts.price_unit)
    gpu_type_shares: dict[str, Fraction] = field(default_factory=dict)  # [gpu_type] gpu_share
    accounts: dict[str, AccountConfig] = field(default_factory=dict)
    qos: dict[str, QosConfig] = field(default_factory=dict)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    economics: EconomicsConfig = field(default_factory=EconomicsConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    lemon: LemonConfig = field(default_factory=LemonConfig)
    slurm_backend: str = SLURM.default("backend")  # [slurm] backend
    guard: GuardConfig = field(default_factory=GuardConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)

    @property
    def currency(self) -> str:
        """The currency of every price and cost: [costs] currency ("" when unset)."""
        return self.economics.currency or ""

    def price_per_gpu_hour(self, gpu_type: str | None, partition: str | None) -> float | None:
        """The GPU type's price, falling back to the partition's; None when neither is configured."""
        if gpu_type and gpu_type in self.gpu_type_prices:
            return self.gpu_type_prices[gpu_type]
        part = self.partitions.get(partition or "")
        return part.price_per_gpu_hour if part else None

    def partition_gpu_type(self, partition: str | None) -> str | None:
        part = self.partitions.get(partition or "")
        return part.gpu_type if part else None


def find_config_path(explicit: str | None = None) -> str:
    """--config, then $GPUCLUST_CONFIG, then /etc/gpuclust/site.conf."""
    if explicit:
        return explicit
    return os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH


def load_config(path: str | None = None) -> SiteConfig:
    """Load and validate; raises ConfigError listing every problem with file:line."""
    resolved = find_config_path(path)
    try:
        data = Path(resolved).read_bytes()
    except FileNotFoundError:
        hint = "" if path else f" (searched --config, ${CONFIG_ENV}, {DEFAULT_CONFIG_PATH})"
        raise ConfigError(Problem(resolved, None, f"config file not found{hint}; give --config FILE or set "
                                  f"${CONFIG_ENV}, or start one with `gpuclust config example > site.conf`")) from None
    except OSError as exc:
        raise ConfigError(Problem(resolved, None, f"cannot read config: {exc.strerror or exc}; check the file's "
                                  "permissions (the command runs as this user)")) from None
    text, problems = decode_config(data, resolved)
    return parse_config(text, resolved, problems)


def check_config(path: str | None = None) -> list[Problem]:
    """Every problem in the file (empty when clean)."""
    try:
        load_config(path)
    except ConfigError as exc:
        return exc.problems
    return []


def parse_config(text: str, path: str = "<string>", problems: list[Problem] | None = None) -> SiteConfig:
    """`problems`: found while reading the file (bad bytes); reported with the rest."""
    doc = parse_ini(text, path, problems)
    sections, problems = validate(doc, SECTIONS)
    by_kind: dict[str, list[ParsedSection]] = {}
    for section in sections:
        by_kind.setdefault(section.spec.kind, []).append(section)
    site = by_kind.get("site", [None])[0]
    policy = by_kind.get("policy", [None])[0]
    partitions = {s.name: _partition(s) for s in by_kind.get("partition", []) if s.name}
    accounts = {s.name: _account(s) for s in by_kind.get("account", []) if s.name}
    qos = {s.name: QosConfig(s.name, s.line, _limits(s)) for s in by_kind.get("qos", []) if s.name}
    prices = {s.name: s.values["price_per_gpu_hour"] for s in by_kind.get("gpu_type", []) if s.name and "price_per_gpu_hour" in s.values}
    price_units = {s.name: s.values["price_unit"] for s in by_kind.get("gpu_type", []) if s.name and "price_unit" in s.values}
    shares = {s.name: s.values["gpu_share"] for s in by_kind.get("gpu_type", []) if s.name and "gpu_share" in s.values}
    for s in by_kind.get("gpu_type", []):
        title = f"[gpu_type {s.name}]"
        # (price_per_gpu_hour is required unless gpu_share is given; a bad value of either is reported as such)
        if not {"price_per_gpu_hour", "gpu_share"} & set(s.values) and not any(
                p.message.startswith(f"{title} price_per_gpu_hour:") or p.message.startswith(f"{title} gpu_share:")
                for p in problems):
            problems.append(Problem(path, s.line, f"{title} is missing required key 'price_per_gpu_hour': add "
                                    f"`price_per_gpu_hour = ...` under {title}", "price_per_gpu_hour"))
    policy_cfg = _policy(policy) if policy else PolicyConfig()
    problems += _cross_check(path, partitions, accounts, qos, policy, policy_cfg)
    economics, economics_problems = economics_config(path, site, by_kind.get("account", []), by_kind.get("costs", []),
                                                     by_kind.get("baseline", []))
    problems += economics_problems
    guard, guard_problems = guard_config(path, by_kind.get("guard", []))
    problems += guard_problems
    notify, notify_problems = notify_config(path, by_kind.get("notify", []), guard.mail)
    problems += notify_problems
    if problems or site is None:
        raise ConfigError(problems or [Problem(path, None, "missing required section [site]")])
    state_dir = site.get("state_dir")
    return SiteConfig(
        path=path,
        cluster_name=site.values["cluster_name"],
        timezone=site.get("timezone"),
        state_dir=state_dir,
        results_dir=site.get("results_dir") or os.path.join(state_dir, "results"),
        report_dir=site.get("report_dir") or os.path.join(state_dir, "reports"),
        retry_window_s=site.get("retry_window"),
        report_labels=site.get("report_labels"),
        target_completed_runs_per_month=site.get("target_completed_runs_per_month"),
        acceptance_stale_days=site.get("acceptance_stale_days"),
        partitions=partitions,
        gpu_type_prices=prices,
        gpu_type_price_units=price_units,
        gpu_type_shares=shares,
        accounts=accounts,
        qos=qos,
        policy=policy_cfg,
        economics=economics,
        telemetry=telemetry_config(by_kind.get("telemetry", [])),
        health=health_config(by_kind.get("health", [])),
        lemon=lemon_config(by_kind.get("lemon", [])),
        slurm_backend=by_kind["slurm"][0].get("backend") if by_kind.get("slurm") else SLURM.default("backend"),
        guard=guard,
        notify=notify,
    )


def _partition(s: ParsedSection) -> PartitionConfig:
    assert s.name is not None
    fields: dict[str, Any] = {k: s.values[k] for k in s.values if k in PartitionConfig.__dataclass_fields__}
    if "max_time" in s.values:
        fields["max_time_s"] = s.values["max_time"]
    return PartitionConfig(name=s.name, line=s.line, **fields)


def _limits(s: ParsedSection) -> GpuLimits:
    return GpuLimits(
        gpu_limit=s.get("gpu_limit"),
        gpu_limit_by_type=s.family("gpu_limit"),
        gpu_hours_budget=s.get("gpu_hours_budget"),
        max_gpus_per_job=s.get("max_gpus_per_job"),
        max_gpus_per_user=s.get("max_gpus_per_user"),
        max_gpus_per_user_by_type=s.family("max_gpus_per_user"),
    )


def _account(s: ParsedSection) -> AccountConfig:
    assert s.name is not None
    return AccountConfig(s.name, s.line, s.get("labels") or {}, s.get("allowed_partitions"), _limits(s))


def _policy(s: ParsedSection) -> PolicyConfig:
    return PolicyConfig(
        fail_mode=s.get("fail_mode"),
        require_account=s.get("require_account"),
        required_labels=s.get("required_labels"),
        label_patterns=s.family("label"),
        exempt_users=s.get("exempt_users"),
        exempt_accounts=s.get("exempt_accounts"),
        reject_untyped_gpu_where_typed_limits=s.get("reject_untyped_gpu_where_typed_limits"),
        default_partition=s.get("default_partition"),
        mode=s.get("mode"),
        rule_modes=s.family("mode"),
        enforce_from=s.get("enforce_from"),
        rule_enforce_from=s.family("enforce_from"),
        lua=s.get("lua"),
        count_gpus=s.get("count_gpus"),
    )


def _cross_check(
    path: str,
    partitions: dict[str, PartitionConfig],
    accounts: dict[str, AccountConfig],
    qos: dict[str, QosConfig],
    policy: ParsedSection | None,
    policy_cfg: PolicyConfig,
) -> list[Problem]:
    """References between sections must resolve."""
    problems: list[Problem] = []

    def unknown(kind: str, name: str, known: dict[str, Any], line: int) -> None:
        hint = suggest(name, list(known)) or f"; add a [{kind} {name}] section"
        problems.append(Problem(path, line, f"unknown {kind} {name!r}{hint}"))

    for part in partitions.values():
        for account in part.allowed_accounts or ():
            if account not in accounts:
                unknown("account", account, accounts, part.line)
        if part.qos and part.qos not in qos:
            unknown("qos", part.qos, qos, part.line)
        if part.require_qos and part.allowed_qos is None:
            problems.append(Problem(path, part.line, f"[partition {part.name}] require_qos = yes needs allowed_qos"))
    for acct in accounts.values():
        for name in acct.allowed_partitions or ():
            if name not in partitions:
                unknown("partition", name, partitions, acct.line)
    if policy_cfg.default_partition and policy_cfg.default_partition not in partitions:
        unknown("partition", policy_cfg.default_partition, partitions, policy.line if policy else 0)
    if policy is not None:
        for name in policy_cfg.label_patterns:
            if name not in policy_cfg.required_labels:
                problems.append(
                    Problem(path, policy.lines.get(f"label.{name}"), f"label.{name} has allowed values but {name!r} is not in required_labels")
                )
        for prefix, family in (("mode", policy_cfg.rule_modes), ("enforce_from", policy_cfg.rule_enforce_from)):
            for rule in family:
                if rule not in POLICY_RULES:
                    hint = suggest(rule, list(POLICY_RULES)) or f"; the rules are {', '.join(POLICY_RULES)}"
                    problems.append(Problem(path, policy.lines.get(f"{prefix}.{rule}"), f"{prefix}.{rule}: unknown rule {rule!r}{hint}"))
        if policy_cfg.rule_modes.get("gres_syntax") == "warn":
            problems.append(Problem(path, policy.lines.get("mode.gres_syntax"), "mode.gres_syntax = warn: a GPU request "
                                    "the policy cannot read cannot be counted, so gres_syntax is always enforced"))
        if policy_cfg.rule_modes.get("mig_profile") == "warn":
            problems.append(Problem(path, policy.lines.get("mode.mig_profile"), "mode.mig_profile = warn: a MIG profile "
                                    "of unknown share cannot be counted, so mig_profile is always enforced"))
    return problems
