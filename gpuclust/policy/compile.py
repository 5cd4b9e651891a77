"""The site config's submit policy, compiled into plain data tables.

One compiled form feeds both sides: `render.render_lua` writes it as Lua tables in front of the fixed engine
(engine.lua), and `evaluate.Evaluator` reads the very same tables. Display strings (allowed lists, max_time)
are computed here once, so the rejection messages of both sides are byte-identical.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

from gpuclust.config.site import POLICY_RULES, GpuLimits, PolicyConfig, SiteConfig
from gpuclust.errors import ConfigError, Problem
from gpuclust.slurm.gpushare import CARD_SLICES_DEFAULT, MPS_PER_GPU_DEFAULT
from gpuclust.slurm.parse import format_slurm_duration

# A GPU request the policy cannot read (or a MIG profile of unknown share) cannot be counted: these refuse in warn
# mode too.
ALWAYS_ENFORCED = frozenset({"gres_syntax", "mig_profile"})
# With count_gpus = equivalents, GPU amounts are integers in units of 1/unit GPU (exact in doubles in every Lua):
# unit is the lcm of every share's denominator, at most MAX_UNIT so that SAT * unit stays below 2^53.
MAX_UNIT = 1_000_000


@dataclass(frozen=True)
class LabelRule:
    """A required label of --comment: its key and the globs its value must match (none: any non-empty value)."""

    key: str
    globs: tuple[str, ...]  # empty: any non-empty value
    allowed: str  # for messages

    @property
    def any_value(self) -> bool:
        return not self.globs

    @property
    def exact(self) -> frozenset[str]:
        """Values without * or ?: matched by one set lookup instead of a pattern scan."""
        return frozenset(g for g in self.globs if "*" not in g and "?" not in g)

    @property
    def pattern_globs(self) -> tuple[str, ...]:
        return tuple(g for g in self.globs if "*" in g or "?" in g)

    @property
    def lua_patterns(self) -> tuple[bytes, ...]:
        return tuple(glob_to_lua(g) for g in self.pattern_globs)

    @property
    def regexes(self) -> tuple[re.Pattern[bytes], ...]:
        return tuple(glob_to_regex(g) for g in self.pattern_globs)

    @property
    def glob_checks(self) -> GlobChecks:
        return glob_checks(self.pattern_globs)

    @property
    def globs_first(self) -> bool:
        """engine.lua tries the literal-first and `*LITERAL` globs at each token with the key before checking the
        value is non-empty (a glob that matches proves it is): a label with globs only (no exact value, not `*`),
        none filed by first byte."""
        g = self.glob_checks
        return bool(self.globs) and not self.exact and not g.any and not g.by_first and bool(g.lead or g.suffix)


# Bytes that end a label value in --comment (engine.lua's label rules; evaluate.py's _LABEL_TOKEN).
LABEL_SEPARATORS = b",; \t\n\r\v\f"
_VALUE_BYTE = b"[^" + LABEL_SEPARATORS + b"%z]"  # one byte of a NUL-free value, as a Lua set


@dataclass(frozen=True)
class GlobChecks:
    """The globs of one label for engine.lua, valid for comments without NUL bytes (which `*` never matches: for
    those the engine matches the value against every glob's full pattern, LabelRule.lua_patterns), in the order
    the engine tries them:
    - `any`: the glob `*` (any non-empty value);
    - `by_first` / `lead`: globs that start with a literal byte, as Lua patterns matched in place on the comment at
      the value's first byte (glob_in_place: an anchored literal compare, cheap). Filed under their first byte
      when there are FIRST_BYTE_MIN of them (a value is tried only against those of its own first byte), else
      all in `lead`;
    - `suffix`: globs `*LITERAL` (no other `*` or `?`) as their literal: the engine finds the value's end once and
      compares each literal there with one plain find, instead of a byte-by-byte pattern walk per glob;
    - `wild`: the rest (a leading `*` or `?` and more), in place.
    A glob holding a separator (or a NUL byte) can match no value on this path and is left out."""

    any: bool = False
    wild: tuple[bytes, ...] = ()
    by_first: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    suffix: tuple[bytes, ...] = ()
    lead: tuple[bytes, ...] = ()


# Globs are filed by their first byte only when a label has at least this many with a literal first byte: the
# look-up costs a string.byte call, about what one anchored glob costs that fails at its first byte. Otherwise
# they are all `wild`, those with a literal first byte first.
FIRST_BYTE_MIN = 3


def glob_in_place(glob: str) -> bytes:
    """A glob as a Lua pattern anchored at the value's first byte in the comment. A glob that ends in `*` needs no
    end check: its last `*` takes the rest of the token, whatever it holds (no NUL byte on this path), so its
    pattern stops where the `*` starts (`proj-*` is `^proj%-`: a literal compare, no byte-by-byte set match to the
    token's end). Any other glob ends with a frontier at a separator or the comment's end."""
    data = glob.encode("utf-8")
    open_end = len(data) > 1 and data.endswith(b"*")
    if open_end:
        data = data[:-1]
    out = [b"^"]
    for byte in data:
        ch = bytes([byte])
        if ch == b"*":
            out.append(_VALUE_BYTE + b"-")  # lazy: the first split that matches will do
        elif ch == b"?":
            out.append(_VALUE_BYTE)
        elif byte < 128 and not ch.isalnum():
            out.append(b"%" + ch)
        else:
            out.append(ch)
    if not open_end:
        out.append(b"%f[" + LABEL_SEPARATORS + b"%z]")
    return b"".join(out)


def glob_checks(globs: tuple[str, ...]) -> GlobChecks:
    any_value = False
    wild: list[bytes] = []
    by_first: dict[int, list[bytes]] = {}
    suffix: list[bytes] = []
    for glob in globs:
        data = glob.encode("utf-8")
        if any(b in LABEL_SEPARATORS or b == 0 for b in data):
            continue  # a value never holds a separator (or a NUL, on this path)
        g = re.sub(r"\*+", "*", glob)  # a run of stars matches what one star does
        if g == "*":
            any_value = True
        elif g[0] == "*" and "*" not in g[1:] and "?" not in g:
            suffix.append(g[1:].encode("utf-8"))
        elif data[0] in b"*?":
            wild.append(glob_in_place(g))
        else:
            by_first.setdefault(data[0], []).append(glob_in_place(g))
    if sum(map(len, by_first.values())) < FIRST_BYTE_MIN:  # fewer than a first-byte look-up pays for
        return GlobChecks(any_value, tuple(wild), {}, tuple(suffix), tuple(p for _, v in sorted(by_first.items()) for p in v))
    return GlobChecks(any_value, tuple(wild), {k: tuple(v) for k, v in sorted(by_first.items())}, tuple(suffix))


@dataclass(frozen=True)
class PartitionRule:
    """One partition's submit rules, with the display strings the refusal messages use."""

    name: str
    need_gpu: bool = False
    need_typed_gpu: bool = False
    need_wckey: bool = False
    max_gpus: int | None = None
    gpus_per_node: int | None = None  # what an --exclusive job gets on each node
    max_time_s: int | None = None
    max_time_str: str | None = None
    allowed_accounts: frozenset[str] | None = None
    allowed_accounts_str: str = ""
    typed_limits: bool = False  # its partition QOS has typed GPU limits
    gpu_types: frozenset[str] | None = None  # the GPU types its nodes have (site config gpu_type); None: unchecked
    gpu_types_str: str = ""
    shard_units: int | None = None  # units of one shard (count_gpus = equivalents: unit / shards_per_gpu; devices: 0)
    max_cpus_per_gpu: int | None = None
    max_mem_per_gpu: int | None = None  # MB
    allowed_qos: frozenset[str] | None = None
    allowed_qos_str: str = ""
    need_qos: bool = False  # partition_qos also refuses a job with neither --qos nor a default QOS seen


@dataclass(frozen=True)
class AccountRule:
    """One account's submit rules: the partitions it may use and its GPUs per job."""

    name: str
    allowed_partitions: frozenset[str] | None = None
    allowed_partitions_str: str = ""
    max_gpus: int | None = None
    typed_limits: bool = False


@dataclass(frozen=True)
class CompiledPolicy:
    """The submit policy as plain tables: what render_lua writes for engine.lua, and what evaluate reads."""

    source: str
    fail_mode: str = "closed"
    need_account: bool = False
    default_partition: str | None = None
    reject_untyped: bool = True
    labels: tuple[LabelRule, ...] = ()
    exempt_users: frozenset[str] = frozenset()
    exempt_accounts: frozenset[str] = frozenset()
    partitions: dict[str, PartitionRule] = field(default_factory=dict)
    accounts: dict[str, AccountRule] = field(default_factory=dict)
    qos_typed: frozenset[str] = frozenset()  # QOS names that carry typed GPU limits
    # rules in warn mode -> when they will be refused, as the user is told: "from 2026-09-01"
    warn: dict[str, str] = field(default_factory=dict)
    count_eq: bool = False  # [policy] count_gpus = equivalents
    unit: int = 1  # GPU amounts are counted in 1/unit of a GPU (1: devices)
    share_overrides: dict[str, Fraction] = field(default_factory=dict)  # [gpu_type NAME] gpu_share

    @property
    def share_units(self) -> dict[str, int]:
        """Units of one GRES of each type the site gives a share ([gpu_type NAME] gpu_share)."""
        return {name: int(share * self.unit) for name, share in self.share_overrides.items()}

    @property
    def mps_units(self) -> int:
        return self.unit // MPS_PER_GPU_DEFAULT if self.count_eq else 0

    @property
    def need_amounts(self) -> bool:
        """Whether the engine reads GPU amounts (equivalents, or the per-GPU ratios at the fewest nodes)."""
        return self.count_eq or any(p.max_cpus_per_gpu or p.max_mem_per_gpu for p in self.partitions.values())

    @property
    def rule_count(self) -> int:
        """Rough size of the policy: one per active check (used by benchmarks and `render` output)."""
        n = int(self.need_account) + len(self.labels) + int(self.reject_untyped)
        for p in self.partitions.values():
            n += sum(map(bool, (p.need_gpu, p.need_typed_gpu, p.need_wckey, p.max_gpus,
                                p.max_time_s is not None, p.allowed_accounts is not None, p.gpu_types is not None,
                                p.max_cpus_per_gpu, p.max_mem_per_gpu, p.allowed_qos is not None)))
        for a in self.accounts.values():
            n += sum(map(bool, (a.allowed_partitions is not None, a.max_gpus)))
        return n


def glob_to_lua(glob: str) -> bytes:
    """`*` and `?` globs -> an anchored Lua pattern; every other non-alphanumeric ASCII byte is %-escaped.

    Lua matches bytes, so `?` is one byte; glob_to_regex matches bytes too, keeping both sides identical.
    """
    out = [b"^"]
    for byte in glob.encode("utf-8"):
        ch = bytes([byte])
        if ch == b"*":
            out.append(b"%Z*")  # any bytes but NUL (Slurm strings are C strings)
        elif ch == b"?":
            out.append(b"%Z")
        elif byte < 128 and not ch.isalnum():
            out.append(b"%" + ch)
        else:
            out.append(ch)
    out.append(b"$")
    return b"".join(out)


def glob_to_regex(glob: str) -> re.Pattern[bytes]:
    parts = []
    for byte in glob.encode("utf-8"):
        if byte == ord("*"):
            parts.append(b"[^\x00]*")
        elif byte == ord("?"):
            parts.append(b"[^\x00]")
        else:
            parts.append(re.escape(bytes([byte])))
    return re.compile(b"".join(parts))


def _typed(limits: GpuLimits) -> bool:
    return bool(limits.gpu_limit_by_type or limits.max_gpus_per_user_by_type)


def warn_rules(pol: PolicyConfig) -> dict[str, str]:
    """The rules in warn mode ([policy] mode, mode.RULE) and the words that tell users when each is enforced."""
    out = {}
    for rule in POLICY_RULES:
        if rule in ALWAYS_ENFORCED or pol.rule_modes.get(rule, pol.mode) != "warn":
            continue
        when = pol.rule_enforce_from.get(rule) or pol.enforce_from
        out[rule] = f"from {when}" if when else "once the rule is enforced"
    return out


def share_unit(config: SiteConfig) -> int:
    """The unit GPU amounts are counted in: 1 (devices), or the lcm of every share's denominator (equivalents)."""
    if config.policy.count_gpus != "equivalents":
        return 1
    dens = [CARD_SLICES_DEFAULT, 4, MPS_PER_GPU_DEFAULT]
    dens += [share.denominator for share in config.gpu_type_shares.values()]
    dens += [p.shards_per_gpu for p in config.partitions.values() if p.shards_per_gpu]
    unit = math.lcm(*dens)
    if unit > MAX_UNIT:
        raise ConfigError(Problem(config.path, None, f"count_gpus = equivalents: the GPU shares (gpu_share, "
                                  f"shards_per_gpu) need a common denominator of {unit}, more than {MAX_UNIT}; give "
                                  "shares with smaller denominators"))
    return unit


def compile_policy(config: SiteConfig) -> CompiledPolicy:
    pol = config.policy
    unit = share_unit(config)
    count_eq = pol.count_gpus == "equivalents"
    qos_typed = frozenset(name for name, q in config.qos.items() if _typed(q.limits))
    labels = tuple(
        LabelRule(key, tuple(pol.label_patterns.get(key, ())), ", ".join(pol.label_patterns.get(key, ())) or "any value")
        for key in pol.required_labels
    )
    partitions = {}
    for name, p in config.partitions.items():
        partitions[name] = PartitionRule(
            name=name,
            need_gpu=p.require_gpu,
            need_typed_gpu=p.require_typed_gpu,
            need_wckey=p.require_wckey,
            max_gpus=p.max_gpus_per_job,
            gpus_per_node=p.gpus_per_node,
            max_time_s=p.max_time_s,
            max_time_str=format_slurm_duration(p.max_time_s) if p.max_time_s is not None else None,
            allowed_accounts=frozenset(p.allowed_accounts) if p.allowed_accounts is not None else None,
            allowed_accounts_str=", ".join(p.allowed_accounts or ()),
            typed_limits=bool(p.qos and p.qos in qos_typed),
            gpu_types=frozenset((p.gpu_type,)) if p.gpu_type else None,
            gpu_types_str=p.gpu_type or "",
            shard_units=(unit // p.shards_per_gpu if p.shards_per_gpu else None) if count_eq else 0,
            max_cpus_per_gpu=p.max_cpus_per_gpu,
            max_mem_per_gpu=p.max_mem_per_gpu,
            allowed_qos=frozenset(p.allowed_qos) if p.allowed_qos is not None else None,
            allowed_qos_str=", ".join(p.allowed_qos or ()),
            need_qos=p.require_qos,
        )
    accounts = {}
    for name, a in config.accounts.items():
        accounts[name] = AccountRule(
            name=name,
            allowed_partitions=frozenset(a.allowed_partitions) if a.allowed_partitions is not None else None,
            allowed_partitions_str=", ".join(a.allowed_partitions or ()),
            max_gpus=a.limits.max_gpus_per_job,
            typed_limits=_typed(a.limits),
        )
    return CompiledPolicy(
        source=config.path.rsplit("/", 1)[-1],
        fail_mode=pol.fail_mode,
        need_account=pol.require_account,
        default_partition=pol.default_partition,
        reject_untyped=pol.reject_untyped_gpu_where_typed_limits,
        labels=labels,
        exempt_users=frozenset(pol.exempt_users),
        exempt_accounts=frozenset(pol.exempt_accounts),
        partitions=partitions,
        accounts=accounts,
        qos_typed=qos_typed,
        warn=warn_rules(pol),
        count_eq=count_eq,
        unit=unit,
        share_overrides=dict(config.gpu_type_shares) if count_eq else {},
    )
