"""Typed records of what Slurm says about nodes, partitions, QOS and associations, and one parser per form.

Nodes come from either `scontrol -d -o show node` (text; every Slurm) or JSON (`sinfo --json` on 22.05, whose
node objects are openapi v0.0.38; `scontrol --json show node` on 23.02+, whose objects use data_parser
v0.0.39+ with list states and {set, infinite, number} numbers). Both land in the same NodeRecord, so the checks
never see the source format. Only the JSON shapes proven in the lab are read (22.05's openapi/v0.0.38, 24.11's
data_parser/v0.0.42, 26.05's v0.0.45: gpuclust.slurm.jsonshape.NODE_JSON_SHAPES); any other is refused by name
and the collector reads the text form instead. Partitions always come from `scontrol -a -o show partition` text: it is the same
on every version and has no free-text fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gpuclust.errors import SlurmOutputError
from gpuclust.slurm.hostlist import expand
from gpuclust.slurm.jsonshape import check_node_shape
from gpuclust.slurm.parse import (
    Gres,
    gpu_count,
    gpu_types,
    parse_gres,
    parse_memory_mb,
    parse_parsable,
    parse_scontrol_oneliners,
    parse_slurm_duration,
    parse_slurm_time,
    parse_tres,
)

# Base node states as Slurm prints them; anything after '+' is a flag.
BASE_STATES = frozenset(
    {"IDLE", "ALLOCATED", "ALLOC", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN", "COMPLETING", "END"}
)
# Suffix characters sinfo/scontrol append to a state: * not responding, ~ powered off, # powering up,
# % powering down, ! pending power down, $ maintenance reservation, @ reboot pending, ^ rebooting, - planned.
_STATE_SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
    "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED", "-": "PLANNED",
}
_REASON_SUFFIX = re.compile(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\]\s]+)@(?P<time>[^\]]+)\]$")


@dataclass(frozen=True)
class NodeRecord:
    """One node as the audit sees it. `state` is the base state; `flags` the rest (DRAIN, FAIL, ...)."""

    name: str
    state: str
    flags: frozenset[str] = frozenset()
    reason: str | None = None
    reason_time: datetime | None = None
    reason_user: str | None = None
    gres: tuple[Gres, ...] = ()
    gres_used: tuple[Gres, ...] = ()
    gres_drained: tuple[Gres, ...] = ()
    cpus: int | None = None
    real_memory_mb: int | None = None
    features: tuple[str, ...] = ()
    version: str | None = None
    partitions: tuple[str, ...] = ()  # in Slurm's order: the first is the one the unit economics price a node by
    cfg_tres: str | None = None  # CfgTRES as Slurm printed it: only capacity_gpus reads it

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])

    @property
    def gpu_count(self) -> int:
        return sum(g.count for g in self.gres if g.name == "gpu")

    def capacity_gpus(self) -> tuple[int, dict[str, int]]:
        """The node's GPUs and GPUs per type as capacity counts them (the unit economics): its configured TRES
        (CfgTRES gres/gpu, what slurmdbd accounts), else its GRES. `gpu_count` is the GRES alone, the count
        that GresUsed and GresDrain are compared with. Raises SlurmOutputError on a TRES or GRES it cannot read."""
        cfg = parse_tres(self.cfg_tres)
        gpus, types = gpu_count(cfg), gpu_types(cfg)
        if not gpus:
            for gres in self.gres:
                if gres.name == "gpu":
                    gpus += gres.count
                    if gres.type:
                        types[gres.type] = types.get(gres.type, 0) + gres.count
        return gpus, types

    @property
    def gpus_used(self) -> int:
        return sum(g.count for g in self.gres_used if g.name == "gpu")

    @property
    def gpus_drained(self) -> int:
        return sum(g.count for g in self.gres_drained if g.name == "gpu")

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({g.type or "(untyped)" for g in self.gres if g.name == "gpu"}))

    @property
    def gres_text(self) -> str:
        """Configured GRES without socket detail, sorted: the homogeneity key ('gpu:h100:4')."""
        return ",".join(sorted(_gres_str(g) for g in self.gres)) or "(none)"

    @property
    def is_down(self) -> bool:
        return self.state in ("DOWN", "ERROR") or bool(self.flags & {"FAIL", "FAILING", "NOT_RESPONDING", "INVALID",
                                                                      "INVALID_REG"})

    @property
    def is_drain(self) -> bool:
        return "DRAIN" in self.flags or self.state in ("DRAINED", "DRAINING", "DRAIN")

    def config(self) -> dict[str, Any]:
        """The configuration fields that should be the same across a partition (and that --baseline diffs)."""
        return {
            "gres": self.gres_text,
            "cpus": self.cpus,
            "real_memory_mb": self.real_memory_mb,
            "features": ",".join(self.features),
            "version": self.version,
        }


def _gres_str(g: Gres) -> str:
    return ":".join(x for x in (g.name, g.type, str(g.count)) if x)


@dataclass(frozen=True)
class PartitionRecord:
    """One partition (scontrol show partition): its nodes, state, time limit, access lists, QOS and TRES."""

    name: str
    nodes_expr: str
    nodes: tuple[str, ...]
    state: str = "UP"
    max_time_s: int | None = None  # -1 = UNLIMITED
    oversubscribe: str = "NO"
    allow_accounts: tuple[str, ...] | None = None  # None = ALL
    deny_accounts: tuple[str, ...] = ()
    allow_qos: tuple[str, ...] | None = None  # None = ALL
    qos: str | None = None  # the partition QOS (QoS=)
    tres: dict[str, str] = field(default_factory=dict)

    @property
    def total_gpus(self) -> int:
        value = self.tres.get("gres/gpu")
        return int(value) if value and value.isdigit() else 0


@dataclass(frozen=True)
class TresLimits:
    """The GPU parts of one QOS or association row: {column: {tres key: count}} with only gres/gpu keys."""

    owner: str  # "qos normal", "assoc physics", "assoc physics/alice"
    limits: dict[str, dict[str, int]]


@dataclass(frozen=True)
class QosRecord:
    """One QOS (sacctmgr show qos) and its GPU limits."""

    name: str
    gpu: TresLimits


@dataclass(frozen=True)
class AssocRecord:
    """One association of the cluster (sacctmgr show assoc) and its GPU limits."""

    cluster: str
    account: str
    user: str | None
    partition: str | None
    qos: tuple[str, ...]
    gpu: TresLimits


# ---- nodes: text ------------------------------------------------------------------------------------------

def parse_state(text: str) -> tuple[str, frozenset[str]]:
    """`IDLE+DRAIN`, `DOWN*`, `MIXED+DRAIN`, `IDLE*+DRAIN` -> ('IDLE', {'DRAIN', 'NOT_RESPONDING'})."""
    parts = [p for p in text.strip().upper().split("+") if p]
    if not parts:
        raise SlurmOutputError(f"empty node state {text!r}")
    flags: set[str] = set()
    cleaned = []
    for part in parts:
        while part and part[-1] in _STATE_SUFFIX_FLAGS:
            flags.add(_STATE_SUFFIX_FLAGS[part[-1]])
            part = part[:-1]
        cleaned.append(part)
    base, rest = cleaned[0], cleaned[1:]
    if base == "ALLOC":
        base = "ALLOCATED"
    if base in ("DRAINED", "DRAINING", "DRAIN"):  # sinfo's long forms: base state folded into the name
        flags.add("DRAIN")
        base = "IDLE" if base == "DRAINED" else "ALLOCATED" if base == "DRAINING" else "IDLE"
    if base in ("FAIL", "FAILING"):
        flags.add(base)
        base = "IDLE" if base == "FAIL" else "ALLOCATED"
    flags.update(rest)
    return base, frozenset(flags)


def parse_reason(text: str | None, tz: timezone = timezone.utc) -> tuple[str | None, str | None, datetime | None]:
    """`Reason=PSU failure [root@2026-12-02T11:07:12]` value -> ('PSU failure', 'root', datetime).

    The full reason, however long (sinfo -R cuts it to 20 characters). The suffix time is in the client's
    SLURM_TIME_FORMAT (pinned by CommandSlurmClient); an unparseable time leaves reason_time None.
    """
    if text is None or not text.strip() or text.strip() in ("(null)", "none", "None"):
        return None, None, None
    raw = text.strip()
    match = _REASON_SUFFIX.match(raw)
    if not match:
        return raw, None, None
    try:
        when = parse_slurm_time(match.group("time"), tz)
    except SlurmOutputError:
        when = None
    return match.group("reason") or None, match.group("user"), when


def _int_or_none(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None
    return int(text.strip())


def _partitions(text: str | None) -> tuple[str, ...]:
    """A node's partitions in Slurm's order (not sorted: the first is the node's price in the unit economics)."""
    if text is None or text.strip() in ("", "(null)", "N/A", "none"):
        return ()
    return tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip() and p.strip() != "(null)"))


