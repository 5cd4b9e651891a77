"""One figure, one value (issue 45 item 4): a figure that report.json gives in two sections holds the same value in
both. The unit economics' window terms equal the totals' figures when every attempt lies inside the window."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "accounting"

# (totals key, economics.total path): the same figure under the report's and the unit economics' names
SAME_FIGURE = (
    ("gpu_hours", ("allocated_gpu_hours",)),
    ("completed_run_gpu_hours", ("terms", "completed_run", "gpu_hours")),
    ("completed", ("completed",)),
)


def _build(tmp_path: Path, dump: Path, conf_text: str, *extra: str) -> dict[str, Any]:
    conf = tmp_path / "site.conf"
    conf.write_text(conf_text)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump), *extra,
                                      "--format", "json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads((out / "report.json").read_text())
    return doc


def _at(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _assert_one_value(doc: dict[str, Any]) -> None:
    total = doc["economics"]["total"]
    for key, path in SAME_FIGURE:
        assert _at(total, path) == pytest.approx(doc["totals"][key], rel=1e-9, abs=1e-5), key


def test_a_generated_month_gives_each_figure_one_value(tmp_path: Path) -> None:
    """The issue's case: a messy generated month, whose Elapsed is a second short of End - Start on half its rows
    (as a suspended job's is shorter by its suspension): the economics counted End - Start, the totals Elapsed."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import accounting_bench as bench
    finally:
        sys.path.pop(0)
    dump = tmp_path / "month.txt"
    bench.generate(dump, 4000, messy=True, usage=True)
    doc = _build(tmp_path, dump, bench.CONF, "--delimiter", "\\x1f|\\x1e")
    _assert_one_value(doc)


def test_the_lab_recording_gives_each_figure_one_value(tmp_path: Path) -> None:
    conf = (DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "state"))
    doc = _build(tmp_path, DATA / "lab-parsable.txt", conf, "--delimiter", "\\x1f|\\x1e")
    _assert_one_value(doc)
