"""A DataFrame as report.json rows: one dict per row, numpy scalars as plain Python, NaN and NA as null, a
timestamp as ISO 8601 text (iso_utc).

Its own small module, below the stages that write report.json (metrics, gpuuse, show), so that none of them
reaches into another stage for it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    if len(df.columns) and df.columns.is_unique and all(map(_listed_plainly, df.dtypes)):
        # (column by column: tolist gives these dtypes' values as to_dict does, without its call per value)
        keys = [str(k) for k in df.columns]
        columns = [[_plain(v) for v in column.tolist()] for _, column in df.items()]
        return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]
    out = []
    for row in df.to_dict(orient="records"):
        out.append({str(k): _plain(v) for k, v in row.items()})
    return out


def _listed_plainly(dtype: Any) -> bool:
    """Numbers and booleans as numpy holds them, and text: their tolist() is to_dict's values."""
    return (isinstance(dtype, np.dtype) and dtype.kind in "biuf") or isinstance(dtype, pd.StringDtype)


def iso_utc(value: Any) -> str | None:
    """A timestamp (a tz-aware one is in UTC here) as `YYYY-MM-DDTHH:MM:SS+00:00`; None for none or NaT."""
    if value is None or value is pd.NaT or (isinstance(value, float) and math.isnan(value)):
        return None
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return str(stamp.tz_convert("UTC").floor("s").isoformat())


def iso_utc_column(column: pd.Series) -> pd.Series:
    """A column of timestamps as iso_utc's text, for the files a person opens (done only when one is written: a
    json build of a million jobs never formats them)."""
    text = pd.to_datetime(column, utc=True, errors="coerce")
    return text.dt.strftime("%Y-%m-%dT%H:%M:%S+00:00").astype(object).where(text.notna(), None)


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return iso_utc(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
