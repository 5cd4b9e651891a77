"""Small inline SVG bar charts for the self-contained report page (no plotting library, no scripts).

Two chart kinds are enough for the report: grouped vertical bars (``bar_chart``) and horizontal bars
(``hbar_chart``). Both return one ``<svg>`` element as a string that is valid standalone XML and can be
pasted into HTML as is. Every text that comes from data is cleaned of characters XML cannot hold and
escaped; every bar carries a ``<title>`` tooltip with the full category name and the exact value.

Values may be ints, floats, numpy scalars, ``None`` or NaN. A missing or non-finite value is "no data" and is
drawn as a dashed grey box the height of the plot (class ``no-data``, with a "no data" key), never as an empty
slot that reads as 0; a 0 is data and is drawn as a thick line on the baseline (class ``zero``). Negative values
are drawn as 0 (the tooltip still shows the value).

Waits span seconds to days, so ``bar_chart(log_seconds=True)`` draws them on a log axis with duration ticks
(1s, 10s, 1m, ... 1d, 1w): a median of seconds stays visible next to a max of hours. ``marked`` labels one
series' bars with their value (the median); ``reference`` draws one labelled dashed line across the plot.
Output depends only on the input: same input, same bytes.
"""

from __future__ import annotations

import html
import math
import re
import unicodedata
from collections.abc import Sequence

WIDTH = 720
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")
FONT = 11  # px, tick and category labels
TITLE_FONT = 14
LABEL_MAX_PX = 120.0  # rotated category labels are cut to this width (px)
HLABEL_MAX_PX = 220.0  # horizontal bar labels are cut to this width (px)
# The smallest text a chart draws (dense category labels, value labels), px. Charts are shown at their own size
# (never scaled down on a narrow screen; they scroll in their figure instead), so this is the size people read.
MIN_FONT = 10
ELLIPSIS = "\u2026"

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")

Number = object  # what a value may be: int, float, numpy scalar, None, NaN, pd.NA


# ---- text ---------------------------------------------------------------------------------------------


def clean(text: object, *, one_line: bool = True) -> str:
    """``str(text)`` without characters XML 1.0 cannot hold (replaced by U+FFFD).

    ``one_line`` also folds every run of whitespace (newlines, tabs) into one space, for labels.
    """
    s = _XML_BAD.sub("\ufffd", str(text)).replace("\r\n", "\n").replace("\r", "\n")
    return " ".join(s.split()) if one_line else s


def esc(text: object, *, one_line: bool = True) -> str:
    """Cleaned and escaped for XML/HTML text and attribute values."""
    return html.escape(clean(text, one_line=one_line), quote=True)


# Advance widths in em, rounded UP from the widest of the usual sans-serif fonts (DejaVu Sans, Debian's default,
# is the widest; Liberation Sans/Arial and Helvetica are narrower): a label measured with these never comes out
# wider on screen than the room reserved for it. (A flat 0.6 em per character undersized capitals and digits:
# "119848 OUT_OF_MEMORY" was clipped at the chart's left edge.)
_NARROW = frozenset("iljI!|.,:;'`")
_WIDE = frozenset("mwMW%@")
_CHAR_EM: dict[str, float] = {
    **{c: 0.34 for c in _NARROW},
    **{c: 1.0 for c in _WIDE},
    " ": 0.33, "f": 0.4, "t": 0.42, "r": 0.44, "J": 0.4, "-": 0.4, "_": 0.52, "(": 0.42, ")": 0.42, "/": 0.4,
    "[": 0.42, "]": 0.42, "\u2026": 1.0,
}


def _char_em(c: str) -> float:
    em = _CHAR_EM.get(c)
    if em is not None:
        return em
    if c.isascii():
        if c.isdigit() or c.islower():
            return 0.66
        if c.isupper():
            return 0.8
        return 0.86  # other punctuation: & < = + # ...
    if unicodedata.east_asian_width(c) in "WF":
        return 1.05
    if unicodedata.combining(c):
        return 0.0
    return 0.86


