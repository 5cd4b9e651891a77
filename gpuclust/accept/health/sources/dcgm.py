"""DCGM diagnostics (source `dcgm`, on request): `dcgmi diag -r LEVEL -j`, in the before phase only, with
`snapshot --dcgm-level N`. A node without dcgmi records it as unavailable; it is detected, never required.

    dcgm  {"level": int, "exit_code": int, "results": [DcgmResult.as_dict()]}

Findings: `dcgm` (judge_dcgm, which the acceptance report runs on each before snapshot's results): fail:
CRITICAL, warn: WARNING.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gpuclust.accept.health.kit import (
    HealthFinding,
    HealthParseError,
    HealthPaths,
    Request,
    Source,
    Unavailable,
    bounded_int,
    guard,
    int_or_none,
    ok,
)
from gpuclust.accept.health.shape import integer, list_of, obj, string
from gpuclust.errors import SlurmCommandNotFound, SlurmTimeout
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.runner import run_command

DCGM_STATUSES = ("pass", "fail", "warn", "skip", "not-run")


@dataclass(frozen=True)
class DcgmResult:
    """One `dcgmi diag` test result: its category and test, the GPU (None: all, or none named) and its status."""

    category: str
    test: str
    gpu: int | None  # None: a result for all GPUs (the software/deployment tests) or one without an id
    status: str  # pass | fail | warn | skip | not-run
    messages: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DcgmResult:
        """The inverse of as_dict (a snapshot's stored results)."""
        gpu = data.get("gpu")
        return cls(str(data.get("category") or ""), str(data.get("test") or ""),
                   int_or_none(gpu), str(data.get("status") or "not-run"),
                   tuple(str(m) for m in data.get("messages") or ()))


def _dcgm_status(text: Any) -> str:
    low = str(text or "").strip().lower().replace("_", " ")
    if low in ("pass", "passed"):
        return "pass"
    if low in ("fail", "failed"):
        return "fail"
    if low in ("warn", "warning"):
        return "warn"
    if low in ("skip", "skipped"):
        return "skip"
    # "Not Run", "" and words this parser has never seen: never read as a pass
    return "not-run"


def _dcgm_messages(result: Mapping[str, Any]) -> tuple[str, ...]:
    msgs: list[str] = []
    for key in ("warnings", "info", "warning"):
        value = result.get(key)
        items = value if isinstance(value, list) else [value] if value else []
        for item in items:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("message") or item.get("info")
                if text:
                    msgs.append(str(text))
            elif item:
                msgs.append(str(item))
    return tuple(msgs)


def _dcgm_gpu(result: Mapping[str, Any]) -> int | None:
    if "entity_id" in result:  # DCGM 4: entity_group GPU + entity_id
        if str(result.get("entity_group", "GPU")).upper() not in ("GPU", ""):
            return None
        return int_or_none(result.get("entity_id"))
    for key in ("gpu_id", "gpu_ids"):  # DCGM 2/3: a string, "0" (or "0,1" for a combined result)
        value = result.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return int_or_none(value)
        if isinstance(value, str) and value.strip().isdigit():
            return bounded_int(value.strip())
    return None


def parse_dcgmi_diag_json(text: str, source: str = "dcgmi diag -j") -> list[DcgmResult]:
    """`dcgmi diag -r N -j` (DCGM 2.x/3.x "DCGM GPU Diagnostic", DCGM 4.x "DCGM Diagnostic" with
    entity_group/entity_id and a test_summary) -> one DcgmResult per test and GPU. A banner before the JSON
    ("Successfully ran diagnostic for group.") is skipped. A test without per-GPU results contributes its
    test_summary status."""
    start = text.find("{")
    if start < 0:
        raise HealthParseError(source, "no JSON object in the output")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise HealthParseError(source, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise HealthParseError(source, "expected a JSON object")
    diag = doc.get("DCGM GPU Diagnostic", doc.get("DCGM Diagnostic"))
    if not isinstance(diag, dict):
        raise HealthParseError(source, "no 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object")
    categories = diag.get("test_categories")
    if not isinstance(categories, list):
        if diag.get("runtime_error"):
            raise HealthParseError(source, f"runtime_error: {diag['runtime_error']}")
        raise HealthParseError(source, "no test_categories array")
    out: list[DcgmResult] = []
    for ci, cat in enumerate(categories):
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            raise HealthParseError(source, f"test_categories[{ci}]: expected an object with a tests array")
        cname = str(cat.get("category", ""))
        for ti, test in enumerate(cat["tests"]):
            if not isinstance(test, dict):
                raise HealthParseError(source, f"test_categories[{ci}].tests[{ti}]: expected an object")
            tname = str(test.get("name", ""))
            raw_results = test.get("results")
            results: list[Any] = raw_results if isinstance(raw_results, list) else []
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else None
            for r in results:
                if isinstance(r, dict):
                    out.append(DcgmResult(cname, tname, _dcgm_gpu(r), _dcgm_status(r.get("status")),
                                          _dcgm_messages(r)))
            if not results and summary is not None:
                out.append(DcgmResult(cname, tname, None, _dcgm_status(summary.get("status")),
                                      _dcgm_messages(summary)))
    return out


# dcgmi diag levels take minutes (3: ~30 min on 8 GPUs; 4: hours): generous, but bounded.
DCGM_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0, 4: 4 * 3600.0}


def collect_dcgm(paths: HealthPaths, level: int) -> dict[str, Any]:
    """`dcgmi diag -r LEVEL -j`. Exits non-zero when a test fails, with the JSON still on stdout: that JSON is
    the result, so a non-zero exit with parseable output is read, not unavailable."""
    if level not in DCGM_TIMEOUT_S:
        raise ValueError(f"dcgm level must be 1-4, got {level!r}")

    def read() -> dict[str, Any]:
        argv = [paths.dcgmi, "diag", "-r", str(level), "-j"]
        try:
            out = run_command(argv, timeout=DCGM_TIMEOUT_S[level], check=False)
        except SlurmCommandNotFound:
            raise Unavailable(f"{paths.dcgmi}: not found on PATH") from None
        except SlurmTimeout:
            raise Unavailable(f"{' '.join(argv)}: timed out after {DCGM_TIMEOUT_S[level]:g}s") from None
        if not out.stdout.strip():
            detail = (out.stderr.strip() or "(no output)").splitlines()[0][:200]
            raise Unavailable(f"{' '.join(argv)}: exited {out.returncode}: {detail}")
        results = parse_dcgmi_diag_json(out.stdout, source=" ".join(argv))
        return ok(level=level, exit_code=out.returncode, results=[r.as_dict() for r in results])

    return guard(read)


def judge_dcgm(node: str, results: Sequence[DcgmResult]) -> list[HealthFinding]:
    """dcgmi diag results: fail -> CRITICAL, warn -> WARNING (skip and not-run are not judged here: a caller
    that needs a test run checks for it)."""
    out: list[HealthFinding] = []
    for r in results:
        if r.status not in ("fail", "warn"):
            continue
        sev = Nagios.CRITICAL if r.status == "fail" else Nagios.WARNING
        where = f"GPU {r.gpu}" if r.gpu is not None else "all GPUs"
        msg = "; ".join(r.messages)[:300]
        out.append(HealthFinding(node, "dcgm", sev, r.test, f"{node}: dcgmi diag {r.category}/{r.test} "
                                 f"{r.status} on {where}" + (f": {msg}" if msg else ""),
                                 {"category": r.category, "test": r.test, "gpu": r.gpu, "status": r.status,
                                  "messages": list(r.messages)}))
    return out


def _collect(r: Request) -> dict[str, Any] | None:
    return collect_dcgm(r.paths, r.dcgm_level) if r.phase == "before" and r.dcgm_level else None


# The snapshot's data (SOURCE.shape).
SHAPE = obj({"level": integer(), "exit_code": integer(), "results": list_of(obj({
    "category": string(), "test": string(), "gpu": integer(True), "status": string(enum=DCGM_STATUSES),
    "messages": list_of(string())}))}, required=["results"])

SOURCE = Source("dcgm", _collect, on_request=True, shape=SHAPE)
