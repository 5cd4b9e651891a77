"""Inline SVG charts of the accounting report: valid XML, escaped names, odd data, many bars, determinism."""

from __future__ import annotations

import math
import time
from xml.etree import ElementTree

import pandas as pd
import pytest

from gpuclust.accounting.output import svgplot
from gpuclust.accounting.output.render import _plots

NS = "{http://www.w3.org/2000/svg}"

NASTY = [
    "<b>bold</b> & \"quoted\" 'single'",
    "</svg><script>alert(1)</script>",
    "naïve-ünïcødé-账户-🚀",
    "line\nbreak\ttab\r\n",
    "ctrl\x00\x01\x1f\x7f-chars",
    "&amp; already-escaped &lt;",
    "]]> <!-- --> <?pi?>",
    "x" * 300,
    "",
]


def _parse(svg: str) -> ElementTree.Element:
    root = ElementTree.fromstring(svg)
    assert root.tag == f"{NS}svg"
    assert root.get("role") == "img" and root.get("viewBox", "").startswith("0 0 ")
    assert root[0].tag == f"{NS}title"
    return root


def _titles(root: ElementTree.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}title")]


def _bars(root: ElementTree.Element) -> list[ElementTree.Element]:
    """Drawn bars: the rects that carry their own tooltip."""
    return [r for r in root.iter(f"{NS}rect") if r.find(f"{NS}title") is not None]


def test_nasty_names_are_escaped_and_kept_in_tooltips():
    values = [float(i + 1) for i in range(len(NASTY))]
    svg = svgplot.bar_chart("t <&> \"'", NASTY, [("a&b", values), ("<c>", values)], y_label="y<")
    root = _parse(svg)
    assert "<script" not in svg and "<b>" not in svg and "]]>" not in svg and "<!--" not in svg
    assert "\x00" not in svg and "\x1f" not in svg
    assert root[0].text == "t <&> \"'"
    titles = "\n".join(_titles(root))
    for name in NASTY:
        assert svgplot.clean(name, one_line=False) in titles  # full name, round-tripped through XML
    assert "naïve-ünïcødé-账户-🚀" in svg
    texts = [t.text or "" for t in root.iter(f"{NS}text")]
    assert "</svg><script>alert(1)</script>" in texts or any(t.startswith("</svg>") for t in texts)
    assert all("\n" not in t and "\t" not in t for t in texts)  # visible labels are one line
    assert any(t.endswith("\u2026") for t in texts)  # the 300-char name is cut with an ellipsis
    assert "a&b" in texts and "<c>" in texts  # legend


def test_hbar_nasty_labels_and_order():
    svg = svgplot.hbar_chart("Top <failures>", NASTY, list(range(len(NASTY), 0, -1)), x_label="GPU-hours")
    root = _parse(svg)
    assert "<script" not in svg
    bars = _bars(root)
    assert len(bars) == len(NASTY)
    ys = [float(b.get("y", "nan")) for b in bars]
    assert ys == sorted(ys)  # first label on top
    widths = [float(b.get("width", "nan")) for b in bars]
    assert widths == sorted(widths, reverse=True)


@pytest.mark.parametrize("values", [[0.0, 0.0, 0.0], [None, None, None], [math.nan, math.inf, None], [0, -5, 0]])
def test_zero_missing_and_negative_data_draw_without_crashing(values):
    for svg in (svgplot.bar_chart("z", ["a", "b", "c"], [("s", values)]),
                svgplot.hbar_chart("z", ["a", "b", "c"], values)):
        root = _parse(svg)
        for rect in root.iter(f"{NS}rect"):
            assert float(rect.get("height", "0")) >= 0 and float(rect.get("width", "0")) >= 0
        attrs = [v for el in root.iter() for v in el.attrib.values()]
        assert not any("nan" in v or "inf" in v for v in attrs)
        texts = [t.text for t in root.iter(f"{NS}text")]
        assert "0" in texts and "1" in texts  # axis 0..1 when there is nothing positive


