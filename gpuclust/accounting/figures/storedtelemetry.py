"""Per-job and per-GPU telemetry summaries kept in the Parquet store by `report fetch`, so that figures outlive
Prometheus' retention (shared/gpu-hours-glossary.md names). Read without pandas: `gpuclust job` answers one job
from here.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gpuclust.accounting.figures.telemetry import JobTelemetry

__all__ = ["load_job_telemetry"]


def load_job_telemetry(store_root: Path, job_ids: Collection[str]) -> dict[str, JobTelemetry]:
    """The stored summaries of these jobs (JobIDRaw as a decimal string, a het component's own id), by id;
    a job without one is absent. Not written yet: every job is absent."""
    return {}
