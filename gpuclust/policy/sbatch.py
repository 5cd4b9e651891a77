"""sbatch command line / batch script -> the job_desc fields slurmctld hands job_submit.lua, read as sbatch reads them.

Grammar (checked against the real sbatch, tests/data/policy/sbatch-grammar-<version>.json):
- one table per Slurm release (gpuclust/policy/sbatch_options/<release>.json, 22.05 to 26.05), generated from that
  release's source by scripts/gen-sbatch-options: sbatch's own getopt_long table (slurm_opt.c), how the release
  builds job_desc (Profile) and the option conflicts it refuses, with its own message (Rule); the tables of the
  releases the lab runs equal what probing the binary recorded (tests/data/policy/record_sbatch_options.py);
- glibc getopt_long with "+" ordering: short clusters (`-HN2`, `-N 2`), `--opt=value` / `--opt value` for required
  arguments, optional arguments only with `=`, unique prefixes of long options (ambiguous -> refused, unless every
  match is an alias), `--` ends the options, and the first non-option is the script: what follows is its arguments;
- #SBATCH (and #SLURM) lines, at column 0, read until the first line that is not blank and not a comment, split the
  way sbatch's get_argument splits (quotes, backslash, `#` starts a comment); script options first, then the
  command line's, so the command line wins;
- the script is handled as bytes: sbatch's own refusals (empty, no #!, NUL, DOS line breaks) are reported with the
  line, and a non-UTF-8 byte is just a byte (values are decoded per option, invalid bytes replaced).
Values of the options the policy reads are checked as sbatch checks them (node counts, task counts, time, GPU
specifications); other options are taken with their arity and not interpreted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from gpuclust.errors import InputError, Problem

NO_VAL = 4294967294
NO_VAL16 = 65534
INFINITE = 4294967295
DEFAULT_VERSION = "22.05"
_TABLES = Path(__file__).resolve().parent / "sbatch_options"
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


class SbatchRefusal(InputError):
    """sbatch (or its option table) would refuse this command line or script: exit 2, naming the option."""


# ---------------------------------------------------------------------------------------------------------------
# option tables


@dataclass(frozen=True)
class Rule:
    """An option conflict the release refuses (sbatch's fatal/error), read from its source by gen-sbatch-options.

    groups: option names, `NAME~TEXT` meaning NAME given with a value that (as sbatch holds it: --gres with its
    gres prefix) contains TEXT, case-insensitively; the rule fires when options of two or more groups are given.
    """
    id: str
    message: str
    groups: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Profile:
    """How one Slurm release builds job_desc from the options (markers in its source, see gen-sbatch-options)."""
    gres_prefix: str            # 22.05/23.02 `gres:`, 23.11+ `gres/`
    tres_per_task_eq: bool      # 23.11+: tres_per_task is `cpu=4,gres/gpu:h100=1`
    ntasks_from_per_node: bool  # 22.05: --ntasks-per-node x -N sets num_tasks
    escaped_space: bool         # 24.05+: `\ ` in an #SBATCH line is a space inside the word (earlier: ends it)
    min_nodes_from_ntasks: bool = False   # 23.11+: -n with --ntasks-per-node sets min_nodes
    cpus_per_gpu_needs_gpu: bool = False  # 23.02+: --cpus-per-gpu without any GPU request is refused


@dataclass(frozen=True)
class OptionTable:
    """One release's sbatch options (sbatch_options/<release>.json): getopt's tables, its Profile and Rules."""

    version: str
    has_arg: Mapping[str, str]          # long name -> none/required/optional
    key: Mapping[str, str]              # long name -> canonical name (aliases share one)
    short: Mapping[str, tuple[str, str | None]]  # letter -> (has_arg, long name)
    profile: Profile = Profile("gres:", False, True, False)
    rules: tuple[Rule, ...] = ()
    slurm_version: str = ""             # the point release the table was read from
    source: Mapping[str, Any] = field(default_factory=dict)  # tag, commit, blob sha of each file read


def known_versions() -> list[str]:
    return sorted(p.stem for p in _TABLES.glob("*.json"))


def version_key(version: str) -> str:
    """'22.05.8' / 'slurm-wlm 22.05.8' / '22.05' -> '22.05' (that release's table); any other release is refused."""
    m = re.search(r"(\d+)\.(\d+)", version)
    if not m:
        raise InputError(Problem("--slurm-version", None,
                                 f"not a Slurm version: {version!r} (expected a release such as 24.11 or 24.11.5); give "
                                 "one, e.g. --slurm-version 24.11"))
    key = f"{int(m.group(1)):02d}.{int(m.group(2)):02d}"
    if key not in known_versions():
        raise InputError(Problem("--slurm-version", None,
                                 f"Slurm {key} is not a release policy check knows (supported: "
                                 f"{', '.join(known_versions())}); pass one of those, or generate its table with "
                                 "scripts/gen-sbatch-options"))
    return key


def table_for(detected: str) -> str:
    """The recorded table to use for a detected release: its own, else the newest older one, else the oldest."""
    m = re.search(r"(\d+)\.(\d+)", detected)
    have = known_versions()
    if not m:
        return DEFAULT_VERSION
    want = (int(m.group(1)), int(m.group(2)))
    older = [v for v in have if tuple(int(x) for x in v.split(".")) <= want]
    return older[-1] if older else have[0]


@cache
def option_table(version: str = DEFAULT_VERSION) -> OptionTable:
    key = version_key(version)
    path = _TABLES / f"{key}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    has_arg = {o["name"]: o["has_arg"] for o in data["long"]}
    canon: dict[str, str] = {}
    for o in data["long"]:
        group = sorted({o["name"], *o["aliases"]})
        canon[o["name"]] = group[0]
    # the letter and its long option are one getopt val
    short = {s["letter"]: (s["has_arg"], s["long"]) for s in data["short"]}
    try:
        prof = Profile(**data["profile"])
        rules = tuple(Rule(r["id"], r["message"], tuple(tuple(g) for g in r["groups"])) for r in data["rules"])
    except (KeyError, TypeError) as exc:
        raise InputError(Problem(str(path), None, f"not a table written by scripts/gen-sbatch-options ({exc}); "
                                                  "regenerate it")) from None
    return OptionTable(key, has_arg, canon, short, prof, rules, data.get("slurm_version", key),
                       data.get("source", {}))


# ---------------------------------------------------------------------------------------------------------------
# getopt_long ("+" ordering), as glibc does it


@dataclass
class Parsed:
    """What getopt read: the options in order, each with its value and where it came from, and the operands."""

    options: list[tuple[str, str | None, str]] = field(default_factory=list)  # (long name or -X, value, where)
    operands: list[str] = field(default_factory=list)                         # script and its arguments
    stop: int = 0                                                              # index of the first non-option


def getopt(args: Sequence[str], table: OptionTable, where: Callable[[int], str]) -> Parsed:
    """Parse like glibc getopt_long(argc, argv, "+...", longopts): stops at the first non-option or after `--`."""
    out = Parsed()
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        loc = where(i)
        if arg.startswith("--"):
            body = arg[2:]
            name, eq, value = body.partition("=")
            if name in table.has_arg:
                full = name
            else:
                matches = [o for o in table.has_arg if o.startswith(name)]
                if not matches:
                    raise SbatchRefusal(Problem(loc, None, f"unrecognized option '--{body}'"))
                kinds = {(table.key[m], table.has_arg[m]) for m in matches}
                if len(kinds) > 1:
                    raise SbatchRefusal(Problem(loc, None, f"option '--{body}' is ambiguous; possibilities: "
                                                           + " ".join(f"'--{m}'" for m in sorted(matches))))
                full = sorted(matches)[0]
            kind = table.has_arg[full]
            i += 1
            if kind == "none":
                if eq:
                    raise SbatchRefusal(Problem(loc, None, f"option '--{full}' doesn't allow an argument"))
                out.options.append((table.key[full], None, loc))
            elif kind == "optional":
                out.options.append((table.key[full], value if eq else None, loc))
            else:
                if not eq:
                    if i >= n:
                        raise SbatchRefusal(Problem(loc, None, f"option '--{full}' requires an argument"))
                    value = args[i]
                    i += 1
                out.options.append((table.key[full], value, loc))
            continue
        # a cluster of short options
        j = 1
        i += 1
        while j < len(arg):
            letter = arg[j]
            j += 1
            if letter not in table.short:
                raise SbatchRefusal(Problem(loc, None, f"invalid option -- '{letter}'"))
            kind, long_name = table.short[letter]
            name = table.key[long_name] if long_name else "-" + letter
            if kind == "none":
                out.options.append((name, None, loc))
                continue
            rest = arg[j:]
            if kind == "optional":
                out.options.append((name, rest or None, loc))
            elif rest:
                out.options.append((name, rest, loc))
            else:
                if i >= n:
                    raise SbatchRefusal(Problem(loc, None, f"option requires an argument -- '{letter}'"))
                out.options.append((name, args[i], loc))
                i += 1
            break
    out.stop = i
    out.operands = list(args[i:])
    return out


# ---------------------------------------------------------------------------------------------------------------
# batch scripts


def _isspace(ch: str) -> bool:
    return ch in " \t\n\v\f\r"


def check_script_bytes(data: bytes, source: str) -> None:
    """sbatch's own checks on a batch script (_get_script_buffer), with the line of the offending byte."""
    if not data:
        raise SbatchRefusal(Problem(source, None, "Batch script is empty!"))
    if all(_isspace(chr(b)) for b in data):
        raise SbatchRefusal(Problem(source, None, "Batch script contains only whitespace!"))
    if not data.startswith(b"#!"):
        raise SbatchRefusal(Problem(source, 1, "This does not look like a batch script. The first line must start "
                                               "with #! followed by the path to an interpreter."))
    if b"\0" in data:
        line = data[: data.index(b"\0")].count(b"\n") + 1
        raise SbatchRefusal(Problem(source, line, "the Slurm controller does not allow scripts that contain a NUL "
                                                  "character"))
    if b"\r\n" in data:
        line = data[: data.index(b"\r\n")].count(b"\n") + 1
        raise SbatchRefusal(Problem(source, line, "Batch script contains DOS line breaks (\\r\\n) instead of "
                                                  "expected UNIX line breaks (\\n)"))


def _get_argument(line: str, pos: int, source: str, lineno: int,
                  escaped_space: bool = False) -> tuple[str | None, int]:
    """sbatch's get_argument(): the next word from pos, or None (end of line, or a word that copied nothing)."""
    n = len(line)
    while pos < n and _isspace(line[pos]):
        pos += 1
    for sep in ("packjob", "hetjob"):
        end = pos + len(sep)
        if line[pos:end].lower() == sep and (end == n or _isspace(line[end])):
            raise SbatchRefusal(Problem(source, lineno, "heterogeneous job (hetjob separator): policy check "
                                                        "judges one job; check each component on its own"))
    if pos < n and line[pos] == ":":
        raise SbatchRefusal(Problem(source, lineno, f"Unexpected `:` in [{line}]"))
    if pos >= n:
        return None, pos
    chars: list[str] = []
    quoted = False
    q_char = ""
    escape = False
    while pos < n and (quoted or not _isspace(line[pos])) and line[pos] != "\n":
        ch = line[pos]
        if escape:
            escape = False
        elif ch == "\\":
            pos += 1
            if escaped_space and pos < n and line[pos] == " ":
                chars.append(" ")
                pos += 1
                continue
            escape = True
            continue
        elif quoted:
            if ch == q_char:
                quoted = False
                pos += 1
                continue
        elif ch in "\"'":
            quoted = True
            q_char = ch
            pos += 1
            continue
        elif ch == "#":
            break
        chars.append(ch)
        pos += 1
    if quoted:
        raise SbatchRefusal(Problem(source, lineno, f"Unmatched `{q_char}` in [{line}]"))
    return ("".join(chars) if chars else None), pos


def script_words(data: bytes | str, source: str = "<script>",
                 escaped_space: bool = False) -> list[tuple[str, int]]:
    """The #SBATCH words of a batch script with their line numbers (sbatch stops at the first command line).

    Works on bytes (a str is encoded as UTF-8); each word is decoded as UTF-8 with invalid bytes replaced.
    """
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    text = raw.decode("latin-1")  # one char per byte: sbatch's char-by-char view
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    words: list[tuple[str, int]] = []
    for lineno, line in enumerate(lines, start=1):
        if line.startswith("#SBATCH"):
            pos = len("#SBATCH")
        elif line.startswith("#SLURM"):
            pos = len("#SLURM")
        else:
            stripped = line.lstrip(" \t\n\v\f\r")
            if stripped and not stripped.startswith("#"):
                break
            continue
        while True:
            word, pos = _get_argument(line, pos, source, lineno, escaped_space)
            if word is None:
                break
            words.append((word.encode("latin-1").decode("utf-8", "replace"), lineno))
    return words


def script_options(text: bytes | str, source: str = "<script>") -> list[str]:
    """The #SBATCH option words of a batch script (without line numbers)."""
    return [w for w, _ in script_words(text, source)]


# ---------------------------------------------------------------------------------------------------------------
# values


def _strtol(text: str) -> tuple[int | None, str]:
    """C strtol(base 10): (value or None when no digits, leftover)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?\d+)", text)
    if not m:
        return None, text
    return int(m.group(1)), text[m.end():]


def slurm_time_minutes(text: str) -> int:
    """sbatch -t forms -> minutes, rounding seconds up as Slurm does; UNLIMITED/INFINITE -> INFINITE.

    minutes | minutes:seconds | hours:minutes:seconds | days-hours | days-hours:minutes | days-hours:minutes:seconds
    """
    raw = text.strip()
    if raw.upper() in ("UNLIMITED", "INFINITE", "-1"):
        return INFINITE
    match = _TIME.match(raw)
    if not match:
        raise ValueError(f"invalid time limit {text!r}")
    days, a, b, c = match.groups()
    seconds: int
    if days is not None:  # days-hours[:minutes[:seconds]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # h:m:s
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # m:s
        seconds = int(a) * 60 + int(b)
    else:
        seconds = int(a) * 60
    return (seconds + 59) // 60


def _parse_int(name: str, value: str, positive: bool, loc: str) -> int:
    """proc_args.c parse_int: the whole string a base-10 long, >= 0 (> 0 when positive)."""
    num, rest = _strtol(value)
    if num is None or rest != "" or num < 0 or (positive and num <= 0) or num >= 2**63 - 1:
        raise SbatchRefusal(Problem(loc, None, f'Invalid numeric value "{value}" for --{name}.'))
    return num & 0xFFFFFFFF if num > 2**31 - 1 else num


def _str_to_nodes(text: str) -> tuple[int, str]:
    num, rest = _strtol(text)
    if num is None:
        return -1, text
    if rest[:1] in ("k", "K"):
        num *= 1024
        rest = rest[1:]
    if rest[:1] in ("m", "M"):
        num *= 1024 * 1024
        rest = rest[1:]
    return num, rest


def _node_count(value: str, loc: str) -> tuple[int, int]:
    """proc_args.c verify_node_count: N or MIN-MAX; max 0 = unset."""
    if "-" in value:
        lo_s, _, hi_s = value.partition("-")
        lo, rest = _str_to_nodes(lo_s)
        if rest.strip(" \t\n\v\f\r"):
            raise SbatchRefusal(Problem(loc, None, f'"{lo_s}" is not a valid node count'))
        lo = 1 if lo < 0 else lo
        hi, rest = _str_to_nodes(hi_s)
        if rest.strip(" \t\n\v\f\r"):
            raise SbatchRefusal(Problem(loc, None, f'"{hi_s}" is not a valid node count'))
    else:
        lo, rest = _str_to_nodes(value)
        if rest.strip(" \t\n\v\f\r") or lo < 0:
            raise SbatchRefusal(Problem(loc, None, f'"{value}" is not a valid node count'))
        hi = lo
    if hi != 0 and hi < lo:
        raise SbatchRefusal(Problem(loc, None, f"Maximum node count {hi} is less than minimum node count {lo}"))
    return lo, hi


_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def _gres_number(tok: str) -> int | None:
    """gres.c _is_valid_number: strtoull + one size suffix; None when it is not a count."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?)(\d*)", tok)
    assert m is not None
    if not m.group(2):
        value, rest = 0, tok
    else:
        value, rest = int(m.group(2)), tok[m.end():]
        if m.group(1) == "-":
            value = (-value) % 2**64
    if value >= 2**64 - 1:
        return None
    mult = _SUFFIX.get(rest.lower())
    if mult is None:
        return None
    return (value * mult) % 2**64


@dataclass(frozen=True)
class GresItem:
    """One item of a `gres:NAME[:TYPE][:COUNT]` list, as gres.c reads it."""

    name: str
    type: str | None
    count: int


def parse_gres_list(spec: str, loc: str, gres_names: frozenset[str]) -> list[GresItem]:
    """gres.c _get_next_gres over a `gres:NAME[:TYPE][:COUNT],...` string (count 0 items are dropped)."""
    items: list[GresItem] = []
    rest = spec
    while rest:
        hits = [at for at in (rest.find("gres:"), rest.find("gres/")) if at >= 0]
        if not hits:
            break
        rest = rest[min(hits) + 5:]
        token, _, rest = rest.partition(",")
        if not token:
            continue
        gtype: str | None
        if "=" in token:  # 24.11 tres_per_task form: NAME[:TYPE]=COUNT
            name_type, _, count_s = token.partition("=")
            name, _, type_s = name_type.partition(":")
            count = _gres_number(count_s)
            if count is None or not name:
                raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification"))
            if count == 0:
                continue
            if name not in gres_names:
                raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification "
                                                       f"(no GRES named {name!r} on this cluster)"))
            items.append(GresItem(name, type_s or None, count))
            continue
        name, sep, tail = token.partition(":")
        if sep:
            first, sep2, second = tail.partition(":")
            if sep2:
                if not first or not second:
                    raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification"))
                gtype, count = first, _gres_number(second)
                if count is None:
                    raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification"))
            elif not first:
                raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification"))
            else:
                count = _gres_number(first)
                gtype = None if count is not None else first
                count = 1 if count is None else count
        else:
            gtype, count = None, 1
        if count == 0:
            continue
        if name not in gres_names:
            raise SbatchRefusal(Problem(loc, None, "Invalid generic resource (gres) specification "
                                                   f"(no GRES named {name!r} on this cluster)"))
        items.append(GresItem(name, gtype, count))
    return items


