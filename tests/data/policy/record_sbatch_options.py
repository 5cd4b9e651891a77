"""Record sbatch's getopt_long option table by probing the real binary (no source, no man page).

    eval "$(tests/slurm_lab/slurm-lab --name NAME env)"
    tests/slurm_lab/slurm-lab --name NAME policy tests/data/policy/probe_job_submit.lua   # nothing can be queued
    python tests/data/policy/record_sbatch_options.py > tests/data/policy/sbatch-options-<version>.json

How each fact is learnt (glibc getopt_long messages; stdin is /dev/null so an accepted command line stops at
"Batch script is empty!" before any value is checked or anything is sent):
- names: every prefix `--P` is probed, depth first from `--a`..`--z`; "unrecognized option" prunes the branch,
  anything else (ambiguous, accepted, missing argument) means some long option starts with P. A full name is the
  one getopt itself prints ("option '--NAME' requires an argument" / "doesn't allow an argument"), or an exact
  match (a prefix that is also accepted with every longer spelling refused is a name);
- has_arg: `--NAME` alone refused with "requires an argument" -> required; else `--NAME=x` refused with "doesn't
  allow an argument" -> none; else optional;
- aliases (same getopt val, so a prefix shared only by them is not ambiguous): a prefix matching several names
  that getopt accepts;
- short letters: `-X` -> "invalid option" (none) / "requires an argument" (required); else `-X=` -> "invalid option
  -- '='" means X takes no argument, otherwise an optional one. The long name of a letter is read from
  `sbatch --help` ("-G, --gpus=...") and checked: the letter and the long option must have the same has_arg.
"""

from __future__ import annotations

import json
import re
import string
import subprocess
import sys

CHARSET = string.ascii_lowercase + string.digits + "-_"
_cache: dict[tuple[str, ...], str] = {}


def run(*args: str) -> str:
    if args not in _cache:
        cp = subprocess.run(["sbatch", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        _cache[args] = cp.stderr + cp.stdout
    return _cache[args]


def classify(prefix: str) -> tuple[str, str | None]:
    """('none'|'ambiguous'|'required'|'accepted', full name printed by getopt or None)."""
    out = run("--" + prefix)
    if "unrecognized option" in out:
        return "none", None
    if "is ambiguous" in out:
        return "ambiguous", None
    m = re.search(r"option '--([^']+)' requires an argument", out)
    if m:
        return "required", m.group(1)
    return "accepted", None


def explore() -> tuple[set[str], dict[str, str]]:
    names: set[str] = set()
    kinds: dict[str, str] = {}
    stack = list(CHARSET)
    while stack:
        prefix = stack.pop()
        kind, full = classify(prefix)
        kinds[prefix] = kind
        if kind == "none":
            continue
        if full:
            names.add(full)
        if kind == "accepted":
            m = re.search(r"option '--([^']+)' doesn't allow an argument", run("--" + prefix + "=x"))
            if m:
                names.add(m.group(1))
        stack.extend(prefix + c for c in CHARSET)
    # An accepted/required prefix none of whose extensions exist, or that getopt spelled out, is a name;
    # an exact name is also any explored prefix that is accepted while being a name printed above.
    for prefix, kind in kinds.items():
        if kind in ("accepted", "required") and not any(kinds.get(prefix + c, "none") != "none" for c in CHARSET):
            names.add(prefix)
    # An optional-argument option that is a prefix of another name: exact match wins, so `--NAME` and
    # `--NAME=x` are both accepted; detect by probing `--NAME=x` refusing nothing and the next longer prefix
    # being a different option set.  Those are found through --help below.
    return names, kinds


def has_arg_long(name: str) -> str:
    if re.search(rf"option '--{re.escape(name)}' requires an argument", run("--" + name)):
        return "required"
    if re.search(rf"option '--{re.escape(name)}' doesn't allow an argument", run("--" + name + "=x")):
        return "none"
    return "optional"


def has_arg_short(letter: str) -> str | None:
    out = run("-" + letter)
    if "invalid option" in out:
        return None
    if "requires an argument" in out:
        return "required"
    return "none" if "invalid option -- '='" in run("-" + letter + "=") else "optional"


def main() -> None:
    version = subprocess.run(["sbatch", "--version"], capture_output=True, text=True).stdout.split()[-1]
    help_text = subprocess.run(["sbatch", "--help"], capture_output=True, text=True).stdout
    names, kinds = explore()
    # Names --help spells out (an optional-argument option that prefixes another is only found this way).
    for name in re.findall(r"--([A-Za-z0-9][A-Za-z0-9_-]*)", help_text):
        if classify(name)[0] != "none" and "is ambiguous" not in run("--" + name):
            names.add(name)
    # Drop spellings that are only prefixes of a longer real name (an exact match must be one getopt knows):
    # a true name N satisfies: `--N` resolves to N itself, i.e. the name getopt prints for `--N` is N, or N is
    # not a prefix of any other name.
    real = set()
    for name in names:
        others = [o for o in names if o != name and o.startswith(name)]
        if not others:
            real.add(name)
            continue
        kind, full = classify(name)
        if kind == "ambiguous":
            continue  # a prefix of several options, not a name (an exact name is never ambiguous)
        if full == name:
            real.add(name)
            continue
        m = re.search(r"option '--([^']+)' doesn't allow an argument", run("--" + name + "=x"))
        if m and m.group(1) == name:
            real.add(name)
            continue
        # accepted with an optional argument: a name if its help line spells it, else a prefix of aliases
        if re.search(rf"--{re.escape(name)}(\[|=|\s|,)", help_text):
            real.add(name)
    long_opts = {name: has_arg_long(name) for name in sorted(real)}
    # aliases: a prefix matching several names that getopt does not call ambiguous
    groups: dict[str, set[str]] = {name: {name} for name in long_opts}
    for prefix, kind in kinds.items():
        matches = [n for n in long_opts if n.startswith(prefix)]
        if len(matches) > 1 and prefix not in long_opts and kind != "ambiguous" and kind != "none":
            merged = set().union(*(groups[m] for m in matches))
            for m in merged:
                groups[m] = merged
    shorts = {}
    for letter in string.ascii_letters + string.digits:
        arg = has_arg_short(letter)
        if arg is None:
            continue
        m = re.search(rf"^\s*-{letter},?\s+--([A-Za-z0-9_-]+)", help_text, re.M)
        long_name = m.group(1) if m and m.group(1) in long_opts else None
        if long_name and arg == "optional" and long_opts[long_name] == "none" and not run("-" + letter + "=").strip().startswith("sbatch:"):
            arg = "none"  # -h= / -V= print and exit before getopt reaches '=': the letter takes no argument
        if long_name and long_opts[long_name] != arg:
            print(f"warning: -{letter} is {arg} but --{long_name} is {long_opts[long_name]}", file=sys.stderr)
        shorts[letter] = {"has_arg": arg, "long": long_name}
    table = {
        "slurm_version": version,
        "recorded_by": "tests/data/policy/record_sbatch_options.py (probes of the real sbatch binary)",
        "probes": len(_cache),
        "long": [{"name": n, "has_arg": a, "aliases": sorted(groups[n] - {n})} for n, a in long_opts.items()],
        "short": [{"letter": k, **v} for k, v in sorted(shorts.items())],
    }
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