def _list(text: str | None) -> tuple[str, ...]:
    if text is None or text.strip() in ("", "(null)", "N/A", "none"):
        return ()
    return tuple(sorted(p.strip() for p in text.split(",") if p.strip()))


def node_from_scontrol(fields: Mapping[str, str], tz: timezone = timezone.utc) -> NodeRecord:
    """One `scontrol -d -o show node` record -> NodeRecord."""
    name = fields.get("NodeName")
    if not name:
        raise SlurmOutputError(f"scontrol node record without NodeName: {dict(fields)!r:.200}")
    state, flags = parse_state(fields.get("State", "UNKNOWN"))
    reason, user, when = parse_reason(fields.get("Reason"), tz)
    memory = parse_memory_mb(fields.get("RealMemory"))
    return NodeRecord(
        name=name,
        state=state,
        flags=flags,
        reason=reason,
        reason_time=when,
        reason_user=user,
        gres=tuple(parse_gres(fields.get("Gres"))),
        gres_used=tuple(parse_gres(_null_idx(fields.get("GresUsed")))),
        gres_drained=tuple(parse_gres(fields.get("GresDrain"))),
        cpus=_int_or_none(fields.get("CPUTot")),
        real_memory_mb=int(memory) if memory is not None else None,
        features=_list(fields.get("AvailableFeatures")),
        version=fields.get("Version") or None,
        partitions=_partitions(fields.get("Partitions")),
        cfg_tres=fields.get("CfgTRES") or None,
    )


