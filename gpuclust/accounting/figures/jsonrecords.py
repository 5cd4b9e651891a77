"""A DataFrame as report.json rows: one dict per row, numpy scalars as plain Python, NaN and NA as null.

Its own small module, below the stages that write report.json (metrics, gpuuse, show), so that none of them
reaches into another stage for it."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in df.to_dict(orient="records"):
        out.append({str(k): _plain(v) for k, v in row.items()})
    return out


def _plain(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value