# ---------------------------------------------------------------------------------------------------------------
# options -> job_desc


@dataclass
class _Opts:
    """The options as sbatch holds them once applied (the script's, then the command line's): what _build reads."""

    loc: dict[str, str] = field(default_factory=dict)
    strings: dict[str, str] = field(default_factory=dict)
    min_nodes: int = 1
    max_nodes: int = 0
    nodes_set: bool = False
    ntasks: int = 1
    ntasks_set: bool = False
    ints: dict[str, int] = field(default_factory=dict)
    extra_set: bool = False
    wrap: str | None = None


_STRING_FIELDS = {"account": "account", "partition": "partition", "qos": "qos", "comment": "comment",
                  "wckey": "wckey", "job-name": "name"}
_INT_FIELDS = {"ntasks-per-node": ("ntasks_per_node", True), "tasks-per-node": ("ntasks_per_node", True),
               "ntasks-per-socket": ("ntasks_per_socket", True), "sockets-per-node": ("sockets_per_node", True),
               "cores-per-socket": ("cores_per_socket", True), "threads-per-core": ("threads_per_core", True),
               "cpus-per-task": ("cpus_per_task", True), "cpus-per-gpu": ("cpus_per_gpu", True),
               "ntasks-per-gpu": ("ntasks_per_gpu", True), "ntasks-per-tres": ("ntasks_per_tres", True)}
