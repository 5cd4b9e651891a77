"""`gpuclust report show` (issue 30 item 4) on the real lab recording: the same figures as report.json, rows for
log shippers, plain text when piped, unknown never 0."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
# Real Slurm 22.05.8 output (README there): GPUs, failures (FAILED 3:0, 1:0, a REQUEUED row), prices in site.conf.
# No usage TRES (22.05 gathers no gres/gpuutil): busy and held-idle are unknown, which the tests check.
DUMP = DATA / "lab-parsable.txt"
WINDOW = ("--delimiter", "\\x1f|\\x1e", "--since", "2026-12-02", "--until", "2026-12-03")


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "site.conf"
    if not conf.exists():
        conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests",
                                                                  str(tmp_path / "state")))
    return conf


def _show(tmp_path: Path, *extra: str, dump: Path = DUMP, color: bool = False) -> Any:
    args = ["--config", str(_conf(tmp_path)), "report", "show", "--input", str(dump), *WINDOW, *extra]
    return CliRunner().invoke(cli, args, color=color)


def _summary(tmp_path: Path, *extra: str, dump: Path = DUMP) -> dict[str, Any]:
    result = _show(tmp_path, "--format", "json", *extra, dump=dump)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _jsonl(tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    result = _show(tmp_path, "--format", "jsonl", *extra)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.fixture
def built(tmp_path: Path) -> Path:
    """report build --input of the same dump and window: report.json and the CSVs."""
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(_conf(tmp_path)), "report", "build", "--input", str(DUMP),
                                      *WINDOW, "--out", str(out), "--format", "json,csv"])
    assert result.exit_code == 0, result.output
    return out


def _at(doc: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        doc = doc[part]
    return doc


def test_headline_equals_report_json(tmp_path: Path, built: Path) -> None:
    report = json.loads((built / "report.json").read_text())
    summary = _summary(tmp_path)
    figures = {f["name"]: f for f in summary["headline"]}
    assert list(figures) == ["cost per completed run", "completed-run share of allocated GPU-hours",
                             "busy share of covered GPU-hours", "coverage", "held-idle GPU-hours"]
    for figure in summary["headline"]:
        expected = _at(report, figure["key"])
        if figure["key"] == "gpu_use.totals.util_mean_pct":  # shown as a share, busy / covered
            expected = None if expected is None else expected / 100
        assert figure["value"] == expected, figure
    # The hand-checked day (tests/data/accounting/README.md): 45 GPU-s cost 0.03125 over 11 completed runs,
    # completed-run 38 of 45 GPU-s.
    assert figures["cost per completed run"]["value"] == pytest.approx(0.03125 / 11)
    assert figures["completed-run share of allocated GPU-hours"]["value"] == pytest.approx(38 / 45)
    assert figures["coverage"]["value"] == 0.0
    top = report["top_failures"][:5]
    assert [f["job_id"] for f in summary["top_failures"]] == [f["job_id"] for f in top] == ["4", "6_1", "5"]
    assert [f["gpu_hours"] for f in summary["top_failures"]] == [f["gpu_hours"] for f in top]


def test_unknown_shows_as_unknown_never_zero(tmp_path: Path) -> None:
    summary = _summary(tmp_path)
    figures = {f["name"]: f for f in summary["headline"]}
    for name in ("busy share of covered GPU-hours", "held-idle GPU-hours"):
        assert figures[name]["value"] is None and figures[name]["absent"] == "unknown"
    assert all(g["busy_gpu_hours"] is None and g["held_idle_gpu_hours"] is None for g in summary["groups"])
    result = _show(tmp_path, "--wide")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(line.split()[:2] == ["held-idle", "GPU-hours"] and line.split()[2] == "unknown" for line in lines)
    header = next(line for line in lines if line.strip().startswith("partition "))
    gpu = next(line for line in lines if line.strip().startswith("gpu "))
    # columns: the header's names split on two spaces or more; the busy and held-idle cells say unknown
    names = [c for c in header.strip().split("  ") if c]
    cells = gpu.split()
    assert cells[names.index("busy GPU-h")] == "unknown"
    assert cells[names.index("held-idle GPU-h")] == "unknown"


def test_no_alloctres_makes_gpu_hours_and_cost_unknown(tmp_path: Path) -> None:
    """A dump without AllocTRES: the report sums GPU-hours to 0 and names the gap; show says unknown."""
    lines = DUMP.read_text().split("\n")
    head = lines[0].split("\x1f|\x1e")
    col = head.index("AllocTRES")
    narrow = tmp_path / "narrow.txt"
    kept = []
    for line in lines:
        fields = line.split("\x1f|\x1e")
        if len(fields) == len(head):
            del fields[col]
        kept.append("\x1f|\x1e".join(fields))
    narrow.write_text("\n".join(kept))
    summary = _summary(tmp_path, dump=narrow)
    assert summary["gpus_unknown"] is True
    figures = {f["name"]: f for f in summary["headline"]}
    assert figures["cost per completed run"]["value"] is None
    assert figures["cost per completed run"]["absent"] == "unknown"
    assert figures["completed-run share of allocated GPU-hours"]["value"] is None
    assert all(g[k] is None for g in summary["groups"] for k in ("gpu_hours", "completed_run_gpu_hours", "cost"))
    assert any("no AllocTRES" in note for note in summary["notes"])
    text = _show(tmp_path, dump=narrow).stdout
    gpu = next(line for line in text.splitlines() if line.strip().startswith("gpu "))
    assert gpu.split()[3] == "unknown" and " 0 " not in gpu.split("unknown")[0]


@pytest.mark.parametrize("by", ["partition", "account"])
def test_groups_sum_to_the_totals(tmp_path: Path, built: Path, by: str) -> None:
    report = json.loads((built / "report.json").read_text())
    groups = _summary(tmp_path, "--by", by, "--sort", "name")["groups"]
    assert [g[by] for g in groups] == sorted(r[by] for r in report["runs"][f"by_{by}"])
    totals, use = report["totals"], report["gpu_use"]["totals"]
    for key in ("runs", "completed", "gpu_hours", "completed_run_gpu_hours", "cost"):
        assert sum(g[key] for g in groups) == pytest.approx(totals[key], abs=1e-8), key
    for key in ("allocated_gpu_hours", "covered_gpu_hours", "unknown_jobs"):
        assert sum(g[key] for g in groups) == pytest.approx(use[key]), key


def test_by_user_carries_runs_and_cost(tmp_path: Path, built: Path) -> None:
    """Per user the runs' figures are the report's own (runs.by_user, runs_by_user.csv): runs, completed, cost and
    cost per completed run, never n/a where prices are set (issue 45 item 2)."""
    report = json.loads((built / "report.json").read_text())
    summary = _summary(tmp_path, "--by", "user")
    assert [g["user"] for g in summary["groups"]] == ["root"]
    assert sum(g["allocated_gpu_hours"] for g in summary["groups"]) == pytest.approx(
        report["gpu_use"]["totals"]["allocated_gpu_hours"])
    (root_row,) = summary["groups"]
    totals = report["totals"]
    for key in ("runs", "completed", "cost", "cost_per_completed_run", "gpu_hours", "completed_run_gpu_hours"):
        assert root_row[key] == pytest.approx(totals[key]), key
    assert [r["user"] for r in report["runs"]["by_user"]] == ["root"]
    assert not any("per user" in n for n in summary["notes"])
    with (built / "runs_by_user.csv").open(newline="") as fh:
        assert [r["user"] for r in csv.DictReader(fh)] == ["root"]
    root = next(line for line in _show(tmp_path, "--by", "user").stdout.splitlines() if line.strip().startswith("root"))
    assert root.split()[1] == str(totals["runs"]) and "n/a" not in root


def test_jsonl_rows_parse_and_count(tmp_path: Path, built: Path) -> None:
    report = json.loads((built / "report.json").read_text())
    with (built / "gpu_use_jobs.csv").open(newline="") as fh:
        jobs_csv = list(csv.DictReader(fh))
    jobs = _jsonl(tmp_path, "--rows", "jobs")
    assert len(jobs) == len(jobs_csv) == 15
    assert [j["job_id"] for j in jobs] == [r["job_id"] for r in jobs_csv]
    assert all(j["row"] == "job" and j["cluster"] == "acct" and j["period_start"] == report["period"]["start"]
               for j in jobs)
    assert all(j["busy_gpu_hours"] is None for j in jobs)  # unknown is null, never 0 or NaN
    findings = _jsonl(tmp_path, "--rows", "findings", "--top", "20")
    assert len(findings) == len(report["top_failures"]) + len(report["gpu_use"]["worst_held_idle"]) == 3
    assert {f["kind"] for f in findings} == {"failure"}
    runs = _jsonl(tmp_path, "--rows", "runs", "--by", "account")
    assert len(runs) == len(report["runs"]["by_account"])
    assert [r["runs"] for r in runs] == [r["runs"] for r in report["runs"]["by_account"]]


def test_piped_output_is_plain_and_a_terminal_gets_bold_headings(tmp_path: Path) -> None:
    piped = _show(tmp_path)
    assert piped.exit_code == 0, piped.output
    assert "\x1b" not in piped.output
    assert piped.stdout.index("Answers") < piped.stdout.index("Top failures") < piped.stdout.index("By partition")
    assert "\x1b[1m" in _show(tmp_path, color=True).stdout
    # A real pipe: the installed entry point, stdout a pipe, not CliRunner's buffer.
    code = "import sys; from gpuclust.cli.main import main; sys.argv[0] = 'gpuclust'; main()"
    cp = subprocess.run([sys.executable, "-c", code, "--config", str(_conf(tmp_path)), "report", "show",
                         "--input", str(DUMP), *WINDOW], capture_output=True, text=True, check=False, timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert "\x1b" not in cp.stdout and "cost per completed run" in cp.stdout


def test_empty_period_says_so_and_exits_0(tmp_path: Path) -> None:
    args = ("--since", "2027-01-01", "--until", "2027-01-02")
    result = _show(tmp_path, *args)
    assert result.exit_code == 0, result.output
    assert "no job attempts in the period 2027-01-01" in result.stdout
    summary = _summary(tmp_path, *args)
    assert summary["empty"] is True
    rows = _show(tmp_path, "--format", "jsonl", *args)
    assert rows.exit_code == 0 and rows.stdout == "" and "no job attempts" in rows.stderr


def test_no_file_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = set(tmp_path.rglob("*"))
    assert _show(tmp_path).exit_code == 0
    assert set(tmp_path.rglob("*")) - before == {tmp_path / "site.conf"} - before


def test_bad_input_is_a_click_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("no header here\n")
    result = _show(tmp_path, dump=bad)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Error:" in result.output and "bad.txt" in result.output


def test_help_and_choices() -> None:
    from gpuclust.accounting.output import show
    from gpuclust.cli import report

    result = CliRunner().invoke(cli, ["report", "show", "--help"])
    assert result.exit_code == 0
    for option in ("--by", "--format", "--rows", "--since", "--input", "--top"):
        assert option in result.output
    assert "completed-run" in result.output
    # spelled out in the CLI so that --help does not import the library (pandas)
    assert report.SHOW_BY == show.BY and report.SHOW_ROWS == show.ROWS


def test_rows_without_jsonl_is_a_usage_error(tmp_path: Path) -> None:
    result = _show(tmp_path, "--rows", "runs")
    assert result.exit_code == 2 and "--rows goes with --format jsonl" in result.output


def test_user_text_with_escape_sequences_is_shown_never_obeyed(tmp_path: Path) -> None:
    """An account and job names carrying terminal escapes (the real recording, with its `physics` account renamed
    by a hostile sacctmgr entry): the table shows the escape as text, and no raw ESC or BEL reaches the terminal
    (issue 42, class 7)."""
    hostile = "phy\x1b[2J\x1b]0;pwned\x07sics"
    dump = tmp_path / "hostile.txt"
    dump.write_bytes(DUMP.read_bytes().replace(b"physics", hostile.encode()))
    result = _show(tmp_path, "--by", "account", dump=dump)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "phy\\x1b[2J\\x1b]0;pwned\\x07sics" in result.stdout
    as_json = _summary(tmp_path, "--by", "account", dump=dump)  # JSON keeps the raw value
    assert hostile in {g["account"] for g in as_json["groups"]}