def text_width(text: str, size: float) -> float:
    """Rendered width in px of ``text`` in a sans-serif font of ``size`` px, measured conservatively (never
    less than the usual fonts draw it; see _CHAR_EM)."""
    return size * sum(_char_em(c) for c in text)


def truncate(text: str, max_px: float, size: float) -> str:
    """``text`` cut to fit ``max_px`` with a trailing ellipsis, or unchanged when it fits."""
    if text_width(text, size) <= max_px:
        return text
    budget = max_px - text_width(ELLIPSIS, size)
    out: list[str] = []
    used = 0.0
    for c in text:
        w = text_width(c, size)
        if used + w > budget:
            break
        out.append(c)
        used += w
    return "".join(out).rstrip() + ELLIPSIS


# ---- numbers ------------------------------------------------------------------------------------------


def to_float(value: Number) -> float | None:
    """A finite float, or None for None/NaN/inf/anything that is not a number."""
    if value is None or isinstance(value, str):
        return None
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def exact(value: Number) -> str:
    """The value as the tooltip shows it: shortest round-trip repr, integers without ``.0``."""
    if value is None:
        return "no value"
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "no value"
    if math.isnan(f):
        return "no value"
    if f.is_integer() and abs(f) < 1e15:
        return str(int(f))
    return repr(f)


def compact(value: float) -> str:
    """Short tick label: 0, 0.05, 12.5, 1.5k, 2M, 3G, 1e+15."""
    a = abs(value)
    if a < 1e-12:
        return "0"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            if a >= scale * 1000:  # beyond T
                return f"{value:.3g}"
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def nice_ticks(vmax: float, target: int = 5) -> list[float]:
    """Ticks 0, s, 2s, ... up to the first multiple of s >= vmax, where s is 1, 2 or 5 x 10^k.

    vmax <= 0 (all-zero data) gives the axis 0..1.
    """
    if not math.isfinite(vmax) or vmax <= 0:
        vmax = 1.0
    vmax = min(vmax, 1e300)
    raw = vmax / max(target, 1)
    exp = math.floor(math.log10(raw))
    base = 10.0 ** abs(exp)
    mant = next((m for m in (1, 2, 5) if (m * base if exp >= 0 else m / base) >= raw * (1 - 1e-9)), 10)

    def tick(i: int) -> float:  # i * mant * 10^exp, with one rounding so that 3 x 0.2 prints as 0.6
        return i * mant * base if exp >= 0 else i * mant / base

    n = max(1, math.ceil(vmax / tick(1) * (1 - 1e-9)))
    return [tick(i) for i in range(n + 1)]


# Log wait axis: ticks people read as durations (seconds), and their labels.
WAIT_TICKS = (1.0, 10.0, 60.0, 600.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0, 30 * 86400.0, 365 * 86400.0)
NO_DATA_FILL = "#f3f3f3"
NO_DATA_STROKE = "#999"


def short_duration(seconds: float) -> str:
    """A tick or bar label: 0s, 0.5s, 45s, 12m, 1.5h, 2d (one unit, at most 3 significant digits)."""
    s = abs(seconds)
    for size, unit in ((86400.0 * 7, "w"), (86400.0, "d"), (3600.0, "h"), (60.0, "m")):
        if s >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"


def log_seconds_ticks(values: Sequence[float]) -> list[float]:
    """Ticks of a log wait axis covering `values` (> 0): from the largest WAIT_TICKS at or below the smallest
    value (1s at most, a power of ten below for sub-second waits) up to the first one at or above the largest."""
    positive = [v for v in values if v > 0]
    lo = min(positive, default=1.0)
    hi = max(positive, default=1.0)
    floor = 1.0 if lo >= 1 else 10.0 ** math.floor(math.log10(lo))
    ticks = [floor] if floor < 1 else []
    ticks += [t for t in WAIT_TICKS if t >= floor]
    top = next((i for i, t in enumerate(ticks) if t >= hi * (1 - 1e-9)), None)
    if top is None:  # beyond a year: whole powers of ten of years
        while ticks[-1] < hi:
            ticks.append(ticks[-1] * 10)
        top = len(ticks) - 1
    return ticks[:max(top, 1) + 1]