_GPU_FIELDS = {"gpus": "tres_per_job", "gpus-per-node": "tres_per_node", "gpus-per-task": "tres_per_task",
               "gpus-per-socket": "tres_per_socket"}


# job_desc.shared as sbatch sets it (alloc-probe-<version>.json): --exclusive[=user|mcs], --oversubscribe.
_EXCLUSIVE_SHARED = {"": 0, "user": 2, "mcs": 3}


def _apply(opts: _Opts, name: str, value: str | None, loc: str) -> None:
    opts.loc[name] = loc
    if name in _STRING_FIELDS and value is not None:
        opts.strings[name] = value
    elif name == "nodes" and value is not None:
        opts.min_nodes, opts.max_nodes = _node_count(value, loc)
        opts.nodes_set = True
    elif name == "ntasks" and value is not None:
        opts.ntasks = _parse_int("ntasks", value, True, loc)
        opts.ntasks_set = True
    elif name in _INT_FIELDS and value is not None:
        key, positive = _INT_FIELDS[name]
        opts.ints[key] = _parse_int(name, value, positive, loc)
    elif name == "extra-node-info" and value is not None:
        parts = value.split(":")
        if not 1 <= len(parts) <= 3:
            raise SbatchRefusal(Problem(loc, None, "Invalid --extra-node-info specification"))
        for key, part in zip(("sockets_per_node", "cores_per_socket", "threads_per_core"), parts, strict=False):
            num, rest = _strtol(part)
            if part in ("*", ""):
                continue
            if num is None or rest or num <= 0:
                raise SbatchRefusal(Problem(loc, None, "Invalid --extra-node-info specification"))
            opts.ints[key] = num
        opts.extra_set = True
    elif name == "time" and value is not None:
        try:
            opts.ints["time_limit"] = slurm_time_minutes(value)
        except ValueError:
            raise SbatchRefusal(Problem(loc, None, "Invalid --time specification")) from None
    elif name == "time-min" and value is not None:
        try:
            opts.ints["time_min"] = slurm_time_minutes(value)
        except ValueError:
            raise SbatchRefusal(Problem(loc, None, "Invalid --time-min specification")) from None
    elif name == "gres" and value is not None:
        opts.strings["gres"] = value
    elif name in _GPU_FIELDS and value is not None:
        opts.strings[name] = value
    elif name == "tres-per-task" and value is not None:
        opts.strings[name] = value
    elif name in ("mem", "mem-per-cpu") and value is not None:
        mb = _str_to_mbytes(value)
        if mb is None:
            raise SbatchRefusal(Problem(loc, None, f"Invalid --{name} specification"))
        opts.ints["mem_per_node" if name == "mem" else "mem_per_cpu"] = mb
    elif name == "mem-per-gpu" and value is not None:
        num, rest = _strtol(value)
        mult = {"": 1, "m": 1, "k": 0, "g": 1024, "t": 1024**2}.get(rest.lower())
        if num is None or num < 0 or mult is None:
            raise SbatchRefusal(Problem(loc, None, "invalid --mem-per-gpu argument"))
        opts.ints["mem_per_gpu"] = num * mult if mult else (num + 1023) // 1024
    elif name == "wrap" and value is not None:
        opts.wrap = value
    elif name == "nodelist" and value is not None:
        opts.strings["nodelist"] = value
        opts.strings.pop("nodefile", None)
    elif name == "nodefile" and value is not None:
        opts.strings["nodefile"] = value
    elif name == "hint" and value is not None:
        opts.strings["hint"] = value
    elif name == "exclusive":
        shared = _EXCLUSIVE_SHARED.get((value or "").lower())
        if shared is None:
            raise SbatchRefusal(Problem(loc, None, f"Invalid --exclusive specification {value!r}"))
        opts.ints["shared"] = shared
    elif name == "oversubscribe":
        opts.ints["shared"] = 1


