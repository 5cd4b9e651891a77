"""`usage_rules.rollup` (the scalar rollup `gpuclust job` uses, numpy-free) gives exactly what `usage.add_usage_columns` (the
report's vectorised one) gives: every job's usage columns and rule, and the same warnings on its rows, on the
recorded dumps with steps and usage TRES, on generated ones (benchmarks/accounting_bench.py --messy --usage), and
on dumps made to hold every kind of bad or unusable value. The report's is the reference."""

from __future__ import annotations

import math
import random
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from gpuclust.accounting.figures import jobview as jv
from gpuclust.accounting.ingest import usage, usage_rules
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.pipeline import read_input
from gpuclust.slurm import sacct_jobs

REPO = Path(__file__).resolve().parents[2]
RECORDED = [REPO / "tests" / "data" / "accounting" / "usage" / "lab-22.05-steps-pipe.txt"]
FIGURES = ("gpu_util_gpu_s", "gpu_busy_gpu_s", "gpu_util_max_pct", "gpu_mem_max_mb", "cpu_used_s", "mem_max_mb",
           "energy_j")
VERSIONS = (None, "23.11.4", "24.11")
_AT_LINE = re.compile(r":(\d+): (.*)$", re.S)


def _by_line(messages: list[str]) -> Counter[tuple[int, str]]:
    out: Counter[tuple[int, str]] = Counter()
    for m in messages:
        got = _AT_LINE.search(m)
        assert got, m
        out[int(got.group(1)), got.group(2)] += 1
    return out


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def assert_equivalent(path: Path, version: str | None, fast: bool = True) -> int:
    """Each execution of the dump, rolled up by jobview, against the report's row for it (by line); returns the
    number of executions compared."""
    result = read_input(str(path), options=ReaderOptions(fast=fast, slurm_version=version))
    report = {r["line"]: r for r in result.table.to_pylist()}
    listed = result.usage_warnings == len(result.usage_problems)  # (else the first ones: the counts compared)
    warned = _by_line(result.usage_problems)
    rows = sacct_jobs.read_rows(path.read_text(encoding="utf-8"), None, str(path))
    rule = usage.rule_for_version(version)
    compared = 0
    seen: Counter[tuple[int, str]] = Counter()
    for job, steps in jv._executions(rows):
        line = int(job["_line"])
        if line not in report:
            continue  # (a row the report rejects or an array's pending tasks)
        want = report[line]
        got = jv._usage(job, steps, want["gpus"] or 0, float(want["elapsed_s"] or 0), rule, str(path))
        where = f"{path.name}:{line} job {job['JobID']} (version {version}, fast {fast})"
        for name in FIGURES:
            assert _same(want[name], getattr(got, name)), f"{where}: {name} {want[name]} != {getattr(got, name)}"
        assert want["gpu_util_rule"] == got.rule, where
        lines = {line, *(int(s["_line"]) for s in steps)}
        mine = _by_line(got.warnings)
        seen += mine
        compared += 1
        if not listed:
            assert (got.problem is not None) <= (want["gpu_util_gpu_s"] is None), where
            continue
        theirs = Counter({k: n for k, n in warned.items() if k[0] in lines})
        assert mine == theirs, where
        # Unknown with a problem: a step recorded utilisation the report could not use.
        util_unusable = any(("gres/gpuutil reads" in m or "gres/gpuutil of a step" in m or "gres/gpuutil from" in m
                             or "gres/gpuutil on a step" in m) for _, m in theirs)
        assert (got.problem is not None) == util_unusable, where
        if got.problem is not None:
            assert want["gpu_util_gpu_s"] is None and got.problem in got.warnings, where
    # Every warning the report gave belongs to an execution compared (none is jobview's alone, none missed).
    assert seen == warned if listed else seen.total() == result.usage_warnings, path
    return compared


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name)
@pytest.mark.parametrize("fast", [True, False])
def test_recorded_dumps(path: Path, fast: bool) -> None:
    for version in VERSIONS:
        assert assert_equivalent(path, version, fast) == 2


def _bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import accounting_bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return accounting_bench