# ---- svg pieces ---------------------------------------------------------------------------------------


def _f(v: float) -> str:
    s = f"{v:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _open(title: str, width: float, height: float) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_f(width)} {_f(height)}" width="{_f(width)}" '
        f'height="{_f(height)}" role="img" class="chart" font-family="sans-serif" font-size="{FONT}">',
        f"<title>{esc(title)}</title>",
        f'<rect width="{_f(width)}" height="{_f(height)}" fill="#fff"/>',
    ]


def legend_rows(widths: Sequence[float], room: float) -> list[list[int]]:
    """The legend's keys (their widths, measured with text_width) packed into rows no wider than `room`, in
    order: the indices of each row's keys (a key wider than `room` alone on its row)."""
    rows: list[list[int]] = []
    used = 0.0
    for i, w in enumerate(widths):
        if not rows or (rows[-1] and used + w > room):
            rows.append([])
            used = 0.0
        rows[-1].append(i)
        used += w
    return rows


def _header(title: str, subtitle: str, legend: Sequence[str], no_data: bool = False) -> tuple[list[str], float]:
    """Title, subtitle and legend at the top (a "no data" key last when some value is missing); returns the
    elements and the y where the plot may start."""
    out = [f'<text x="8" y="18" font-size="{TITLE_FONT}" font-weight="bold">{esc(title)}</text>']
    legend = [*legend, "no data"] if no_data else list(legend)
    y = 24.0
    if subtitle:
        out.append(f'<text x="8" y="34" fill="#555">{esc(subtitle)}</text>')
        y = 40.0
    if legend:
        labels = [truncate(clean(name), 160, FONT) for name in legend]
        widths = [18 + text_width(label, FONT) + 14 for label in labels]
        title_w = 8 + text_width(clean(title), TITLE_FONT) * 1.1 + 16
        if title_w + sum(widths) <= WIDTH - 8:
            rows = [(14.0, list(range(len(labels))))]  # on the title line
        else:  # below the title, in as many rows as the keys need: none runs past the chart's edge
            rows = []
            for members in legend_rows(widths, WIDTH - 16):
                rows.append((y + 2, members))
                y += 16
        for ly, members in rows:
            x = WIDTH - 8 - sum(widths[i] for i in members)  # right-aligned
            for i in members:
                key = (f'fill="{NO_DATA_FILL}" stroke="{NO_DATA_STROKE}" stroke-dasharray="2 1" class="no-data-key"'
                       if no_data and i == len(labels) - 1 else f'fill="{COLORS[i % len(COLORS)]}"')
                out.append(f'<rect x="{_f(x)}" y="{_f(ly - 9)}" width="12" height="10" {key}/>')
                out.append(f'<text x="{_f(x + 16)}" y="{_f(ly)}">{html.escape(labels[i], quote=True)}</text>')
                x += widths[i]
    return out, y + 8


def _no_data(x: float, y: float, w: float, h: float, vertical: bool) -> str:
    """The "no data" mark: a dashed grey box, labelled when there is room (never confused with a 0 bar)."""
    box = (f'<rect class="no-data" x="{_f(x)}" y="{_f(y)}" width="{_f(w)}" height="{_f(h)}" fill="{NO_DATA_FILL}" '
           f'stroke="{NO_DATA_STROKE}" stroke-dasharray="3 2"/>')
    label = "no data"
    if vertical and w >= FONT + 2 and h >= text_width(label, FONT - 1) + 8:
        cx, cy = x + w / 2 + (FONT - 1) / 2 - 1, y + h / 2
        box += (f'<text class="no-data" transform="rotate(-90 {_f(cx)} {_f(cy)})" x="{_f(cx)}" y="{_f(cy)}" '
                f'text-anchor="middle" font-size="{FONT - 1}" fill="#666">{label}</text>')
    elif not vertical and w >= text_width(label, FONT - 1) + 8 and h >= FONT:
        box += (f'<text class="no-data" x="{_f(x + 6)}" y="{_f(y + h / 2 + 4)}" font-size="{FONT - 1}" '
                f'fill="#666">{label}</text>')
    return box