def _null_idx(text: str | None) -> str | None:
    """`gpu:h100:0(IDX:N/A)` -> `gpu:h100:0`: the detail is irrelevant for counts and N/A trips nothing."""
    if text is None:
        return None
    return re.sub(r"\(IDX:N/A\)", "", text)


def parse_nodes_text(text: str, tz: timezone = timezone.utc) -> list[NodeRecord]:
    return [node_from_scontrol(rec, tz) for rec in parse_scontrol_oneliners(text)]


# ---- nodes: JSON ------------------------------------------------------------------------------------------

def _json_number(value: Any) -> int | None:
    """v0.0.38 plain ints; v0.0.40+ {"set": bool, "infinite": bool, "number": n}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):  # v0.0.40 features/partitions as lists
        return ",".join(str(v) for v in value)
    text = str(value)
    return text if text and text not in ("N/A", "(null)") else None


def node_from_json(obj: Mapping[str, Any]) -> NodeRecord:
    """One node object of `sinfo --json` (22.05) or `scontrol --json show node` (23.02+) -> NodeRecord."""
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmOutputError(f"JSON node without a name: {dict(obj)!r:.200}")
    raw_state = obj.get("state")
    if isinstance(raw_state, list):  # 23.02+: ["IDLE", "DRAIN"]
        base = next((s.upper() for s in raw_state if str(s).upper() in BASE_STATES), "UNKNOWN")
        flag_list = [str(s).upper() for s in raw_state if str(s).upper() != base]
        state, flags = parse_state("+".join([base, *flag_list]))
    elif isinstance(raw_state, str):
        state, flags = parse_state(raw_state)
        flags = flags | {str(f).upper() for f in obj.get("state_flags") or []}
    else:
        raise SlurmOutputError(f"JSON node {name}: state {raw_state!r} is neither a string nor a list")
    changed = _json_number(obj.get("reason_changed_at"))
    reason = _json_text(obj.get("reason"))
    return NodeRecord(
        name=name,
        state=state,
        flags=frozenset(flags),
        reason=reason,
        reason_time=datetime.fromtimestamp(changed, timezone.utc) if changed else None,
        reason_user=_json_text(obj.get("reason_set_by_user")) if reason else None,
        gres=tuple(parse_gres(_json_text(obj.get("gres")))),
        gres_used=tuple(parse_gres(_null_idx(_json_text(obj.get("gres_used"))))),
        gres_drained=tuple(parse_gres(_json_text(obj.get("gres_drained")))),
        cpus=_json_number(obj.get("cpus")),
        real_memory_mb=_json_number(obj.get("real_memory")),
        features=_list(_json_text(obj.get("features"))),
        version=_json_text(obj.get("slurmd_version") or obj.get("version")),
        partitions=_partitions(_json_text(obj.get("partitions"))),
        cfg_tres=_json_text(obj.get("tres")),
    )


def parse_nodes_json(text: str, command: str = "node JSON") -> list[NodeRecord]:
    """`sinfo --json` (22.05) or `scontrol --json show node` (23.02+) -> NodeRecords. A shape not in
    gpuclust.slurm.jsonshape.NODE_JSON_SHAPES raises UnknownShape (a SlurmOutputError) naming `command`, the
    plugin and the version; the collector then reads the text form (the documented fallback)."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise SlurmOutputError(f"{command}: output is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise SlurmOutputError(f"{command}: output has no 'nodes' list")
    check_node_shape(doc, command)
    errors = [e for e in doc.get("errors") or [] if e]
    if errors and not doc["nodes"]:
        raise SlurmOutputError(f"Slurm reported errors: {errors!r:.300}")
    return [node_from_json(obj) for obj in doc["nodes"]]


