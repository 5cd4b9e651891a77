"""The three JSON outputs (acceptance result lines, report.json, audit JSON) against the JSON Schemas published
in schemas/: the schemas are valid draft 2020-12, the generated ones match their models, and real outputs
(recorded lab result files, `report build` on lab recordings, `audit partition --json` on recorded scontrol
output) validate, while what the readers refuse does not."""

from __future__ import annotations

import importlib.util
import json
from importlib.machinery import SourceFileLoader
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

jsonschema = pytest.importorskip("jsonschema")

from gpuclust.accept import results as R  # noqa: E402
from gpuclust.accounting.output.reportdoc import ReportDocument, read_report_json  # noqa: E402
from gpuclust.audit.findings import read_audit_document  # noqa: E402
from gpuclust.cli.context import AppContext  # noqa: E402
from gpuclust.cli.main import cli  # noqa: E402
from tests.unit.audit_replay import DATA as AUDIT_DATA  # noqa: E402
from tests.unit.audit_replay import replay  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
_LOADER = SourceFileLoader("gen_schemas", str(ROOT / "scripts" / "gen-schemas"))
GEN = importlib.util.module_from_spec(importlib.util.spec_from_loader("gen_schemas", _LOADER))  # type: ignore[arg-type]
_LOADER.exec_module(GEN)
SCHEMAS = ROOT / "schemas"
DATA = ROOT / "tests" / "data"


def validator(name: str) -> Any:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def errors(v: Any, doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in v.iter_errors(doc)]


@pytest.mark.parametrize("name", ["accept-result.schema.json", "report.schema.json"])
def test_generated_schemas_are_current(name: str) -> None:
    """Regenerate with `.venv/bin/python scripts/gen-schemas` after changing a model."""
    assert (SCHEMAS / name).read_text(encoding="utf-8") == GEN.render(GEN.GENERATED[name]())


def test_every_schema_is_valid_draft_2020_12() -> None:
    names = sorted(p.name for p in SCHEMAS.glob("*.schema.json"))
    assert names == ["accept-result.schema.json", "audit.schema.json", "report.schema.json"]
    for name in names:
        validator(name)


# ---- acceptance result lines --------------------------------------------------------------------------


def test_recorded_lab_result_lines_validate() -> None:
    v = validator("accept-result.schema.json")
    files = sorted((DATA / "accept").glob("lab_results/*.jsonl")) + sorted((DATA / "accept").glob("noise/*.jsonl"))
    assert len(files) > 10
    checked = 0
    for path in files:
        result, problems = R.parse_result_text(R.read_result_text(path), str(path))
        assert result is not None and not problems, problems
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            assert errors(v, json.loads(line)) == [], f"{path.name}:{lineno}"
            checked += 1
    assert checked > 100


def test_written_lines_validate_and_refused_lines_do_not(tmp_path: Path) -> None:
    v = validator("accept-result.schema.json")
    [original] = R.scan_results(DATA / "accept" / "lab_results").jobs[:1]
    path = R.write_result(tmp_path, original)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(errors(v, line) == [] for line in lines)
    job = lines[0]
    assert job["schema"] == R.SCHEMA and job["type"] == "job"
    for broken in ({**job, "job_id": "12x"}, {**job, "passed": "yes"}, {**job, "world_size": -1},
                   {k: val for k, val in job.items() if k != "nodes"}, {**job, "schema": "gpuclust.accept.result/2"}):
        assert errors(v, broken), broken
        _, problems = R.parse_result_text(json.dumps(broken) + "\n", "x.jsonl")
        assert problems  # the reader refuses it too


# ---- report.json --------------------------------------------------------------------------------------


def test_report_json_from_report_build_validates(tmp_path: Path) -> None:
    accounting = DATA / "accounting"
    conf = tmp_path / "site.conf"
    conf.write_text((accounting / "site.conf").read_text().replace("/nonexistent/replaced-by-tests",
                                                                  str(tmp_path / "state")))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input",
                                      str(accounting / "lab-parsable.txt"), "--delimiter", "\\x1f|\\x1e",
                                      "--since", "2026-12-02", "--until", "2026-12-03", "--out", str(out),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert errors(validator("report.schema.json"), doc) == []
    assert list(doc)[:4] == ["schema", "cluster", "period", "generated_at"]
    assert doc["schema"] == "gpuclust.report/1" and doc["generated_at"].endswith("Z")
    assert set(doc["period"]) == {"start", "end"} and doc["cluster"]
    back = read_report_json(out / "report.json")
    assert back.to_dict() == doc
    assert errors(validator("report.schema.json"), {**doc, "schema": "gpuclust.report/2"})
    assert errors(validator("report.schema.json"), {k: val for k, val in doc.items() if k != "cluster"})
    with pytest.raises(ValueError):
        ReportDocument.from_dict({k: val for k, val in doc.items() if k != "cluster"})


# ---- audit JSON ---------------------------------------------------------------------------------------


def _audit(args: list[str], scenario: str, tmp_path: Path) -> Any:
    conf = str(AUDIT_DATA / "site-lab.conf")
    result = CliRunner().invoke(cli, ["--config", conf, "audit", "partition", *args, "--json", "--results-dir",
                                      str(tmp_path)], obj=AppContext(client=replay(scenario), config_path=conf))
    return json.loads(result.output)


@pytest.mark.parametrize("scenario", ["clean", "degraded"])
def test_audit_json_validates_single_and_all(scenario: str, tmp_path: Path) -> None:
    v = validator("audit.schema.json")
    for args in (["gpu"], ["--all"], ["nope"]):
        doc = _audit(args, scenario, tmp_path)
        assert errors(v, doc) == [], args
        assert doc["schema"] == "gpuclust.audit/1"
        reports = read_audit_document(doc)
        assert [r.as_dict() for r in reports] == (doc["partitions"] if "partitions" in doc else [doc])
    broken = _audit(["gpu"], scenario, tmp_path)
    broken["findings"][0]["severity"] = "BAD"
    assert errors(v, broken)