def test_missing_and_negative_values_in_tooltips():
    root = _parse(svgplot.bar_chart("x", ["a", "b", "c"], [("s", [None, -2.5, pd.NA])]))
    titles = "\n".join(_titles(root))
    assert "s: no value" in titles and "s: -2.5" in titles
    bars = _bars(root)
    assert len(bars) == 1 and float(bars[0].get("height", "1")) == 0  # the negative one, clamped at 0


def test_single_bar_and_exact_tooltip_value():
    root = _parse(svgplot.bar_chart("one", ["only"], [("v", [1234.5678901])]))
    bars = _bars(root)
    assert len(bars) == 1
    assert "v: 1234.5678901" in (bars[0].find(f"{NS}title").text or "")
    assert float(bars[0].get("height", "0")) > 100


def test_nice_ticks():
    assert svgplot.nice_ticks(0) == [0, 0.2, 0.4, 0.6, 0.8, 1]
    assert svgplot.nice_ticks(0.0007) == [0, 0.0002, 0.0004, 0.0006, 0.0008]
    assert svgplot.nice_ticks(10) == [0, 2, 4, 6, 8, 10]
    assert svgplot.nice_ticks(7.3) == [0, 2, 4, 6, 8]
    assert svgplot.nice_ticks(1234) == [0, 500, 1000, 1500]
    for vmax in (1e-9, 0.003, 0.7, 1, 3.3, 99, 12345.6, 7e12, 1e308, -4, math.nan):
        ticks = svgplot.nice_ticks(vmax)
        step = ticks[1] - ticks[0]
        mant = step / 10 ** math.floor(math.log10(step))
        assert min(abs(mant - m) for m in (1, 2, 5, 10)) < 1e-6, (vmax, ticks)
        assert 2 <= len(ticks) <= 12 and ticks[0] == 0
        if math.isfinite(vmax) and vmax > 0:
            assert ticks[-1] >= min(vmax, 1e300) * (1 - 1e-9)


def test_compact_numbers():
    assert [svgplot.compact(v) for v in (0, 0.05, 0.15000000000000002, 12.5, 1500, 2e6, 3e9, 125000)] == [
        "0", "0.05", "0.15", "12.5", "1.5k", "2M", "3G", "125k"]
    assert svgplot.exact(12.0) == "12" and svgplot.exact(0.1) == "0.1" and svgplot.exact(None) == "no value"


def test_many_bars_thin_out_labels_but_keep_every_tooltip():
    names = [f"account-with-a-rather-long-name-{i:03d}" for i in range(200)]
    values = [float(i) for i in range(200)]
    t0 = time.perf_counter()
    svg = svgplot.bar_chart("GPU-hours by account", names, [("alloc", values), ("completed-run", values)])
    assert time.perf_counter() - t0 < 0.5
    root = _parse(svg)
    assert float(root.get("width", "0")) <= 800
    assert len(_bars(root)) == 400
    titles = "\n".join(_titles(root))
    assert all(name in titles for name in names)
    labels = [t for t in root.iter(f"{NS}text") if (t.text or "").startswith("account-")]
    assert 0 < len(labels) < 200  # every k-th labelled
    assert all((t.text or "").endswith("\u2026") for t in labels)
    assert all("rotate(-45" in t.get("transform", "") for t in labels)
    assert all(float(t.get("font-size", "0")) >= svgplot.MIN_FONT for t in labels)


def test_few_short_labels_stay_horizontal():
    root = _parse(svgplot.bar_chart("x", ["gpu", "cpu"], [("v", [1, 2])]))
    labels = [t for t in root.iter(f"{NS}text") if t.text in ("gpu", "cpu")]
    assert len(labels) == 2 and not any(t.get("transform") for t in labels)


def test_mismatched_lengths_are_rejected():
    with pytest.raises(ValueError):
        svgplot.bar_chart("x", ["a", "b"], [("s", [1.0])])
    with pytest.raises(ValueError):
        svgplot.hbar_chart("x", ["a"], [1.0, 2.0])


