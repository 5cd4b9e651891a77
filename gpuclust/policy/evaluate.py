"""The Python twin of engine.lua: same job_desc shape in, same verdict, rule and message out.

A job_desc here is a mapping of the real 22.05 field names (account, partition, tres_per_node, min_nodes...)
to str or numbers; a missing name reads as None, as in slurmctld. Numbers are handled as IEEE doubles,
because that is what Lua 5.1 sees, and GPU counts saturate at SAT, so every comparison and every message
comes out byte-identical to the Lua (tests/unit/test_policy_differential.py checks this on >= 10,000 jobs).
Strings are compared as UTF-8 bytes where the Lua works on bytes (label globs, message sanitising).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclust.policy.compile import CompiledPolicy
from gpuclust.slurm.gpushare import mig_profile, type_share

NO_VAL = 4294967294.0
NO_VAL16 = 65534.0
NO_VAL64 = float(18446744073709551614)
INFINITE = 4294967295.0
SAT = 1e9

RC_OK = 0
RC_ERROR = -1
RC_INVALID_ACCOUNT = 2045
RC_INVALID_TIME_LIMIT = 2051
RC_INVALID_GRES = 2072

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
_DIGITS = re.compile(r"[0-9]+")
_LABEL_TOKEN = re.compile(b"[^,; \t\n\r\x0b\x0c]+")
_UNPRINTABLE = re.compile(b"[^\x20-\x7e]")


@dataclass(frozen=True)
class RuleWarning:
    """A rule in warn mode that an accepted job failed."""

    rule: str
    message: str  # the rule's message (what it would say on refusal, without the "gpuclust policy [rule]: " prefix)
    when: str  # when it will be enforced: "from 2026-09-01" (CompiledPolicy.warn)

    @property
    def text(self) -> str:
        """The line the user is shown (engine.lua's log_warnings)."""
        return f"gpuclust policy [{self.rule}] warning: accepted now, refused {self.when}: {self.message}"


@dataclass(frozen=True)
class Verdict:
    """The policy's verdict on one job_desc: its return code, the rule and message, and warn-mode warnings."""

    rc: int  # 0 accept; otherwise the code the Lua returns (slurm.ERROR = -1, or an ESLURM number)
    rule: str  # "ok", "exempt", or the rule that rejected
    message: str | None  # what slurm.log_user shows the user on refusal (None on accept)
    warnings: tuple[RuleWarning, ...] = ()  # warn-mode rules an accepted job failed, in the engine's order

    @property
    def accepted(self) -> bool:
        return self.rc == RC_OK

    @property
    def user_message(self) -> str | None:
        """Everything slurm.log_user shows the user: the refusal, or the warnings one per line (None: nothing)."""
        if not self.accepted:
            return self.message
        return "\n".join(w.text for w in self.warnings) or None

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rc": self.rc, "rule": self.rule, "message": self.message,
                "warnings": [{"rule": w.rule, "message": w.text} for w in self.warnings]}


REJECT_MARKER = "gpuclust-policy-reject"
WARN_MARKER = "gpuclust-policy-warn"
_LOG_UNSAFE = re.compile(b"[^A-Za-z0-9_.,:/@+\\-]")


def int_text(x: float) -> str:
    """engine.lua's int_text: an integral number as an integer under every Lua, anything else as %.14g."""
    if not math.isnan(x) and x.is_integer() and -1e15 < x < 1e15:
        return str(int(x))
    return f"{x:.14g}"


def log_value(v: Any) -> str:
    """One value of the structured log line, as engine.lua's log_value writes it."""
    if v is None:
        return ""
    if isinstance(v, bool):
        data = b"true" if v else b"false"
    elif isinstance(v, (int, float)):
        x = _num(v)
        data = int_text(x if x is not None else 0.0).encode("ascii")
    else:
        data = _b(str(v))[:200]
    return _LOG_UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], data).decode("ascii")


