"""Report outputs: report.json, one CSV per table, a self-contained report.html, gpuclust.prom.

Every file is written to a temporary name in the output directory and renamed into place, so a reader
(a web server, node_exporter's textfile collector) never sees a half-written file.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.jsonrecords import iso_utc, iso_utc_column
from gpuclust.accounting.figures.metrics import Report, deprecated
from gpuclust.accounting.output import gpuuse_render, lemon_render, svgplot
from gpuclust.accounting.output.economics_render import economics_families, economics_html
from gpuclust.accounting.output.htmltext import words_whole
from gpuclust.atomicfile import write_atomic
from gpuclust.errors import InputError, Problem
from gpuclust.output import to_json

if TYPE_CHECKING:  # (prom, and prometheus_client with it, loads only when gpuclust.prom is written)
    import pyarrow as pa

    from gpuclust.accounting.output import prom

FORMATS = ("html", "csv", "json", "prom", "parquet")
# Families other parts of the report add to gpuclust.prom, besides the accounting ones prom.py writes itself.
PROM_CONTRIBUTORS: tuple[prom.Contributor, ...] = (economics_families, gpuuse_render.prom_families,
                                                   lemon_render.prom_families)
TREND_VIEWS = (30, 90)
ECONOMICS_SECTION_TABLES = frozenset({"economics_terms", "economics_baselines"})  # shown in its own section  # days shown in the HTML trend view (the report holds the longest)


def parse_formats(text: str) -> tuple[str, ...]:
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = [item for item in items if item not in FORMATS]
    if unknown or not items:
        raise InputError(f"unknown format(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(FORMATS)}")
    return items


def prepare_out_dir(out_dir: Path) -> None:
    """Create the output directory and prove a file can be written there, before any work is done: an
    unwritable --out (a path under a file, under /proc, no permission) is an InputError naming it."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".gpuclust-probe.", dir=out_dir)
        os.close(fd)
        os.unlink(tmp)
    except (OSError, ValueError) as exc:
        raise InputError(Problem(str(out_dir), None, f"cannot write the report here: {_why(exc)}; point --out at a "
                                                          "directory you can write")) from None


def _why(exc: BaseException) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


# Context every output carries, so that nightly files can be concatenated: report.json's first keys, and the
# last columns of every CSV/Parquet table.
CONTEXT_KEYS = ("cluster", "period", "generated_at")
CONTEXT_COLUMNS = ("cluster", "period_start", "period_end", "generated_at")


def context_row(report: Report) -> dict[str, Any]:
    """The context columns' values (None where the report has no context: a report built without add_context)."""
    d = report.data
    return {"cluster": d.get("cluster"), "period_start": d["period"]["start"], "period_end": d["period"]["end"],
            "generated_at": d.get("generated_at")}


def with_context(frame: pd.DataFrame, report: Report | Mapping[str, Any]) -> pd.DataFrame:
    """`frame` with the context columns appended (a table's own column of the same name is kept as is);
    `report`: the report, or its context_row."""
    out = frame.copy()
    for key, value in (context_row(report) if isinstance(report, Report) else report).items():
        if key not in out.columns:
            out[key] = pd.Series([value] * len(out), index=out.index, dtype=object)
    return out


# A table this long is written by Arrow's CSV writer (C++), which is many times quicker than pandas' own
# (BENCHMARKS.md, "Measurements behind the code's design choices"). The text is pandas' but for floats, which Arrow writes in
# the shortest form that reads back as the same number (3600 for 3600.0, 0.00001 for 1e-05). A table Arrow
# cannot write that way (a value holding a comma, quote or newline; mixed types) falls back to pandas.
LARGE_CSV_ROWS = 50_000
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.]+")

# CSV formula injection (OWASP): a spreadsheet runs a cell that starts with one of these as a formula, and job
# names, comments' labels, accounts, users and node lists are the users' text. In the CSVs only, a text cell
# starting with one is written with a leading "'" (the spreadsheet shows the text); numeric columns are never
# touched (a negative number stays -1.5). report.json, Parquet and gpuclust.prom keep the raw value.
FORMULA_START = "=+-@\t\r"
_FORMULA_START_RE = "^[=+\\-@\t\r]"


def _formula_like(value: Any) -> bool:
    return isinstance(value, str) and value != "" and value[0] in FORMULA_START


def spreadsheet_safe(value: Any) -> Any:
    """`value` as a CSV text cell may hold it: a str starting with a FORMULA_START character prefixed with "'";
    anything else (a number, None) unchanged."""
    return "'" + value if _formula_like(value) else value


def _spreadsheet_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with spreadsheet_safe applied to its text columns (object, string, categorical); the frame
    itself when no cell needs it."""
    out = frame
    for i, (_name, column) in enumerate(frame.items()):
        if not (column.dtype == object or isinstance(column.dtype, (pd.StringDtype, pd.CategoricalDtype))):
            continue
        if not any(_formula_like(v) for v in column.unique()):
            continue
        if out is frame:
            out = frame.copy()
        out.isetitem(i, column.astype(object).map(spreadsheet_safe).to_numpy())
    return out


def _spreadsheet_safe_table(table: pa.Table) -> pa.Table:
    """The Arrow table with the same rule as _spreadsheet_safe_frame: its string columns (plain or dictionary
    encoded) with "'" before a value starting with a FORMULA_START character."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        kind = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            continue
        column = table.column(i)
        if pa.types.is_dictionary(field.type):
            column = column.cast(kind)
        if not pc.any(pc.match_substring_regex(column, _FORMULA_START_RE)).as_py():
            continue
        table = table.set_column(i, field.name, pc.replace_substring_regex(column, _FORMULA_START_RE, "'\\0",
                                                                           max_replacements=1))
    return table


