"""report.html's content without a browser: formats, headers, context, sortable tables, the trend view
(the layout itself is checked in Chromium: test_report_browser.py)."""

from __future__ import annotations

import re

import pytest

from gpuclust.accounting.render import duration, header_text, number, render_html, table_title
from tests.unit.test_report_browser import _store_report


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
