"""The JSON Schemas (draft 2020-12) published in schemas/ for gpuclust's three JSON outputs.

    accept-result.schema.json  one line of an acceptance result file (gpuclust.accept.result/1), generated
                               from the record dataclasses in gpuclust.accept.results
    report.schema.json         report.json (gpuclust.report/1), generated from
                               gpuclust.accounting.reportdoc.ReportDocument
    audit.schema.json          `audit partition --json` (gpuclust.audit/1), single or --all; hand-written
                               (schemas/audit.schema.json) after gpuclust.audit.findings

`python -m gpuclust.jsonschemas DIR` rewrites the generated ones; a test fails when the committed files
differ from what the models generate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuclust.contract import json_schema

DRAFT = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://github.com/gpuclust/gpuclust/schemas/"


def accept_result_schema() -> dict[str, Any]:
    from gpuclust.accept import results as R

    defs: dict[str, Any] = {}
    variants = []
    for rtype, cls in R.RECORDS.items():
        ref = json_schema(cls, defs)
        variants.append({"allOf": [ref, {"properties": {"type": {"const": rtype}}, "required": ["type"]}]})
    return {
        "$schema": DRAFT, "$id": BASE + "accept-result.schema.json",
        "title": "gpuclust acceptance result line",
        "description": "One JSON line of <results_dir>/<kind>-<job_id>.jsonl. Lines without a schema key are "
                       "older history and read the same.",
        "type": "object",
        "properties": {"schema": {"enum": list(R.READABLE_SCHEMAS)},
                       "type": {"enum": list(R.RECORDS)},
                       "kind": {"enum": list(R.KINDS)}},
        "required": ["type", "job_id", "kind"],
        "oneOf": variants,
        "$defs": defs,
    }


def report_schema() -> dict[str, Any]:
    from gpuclust.accounting.reportdoc import SCHEMA, ReportDocument

    defs: dict[str, Any] = {}
    ref = json_schema(ReportDocument, defs)
    return {
        "$schema": DRAFT, "$id": BASE + "report.schema.json",
        "title": "gpuclust report.json",
        "description": "What `gpuclust report build` writes as report.json (and prints with --json). Sections "
                       "beyond the listed ones may be added by later versions of the same schema.",
        "allOf": [ref, {"properties": {"schema": {"const": SCHEMA}}, "required": ["schema"]}],
        "$defs": defs,
    }


GENERATED = {"accept-result.schema.json": accept_result_schema, "report.schema.json": report_schema}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m gpuclust.jsonschemas SCHEMAS_DIR\n")
        return 2
    for name, make in GENERATED.items():
        (Path(args[0]) / name).write_text(render(make()), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
