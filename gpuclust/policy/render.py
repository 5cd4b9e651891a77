"""Render the compiled policy as Lua data tables in front of the fixed engine (engine.lua)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from gpuclust.policy.compile import CompiledPolicy
from gpuclust.policy.luastring import FORBIDDEN_WORDS, lua_string
from gpuclust.slurm.gpushare import A30_PROFILES, CARD_SLICES_DEFAULT, VALID_SLICES

__all__ = ["FORBIDDEN", "FORBIDDEN_WORDS", "SLURM_NAMES_22_05", "lint", "lua_string", "render_lua", "write_lua"]

# Forbidden in the rendered file: per-job I/O or forking inside slurmctld, and loading modules. Matched as plain
# substrings anywhere (code, comments, data), so a plain grep of the file agrees with the lint. No data reaches the
# file except through lua_string, which escapes the first byte of each of these words (every FORBIDDEN pattern
# needs one of them whole), so no config value can make the lint fail or spell code.
FORBIDDEN = (
    re.compile(r"io\."),
    re.compile(r"os\.execute"),
    re.compile(r"popen"),
    re.compile(r"require"),
    re.compile(r"\b(?:dofile|loadfile|loadstring|load|module|package)\b\s*[\(\.\"']"),
)

# The slurm.* names the engine may touch: all exist in 22.05's job_submit/lua (a missing name is nil).
SLURM_NAMES_22_05 = frozenset({
    "SUCCESS", "ERROR", "FAILURE", "NO_VAL", "NO_VAL16", "NO_VAL8", "NO_VAL64", "INFINITE64", "INFINITE",
    "ESLURM_ACCESS_DENIED", "ESLURM_ACCOUNTING_POLICY", "ESLURM_INVALID_ACCOUNT", "ESLURM_INVALID_LICENSES",
    "ESLURM_INVALID_NODE_COUNT", "ESLURM_INVALID_TIME_LIMIT", "ESLURM_JOB_MISSING_SIZE_SPECIFICATION",
    "ESLURM_MISSING_TIME_LIMIT", "log_user", "log_info", "log_verbose", "log_debug", "log_debug2", "log_debug3",
    "log_debug4", "log_error", "error", "log", "user_msg", "time_str2mins", "jobs", "reservations",
})


def engine_source() -> str:
    return resources.files("gpuclust.policy").joinpath("engine.lua").read_text(encoding="utf-8")


def _set(names: frozenset[str] | None) -> str:
    if names is None:
        return "nil"
    return "{" + ", ".join(f"[{lua_string(n)}] = true" for n in sorted(names)) + "}"


def _list(values: Iterable[str | bytes]) -> str:
    return "{" + ", ".join(lua_string(v) for v in values) + "}"


def _opt_num(value: int | None) -> str:
    return "nil" if value is None else str(int(value))


def _float(value: int | None) -> str:
    """An integer as a Lua float literal: GPU units stay floats under Lua 5.3+ (no integer wrap-around)."""
    return "nil" if value is None else f"{int(value)}.0"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def render_tables(policy: CompiledPolicy) -> str:
    lines = ["local POLICY = {"]
    lines.append(f"  source = {lua_string(policy.source)},")
    lines.append(f"  fail_mode = {lua_string(policy.fail_mode)},")
    lines.append(f"  need_account = {_bool(policy.need_account)},")
    dp = lua_string(policy.default_partition) if policy.default_partition else "nil"
    lines.append(f"  default_partition = {dp},")
    lines.append(f"  reject_untyped = {_bool(policy.reject_untyped)},")
    lines.append(f"  exempt_users = {_set(policy.exempt_users)},")
    lines.append(f"  exempt_accounts = {_set(policy.exempt_accounts)},")
    lines.append(f"  qos_typed = {_set(policy.qos_typed)},")
    lines.append(f"  has_qos_typed = {_bool(bool(policy.qos_typed))},")
    lines.append("  warn = {" + ", ".join(f"[{lua_string(r)}] = {lua_string(w)}" for r, w in sorted(policy.warn.items())) + "},")
    lines.append(f"  count_eq = {_bool(policy.count_eq)}, need_amounts = {_bool(policy.need_amounts)}, "
                 f"unit = {_float(policy.unit)}, mps_units = {_float(policy.mps_units)},")
    lines.append("  share_units = {" + ", ".join(f"[{lua_string(n)}] = {_float(u)}" for n, u in sorted(policy.share_units.items()))
                 + "},")
    # gpuclust.slurm.gpushare's MIG facts, for the engine's type_units
    lines.append(f"  card_slices = {CARD_SLICES_DEFAULT}, a30_slices = 4, a30_profiles = {_set(A30_PROFILES)},")
    lines.append("  valid_slices = {" + ", ".join(
        f"[{card}] = {{{', '.join(f'[{n}] = true' for n in sorted(VALID_SLICES[card]))}}}" for card in sorted(VALID_SLICES))
        + "},")
    lines.append("  labels = {")
    for label in policy.labels:
        g = label.glob_checks
        lines.append(
            f"    {{ key = {lua_string(label.key)}, key_eq = {lua_string(label.key + '=')}, any = {_bool(label.any_value)}, "
            f"exact = {_set(label.exact)}, patterns = {_list(label.lua_patterns)}, allowed = {lua_string(label.allowed)},\n"
            f"      has_exact = {_bool(bool(label.exact))}, any_glob = {_bool(g.any)}, wild = {_list(g.wild)},\n"
            f"      globs_first = {_bool(label.globs_first)}, lead = {_list(g.lead)}, suffix = {_list(g.suffix)},\n"
            f"      first_byte = {_bool(bool(g.by_first))}, "
            f"by_first = {{{', '.join(f'[{b}] = {_list(p)}' for b, p in g.by_first.items())}}} }},")
    lines.append("  },")
    lines.append("  partitions = {")
    for name in sorted(policy.partitions):
        p = policy.partitions[name]
        lines.append(
            f"    [{lua_string(name)}] = {{ name = {lua_string(name)}, need_gpu = {_bool(p.need_gpu)}, "
            f"need_typed_gpu = {_bool(p.need_typed_gpu)}, need_wckey = {_bool(p.need_wckey)}, "
            f"max_gpus = {_opt_num(p.max_gpus)}, gpus_per_node = {_opt_num(p.gpus_per_node)}, max_time_s = {_opt_num(p.max_time_s)}, "
            f"max_time_str = {lua_string(p.max_time_str) if p.max_time_str else 'nil'}, "
            f"allowed_accounts = {_set(p.allowed_accounts)}, allowed_accounts_str = {lua_string(p.allowed_accounts_str)}, "
            f"typed_limits = {_bool(p.typed_limits)}, gpu_types = {_set(p.gpu_types)}, "
            f"gpu_types_str = {lua_string(p.gpu_types_str)}, shard_units = {_float(p.shard_units)}, "
            f"max_cpus_per_gpu = {_opt_num(p.max_cpus_per_gpu)}, max_mem_per_gpu = {_opt_num(p.max_mem_per_gpu)}, "
            f"allowed_qos = {_set(p.allowed_qos)}, allowed_qos_str = {lua_string(p.allowed_qos_str)}, "
            f"need_qos = {_bool(p.need_qos)} }},"
        )
    lines.append("  },")
    lines.append("  accounts = {")
    for name in sorted(policy.accounts):
        a = policy.accounts[name]
        lines.append(
            f"    [{lua_string(name)}] = {{ name = {lua_string(name)}, allowed_partitions = {_set(a.allowed_partitions)}, "
            f"allowed_partitions_str = {lua_string(a.allowed_partitions_str)}, max_gpus = {_opt_num(a.max_gpus)}, "
            f"typed_limits = {_bool(a.typed_limits)} }},"
        )
    lines.append("  },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_lua(policy: CompiledPolicy) -> str:
    """The complete job_submit.lua. Deterministic (no dates), so a committed copy can be checked for staleness by
    re-rendering. The header holds no data at all: the config's name goes into POLICY.source through lua_string."""
    header = (
        "-- job_submit.lua generated by `gpuclust policy render` from the site config named in POLICY.source.\n"
        "-- Do not edit: change the site config's [policy], [partition], [account] and [qos] sections and re-render.\n"
        f"-- Policy size: {len(policy.accounts)} accounts, {len(policy.partitions)} partitions, {policy.rule_count} rules.\n\n"
    )
    text = header + render_tables(policy) + "\n" + engine_source()
    problems = lint(text)
    if problems:  # a bug in gpuclust, never the user's input: every datum is a lua_string literal
        raise AssertionError("rendered job_submit.lua failed its lint: " + "; ".join(problems))
    return text


def lint(text: str) -> list[str]:
    """Problems that make a job_submit.lua unfit for slurmctld (see FORBIDDEN and SLURM_NAMES_22_05)."""
    problems = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        for pattern in FORBIDDEN:
            if pattern.search(line):
                problems.append(f"line {lineno}: forbidden {pattern.pattern!r}")
        for name in re.findall(r"\bslurm\.([A-Za-z_][A-Za-z0-9_]*)", line):
            if name not in SLURM_NAMES_22_05:
                problems.append(f"line {lineno}: slurm.{name} does not exist in Slurm 22.05 (it would read as nil)")
    return problems


def write_lua(policy: CompiledPolicy, out: str | Path, lua: str = "5.1") -> Path:
    """Render, validate under Lua `lua` (the one slurmctld links) and atomically install (see gpuclust.policy.install)."""
    from gpuclust.policy.install import install_lua

    return install_lua(render_lua(policy), out, lua)