def csv_bytes(frame: pd.DataFrame, context: Mapping[str, Any] | None = None) -> bytes:
    """The frame as CSV, UTF-8 (a large one as Arrow writes it: never decoded into one str and encoded back),
    `context` (context_row) appended as with_context appends it. Every CSV the report writes goes through here,
    and so through the formula-injection rule (spreadsheet_safe) whichever writer writes it."""
    def by_pandas() -> bytes:
        whole = with_context(frame, context) if context else frame
        return _spreadsheet_safe_frame(whole).to_csv(index=False).encode("utf-8")

    names = [*frame.columns, *(key for key in context or {} if key not in frame.columns)]
    if len(frame) <= LARGE_CSV_ROWS or not all(_PLAIN_NAME.fullmatch(str(c)) for c in names):
        return by_pandas()
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    def write(part: pa.Table) -> bytes:
        buf = io.BytesIO()
        pacsv.write_csv(part, buf, pacsv.WriteOptions(include_header=False, quoting_style="none"))
        return buf.getvalue()

    try:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        for i, name in enumerate(frame.columns):
            if frame[name].dtype == np.bool_:  # pandas writes True/False, Arrow true/false
                table = table.set_column(i, str(name), pc.if_else(table.column(i), "True", "False"))
        for key, value in (context or {}).items():  # one value each: a constant column, not n objects
            if key not in frame.columns:
                table = table.append_column(key, pa.repeat(pa.scalar(value, pa.string() if value is None else None),
                                                           len(table)))
        table = _spreadsheet_safe_table(table)
        # In slices side by side (the writer releases the GIL; formatting floats is most of its time).
        k = max(1, min(4, os.cpu_count() or 1, len(table) // LARGE_CSV_ROWS))
        cut = [len(table) * i // k for i in range(k + 1)]
        with ThreadPoolExecutor(max_workers=k) as pool:
            parts = list(pool.map(write, [table.slice(a, b - a) for a, b in zip(cut, cut[1:], strict=False)]))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return by_pandas()
    return b"".join([(",".join(str(c) for c in names) + "\n").encode("utf-8"), *parts])


# The decimals of each figure's CSV cells (figures.catalog; a name two places share: the finer of the two).
# Its old names (metrics.deprecated) carry the same value, so the same decimals.
CSV_DECIMALS: dict[str, int] = {}
for _f in catalog.FIGURES:
    for _name in (_f.name, *_f.old_names, *(old for _, old in _f.old_places)):
        CSV_DECIMALS[_name] = max(CSV_DECIMALS.get(_name, 0), _f.csv_decimals)


def round_for_csv(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with each float column rounded as its figure declares (catalog csv_decimals; a column no figure
    declares: catalog.CSV_DEFAULT_DECIMALS), so a cell never carries a float's noise (0.5850000000000001), and
    each timestamp column as ISO 8601 text in UTC (jsonrecords.iso_utc_column). Other columns, and a frame
    with neither, are left as they are."""
    out = with_text_times(frame)
    frame = out
    for i, (name, column) in enumerate(frame.items()):
        if not pd.api.types.is_float_dtype(column.dtype):
            continue
        decimals = CSV_DECIMALS.get(str(name), catalog.CSV_DEFAULT_DECIMALS)
        if out is frame:
            out = frame.copy()
        out.isetitem(i, column.round(decimals).to_numpy())
    return out


def with_text_times(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its timestamp columns (gpu_use_jobs' start and end) as ISO 8601 text, as every file and view
    shows them; the frame itself when it has none."""
    times = [name for name, column in frame.items() if pd.api.types.is_datetime64_any_dtype(column.dtype)]
    if not times:
        return frame
    return frame.assign(**{str(name): iso_utc_column(frame[name]) for name in times})


PREVIOUS_DIR = re.compile(r"\d{4}-\d\d-\d\d")  # the dated directories of examples/cron/gpuclust-report


def _period(data: Mapping[str, Any]) -> tuple[datetime, datetime] | None:
    try:
        period = data["period"]
        return datetime.fromisoformat(str(period["start"])), datetime.fromisoformat(str(period["end"]))
    except (KeyError, TypeError, ValueError):
        return None


def find_previous(out_dir: Path, data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The report.json of the last report before this one, for the page's "change since the last report": the
    one already in `out_dir` (a report rebuilt in place) or in a dated sibling directory (REPORT_DIR/YYYY-MM-DD,
    as the nightly script keeps them), of the same cluster and the same period length, ending at or before this
    period's start; the latest such. None when there is none (a file that cannot be read is passed over: the
    comparison is a convenience, never a reason to fail the build)."""
    from gpuclust.accounting.output.reportdoc import SCHEMA

    this = _period(data)
    if this is None:
        return None
    candidates = [out_dir / "report.json"]
    try:
        candidates += [d / "report.json" for d in sorted(out_dir.resolve().parent.iterdir())
                       if PREVIOUS_DIR.fullmatch(d.name) and d.resolve() != out_dir.resolve()]
    except OSError:
        pass
    best: tuple[datetime, dict[str, Any]] | None = None
    for path in candidates:
        try:
            if not path.is_file():
                continue
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if not isinstance(old, dict) or old.get("schema") != SCHEMA or old.get("cluster") != data.get("cluster"):
            continue
        span = _period(old)
        if span is None or span[1] - span[0] != this[1] - this[0] or span[1] > this[0]:
            continue
        if best is None or span[1] > best[0]:
            best = (span[1], old)
    return None if best is None else best[1]


def write_report(report: Report, out_dir: Path, formats: Iterable[str]) -> list[Path]:
    written: list[Path] = []
    formats = tuple(formats)
    # read before report.json is replaced: an earlier period's report in the same directory is the previous one
    previous = find_previous(out_dir, report.data) if "html" in formats else None
    for fmt in formats:
        if fmt == "json":
            path = out_dir / "report.json"
            write_atomic(path, to_json(report.data) + "\n", make_parents=True, input_error=True)
            written.append(path)
        elif fmt in ("csv", "parquet"):
            for name, table in report.tables.items():
                # the renamed figures' old column names too, for one release (metrics.deprecated)
                frame = deprecated.add_columns(name, table, report.data.get("totals"))
                path = out_dir / f"{name}.{fmt}"
                if fmt == "csv":
                    write_atomic(path, csv_bytes(round_for_csv(frame), context_row(report)), make_parents=True,
                                 input_error=True)
                else:
                    buf = io.BytesIO()
                    with_context(with_text_times(frame), report).to_parquet(buf, index=False)
                    write_atomic(path, buf.getvalue(), make_parents=True, input_error=True)
                written.append(path)
        elif fmt == "html":
            path = out_dir / "report.html"
            write_atomic(path, render_html(report, previous), make_parents=True, input_error=True)
            written.append(path)
        elif fmt == "prom":
            from gpuclust.accounting.output import prom

            path = out_dir / prom.FILENAME
            prom.write_textfile(report, path, PROM_CONTRIBUTORS)
            written.append(path)
    return written


# ---- HTML ---------------------------------------------------------------------------------------------

# Column headers people read: a figure's is its label in figures.catalog; those of the columns that say which
# group, job or day a row is follow (a column in neither: its name with spaces, first letter capital).
HEADERS = {
    **catalog.labels(),
    "job_id": "Job ID", "user": "User", "account": "Account", "partition": "Partition", "qos": "QOS",
    "wckey": "WCKey", "job_name": "Job name", "state": "State", "exit_code": "Exit code", "node_list": "NodeList",
    "start": "Start (UTC)", "end": "End (UTC)", "day": "Day", "gpus": "GPUs", "gpu_type": "GPU type",
    "elapsed_s": "Elapsed", "telemetry": "Telemetry source", "pending_reason": "Pending reason",
    "wait_s_total": "Total queue wait", "rule": "Rule", "refusals": "Refusals", "node": "Node",
    "rank": "Rank",
}
TABLE_TITLES = {
    "queue_wait_by_partition": "Queue wait (Start - Eligible) by partition",
    "queue_wait_by_account": "Queue wait (Start - Eligible) by account",
    "queue_wait_by_qos": "Queue wait (Start - Eligible) by QOS",
    "hold_by_partition": "Hold (Eligible - Submit) by partition",
    "hold_by_account": "Hold (Eligible - Submit) by account",
    "hold_by_qos": "Hold (Eligible - Submit) by QOS",
    "runs_by_account": "Runs by account", "runs_by_partition": "Runs by partition", "runs_by_wckey": "Runs by WCKey",
    "runs_by_user": "Runs by user",
    "top_failures": "Top failures (by GPU-hours)", "trend_daily": "Daily trend",
    "gpu_use_totals": "GPU use: totals", "gpu_use_by_partition": "GPU use by partition",
    "gpu_use_by_account": "GPU use by account", "gpu_use_by_user": "GPU use by user",
    "gpu_use_worst_held_idle": "Jobs that held GPUs idle longest", "gpu_use_jobs": "Jobs and their GPUs",
    "wait_by_pending_reason": "Queue wait by pending reason",
    "refusals_by_rule": "Submit policy refusals by rule", "refusals_by_account": "Submit policy refusals by account",
    "refusals_by_user": "Submit policy refusals by user",
    "refusals_by_partition": "Submit policy refusals by partition",
    "economics_terms": "Unit economics terms", "economics_baselines": "Unit economics baselines",
    "telemetry_nodes": "Node telemetry",
    "findings": "Waste findings (the most costly first)", "findings_by_kind": "Waste findings by kind",
}
# Short identifiers: on one line (other cells wrap between words, htmltext.words_whole; a start or end time
# between its date and its time).
KEEP_WHOLE_COLUMNS = frozenset({"job_id", "state", "exit_code", "day", "partition", "qos"})
# The page's money columns (a currency in the header) and percentages: the runs' and sizing's figures (the tables
# of the other parts carry neither).
MONEY_COLUMNS = frozenset(f.name for f in catalog.figures(catalog.RUNS, catalog.SIZING, catalog.FINDINGS)
                          if f.unit == catalog.MONEY)
RATIO_COLUMNS = frozenset(f.name for f in catalog.FIGURES if f.percent)
DASH = "\u2014"


def declared_header(column: str) -> str | None:
    """A column's declared header (a figure's label, or one of HEADERS); None when nothing declares it."""
    return HEADERS.get(column)


def declared_title(name: str) -> str | None:
    """A table's declared title; None when nothing declares it."""
    if name.startswith("runs_by_label_"):
        return f"Runs by label {name.removeprefix('runs_by_label_')}"
    return TABLE_TITLES.get(name)


def header_text(column: str, currency: str | None = None) -> str:
    text = declared_header(column) or (column.replace("_", " ")[:1].upper() + column.replace("_", " ")[1:])
    return f"{text} ({currency})" if currency and column in MONEY_COLUMNS else text


def table_title(name: str) -> str:
    return declared_title(name) or name.replace("_", " ").capitalize()


def duration(seconds: Any) -> str:
    """Seconds as people read a wait: 0s, 45s, 12m 5s, 1h 23m, 2d 3h."""
    value = svgplot.to_float(seconds)
    if value is None:
        return DASH
    s = int(round(abs(value)))
    sign = "-" if value < 0 and s else ""
    days, rest = divmod(s, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{sign}{days}d {hours}h" if hours else f"{sign}{days}d"
    if hours:
        return f"{sign}{hours}h {minutes}m" if minutes else f"{sign}{hours}h"
    if minutes:
        return f"{sign}{minutes}m {secs}s" if secs else f"{sign}{minutes}m"
    return f"{sign}{secs}s"


def number(value: Any) -> str:
    """A figure with thousands separators: integers without decimals, others to 2 decimals from 1 up and to 3
    significant digits below 1 (0.0125, 0.000156)."""
    v = svgplot.to_float(value)
    if v is None:
        return DASH
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    if abs(v) < 1e-12:
        return "0"
    decimals = min(12, 2 - math.floor(math.log10(abs(v))))  # 3 significant digits, never an exponent
    return f"{v:.{decimals}f}".rstrip("0")


def _is_number_column(column: str, series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype) \
        or column.endswith("_s") or column in MONEY_COLUMNS


# A figure's unit that fixes its decimals on the page (others: column_decimals' rule).
_UNIT_OF: dict[str, str] = {f.name: f.unit for f in catalog.FIGURES}
_UNIT_DECIMALS = {catalog.PERCENT: 1, catalog.MIB: 0}


def column_decimals(column: str, values: Iterable[Any]) -> int | None:
    """The decimals of every number in one column, so that a column reads alike (never 3.00 beside 9): none
    when all are whole; its unit's (a percentage: 1); else 2, or 3 significant digits of the largest value
    below 1. None: no number in the column."""
    known = [v for v in (svgplot.to_float(x) for x in values) if v is not None]
    if not known:
        return None
    if all(v.is_integer() for v in known):
        return 0
    unit = _UNIT_OF.get(column)
    if unit in _UNIT_DECIMALS:
        return _UNIT_DECIMALS[unit]
    biggest = max(abs(v) for v in known)
    if biggest >= 1:
        return 2
    return min(6, 2 - math.floor(math.log10(biggest)))


def _fixed(value: float, decimals: int) -> str:
    return "0" if value == 0 else f"{value:,.{decimals}f}"


def _cell(column: str, value: Any, decimals: int | None = None) -> tuple[str, str | None]:
    """(text shown, sort key or None) of one cell; `decimals`: its column's (column_decimals), None: its own."""
    if column.endswith("_s"):
        v = svgplot.to_float(value)
        return duration(value), "" if v is None else repr(v)
    if column in RATIO_COLUMNS:
        v = svgplot.to_float(value)
        return (DASH if v is None else f"{v * 100:.1f} %"), "" if v is None else repr(v)
    if column in ("start", "end") and isinstance(value, pd.Timestamp):
        value = iso_utc(value)
    if column in ("start", "end") and isinstance(value, str) and "T" in value:
        return value.replace("T", " ").removesuffix("+00:00"), value
    if isinstance(value, str):
        return value, None
    v = svgplot.to_float(value)
    if v is not None and decimals is not None:
        return _fixed(v, decimals), repr(v)
    if v is not None or value is None or (isinstance(value, float) and math.isnan(value)):
        return number(value), "" if v is None else repr(v)
    return str(value), None


# A table of this many columns is wide (data-wide): printed in a smaller font, to fit a portrait A4 or Letter page.
WIDE_COLUMNS = 10
# A long table shows its first PAGE_ROWS rows in this order (the rest are in its CSV, which the page links):
# (column, descending) keys, the first the table has; a table none of them fits keeps its own order.
PAGE_ROWS = 25
PAGE_ORDER: tuple[tuple[str, bool], ...] = (
    ("cost", True), ("held_idle_gpu_hours", True), ("allocated_gpu_hours", True), ("gpu_hours", True),
    ("jobs", True), ("refusals", True))
# Columns of a table the page shows (a per-job table is too wide for a page; its CSV has them all).
PAGE_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_use_jobs": ("job_id", "user", "account", "partition", "job_name", "node_list", "gpu_type", "gpus", "start",
                     "end", "allocated_gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours", "util_mean_pct"),
    # (the causes' split and the partition's pooled rate and expectation stay in lemon_nodes.csv and report.json)
    "lemon_nodes": ("rank", "node", "partition", "jobs", "gpu_hours", "failures", "failures_per_gpu_hour",
                    "p_adjusted", "suspect"),
}


PAGE_ORDER_OF: dict[str, tuple[tuple[str, bool], ...]] = {
    "gpu_use_jobs": (("allocated_gpu_hours", True),),
    # (figures/findings.rank already puts the most costly first: a stable sort on it keeps that order)
    "findings": (("held_idle_cost", True), ("held_idle_gpu_hours", True)),
}


def page_rows(frame: pd.DataFrame, limit: int = PAGE_ROWS, name: str | None = None
              ) -> tuple[pd.DataFrame, str | None]:
    """(the rows a long table shows, the column they are ranked by): the whole frame when it is short."""
    if len(frame) <= limit:
        return frame, None
    for column, descending in (*PAGE_ORDER_OF.get(name or "", ()), *PAGE_ORDER):
        if column in frame.columns and frame[column].notna().any():
            ranked = frame.sort_values(column, ascending=not descending, na_position="last", kind="stable")
            return ranked.head(limit), column
    return frame.head(limit), None


def table_html(frame: pd.DataFrame, *, currency: str | None = None, sortable: bool = True,
               csv_name: str | None = None, limit: int | None = None) -> str:
    """A table with human headers, numbers right-aligned and formatted alike per column, text left; sortable by
    its headers. With `limit`, a longer table shows its top `limit` rows (page_rows) and says where the rest
    are (`csv_name`.csv beside the page)."""
    if frame.empty:
        return "<p><em>no rows</em></p>"
    e = html.escape
    note = ""
    if limit is not None and len(frame) > limit:
        shown, ranked_by = page_rows(frame, limit, csv_name)
        order = f" by {header_text(ranked_by, currency)}" if ranked_by else ""
        where = (f"; every row is in <a href='{e(csv_name)}.csv'>{e(csv_name)}.csv</a>" if csv_name else "")
        note = (f"<p class='more'>The top {len(shown):,} of {len(frame):,} rows{e(order)}{where}.</p>")
        frame = shown
    numeric = [_is_number_column(str(c), frame[c]) for c in frame.columns]
    decimals = [column_decimals(str(c), frame[c]) if n else None for c, n in zip(frame.columns, numeric, strict=True)]
    classes = [" class=n" if n else " class=k" if str(c) in KEEP_WHOLE_COLUMNS else ""
               for c, n in zip(frame.columns, numeric, strict=True)]
    head = "".join(f"<th scope='col'{cls}>{words_whole(header_text(str(c), currency))}</th>"
                   for c, cls in zip(frame.columns, classes, strict=True))
    rows = []
    for record in frame.itertuples(index=False, name=None):
        cells = []
        for column, value, attrs, nd in zip(frame.columns, record, classes, decimals, strict=True):
            shown_text, key = _cell(str(column), value, nd)
            if key is not None:
                attrs += f" data-v='{e(key)}'"
            cells.append(f"<td{attrs}>{e(shown_text) if attrs.startswith(' class=') else words_whole(shown_text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    cls = "t sortable" if sortable else "t"
    wide = " data-wide" if len(frame.columns) >= WIDE_COLUMNS else ""
    return (f"<div class='table-wrap'><table class='{cls}'{wide}><thead><tr>{head}</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div>" + note)


def kv_table_html(row: Mapping[str, Any], *, currency: str | None = None) -> str:
    """One record as a two-column table (figure, value): a wide single row does not fit a page."""
    e = html.escape
    body = []
    for column, value in row.items():
        shown, _ = _cell(column, value)
        if column == "target_source" and value is None:
            shown = DASH
        body.append(f"<tr><th scope='row'>{words_whole(header_text(column, currency))}</th><td class=n>{e(shown)}</td>"
                    "</tr>")
    return "<div class='table-wrap'><table class='t kv'><tbody>" + "".join(body) + "</tbody></table></div>"


# The figures the charts show, named by their glossary names.
_ALLOCATED = catalog.figure(catalog.RUNS, "gpu_hours")
_COMPLETED_RUN = catalog.figure(catalog.RUNS, "completed_run_gpu_hours")
_PER_RUN = catalog.figure(catalog.RUNS, "cost_per_completed_run")


def _plots(tables: Mapping[str, pd.DataFrame]) -> list[tuple[str, str | None]]:
    """The report's four charts as (title, inline SVG), or (title, None) when the table is empty."""
    plots: list[tuple[str, str | None]] = []

    qw = tables["queue_wait_by_partition"]
    if len(qw):
        series = [(label, qw[col].tolist()) for label, col in (("median", "median_s"), ("p90", "p90_s"),
                                                                ("max", "max_s"))]
        plots.append(("Queue wait per partition", svgplot.bar_chart(
            "Queue wait per partition", qw["partition"].tolist(), series, y_label="wait (log scale)",
            log_seconds=True, marked=0, subtitle="median labelled; a wait under 1s sits on the baseline")))
    else:
        plots.append(("Queue wait per partition", None))

    ra = tables["runs_by_account"]
    if len(ra):
        accounts = ra["account"].tolist()
        hours = [(str(f.glossary), ra[f.name].tolist()) for f in (_ALLOCATED, _COMPLETED_RUN)]
        plots.append(("GPU-hours by account", svgplot.bar_chart(
            "GPU-hours by account", accounts, hours, y_label="GPU-hours")))
        cost = ra[_PER_RUN.name].tolist()  # null (no completed run, no price): "no data", not 0
        plots.append((_PER_RUN.title, svgplot.bar_chart(
            f"{_PER_RUN.title} by account", accounts, [(str(_PER_RUN.glossary), cost)], y_label="cost",
            subtitle="no data = no completed run or no price")))
    else:
        plots += [("GPU-hours by account", None), (_PER_RUN.title, None)]

    tf = tables["top_failures"].head(15)
    if len(tf):
        labels = [f"{j} {s}" for j, s in zip(tf["job_id"], tf["state"], strict=True)]
        plots.append(("Top failures", svgplot.hbar_chart(
            "Top failures by GPU-hours", labels, tf["gpu_hours"].tolist(), x_label="GPU-hours")))
    else:
        plots.append(("Top failures", None))
    return plots


def trend_plots(frame: pd.DataFrame, days: int) -> list[tuple[str, str]]:
    """Daily GPU-hours, cost per completed run and p90 queue wait over the last `days` days of `frame`."""
    last = frame.tail(days)
    labels = [str(d)[5:] for d in last["day"]]  # MM-DD
    span = f"last {days} days, {last['day'].iloc[0]} to {last['day'].iloc[-1]}" if len(last) else f"last {days} days"
    charts = (
        ("GPU-hours per day", _ALLOCATED.name, "GPU-hours", str(_ALLOCATED.glossary)),
        (f"{_PER_RUN.title} per day", _PER_RUN.name, "cost", str(_PER_RUN.glossary)),
        ("p90 queue wait per day", "p90_wait_s", "wait (log scale)", "p90 queue wait (s)"),
    )
    out = []
    for title, col, unit, series in charts:
        values = last[col].tolist()
        if col == "p90_wait_s":
            known = sorted(v for v in (svgplot.to_float(x) for x in values) if v is not None)
            median = float(pd.Series(known).median()) if known else None
            out.append((title, svgplot.bar_chart(
                f"{title} ({span})", labels, [(series, values)], y_label=unit, log_seconds=True,
                reference=None if median is None else (f"median of the days: {svgplot.short_duration(median)}",
                                                       median))))
        else:
            out.append((title, svgplot.bar_chart(f"{title} ({span})", labels, [(series, values)], y_label=unit)))
    return out


_CSS = (
    "*,*::before,*::after{box-sizing:border-box}"
    "body{font-family:sans-serif;margin:1.5em auto;padding:0 1.5em;max-width:80em;color:#222;line-height:1.35}"
    "h1{margin-bottom:.2em;overflow-wrap:anywhere}.meta{color:#444;margin-top:0}"
    ".table-wrap{max-width:100%;overflow-x:auto;margin:.5em 0 1.5em}"
    "table.t{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:.9em}"
    # a cell's text breaks between words only (htmltext.words_whole keeps each word on one line); a table wider
    # than the page scrolls in its .table-wrap
    "table.t td,table.t th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;"
    "word-break:keep-all}.w{white-space:nowrap}"
    "table.t th{background:#eee;font-weight:600}table.t .n{text-align:right;white-space:nowrap}"
    "table.t .k{white-space:nowrap}"
    "table.t th.n,table.t th.k{white-space:normal}table.t td:not(.n):not(.k){min-width:4em}"
    "table.kv th{background:#f6f6f6;font-weight:normal}"
    "table.sortable thead th{cursor:pointer;user-select:none}"
    "table.sortable th[aria-sort=ascending]::after{content:' \\25B2'}"
    "table.sortable th[aria-sort=descending]::after{content:' \\25BC'}"
    "dt{font-weight:bold;margin-top:.4em;overflow-wrap:anywhere}dd{overflow-wrap:anywhere}.note{background:#fff4d6;padding:.5em}"
    # a chart is shown at its own size (its text as drawn, never shrunk to a few px on a phone); a figure
    # narrower than its chart scrolls it
    ".charts{display:flex;flex-wrap:wrap;gap:1em}.charts figure{margin:0;max-width:100%;flex:1 1 30em}"
    "figure{margin:.5em 0;max-width:100%;overflow-x:auto}"
    "svg.chart{display:block;max-width:none;height:auto}details{margin:1em 0}summary{cursor:pointer}"
    "details.section{border-top:1px solid #ddd;padding-top:.3em}details.section figure{margin:.5em 0}"
    "details.section>summary h2{display:inline;margin:0;font-size:1.3em}"
    # the summary band: the answers first, one card per headline figure, as many per row as fit
    ".band{margin:1em 0;padding:.8em;background:#f4f7fb;border:1px solid #c9d6e6;border-radius:6px}"
    ".band h2{margin:0 0 .2em;font-size:1.2em}.band .since{margin:0 0 .6em;color:#444}"
    ".figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(10em,1fr));gap:.6em}"
    ".fig{background:#fff;border:1px solid #d5dde8;border-radius:4px;padding:.4em .6em;min-width:0}"
    ".fig .name{font-size:.85em;color:#444}.fig .v{font-size:1.35em;font-weight:600;overflow-wrap:break-word}"
    ".fig .d{font-size:.85em;color:#555;overflow-wrap:break-word}.fig .up{color:#0b5394}.fig .down{color:#8a4b00}"
    ".fig .unknown{color:#666;font-style:italic}p.more{color:#444;font-size:.9em;margin:.3em 0}"
    "@media (max-width:600px){body{padding:0 .6em;margin-top:.6em}h1{font-size:1.4em}"
    "table.t td,table.t th{padding:2px 5px}}"
    # print: everything open, nothing cut (tables shrink and wrap between words rather than scroll; charts fit
    # the page's width), rows and figures kept whole on a page
    "@media print{body{max-width:none;margin:0;padding:0;font-size:10pt}"
    "details::details-content{content-visibility:visible;display:block}"
    "details>summary{list-style:none;cursor:auto}details>summary::-webkit-details-marker{display:none}"
    ".table-wrap,figure{overflow:visible;max-width:none}svg.chart{max-width:100%}"
    "table.t{width:100%;table-layout:auto;font-size:7pt}"
    "table.t[data-wide]{font-size:6.5pt}table.t td,table.t th{padding:1px 2px}table.t td:not(.n):not(.k){min-width:0}"
    # a word longer than a printed column can hold (htmltext.LONG_WORD) breaks on paper rather than being cut
    ".w.long{white-space:normal;overflow-wrap:anywhere}"
    "thead{display:table-header-group}tr{break-inside:avoid}"
    "figure,svg.chart,.fig,.band{break-inside:avoid}h2,h3,summary{break-after:avoid}"
    "table.sortable th[aria-sort]::after{content:''}.band{background:none}"
    "*{position:static!important}}"
)
# Sort a table by a clicked header: numbers by their data-v (missing last), text by its content. No library.
_SORT_JS = (
    "document.querySelectorAll('table.sortable thead th').forEach(function(th){"
    "th.tabIndex=0;th.title='Sort';function go(){var t=th.closest('table'),b=t.tBodies[0],i=th.cellIndex,"
    "d=th.getAttribute('aria-sort')==='ascending'?'descending':'ascending',n=th.classList.contains('n');"
    "t.querySelectorAll('thead th').forEach(function(h){h.removeAttribute('aria-sort')});"
    "th.setAttribute('aria-sort',d);var r=Array.prototype.slice.call(b.rows);"
    "function k(x){var c=x.cells[i];return c.hasAttribute('data-v')?c.getAttribute('data-v'):c.textContent}"
    "r.sort(function(a,c){var x=k(a),y=k(c),o;if(n){x=x===''?-Infinity:+x;y=y===''?-Infinity:+y;"
    "o=x<y?-1:x>y?1:0}else{o=x.localeCompare(y)}return d==='ascending'?o:-o});"
    "r.forEach(function(x){b.appendChild(x)})}"
    "th.addEventListener('click',go);th.addEventListener('keydown',function(ev){if(ev.key==='Enter')go()})});"
    # printing opens every section (a closed one would be left out of the paper copy)
    "window.addEventListener('beforeprint',function(){document.querySelectorAll('details').forEach("
    "function(x){x.open=true})});"
)


def _when(iso: Any) -> str:
    """2026-12-02T00:00:00+00:00 -> 2026-12-02 00:00 (+00:00)."""
    try:
        t = datetime.fromisoformat(str(iso))
    except ValueError:
        return str(iso)
    offset = t.strftime("%z")
    offset = f"{offset[:3]}:{offset[3:]}" if offset else ""
    return t.strftime("%Y-%m-%d %H:%M") + (f" (UTC{offset})" if offset else "")


def _row(frame: pd.DataFrame) -> dict[str, Any]:
    return {str(k): v for k, v in frame.iloc[0].items()}


# The summary band's headline figures: (key, figure in figures.catalog, where in report.json). Each card is
# named by its figure's glossary name.
HEADLINE: tuple[tuple[str, catalog.Figure, tuple[str, ...]], ...] = tuple(
    (key, catalog.figure(place, name), path) for key, place, name, path in (
        ("runs", catalog.RUNS, "runs", ("totals", "runs")),
        ("completed", catalog.RUNS, "completed", ("totals", "completed")),
        ("allocated", catalog.RUNS, "gpu_hours", ("totals", "gpu_hours")),
        ("completed_run", catalog.RUNS, "completed_run_gpu_hours", ("totals", "completed_run_gpu_hours")),
        ("busy", catalog.GPU_USE, "busy_gpu_hours", ("gpu_use", "totals", "busy_gpu_hours")),
        ("held_idle", catalog.GPU_USE, "held_idle_gpu_hours", ("gpu_use", "totals", "held_idle_gpu_hours")),
        ("cost_per_completed_run", catalog.RUNS, "cost_per_completed_run", ("totals", "cost_per_completed_run")),
        ("cost", catalog.RUNS, "cost", ("totals", "cost")),
    ))
# The band's queue wait: median and p90 of each partition (the most attempts first, up to WAIT_CARDS).
_MEDIAN_WAIT = catalog.figure(catalog.QUEUE_WAIT, "median_s")
_P90_WAIT = catalog.figure(catalog.QUEUE_WAIT, "p90_s")
_WAIT_ATTEMPTS = catalog.figure(catalog.QUEUE_WAIT, "jobs")
WAIT_CARDS = 4


# A figure's key in a previous report.json written before it was renamed (its old names in figures.catalog).
OLD_PATHS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("totals", f.name): ("totals", old) for f in catalog.figures(catalog.RUNS) for old in f.old_names}


def _dig(data: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _dig_previous(previous: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    value = _dig(previous, path)
    old = OLD_PATHS.get(path)
    return _dig(previous, old) if value is None and old is not None else value


def _change(now: float | None, before: Any) -> tuple[str, str]:
    """(text, css class) of a figure's change since the previous report."""
    was = svgplot.to_float(before)
    if now is None or was is None:
        return ("no value before" if was is None else f"was {number(was)}"), "unknown"
    diff = now - was
    if abs(diff) < 1e-12:
        return "no change", ""
    shown = ("+" if diff > 0 else "-") + number(abs(diff))
    pct = f" ({diff / was * 100:+.1f} %)" if was else ""
    return f"{shown}{pct}", "up" if diff > 0 else "down"


def _top_failure(data: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(job and state, GPU-hours and account) of the failed run with the most GPU-hours, or None."""
    rows = _dig(data, ("top_failures",)) or []
    if not rows or not isinstance(rows[0], Mapping):
        return None
    top = rows[0]
    return (f"{top.get('job_id')} {top.get('state')}",
            f"{number(top.get('gpu_hours'))} GPU-hours, account {top.get('account')}")


def summary_band(data: Mapping[str, Any], previous: Mapping[str, Any] | None) -> str:
    """The answers first: each headline figure with its change since the previous report (or why there is none).
    Busy and held-idle GPU-hours carry their coverage; an unknown figure says so (never 0)."""
    e = html.escape
    currency = data.get("currency")
    coverage = svgplot.to_float(_dig(data, ("gpu_use", "totals", "coverage")))
    if previous is None:
        since = "No previous report to compare with."
    else:
        p = previous.get("period") or {}
        since = f"Change since the previous report, {_when(p.get('start'))} to {_when(p.get('end'))}."
    cards = []
    for key, figure, path in HEADLINE:
        if key in ("busy", "held_idle") and "gpu_use" not in data:
            continue
        raw = _dig(data, path)
        value = svgplot.to_float(raw)
        money = figure.unit == catalog.MONEY
        label = f"{figure.title} ({currency})" if money and currency else figure.title
        if value is None:
            why = "no price configured" if money and _dig(data, ("totals", "cost")) is None else "unknown"
            shown = f"<span class='unknown'>{e(why)}</span>"
        else:
            shown = e(number(value))
        extra = ""
        if key in ("busy", "held_idle"):
            extra = f"<div class='d'>coverage {'unknown' if coverage is None else f'{coverage:.1%}'}</div>"
        elif key == "cost" and value is not None:
            extra = "<div class='d'>all attempts of the period's runs, failed and retried included</div>"
        if previous is not None:
            text, cls = _change(value, _dig_previous(previous, path))
            extra += f"<div class='d {cls}'>{e(text)}</div>"
        cards.append(f"<div class='fig' data-figure='{key}'><div class='name'>{e(label)}</div>"
                     f"<div class='v'>{shown}</div>{extra}</div>")
    cards += wait_cards(data, previous)
    top, before = _top_failure(data), _top_failure(previous)
    shown = "<span class='unknown'>no failed run</span>" if top is None else e(top[0])
    extra = "" if top is None else f"<div class='d'>{e(top[1])}</div>"
    if previous is not None:
        extra += f"<div class='d'>{e('was ' + before[0] if before else 'was none')}</div>"
    cards.append(f"<div class='fig' data-figure='top_failure'><div class='name'>Top failure</div>"
                 f"<div class='v'>{shown}</div>{extra}</div>")
    return (f"<section class='band' aria-label='Summary'><h2>Summary</h2><p class='since'>{e(since)}</p>"
            f"<div class='figs'>{''.join(cards)}</div></section>")


def wait_cards(data: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[str]:
    """The band's queue wait cards: per partition (most attempts first) its median and p90 queue wait."""
    e = html.escape
    rows = [r for r in _dig(data, ("queue_wait", "by_partition")) or [] if isinstance(r, Mapping)]
    rows.sort(key=lambda r: (-(svgplot.to_float(r.get(_WAIT_ATTEMPTS.name)) or 0), str(r.get("partition"))))
    before = {str(r.get("partition")): r for r in _dig(previous, ("queue_wait", "by_partition")) or []
              if isinstance(r, Mapping)}
    cards = []
    for r in rows[:WAIT_CARDS]:
        part = str(r.get("partition"))
        median, p90 = r.get(_MEDIAN_WAIT.name), r.get(_P90_WAIT.name)
        attempts = svgplot.to_float(r.get(_WAIT_ATTEMPTS.name))
        extra = (f"<div class='d'>{e(str(_P90_WAIT.glossary))} {e(duration(p90))}</div>"
                 f"<div class='d'>{e(number(attempts))} attempts started</div>")
        if previous is not None:
            was = before.get(part)
            extra += (f"<div class='d'>was {e(duration(was.get(_MEDIAN_WAIT.name)))}, p90 "
                      f"{e(duration(was.get(_P90_WAIT.name)))}</div>" if was else "<div class='d'>was none</div>")
        cards.append(f"<div class='fig' data-figure='queue_wait' data-partition='{e(part)}'><div class='name'>"
                     f"{e(_MEDIAN_WAIT.title)}, {e(part)}</div><div class='v'>{e(duration(median))}</div>{extra}</div>")
    if len(rows) > WAIT_CARDS:
        cards.append(f"<div class='fig' data-figure='queue_wait_more'><div class='name'>{e(_MEDIAN_WAIT.title)}</div>"
                     f"<div class='d'>{len(rows) - WAIT_CARDS} more partition(s): "
                     "<a href='#queue_wait_by_partition'>queue wait by partition</a></div></div>")
    return cards


_LEADING_H2 = re.compile(r"\s*<h2([^>]*)>(.*?)</h2>", flags=re.S)


def section(title_html: str, body: str, *, open_: bool = True, ident: str | None = None) -> str:
    """A collapsible section: <details> with the heading as its summary (open unless `open_` is False)."""
    attrs = f" id='{html.escape(ident)}'" if ident else ""
    return (f"<details class='section'{attrs}{' open' if open_ else ''}><summary><h2>{title_html}</h2></summary>"
            f"\n{body}\n</details>")


def collapsible(fragment: str) -> str:
    """An HTML fragment another module wrote (starting with its <h2>) made a collapsible section."""
    found = _LEADING_H2.match(fragment)
    if not found:
        return fragment
    ident = re.search(r"id=['\"]([^'\"]+)['\"]", found.group(1))
    return section(found.group(2), fragment[found.end():], ident=ident.group(1) if ident else None)


def render_html(report: Report, previous: Mapping[str, Any] | None = None) -> str:
    """report.html: the summary band (headline figures and their change since `previous`, the previous
    report's report.json), then the notes, then collapsible sections; self-contained, no external resource."""
    d = report.data
    e = html.escape
    cluster = d.get("cluster")
    currency = d.get("currency")
    start, end = d["period"]["start"], d["period"]["end"]
    generated = d.get("generated_at")
    title = f"GPU accounting report{f': {cluster}' if cluster else ''}, {_when(start)} to {_when(end)}"
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>{e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>GPU accounting report{f': {e(str(cluster))}' if cluster else ''}</h1>",
        "<p class='meta'>"
        + (f"Cluster <b class='cluster'>{e(str(cluster))}</b> &middot; " if cluster else "")
        + f"Period <b>{e(_when(start))}</b> to <b>{e(_when(end))}</b> (end exclusive)"
        + (f" &middot; Generated <time datetime='{e(str(generated))}'>{e(_when(generated))}</time>" if generated else "")
        + (f" &middot; Currency {e(str(currency))}" if currency else "")
        + "</p>",
        summary_band(d, previous),
    ]
    inp = d.get("input", {})
    for note in inp.get("notes", []):
        parts.append(f"<p class='note'>{e(note)}</p>")
    if inp.get("rejected_rows"):
        parts.append(f"<p class='note'>{int(inp['rejected_rows'])} input row(s) could not be parsed and are not "
                     "counted; see report.json input.problems.</p>")
    left = inp.get("left_out") or {}
    if left.get("rows"):
        parts.append(f"<p class='note'>{int(left['rows'])} row(s) are no attempt and count nowhere: "
                     f"{int(left['running'])} running (End Unknown), {int(left['not_started'])} not started, "
                     f"{int(left['no_allocation'])} never ran (cancelled while pending).</p>")
    for entry in inp.get("unknown") or []:  # what the input cannot give: counted and named, never 0
        count = "every attempt" if entry.get("count") is None else f"{int(entry['count'])} attempt(s)"
        parts.append(f"<p class='note'>Unknown for {e(count)} (no {e(str(entry.get('missing')))}): "
                     f"{e(str(entry.get('unknown')))}.</p>")
    totals = report.tables["totals"]
    sizing = report.tables["sizing"]
    parts.append(section("Totals", kv_table_html(_row(totals), currency=currency) if len(totals)
                         else "<p><em>no rows</em></p>", ident="totals"))
    parts.append(section("Sizing", kv_table_html(_row(sizing), currency=currency) if len(sizing)
                         else "<p><em>no rows</em></p>", ident="sizing"))
    for chart_title, svg in _plots(report.tables):
        parts.append(section(e(chart_title), f"<figure>{svg}</figure>" if svg else "<p><em>no data</em></p>"))
    trend = report.tables.get("trend_daily")
    if trend is not None and len(trend):
        short, long = min(TREND_VIEWS), max(TREND_VIEWS)
        body = ["<div class='charts'>", *(f"<figure>{svg}</figure>" for _, svg in trend_plots(trend, short)),
                f"</div><details><summary>Last {long} days</summary><div class='charts'>",
                *(f"<figure>{svg}</figure>" for _, svg in trend_plots(trend, long)), "</div></details>"]
        parts.append(section(f"Trend: last {short} days", "\n".join(body), ident="trend"))
    for extra_section in (gpuuse_render.html_section, lemon_render.html_section):
        extra = extra_section(report)
        if extra:
            parts.append(collapsible(extra))
    tables = []
    for name, frame in report.tables.items():
        if name in ("totals", "sizing") or name in ECONOMICS_SECTION_TABLES or name in gpuuse_render.NOT_ON_PAGE:
            continue
        if name in PAGE_COLUMNS:
            frame = frame[[c for c in PAGE_COLUMNS[name] if c in frame.columns]]
        tables.append(f"<h3 id='{e(name)}'>{e(table_title(name))}</h3>"
                      + table_html(frame, currency=currency, csv_name=name, limit=PAGE_ROWS))
    parts.append(section("Tables", "\n".join(tables), ident="tables"))
    economics = economics_html(d)
    if economics:
        parts.append(collapsible(economics))
    definitions = "".join(f"<dt>{e(key)}</dt><dd>{e(text)}</dd>" for key, text in d["definitions"].items())
    parts.append(section("Metric definitions", f"<dl>{definitions}</dl>", open_=False, ident="definitions"))
    parts.append(f"<script>{_SORT_JS}</script>")
    parts.append("</body></html>")
    return "\n".join(parts)
