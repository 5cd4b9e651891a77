"""report.html in headless Chromium (Debian's `chromium`) at 1440, 800 and 390 px wide and printed to PDF.

Two nightly reports are built with `gpuclust report build --input` from the recorded lab dump
(tests/data/accounting/lab-parsable.txt) into dated directories, REPORT_DIR/2026-12-01 and REPORT_DIR/2026-12-02,
as examples/cron/gpuclust-report keeps them, so the second page's summary band shows the change since the first.
At each width the page is laid out and measured through the DOM: the page never scrolls sideways
(document.documentElement.scrollWidth <= clientWidth), no element outside a table's own box reaches past the
viewport, and a table wider than its box scrolls inside it (.table-wrap, overflow-x auto). The print stylesheet is
measured the same way at the printable width of an A4 page (its rules applied on screen): every section open,
no table cut. The page is then printed with --print-to-pdf.

Artifacts: the three screenshots and the PDF, in $GPUCLUST_TEST_ARTIFACTS/report-html-browser when that is set,
else in the test's tmp_path (the path is printed; pytest -s shows it). Skipped only when Chromium is missing
outside CI; under CI=true a missing Chromium fails (the same rule as tests/unit/test_report_browser.py).
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

from click.testing import CliRunner

from gpuclust.accounting.output.render import render_html
from gpuclust.cli.main import cli
from tests.unit.test_report_browser import _browser, _store_report, _stretched, chromium  # noqa: F401

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
WIDTHS = (1440, 800, 390)
# CSS px of an A4 page's printable width in Chromium (210 mm less its default 0.4 in margins; Letter is wider)
PRINT_WIDTH = 717

# Runs in the page after layout; writes what it measured into <pre id="width-check"> for --dump-dom.
CHECK_JS = r"""
(function () {
  var de = document.documentElement, vw = de.clientWidth;
  var out = {width: window.innerWidth, scroll_width: de.scrollWidth, client_width: vw, height: de.scrollHeight,
             wraps: [], past_viewport: [], tables_outside_wrap: 0, details: 0, details_open: 0, hidden_dd: 0};
  document.querySelectorAll('.table-wrap').forEach(function (w) {
    out.wraps.push({scroll: w.scrollWidth, client: w.clientWidth, overflow_x: getComputedStyle(w).overflowX,
                    heading: ((w.previousElementSibling || {}).textContent || '').slice(0, 60)});
  });
  document.querySelectorAll('table').forEach(function (t) { if (!t.closest('.table-wrap')) out.tables_outside_wrap++; });
  // inside a box that scrolls sideways and itself fits (a table's .table-wrap, a chart's figure on a phone), an
  // element may be wider than the screen: the box scrolls, not the page
  function inScroller(el) {
    for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX, b = p.getBoundingClientRect();
      if ((o === 'auto' || o === 'scroll') && b.right <= vw + 0.5 && b.left >= -0.5) return true;
    }
    return false;
  }
  document.querySelectorAll('body *').forEach(function (el) {
    if (el.closest('.table-wrap') || el.closest('svg') && el.tagName.toLowerCase() !== 'svg' || inScroller(el)) return;
    var r = el.getBoundingClientRect();
    if (r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5))
      out.past_viewport.push({tag: el.tagName, cls: el.getAttribute('class'), right: Math.round(r.right),
                              text: (el.textContent || '').slice(0, 60)});
  });
  document.querySelectorAll('details').forEach(function (d) { out.details++; if (d.open) out.details_open++; });
  document.querySelectorAll('dd').forEach(function (d) { if (!d.checkVisibility()) out.hidden_dd++; });
  var band = document.querySelector('section.band');
  out.band_first = !!band && !band.previousElementSibling.closest('details') &&
    Array.prototype.indexOf.call(document.body.children, band) < 3;
  out.band_figures = band ? band.querySelectorAll('.fig').length : 0;
  out.band_text = band ? band.textContent : '';
  var pre = document.createElement('pre');
  pre.id = 'width-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def artifact_dir(tmp_path: Path) -> Path:
    root = os.environ.get("GPUCLUST_TEST_ARTIFACTS")
    out = Path(root) / "report-html-browser" if root else tmp_path / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    return out


def build(report_dir: Path, since: str, until: str) -> Path:
    """`gpuclust report build --input` of the recorded dump into report_dir/<since> (the nightly layout)."""
    conf = report_dir.parent / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests",
                                                             str(report_dir.parent / "state")))
    out = report_dir / since
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(DATA / "lab-parsable.txt"),
                                      "--delimiter", "\\x1f|\\x1e", "--since", since, "--until", until,
                                      "--format", "html,json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "report.html"


def print_rules(page: str) -> str:
    """The body of the page's own @media print block (braces matched), to lay the print layout out on screen."""
    css = page
    start = css.index("@media print{") + len("@media print{")
    depth, i = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(css[i], 0)
        i += 1
    return css[start:i - 1]


