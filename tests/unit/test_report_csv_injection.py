"""CSV formula injection (issue 45 item 12): job names and comments' labels are the users' text; in the report's
CSVs a text cell starting with = + - @ tab or CR gets a leading "'" (OWASP), whichever writer writes the table
(pandas, or Arrow for a long one), numbers untouched; report.json keeps the raw value."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.csv as pacsv
import pytest
from click.testing import CliRunner

from gpuclust.accounting.output import render
from gpuclust.cli.main import cli

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
DUMP = DATA / "lab-parsable.txt"  # real Slurm 22.05 output, delimiter \x1f|\x1e (as test_report_show reads it)
WINDOW = ("--delimiter", "\\x1f|\\x1e", "--since", "2026-12-02", "--until", "2026-12-03")
DANGEROUS = ("=", "+", "-", "@", "\t", "\r")
# Label values and job names as a user can set them (sbatch --comment, --job-name). Arrow's writer takes no value
# holding a comma or a quote (such a table falls back to pandas), so its set has none.
HOSTILE = {
    "pandas": {"team=physics": 'team==HYPERLINK("http://x","x")', "team=ml": "team=+ml",
               "project=": "project=@SUM(1+1)-", "model=": "model=-", "acct-": "=acct-"},
    "arrow": {"team=physics": "team==1+2", "team=ml": "team=+ml", "project=": "project=@SUM(1+1)-",
              "model=": "model=-", "acct-": "@acct-"},
}


def _dump(tmp_path: Path, writer: str) -> Path:
    text = DUMP.read_text()
    for old, new in HOSTILE[writer].items():
        text = text.replace(old, new)
    path = tmp_path / f"hostile-{writer}.txt"
    path.write_text(text)
    return path


def _build(tmp_path: Path, dump: Path, out: Path) -> None:
    conf = tmp_path / "site.conf"
    if not conf.exists():
        conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests",
                                                                  str(tmp_path / "state")))
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump), *WINDOW,
                                      "--out", str(out), "--format", "json,csv"])
    assert result.exit_code == 0, result.output


def _cells(out: Path) -> dict[str, list[list[str]]]:
    """Each CSV's rows as Python's csv module reads them, generated_at (the build's clock) left out."""
    tables = {}
    for path in sorted(out.glob("*.csv")):
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
        clock = rows[0].index("generated_at")
        tables[path.name] = [row[:clock] + row[clock + 1:] for row in rows]
    return tables


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


@pytest.mark.parametrize("writer", ["pandas", "arrow"])
def test_hostile_text_is_neutralised_in_every_csv(writer: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = _dump(tmp_path, writer)
    arrow_writes: list[int] = []
    if writer == "arrow":  # every table through Arrow's writer, and proof that it wrote them
        monkeypatch.setattr(render, "LARGE_CSV_ROWS", 1)
        write_csv = pacsv.write_csv
        monkeypatch.setattr(pacsv, "write_csv", lambda *a, **k: (arrow_writes.append(1), write_csv(*a, **k))[1])
    _build(tmp_path, dump, tmp_path / "safe")
    safe = _cells(tmp_path / "safe")
    if writer == "arrow":
        assert arrow_writes
    # The same build with the rule switched off: what the CSVs held before (and proof the dump reaches them).
    with monkeypatch.context() as m:
        m.setattr(render, "spreadsheet_safe", lambda value: value)
        m.setattr(render, "_spreadsheet_safe_frame", lambda frame: frame)
        m.setattr(render, "_spreadsheet_safe_table", lambda table: table)
        _build(tmp_path, dump, tmp_path / "raw")
    raw = _cells(tmp_path / "raw")
    assert list(safe) == list(raw) and "runs_by_label_team.csv" in safe
    hostile = [(name, cell) for name, rows in raw.items() for row in rows[1:] for cell in row
               if cell.startswith(DANGEROUS) and _number(cell) is None]
    assert {name for name, _ in hostile} >= {"runs_by_label_team.csv", "runs_by_label_project.csv"}, hostile
    for name, rows in safe.items():
        assert len(rows) == len(raw[name]) and rows[0] == raw[name][0], name
        for row, raw_row in zip(rows[1:], raw[name][1:], strict=True):
            assert len(row) == len(raw_row), name
            for cell, raw_cell in zip(row, raw_row, strict=True):
                if _number(raw_cell) is not None:  # a number is never touched (-1.5 stays -1.5)
                    assert cell == raw_cell and _number(cell) == _number(raw_cell), (name, cell)
                elif raw_cell.startswith(DANGEROUS):
                    assert cell == "'" + raw_cell, (name, cell)
                else:
                    assert cell == raw_cell, (name, cell)
                assert _number(cell) is not None or not cell.startswith(DANGEROUS), (name, cell)
    # report.json keeps the users' text as it is
    doc = json.dumps(json.loads((tmp_path / "safe" / "report.json").read_text()))
    teams = [row[0] for row in raw["runs_by_label_team.csv"][1:] if row[0].startswith(DANGEROUS)]
    assert len(teams) == 2, teams
    for team in teams:
        assert json.dumps(team) in doc and json.dumps("'" + team) not in doc


@pytest.mark.parametrize("value", ["=1+2", "+1", "-x", "@SUM(A1)", "\tx", "\rx"])
def test_spreadsheet_safe(value: str) -> None:
    assert render.spreadsheet_safe(value) == "'" + value
    assert render.spreadsheet_safe(-1.5) == -1.5 and render.spreadsheet_safe("") == ""
    assert render.spreadsheet_safe(None) is None and render.spreadsheet_safe("a=1") == "a=1"