# ---- partitions -------------------------------------------------------------------------------------------

def _names_or_all(text: str | None) -> tuple[str, ...] | None:
    if text is None or text.strip().upper() in ("ALL", ""):
        return None
    return _list(text)


def partition_from_scontrol(fields: Mapping[str, str]) -> PartitionRecord:
    name = fields.get("PartitionName")
    if not name:
        raise SlurmOutputError(f"scontrol partition record without PartitionName: {dict(fields)!r:.200}")
    nodes_expr = fields.get("Nodes", "")
    qos = fields.get("QoS")
    return PartitionRecord(
        name=name,
        nodes_expr=nodes_expr if nodes_expr not in ("(null)",) else "",
        nodes=tuple(expand(nodes_expr)),
        state=fields.get("State", "UP").upper(),
        max_time_s=parse_slurm_duration(fields.get("MaxTime")),
        oversubscribe=fields.get("OverSubscribe", "NO").upper(),
        allow_accounts=_names_or_all(fields.get("AllowAccounts")),
        deny_accounts=_list(fields.get("DenyAccounts")),
        allow_qos=_names_or_all(fields.get("AllowQos")),
        qos=qos if qos and qos not in ("N/A", "(null)") else None,
        tres=parse_tres(fields.get("TRES")),
    )


def parse_partitions_text(text: str) -> list[PartitionRecord]:
    return [partition_from_scontrol(rec) for rec in parse_scontrol_oneliners(text)]


# ---- sacctmgr ---------------------------------------------------------------------------------------------

QOS_LIMIT_COLUMNS = ("GrpTRES", "MaxTRES", "MaxTRESPerNode", "MaxTRESPU", "MaxTRESPA")
ASSOC_LIMIT_COLUMNS = ("GrpTRES", "MaxTRES", "MaxTRESPerNode")
QOS_FORMAT = "Name," + ",".join(QOS_LIMIT_COLUMNS)
ASSOC_FORMAT = "Cluster,Account,User,Partition," + ",".join(ASSOC_LIMIT_COLUMNS) + ",QOS"


def gpu_limits(row: Mapping[str, str], columns: tuple[str, ...], owner: str) -> TresLimits:
    """Only the gres/gpu and gres/gpu:TYPE keys of each TRES column; other TRES are not the audit's business."""
    out: dict[str, dict[str, int]] = {}
    for column in columns:
        tres = parse_tres(row.get(column, ""))
        gpus = {}
        for key, value in tres.items():
            if key == "gres/gpu" or key.startswith("gres/gpu:"):
                try:
                    gpus[key] = int(value)
                except ValueError:
                    raise SlurmOutputError(f"{owner}: {column} {key}={value!r} is not a count") from None
        if gpus:
            out[column] = gpus
    return TresLimits(owner, out)


def parse_qos(text: str) -> list[QosRecord]:
    """`sacctmgr -P show qos format=<QOS_FORMAT>`."""
    return [QosRecord(row["Name"], gpu_limits(row, QOS_LIMIT_COLUMNS, f"QOS {row['Name']}"))
            for row in parse_parsable(text, required=("Name",), command="sacctmgr show qos")]


def parse_assocs(text: str) -> list[AssocRecord]:
    """`sacctmgr -P show assoc where cluster=X format=<ASSOC_FORMAT>`."""
    out = []
    for row in parse_parsable(text, required=("Account",), command="sacctmgr show assoc"):
        user = row.get("User") or None
        owner = f"association {row['Account']}" + (f"/{user}" if user else "")
        if row.get("Partition"):
            owner += f" (partition {row['Partition']})"
        out.append(AssocRecord(
            cluster=row.get("Cluster", ""),
            account=row["Account"],
            user=user,
            partition=row.get("Partition") or None,
            qos=_list(row.get("QOS")),
            gpu=gpu_limits(row, ASSOC_LIMIT_COLUMNS, owner),
        ))
    return out


# ---- scontrol show config / version -----------------------------------------------------------------------

def parse_version(text: str) -> tuple[int, int, int]:
    """`slurm 22.05.8` -> (22, 5, 8)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise SlurmOutputError(f"cannot read a Slurm version from {text.strip()!r:.80}")
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
