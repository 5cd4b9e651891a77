"""The usage-TRES rules of `usage` (its module docstring says what each rule and column is) in plain Python, with
no numpy or pyarrow: the release rules, the unit tables, one value and one TRES list parsed, and `rollup`, one
execution's steps rolled up to its figures. `usage.add_usage_columns` is the vectorised form of `rollup` for a whole dump;
`gpuclust job` (figures/jobview.py), which must start without numpy, calls `rollup` for a few jobs.
tests/unit/test_usage_rules_equivalence.py holds the two equal on recorded and generated dumps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RULE_SUMMED = "summed"
RULE_LAST_GPU = "last-gpu"
RULES_OUT = (RULE_SUMMED, RULE_LAST_GPU)
GATHERED_SINCE = (23, 2, 0)
LAST_GPU_RELEASES = ((23, 11, 0), (24, 5, 0))  # inclusive

COUNT_UNIT = {"": 1.0, "K": 1024.0, "M": 1024.0**2, "G": 1024.0**3, "T": 1024.0**4, "P": 1024.0**5}
MEM_UNIT_MIB = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}
NUMBER = r"[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
# (RE2's `\s`, spelled out: Python's would also take \v and Unicode spaces. Patterns here are shared with
# pyarrow's RE2; Python matches them with fullmatch, as its `$` also matches before a final newline.)
_SPACE = r"\t\n\f\r "
ENTRY_SYNTAX = re.compile(rf"^(?:[^,={_SPACE}]+=[^,={_SPACE}]*(?:,[^,={_SPACE}]+=[^,={_SPACE}]*)*)?$")
CLOCK = r"^(?:(?P<d>[0-9]+)-)?(?:(?P<h>[0-9]+):)?(?P<m>[0-9]+):(?P<s>[0-9]+(?:\.[0-9]+)?)$"
_NUMBER_RE = re.compile(f"^{NUMBER}$")
_SUFFIXED_RE = re.compile(f"^(?P<n>{NUMBER})(?P<u>[KMGTP]?)$")
_CLOCK_RE = re.compile(CLOCK)


def parse_release(version: str | None) -> tuple[int, int, int] | None:
    """`slurm-wlm 23.11.4`, `24.05`, `slurm 24.05.1-1` -> (major, minor, micro); micro 0 when not given."""
    if not version:
        return None
    m = re.match(r"^\s*(?:slurm(?:-wlm)?\s+)?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", version)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def rule_for_version(version: str | None) -> str | None:
    """The gres/gpuutil rule of a Slurm release (usage's RULES); None when the version is not known. A release
    without a micro number (`24.05`) is taken as its .0."""
    release = parse_release(version)
    if release is None:
        return None
    first, last = LAST_GPU_RELEASES
    return RULE_LAST_GPU if first <= release <= last else RULE_SUMMED


def check_slurm_version(version: str | None) -> str | None:
    """`report build --slurm-version`: a release such as 23.11 or 24.05.3 (InputError otherwise)."""
    from gpuclust.errors import InputError

    if version is not None and rule_for_version(version) is None:
        raise InputError(f"{version!r} is not a Slurm release (e.g. 23.11, 24.05.3)")
    return version


# ---- one value (None: not that form) -------------------------------------------------------------------------

def number(text: str) -> float | None:
    """A plain number (`usage.numbers`)."""
    return float(text) if _NUMBER_RE.fullmatch(text) else None


def suffixed(text: str, scale: Mapping[str, float]) -> float | None:
    """`<number><K|M|G|T|P>?` -> number x scale[suffix] (`usage.counts`, `usage.sizes_mib`)."""
    m = _SUFFIXED_RE.fullmatch(text)
    return float(m.group("n")) * scale[m.group("u")] if m else None


def clock(text: str) -> float | None:
    """`[D-][HH:]MM:SS[.mmm]` -> seconds (`usage.clock_seconds`)."""
    m = _CLOCK_RE.fullmatch(text)
    if not m:
        return None
    d, h, mi, s = m.groups()
    return int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi) * 60 + float(s)


def tres_value(text: str, key: str) -> str | None:
    """The value text of `key` in a TRES list: its first entry's (`tres_values.extract_regex`); None: absent."""
    m = re.search(r"(?:^|,)" + re.escape(key) + r"=([^,]*)", text)
    return m.group(1) if m else None


def parse_usage(text: str) -> dict[str, float]:
    """One usage TRES string -> {name: value} (cpu in seconds, mem/vmem/gres/gpumem in MiB, others as
    printed). ValueError names a bad list or entry."""
    if not ENTRY_SYNTAX.fullmatch(text):
        raise ValueError(f"not a TRES list (name=value,...): {text!r:.80}")
    out: dict[str, float] = {}
    for entry in filter(None, text.split(",")):
        name, _, value = entry.partition("=")
        if name == "cpu":
            got = clock(value) if ":" in value else number(value)
        elif name in ("mem", "vmem", "gres/gpumem"):
            got = suffixed(value, MEM_UNIT_MIB)
        else:
            got = suffixed(value, COUNT_UNIT)
        if got is None:
            raise ValueError(f"{name}={value!r} is not a number")
        out[name] = got
    return out


# ---- one execution's rollup ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class UsageRow:
    """One sacct row of an execution (its job row or a step) as `rollup` reads it: its usage fields' text as
    printed ('' where empty or absent), its own GPUs (AllocTRES gres/gpu) and Elapsed seconds."""

    line: int | str
    is_step: bool
    gpus: float
    elapsed_s: float
    ave: str = ""
    max: str = ""
    tot: str = ""
    energy: str = ""  # ConsumedEnergyRaw


@dataclass
class UsageFigures:
    """`usage.COLUMNS` of one execution (None: no figure), the warnings `usage.add_usage_columns` gives on its rows (the
    same text), and `problem`: the first of them that makes its utilisation unknown although a step recorded
    some."""

    gpu_util_gpu_s: float | None = None
    gpu_busy_gpu_s: float | None = None
    gpu_util_max_pct: float | None = None
    gpu_mem_max_mb: float | None = None
    cpu_used_s: float | None = None
    mem_max_mb: float | None = None
    energy_j: float | None = None
    rule: str | None = None
    problem: str | None = None
    warnings: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # those of `warnings` about a list or value not read


_KIND = {"count": lambda v: suffixed(v, COUNT_UNIT), "size": lambda v: suffixed(v, MEM_UNIT_MIB), "clock": clock}


def _read(name: str, text: str, key: str, kind: str, bad: list[str]) -> float | None:
    value = tres_value(text, key)
    if value is None:
        return None
    got = _KIND[kind](value)
    if got is None:
        bad.append(f"{name} {key}={value!r} is not a value")
    return got


def _peak(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _add(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else a + b


def rollup(rows: Sequence[UsageRow], job_gpus: float, job_elapsed_s: float, rule: str | None,
           source: str) -> UsageFigures:
    """`usage.add_usage_columns` for one execution: its rows (job row first, then its steps) summed and maxed into its
    figures by the rule of the Slurm that wrote them (usage's RULES); `job_gpus` and `job_elapsed_s` are its job
    row's. Bad values count as none, with a warning; an unusable utilisation makes the job's unknown."""
    out = UsageFigures()
    # The warnings by usage's order: malformed lists, bad values, then utilisation (each of its rows in order).
    lists: list[str] = []
    values: list[str] = []
    util_warnings: dict[str, list[str]] = {"absurd": [], "ambiguous": [], "last_gpu": [], "gpuless": []}
    busy: float | None = None
    peak_pct: float | None = None
    has_util = spoiled = last_gpu_seen = False
    step_energy: float | None = None
    own_energy: float | None = None
    for row in rows:
        where = f"{source}:{row.line}: "
        if not (row.ave or row.max or row.tot or row.energy):
            continue
        # (each column's reads in usage's order: Ave, Max, Tot gres/gpuutil, Max gres/gpumem, Tot cpu, Max mem)
        bad: dict[str, list[str]] = {k: [] for k in ("ave_util", "max_util", "tot_util", "gmem", "cpu", "mem")}
        util_max = _read("TRESUsageInMax", row.max, "gres/gpuutil", "count", bad["max_util"])
        util_tot = _read("TRESUsageInTot", row.tot, "gres/gpuutil", "count", bad["tot_util"])
        util_ave = None
        checked = {"TRESUsageInMax": row.max, "TRESUsageInTot": row.tot}
        if util_tot is None:  # (Ave is read only where Tot has no gres/gpuutil)
            util_ave = _read("TRESUsageInAve", row.ave, "gres/gpuutil", "count", bad["ave_util"])
            checked["TRESUsageInAve"] = row.ave
        for name in sorted(checked):
            if not ENTRY_SYNTAX.fullmatch(checked[name]):
                lists.append(f"{where}{name} {checked[name]!r:.80} is not a TRES list")
        gmem = _read("TRESUsageInMax", row.max, "gres/gpumem", "size", bad["gmem"])
        cpu = _read("TRESUsageInTot", row.tot, "cpu", "clock", bad["cpu"])
        mem = _read("TRESUsageInMax", row.max, "mem", "size", bad["mem"])
        values.extend(where + w for ws in bad.values() for w in ws)
        out.gpu_mem_max_mb = _peak(out.gpu_mem_max_mb, gmem if gmem is None or gmem >= 0 else None)
        out.cpu_used_s = _add(out.cpu_used_s, cpu)
        out.mem_max_mb = _peak(out.mem_max_mb, mem)
        energy = number(row.energy) if row.energy else None
        if energy is not None and energy > 0:  # (0 J: Slurm's "not gathered")
            if row.is_step:
                step_energy = _add(step_energy, energy)
            else:
                own_energy = energy
        if util_ave is None and util_tot is None:
            continue
        has_util = True
        gpus = row.gpus
        total = util_tot if util_tot is not None else util_ave
        assert total is not None
        per_gpu = total / max(gpus, 1)
        peak = per_gpu if util_max is None else max(util_max / max(gpus, 1), per_gpu)
        last_gpu = rule == RULE_LAST_GPU
        evidence = max(-1 if util_max is None else util_max, -1 if util_tot is None else util_tot) > 100
        ambiguous = rule is None and gpus > 1 and not evidence
        absurd = not last_gpu and not (0 <= per_gpu <= 100 and 0 <= peak <= 100)
        gpuless = not last_gpu and not absurd and gpus <= 0
        if absurd:
            util_warnings["absurd"].append(f"{where}gres/gpuutil reads {per_gpu:.6g}% per GPU (outside 0-100; "
                                           f"rule {RULE_SUMMED})")
        if ambiguous:
            util_warnings["ambiguous"].append(
                f"{where}gres/gpuutil of a step on several GPUs, and the Slurm version that wrote it is not known "
                "(23.11.0-24.05.0 recorded only the node's last GPU, other releases the sum): pass --slurm-version")
        if last_gpu:
            util_warnings["last_gpu"].append(
                f"{where}gres/gpuutil from Slurm 23.11.0-24.05.0, which recorded only the node's last GPU (fixed in "
                "24.05.1): utilisation unknown")
            last_gpu_seen = True
        if gpuless:
            util_warnings["gpuless"].append(f"{where}gres/gpuutil on a step with no gres/gpu in its AllocTRES: its "
                                            "GPUs, so its utilisation, unknown")
        if out.problem is None:  # (why the job's utilisation is unknown, in the order a reader looks for it)
            out.problem = next((ws[-1] for flag, ws in (
                (last_gpu, util_warnings["last_gpu"]), (ambiguous, util_warnings["ambiguous"]),
                (absurd, util_warnings["absurd"]), (gpuless, util_warnings["gpuless"])) if flag), None)
        if last_gpu or ambiguous or absurd or gpuless:
            spoiled = True
            continue
        busy = _add(busy, per_gpu / 100 * gpus * row.elapsed_s)
        peak_pct = _peak(peak_pct, peak)
    out.energy_j = own_energy if own_energy is not None else step_energy  # the job row's own figure wins
    if has_util and not spoiled:
        out.rule = RULE_SUMMED
        out.gpu_util_gpu_s = job_gpus * job_elapsed_s
        # Busy GPU-seconds never exceed the job's own GPU-seconds (overlapping steps on the same GPUs).
        out.gpu_busy_gpu_s = None if busy is None else min(busy, out.gpu_util_gpu_s)
        out.gpu_util_max_pct = peak_pct
    elif last_gpu_seen:
        out.rule = RULE_LAST_GPU  # says why the figure is unknown
    out.unread = lists + values
    out.warnings = lists + values + [w for ws in util_warnings.values() for w in ws]
    return out