# Headless Chromium lays a window out at 500 px at least, so the page is measured in an iframe of the exact width
# (srcdoc: same origin as the outer page, which copies the measurement out for --dump-dom).
FRAME = """<!DOCTYPE html><html><body style="margin:0"><iframe id="f" style="width:{width}px;height:900px;border:0"
srcdoc="{srcdoc}"></iframe><script>window.addEventListener('load', function () {{
  var inner = document.getElementById('f').contentDocument.getElementById('width-check');
  var pre = document.createElement('pre'); pre.id = 'width-check-out';
  pre.textContent = inner ? inner.textContent : 'null'; document.body.appendChild(pre);
}});</script></body></html>"""


def measure(browser: str, html_text: str, work: Path, name: str, width: int) -> dict:
    """CHECK_JS's measurement of `html_text` laid out `width` CSS px wide."""
    checked = html_text.replace("</body>", f"<script>{CHECK_JS}</script></body>")
    page = work / f"{name}-{width}-check.html"
    page.write_text(FRAME.format(width=width, srcdoc=html.escape(checked, quote=True)), encoding="utf-8")
    cp = _browser(browser, "--window-size=1600,1000", "--virtual-time-budget=3000", "--dump-dom", page.as_uri(),
                  profile=work / "profile")
    found = re.search(r'<pre id="width-check-out">(.*?)</pre>', cp.stdout, flags=re.S)
    assert found, f"chromium produced no measurement (exit {cp.returncode}): {cp.stderr[-2000:]}"
    text = found.group(1)
    for entity, char in (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&amp;", "&")):
        text = text.replace(entity, char)
    result: dict = json.loads(text)
    assert result["width"] == width, result
    return result


def assert_fits(result: dict, where: str) -> None:
    assert result["scroll_width"] <= result["client_width"], (where, "the page scrolls sideways", result)
    assert result["past_viewport"] == [], (where, result["past_viewport"][:5])
    assert result["tables_outside_wrap"] == 0, where
    for wrap in result["wraps"]:  # a table wider than its box scrolls inside the box, not the page
        assert wrap["client"] <= result["client_width"], (where, wrap)
        if wrap["scroll"] > wrap["client"]:
            assert wrap["overflow_x"] in ("auto", "scroll"), (where, wrap)


def test_report_at_three_widths_and_in_print(chromium, tmp_path):  # noqa: F811 (the imported fixture)
    artifacts = artifact_dir(tmp_path)
    print(f"\nartifacts: {artifacts}")
    work = tmp_path / "work"
    work.mkdir()
    reports = tmp_path / "reports"
    build(reports, "2026-12-01", "2026-12-02")  # the day before: no attempt (an empty report)
    page_file = build(reports, "2026-12-02", "2026-12-03")
    page = page_file.read_text(encoding="utf-8")
    assert "Change since the previous report, 2026-12-01 00:00" in page

    for width in WIDTHS:
        result = measure(chromium, page, work, "report", width)
        where = f"report.html at {width} px"
        assert_fits(result, where)
        assert result["band_first"] and result["band_figures"] >= 6, (where, result["band_text"])
        assert "Runs12+12" in result["band_text"].replace(" ", ""), result["band_text"]
        assert result["details"] >= 8 and result["wraps"], where
        shot = artifacts / f"report-{width}px.png"
        height = min(max(int(result["height"]), 900), 16000)
        cp = _browser(chromium, f"--window-size={width},{height}", f"--screenshot={shot}", page_file.as_uri(),
                      profile=work / "profile")
        assert shot.exists() and shot.stat().st_size > 10_000, cp.stderr[-2000:]

    # The stretched tables (long ids and names, many columns) at the narrowest width: still no page scroll.
    (tmp_path / "store").mkdir()
    stretched = render_html(_stretched(_store_report(tmp_path / "store")))
    assert_fits(measure(chromium, stretched, work, "stretched", 390), "stretched report at 390 px")

    # The print stylesheet, applied on screen at a page's printable width: everything open, no table cut.
    for name, text in (("report", page), ("stretched", stretched)):
        printed = text.replace("</head>", f"<style>{print_rules(text)}</style></head>")
        result = measure(chromium, printed, work, f"print-{name}", PRINT_WIDTH)
        assert_fits(result, f"{name} in print")
        cut = [w for w in result["wraps"] if w["scroll"] > w["client"] + 1]
        assert cut == [], (f"{name} in print: tables cut", cut)
        assert result["hidden_dd"] == 0, f"{name} in print: a closed section's content is left out"

    pdf = artifacts / "report.pdf"
    cp = _browser(chromium, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", "--virtual-time-budget=3000",
                  page_file.as_uri(), profile=work / "profile")
    assert pdf.exists(), cp.stderr[-2000:]
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF-")
    pages = len(re.findall(rb"/Type\s*/Page\b(?!s)", data))
    assert pages >= 2, f"{pdf}: {pages} page(s)"
    print(f"screenshots and PDF ({pages} pages) in {artifacts}")
