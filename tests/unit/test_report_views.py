"""The report for the people who read it (issue 45 items 1, 2, 3, 5, 7), on a generated month
(`benchmarks/accounting_bench.py --messy --usage`: three partitions, 400 users, labels, failures, usage TRES):
the answers first (queue wait, total cost), spend per user, which jobs held which GPUs, `report show` fitted to
80 and 120 columns, and every header, unit and rounding from the figures catalogue."""

from __future__ import annotations

import csv
import html
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.output import render
from gpuclust.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
WINDOW = ("--delimiter", "\\x1f|\\x1e", "--since", "2026-11-01", "--until", "2026-12-01")
HOSTILE_NAME = "=HYPERLINK(\"http://x\",\"y\")"


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import accounting_bench as bench
    finally:
        sys.path.pop(0)
    tmp = tmp_path_factory.mktemp("month")
    dump = tmp / "month.txt"
    bench.generate(dump, 4000, messy=True, usage=True)
    # one job name a spreadsheet would run, and one a terminal would obey
    text = dump.read_text(encoding="utf-8")
    first = re.search(r"train-\d+", text)
    assert first
    dump.write_text(text.replace(first.group(0), HOSTILE_NAME), encoding="utf-8")
    conf = tmp / "site.conf"
    conf.write_text(bench.CONF + "\n[costs]\ncurrency = EUR\n")
    out = tmp / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump), *WINDOW,
                                      "--out", str(out), "--format", "html,csv,json"])
    assert result.exit_code == 0, result.output
    return {"dump": dump, "conf": conf, "out": out, "json": json.loads((out / "report.json").read_text()),
            "html": (out / "report.html").read_text(encoding="utf-8")}


