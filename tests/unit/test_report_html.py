"""report.html's content without a browser: formats, headers, context, sortable tables, the trend view, the
summary band and its change since the previous report, collapsible sections, table boxes, the print stylesheet
(the layout itself is checked in Chromium: test_report_browser.py, tests/integration/test_report_html_browser.py)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accounting.output.render import (
    duration,
    find_previous,
    header_text,
    number,
    render_html,
    table_title,
)
from gpuclust.accounting.output.reportdoc import SCHEMA
from gpuclust.cli.main import cli
from tests.unit.test_report_browser import _store_report

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"


def test_numbers_and_durations_read_as_people_write_them():
    assert [number(v) for v in (500.0, 1234567.0, 1234.5678, 0.0125, 0.000156, 0.5, None, float("nan"))] == \
        ["500", "1,234,567", "1,234.57", "0.0125", "0.000156", "0.5", "\u2014", "\u2014"]
    assert [duration(v) for v in (0, 45, 725, 4980, 7200, 93600, 86400, None)] == \
        ["0s", "45s", "12m 5s", "1h 23m", "2h", "1d 2h", "1d", "\u2014"]


def test_headers_are_words_not_snake_case():
    assert header_text("gpu_hours") == "GPU-hours"
    assert header_text("cost_per_completed_run", "EUR") == "Cost per completed run (EUR)"
    assert header_text("p90_s") == "p90"
    assert header_text("team") == "Team"
    assert table_title("runs_by_label_team") == "Runs by label team"


@pytest.fixture(scope="module")
def store_report(tmp_path_factory):
    return _store_report(tmp_path_factory.mktemp("store"))


def test_page_has_context_alignment_and_sorting(store_report):
    page = render_html(store_report)
    assert page.startswith("<!DOCTYPE html><html lang='en'>")
    assert "Cluster <b class='cluster'>acct</b>" in page and "Generated <time datetime='" in page
    assert "Currency EUR" in page and "Cost (EUR)" in page
    assert "500.0000" not in page and not re.search(r">\d+\.0000<", page)
    head_cells = re.findall(r"<th scope='col'[^>]*>([^<]*)</th>", page)
    assert head_cells and not [h for h in head_cells if "_" in h]  # no raw snake_case header
    assert "<td class=n data-v='1.7'>2s</td>" in page or re.search(r"data-v='[0-9.]+'>\d+s<", page)
    assert page.count("class='t sortable'") >= 10
    assert not re.search(r"""\b(src|href)\s*=\s*['"]?(https?:|//)""", page)


def test_trend_from_the_store_matches_the_report(store_report):
    daily = store_report.data["trend"]["daily"]
    assert store_report.data["trend"]["days"] == 90 and len(daily) == 90
    assert daily[-1]["day"] == "2026-12-02"
    last, totals = daily[-1], store_report.data["totals"]
    assert (last["runs"], last["completed"]) == (totals["runs"], totals["completed"])
    assert last["gpu_hours"] == pytest.approx(totals["gpu_hours"])
    assert last["cost_per_completed_run"] == pytest.approx(totals["cost_per_completed_run"])
    assert all(d["runs"] == 0 and d["p90_wait_s"] is None for d in daily[:-1])
    page = render_html(store_report)
    assert "<h2>Trend: last 30 days</h2>" in page and "<summary>Last 90 days</summary>" in page
    for title in ("GPU-hours per day", "Cost per completed run per day", "p90 queue wait per day"):
        assert page.count(f"<title>{title} (last") == 2  # the 30-day and the 90-day chart


# ---- answers first: the summary band, collapsible sections, table boxes, print ---------------------------------


def _band(page: str) -> str:
    found = re.search(r"<section class='band'.*?</section>", page, flags=re.S)
    assert found, "no summary band"
    return found.group(0)


def test_summary_band_comes_first_with_the_glossary_names(store_report):
    page = render_html(store_report)
    assert page.index("<section class='band'") < page.index("<details")
    band = _band(page)
    names = re.findall(r"<div class='name'>([^<]*)</div>", band)
    assert names[:4] == ["Runs", "Completed runs", "Allocated GPU-hours", "Completed-run GPU-hours"]
    assert "Cost per completed run (EUR)" in names and names[-1] == "Top failure"
    assert not [n for n in names if n.lower().startswith("useful")]  # glossary: "useful" alone is no name
    assert "No previous report to compare with." in band
    assert re.search(r"data-figure='runs'><div class='name'>Runs</div><div class='v'>12</div>", band)
    assert "4 FAILED" in band  # the top failure by GPU-hours


def test_summary_band_shows_the_change_since_the_previous_report(store_report):
    previous = copy.deepcopy(store_report.data)
    previous["period"] = {"start": "2026-12-01T00:00:00+00:00", "end": "2026-12-02T00:00:00+00:00"}
    previous["totals"]["runs"] = 10
    previous["totals"]["completed"] = 11
    previous["totals"]["cost_per_completed_run"] = None
    previous["top_failures"] = []
    band = _band(render_html(store_report, previous))
    assert "Change since the previous report, 2026-12-01 00:00 (UTC+00:00) to 2026-12-02 00:00" in band
    assert "<div class='v'>12</div><div class='d up'>+2 (+20.0 %)</div>" in band
    assert re.search(r"data-figure='completed'>.*?<div class='d '>no change</div>", band)
    assert re.search(r"data-figure='cost_per_completed_run'>.*?no value before", band)
    assert "was none" in band


def test_sections_collapse_and_tables_scroll_in_their_own_box(store_report):
    page = render_html(store_report)
    sections = re.findall(r"<details class='section'[^>]*><summary><h2>([^<]*)</h2></summary>", page)
    assert sections[:3] == ["Totals", "Sizing", "Queue wait per partition"]
    assert "Tables" in sections and "Metric definitions" in sections and "Unit economics" in sections
    assert "<details class='section' id='definitions'><summary>" in page  # closed; the answers are open
    assert page.count("<table") == page.count("<div class='table-wrap'><table")
    assert ".table-wrap{max-width:100%;overflow-x:auto" in page
    print_css = page[page.index("@media print{"):]
    assert "details::details-content{content-visibility:visible" in print_css and "break-inside:avoid" in print_css
    # issue 45: a cell's word is never broken (on paper only a word of htmltext.LONG_WORD characters or more, which
    # no column of a page can hold)
    assert "table.t td:not(.n):not(.k){min-width:0}" in print_css and ".w.long{white-space:normal;" in print_css
    assert "overflow-wrap:anywhere" not in page.replace(".w.long{white-space:normal;overflow-wrap:anywhere}", "") \
        .split("table.t")[1]


def test_previous_report_is_the_latest_earlier_one_of_the_same_cluster_and_length(tmp_path):
    def day(start: str, end: str, cluster: str = "acct", runs: int = 1) -> dict:
        return {"schema": SCHEMA, "cluster": cluster, "period": {"start": start, "end": end},
                "totals": {"runs": runs}}

    def put(name: str, doc: dict | str) -> None:
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))

    this = day("2026-12-02T00:00:00+00:00", "2026-12-03T00:00:00+00:00")
    out = tmp_path / "2026-12-02"
    assert find_previous(out, this) is None  # nothing there yet
    put("2026-11-30", day("2026-11-30T00:00:00+00:00", "2026-12-01T00:00:00+00:00", runs=30))
    put("2026-12-01", day("2026-12-01T00:00:00+00:00", "2026-12-02T00:00:00+00:00", runs=1))
    put("2026-12-03", day("2026-12-03T00:00:00+00:00", "2026-12-04T00:00:00+00:00", runs=3))  # later: not previous
    assert (find_previous(out, this) or {})["totals"]["runs"] == 1
    put("2026-12-02", day("2026-12-02T00:00:00+00:00", "2026-12-03T00:00:00+00:00", runs=2))  # a rebuild of itself
    assert (find_previous(out, this) or {})["totals"]["runs"] == 1
    (tmp_path / "2026-12-01" / "report.json").write_text("{not json")  # unreadable: passed over
    assert (find_previous(out, this) or {})["totals"]["runs"] == 30
    (tmp_path / "2026-11-30" / "report.json").write_text(json.dumps(day(
        "2026-11-30T00:00:00+00:00", "2026-12-01T00:00:00+00:00", cluster="other")))
    assert find_previous(out, this) is None  # another cluster's report is no previous one
    put("2026-11-01", day("2026-11-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00"))  # a month: another length
    assert find_previous(out, this) is None


