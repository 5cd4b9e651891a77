"""Copy-engine bandwidth (source `nvbandwidth`, on request): nvbandwidth's host<->device and device<->device
CE tests, in the before phase only, with `snapshot --nvbandwidth`. A node without the binary records it as
unavailable; it is detected, never required.

    nvbandwidth  {"tests": [...], "results": [NvbandwidthResult.as_dict()]}

No rules: the acceptance report shows each test's sum beside the node (gpuclust.accept.report.health_summary).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from gpuclust.accept.health.kit import (
    HealthParseError,
    HealthPaths,
    Request,
    Source,
    guard,
    int_or_none,
    ok,
    run,
)
from gpuclust.accept.health.shape import NUM_MAX, list_of, number, obj, string


@dataclass(frozen=True)
class NvbandwidthResult:
    """One nvbandwidth test case: its description, sum in GB/s, bandwidth matrix and status."""

    testcase: str | None  # None when the output shows a matrix without its "Running X." line
    description: str | None  # e.g. memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
    sum_gbps: float | None
    matrix: tuple[tuple[float | None, ...], ...]  # N/A cells are None
    status: str = "passed"  # passed | waived | error | not-found (json); text output: passed or waived

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_NVB_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_NVB_WAIVED = re.compile(r"^Waiving (\S+?)\.?$")
_NVB_SUM = re.compile(r"^SUM (\S+) (\S+)$")


def _nvb_cell(tok: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    return _bounded(float(tok))


def _bounded(value: float) -> float | None:
    """A bandwidth, or None for NaN, infinity or a figure past NUM_MAX (no bus moves that)."""
    return value if math.isfinite(value) and abs(value) <= NUM_MAX else None


def parse_nvbandwidth(text: str, source: str = "nvbandwidth") -> list[NvbandwidthResult]:
    """nvbandwidth's text output (per testcase: 'Running NAME.', a description line, a matrix with a column
    header row, 'SUM NAME VALUE') or its --json output -> per-testcase sum and matrix."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _nvbandwidth_json(stripped, source)
    out: list[NvbandwidthResult] = []
    name: str | None = None
    desc: str | None = None
    rows: list[tuple[float | None, ...]] = []
    total: float | None = None
    open_case = False

    def close() -> None:
        nonlocal name, desc, rows, total, open_case
        if open_case:
            out.append(NvbandwidthResult(name, desc, total, tuple(rows)))
        name, desc, rows, total, open_case = None, None, [], None, False

    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if m := _NVB_RUNNING.match(line):
            close()
            name, open_case = m.group(1), True
            continue
        if m := _NVB_WAIVED.match(line):
            close()
            out.append(NvbandwidthResult(m.group(1), None, None, (), "waived"))
            continue
        if "bandwidth (GB/s)" in line:
            if desc is not None and rows:  # a second matrix without its own Running line
                close()
            desc, open_case = line, True
            continue
        if m := _NVB_SUM.match(line):
            try:
                total = _bounded(float(m.group(2)))
            except ValueError:
                raise HealthParseError(source, f"line {n}: SUM value {m.group(2)!r} is not a number") from None
            if name is None:
                name = m.group(1)
            close()
            continue
        if desc is None or not line:
            continue
        toks = line.split()
        if all(t.isdigit() for t in toks) and not rows:  # the column header row
            continue
        if toks[0].isdigit():
            try:
                rows.append(tuple(_nvb_cell(t) for t in toks[1:]))
            except ValueError:
                raise HealthParseError(source, f"line {n}: matrix cell is not a number: {line[:80]!r}") from None
    close()
    return out


def _nvbandwidth_json(text: str, source: str) -> list[NvbandwidthResult]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HealthParseError(source, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    cases = doc.get("nvbandwidth", {}).get("testcases") if isinstance(doc, dict) else None
    if not isinstance(cases, list):
        raise HealthParseError(source, "no nvbandwidth.testcases array")
    out: list[NvbandwidthResult] = []
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            raise HealthParseError(source, f"testcases[{i}]: expected an object")
        matrix = case.get("bandwidth_matrix") or []
        try:
            rows = tuple(tuple(_nvb_cell(str(c)) for c in row) for row in matrix)
        except (ValueError, TypeError):
            raise HealthParseError(source, f"testcases[{i}]: bandwidth_matrix has a cell that is not a number") from None
        total = case.get("sum")
        status = str(case.get("status", "")).strip().lower().replace(" ", "-") or "not-run"
        known = total if isinstance(total, float) else int_or_none(total)
        total_gbps = _bounded(float(known)) if known is not None else None
        name, desc = case.get("name"), case.get("bandwidth_description")
        out.append(NvbandwidthResult(name if isinstance(name, str) else None, desc if isinstance(desc, str) else None,
                                     total_gbps, rows, status))
    return out


NVBANDWIDTH_TIMEOUT_S = 900.0
# The copy-engine host<->device and device<->device tests: seconds per GPU, the figures acceptance compares.
NVBANDWIDTH_TESTS = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce")


def collect_nvbandwidth(paths: HealthPaths) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        argv = [paths.nvbandwidth]
        for test in NVBANDWIDTH_TESTS:
            argv += ["-t", test]
        results = parse_nvbandwidth(run(argv, NVBANDWIDTH_TIMEOUT_S), source=paths.nvbandwidth)
        return ok(tests=list(NVBANDWIDTH_TESTS), results=[r.as_dict() for r in results])

    return guard(read)


def _collect(r: Request) -> dict[str, Any] | None:
    return collect_nvbandwidth(r.paths) if r.phase == "before" and r.nvbandwidth else None


# The snapshot's data (SOURCE.shape).
SHAPE = obj({"tests": list_of(string()), "results": list_of(obj({
    "testcase": string(True), "description": string(True), "sum_gbps": number(True),
    "matrix": list_of(list_of(number(True))), "status": string()}))}, required=["results"])

SOURCE = Source("nvbandwidth", _collect, on_request=True, shape=SHAPE)