def _wrap64(x: int) -> int:
    """x as a C long long after wrapping (two's complement)."""
    return (x + 2**63) % 2**64 - 2**63


def _str_to_mbytes(text: str) -> int | None:
    """src/common/proc_args.c str_to_mbytes (22.05; 24.11's refuses the same values, both measured on the lab by
    tests/integration/test_policy_shares_lab.py): strtoll, then nothing (MB), K (rounded up), M, G or T, each with
    an optional B (a bare B is refused); None where sbatch says `Invalid --mem specification`. The result is C's
    uint64 cast of a long long that may have wrapped ((LLONG_MAX + 1023) / 1024, 2^53 G)."""
    m = re.match(r"[ \t\n\v\f\r]*([+-]?[0-9]+)", text)
    if not m:
        return None
    value, rest = int(m.group(1)), text[m.end():]
    if value < 0 or value > 2**63 - 1:
        return None
    if rest == "":
        return value
    if rest[1:] not in ("", "B", "b"):
        return None
    unit = rest[0].lower()
    if unit == "k":
        x = _wrap64(value + 1023)
        return (abs(x) // 1024 * (1 if x >= 0 else -1)) % 2**64  # C division truncates toward zero
    mult = {"m": 1, "g": 1024, "t": 1024 * 1024}.get(unit)
    return None if mult is None else (value * mult) % 2**64


MEM_PER_CPU = 2**63  # slurm.h: the bit of pn_min_memory that makes it per CPU


def profile(version: str) -> Profile:
    """The job_desc profile of a release, from its table."""
    return option_table(version).profile


def _rule(table: OptionTable, rule_id: str) -> Rule | None:
    return next((r for r in table.rules if r.id == rule_id), None)


def _prefix(value: str, pre: str) -> str:
    """sbatch's gres_prepend_tres_type: every comma item gets the gres prefix unless it already has one."""
    return ",".join(item if item.startswith(("gres:", "gres/")) else pre + item for item in value.split(","))


def _xfmt_tres(value: str | None, pre: str) -> str | None:
    """slurm_opt.c xfmt_tres: `<prefix>gpu:` + each comma item of a --gpus* value (empty -> unset)."""
    if not value:
        return None
    return ",".join(pre + "gpu:" + item for item in value.split(","))


def _update_tres_per_task(cnt: int, name: str, current: str | None) -> str | None:
    """slurm_opt.c slurm_option_update_tres_per_task (24.11): put `name=cnt` first, or replace its count."""
    if not current or name.lower() not in current.lower():
        if cnt:
            return f"{name}={cnt},{current}" if current else f"{name}={cnt}"
        return current
    at = current.lower().index(name.lower())
    prefix = current[:at].rstrip(",") or None
    tail = current[at:]
    suffix = tail.split(",", 1)[1] if "," in tail else None
    parts = [p for p in (prefix, f"{name}={cnt}" if cnt else None, suffix) if p]
    return ",".join(parts) or None


def _count_hosts(expr: str, loc: str) -> int:
    """Distinct hosts in a Slurm hostlist expression (`node[1-4],gpu7`)."""
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError  # noqa: PLC0415

    try:
        return len(NodeSet(expr.replace("\n", ",").replace(" ", ",").strip(",")))
    except NodeSetParseError as exc:
        raise SbatchRefusal(Problem(loc, None, f"invalid hostlist {expr!r}: {exc}")) from None


def _given(opts: _Opts, name: str, pre: str) -> str | None:
    """Where option `name` (or `NAME~TEXT`: NAME with TEXT in its value, as sbatch holds it) was given, or None."""
    name, tilde, text = name.partition("~")
    loc = opts.loc.get(name)
    if loc is None or not tilde:
        return loc
    value = opts.strings.get(name) or ""
    if name == "gres" and value.lower() != "none":
        value = _prefix(value, pre)
    return loc if text.lower() in value.lower() else None


def _check_rules(opts: _Opts, table: OptionTable) -> None:
    """The release's option conflicts, in the order it checks them, each refused with the release's own message."""
    inline = {"tres_per_task_vs_gpus_per_task", "tres_per_task_vs_cpus_per_task"}
    for r in table.rules:
        if table.profile.tres_per_task_eq and r.id in inline:
            continue  # 23.11+: checked while tres_per_task is built (_tres_per_task_24), with the GPU type named
        hits = [loc for group in r.groups
                if (loc := next((at for n in group if (at := _given(opts, n, table.profile.gres_prefix))), None))]
        if len(hits) > 1:
            raise SbatchRefusal(Problem(hits[-1], None, r.message))


def _build(opts: _Opts, gres_names: frozenset[str], table: OptionTable,
           read_file: Callable[[str], bytes] | None = None) -> dict[str, Any]:
    prof = table.profile
    ints = opts.ints
    pre = prof.gres_prefix
    if opts.strings.get("hint", "").lower() == "nomultithread" and "threads_per_core" not in ints:
        ints["threads_per_core"] = 1
        opts.extra_set = True
    hosts = opts.strings.get("nodelist")
    if "nodefile" in opts.strings:
        path = opts.strings["nodefile"]
        loc = opts.loc.get("nodefile", "--nodefile")
        try:
            hosts = (read_file or (lambda p: Path(p).read_bytes()))(path).decode("utf-8", "replace")
        except OSError:
            raise SbatchRefusal(Problem(loc, None, "Invalid --nodefile node file")) from None
        if not hosts.strip():
            raise SbatchRefusal(Problem(loc, None, "Hostlist is empty! Invalid --nodefile node file"))
    if hosts and hosts.strip():
        count = _count_hosts(hosts, opts.loc.get("nodelist", opts.loc.get("nodefile", "--nodelist")))
        opts.min_nodes = max(count, opts.min_nodes) if opts.nodes_set else count
        opts.nodes_set = True
    # _opt_verify
    _check_rules(opts, table)
    if not prof.tres_per_task_eq and "tres-per-task" in opts.strings:
        # 23.02 _validate_tres_per_task: `cpu:N` in --tres-per-task is -c N (a -c as well was refused above)
        given = opts.strings["tres-per-task"]
        at = given.lower().find("cpu:")
        if at >= 0 and "cpus_per_task" not in ints:
            num, _ = _strtol(given[at + 4:])
            if not num or num <= 0:
                raise SbatchRefusal(Problem(opts.loc["tres-per-task"], None, f"Invalid --tres-per-task=cpu:{num or 0}"))
            ints["cpus_per_task"] = num
    if prof.ntasks_from_per_node and ints.get("ntasks_per_node", 0) > 0 and not opts.ntasks_set and (
            opts.max_nodes == 0 or opts.min_nodes == opts.max_nodes):
        opts.ntasks = opts.min_nodes * ints["ntasks_per_node"]
        opts.ntasks_set = True
    if (opts.nodes_set or opts.extra_set) and (opts.min_nodes == opts.max_nodes or opts.max_nodes == 0) \
            and not opts.ntasks_set:
        ntasks = max(opts.min_nodes, 1)
        for key in ("sockets_per_node", "cores_per_socket", "threads_per_core"):
            if key in ints:
                ntasks *= ints[key]
                opts.ntasks_set = True
        opts.ntasks = ntasks
    elif opts.nodes_set and opts.ntasks_set:
        if opts.ntasks < opts.max_nodes:
            opts.max_nodes = opts.ntasks
        if opts.ntasks < opts.min_nodes:
            opts.min_nodes = opts.max_nodes = opts.ntasks
    job: dict[str, Any] = {
        "min_nodes": NO_VAL, "max_nodes": NO_VAL, "num_tasks": NO_VAL, "ntasks_per_node": NO_VAL16,
        "sockets_per_node": NO_VAL16, "ntasks_per_socket": NO_VAL16, "cores_per_socket": NO_VAL16,
        "threads_per_core": NO_VAL16, "cpus_per_task": NO_VAL16, "ntasks_per_tres": NO_VAL16,
        "time_limit": NO_VAL, "time_min": NO_VAL, "shared": NO_VAL16,
    }
    for opt, fld in _STRING_FIELDS.items():
        if opt in opts.strings:
            job[fld] = opts.strings[opt]
    # slurm_opt_create_job_desc
    if opts.ntasks_set:
        job["num_tasks"] = opts.ntasks
    if opts.nodes_set:
        job["min_nodes"] = opts.min_nodes
        if opts.max_nodes:
            job["max_nodes"] = opts.max_nodes
    elif opts.ntasks_set and opts.ntasks == 0:
        job["min_nodes"] = 0
    elif prof.min_nodes_from_ntasks and opts.ntasks_set and "ntasks_per_node" in ints:
        per = ints["ntasks_per_node"]
        job["min_nodes"] = -(-opts.ntasks // per)
    for key in ("sockets_per_node", "cores_per_socket", "threads_per_core", "ntasks_per_node", "ntasks_per_socket",
                "cpus_per_task", "time_limit", "time_min", "shared"):
        if key in ints:
            job[key] = ints[key]
    if "ntasks_per_tres" in ints:
        job["ntasks_per_tres"] = ints["ntasks_per_tres"]
    elif "ntasks_per_gpu" in ints:
        job["ntasks_per_tres"] = ints["ntasks_per_gpu"]
    if "cpus_per_gpu" in ints:
        job["cpus_per_tres"] = f"{pre}gpu:{ints['cpus_per_gpu']}"
    if "mem_per_gpu" in ints:
        job["mem_per_tres"] = f"{pre}gpu:{ints['mem_per_gpu']}"
    # job_submit.lua reads pn_min_memory as min_mem_per_node / min_mem_per_cpu (nil when unset): sbatch sends --mem
    # as it is and --mem-per-cpu with MEM_PER_CPU set, so a --mem of 2^63 MB or more arrives per CPU (seen on 22.05 and 24.11)
    if "mem_per_node" in ints:
        mb = ints["mem_per_node"]
        job["min_mem_per_cpu" if mb & MEM_PER_CPU else "min_mem_per_node"] = mb & ~MEM_PER_CPU
    if "mem_per_cpu" in ints:
        job["min_mem_per_cpu"] = ints["mem_per_cpu"] & ~MEM_PER_CPU
    job["tres_per_job"] = _xfmt_tres(opts.strings.get("gpus"), pre)
    per_node = _xfmt_tres(opts.strings.get("gpus-per-node"), pre)
    gres = opts.strings.get("gres")
    if gres is not None and gres.lower() != "none":
        gres = _prefix(gres, pre)
        per_node = f"{per_node},{gres}" if per_node else gres
    job["tres_per_node"] = per_node
    job["gres"] = per_node  # job_desc.gres reads as tres_per_node (22.05 and 24.11 alike)
    job["tres_per_socket"] = _xfmt_tres(opts.strings.get("gpus-per-socket"), pre)
    if prof.tres_per_task_eq:
        job["tres_per_task"] = _tres_per_task_24(opts, table)
    else:  # 23.02 passes --tres-per-task through and adds --gpus-per-task unless it names gres:gpu (22.05 has neither)
        tpt = opts.strings.get("tres-per-task") or None
        gpt = _xfmt_tres(opts.strings.get("gpus-per-task"), pre)
        if gpt and not (tpt and "gres:gpu" in tpt.lower()):
            tpt = f"{tpt},{gpt}" if tpt else gpt
        job["tres_per_task"] = tpt
    _validate_gres(job, opts, gres_names, prof)
    return job


def _tres_conflict(table: OptionTable, rule_id: str, name: str, option: str) -> str:
    """The release's message for --tres-per-task naming NAME as well as --OPTION (printf'd as slurm_opt.c does)."""
    r = _rule(table, rule_id)
    text = r.message if r else "You can not have --tres-per-task=%s= and --%s please use one or the other"
    return text % (name, option) if "%s" in text else text


def _tres_per_task_24(opts: _Opts, table: OptionTable) -> str | None:
    """23.11+ tres_per_task: --tres-per-task (gres: -> gres/), then --gpus-per-task and -c folded in as NAME=N."""
    tpt = opts.strings.get("tres-per-task")
    if tpt:
        tpt = tpt.replace("gres:", "gres/")
    gpt = opts.strings.get("gpus-per-task")
    if gpt:
        name = "gres/gpu"
        num = gpt
        for sep in (":", "="):
            if sep in gpt:
                gtype, _, num = gpt.partition(sep)
                name += ":" + gtype
                break
        cnt, _ = _strtol(num)
        if tpt and name.lower() in tpt.lower():
            raise SbatchRefusal(Problem(opts.loc.get("gpus-per-task", "--gpus-per-task"), None,
                                        _tres_conflict(table, "tres_per_task_vs_gpus_per_task", name,
                                                       "gpus-per-task")))
        tpt = _update_tres_per_task(cnt or 0, name, tpt)
    if "cpus_per_task" in opts.ints:
        # what the release looks for in tres_per_task: 23.11 "cpu:", 24.05+ "cpu" (the rule's `tres-per-task~` term)
        r = _rule(table, "tres_per_task_vs_cpus_per_task")
        needle = next((n.partition("~")[2] for g in (r.groups if r else ()) for n in g
                       if n.startswith("tres-per-task~")), "cpu")
        if tpt and needle.lower() in tpt.lower() and "tres-per-task" in opts.loc:
            raise SbatchRefusal(Problem(opts.loc.get("cpus-per-task", "--cpus-per-task"), None,
                                        _tres_conflict(table, "tres_per_task_vs_cpus_per_task", "cpu",
                                                       "cpus-per-task")))
        tpt = _update_tres_per_task(opts.ints["cpus_per_task"], "cpu", tpt)
    return tpt or None


def _validate_gres(job: dict[str, Any], opts: _Opts, gres_names: frozenset[str], prof: Profile) -> None:
    """The part of gres_job_state_validate that sbatch runs before sending (what it refuses, num_tasks it sets)."""
    where = {"tres_per_job": "gpus", "tres_per_node": "gres" if "gres" in opts.strings else "gpus-per-node",
             "tres_per_socket": "gpus-per-socket", "tres_per_task": "gpus-per-task"}
    typed: dict[str, set[bool]] = {}
    per_job_gpus = None
    for fld in ("cpus_per_tres", "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task",
                "mem_per_tres"):
        spec = job.get(fld)
        if not spec:
            continue
        opt = where.get(fld, fld.replace("_per_tres", "-per-gpu").replace("_", "-"))
        loc = opts.loc.get(opt, f"--{opt}")
        items = parse_gres_list(spec, loc, gres_names)
        if fld.startswith("tres_per"):
            for item in items:
                typed.setdefault(item.name, set()).add(item.type is not None)
            if fld == "tres_per_job":
                per_job_gpus = sum(i.count for i in items if i.name == "gpu")
    for name, kinds in typed.items():
        if len(kinds) > 1:
            raise SbatchRefusal(Problem("<options>", None, f"Invalid GRES specification for {name} (with and without "
                                                         "type identification)"))
    if job["tres_per_socket"] and job["sockets_per_node"] == NO_VAL16:
        raise SbatchRefusal(Problem(opts.loc.get("gpus-per-socket", "--gpus-per-socket"), None,
                                    "--gpus-per-socket option requires --sockets-per-node specification"))
    if prof.cpus_per_gpu_needs_gpu and job.get("cpus_per_tres") and not typed.get("gpu"):
        raise SbatchRefusal(Problem(opts.loc.get("cpus-per-gpu", "--cpus-per-gpu"), None,
                                    f"Requested cpus_per_tres={job['cpus_per_tres']} but did not request any GPU."))
    if job.get("mem_per_tres") and not typed.get("gpu"):
        raise SbatchRefusal(Problem(opts.loc.get("mem-per-gpu", "--mem-per-gpu"), None,
                                    f"Requested mem_per_tres={job['mem_per_tres']} but did not request any GPU."))
    if per_job_gpus is not None and job["min_nodes"] != NO_VAL and per_job_gpus < job["min_nodes"]:
        raise SbatchRefusal(Problem(opts.loc.get("gpus", "--gpus"), None,
                                    "Failed to validate job spec, --gpus < -N"))
    # num_tasks that gres_job_state_validate derives for per-task / per-GPU requests
    if (job["tres_per_task"] or job["ntasks_per_tres"] != NO_VAL16) and job["num_tasks"] == NO_VAL \
            and job["min_nodes"] != NO_VAL and job["min_nodes"] == job["max_nodes"]:
        if job["ntasks_per_tres"] != NO_VAL16:
            job["num_tasks"] = job["min_nodes"] * job["ntasks_per_tres"]
        elif job["ntasks_per_node"] != NO_VAL16:
            job["num_tasks"] = job["min_nodes"] * job["ntasks_per_node"]
        elif job["cpus_per_task"] == NO_VAL16:
            job["num_tasks"] = job["min_nodes"]
    if job["ntasks_per_tres"] != NO_VAL16 and job["num_tasks"] == NO_VAL and per_job_gpus:
        job["num_tasks"] = per_job_gpus * job["ntasks_per_tres"]


# ---------------------------------------------------------------------------------------------------------------
# the whole command


@dataclass
class SbatchRequest:
    """An sbatch command read: the job_desc slurmctld hands job_submit.lua, the script and its arguments."""

    job_desc: dict[str, Any]
    script_path: str | None
    script_args: list[str]


def read_sbatch(
    args: Sequence[str],
    *,
    script: bytes | str | None = None,
    read_file: Callable[[str], bytes] | None = None,
    stdin: bytes | None = None,
    version: str = DEFAULT_VERSION,
    gres_names: frozenset[str] = frozenset({"gpu"}),
    source: str = "<command line>",
    script_source: str | None = None,
) -> SbatchRequest:
    """Read `sbatch ARGS` as sbatch does.

    script: the batch script's text (overrides reading the operand); read_file: how to read a script operand;
    stdin: the script when there is no operand and no --wrap (None: judge the options alone, no script needed).
    """
    table = option_table(version)
    args = list(args)
    if ":" in args:
        idx = args.index(":")
        raise SbatchRefusal(Problem(f"{source}: argument {idx + 1}", None,
                                    "heterogeneous job (':'): policy check judges one job; check each component"))
    parsed = getopt(args, table, lambda i: f"{source}: argument {i + 1} ({args[i]!r})")
    wrap = [v for name, v, _ in parsed.options if name == "wrap"]
    script_path = parsed.operands[0] if parsed.operands else None
    if wrap and parsed.operands:
        raise SbatchRefusal(Problem(source, None, "Script arguments not permitted with --wrap option"))
    body: bytes | None
    script_name = "<script>"
    if wrap:
        body = None
    elif script is not None:
        body = script.encode("utf-8", "surrogateescape") if isinstance(script, str) else script
        script_name = script_source or script_path or "<script>"
    elif script_path is not None:
        if read_file is None:
            def read_file(path: str) -> bytes:
                return Path(path).read_bytes()
        try:
            body = read_file(script_path)
        except OSError as exc:
            raise SbatchRefusal(Problem(script_path, None, f"Unable to open file {script_path}: "
                                                           f"{exc.strerror or exc}")) from None
        script_name = script_path
    else:
        body = stdin
        script_name = "<stdin>"
    opts = _Opts()
    if body is not None:
        check_script_bytes(body, script_name)
        words = script_words(body, script_name, table.profile.escaped_space)
        words_only = [w for w, _ in words]
        sparsed = getopt(words_only, table, lambda i: f"{script_name}:{words[i][1]}")
        if sparsed.operands:
            bad = sparsed.stop
            raise SbatchRefusal(Problem(script_name, words[bad][1],
                                        f"Invalid directive found in batch script: {words_only[bad]}"))
        for name, value, loc in sparsed.options:
            _apply(opts, name, value, loc)
    for name, value, loc in parsed.options:
        _apply(opts, name, value, loc)
    job = _build(opts, gres_names, table, read_file)
    return SbatchRequest(job, script_path, parsed.operands[1:])


def job_desc_from_options(
    args: Sequence[str],
    *,
    script: bytes | str | None = None,
    user: str | None = None,
    default_account: str | None = None,
    default_qos: str | None = None,
    source: str = "<command line>",
    version: str = DEFAULT_VERSION,
    read_file: Callable[[str], bytes] | None = None,
    script_source: str | None = None,
    gres_names: frozenset[str] = frozenset({"gpu"}),
) -> dict[str, Any]:
    """The job_desc slurmctld would give job_submit.lua for `sbatch ARGS [SCRIPT]` (command line over script)."""
    request = read_sbatch(args, script=script, read_file=read_file, version=version, source=source,
                          script_source=script_source, gres_names=gres_names)
    job = request.job_desc
    job.update({"user_name": user, "default_account": default_account, "default_qos": default_qos})
    return job
