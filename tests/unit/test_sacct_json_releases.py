"""``sacct --json`` of every Slurm release 21.08-26.05 (issue 29): the meta block in each historical form picks
the adapter, each recorded document reads with no rejected row, and its figures equal a hand computation
from the raw JSON (written here without the adapter code) and, where a parsable2 twin exists, the text's.

Fixtures: tests/data/accounting/json/<release>/ (SOURCES.md says which are real and which spec-derived).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accounting.figures.metrics import build_report
from gpuclust.accounting.ingest.jsonin import parse_input, parse_json
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER
from gpuclust.accounting.pipeline import input_period
from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.errors import InputError
from gpuclust.slurm import sacct_json as sj
from gpuclust.slurm.jsonshape import read_shape
from tests.unit.recordings import without_unrecorded

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
RELEASES = DATA / "json"
TWIN_2411 = DATA / "24.11" / "lab-parsable.txt"  # the text twin of the recording the spec fixtures derive from

# (fixture, plugin, Slurm version, exit codes carried, text twin)
FIXTURES: list[tuple[str, str, tuple[int, int, int], bool, Path | None]] = [
    ("21.08/spec-dbv0.0.37.json", "openapi/dbv0.0.37", (21, 8, 8), False, TWIN_2411),
    ("23.02/spec-v0.0.39.json", "data_parser/v0.0.39", (23, 2, 8), False, TWIN_2411),
    ("23.11/spec-v0.0.40.json", "data_parser/v0.0.40", (23, 11, 11), True, TWIN_2411),
    ("24.05/spec-v0.0.41.json", "data_parser/v0.0.41", (24, 5, 8), True, TWIN_2411),
    ("24.05/slurmrestd-v0.0.40-job-26.json", "data_parser/v0.0.40", (24, 5, 4), True, None),
    ("25.05/spec-v0.0.43.json", "data_parser/v0.0.43", (25, 5, 8), True, TWIN_2411),
    ("25.11/spec-v0.0.44.json", "data_parser/v0.0.44", (25, 11, 7), True, TWIN_2411),
]
IDS = [f[0] for f in FIXTURES]


def _doc(name: str) -> dict[str, Any]:
    return json.loads((RELEASES / name).read_text(encoding="utf-8"))


def _parse(name: str):
    return parse_input((RELEASES / name).read_bytes(), "|", name)


# ---- hand computation from the raw JSON (no adapter code) ---------------------------------------------------

def _plain(value: Any) -> int | None:
    """An int, or a {set, infinite, number} object -> int (None when unset)."""
    if isinstance(value, dict):
        return value["number"] if value["set"] and not value["infinite"] else None
    return value


def _hand_gpu_seconds(doc: dict[str, Any]) -> int:
    total = 0
    for job in doc["jobs"]:
        gpus = sum(t["count"] for t in job["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu")
        total += job["time"]["elapsed"] * gpus
    return total


def _hand_exit_codes(doc: dict[str, Any]) -> list[tuple[int | None, int | None]]:
    """v0.0.40+: return_code and signal.id as printed (a signal with no return code: 0:<sig>)."""
    out = []
    for job in sorted(doc["jobs"], key=lambda j: (j["job_id"], j["time"]["submission"])):
        ec = job["exit_code"]
        code, sig = _plain(ec["return_code"]), _plain(ec["signal"]["id"])
        out.append((code or 0, sig or 0))
    return out


# ---- meta: every historical form ------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "plugin", "version", "known", "twin"), FIXTURES, ids=IDS)
def test_meta_names_the_shape(name, plugin, version, known, twin):
    shape = read_shape(_doc(name))
    assert (shape.plugin, shape.version, shape.conflict) == (plugin, version, "")


def test_2302_cli_meta_plugins_is_read():
    """23.02's sacct writes meta.plugins (plural) and meta.Slurm: it used to be 'no plugin named in meta'."""
    meta = {"plugins": {"data_parser": "data_parser/v0.0.39", "accounting_storage": "accounting_storage/slurmdbd"},
            "command": ["sacct", "--json"], "Slurm": {"version": {"major": 23, "micro": 6, "minor": 2},
                                                       "release": "23.02.6"}}
    shape = read_shape({"meta": meta})
    assert shape.plugin == "data_parser/v0.0.39" and shape.version == (23, 2, 6)
    assert "no plugin named" not in shape.describe()


def test_2302_slurmrestd_meta_without_prefix():
    """23.02's slurmrestd (openapi/dbv0.0.39/api.c) writes data_parser "v0.0.39" with no prefix."""
    meta = {"plugin": {"type": "openapi/dbv0.0.39", "name": "Slurm OpenAPI DB v0.0.39", "data_parser": "v0.0.39"},
            "Slurm": {"version": {"major": 23, "micro": 3, "minor": 2}, "release": "23.02.3"}}
    shape = read_shape({"meta": meta})
    assert (shape.plugin, shape.conflict) == ("data_parser/v0.0.39", "")


