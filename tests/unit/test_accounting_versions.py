"""Every Slurm version's recorded accounting corpus through the same parsers (issue 12).

Each corpus is the same scenario (tests/integration/test_accounting_lab.py, `--record`) run on a fresh lab of
that version: 22.05 in tests/data/accounting/ itself, later versions in tests/data/accounting/<version>/.
Checked here, with no Slurm:

* on each version, the text and the --json forms give the same report (exit codes too where the version's
  JSON carries them: 24.11 on; on 22.05 they are null, never invented);
* across versions, the same jobs give the same figures: runs, completions, attempts, retries, per-account and
  per-partition counts, the failures with their states and exit codes, GPUs per job. (GPU-hours and waits
  depend on how long each `sleep` took on that day, so they are compared between forms, not versions.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclust.accounting.figures.metrics import build_report
from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS
from gpuclust.accounting.pipeline import input_period
from gpuclust.config import load_config
from tests.unit.recordings import report_without_unrecorded, without_unrecorded

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
LAB = Path(__file__).resolve().parent.parent / "data" / "lab"
VERSIONS = {"22.05": DATA, **{p.name: p for p in sorted(DATA.iterdir()) if p.is_dir() and p.name[:2].isdigit()}}
JSON_EXIT_CODES = {"22.05": False}  # every later version recorded here carries them


def _parse(version: str, form: str):
    d = VERSIONS[version]
    name, delim = {"parsable": ("lab-parsable.txt", FETCH_DELIMITER), "pipe": ("lab-pipe.txt", "|"),
                   "json": ("lab-json.json", "|")}[form]
    return parse_input((d / name).read_bytes(), delim, f"{version}/{name}")


def _report(version: str, form: str) -> dict:
    parsed = _parse(version, form)
    assert parsed.problems == [] and parsed.rejected == 0, parsed.problems[:3]
    data = build_report(parsed.table, load_config(str(DATA / "site.conf")), input_period(parsed)).data
    data.pop("input")
    # (a field fetched since the text was recorded: null there, given by --json)
    return report_without_unrecorded(VERSIONS[version] / "lab-parsable.txt", FETCH_DELIMITER, data)


def _roles(version: str) -> dict[str, str]:
    return json.loads((VERSIONS[version] / "lab-scenario.json").read_text())["jobs"]


def test_versions_recorded():
    assert {"22.05", "24.11"} <= set(VERSIONS)


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_text_and_json_agree_on_each_version(version):
    text, js = _report(version, "parsable"), _report(version, "json")
    assert _report(version, "pipe") == text
    known = JSON_EXIT_CODES.get(version, True)
    parsed = _parse(version, "json")
    assert parsed.exit_codes_known is known
    assert set(parsed.table.column("exit_code_known").to_pylist()) == {known}
    if not known:
        assert {f["exit_code"] for f in js["top_failures"]} == {None}
        for f in (*text["top_failures"], *js["top_failures"]):
            f.pop("exit_code")
    assert js == text


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_json_rows_equal_text_rows(version):
    """Row by row, every column (the raw AllocTRES string included) but the record position."""
    def rows(form: str) -> list[dict]:
        t = _parse(version, form).table
        out = [{k: v for k, v in r.items() if k != "line"} for r in t.to_pylist()]
        return sorted(out, key=lambda r: (r["job_id"], str(r["start"])))
    text, js = rows("parsable"), rows("json")
    # text recorded before a field was fetched has no column for it (null), --json has it
    without_unrecorded(VERSIONS[version] / "lab-parsable.txt", FETCH_DELIMITER, text, js)
    if not JSON_EXIT_CODES.get(version, True):
        for r in (*text, *js):
            r.pop("exit_code"), r.pop("exit_signal"), r.pop("exit_code_known")
    assert js == text


def _figures(version: str) -> dict:
    data = _report(version, "parsable")
    roles = {jid: role for role, jid in _roles(version).items()}

    def role(job_id: str) -> str:
        base, _, rest = job_id.replace("+", "_").partition("_")
        return roles[base] + (f"_{rest}" if rest else "")

    table = _parse(version, "parsable").table.to_pylist()
    return {
        "totals": {k: data["totals"][k] for k in ("runs", "completed", "attempts", "retries")},
        "by_account": {r["account"]: (r["runs"], r["completed"], r["attempts"]) for r in data["runs"]["by_account"]},
        "by_partition": {r["partition"]: (r["runs"], r["completed"]) for r in data["runs"]["by_partition"]},
        "failures": sorted((role(f["job_id"]), f["state"], f["exit_code"]) for f in data["top_failures"]),
        "gpus": sorted((role(r["job_id"]), r["state"], r["gpus"], r["gpu_type"]) for r in table),
        "names": sorted(r["job_name"] for r in table),
    }


@pytest.mark.parametrize("version", sorted(set(VERSIONS) - {"22.05"}))
def test_same_jobs_same_figures_on_every_version(version):
    ref, got = _figures("22.05"), _figures(version)
    ref["names"] = [n.replace("acct2b2295b7", "") for n in ref["names"]]
    got["names"] = [n.replace(json.loads((VERSIONS[version] / "lab-scenario.json").read_text())["project"], "")
                    for n in got["names"]]
    assert got == ref
    assert got["totals"] == {"runs": 12, "completed": 11, "attempts": 14, "retries": 2}
    assert got["failures"] == [("array_1", "FAILED", "1:0"), ("flaky-1", "FAILED", "3:0"),
                               ("requeue", "REQUEUED", "0:0")]


@pytest.mark.parametrize("helpformat", sorted(LAB.glob("*/sacct_helpformat.txt")) + [LAB / "sacct_helpformat.txt"],
                         ids=lambda p: p.parent.name)
def test_fetch_fields_exist_on_every_version(helpformat):
    """`report fetch` asks for one field list on every version: each is in that version's recorded
    `sacct --helpformat` (22.05 refuses newer fields such as Restarts, so the list stays without them)."""
    if not helpformat.exists():
        pytest.skip(f"{helpformat} not recorded")
    known = set(helpformat.read_text().split())
    assert set(FETCH_FIELDS) <= known


DAYS = sorted(p.parent for p in DATA.glob("*/day-json.json"))


@pytest.mark.parametrize("d", DAYS, ids=lambda p: p.name)
def test_whole_lab_day_json_rows_equal_text_rows(d):
    """A whole day of a lab (the scenario twice, `slurm-lab record`'s running-then-cancelled and pending jobs,
    the audit recorder's cancelled job, acceptance jobs), as `report fetch` asks for it in both forms. Jobs
    killed by a signal have no return code in the JSON (status SIGNALED, signal.id 15): text prints 0:15."""
    def rows(name: str, delim: str) -> list[dict]:
        parsed = parse_input((d / name).read_bytes(), delim, name)
        assert parsed.problems == [] and parsed.rejected == 0
        out = [{k: v for k, v in r.items() if k != "line"} for r in parsed.table.to_pylist()]
        return sorted(out, key=lambda r: (r["job_id_raw"], r["job_id"], str(r["start"])))
    text, js = rows("day-parsable.txt", FETCH_DELIMITER), rows("day-json.json", "|")
    without_unrecorded(d / "day-parsable.txt", FETCH_DELIMITER, text, js)
    assert js == text
    assert {r["exit_code_known"] for r in js} == {True}
    assert ("CANCELLED", 0, 15) in {(r["state"], r["exit_code"], r["exit_signal"]) for r in js}