def test_report_build_into_dated_directories_compares_with_the_day_before(tmp_path):
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    for since, until in (("2026-12-01", "2026-12-02"), ("2026-12-02", "2026-12-03")):
        result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input",
                                          str(DATA / "lab-parsable.txt"), "--delimiter", "\\x1f|\\x1e",
                                          "--since", since, "--until", until, "--format", "html,json",
                                          "--out", str(tmp_path / "reports" / since)])
        assert result.exit_code == 0, result.output
    first = (tmp_path / "reports" / "2026-12-01" / "report.html").read_text()
    second = (tmp_path / "reports" / "2026-12-02" / "report.html").read_text()
    assert "No previous report to compare with." in _band(first)
    band = _band(second)
    assert "Change since the previous report, 2026-12-01 00:00" in band and "+12" in band


def test_table_words_are_kept_whole():
    """Issue 45: a cell breaks between words only; a word a browser could break ("GPU-hours", "user00/0", CJK)
    is kept on one line, and a very long one may break on paper only."""
    from gpuclust.accounting.output.htmltext import LONG_WORD, words_whole

    assert words_whole("Start (UTC)") == "Start (UTC)"
    assert words_whole("Held-idle GPU-hours") == "<span class=w>Held-idle</span> <span class=w>GPU-hours</span>"
    assert words_whole("user00/0 <b>") == "<span class=w>user00/0</span> &lt;b&gt;"
    assert words_whole("训练") == "<span class=w>训练</span>"
    assert words_whole("x" * LONG_WORD) == f"<span class='w long'>{'x' * LONG_WORD}</span>"
    import pandas as pd

    from gpuclust.accounting.output.render import table_html
    table = table_html(pd.DataFrame({"account": ["physics/hpc-team"], "gpu_hours": [1.5]}))
    assert "<td><span class=w>physics/hpc-team</span></td>" in table and "<th scope='col' class=n>GPU-hours" \
        not in table