# ---- charts -------------------------------------------------------------------------------------------


def bar_chart(
    title: str,
    categories: Sequence[object],
    series: Sequence[tuple[str, Sequence[Number]]],
    *,
    y_label: str = "",
    subtitle: str = "",
    log_seconds: bool = False,
    marked: int | None = None,
    reference: tuple[str, float] | None = None,
) -> str:
    """Grouped vertical bars: one group per category, one bar per series (legend when more than one).

    log_seconds: the values are seconds, drawn on a log axis with duration ticks (0 and waits under the lowest
    tick sit on the baseline). marked: the index of a series whose bars are labelled with their value (e.g. the
    median). reference: (label, value), a dashed line across the plot with its label (e.g. the median of all).
    """
    names = [clean(c) for c in categories]
    full = [clean(c, one_line=False) for c in categories]
    n = len(names)
    vals = [[to_float(v) for v in values] for _, values in series]
    for label, values in series:
        if len(values) != n:
            raise ValueError(f"series {label!r} has {len(values)} values for {n} categories")
    finite = [max(v, 0.0) for col in vals for v in col if v is not None]
    if reference is not None and to_float(reference[1]) is not None:
        finite.append(max(float(reference[1]), 0.0))
    label_of = short_duration if log_seconds else compact
    if log_seconds:
        ticks = log_seconds_ticks(finite)
        bottom, top_val = ticks[0], ticks[-1]
    else:
        ticks = nice_ticks(max(finite, default=0.0))
        bottom, top_val = 0.0, ticks[-1]
    tick_text = [label_of(t) for t in ticks]
    missing = any(v is None for col in vals for v in col)

    parts, plot_top = _header(title, subtitle, [s for s, _ in series] if len(series) > 1 else [], missing)
    if marked is not None:
        plot_top += FONT + 2  # room for the value labels over the tallest bars
    left = 10 + (16 if y_label else 0) + max(text_width(t, FONT) for t in tick_text)
    right = 12.0
    plot_w = WIDTH - left - right
    slot = plot_w / max(n, 1)

    # Category labels: horizontal when they fit, else rotated -45 deg, cut to LABEL_MAX_PX, font shrunk
    # for dense charts, and only every k-th labelled when even the smallest font overlaps.
    font = float(FONT)
    every = 1
    widest = max((text_width(s, FONT) for s in names), default=0.0)
    rotated = widest > slot - 4
    if rotated:
        pitch = slot * math.sqrt(0.5)  # distance between neighbouring -45 deg labels
        font = min(float(FONT), max(float(MIN_FONT), pitch - 1))
        every = max(1, math.ceil((font + 1) / pitch))
        shown = [truncate(s, LABEL_MAX_PX, font) for s in names]
        label_h = max((text_width(s, font) for s in shown), default=0.0) * math.sqrt(0.5) + font + 8
    else:
        shown = names
        label_h = FONT + 8
    if rotated:
        # A -45 deg label ends at its bar and runs down to the left: widen the left margin so that the first
        # labels do not start left of the chart (they were clipped at x < 0).
        for _ in range(3):
            overhang = max((text_width(shown[i], font) * math.sqrt(0.5) + 4 - (left + (i + 0.5) * slot)
                            for i in range(0, n, every) if shown[i]), default=0.0)
            if overhang <= 0:
                break
            left += overhang + 1
            plot_w = WIDTH - left - right
            slot = plot_w / max(n, 1)
    plot_h = 220.0
    height = plot_top + plot_h + label_h + 6
    y0 = plot_top + plot_h  # pixel y of value 0

    def y_of(v: float) -> float:
        if log_seconds:
            if v <= bottom:
                return y0
            return y0 - plot_h * math.log10(min(v, top_val) / bottom) / math.log10(top_val / bottom)
        return y0 - plot_h * min(max(v, 0.0), top_val) / top_val

    svg = _open(title, WIDTH, height)
    svg += parts
    # grid and y axis
    for t, text in zip(ticks, tick_text, strict=True):
        y = y_of(t)
        svg.append(f'<line x1="{_f(left)}" x2="{_f(WIDTH - right)}" y1="{_f(y)}" y2="{_f(y)}" stroke="#ddd"/>')
        svg.append(f'<text x="{_f(left - 5)}" y="{_f(y + 4)}" text-anchor="end">{esc(text)}</text>')
    if y_label:
        cy = plot_top + plot_h / 2
        svg.append(f'<text transform="rotate(-90 12 {_f(cy)})" x="12" y="{_f(cy)}" text-anchor="middle">'
                   f"{esc(y_label)}</text>")
    # bars
    k = max(len(series), 1)
    group_w = slot * 0.8
    bar_w = group_w / k
    series_names = [html.escape(clean(s), quote=True) for s, _ in series]
    for i in range(n):
        x_slot = left + i * slot
        name = html.escape(full[i], quote=True)
        shown_vals = [html.escape(exact(raw[i]), quote=True) for _, raw in series]
        summary = "; ".join(f"{s}: {v}" for s, v in zip(series_names, shown_vals, strict=True))
        svg.append(f'<g><title>{name}\n{summary}</title>'
                   f'<rect x="{_f(x_slot)}" y="{_f(plot_top)}" width="{_f(slot)}" height="{_f(plot_h)}" '
                   f'fill="#fff" fill-opacity="0"/>')
        for j in range(len(series)):
            v = vals[j][i]
            x = x_slot + (slot - group_w) / 2 + j * bar_w
            if v is None:
                svg.append(_no_data(x, plot_top, bar_w, plot_h, vertical=True))
                continue
            y = y_of(v)
            color = COLORS[j % len(COLORS)]
            svg.append(f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(bar_w)}" height="{_f(y0 - y)}" '
                       f'fill="{color}"><title>{name}\n{series_names[j]}: {shown_vals[j]}'
                       "</title></rect>")
            if y0 - y < 2:  # a 0 (or a wait under the axis floor) is data: a thick line on the baseline
                svg.append(f'<line class="zero" x1="{_f(x)}" x2="{_f(x + bar_w)}" y1="{_f(y0 - 1.5)}" '
                           f'y2="{_f(y0 - 1.5)}" stroke="{color}" stroke-width="3"/>')
            if j == marked:
                text = label_of(v)
                size = min(float(FONT), max(float(MIN_FONT), bar_w / max(text_width(text, 1.0), 1e-9)))
                if text_width(text, size) <= slot:
                    svg.append(f'<text class="marked" x="{_f(x + bar_w / 2)}" y="{_f(y - 3)}" text-anchor="middle" '
                               f'font-size="{_f(size)}" font-weight="bold" paint-order="stroke" stroke="#fff" stroke-width="2">'
                               f"{esc(text)}</text>")
        svg.append("</g>")
    if reference is not None and to_float(reference[1]) is not None:
        ry = y_of(float(reference[1]))
        text = truncate(clean(reference[0]), plot_w - 8, FONT)
        svg.append(f'<line class="reference" x1="{_f(left)}" x2="{_f(WIDTH - right)}" y1="{_f(ry)}" y2="{_f(ry)}" '
                   f'stroke="#000" stroke-width="1.5" stroke-dasharray="6 3"/>')
        svg.append(f'<text class="reference" x="{_f(WIDTH - right - 4)}" y="{_f(max(ry - 4, plot_top + FONT))}" '
                   f'text-anchor="end" font-weight="bold" paint-order="stroke" stroke="#fff" stroke-width="3">'
                   f"{html.escape(text, quote=True)}</text>")
    svg.append(f'<line x1="{_f(left)}" x2="{_f(WIDTH - right)}" y1="{_f(y0)}" y2="{_f(y0)}" stroke="#333"/>')
    svg.append(f'<line x1="{_f(left)}" x2="{_f(left)}" y1="{_f(plot_top)}" y2="{_f(y0)}" stroke="#333"/>')
    # category labels
    for i, label in enumerate(shown):
        if i % every or not label:
            continue
        cx = left + (i + 0.5) * slot
        if rotated:
            ly = y0 + 10
            svg.append(f'<text transform="rotate(-45 {_f(cx)} {_f(ly)})" x="{_f(cx)}" y="{_f(ly)}" '
                       f'text-anchor="end" font-size="{_f(font)}">{html.escape(label, quote=True)}</text>')
        else:
            svg.append(f'<text x="{_f(cx)}" y="{_f(y0 + FONT + 4)}" text-anchor="middle">'
                       f"{html.escape(label, quote=True)}</text>")
    svg.append("</svg>")
    return "".join(svg)


