"""sacct --json input: the holes of issue 13 (each a located error or a counted rejected row, never a
traceback), shape selection from the meta block (issue 12), and a property test over a grammar of valid and
broken documents in every recorded version's shape."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting import pipeline
from gpuclust.accounting.history.fetch import fetch_day, sacct_args
from gpuclust.accounting.ingest.jsonin import parse_input, parse_json
from gpuclust.cli.main import cli
from gpuclust.errors import InputError, SlurmOutputError
from gpuclust.slurm.replay import ReplaySlurmClient

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
# Every recorded sacct --json: 22.05 at the top level, later versions in per-version directories.
JSON_CORPORA = sorted([DATA / "lab-json.json", *DATA.glob("*/lab-json.json")])


def _doc(path: Path = DATA / "lab-json.json") -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _one_job_doc(path: Path = DATA / "lab-json.json", **time_fields: Any) -> dict[str, Any]:
    doc = _doc(path)
    job = next(j for j in doc["jobs"] if j["name"] == "acct-ok")
    job["time"].update(time_fields)
    doc["jobs"] = [job]
    return doc


def _problem_text(exc: pytest.ExceptionInfo[InputError]) -> str:
    return "\n".join(str(p) for p in exc.value.problems)


# ---- issue 13's holes --------------------------------------------------------------------------------------

def test_invalid_utf8_is_a_located_error():
    data = json.dumps(_doc()).encode()
    cut = data.index(b'"acct-ok"') + 2
    broken = data[:cut] + b"\xff\xfe" + data[cut:]
    with pytest.raises(InputError) as exc:
        parse_input(broken, "|", "dump.json")
    assert "dump.json:1:" in _problem_text(exc) and "not valid UTF-8" in _problem_text(exc)


def test_invalid_utf8_names_its_line():
    with pytest.raises(InputError) as exc:
        parse_input(b'{"jobs": [\n{},\n"\xc3("]}', "|", "f.json")
    assert _problem_text(exc).startswith("f.json:3:")


def test_deep_nesting_is_an_error_not_a_recursion_crash():
    with pytest.raises(InputError) as exc:
        parse_input(b'{"jobs": ' + b"[" * 100_000, "|", "deep.json")
    assert "deep.json" in _problem_text(exc) and "nested too deeply" in _problem_text(exc)


def test_deep_top_level_list_is_an_error():
    with pytest.raises(InputError) as exc:
        parse_input(b"[" * 100_000, "|", "deep.json")
    assert "deep.json" in _problem_text(exc)


def test_time_far_in_the_future_is_a_rejected_row():
    result = parse_json(json.dumps(_one_job_doc(start=100000000000000000)), "far.json")
    assert result.table.num_rows == 0 and result.rejected == 1
    (problem,) = result.problems
    assert problem.file == "far.json" and problem.line == 1 and problem.field == "time.start"
    assert "jobs[0], JobID 3" in problem.message


@pytest.mark.parametrize("value", [-5, 2**64, 1.5, "soon", [1], {"number": "x"}, True])
def test_any_bad_time_is_a_rejected_row(value):
    result = parse_json(json.dumps(_one_job_doc(end=value)), "bad.json")
    assert result.table.num_rows == 0 and result.rejected == 1 and result.problems[0].field == "time.end"


def test_top_level_list_is_named_not_read_as_text():
    with pytest.raises(InputError) as exc:
        parse_input(b'[{"jobs": []}]', "|", "list.json")
    text = _problem_text(exc)
    assert text.startswith("list.json:") and "not a list" in text and "header" not in text.lower()


def test_bom_before_json_is_read_as_json():
    data = b"\xef\xbb\xbf" + json.dumps(_doc()).encode()
    result = parse_input(data, "|", "bom.json")
    assert result.rejected == 0 and result.table.num_rows == len(_doc()["jobs"])


def test_bom_json_file_through_the_cli(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf  " + (DATA / "lab-json.json").read_bytes())
    assert pipeline.read_input(str(path)).table.num_rows == 15


def test_lone_surrogate_escape_is_a_rejected_row():
    doc = _one_job_doc()
    doc["jobs"][0]["name"] = "\udcff"
    result = parse_json(json.dumps(doc), "s.json")
    assert result.rejected == 1 and result.problems[0].field == "name"


def test_huge_integer_literal_is_an_error():
    with pytest.raises(InputError):
        parse_input(b'{"jobs": [{"job_id": ' + b"9" * 5000 + b"}]}", "|", "big.json")


def test_unknown_data_parser_is_refused_by_name():
    doc = _doc()
    doc["meta"] = {"plugin": {"type": "", "data_parser": "data_parser/v0.0.99"},
                   "slurm": {"version": {"major": "99", "minor": "05", "micro": "0"}, "release": "99.05.0"}}
    with pytest.raises(InputError) as exc:
        parse_json(json.dumps(doc), "new.json")
    text = _problem_text(exc)
    assert "sacct --json" in text and "data_parser/v0.0.99" in text and "99.05.0" in text
    assert "--via parsable" in text


def test_jobs_without_meta_are_refused():
    doc = _doc()
    del doc["meta"]
    with pytest.raises(InputError, match="unknown JSON shape"):
        parse_json(json.dumps(doc), "nometa.json")


def test_fetch_of_unknown_shape_is_a_slurm_output_error_naming_the_command():
    from datetime import date

    doc = _doc()
    doc["meta"]["plugin"] = {"type": "", "data_parser": "data_parser/v0.0.99"}
    client = ReplaySlurmClient()
    day = date(2026, 12, 2)
    client.add("sacct", sacct_args(day, "json"), json.dumps(doc))
    with pytest.raises(SlurmOutputError, match=r"sacct .*--json.*data_parser/v0\.0\.99"):
        fetch_day(client, day, "json")


# ---- property test: a grammar of valid and broken sacct --json documents ----------------------------------

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8),
)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda c: st.one_of(st.lists(c, max_size=3),
                                                                 st.dictionaries(st.text(max_size=5), c, max_size=3)),
                           max_leaves=6)
TEMPLATES = {path: _doc(path) for path in JSON_CORPORA}


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def sacct_documents(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """(document bytes, number of job entries or None when the document itself is broken)."""
    template = TEMPLATES[draw(st.sampled_from(sorted(TEMPLATES)))]
    doc = copy.deepcopy(template)
    jobs = [copy.deepcopy(draw(st.sampled_from(template["jobs"]))) for _ in range(draw(st.integers(0, 4)))]
    for job in jobs:
        for _ in range(draw(st.integers(0, 3))):  # break some fields: a wrong value, or drop it
            paths = _paths(job)
            path = draw(st.sampled_from(paths))
            parent = job
            for key in path[:-1]:
                parent = parent[key]
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(JSON_VALUES)
    doc["jobs"] = [*jobs, *draw(st.lists(JSON_SCALARS, max_size=1))]  # a non-object entry now and then
    kind = draw(st.sampled_from(["ok", "ok", "ok", "meta", "bom", "bytes", "cut", "list"]))
    if kind == "meta":
        doc["meta"] = draw(JSON_VALUES)
    data = json.dumps(doc).encode()
    if kind == "bom":
        data = b"\xef\xbb\xbf" + data
    elif kind == "bytes":
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.binary(min_size=1, max_size=3)) + data[pos:]
    elif kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "list":
        data = json.dumps([doc]).encode()
    return data, (len(doc["jobs"]) if kind in ("ok", "bom") else None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sacct_documents())
def test_every_document_is_read_or_refused_by_name(case):
    data, jobs = case
    try:
        result = parse_input(data, "|", "doc.json")
    except InputError as exc:
        assert exc.problems and all(p.file == "doc.json" for p in exc.problems)
        assert jobs is None or jobs > 0  # a well-formed document in a known shape is never refused whole
        return
    assert all(p.file == "doc.json" and isinstance(p.line, int) for p in result.problems)
    if jobs is not None:
        assert result.table.num_rows + result.rejected == jobs  # every job counted or rejected
    assert sorted(result.table.column("line").to_pylist()) == result.table.column("line").to_pylist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                  HealthCheck.function_scoped_fixture])
@given(sacct_documents())
def test_report_build_exits_0_to_3_without_traceback(tmp_path, case):
    data, _ = case
    path = tmp_path / "doc.json"
    path.write_bytes(data)
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(path),
                                      "--format", "json", "--out", str(tmp_path / "out")])
    assert result.exit_code in (0, 1, 2, 3), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


def test_cli_fetch_of_unknown_shape_exits_3_naming_command_and_version(tmp_path):
    from datetime import date

    from gpuclust.cli.context import AppContext

    doc = _doc(JSON_CORPORA[-1])
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.99"
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(date(2026, 12, 2), "json"), json.dumps(doc))
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    args = ["--config", str(conf), "report", "fetch", "--since", "2026-12-02", "--until", "2026-12-03", "--via", "json"]
    result = CliRunner().invoke(cli, args, obj=AppContext(client=client))
    assert result.exit_code == 3, result.output
    assert "sacct" in result.output and "data_parser/v0.0.99" in result.output and "--via parsable" in result.output


@pytest.mark.parametrize("path", JSON_CORPORA, ids=lambda p: p.parent.name)
def test_cli_build_from_each_version_json(tmp_path, path):
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(path),
                                      "--format", "json", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["input"]["exit_codes_known"] is (path.parent.name != "accounting")
    assert data["totals"]["runs"] == 12
