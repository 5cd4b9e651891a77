"""Build the spec-derived ``sacct --json`` fixtures of tests/data/accounting/json/ (see SOURCES.md).

Each is the real 24.11 recording tests/data/accounting/24.11/lab-json.json (data_parser/v0.0.42, Slurm 24.11.5,
with its parsable2 twin lab-parsable.txt) rewritten value by value as the plugin of another release dumps it,
following that release's parsers (the table in gpuclust/slurm/sacct_json.py says file:function@tag). It
proves the adapters consistent with Slurm's sources, not with a real Slurm: SPEC-DERIVED.

    .venv/bin/python tests/data/accounting/json/make_spec_fixtures.py   # rewrites the fixtures
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "24.11" / "lab-json.json"
# job_state_string(): these flags are printed instead of the base state, in this order (slurm_protocol_defs.c).
SHOWN_FLAGS = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD",
               "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


def _plain(value: Any) -> Any:
    """A {set, infinite, number} object as a UINT32 of openapi/dbv0.0.37 prints it (unset/infinite: null)."""
    if isinstance(value, dict) and set(value) == {"set", "infinite", "number"}:
        return value["number"] if value["set"] and not value["infinite"] else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _state_word(flags: list[str]) -> str:
    return next((f for f in SHOWN_FLAGS if f in flags[1:]), flags[0])


def _old_exit_code(ec: dict[str, Any], *, always_rc: bool) -> dict[str, Any]:
    """PROCESS_EXIT_CODE (v0.0.40+) -> JOB_EXIT_CODE of dbv0.0.37/v0.0.39: WIFEXITED gives SUCCESS and
    return_code 0 whatever the code; a signal gives SIGNALED, signal.signal_id (v0.0.39: return_code -127)."""
    sig = ec["signal"]["id"]
    if sig["set"]:
        out: dict[str, Any] = {"status": "SIGNALED", "signal": {"signal_id": sig["number"], "name": ec["signal"]["name"]}}
        if always_rc:
            out["return_code"] = -127
        return out
    if "PENDING" in ec["status"]:
        return {"status": "PENDING", **({"return_code": 0} if always_rc else {})}
    return {"status": "SUCCESS", "return_code": 0}


def _step_v0039(step: dict[str, Any], job_id: int) -> dict[str, Any]:
    out = copy.deepcopy(step)
    part = step["step"]["id"].rsplit(".", 1)[-1]
    out["step"] = {"id": {"job_id": job_id, "step_id": part}, "name": step["step"]["name"]}
    for key in ("start", "end"):  # UINT64 in v0.0.39's PARSER_ARRAY(STEP)
        if isinstance(out["time"].get(key), dict):
            out["time"][key] = _plain(out["time"][key])
    return out


def dbv0037(job: dict[str, Any]) -> dict[str, Any]:
    out = _plain(copy.deepcopy(job))
    out["state"]["current"] = _state_word(job["state"]["current"])
    out["exit_code"] = _old_exit_code(job["exit_code"], always_rc=False)
    out["derived_exit_code"] = _old_exit_code(job["derived_exit_code"], always_rc=False)
    out["time"]["start"] = job["time"]["eligible"]  # parse.c: _add_parse(UINT32, eligible, "time/start")
    out["steps"] = [{**_plain(s), "step": {"job_id": job["job_id"], "id": s["step"]["id"].rsplit(".", 1)[-1],
                                           "name": s["step"]["name"]}} for s in job["steps"]]
    return out


def v0039(job: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    out["state"]["current"] = _state_word(job["state"]["current"])
    out["exit_code"] = _old_exit_code(job["exit_code"], always_rc=True)
    out["derived_exit_code"] = _old_exit_code(job["derived_exit_code"], always_rc=True)
    out["steps"] = [_step_v0039(s, job["job_id"]) for s in job["steps"]]
    return out


def same(job: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(job)


def meta_dbv(release: str, plugin: str) -> dict[str, Any]:
    major, minor, micro = (int(x) for x in release.split("."))
    return {"plugin": {"type": plugin, "name": f"Slurm OpenAPI DB {plugin[-7:]}"},
            "Slurm": {"version": {"major": major, "micro": micro, "minor": minor}, "release": release}}


def meta_2302(release: str, plugin: str) -> dict[str, Any]:
    major, minor, micro = (int(x) for x in release.split("."))
    return {"plugins": {"data_parser": plugin, "accounting_storage": "accounting_storage/slurmdbd"},
            "command": ["sacct", "-a", "-D", "-X", "--json"],
            "Slurm": {"version": {"major": major, "micro": micro, "minor": minor}, "release": release}}


def meta_new(release: str, plugin: str) -> dict[str, Any]:
    major, minor, micro = release.split(".")
    return {"plugin": {"type": "", "name": "", "data_parser": plugin, "accounting_storage": "accounting_storage/slurmdbd"},
            "client": {"source": "", "user": "root", "group": "root"}, "command": ["sacct", "-a", "-D", "-X"],
            "slurm": {"version": {"major": major, "micro": micro, "minor": minor}, "release": release, "cluster": "av24"}}


FIXTURES = (  # (directory, file, release, plugin, job rewrite, meta form)
    ("21.08", "spec-dbv0.0.37.json", "21.08.8", "openapi/dbv0.0.37", dbv0037, meta_dbv),
    ("23.02", "spec-v0.0.39.json", "23.02.8", "data_parser/v0.0.39", v0039, meta_2302),
    ("23.11", "spec-v0.0.40.json", "23.11.11", "data_parser/v0.0.40", same, meta_new),
    ("24.05", "spec-v0.0.41.json", "24.05.8", "data_parser/v0.0.41", same, meta_new),
    ("25.05", "spec-v0.0.43.json", "25.05.8", "data_parser/v0.0.43", same, meta_new),
    ("25.11", "spec-v0.0.44.json", "25.11.7", "data_parser/v0.0.44", same, meta_new),
)


def main() -> None:
    source = json.loads(SOURCE.read_text(encoding="utf-8"))
    for directory, name, release, plugin, rewrite, meta in FIXTURES:
        doc = {"meta": meta(release, plugin), "errors": [], "warnings": [],
               "jobs": [rewrite(job) for job in source["jobs"]]}
        path = HERE / directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