def hbar_chart(
    title: str,
    labels: Sequence[object],
    values: Sequence[Number],
    *,
    x_label: str = "",
    subtitle: str = "",
) -> str:
    """Horizontal bars, the first label on top (pass the largest first for a ranking)."""
    if len(labels) != len(values):
        raise ValueError(f"{len(labels)} labels for {len(values)} values")
    names = [clean(label) for label in labels]
    full = [clean(label, one_line=False) for label in labels]
    vals = [to_float(v) for v in values]
    ticks = nice_ticks(max((max(v, 0.0) for v in vals if v is not None), default=0.0))
    top_val = ticks[-1]
    tick_text = [compact(t) for t in ticks]

    parts, plot_top = _header(title, subtitle, [], any(v is None for v in vals))
    shown = [truncate(s, HLABEL_MAX_PX, FONT) for s in names]
    left = 12 + max((text_width(s, FONT) for s in shown), default=0.0)
    right = 8 + text_width(tick_text[-1], FONT) / 2
    plot_w = WIDTH - left - right
    row = 20.0
    plot_h = row * max(len(names), 1)
    y0 = plot_top + plot_h
    height = y0 + FONT + 10 + (18 if x_label else 0)

    def x_of(v: float) -> float:
        return left + plot_w * min(max(v, 0.0), top_val) / top_val

    svg = _open(title, WIDTH, height)
    svg += parts
    for t, text in zip(ticks, tick_text, strict=True):
        x = x_of(t)
        svg.append(f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{_f(plot_top)}" y2="{_f(y0)}" stroke="#ddd"/>')
        svg.append(f'<text x="{_f(x)}" y="{_f(y0 + FONT + 4)}" text-anchor="middle">{esc(text)}</text>')
    if x_label:
        svg.append(f'<text x="{_f(left + plot_w / 2)}" y="{_f(height - 6)}" text-anchor="middle">'
                   f"{esc(x_label)}</text>")
    for i, label in enumerate(shown):
        y = plot_top + i * row
        tip = f"{esc(full[i], one_line=False)}\n{esc(x_label or 'value')}: {esc(exact(values[i]))}"
        svg.append(f'<g><title>{tip}</title>'
                   f'<rect x="0" y="{_f(y)}" width="{_f(WIDTH)}" height="{_f(row)}" fill="#fff" fill-opacity="0"/>'
                   f'<text x="{_f(left - 6)}" y="{_f(y + row / 2 + 4)}" text-anchor="end">'
                   f"{html.escape(label, quote=True)}</text>")
        v = vals[i]
        if v is None:
            svg.append(_no_data(left, y + 3, plot_w, row - 6, vertical=False))
        else:
            svg.append(f'<rect x="{_f(left)}" y="{_f(y + 3)}" width="{_f(x_of(v) - left)}" height="{_f(row - 6)}" '
                       f'fill="{COLORS[0]}"><title>{tip}</title></rect>')
            if x_of(v) - left < 2:  # 0 is data: a thick line on the axis
                svg.append(f'<line class="zero" x1="{_f(left + 1.5)}" x2="{_f(left + 1.5)}" y1="{_f(y + 3)}" '
                           f'y2="{_f(y + row - 3)}" stroke="{COLORS[0]}" stroke-width="3"/>')
        svg.append("</g>")
    svg.append(f'<line x1="{_f(left)}" x2="{_f(left)}" y1="{_f(plot_top)}" y2="{_f(y0)}" stroke="#333"/>')
    svg.append(f'<line x1="{_f(left)}" x2="{_f(WIDTH - right)}" y1="{_f(y0)}" y2="{_f(y0)}" stroke="#333"/>')
    svg.append("</svg>")
    return "".join(svg)
