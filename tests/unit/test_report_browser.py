"""report.html in a real browser (headless Chromium, Debian's `chromium`): at 1400 px no text is clipped and no
table overflows its container, checked with getBoundingClientRect in the page; a screenshot is kept.

Runs the report of the recorded lab corpus built from a store (so the trend view is there too), and the same
report with its tables stretched (long job ids and names, OUT_OF_MEMORY, long node lists, many rows, large numbers).
Skipped only when Chromium is missing outside CI; under CI=true a missing Chromium fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures.metrics import Report
from gpuclust.accounting.history import store
from gpuclust.accounting.ingest.period import resolve_period
from gpuclust.accounting.output.render import render_html
from gpuclust.config import load_config

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
WIDTH = 1400

# Runs in the page after layout; writes what it found into <pre id="layout-check"> for --dump-dom.
CHECK_JS = r"""
(function () {
  var out = {width: window.innerWidth, lang: document.documentElement.lang, svg_texts: 0, cells: 0, tables: 0,
             clipped: [], overflow: [], height: document.documentElement.scrollHeight,
             page_overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth};
  function box(r) { return [Math.round(r.left), Math.round(r.top), Math.round(r.right), Math.round(r.bottom)]; }
  document.querySelectorAll('svg').forEach(function (svg, i) {
    var b = svg.getBoundingClientRect();
    svg.querySelectorAll('text').forEach(function (t) {
      out.svg_texts++;
      var c = t.getBoundingClientRect();
      if (c.left < b.left - 0.5 || c.right > b.right + 0.5 || c.top < b.top - 0.5 || c.bottom > b.bottom + 0.5)
        out.clipped.push({svg: i, text: t.textContent, box: box(c), svg_box: box(b)});
    });
  });
  document.querySelectorAll('table').forEach(function (t, i) {
    out.tables++;
    var w = t.parentElement, wb = w.getBoundingClientRect(), tb = t.getBoundingClientRect();
    if (w.scrollWidth > w.clientWidth + 0.5 || tb.right > wb.right + 0.5 || tb.left < wb.left - 0.5)
      out.overflow.push({table: i, heading: ((w.previousElementSibling || t.previousElementSibling) || {}).textContent,
                         table_box: box(tb), container_box: box(wb), scroll: w.scrollWidth, client: w.clientWidth});
    t.querySelectorAll('th,td').forEach(function (c) {
      out.cells++;
      if (c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1)
        out.clipped.push({cell: c.textContent, scroll: [c.scrollWidth, c.scrollHeight], client: [c.clientWidth, c.clientHeight]});
    });
  });
  document.querySelectorAll('h1,h2,h3,p,dt,dd,summary').forEach(function (el) {
    if (el.scrollWidth > el.clientWidth + 1) out.clipped.push({element: el.tagName, text: el.textContent.slice(0, 80)});
  });
  // Sorting: click the top failures' GPU-hours header twice; the rows follow (ascending, then descending).
  var h = document.getElementById('top_failures'), tf = h && h.nextElementSibling.querySelector('table');
  if (tf) {
    var col = Array.prototype.findIndex.call(tf.tHead.rows[0].cells, function (c) { return /GPU-hours/.test(c.textContent); });
    var values = function () { return Array.prototype.map.call(tf.tBodies[0].rows, function (r) { return +r.cells[col].getAttribute('data-v'); }); };
    var sorted = function (v, dir) { return v.every(function (x, i) { return i === 0 || dir * (x - v[i - 1]) >= 0; }); };
    tf.tHead.rows[0].cells[col].click();
    var asc = values();
    tf.tHead.rows[0].cells[col].click();
    var desc = values();
    out.sort = {column: col, rows: asc.length, ascending: sorted(asc, 1), descending: sorted(desc, -1),
                aria: tf.tHead.rows[0].cells[col].getAttribute('aria-sort')};
  }
  var pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _chromium()
    if found is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed, and CI=true: scripts/bootstrap / slurm-lab install put it there")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    return found


def _browser(chromium: str, *args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
            "--disable-extensions", "--mute-audio", f"--user-data-dir={profile}", "--force-device-scale-factor=1",
            *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, check=False)


def check_in_browser(chromium: str, page: str, work: Path, name: str) -> dict:
    """Lay `page` out at WIDTH px in Chromium; return what CHECK_JS found; screenshot the whole page."""
    checked = work / f"{name}-check.html"
    checked.write_text(page.replace("</body>", f"<script>{CHECK_JS}</script></body>"), encoding="utf-8")
    cp = _browser(chromium, f"--window-size={WIDTH},900", "--virtual-time-budget=3000", "--dump-dom",
                  checked.as_uri(), profile=work / "profile")
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', cp.stdout, flags=re.S)
    assert found, f"chromium produced no layout result (exit {cp.returncode}): {cp.stderr[-2000:]}"
    result = json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
                        .replace("&amp;", "&"))
    page_file = work / f"{name}.html"
    page_file.write_text(page, encoding="utf-8")
    shot = work / f"{name}.png"
    height = min(max(int(result["height"]), 900), 16000)
    cp = _browser(chromium, f"--window-size={WIDTH},{height}", f"--screenshot={shot}", page_file.as_uri(),
                  profile=work / "profile")
    assert shot.exists() and shot.stat().st_size > 10_000, cp.stderr[-2000:]
    print(f"screenshot: {shot}")  # the artefact (pytest -s shows it; the path is also in the assertion messages)
    result["screenshot"] = str(shot)
    return result


def _store_report(tmp: Path) -> Report:
    """The recorded lab corpus fetched into a store, then built from it (as the nightly build does)."""
    conf = tmp / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp / "state"))
                    + "\n[costs]\ncurrency = EUR\n")
    config = load_config(str(conf))
    parsed = pipeline.read_input(str(DATA / "lab-parsable.txt"), "\x1f|\x1e")
    days = {v.date() for v in parsed.table.column("end").to_pylist() if v}
    store.replace_days(store.store_dir(config.state_dir), {d: parsed.table for d in days})
    period = resolve_period("2026-12-02", "2026-12-03", None, "UTC")
    report, _ = pipeline.build(config, period)
    return report