@pytest.mark.parametrize("seed", [7, 11])
def test_generated_messy_usage_dumps(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "sacct-messy-usage.txt"
    _bench().generate(path, 600, seed=seed, messy=True, usage=True)
    for version in VERSIONS:
        assert assert_equivalent(path, version) > 100


# ---- dumps made to hold every kind of value ------------------------------------------------------------------

HEADER = ("JobID|JobIDRaw|State|Start|End|Elapsed|AllocTRES|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot|"
          "TRESUsageOutTot|ConsumedEnergyRaw")
_UTIL = ("0", "37", "100", "150", "400", "1.50K", "2K", "x", "", "-3", "12.5", "1e2")
_SIZE = ("36266M", "1.5G", "218192K", "1024", "0", "bad", "", "7Q")
_CPU = ("00:00:22", "1-00:00:01", "05:07.250", "29", "00:01", "", "nope", "3:4:5")
_ENERGY = ("", "0", "1800000", "1.50K", "x", "12.5")
_ALLOC = ("cpu=8,gres/gpu=4,mem=64G,node=1", "cpu=2,gres/gpu=1,mem=4G,node=1", "cpu=2,mem=4G,node=1",
          "cpu=8,gres/gpu:h100=2,gres/gpu=2,node=1", "")


def _list(rng: random.Random) -> str:
    entries = []
    for key, values in (("cpu", _CPU), ("energy", ("0", "5")), ("gres/gpumem", _SIZE), ("gres/gpuutil", _UTIL),
                        ("mem", _SIZE), ("vmem", _SIZE)):
        if rng.random() < 0.7:
            entries.append(f"{key}={rng.choice(values)}")
    text = ",".join(entries)
    roll = rng.random()
    if roll < 0.04:
        return "mem"  # not a TRES list
    if roll < 0.08:
        return text + ",,gres/gpuutil=5"  # an empty entry: not a list, what is there still read
    if roll < 0.1:
        return "gres/gpuutil=10,gres/gpuutil=90"  # (the first entry of a key counts)
    return text


def _dump(path: Path, seed: int, jobs: int = 8) -> None:
    rng = random.Random(seed)
    lines = [HEADER]
    for j in range(1, jobs + 1):
        start, end = "2026-12-02T10:00:00", "2026-12-02T11:00:00"
        energy = rng.choice(_ENERGY)
        lines.append(f"{j}|{j}|COMPLETED|{start}|{end}|01:00:00|{rng.choice(_ALLOC[:4])}|||||{energy}")
        for s in rng.sample(["batch", "extern", "0", "1"], rng.randrange(0, 4)):
            same = rng.random() < 0.4  # one task: Ave, Max and Tot print the same list
            ave = _list(rng)
            mx, tot = (ave, ave) if same else (_list(rng), _list(rng))
            if rng.random() < 0.15:
                ave = ""
            elapsed = rng.choice(["00:30:00", "01:00:00", "00:00:00", "2-00:00:00"])
            lines.append(f"{j}.{s}|{j}.{s}|COMPLETED|{start}|{end}|{elapsed}|{rng.choice(_ALLOC)}|{ave}|{mx}|{tot}|"
                         f"energy=0|{rng.choice(_ENERGY)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("seed", range(12))
def test_dumps_with_every_kind_of_value(tmp_path: Path, seed: int) -> None:
    path = tmp_path / f"odd-{seed}.txt"
    _dump(path, seed)
    for version in VERSIONS:
        for fast in (True, False):
            assert assert_equivalent(path, version, fast) == 8


def test_one_value_parsers_are_the_vectorised_ones() -> None:
    """The scalar value parsers against usage's vectorised ones, value by value."""
    import pyarrow as pa

    values = [*_UTIL, *_SIZE, *_CPU, *_ENERGY, "1.", ".5", "1e", "1E+3K", "00:00:00", "99:59:59", "1-2:3:4.5",
              "12345678", "1\n", " 1"]
    arr = pa.array(values)
    for scalar, vectorised in ((lambda v: usage_rules.suffixed(v, usage_rules.COUNT_UNIT), usage.counts),
                               (lambda v: usage_rules.suffixed(v, usage_rules.MEM_UNIT_MIB), usage.sizes_mib),
                               (usage_rules.clock, usage.clock_seconds), (usage_rules.number, usage.numbers)):
        got, bad = vectorised(arr)
        for v, g, b in zip(values, got.tolist(), bad.tolist(), strict=True):
            want = scalar(v)
            assert (want is None) == (b or (v == "" and math.isnan(g))), v
            if want is not None:
                assert math.isclose(want, g, rel_tol=1e-12), v