# ---- each document: zero rejected rows, hand figures -------------------------------------------------------

@pytest.mark.parametrize(("name", "plugin", "version", "known", "twin"), FIXTURES, ids=IDS)
def test_each_release_reads_with_hand_figures(name, plugin, version, known, twin):
    doc = _doc(name)
    parsed = _parse(name)
    assert parsed.problems == [] and parsed.rejected == 0
    table = parsed.table.to_pylist()
    assert len(table) == len(doc["jobs"])
    assert sum(r["elapsed_s"] * r["gpus"] for r in table) == _hand_gpu_seconds(doc)
    assert parsed.exit_codes_known is known
    rows = sorted(table, key=lambda r: (r["job_id_raw"], r["submit"]))
    if known:
        assert [(r["exit_code"], r["exit_signal"]) for r in rows] == _hand_exit_codes(doc)
    else:  # dbv0.0.37, v0.0.39 print return_code 0 for any exit: null, never a made-up 0
        assert {(r["exit_code"], r["exit_code_known"]) for r in rows} == {(None, False)}
        assert any("exit codes are unknown" in n for n in parsed.notes)


def test_real_2405_slurmrestd_document():
    """The public slurmrestd 24.05.4 response (v0.0.40): one job, by hand from its JSON."""
    name = "24.05/slurmrestd-v0.0.40-job-26.json"
    (row,) = _parse(name).table.to_pylist()
    assert (row["job_id"], row["user"], row["account"], row["partition"], row["state"]) == (
        "26", "zuhu0402", "zuhu0402", "test", "COMPLETED")
    assert (row["exit_code"], row["exit_signal"], row["elapsed_s"], row["gpus"], row["mem_mb"]) == (0, 0, 0, 0, 62000)
    assert int(row["start"].timestamp()) == 1744187888 and int(row["submit"].timestamp()) == 1744187887
    report = build_report(_parse(name).table, load_config(str(DATA / "site.conf")), input_period(_parse(name))).data
    assert (report["totals"]["runs"], report["totals"]["completed"], report["totals"]["gpu_hours"]) == (1, 1, 0)


def test_dbv0037_start_is_end_minus_elapsed():
    """21.08 prints the eligible time at time.start: Start must come from End - Elapsed - Suspended."""
    doc = _doc("21.08/spec-dbv0.0.37.json")
    rows = {(r["job_id"], int(r["end"].timestamp())): int(r["start"].timestamp())
            for r in _parse("21.08/spec-dbv0.0.37.json").table.to_pylist()}
    moved = 0
    for job in doc["jobs"]:
        t = job["time"]
        jid = sj.SacctJsonAdapter("openapi/dbv0.0.37", (21, 8), None, "test").job_id(job)[0]
        assert rows[(jid, t["end"])] == t["end"] - t["elapsed"] - t["suspended"]
        moved += rows[(jid, t["end"])] != t["start"]
    assert moved > 0  # the held and the waiting jobs: their eligible time is not their start


def _rows(parsed) -> list[dict[str, Any]]:
    out = [{k: v for k, v in r.items() if k != "line"} for r in parsed.table.to_pylist()]
    return sorted(out, key=lambda r: (r["job_id"], str(r["start"])))


@pytest.mark.parametrize(("name", "plugin", "version", "known", "twin"), [f for f in FIXTURES if f[4]],
                         ids=[f[0] for f in FIXTURES if f[4]])
def test_same_figures_as_the_text_twin(name, plugin, version, known, twin):
    text = parse_input(twin.read_bytes(), FETCH_DELIMITER, twin.name)
    js = _parse(name)
    t_rows, j_rows = _rows(text), _rows(js)
    without_unrecorded(twin, FETCH_DELIMITER, t_rows, j_rows)  # fields fetched since the text was recorded
    if not known:
        for r in (*t_rows, *j_rows):
            r.pop("exit_code"), r.pop("exit_signal"), r.pop("exit_code_known")
    assert j_rows == t_rows
    conf = load_config(str(DATA / "site.conf"))
    t_rep = build_report(text.table, conf, input_period(text)).data["totals"]
    j_rep = build_report(js.table, conf, input_period(js)).data["totals"]
    for key in ("runs", "completed", "attempts", "retries", "gpu_hours", "completed_run_gpu_hours"):
        assert j_rep[key] == t_rep[key], key
    assert j_rep["runs"] == 12 and j_rep["gpu_hours"] == round(_hand_gpu_seconds(_doc(name)) / 3600, 9)


# ---- value forms of single shapes ----------------------------------------------------------------------------

