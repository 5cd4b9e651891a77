"""Two reports' figures compared (a partitioned build against the one-table build of the same rows): every figure
of report.json that a build computes, floats to 1e-9 relative (sums are added in another order)."""

from __future__ import annotations

import math
from typing import Any

FIGURES = ("totals", "sizing", "runs", "queue_wait", "hold", "top_failures", "economics", "gpu_use")


def figures(report: Any) -> dict[str, Any]:
    data = report.data
    out = {name: data.get(name) for name in FIGURES}
    out["input"] = {k: data["input"].get(k) for k in ("rows", "attempts_in_period", "left_out", "unknown",
                                                      "filtered_out", "rejected_rows", "days_read")}
    return out


def assert_same(a: Any, b: Any, path: str = "", *, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> None:
    """Equal, floats to `rel_tol` relative or `abs_tol` absolute (sums are added in another order)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), path
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}", rel_tol=rel_tol, abs_tol=abs_tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]", rel_tol=rel_tol, abs_tol=abs_tol)
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol), (path, a, b)
    else:
        assert a == b, (path, a, b)