def _num(v: Any) -> float | None:
    """A Lua number view of v (bool is not a number in Lua)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _nonempty(v: Any) -> str | None:
    return v if isinstance(v, str) and v != "" else None


def _valid_count(v: Any, limit: float) -> float | None:
    x = _num(v)
    if x is not None and x >= 1 and x < limit and x.is_integer():
        return x
    return None


def _sat_mul(a: float, b: float) -> float:
    p = a * b
    return SAT if p > SAT else p


def _sat_add(a: float, b: float) -> float:
    s = a + b
    return SAT if s > SAT else s


def _b(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def shown(s: str) -> str:
    return _UNPRINTABLE.sub(b"?", _b(s)[:40]).decode("ascii")


def _to_count(digits: str) -> float:
    n = int(digits)
    return SAT if n > SAT else float(n)


def _fmt_int(x: float) -> str:
    return str(int(x))


def _add_type(types: list[str] | None, t: str) -> None:
    if types is not None and t not in types:
        types.append(t)


def scan_gpus(v: Any, types: list[str] | None = None) -> tuple[float, float, str | None]:
    """GPUs in one field value: (count, untyped part, offending item). engine.lua's scan_gpus, the one tokenizer
    for every form a supported slurmctld sends (22.05 `gres:gpu:h100:2`, 24.11+ `gres/gpu:h100:2`, `gres/gpu=1`,
    `gres/gpu:h100=1`, `cpu=4`, bare `gpu:2`, comma lists). Each distinct GPU type named is appended once to
    `types` (when given), in the order seen: h100 in gpu:h100:2, and "-1" / "abc" in gpu:-1 / gpu:abc, which sbatch
    and slurmctld take as one GPU of that type."""
    if v is None:
        return 0.0, 0.0, None
    if not isinstance(v, str):
        return 0.0, 0.0, "(not a string)"
    total = untyped = 0.0
    for item in v.split(","):
        if not item:
            continue
        rest: str | None = item
        if item[:5] == "gres:" and len(_b(item)) > 5:
            rest = item[5:]
        else:
            slash = item.find("/")
            if slash >= 0:
                kind = item[:slash]
                if kind == "gres" and slash < len(item) - 1:
                    rest = item[slash + 1:]
                elif kind != "gres" and _NAME.fullmatch(kind):
                    rest = None  # another TRES kind (license/..., bb/...): never a GPU
                else:
                    return total, untyped, item
        if rest is None:
            continue
        head, eq, cnt = rest.partition("=")
        name, c1, after = head.partition(":")
        if not _NAME.fullmatch(name):
            return total, untyped, item
        if name != "gpu":
            continue
        if eq:  # gpu=N | gpu:TYPE=N
            if not _DIGITS.fullmatch(cnt):
                return total, untyped, item
            count, typed = _to_count(cnt), False
            if c1:
                if not _NAME.fullmatch(after) or _DIGITS.fullmatch(after):
                    return total, untyped, item
                typed = True
                _add_type(types, after)
        elif not c1:
            count, typed = 1.0, False
        else:
            second, c2, third = after.partition(":")
            if not c2:
                if _DIGITS.fullmatch(second):
                    count, typed = _to_count(second), False
                elif _NAME.fullmatch(second):
                    count, typed = 1.0, True
                    _add_type(types, second)
                else:
                    return total, untyped, item
            elif _NAME.fullmatch(second) and not _DIGITS.fullmatch(second) and _DIGITS.fullmatch(third):
                count, typed = _to_count(third), True
                _add_type(types, second)
            else:
                return total, untyped, item
        total = _sat_add(total, count)
        if not typed:
            untyped = _sat_add(untyped, count)
    return total, untyped, None


W_NODES = "max_nodes is unlimited (an open -N range); give -N <min>-<max>"
W_SOCKETS = "--gpus-per-socket needs --sockets-per-node"


@dataclass
class GpuRequest:
    """The most GPUs Slurm may allocate a job (see engine.lua's gpu_request for the rules and the lab facts)."""

    total: float = 0.0
    untyped: float = 0.0
    bad: str | None = None
    field: str | None = None
    nodes: float = 1.0
    why: str | None = None  # why the count has no bound (None: bounded)
    exclusive: bool = False
    types: list[str] = dataclasses.field(default_factory=list)  # the GPU types named, each once, in the order scan_gpus saw them


def gpu_request(job: Mapping[str, Any]) -> GpuRequest:
    node_field, per_node = "tres_per_node", job.get("tres_per_node")
    if per_node is None or per_node == "":
        node_field, per_node = "gres", job.get("gres")
    types: list[str] = []
    total, untyped, bad = scan_gpus(job.get("tres_per_job"), types)
    if bad is not None:
        return GpuRequest(total, untyped, bad, "tres_per_job", types=types)
    nt, nu, bad = scan_gpus(per_node, types)
    if bad is not None:
        return GpuRequest(total, untyped, bad, node_field, types=types)
    st, su, bad = scan_gpus(job.get("tres_per_socket"), types)
    if bad is not None:
        return GpuRequest(total, untyped, bad, "tres_per_socket", types=types)
    tt, tu, bad = scan_gpus(job.get("tres_per_task"), types)
    if bad is not None:
        return GpuRequest(total, untyped, bad, "tres_per_task", types=types)
    per_gpu = None
    if total == 0 and nt == 0 and st == 0 and tt == 0:
        per_gpu = _valid_count(job.get("ntasks_per_tres"), NO_VAL16)
    shared = _num(job.get("shared"))
    exclusive = shared is not None and shared == 0
    if nt == 0 and st == 0 and tt == 0 and per_gpu is None and not exclusive:
        return GpuRequest(total, untyped, types=types)
    why: str | None = None
    tasks = _valid_count(job.get("num_tasks"), NO_VAL)
    lo = _valid_count(job.get("min_nodes"), NO_VAL) or 1.0
    mx = _num(job.get("max_nodes"))
    nodes: float
    if mx is not None and mx == INFINITE:
        nodes, why = SAT, W_NODES
    else:
        got = _valid_count(mx, NO_VAL)
        if got is not None:
            nodes = max(got, lo)
        else:
            nodes = lo
            if tasks is not None and tasks > nodes:
                nodes = tasks
    total, untyped = _sat_add(total, _sat_mul(nt, nodes)), _sat_add(untyped, _sat_mul(nu, nodes))
    if st > 0:
        sockets = _valid_count(job.get("sockets_per_node"), NO_VAL16)
        if sockets is None:
            sockets, why = SAT, why or W_SOCKETS
        m = _sat_mul(sockets, nodes)
        total, untyped = _sat_add(total, _sat_mul(st, m)), _sat_add(untyped, _sat_mul(su, m))
    if tt > 0 or per_gpu is not None:
        t = tasks if tasks is not None else _valid_count(job.get("min_cpus"), NO_VAL)
        tpn = _valid_count(job.get("ntasks_per_node"), NO_VAL16)
        if tpn is None:
            tps = _valid_count(job.get("ntasks_per_socket"), NO_VAL16)
            if tps is not None:
                spn = _valid_count(job.get("sockets_per_node"), NO_VAL16)
                if spn is not None:
                    tpn = _sat_mul(tps, spn)
        if tpn is not None:
            u = _sat_mul(tpn, nodes)
            if t is None or u > t:
                t = u
        if t is None:
            t = nodes
        total, untyped = _sat_add(total, _sat_mul(tt, t)), _sat_add(untyped, _sat_mul(tu, t))
        if per_gpu is not None:
            g = float(math.ceil(t / per_gpu))
            total, untyped = _sat_add(total, g), _sat_add(untyped, g)
    return GpuRequest(total, untyped, None, None, nodes, why, exclusive, types)


@dataclass
class Amounts:
    """GPU amounts in units of 1/policy.unit GPU (engine.lua's amounts): the most the job may get (at gpu_request's
    node and task counts) and what it gets on the fewest nodes (min_nodes, or 1), with the tasks there; shards and
    MPS apart (their share is a partition's). `bad`: the first GPU type of unknown share (type, code, slices, card)."""

    units: float = 0.0
    shards: float = 0.0
    mps: float = 0.0
    lo_units: float = 0.0
    lo_shards: float = 0.0
    lo_mps: float = 0.0
    lo_nodes: float = 1.0
    lo_tasks: float = 1.0
    bad: tuple[str, str, str, int] | None = None


_MEM_PER_GPU = re.compile(r"(?:gres[:/])?gpu[:=]([0-9]+)")


def per_gpu_value(v: Any) -> float | None:
    """N of a cpus_per_tres / mem_per_tres value `gres:gpu:N` (22.05), `gres/gpu:N`, `gpu=N`; None otherwise."""
    if isinstance(v, str):
        m = _MEM_PER_GPU.fullmatch(v)
        if m:
            return _to_count(m.group(1))
    return None


def fmt_amount(x: float) -> str:
    """engine.lua's fmt_amount: a whole amount as an integer, anything else with two decimals."""
    if x.is_integer() and x < 1e15:
        return str(int(x))
    return f"{x:.2f}"


def _unit_count(item: str, eq: bool, cnt: str, head: str, c1: bool) -> float:
    """Count of a shard / MPS item: `=N`, or the last `:N`, else 1 (engine.lua's unit_count)."""
    if eq:
        return _to_count(cnt) if _DIGITS.fullmatch(cnt) else 1.0
    if c1:
        last = head.rsplit(":", 1)[1]
        if _DIGITS.fullmatch(last):
            return _to_count(last)
    return 1.0


def labels_of(comment: Any, keys: frozenset[str]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    if not isinstance(comment, str):
        return found
    for tok in _LABEL_TOKEN.findall(_b(comment)):
        eq = tok.find(b"=")
        if eq > 0 and eq < len(tok) - 1:
            key = tok[:eq].decode("utf-8", "surrogateescape")
            if key in keys and key not in found:
                found[key] = tok[eq + 1:]
    return found


class Evaluator:
    """Decides like the rendered job_submit.lua of the same CompiledPolicy."""

    def __init__(self, policy: CompiledPolicy):
        self.policy = policy
        self._label_keys = frozenset(label.key for label in policy.labels)
        self._label_regexes = [label.regexes for label in policy.labels]
        self._label_exact = [frozenset(_b(v) for v in label.exact) for label in policy.labels]

    def _type_units(self, gtype: str) -> tuple[float, tuple[str, str, str, int] | None]:
        """Units of one GRES of a GPU type, from gpuclust.slurm.gpushare (the Lua reads the rendered tables)."""
        pol = self.policy
        if not pol.count_eq:
            return 1.0, None
        share, warning = type_share(gtype, pol.share_overrides)
        if share is None:
            assert warning is not None
            prof = mig_profile(gtype)
            assert prof is not None
            return 0.0, (gtype, warning.code, str(prof.compute_slices), prof.card_slices)
        return float(share * pol.unit), None

    def _scan_units(self, v: Any) -> tuple[float, float, float, tuple[str, str, str, int] | None]:
        """One field's GPU units, shards and MPS (a field gres_syntax passed); engine.lua's scan_units."""
        if not isinstance(v, str):
            return 0.0, 0.0, 0.0, None
        satu = SAT * self.policy.unit
        units = shards = mps = 0.0
        for item in v.split(","):
            if not item:
                continue
            rest = item
            if item[:5] == "gres:" and len(_b(item)) > 5:
                rest = item[5:]
            else:
                slash = item.find("/")
                if slash >= 0:
                    if item[:slash] != "gres":
                        continue
                    rest = item[slash + 1:]
            head, eq, cnt = rest.partition("=")
            name, c1, _ = head.partition(":")
            if name == "gpu":
                types: list[str] = []
                total, untyped, _bad = scan_gpus(item, types)
                u = float(self.policy.unit) if untyped > 0 or not types else None
                if u is None:
                    u, bad = self._type_units(types[0])
                    if bad is not None:
                        return units, shards, mps, bad
                p = total * u
                units = min(units + min(p, satu), satu)
            elif name == "shard" and self.policy.count_eq:
                shards = _sat_add(shards, _unit_count(item, bool(eq), cnt, head, bool(c1)))
            elif name == "mps" and self.policy.count_eq:
                mps = _sat_add(mps, _unit_count(item, bool(eq), cnt, head, bool(c1)))
        return units, shards, mps, None

    def amounts(self, job: Mapping[str, Any], gpus: GpuRequest) -> Amounts:
        """engine.lua's amounts: the job's GPU units, shards and MPS at the most and at the fewest nodes."""
        pol = self.policy
        unit = float(pol.unit)
        satu = SAT * unit
        per_node = job.get("tres_per_node")
        if per_node is None or per_node == "":
            per_node = job.get("gres")
        fields = []
        for v in (job.get("tres_per_job"), per_node, job.get("tres_per_socket"), job.get("tres_per_task")):
            u, sh, mp, bad = self._scan_units(v)
            if bad is not None:
                return Amounts(bad=bad)
            fields.append((u, sh, mp))
        (ju, js, jm), (nu, ns, nm), (su, ss, sm), (tu, ts, tm) = fields

        def smul(a: float, b: float) -> float:
            p = a * b
            return satu if p > satu else p

        def sadd(a: float, b: float) -> float:
            x = a + b
            return satu if x > satu else x

        per_gpu = None
        if ju == 0 and nu == 0 and su == 0 and tu == 0:
            per_gpu = _valid_count(job.get("ntasks_per_tres"), NO_VAL16)
        tasks = _valid_count(job.get("num_tasks"), NO_VAL)
        spn = _valid_count(job.get("sockets_per_node"), NO_VAL16)
        tpn = _valid_count(job.get("ntasks_per_node"), NO_VAL16)
        if tpn is None:
            tps = _valid_count(job.get("ntasks_per_socket"), NO_VAL16)
            if tps is not None and spn is not None:
                tpn = _sat_mul(tps, spn)
        # the most: gpu_request's node and task counts
        nodes = gpus.nodes
        t = tasks if tasks is not None else _valid_count(job.get("min_cpus"), NO_VAL)
        if tpn is not None:
            x = _sat_mul(tpn, nodes)
            if t is None or x > t:
                t = x
        if t is None:
            t = nodes
        m = _sat_mul(spn if spn is not None else SAT, nodes)
        out = Amounts()
        out.units = sadd(sadd(sadd(ju, smul(nu, nodes)), smul(su, m)), smul(tu, t))
        out.shards = _sat_add(_sat_add(_sat_add(js, _sat_mul(ns, nodes)), _sat_mul(ss, m)), _sat_mul(ts, t))
        out.mps = _sat_add(_sat_add(_sat_add(jm, _sat_mul(nm, nodes)), _sat_mul(sm, m)), _sat_mul(tm, t))
        if per_gpu is not None:
            out.units = sadd(out.units, smul(float(math.ceil(t / per_gpu)), unit))
        # the fewest nodes: min_nodes (or 1), num_tasks raised to ntasks_per_node there (or one task per node)
        lo = _valid_count(job.get("min_nodes"), NO_VAL) or 1.0
        lt = tasks
        if tpn is not None:
            x = _sat_mul(tpn, lo)
            if lt is None or x > lt:
                lt = x
        if lt is None:
            lt = lo
        lm = _sat_mul(spn if spn is not None else 1.0, lo)
        out.lo_nodes, out.lo_tasks = lo, lt
        out.lo_units = sadd(sadd(sadd(ju, smul(nu, lo)), smul(su, lm)), smul(tu, lt))
        out.lo_shards = _sat_add(_sat_add(_sat_add(js, _sat_mul(ns, lo)), _sat_mul(ss, lm)), _sat_mul(ts, lt))
        out.lo_mps = _sat_add(_sat_add(_sat_add(jm, _sat_mul(nm, lo)), _sat_mul(sm, lm)), _sat_mul(tm, lt))
        if per_gpu is not None:
            out.lo_units = sadd(out.lo_units, smul(float(math.ceil(lt / per_gpu)), unit))
        return out

    def _partition_units(self, a: Amounts, name: str, lo: bool) -> float | None:
        """The job's GPU units in partition `name` with its shards and MPS; None: shards of unknown share there."""
        pol = self.policy
        pr = pol.partitions.get(name)
        units, shards, mps = (a.lo_units, a.lo_shards, a.lo_mps) if lo else (a.units, a.shards, a.mps)
        shard_units = pr.shard_units if pr is not None else (0 if not pol.count_eq else None)
        if shards > 0 and shard_units is None:
            return None
        satu = SAT * float(pol.unit)
        x = units
        for p in (shards * (shard_units or 0), mps * pol.mps_units):
            x = x + (satu if p > satu else p)
            x = satu if x > satu else x
        return x

    def _partitions_of(self, job: Mapping[str, Any]) -> list[str]:
        p = job.get("partition")
        names = [n for n in p.split(",") if n] if isinstance(p, str) else []
        if not names and self.policy.default_partition:
            names = [self.policy.default_partition]
        return names

    def _whole_nodes(self, name: str, nodes: float) -> tuple[float, str | None]:
        pr = self.policy.partitions.get(name)
        if pr is not None and pr.gpus_per_node is not None:
            return _sat_mul(nodes, float(pr.gpus_per_node)), None
        return 0.0, (f"--exclusive gets every GPU of its nodes, and partition {shown(name)} has no gpus_per_node "
                     "in the site config")

    def _most_gpus(self, gpus: GpuRequest, partitions: list[str]) -> tuple[float, str | None]:
        """The most GPUs a job may be allocated in these partitions, or why that cannot be bounded."""
        g, w = gpus.total, gpus.why
        if gpus.exclusive:
            if not partitions:
                w = w or "--exclusive gets every GPU of its nodes, and the job names no partition"
            for name in partitions:
                x, xw = self._whole_nodes(name, gpus.nodes)
                g, w = max(g, x), w or xw
        return g, w

    def submit(self, job: Mapping[str, Any]) -> Verdict:
        """The verdict of slurm_job_submit for this job_desc. A rule in warn mode that fails is noted in
        `warnings` (its first message per job) and the evaluation goes on, as engine.lua's reject does."""
        pol = self.policy
        warnings: list[tuple[str, str]] = []

        def fail(rc: int, rule: str, msg: str) -> Verdict | None:
            if rule not in pol.warn:
                return Verdict(rc, rule, f"gpuclust policy [{rule}]: {msg}")
            if all(r != rule for r, _ in warnings):
                warnings.append((rule, msg))
            return None

        def gpu_limit(rule: str, what: str, name: str, limit: int, g: float, w: str | None) -> Verdict | None:
            if w is not None:
                return fail(RC_ERROR, "gpu_unbounded",
                            f"cannot bound the GPUs this job may be allocated: {w}; {what} {name} allows at most {limit} per job")
            if g > limit:
                return fail(RC_ERROR, rule,
                            f"job asks for {_fmt_int(g)} GPUs at most (per-node and per-task requests count at the "
                            f"largest node and task counts Slurm may give it); {what} {name} allows at most {limit} per job; "
                            "fix the counts with -N <nodes> and -n <tasks>, or ask with --gpus=<total>")
            return None

        def eq_limit(rule: str, what: str, name: str, limit: int, gpus: GpuRequest, a: Amounts,
                     parts: list[str]) -> Verdict | None:
            """gpu_limit in GPU-equivalents (count_gpus = equivalents): engine.lua's eq_limit."""
            _, w = self._most_gpus(gpus, parts)
            unit = float(pol.unit)
            x = self._partition_units(a, "", False) if not parts else 0.0
            if x is None:
                w = w or "shards count 1/shards_per_gpu of a GPU, and the job names no partition"
                x = 0.0
            for p in parts:
                y = self._partition_units(a, p, False)
                if y is None:
                    w = w or (f"shards count 1/shards_per_gpu of a GPU, and partition {shown(p)} has no "
                              "shards_per_gpu in the site config")
                    continue
                if gpus.exclusive:
                    whole, _ = self._whole_nodes(p, gpus.nodes)
                    y = max(y, whole * unit)
                x = max(x, y)
            if w is not None:
                return fail(RC_ERROR, "gpu_unbounded",
                            f"cannot bound the GPUs this job may be allocated: {w}; {what} {name} allows at most {limit} per job")
            if x > limit * unit:
                return fail(RC_ERROR, rule,
                            f"job asks for {fmt_amount(x / unit)} GPU-equivalents at most (a MIG slice, shard or MPS "
                            "share counts as its share of one GPU; per-node and per-task requests count at the largest "
                            f"node and task counts Slurm may give it); {what} {name} allows at most {limit} per job; "
                            "fix the counts with -N <nodes> and -n <tasks>, or ask with --gpus=<total>")
            return None

        verdict = self._evaluate(job, fail, gpu_limit, eq_limit)
        if verdict is not None:
            return verdict
        return Verdict(RC_OK, "ok", None, tuple(RuleWarning(r, m, pol.warn[r]) for r, m in warnings))

    def _ratios(self, job: Mapping[str, Any], pr: Any, a: Amounts, fail: Any) -> Verdict | None:
        """partition_cpus_per_gpu and partition_mem_per_gpu (engine.lua's ratios): --cpus-per-gpu and --mem-per-gpu as
        given; otherwise the CPUs (-c x tasks) or memory (--mem x nodes, --mem-per-cpu x CPUs) on the fewest nodes
        the job may get, per GPU it gets there (in GPU-equivalents with count_gpus = equivalents)."""
        g = self._partition_units(a, pr.name, True)
        if g is None or g <= 0:
            return None
        unit = float(self.policy.unit)
        c = _valid_count(job.get("cpus_per_task"), NO_VAL16) or 1.0
        cpus = _sat_mul(c, a.lo_tasks)
        if pr.max_cpus_per_gpu:
            k = per_gpu_value(job.get("cpus_per_tres"))
            ratio = None
            if k is not None:
                if k > pr.max_cpus_per_gpu:
                    ratio = k
            elif cpus * unit > pr.max_cpus_per_gpu * g:
                ratio = cpus * unit / g
            if ratio is not None:
                v = fail(RC_ERROR, "partition_cpus_per_gpu",
                         f"job asks for {fmt_amount(ratio)} CPUs per GPU (on the fewest nodes Slurm may give it); "
                         f"partition {pr.name} allows at most {pr.max_cpus_per_gpu} per GPU; ask for fewer CPUs "
                         "(--cpus-per-gpu, or -c and -n) or more GPUs")
                if v:
                    return v
        if pr.max_mem_per_gpu:
            limit = pr.max_mem_per_gpu
            mpt = per_gpu_value(job.get("mem_per_tres"))
            ratio = None
            if mpt is not None:
                if mpt > limit:
                    ratio = mpt
            else:
                node = _num(job.get("min_mem_per_node"))
                cpu = _num(job.get("min_mem_per_cpu"))
                total = None
                if node is not None and node == 0:
                    return fail(RC_ERROR, "partition_mem_per_gpu",
                                f"job asks for all the memory of its nodes (--mem=0); partition {pr.name} allows at "
                                f"most {limit} MB per GPU; ask with --mem-per-gpu=<size> or --mem=<size>")
                if node is not None and 0 < node < NO_VAL64:
                    total = node * a.lo_nodes
                elif cpu is not None and 0 <= cpu < NO_VAL64:
                    total = cpu * cpus
                if total is not None and total * unit > limit * g:
                    ratio = total * unit / g
            if ratio is not None:
                return fail(RC_ERROR, "partition_mem_per_gpu",
                            f"job asks for {fmt_amount(ratio)} MB of memory per GPU (on the fewest nodes Slurm may "
                            f"give it); partition {pr.name} allows at most {limit} MB per GPU; ask for less with "
                            "--mem-per-gpu, --mem or --mem-per-cpu")
        return None

    def _evaluate(self, job: Mapping[str, Any], fail: Any, gpu_limit: Any, eq_limit: Any = None) -> Verdict | None:
        pol = self.policy
        user = job.get("user_name")
        account = _nonempty(job.get("account"))
        eff_account = account or _nonempty(job.get("default_account"))
        if (isinstance(user, str) and user in pol.exempt_users) or (eff_account and eff_account in pol.exempt_accounts):
            return Verdict(RC_OK, "exempt", None)
        if pol.need_account and not account:
            v = fail(RC_INVALID_ACCOUNT, "account_missing", "no account given; add --account=<account> (sbatch -A)")
            if v:
                return v
        gpus = gpu_request(job)
        if gpus.bad is not None:  # never in warn mode (compile.ALWAYS_ENFORCED)
            return Verdict(RC_INVALID_GRES, "gres_syntax", f"gpuclust policy [gres_syntax]: cannot parse GPU request "
                           f"'{shown(gpus.bad)}' in {gpus.field}; use --gres=gpu:<type>:<count> or --gpus=<type>:<count>")
        amounts = Amounts()
        if pol.need_amounts:
            amounts = self.amounts(job, gpus)
            if amounts.bad is not None:  # never in warn mode (compile.ALWAYS_ENFORCED)
                gtype, code, slices, card = amounts.bad
                if code == "mig_slice_exceeds_card":
                    msg = (f"MIG profile '{shown(gtype)}' asks for {slices} compute slices and its card has {card}; "
                           f"ask for a profile of at most {card} slices")
                else:
                    msg = (f"unknown MIG profile '{shown(gtype)}': no MIG profile has {slices} of {card} compute "
                           "slices; ask for one of the profiles the cluster's GPUs are cut into")
                return Verdict(RC_INVALID_GRES, "mig_profile", f"gpuclust policy [mig_profile]: {msg}")
        if pol.labels:
            found = labels_of(job.get("comment"), self._label_keys)
            for label, regexes, exact in zip(pol.labels, self._label_regexes, self._label_exact, strict=True):
                value = found.get(label.key)
                v = None
                if value is None:
                    v = fail(RC_ERROR, "label_missing", f"--comment must contain {label.key}=<value> (allowed: {label.allowed})")
                elif not label.any_value and value not in exact and not any(r.fullmatch(value) for r in regexes):
                    text = _UNPRINTABLE.sub(b"?", value[:40]).decode("ascii")
                    v = fail(RC_ERROR, "label_value",
                             f"{label.key}={text} is not allowed; use {label.key}=<one of: {label.allowed}> in --comment")
                if v:
                    return v
        parts = self._partitions_of(job)
        typed_limits = False
        for name in parts:
            pr = pol.partitions.get(name)
            if pr is None:
                continue
            if pr.allowed_accounts is not None and not (eff_account and eff_account in pr.allowed_accounts):
                who = shown(eff_account) if eff_account else "(none)"
                v = fail(RC_INVALID_ACCOUNT, "partition_account",
                         f"account {who} may not use partition {pr.name}; use --account with one of: {pr.allowed_accounts_str}")
                if v:
                    return v
            if pr.need_wckey and not _nonempty(job.get("wckey")):
                v = fail(RC_ERROR, "partition_wckey", f"partition {pr.name} needs a workload key; add --wckey=<key>")
                if v:
                    return v
            if pr.need_gpu and gpus.total == 0:
                v = fail(RC_ERROR, "partition_gpu",
                         f"partition {pr.name} is for GPU jobs; request GPUs with --gres=gpu:<type>:<count> or --gpus=<type>:<count>")
                if v:
                    return v
            if pr.need_typed_gpu and gpus.untyped > 0:
                v = fail(RC_INVALID_GRES, "partition_typed_gpu",
                         f"partition {pr.name} needs typed GPU requests; use --gres=gpu:<type>:<count> instead of gpu:<count>")
                if v:
                    return v
            if pr.gpu_types is not None:  # sbatch and slurmctld take --gres=gpu:-1 and --gpus=abc as one GPU of that type
                for gtype in gpus.types:
                    if gtype not in pr.gpu_types:
                        v = fail(RC_INVALID_GRES, "partition_gpu_type",
                                 f"partition {pr.name} has no GPUs of type '{shown(gtype)}' (its GPU types: "
                                 f"{pr.gpu_types_str}); use --gres=gpu:<type>:<count> or "
                                 "--gpus=<type>:<count> with one of those types")
                        if v:
                            return v
                        break
            if pr.max_gpus is not None:
                if pol.count_eq:
                    v = eq_limit("partition_max_gpus", "partition", pr.name, pr.max_gpus, gpus, amounts, [name])
                else:
                    g, w = self._most_gpus(gpus, [name])
                    v = gpu_limit("partition_max_gpus", "partition", pr.name, pr.max_gpus, g, w)
                if v:
                    return v
            t = _num(job.get("time_limit"))
            if (pr.max_time_s is not None and t is not None and t != NO_VAL and (math.isinf(t) or t.is_integer())
                    and t * 60 > pr.max_time_s):
                asked = f"{_fmt_int(t)} min" if t < NO_VAL else "UNLIMITED"
                v = fail(RC_INVALID_TIME_LIMIT, "partition_max_time",
                         f"time limit {asked} exceeds partition {pr.name} max_time {pr.max_time_str}; "
                         f"use --time={pr.max_time_str} or less")
                if v:
                    return v
            if pr.max_cpus_per_gpu or pr.max_mem_per_gpu:
                v = self._ratios(job, pr, amounts, fail)
                if v:
                    return v
            if pr.allowed_qos is not None:
                qos = _nonempty(job.get("qos")) or _nonempty(job.get("default_qos"))
                if (qos or pr.need_qos) and not (qos and qos in pr.allowed_qos):
                    v = fail(RC_ERROR, "partition_qos",
                             f"QOS {shown(qos) if qos else '(none)'} may not be used in partition {pr.name}; use "
                             f"--qos with one of: {pr.allowed_qos_str}")
                    if v:
                        return v
            if pr.typed_limits:
                typed_limits = True
        ar = pol.accounts.get(eff_account) if eff_account else None
        if ar is not None:
            if ar.allowed_partitions is not None:
                for name in parts:
                    if name not in ar.allowed_partitions:
                        v = fail(RC_ERROR, "account_partition",
                                 f"account {ar.name} may not use partition {shown(name)}; use --partition with one of: {ar.allowed_partitions_str}")
                        if v:
                            return v
                        break
            if ar.max_gpus is not None:
                if pol.count_eq:
                    v = eq_limit("account_max_gpus", "account", ar.name, ar.max_gpus, gpus, amounts, parts)
                else:
                    g, w = self._most_gpus(gpus, parts)
                    v = gpu_limit("account_max_gpus", "account", ar.name, ar.max_gpus, g, w)
                if v:
                    return v
            if ar.typed_limits:
                typed_limits = True
        qos = _nonempty(job.get("qos")) or _nonempty(job.get("default_qos"))
        if qos and qos in pol.qos_typed:
            typed_limits = True
        if pol.reject_untyped and typed_limits and gpus.untyped > 0:
            v = fail(RC_INVALID_GRES, "untyped_gpu",
                     "typed GPU limits apply to this job and Slurm does not count untyped requests against them; "
                     "use --gres=gpu:<type>:<count>")
            if v:
                return v
        return None

    def log_lines(self, job: Mapping[str, Any], verdict: Verdict, *, op: str = "submit") -> list[str]:
        """What the rendered Lua logs through slurm.log_info for this verdict (engine.lua's decide, log_line):
        on refusal the message and the gpuclust-policy-reject line, on an accept with warnings one
        gpuclust-policy-warn line per rule. `job` is the job_desc (for a modify, the MergedView)."""
        if verdict.accepted and not verdict.warnings:
            return []
        fields = (f"account={log_value(_nonempty(job.get('account')) or _nonempty(job.get('default_account')))} "
                  f"user={log_value(job.get('user_name'))} "
                  f"partition={log_value(_nonempty(job.get('partition')) or self.policy.default_partition)} "
                  f"gpus={log_value(gpu_request(job).total)}")
        if not verdict.accepted:
            where = "slurm_job_modify" if op == "modify" else "slurm_job_submit"
            return [f"{where}: {verdict.message}", f"{REJECT_MARKER} v1 op={op} rule={log_value(verdict.rule)} {fields}"]
        return [f"{WARN_MARKER} v1 op={op} rule={log_value(w.rule)} {fields}" for w in verdict.warnings]

    def modify(self, desc: Mapping[str, Any], rec: Mapping[str, Any] | None, modify_uid: int) -> Verdict:
        """The verdict of slurm_job_modify: the update's set fields laid over the job record."""
        if modify_uid == 0:
            return Verdict(RC_OK, "exempt", None)
        return self.submit(MergedView(desc, rec))


_SENTINELS = (NO_VAL, NO_VAL16, NO_VAL64)


class MergedView(Mapping[str, Any]):
    """A modify request's fields over the job record: unset (None or NO_VAL*) fields read from the record."""

    def __init__(self, desc: Mapping[str, Any], rec: Mapping[str, Any] | None):
        self.desc, self.rec = desc, rec

    def __getitem__(self, key: str) -> Any:
        v = self.desc.get(key)
        x = _num(v)
        if v is None or (x is not None and x in _SENTINELS):
            return self.rec.get(key) if self.rec is not None else None
        return v

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(set(self.desc) | set(self.rec or {}))

    def __len__(self) -> int:
        return len(set(self.desc) | set(self.rec or {}))

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]