def _tables(n: int) -> dict[str, pd.DataFrame]:
    names = [NASTY[i % len(NASTY)] + str(i) for i in range(n)]
    return {
        "queue_wait_by_partition": pd.DataFrame({"partition": names, "jobs": range(n), "median_s": [1.5] * n,
                                                 "p90_s": [None] * n, "max_s": [float(i) for i in range(n)]}),
        "runs_by_account": pd.DataFrame({"account": names, "gpu_hours": [2.0] * n, "completed_run_gpu_hours": [1.0] * n,
                                         "cost_per_completed_run": [None, 3.25] * (n // 2) + [None] * (n % 2)}),
        "top_failures": pd.DataFrame({"job_id": [f"{i}_<{i}>" for i in range(n)], "state": ["FAILED&"] * n,
                                      "gpu_hours": [float(n - i) for i in range(n)]}),
    }


def test_report_plots_are_deterministic_and_valid():
    tables = _tables(30)
    first = _plots(tables)
    assert first == _plots(_tables(30))
    assert [t for t, _ in first] == ["Queue wait per partition", "GPU-hours by account", "Cost per completed run",
                                     "Top failures"]
    for _, svg in first:
        assert svg is not None and "<script" not in svg and "href" not in svg and "src=" not in svg
        _parse(svg)
    fails = _parse(first[3][1] or "")
    assert len(_bars(fails)) == 15  # first 15 rows only
    assert "0_<0> FAILED&" in "\n".join(_titles(fails))
    cost = _parse(first[2][1] or "")
    assert "no data = no completed run or no price" in [t.text for t in cost.iter(f"{NS}text")]
    assert "cost per completed run: no value" in "\n".join(_titles(cost))  # null is no data, not 0
    assert len([r for r in cost.iter(f"{NS}rect") if r.get("class") == "no-data"]) == 15  # the 15 nulls of 30


def test_report_plots_empty_tables_give_no_data():
    empty = {name: frame.iloc[0:0] for name, frame in _tables(3).items()}
    assert [svg for _, svg in _plots(empty)] == [None, None, None, None]


# ---- waits on a log axis, the median marked, "no data" drawn apart from 0 -----------------------------------


def _texts(root: ElementTree.Element, cls: str | None = None) -> list[str]:
    return [t.text or "" for t in root.iter(f"{NS}text") if cls is None or t.get("class") == cls]


def _of_class(root: ElementTree.Element, cls: str) -> list[ElementTree.Element]:
    return [el for el in root.iter() if el.get("class") == cls]


def test_log_wait_ticks_and_short_durations():
    assert svgplot.log_seconds_ticks([0.0, 4.0, 2.0]) == [1.0, 10.0]
    assert svgplot.log_seconds_ticks([]) == [1.0, 10.0]
    assert svgplot.log_seconds_ticks([40.0, 172800.0]) == [1.0, 10.0, 60.0, 600.0, 3600.0, 21600.0, 86400.0, 604800.0]
    assert svgplot.log_seconds_ticks([0.2, 5.0])[:2] == [0.1, 1.0]  # sub-second waits: a power of ten below
    assert [svgplot.short_duration(v) for v in (0, 0.5, 45, 600, 5400, 86400, 604800)] == \
        ["0s", "0.5s", "45s", "10m", "1.5h", "1d", "1w"]


def test_wait_chart_is_log_scaled_and_the_median_is_marked():
    medians, maxes = [40.0, 3600.0], [172800.0, 7200.0]
    root = _parse(svgplot.bar_chart("Queue wait", ["gpu", "big"], [("median", medians), ("max", maxes)],
                                    log_seconds=True, marked=0))
    ticks = _texts(root)
    assert all(t in ticks for t in ("1s", "10s", "1m", "10m", "1h", "1d", "1w"))
    heights = [float(b.get("height", "0")) for b in _bars(root)]  # gpu median, gpu max, big median, big max
    # log scale: a 40 s median next to a 2-day max is still a third of the max's height (linear: 0.02 %)
    assert heights[0] / heights[1] == pytest.approx(math.log10(40) / math.log10(172800), rel=0.01)
    assert heights[0] / heights[1] > 0.3
    assert _texts(root, "marked") == ["40s", "1h"]  # the median series, labelled; the max is not


def test_reference_line_is_drawn_and_labelled():
    root = _parse(svgplot.bar_chart("p90 per day", ["a", "b"], [("p90", [30.0, 600.0])], log_seconds=True,
                                    reference=("median of the days: 5m", 300.0)))
    lines = [el for el in _of_class(root, "reference") if el.tag == f"{NS}line"]
    assert len(lines) == 1 and lines[0].get("stroke-dasharray")
    assert _texts(root, "reference") == ["median of the days: 5m"]


def test_an_empty_bucket_is_no_data_and_a_zero_is_data():
    root = _parse(svgplot.bar_chart("waits", ["empty", "zero", "five"], [("p90", [None, 0.0, 5.0])],
                                    log_seconds=True))
    no_data = [r for r in _of_class(root, "no-data") if r.tag == f"{NS}rect"]
    assert len(no_data) == 1 and float(no_data[0].get("height", "0")) > 100  # the plot's height, dashed
    assert no_data[0].get("stroke-dasharray")
    assert "no data" in _texts(root)  # the key in the legend (and the box's own label)
    assert len(_of_class(root, "zero")) == 1  # the 0: a thick line on the baseline
    # Where 0 is data, nothing says "no data".
    root = _parse(svgplot.bar_chart("gpu-hours", ["a", "b"], [("h", [0.0, 2.0])]))
    assert _of_class(root, "no-data") == [] and "no data" not in _texts(root)
    assert len(_of_class(root, "zero")) == 1
    root = _parse(svgplot.hbar_chart("hbar", ["a", "b", "c"], [3.0, None, 0.0]))
    assert len([r for r in _of_class(root, "no-data") if r.tag == f"{NS}rect"]) == 1
    assert len(_of_class(root, "zero")) == 1


def test_a_legend_too_long_for_one_row_wraps_and_stays_inside_the_chart():
    """Issue 45: legends are laid out with text_width and wrap into rows; none runs past the chart's edge."""
    names = [f"series with a long legend label {i}" for i in range(7)]
    root = _parse(svgplot.bar_chart("t", ["a", "b"], [(n, [1, None]) for n in names]))
    keys = [t for t in root.iter(f"{NS}text") if not t.get("class") and ((t.text or "").startswith("series")
                                                                         or t.text == "no data")]
    assert len(keys) == 8
    assert len({t.get("y") for t in keys}) > 1  # more than one row
    for t in keys:
        x = float(t.get("x", "0"))
        assert x >= 0 and x + svgplot.text_width(t.text or "", svgplot.FONT) <= svgplot.WIDTH
    assert svgplot.legend_rows([100, 100, 100], 250) == [[0, 1], [2]]
    assert svgplot.legend_rows([300, 10], 250) == [[0], [1]]


def test_economics_legend_is_measured_and_wraps():
    """Issue 45: "Cost by term" cut its legend ("op") at 7 px per character."""
    from gpuclust.accounting.figures.economics import TERMS
    from gpuclust.accounting.output import economics_render

    rows = [{"partition": p, "terms": {t: {"gpu_hours": 1.0, "cost": 2.0} for t in TERMS}} for p in ("gpu", "total")]
    root = ElementTree.fromstring(economics_render.stacked_bars(rows, "cost", TERMS, "Cost by term, per partition (EUR)"))
    width = float(root.get("width", "0"))
    labels = {t.text: t for t in root.iter(f"{NS}text") if t.text in economics_render.LABELS.values()}
    assert set(labels) == {economics_render.LABELS[t] for t in TERMS}
    for text, t in labels.items():
        assert float(t.get("x", "0")) + svgplot.text_width(text, 11) <= width, text
    assert float(root.get("height", "0")) >= max(float(t.get("y", "0")) for t in labels.values()) + 4