def _show(month: dict[str, Any], *extra: str, columns: int | None = None) -> str:
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": ""}
    result = CliRunner().invoke(cli, ["--config", str(month["conf"]), "report", "show", "--input",
                                      str(month["dump"]), *WINDOW, *extra], env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def _csv(month: dict[str, Any], name: str) -> list[dict[str, str]]:
    with (month["out"] / f"{name}.csv").open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---- item 1: the answers first -------------------------------------------------------------------------------


def test_the_band_and_the_answers_carry_queue_wait_and_total_cost(month: dict[str, Any]) -> None:
    doc, page = month["json"], month["html"]
    band = page[page.index("<section class='band'"):page.index("</section>")]
    assert f"data-figure='cost'><div class='name'>Cost (EUR)</div><div class='v'>{render.number(doc['totals']['cost'])}" \
        in band
    waits = doc["queue_wait"]["by_partition"]
    assert len(waits) == 3
    for row in waits:
        card = band[band.index(f"data-partition='{row['partition']}'"):]
        card = card[:card.index("</div></div>") + 12]
        assert f"<div class='v'>{render.duration(row['median_s'])}</div>" in card
        assert f"p90 queue wait {render.duration(row['p90_s'])}" in card
    summary = json.loads(_show(month, "--format", "json"))
    assert summary["total_cost"]["value"] == doc["totals"]["cost"]
    assert {w["partition"]: (w["median_s"], w["p90_s"]) for w in summary["queue_wait"]} == \
        {w["partition"]: (w["median_s"], w["p90_s"]) for w in waits}
    text = _show(month)
    answers = text[text.index("Answers"):text.index("Top failures")]
    assert re.search(r"\n  cost\s+[\d,]+ EUR", answers)
    for row in waits:
        assert f"median queue wait, {row['partition']}" in answers


# ---- item 2: spend per user, groups by cost -------------------------------------------------------------------


def test_every_group_carries_its_cost_and_groups_sort_by_cost(month: dict[str, Any]) -> None:
    doc = month["json"]
    for by in ("user", "account", "partition"):
        groups = json.loads(_show(month, "--format", "json", "--by", by))["groups"]
        costs = [g["cost"] for g in groups]
        assert all(c is not None for c in costs) and costs == sorted(costs, reverse=True), by
        assert all(g["runs"] is not None and g["completed"] is not None for g in groups)
        assert sum(g["runs"] for g in groups) == doc["totals"]["runs"], by
        assert sum(costs) == pytest.approx(doc["totals"]["cost"]), by
    users = {r["user"]: r for r in doc["runs"]["by_user"]}
    assert len(users) > 100 and sum(r["cost"] for r in users.values()) == pytest.approx(doc["totals"]["cost"])
    assert len(_csv(month, "runs_by_user")) == len(users)
    text = _show(month, "--by", "user", "--top", "3")
    table = text[text.index("By user"):].splitlines()
    rows = [line for line in table if re.match(r"  user\d", line)]
    assert len(rows) == 3 and f"{len(users) - 3} more user(s)" in text
    by_name = json.loads(_show(month, "--format", "json", "--by", "user", "--sort", "name"))["groups"]
    assert [g["user"] for g in by_name] == sorted(users)
    # the page: per-user cost, its top rows by cost and a link to the whole CSV
    assert "<h3 id='runs_by_user'>Runs by user</h3>" in month["html"]
    assert "every row is in <a href='runs_by_user.csv'>runs_by_user.csv</a>" in month["html"]


# ---- item 3: which jobs used which GPUs ---------------------------------------------------------------------


def test_the_jobs_table_says_which_job_held_which_gpus(month: dict[str, Any]) -> None:
    rows = _csv(month, "gpu_use_jobs")
    for column in ("job_name", "node_list", "gpu_type", "start", "end"):
        assert all(r[column] for r in rows), column
    assert {r["gpu_type"] for r in rows} <= {"h100", "a100"}
    assert all(r["start"] < r["end"] for r in rows)
    hostile = [r for r in rows if "HYPERLINK" in r["job_name"]]
    assert hostile and all(r["job_name"] == "'" + HOSTILE_NAME for r in hostile)  # spreadsheet_safe
    page = month["html"]
    assert "<h3 id='gpu_use_jobs'>Jobs and their GPUs</h3>" in page
    jobs = page[page.index("<h3 id='gpu_use_jobs'>"):]
    jobs = jobs[:jobs.index("</table>")]
    for header in ("Job name", "NodeList", "GPU type", "Start (UTC)", "End (UTC)"):
        assert f">{header}</th>" in jobs
    assert html.escape(HOSTILE_NAME) in page or HOSTILE_NAME not in jobs
    lines = [json.loads(x) for x in _show(month, "--format", "jsonl", "--rows", "jobs").splitlines()]
    assert len(lines) == len(rows) and all(x["node_list"] and x["gpu_type"] and x["end"] for x in lines)


# ---- item 5: fitted to the terminal ---------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 120])
@pytest.mark.parametrize("by", ["partition", "user", "account"])
def test_show_fits_the_terminal(month: dict[str, Any], columns: int, by: str) -> None:
    text = _show(month, "--by", by, columns=columns)
    long = [line for line in text.splitlines() if len(line) > columns]
    assert long == []
    head = next(line for line in text.splitlines() if line.startswith(f"  {by} "))
    assert "runs" in head and "cost" in head
    if columns == 80:
        assert "--wide shows" in text
    wide = _show(month, "--by", by, "--wide", columns=columns)
    head = next(line for line in wide.splitlines() if line.startswith(f"  {by} "))
    assert all(str(f.show) in head for f in catalog.show_columns())


def test_show_into_a_pipe_fits_80_columns_and_wide_keeps_every_column(month: dict[str, Any]) -> None:
    # no terminal and no COLUMNS (a cron mail, `| less`): 80 columns, as a terminal would be sure to have
    text = _show(month)
    assert max(len(line) for line in text.splitlines()) <= 80
    wide = _show(month, "--wide")
    head = next(line for line in wide.splitlines() if line.startswith("  partition "))
    assert all(str(f.show) in head for f in catalog.show_columns())


# ---- item 7: one declaration per figure ---------------------------------------------------------------------


def test_every_page_table_has_declared_titles_and_headers(month: dict[str, Any]) -> None:
    page = month["html"]
    titles = re.findall(r"<h3 id='([^']+)'>", page)
    assert {"gpu_use_by_user", "gpu_use_jobs", "runs_by_user"} <= set(titles)
    labels = set(month["json"]["runs"]["by_label"])
    for name in titles:
        if name in render.TABLE_TITLES or name.startswith("runs_by_label_"):
            assert render.declared_title(name), name
    heads = set(re.findall(r"<th scope='col'[^>]*>([^<]*)</th>", page))
    assert not [h for h in heads if h in ("Gpu use totals", "Energy kwh", "Wait s total")]
    for frame_name in titles:
        path = month["out"] / f"{frame_name}.csv"
        columns = path.read_text(encoding="utf-8").splitlines()[0].split(",")
        for column in columns:
            if column in render.CONTEXT_COLUMNS or column in labels or column in ("useful_gpu_hours",):
                continue
            assert render.declared_header(column), (frame_name, column)
    # coverage as a percentage on the page, never a bare 1
    use = page[page.index("<h3 id='gpu_use_by_partition'>"):]
    use = use[:use.index("</table>")]
    assert re.search(r"<td class=n data-v='[0-9.e-]+'>\d+\.\d %</td>", use)


def test_numbers_in_a_page_column_have_one_number_of_decimals(month: dict[str, Any]) -> None:
    page = month["html"]
    for table in re.findall(r"<table class='t sortable'>(.*?)</table>", page, flags=re.S):
        body = table[table.index("<tbody>"):]
        rows = [re.findall(r"<td([^>]*)>([^<]*)</td>", row) for row in body.split("<tr>")[1:]]
        for i in range(len(rows[0]) if rows else 0):
            cells = [r[i][1] for r in rows if len(r) > i and "class=n" in r[i][0]]
            plain = [c for c in cells if re.fullmatch(r"-?[\d,]+(\.\d+)?", c) and c != "0"]
            places = {len(c.split(".")[1]) if "." in c else 0 for c in plain}
            assert len(places) <= 1, (i, plain[:10])


def test_csv_values_are_rounded_as_declared(month: dict[str, Any]) -> None:
    for path in month["out"].glob("*.csv"):
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for column in rows[0] if rows else {}:
            decimals = render.CSV_DECIMALS.get(column, catalog.CSV_DEFAULT_DECIMALS)
            for row in rows:
                value = row[column]
                if re.fullmatch(r"-?\d+\.\d+", value):
                    assert len(value.split(".")[1]) <= decimals, (path.name, column, value)