def test_v0039_step_id_object():
    job = {"steps": [{"step": {"id": {"job_id": 7, "step_id": "batch"}, "name": "batch"}, "time": {"elapsed": 3},
                      "tres": {"allocated": [], "requested": {}, "consumed": {}}},
                     {"step": {"id": {"job_id": 7, "step_het_component": 1, "step_id": "0"}, "name": "x"},
                      "time": {"elapsed": 2}}]}
    assert [s["JobID"] for s in sj.step_records(job, "7")] == ["7.batch", "7.0+1"]


def test_v0043_unset_64bit_time_is_unknown():
    """v0.0.43+ print an unset UINT64 as NO_VAL64/INFINITE64 integers (DUMP_FUNC(UINT64)); earlier, null."""
    assert sj.epoch(2**64 - 2, "time.end") == sj.epoch(2**64 - 1, "time.end") == "Unknown"
    with pytest.raises(sj.BadField):
        sj.epoch(2**64, "time.end")


# ---- bad input --------------------------------------------------------------------------------------------------

def _refusal(doc: dict[str, Any]) -> str:
    with pytest.raises(InputError) as exc:
        parse_json(json.dumps(doc), "bad.json")
    return "\n".join(str(p) for p in exc.value.problems)


def test_v0046_is_refused_naming_versions():
    doc = _doc("25.11/spec-v0.0.44.json")
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.46"
    doc["meta"]["slurm"]["release"] = "26.11.0"
    doc["meta"]["slurm"]["version"] = {"major": "26", "minor": "11", "micro": "0"}
    text = _refusal(doc)
    assert text.startswith("bad.json") and "data_parser/v0.0.46" in text and "26.11.0" in text
    assert "openapi/dbv0.0.37 (Slurm 20.11-23.02)" in text and "data_parser/v0.0.45" in text
    assert "--via parsable" in text


def test_missing_meta_is_refused():
    doc = _doc("23.11/spec-v0.0.40.json")
    del doc["meta"]
    assert "no plugin named in meta" in _refusal(doc)


@pytest.mark.parametrize("meta", [[1, 2], "data_parser/v0.0.42", {"plugin": "data_parser/v0.0.42"},
                                  {"plugin": {"data_parser": 42}}, {"slurm": {"release": "24.11.5"}}])
def test_malformed_meta_is_refused(meta):
    doc = _doc("23.11/spec-v0.0.40.json")
    doc["meta"] = meta
    text = _refusal(doc)
    assert "unknown JSON shape" in text and "data_parser/v0.0.40 (Slurm 23.11-25.05)" in text


@pytest.mark.parametrize(("change", "said"), [
    # a 24.11 plugin in a document that says Slurm 22.05 wrote it
    (lambda m: m.update(slurm={"version": {"major": "22", "minor": "05", "micro": "8"}, "release": "22.05.8"}),
     "does not ship"),
    # both meta forms, naming two parsers
    (lambda m: m.update(plugins={"data_parser": "data_parser/v0.0.39"}), "two data_parsers"),
    # both Slurm blocks, naming two releases
    (lambda m: m.update(Slurm={"version": {"major": 23, "minor": 2, "micro": 8}, "release": "23.02.8"}),
     "two Slurm versions"),
    # an openapi plugin of one version with the data_parser of another
    (lambda m: m["plugin"].update(type="openapi/dbv0.0.39"), "different versions"),
])
def test_mixed_versions_are_refused(change, said):
    doc = _doc("24.05/spec-v0.0.41.json")
    change(doc["meta"])
    text = _refusal(doc)
    assert said in text and "data_parser/v0.0.41" in text


def test_rows_of_another_version_are_rejected_not_misread():
    """A v0.0.39 document holding a v0.0.40+ job (state a list): that row is rejected, by field."""
    doc = _doc("23.02/spec-v0.0.39.json")
    doc["jobs"][0] = _doc("23.11/spec-v0.0.40.json")["jobs"][0]
    result = parse_json(json.dumps(doc), "mixed.json")
    assert result.rejected == 1 and result.problems[0].field == "state.current"


def test_truncated_document_names_file_and_position_and_stores_nothing(tmp_path):
    data = (RELEASES / "23.11/spec-v0.0.40.json").read_bytes()
    cut = data[: len(data) // 2]
    with pytest.raises(InputError) as exc:
        parse_input(cut, "|", "cut.json")
    (problem,) = exc.value.problems
    assert problem.file == "cut.json" and isinstance(problem.line, int) and problem.line > 1
    assert "not valid JSON" in problem.message and "column" in problem.message
    # Through the CLI: an error, and nothing written (no report, no state).
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(path),
                                      "--format", "json", "--out", str(out)])
    assert result.exit_code != 0 and "cut.json" in result.output
    assert not (out / "report.json").exists()
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*"))
