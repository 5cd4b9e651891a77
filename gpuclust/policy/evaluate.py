"""The Python twin of engine.lua: same job_desc shape in, same verdict, rule and message out.

A job_desc here is a mapping of the real 22.05 field names (account, partition, tres_per_node, min_nodes...)
to str or numbers; a missing name reads as None, as in slurmctld. Numbers are handled as IEEE doubles,
because that is what Lua 5.1 sees, and GPU counts saturate at SAT, so every comparison and every message
comes out byte-identical to the Lua (tests/unit/test_policy_differential.py checks this on >= 10,000 jobs).
Strings are compared as UTF-8 bytes where the Lua works on bytes (label globs, message sanitising).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuclust.policy.compile import CompiledPolicy

NO_VAL = 4294967294.0
NO_VAL16 = 65534.0
NO_VAL64 = float(18446744073709551614)
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
class Verdict:
    rc: int  # 0 accept; otherwise the code the Lua returns (slurm.ERROR = -1, or an ESLURM number)
    rule: str  # "ok", "exempt", or the rule that rejected
    message: str | None  # what slurm.log_user shows the user (None on accept)

    @property
    def accepted(self) -> bool:
        return self.rc == RC_OK

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rc": self.rc, "rule": self.rule, "message": self.message}


@dataclass
class _Gpus:
    total: float = 0.0
    untyped: float = 0.0


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


def _add_gpus(v: Any, mult: float, acc: _Gpus) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str):
        return "(not a string)"
    for item in v.split(","):
        if not item:
            continue
        rest = item
        if rest[:5] in ("gres:", "gres/") and len(_b(rest)) > 5:
            rest = rest[5:]
        parts = rest.split(":")
        n = len(parts)
        if not _NAME.fullmatch(parts[0]):
            return item
        if parts[0] != "gpu":
            continue
        if n == 1:
            count, typed = 1.0, False
        elif n == 2:
            if _DIGITS.fullmatch(parts[1]):
                count, typed = _to_count(parts[1]), False
            elif _NAME.fullmatch(parts[1]):
                count, typed = 1.0, True
            else:
                return item
        elif n == 3 and _NAME.fullmatch(parts[1]) and not _DIGITS.fullmatch(parts[1]) and _DIGITS.fullmatch(parts[2]):
            count, typed = _to_count(parts[2]), True
        else:
            return item
        g = _sat_mul(count, mult)
        acc.total = _sat_add(acc.total, g)
        if not typed:
            acc.untyped = _sat_add(acc.untyped, g)
    return None


def gpu_request(job: Mapping[str, Any]) -> tuple[_Gpus, str | None, str | None]:
    """GPUs the job asks for (see engine.lua's gpu_request for the rules); (acc, bad item, field)."""
    acc = _Gpus()
    nodes = _valid_count(job.get("min_nodes"), NO_VAL) or 1.0
    sockets = _valid_count(job.get("sockets_per_node"), NO_VAL16) or 1.0
    tasks = _valid_count(job.get("num_tasks"), NO_VAL)
    if tasks is None:
        per_node = _valid_count(job.get("ntasks_per_node"), NO_VAL16)
        tasks = _sat_mul(per_node, nodes) if per_node is not None else nodes
    bad = _add_gpus(job.get("tres_per_job"), 1.0, acc)
    if bad is not None:
        return acc, bad, "tres_per_job"
    node_field, node_value = "tres_per_node", job.get("tres_per_node")
    if node_value is None or node_value == "":
        node_field, node_value = "gres", job.get("gres")
    bad = _add_gpus(node_value, nodes, acc)
    if bad is not None:
        return acc, bad, node_field
    bad = _add_gpus(job.get("tres_per_socket"), _sat_mul(sockets, nodes), acc)
    if bad is not None:
        return acc, bad, "tres_per_socket"
    bad = _add_gpus(job.get("tres_per_task"), tasks, acc)
    if bad is not None:
        return acc, bad, "tres_per_task"
    return acc, None, None


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

    def _partitions_of(self, job: Mapping[str, Any]) -> list[str]:
        p = job.get("partition")
        names = [n for n in p.split(",") if n] if isinstance(p, str) else []
        if not names and self.policy.default_partition:
            names = [self.policy.default_partition]
        return names

    @staticmethod
    def _reject(rc: int, rule: str, msg: str) -> Verdict:
        return Verdict(rc, rule, f"gpuclust policy [{rule}]: {msg}")

    def submit(self, job: Mapping[str, Any]) -> Verdict:
        """The verdict of slurm_job_submit for this job_desc."""
        pol = self.policy
        user = job.get("user_name")
        account = _nonempty(job.get("account"))
        eff_account = account or _nonempty(job.get("default_account"))
        if (isinstance(user, str) and user in pol.exempt_users) or (eff_account and eff_account in pol.exempt_accounts):
            return Verdict(RC_OK, "exempt", None)
        if pol.need_account and not account:
            return self._reject(RC_INVALID_ACCOUNT, "account_missing", "no account given; add --account=<account> (sbatch -A)")
        gpus, bad, field = gpu_request(job)
        if bad is not None:
            return self._reject(RC_INVALID_GRES, "gres_syntax",
                                f"cannot parse GPU request '{shown(bad)}' in {field}; use --gres=gpu:<type>:<count> or --gpus=<type>:<count>")
        if pol.labels:
            found = labels_of(job.get("comment"), self._label_keys)
            for label, regexes, exact in zip(pol.labels, self._label_regexes, self._label_exact, strict=True):
                value = found.get(label.key)
                if value is None:
                    return self._reject(RC_ERROR, "label_missing",
                                        f"--comment must contain {label.key}=<value> (allowed: {label.allowed})")
                if not label.any_value and value not in exact and not any(r.fullmatch(value) for r in regexes):
                    text = _UNPRINTABLE.sub(b"?", value[:40]).decode("ascii")
                    return self._reject(RC_ERROR, "label_value",
                                        f"{label.key}={text} is not allowed; use {label.key}=<one of: {label.allowed}> in --comment")
        parts = self._partitions_of(job)
        typed_limits = False
        for name in parts:
            pr = pol.partitions.get(name)
            if pr is None:
                continue
            if pr.allowed_accounts is not None and not (eff_account and eff_account in pr.allowed_accounts):
                who = shown(eff_account) if eff_account else "(none)"
                return self._reject(RC_INVALID_ACCOUNT, "partition_account",
                                    f"account {who} may not use partition {pr.name}; use --account with one of: {pr.allowed_accounts_str}")
            if pr.need_wckey and not _nonempty(job.get("wckey")):
                return self._reject(RC_ERROR, "partition_wckey", f"partition {pr.name} needs a workload key; add --wckey=<key>")
            if pr.need_gpu and gpus.total == 0:
                return self._reject(RC_ERROR, "partition_gpu",
                                    f"partition {pr.name} is for GPU jobs; request GPUs with --gres=gpu:<type>:<count> or --gpus=<type>:<count>")
            if pr.need_typed_gpu and gpus.untyped > 0:
                return self._reject(RC_INVALID_GRES, "partition_typed_gpu",
                                    f"partition {pr.name} needs typed GPU requests; use --gres=gpu:<type>:<count> instead of gpu:<count>")
            if pr.max_gpus is not None and gpus.total > pr.max_gpus:
                return self._reject(RC_ERROR, "partition_max_gpus",
                                    f"job asks for {_fmt_int(gpus.total)} GPUs; partition {pr.name} allows at most {pr.max_gpus} per job")
            t = _num(job.get("time_limit"))
            if (pr.max_time_s is not None and t is not None and t != NO_VAL and (math.isinf(t) or t.is_integer())
                    and t * 60 > pr.max_time_s):
                asked = f"{_fmt_int(t)} min" if t < NO_VAL else "UNLIMITED"
                return self._reject(RC_INVALID_TIME_LIMIT, "partition_max_time",
                                    f"time limit {asked} exceeds partition {pr.name} max_time {pr.max_time_str}; "
                                    f"use --time={pr.max_time_str} or less")
            if pr.typed_limits:
                typed_limits = True
        ar = pol.accounts.get(eff_account) if eff_account else None
        if ar is not None:
            if ar.allowed_partitions is not None:
                for name in parts:
                    if name not in ar.allowed_partitions:
                        return self._reject(RC_ERROR, "account_partition",
                                            f"account {ar.name} may not use partition {shown(name)}; use --partition with one of: {ar.allowed_partitions_str}")
            if ar.max_gpus is not None and gpus.total > ar.max_gpus:
                return self._reject(RC_ERROR, "account_max_gpus",
                                    f"job asks for {_fmt_int(gpus.total)} GPUs; account {ar.name} allows at most {ar.max_gpus} per job")
            if ar.typed_limits:
                typed_limits = True
        qos = _nonempty(job.get("qos")) or _nonempty(job.get("default_qos"))
        if qos and qos in pol.qos_typed:
            typed_limits = True
        if pol.reject_untyped and typed_limits and gpus.untyped > 0:
            return self._reject(RC_INVALID_GRES, "untyped_gpu",
                                "typed GPU limits apply to this job and Slurm does not count untyped requests against them; "
                                "use --gres=gpu:<type>:<count>")
        return Verdict(RC_OK, "ok", None)

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
