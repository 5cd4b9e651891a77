"""report.json as a typed, versioned contract (schema "gpuclust.report/1", schemas/report.schema.json).

The top level says what the report is about before what it holds: `schema`, `cluster` (the site's Slurm
ClusterName), `period` ({start, end}: ISO 8601 with the site's offset, end exclusive) and `generated_at` (ISO
8601 UTC), so nightly files can be concatenated and told apart; the CSVs carry the same three. Then the
sections the accounting plane computes. Sections another part adds (e.g. economics) are kept in `extra`
and written after them.

ReportDocument writes report.json (to_dict) and reads it back (from_dict / read_report_json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from gpuclust import contract
from gpuclust.accounting.figures.metrics import Report, deprecated
from gpuclust.contract import ContractError
from gpuclust.errors import InputError, Problem
from gpuclust.output import json_values

SCHEMA = "gpuclust.report/1"
ISO_8601 = r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)"
_ISO = {"pattern": ISO_8601, "message": "not an ISO 8601 time with an offset: {value}"}


def _old_name_of(new: str) -> dict[str, str]:
    """Field metadata of an old name still written for one release (gpuclust.accounting.figures.metrics.deprecated)."""
    return {"deprecated": f"Deprecated: the old name of {new} (same value); removed in the next release."}


@dataclass(frozen=True)
class ReportPeriod:
    """The period the report covers (report.json `period`): ISO 8601 with the site's offset, end exclusive."""

    start: str = field(metadata=_ISO)
    end: str = field(metadata=_ISO)  # exclusive


@dataclass(frozen=True)
class Totals:
    """The period's totals (report.json `totals`, totals.csv); definitions in report.json `definitions`."""

    NUMBERS_MIN: ClassVar[int] = 0

    runs: int
    completed: int
    attempts: int
    retries: int | None
    gpu_hours: float
    completed_run_gpu_hours: float | None
    cost: float | None  # null: no price configured for any GPU used
    cost_per_completed_run: float | None
    unpriced_gpu_hours: float | None
    useful_gpu_hours: float | None = field(default=None, metadata=_old_name_of("completed_run_gpu_hours"))
    gpu_device_hours: float | None = None  # (None in a report.json written before it)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizing:
    """Completed runs per GPU-month and the GPUs a completed-run target needs (report.json `sizing`, sizing.csv)."""

    NUMBERS_MIN: ClassVar[int] = 0

    completed_run_share_of_allocated: float | None
    completed_runs_per_gpu_month: float | None
    target_completed_runs_per_month: float | None
    target_source: str | None
    required_gpus: float | None
    gpus_used_on_average: float | None
    gpu_month_hours: float | None
    effective_unit_cost: float | None = field(default=None, metadata=_old_name_of("totals.cost_per_completed_run"))
    useful_ratio: float | None = field(default=None, metadata=_old_name_of("completed_run_share_of_allocated"))
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InputInfo:
    """Where the rows came from and what was left out (file:line problems, rows that count nowhere)."""

    NUMBERS_MIN: ClassVar[int] = 0

    source: str
    rows: int
    steps_dropped: int | None
    rejected_rows: int | None
    problems: tuple[str, ...] = ()
    exit_codes_known: bool | None = None
    notes: tuple[str, ...] = ()
    days_read: tuple[str, ...] | None = None  # from the store
    attempts_in_period: int | None = None
    left_out: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportDocument:
    """report.json: the cluster, the period and when it was made, then the accounting plane's sections."""

    cluster: str
    period: ReportPeriod
    generated_at: str = field(metadata=_ISO)
    currency: str | None
    queue_wait: dict[str, Any]
    hold: dict[str, Any]
    runs: dict[str, Any]
    totals: Totals
    top_failures: tuple[dict[str, Any], ...]
    sizing: Sizing
    input: InputInfo
    definitions: dict[str, str]
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return contract.write(self, {"schema": SCHEMA})

    @classmethod
    def from_dict(cls, data: Any) -> ReportDocument:
        """Raises ContractError naming the field."""
        if not isinstance(data, dict):
            raise ContractError("report.json must be a JSON object")
        if data.get("schema") != SCHEMA:
            raise ContractError(f"unknown schema {data.get('schema')!r} (expected {SCHEMA!r})", "schema")
        return contract.read(cls, data)

    @classmethod
    def from_report(cls, report: Report, cluster: str, generated_at: datetime | None = None,
                    currency: str = "") -> ReportDocument:
        # as JSON values first (numpy scalars, NaN -> null), so the model checks what report.json will hold
        data = {k: v for k, v in json_values(report.data).items()
                if k not in ("schema", "cluster", "generated_at", "currency")}
        deprecated.add_keys(data)  # the renamed figures' old keys, for one release
        when = (generated_at or datetime.now(timezone.utc)).astimezone(timezone.utc)
        data.update(cluster=cluster, period=report.period.as_dict(), currency=currency or None,
                    generated_at=when.isoformat(timespec="seconds").replace("+00:00", "Z"))
        return contract.read(cls, data)


def stamp(report: Report, cluster: str, generated_at: datetime | None = None, currency: str = "") -> Report:
    """Make `report.data` the ReportDocument's JSON (what report.json and `report build --json` show)."""
    report.data = ReportDocument.from_report(report, cluster, generated_at, currency).to_dict()
    return report


def read_report_json(path: str | Path) -> ReportDocument:
    """A report.json written by `report build`. Raises InputError naming the file and field."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return ReportDocument.from_dict(data)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(Problem(str(path), None, f"cannot read report.json: {exc}")) from None
    except ContractError as exc:
        raise InputError(Problem(str(path), None, str(exc), exc.field)) from None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of report.json (schemas/report.schema.json), generated from ReportDocument."""
    defs: dict[str, Any] = {}
    ref = contract.json_schema(ReportDocument, defs)
    return {
        "$schema": contract.JSON_SCHEMA_DRAFT, "$id": contract.SCHEMA_BASE + "report.schema.json",
        "title": "gpuclust report.json",
        "description": "What `gpuclust report build` writes as report.json (and prints with --json). Sections "
                       "beyond the listed ones may be added by later versions of the same schema.",
        "allOf": [ref, {"properties": {"schema": {"const": SCHEMA}}, "required": ["schema"]}],
        "$defs": defs,
    }
