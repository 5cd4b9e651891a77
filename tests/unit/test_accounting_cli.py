"""`gpuclust report build/fetch` end to end on the lab recordings: outputs, contract keys, atomic files."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

from click.testing import CliRunner

from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.slurm.replay import ReplaySlurmClient

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "state")))
    return conf


def _build(tmp_path: Path, *extra: str, input_name: str = "lab-parsable.txt", delimiter: str = "\\x1f|\\x1e"):
    out = tmp_path / "out"
    args = ["--config", str(_conf(tmp_path)), "report", "build", "--input", str(DATA / input_name),
            "--delimiter", delimiter, "--since", "2026-12-02", "--until", "2026-12-03", "--out", str(out), *extra]
    return CliRunner().invoke(cli, args), out


def test_build_writes_every_output_with_contract_keys(tmp_path):
    result, out = _build(tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads((out / "report.json").read_text())
    assert set(data["period"]) == {"start", "end"}
    for dim in ("by_partition", "by_account", "by_qos"):
        assert all(set(r) >= {"jobs", "median_s", "p90_s", "max_s"} for r in data["queue_wait"][dim])
    keys = {"runs", "completed", "attempts", "retries", "gpu_hours", "completed_run_gpu_hours", "cost", "cost_per_completed_run"}
    for dim in ("by_account", "by_partition"):
        assert all(set(r) >= keys for r in data["runs"][dim])
    assert set(data["totals"]) >= keys
    assert all(set(f) >= {"job_id", "user", "account", "partition", "state", "exit_code", "gpu_hours", "cost"}
               for f in data["top_failures"])
    assert "required_gpus" in data["sizing"]
    html = (out / "report.html").read_text()
    charts = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    assert len(charts) == 4 and html.count("<svg") == 4  # four inline SVG charts
    for chart in charts:
        ElementTree.fromstring(chart)  # each one is well-formed standalone XML
    assert "data:image" not in html and "<img" not in html
    assert not re.search(r"""\b(src|href)\s*=\s*['"]?(https?:|//)""", html)  # self-contained
    assert "Metric definitions" in html and "Start - Eligible" in html
    assert "acct-flaky" in html
    # Issue 15 asks for sortable tables with tiny inline JS (no CDN): one inline script, no src, small.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S)
    assert len(scripts) == 1 and scripts[0][0] == "" and len(scripts[0][1]) < 2000
    prom = (out / "gpuclust.prom").read_text()
    for line in prom.splitlines():
        assert line.startswith("# ") or re.fullmatch(r'gpuclust_report_\w+(\{[^}]*\})? -?[0-9.e+-]+', line), line
    assert 'gpuclust_report_runs{cluster="acct"} 12.0' in prom  # issue 15: a cluster label, written by prometheus_client
    assert (out / "runs_by_account.csv").read_text().startswith("account,runs,completed,attempts,retries,")
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left


def test_json_input_and_json_flag(tmp_path):
    result, _ = _build(tmp_path, "--json", "--format", "json", input_name="lab-json.json", delimiter="|")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["input"]["exit_codes_known"] is False and data["input"]["notes"]
    assert {f["exit_code"] for f in data["top_failures"]} == {None}


def test_strict_fails_on_unparseable_rows_and_default_reports_them(tmp_path):
    bad = tmp_path / "bad.txt"
    text = (DATA / "lab-pipe.txt").read_text().splitlines()
    text[3] = text[3].replace("COMPLETED", "completed?")
    bad.write_text("\n".join(text) + "\n")
    out = tmp_path / "o"
    base = ["--config", str(_conf(tmp_path)), "report", "build", "--input", str(bad), "--out", str(out), "--format", "json"]
    result = CliRunner().invoke(cli, base)
    assert result.exit_code == 0
    assert "warning:" in result.output and ":4:" in result.output
    assert json.loads((out / "report.json").read_text())["input"]["rejected_rows"] == 1
    result = CliRunner().invoke(cli, [*base, "--strict"])
    assert result.exit_code == 2


def test_bad_format_and_period_are_input_errors(tmp_path):
    result, _ = _build(tmp_path, "--format", "pdf")
    assert result.exit_code == 2
    result, _ = _build(tmp_path, "--period", "yesterday")
    assert result.exit_code == 2  # --period together with --since/--until


def test_fetch_through_replay_client(tmp_path):
    from datetime import date

    client = ReplaySlurmClient()
    # (recorded with the fetch's current argv, Reason included: tests/data/accounting/reason/README.md)
    client.add("sacct", sacct_args(date(2026, 12, 3)),
               (DATA / "reason" / "22.05" / "lab-parsable.txt").read_text(encoding="utf-8"))
    # (every fetch reads the node inventory once: the lab's recorded one, tests/data/economics)
    client.add("scontrol", ["show", "node", "-o"], (DATA.parent / "economics" / "nodes.txt").read_text(encoding="utf-8"))
    args = ["--config", str(_conf(tmp_path)), "report", "fetch", "--since", "2026-12-03", "--until", "2026-12-04", "--json"]
    result = CliRunner().invoke(cli, args, obj=AppContext(client=client))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["days"][0]["rows"] == 15
