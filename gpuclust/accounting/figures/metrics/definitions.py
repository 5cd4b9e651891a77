"""What the report computes, in words (printed on the report page; declared in figures.catalog), and the names
shared by the metrics modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.ingest.period import Period

GPU_MONTH_HOURS = 730.0  # 365 * 24 / 12: one GPU allocated for an average month
DEFAULT_TOP = 20

# The report's own definitions (report.json `definitions`, the page's "Metric definitions"): the catalogue's.
DEFINITIONS: dict[str, str] = catalog.definitions(catalog.REPORT)

GROUP_COLUMNS = ("runs", "completed", "attempts", "retries", "gpu_hours", "completed_run_gpu_hours", "cost",
                 "cost_per_completed_run", "unpriced_gpu_hours", "gpu_device_hours")
WAIT_COLUMNS = ("jobs", "median_s", "p90_s", "max_s")
NONE_LABEL = "(none)"
PARALLEL_MIN_ATTEMPTS = 20_000  # rows; below this a second thread costs more than it saves


@dataclass
class Report:
    """A built report: its period, report.json's data, and the tables written as CSV (or Parquet) files."""

    period: Period
    data: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
