"""sbatch options (command line or #SBATCH lines) -> the job_desc fields slurmctld hands job_submit.lua.

The mapping follows what 22.05's sbatch sends, probed on the lab (tests/data/policy/jobdesc-probe.json):
GPU options arrive with a `gres:` prefix (`--gres=gpu:h100:2` -> gres and tres_per_node `gres:gpu:h100:2`,
`--gpus=3` -> tres_per_job `gres:gpu:3`), unset numbers arrive as NO_VAL sentinels, `-t` in minutes.
Only the fields the policy reads are produced; other options are parsed (so their values are skipped) and ignored.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

from gpuclust.errors import InputError, Problem

NO_VAL = 4294967294
NO_VAL16 = 65534
INFINITE = 4294967295

# option -> job_desc field, for options copied verbatim.
_STRING_FIELDS = {
    "account": "account", "partition": "partition", "qos": "qos", "comment": "comment", "wckey": "wckey",
    "job-name": "name",
}
_SHORT = {"A": "account", "p": "partition", "q": "qos", "J": "job-name", "N": "nodes", "n": "ntasks", "t": "time"}
# Long options (and the short letters) that take a value, so "--opt VALUE" skips VALUE.
_VALUE_LONG = frozenset({
    "account", "partition", "qos", "comment", "wckey", "job-name", "nodes", "ntasks", "ntasks-per-node",
    "sockets-per-node", "time", "gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket",
    "output", "error", "input", "chdir", "nodelist", "exclude", "constraint", "dependency", "array", "begin",
    "mem", "mem-per-cpu", "mem-per-gpu", "cpus-per-task", "cpus-per-gpu", "licenses", "mail-type", "mail-user",
    "reservation", "time-min", "export", "signal", "distribution", "nice", "priority", "gres-flags", "wrap",
    "cores-per-socket", "threads-per-core", "ntasks-per-core", "ntasks-per-socket", "ntasks-per-gpu",
    "tmp", "uid", "gid", "cluster", "clusters", "deadline", "delay-boot", "open-mode", "profile", "propagate",
    "switches", "wait-all-nodes", "batch", "mcs-label", "network", "kill-on-invalid-dep", "acctg-freq",
    "cpu-freq", "extra-node-info", "hint", "mem-bind", "cpu-bind", "prefer", "tres-per-task",
})
_VALUE_SHORT = frozenset("ApqJNntoeiDwxCdaMLcSmbBk") - {"k"}

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


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


def _gres_items(value: str) -> str:
    """`gpu:h100:2,shard:1` -> `gres:gpu:h100:2,gres:shard:1` (22.05 prefixes every item)."""
    items = [item for item in value.split(",") if item]
    return ",".join(item if item.startswith("gres:") else "gres:" + item for item in items)


def parse_options(args: Sequence[str], source: str = "<command line>") -> dict[str, str | None]:
    """sbatch argv -> {long option name: value} (flags -> None). Later options win, as in sbatch."""
    opts: dict[str, str | None] = {}
    i = 0
    args = list(args)
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, sep, value = arg[2:].partition("=")
            if not sep and name in _VALUE_LONG:
                if i >= len(args):
                    raise InputError(Problem(source, None, f"option --{name} needs a value"))
                value = args[i]
                i += 1
            opts[name] = value if (sep or name in _VALUE_LONG) else None
        elif arg.startswith("-") and len(arg) > 1:
            letter = arg[1]
            name = _SHORT.get(letter, letter)
            if letter in _VALUE_SHORT:
                value = arg[2:]
                if value.startswith("="):
                    value = value[1:]
                if not value:
                    if i >= len(args):
                        raise InputError(Problem(source, None, f"option -{letter} needs a value"))
                    value = args[i]
                    i += 1
                opts[name] = value
            else:
                opts[name] = None
        else:
            break  # the script argument: sbatch stops reading options here
    return opts


def script_options(text: str, source: str = "<script>") -> list[str]:
    """The #SBATCH option words of a batch script (sbatch stops at the first command line)."""
    words: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if lineno == 1 and stripped.startswith("#!"):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith("#SBATCH"):
            body = stripped[len("#SBATCH"):]
            try:
                words += shlex.split(body, comments=True)
            except ValueError as exc:
                raise InputError(Problem(source, lineno, f"cannot split #SBATCH line: {exc}")) from None
    return words


def job_desc_from_options(
    args: Sequence[str],
    *,
    script: str | None = None,
    user: str | None = None,
    default_account: str | None = None,
    default_qos: str | None = None,
    source: str = "<command line>",
) -> dict[str, Any]:
    """The job_desc slurmctld would give job_submit.lua for `sbatch ARGS [SCRIPT]`.

    Command-line options override the script's #SBATCH lines, as in sbatch.
    """
    opts = parse_options(script_options(script, source) if script else [], source)
    opts.update(parse_options(args, source))
    job: dict[str, Any] = {
        "user_name": user, "default_account": default_account, "default_qos": default_qos,
        "min_nodes": NO_VAL, "max_nodes": NO_VAL, "num_tasks": NO_VAL, "ntasks_per_node": NO_VAL16,
        "sockets_per_node": NO_VAL16, "time_limit": NO_VAL,
    }
    problems: list[Problem] = []

    def number(name: str, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            problems.append(Problem(source, None, f"--{name}: expected a number, got {text!r}"))
            return NO_VAL
        return value

    for opt, field in _STRING_FIELDS.items():
        if opts.get(opt) is not None:
            job[field] = opts[opt]
    if opts.get("nodes") is not None:
        lo, _, hi = str(opts["nodes"]).partition("-")
        job["min_nodes"] = number("nodes", lo)
        job["max_nodes"] = number("nodes", hi) if hi else job["min_nodes"]
    if opts.get("ntasks") is not None:
        job["num_tasks"] = number("ntasks", str(opts["ntasks"]))
    if opts.get("ntasks-per-node") is not None:
        job["ntasks_per_node"] = number("ntasks-per-node", str(opts["ntasks-per-node"]))
    if opts.get("sockets-per-node") is not None:
        job["sockets_per_node"] = number("sockets-per-node", str(opts["sockets-per-node"]))
    if opts.get("time") is not None:
        try:
            job["time_limit"] = slurm_time_minutes(str(opts["time"]))
        except ValueError as exc:
            problems.append(Problem(source, None, f"--time: {exc}"))
    # sbatch fills num_tasks itself from --ntasks-per-node x --nodes (probed).
    if job["num_tasks"] == NO_VAL and job["ntasks_per_node"] != NO_VAL16 and job["min_nodes"] != NO_VAL:
        job["num_tasks"] = job["ntasks_per_node"] * job["min_nodes"]
    per_node: list[str] = []
    if opts.get("gres") and str(opts["gres"]).lower() != "none":
        per_node.append(_gres_items(str(opts["gres"])))
    if opts.get("gpus-per-node"):
        per_node.append("gres:gpu:" + str(opts["gpus-per-node"]))
    if per_node:  # in 22.05 `gres` is an alias of tres_per_node
        job["tres_per_node"] = job["gres"] = ",".join(per_node)
    for opt, field in (("gpus", "tres_per_job"), ("gpus-per-task", "tres_per_task"), ("gpus-per-socket", "tres_per_socket")):
        if opts.get(opt):
            job[field] = "gres:gpu:" + str(opts[opt])
    if problems:
        raise InputError(problems)
    return job