def _stretched(report: Report) -> Report:
    """The same report with long, wide and many values in every table a page must hold."""
    tables = dict(report.tables)
    n = 40
    tables["top_failures"] = pd.DataFrame({
        "job_id": [f"{119848 + i}_{i}" if i % 3 else f"{119848 + i}" for i in range(n)],
        "user": [f"user-with-a-long-name-{i}" for i in range(n)],
        "account": ["physics-department-long-account"] * n,
        "partition": ["gpu-h100-large"] * n,
        "job_name": [("train_" + "x" * 60 + f"_{i}") if i % 2 else f"job name with spaces {i}" for i in range(n)],
        "state": ["OUT_OF_MEMORY", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"] * (n // 4),
        "exit_code": ["0:125", "1:0", None, "0:15"] * (n // 4),
        "gpu_hours": [123456.789 / (i + 1) for i in range(n)],
        "cost": [308641.97 / (i + 1) for i in range(n)],
        "node_list": [f"gpu-node[{i:03d}-{i + 63:03d},{i + 100:03d}-{i + 163:03d}]" for i in range(n)],
        "start": [f"2026-12-02T{i % 24:02d}:00:00+00:00" for i in range(n)],
    })
    qw = tables["queue_wait_by_partition"]
    tables["queue_wait_by_partition"] = pd.DataFrame({
        "partition": [f"partition-{name}-{i}" for i in range(12) for name in ("gpu",)],
        "jobs": [123456 + i for i in range(12)], "median_s": [93600.0 + i for i in range(12)],
        "p90_s": [4980.5] * 12, "max_s": [1234567.0] * 12,
    }) if len(qw) else qw
    return Report(report.period, report.data, tables)


def test_report_in_chromium(chromium, tmp_path):
    work = Path(tempfile.mkdtemp(prefix="gpuclust-report-browser-"))
    report = _store_report(tmp_path)
    assert "trend_daily" in report.tables
    for name, rep in (("report", report), ("stretched", _stretched(report))):
        page = render_html(rep)
        result = check_in_browser(chromium, page, work, name)
        where = f"{name}: screenshot {result['screenshot']}"
        assert result["width"] == WIDTH, where
        assert result["lang"] == "en", where
        assert result["svg_texts"] > 50 and result["tables"] >= 10 and result["cells"] > 100, (where, result)
        assert result["clipped"] == [], (where, result["clipped"][:10])
        assert result["overflow"] == [], (where, result["overflow"])
        assert result["page_overflow"] <= 0, (where, result["page_overflow"])
        sort = result["sort"]
        assert sort["rows"] >= 3 and sort["ascending"] and sort["descending"] and sort["aria"] == "descending", \
            (where, sort)
    assert (work / "report.png").exists()
