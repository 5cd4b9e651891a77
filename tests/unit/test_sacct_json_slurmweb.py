"""Issue 29 part 1: real slurmrestd ``/slurmdb/v0.0.NN/job/{id}`` responses (the job objects ``sacct --json``
prints, through the same data_parser) of Slurm 23.02 to 25.11, for every data_parser each release serves,
recorded by Slurm-web's crawler (tests/data/accounting/json/SOURCES.md, "Slurm-web recordings").

Each is read through the path ``report build --input`` takes (pipeline.read_input, pipeline.build, the CLI),
and its figures are compared with the HAND table below, read off each document's JSON by eye: job id (none is
an array task or a het component: array.task_id and het.job_offset are unset), state.current[0], time.elapsed,
GPUs (the count of gres/gpu in tres.allocated: none of these clusters accounts gres/gpu, so 0, and GPU-hours
0), exit code (return_code:signal.id; v0.0.39 prints return_code 0 for every exit, so unknown), submission,
start (0 or NO_VAL 4294967294: unknown), end (0: unknown), steps, and the one bucket the row lands in (it
started and ended: an attempt; started, no end: running; never started: not started).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accounting import pipeline
from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.period import Period
from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.errors import InputError
from gpuclust.slurm.jsonshape import read_shape

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
JSON = DATA / "json"
SITE = DATA / "site.conf"

# The Slurm release each recording's meta names, per folder and data_parser.
RELEASES = {("23.02", "v0.0.39"): "23.02.8", ("23.11", "v0.0.40"): "23.11.10", ("24.05", "v0.0.41"): "24.05.3",
            ("24.11", "v0.0.41"): "24.11.5", ("24.11", "v0.0.42"): "24.11.5",
            ("25.05", "v0.0.41"): "25.05.0-0rc1", ("25.05", "v0.0.42"): "25.05.4", ("25.05", "v0.0.43"): "25.05.4",
            ("25.11", "v0.0.41"): "25.11.0", ("25.11", "v0.0.42"): "25.11.0", ("25.11", "v0.0.43"): "25.11.0",
            ("25.11", "v0.0.44"): "25.11.0"}

# By hand, from each document: (file, job id, state, elapsed s, GPUs, (exit code, signal) or None when the shape
# cannot know it, submission, start, end, steps, bucket).
HAND: list[tuple[str, str, str, int, int, tuple[int, int] | None, int, int | None, int | None, int, str]] = [
    ("23.02/v0.0.39-job-archived", "306", "COMPLETED", 360, 0, None, 1727332583, 1727339062, 1727339422, 1, "attempt_rows"),
    ("23.02/v0.0.39-job-completed", "307", "COMPLETED", 360, 0, None, 1727332584, 1727358173, 1727358533, 1, "attempt_rows"),
    ("23.02/v0.0.39-job-pending", "326", "PENDING", 0, 0, None, 1727332586, None, None, 0, "not_started"),
    ("23.02/v0.0.39-job-running", "310", "RUNNING", 92, 0, None, 1727332584, 1727358533, None, 1, "running"),
    ("23.11/v0.0.40-job-archived", "508", "CANCELLED", 3, 0, (0, 0), 1746619980, 1746619980, 1746619983, 1, "attempt_rows"),
    ("23.11/v0.0.40-job-failed", "510", "FAILED", 1, 0, (1, 0), 1746621139, 1746621142, 1746621143, 1, "attempt_rows"),
    ("23.11/v0.0.40-job-gpus-completed", "714", "COMPLETED", 30, 0, (0, 0), 1746803069, 1746803069, 1746803099, 1, "attempt_rows"),
    ("23.11/v0.0.40-job-gpus-multi-nodes", "500", "PENDING", 0, 0, (0, 0), 1746619949, 1746619951, None, 1, "running"),
    ("23.11/v0.0.40-job-gpus-multi-types", "503", "RUNNING", 2, 0, (0, 0), 1746619961, 1746619961, None, 1, "running"),
    ("23.11/v0.0.40-job-pending", "516", "PENDING", 0, 0, (0, 0), 1746621149, None, None, 0, "not_started"),
    ("23.11/v0.0.40-job-running", "511", "RUNNING", 19, 0, (0, 0), 1746621141, 1746621142, None, 1, "running"),
    ("23.11/v0.0.40-job-timeout", "609", "TIMEOUT", 79, 0, (0, 0), 1746624259, 1746624261, 1746624340, 1, "attempt_rows"),
    ("24.05/v0.0.41-job-archived", "649716", "CANCELLED", 42, 0, (0, 0), 1747749294, 1747749296, 1747749338, 1, "attempt_rows"),
    ("24.05/v0.0.41-job-failed", "649719", "FAILED", 1, 0, (1, 0), 1747754470, 1747754472, 1747754473, 1, "attempt_rows"),
    ("24.05/v0.0.41-job-gpus-completed", "10", "COMPLETED", 30, 0, (0, 0), 1762529654, 1762529655, 1762529685, 1, "attempt_rows"),
    ("24.05/v0.0.41-job-gpus-multi-nodes", "11", "PENDING", 1, 0, (0, 0), 1762529688, 1762529688, None, 1, "running"),
    ("24.05/v0.0.41-job-gpus-multi-types", "4", "PENDING", 2, 0, (0, 0), 1762529638, 1762529638, None, 1, "running"),
    ("24.05/v0.0.41-job-pending", "649730", "PENDING", 0, 0, (0, 0), 1747754494, None, None, 0, "not_started"),
    ("24.05/v0.0.41-job-running", "649722", "RUNNING", 88, 0, (0, 0), 1747754477, 1747754478, None, 1, "running"),
    ("24.05/v0.0.41-job-timeout", "649717", "TIMEOUT", 83, 0, (0, 0), 1747754465, 1747754466, 1747754549, 1, "attempt_rows"),
    ("24.11/v0.0.41-job-archived", "5959", "COMPLETED", 30, 0, (0, 0), 1747750688, 1747750856, 1747750886, 1, "attempt_rows"),
    ("24.11/v0.0.41-job-failed", "5966", "FAILED", 1, 0, (1, 0), 1747751520, 1747751521, 1747751522, 1, "attempt_rows"),
    ("24.11/v0.0.41-job-gpus-completed", "5980", "COMPLETED", 30, 0, (0, 0), 1747751625, 1747751628, 1747751658, 1, "attempt_rows"),
    ("24.11/v0.0.41-job-gpus-multi-nodes", "5981", "RUNNING", 1, 0, (0, 0), 1747752261, 1747752261, None, 1, "running"),
    ("24.11/v0.0.41-job-gpus-multi-types", "5984", "RUNNING", 1, 0, (0, 0), 1747752272, 1747752272, None, 1, "running"),
    ("24.11/v0.0.41-job-pending", "5977", "PENDING", 0, 0, (0, 0), 1747751544, None, None, 0, "not_started"),
    ("24.11/v0.0.41-job-running", "5972", "RUNNING", 81, 0, (0, 0), 1747751533, 1747751535, None, 1, "running"),
    ("24.11/v0.0.41-job-timeout", "5964", "TIMEOUT", 87, 0, (0, 0), 1747751515, 1747751517, 1747751604, 1, "attempt_rows"),
    ("24.11/v0.0.42-job-archived", "6354", "COMPLETED", 30, 0, (0, 0), 1762788123, 1762788123, 1762788153, 1, "attempt_rows"),
    ("24.11/v0.0.42-job-failed", "6359", "FAILED", 1, 0, (1, 0), 1762788769, 1762788770, 1762788771, 1, "attempt_rows"),
    ("24.11/v0.0.42-job-gpus-completed", "6372", "COMPLETED", 30, 0, (0, 0), 1762788890, 1762788890, 1762788920, 1, "attempt_rows"),
    ("24.11/v0.0.42-job-gpus-multi-nodes", "6371", "RUNNING", 1, 0, (0, 0), 1762788887, 1762788887, None, 1, "running"),
    ("24.11/v0.0.42-job-gpus-multi-types", "6356", "RUNNING", 0, 0, (0, 0), 1762788763, 1762788764, None, 1, "running"),
    ("24.11/v0.0.42-job-pending", "6370", "PENDING", 0, 0, (0, 0), 1762788785, None, None, 0, "not_started"),
    ("24.11/v0.0.42-job-running", "6368", "RUNNING", 56, 0, (0, 0), 1762788782, 1762788801, None, 1, "running"),
    ("24.11/v0.0.42-job-timeout", "6357", "TIMEOUT", 65, 0, (0, 0), 1762788766, 1762788766, 1762788831, 1, "attempt_rows"),
    ("25.05/v0.0.41-job-archived", "52", "CANCELLED", 2, 0, (0, 0), 1747763001, 1747763002, 1747763004, 1, "attempt_rows"),
    ("25.05/v0.0.41-job-failed", "3", "FAILED", 1, 0, (1, 0), 1747754581, 1747754584, 1747754585, 1, "attempt_rows"),
    ("25.05/v0.0.41-job-gpus-completed", "17", "COMPLETED", 30, 0, (0, 0), 1747754676, 1747754679, 1747754709, 1, "attempt_rows"),
    ("25.05/v0.0.41-job-gpus-multi-nodes", "18", "RUNNING", 1, 0, (0, 0), 1747755311, 1747755311, None, 1, "running"),
    ("25.05/v0.0.41-job-gpus-multi-types", "21", "RUNNING", 2, 0, (0, 0), 1747755320, 1747755320, None, 1, "running"),
    ("25.05/v0.0.41-job-pending", "5", "PENDING", 0, 0, (0, 0), 1747754584, None, None, 0, "not_started"),
    ("25.05/v0.0.41-job-running", "4", "RUNNING", 22, 0, (0, 0), 1747754583, 1747754648, None, 1, "running"),
    ("25.05/v0.0.41-job-timeout", "1", "TIMEOUT", 66, 0, (0, 0), 1747754578, 1747754581, 1747754647, 1, "attempt_rows"),
    ("25.05/v0.0.42-job-archived", "4756", "COMPLETED", 30, 0, (0, 0), 1762789187, 1762789188, 1762789218, 1, "attempt_rows"),
    ("25.05/v0.0.42-job-failed", "4763", "FAILED", 2, 0, (1, 0), 1762789870, 1762789873, 1762789875, 1, "attempt_rows"),
    ("25.05/v0.0.42-job-gpus-completed", "4760", "RUNNING", 30, 0, (0, 0), 1762789834, 1762789834, None, 1, "running"),
    ("25.05/v0.0.42-job-gpus-multi-nodes", "4777", "RUNNING", 1, 0, (0, 0), 1762789997, 1762789997, None, 1, "running"),
    ("25.05/v0.0.42-job-gpus-multi-types", "4783", "RUNNING", 1, 0, (0, 0), 1762790650, 1762790650, None, 1, "running"),
    ("25.05/v0.0.42-job-pending", "4774", "PENDING", 0, 0, (0, 0), 1762789888, None, None, 0, "not_started"),
    ("25.05/v0.0.42-job-running", "4769", "RUNNING", 72, 0, (0, 0), 1762789880, 1762789888, None, 1, "running"),
    ("25.05/v0.0.42-job-timeout", "4761", "TIMEOUT", 62, 0, (0, 0), 1762789867, 1762789867, 1762789929, 1, "attempt_rows"),
    ("25.05/v0.0.43-job-archived", "2194", "COMPLETED", 360, 0, (0, 0), 1762637321, 1762637323, 1762637683, 1, "attempt_rows"),
    ("25.05/v0.0.43-job-failed", "4732", "FAILED", 2, 0, (1, 0), 1762788998, 1762788999, 1762789001, 1, "attempt_rows"),
    ("25.05/v0.0.43-job-gpus-completed", "4747", "COMPLETED", 31, 0, (0, 0), 1762789129, 1762789129, 1762789160, 1, "attempt_rows"),
    ("25.05/v0.0.43-job-gpus-multi-nodes", "4746", "RUNNING", 1, 0, (0, 0), 1762789125, 1762789125, None, 1, "running"),
    ("25.05/v0.0.43-job-gpus-multi-types", "4752", "RUNNING", 0, 0, (0, 0), 1762789172, 1762789173, None, 1, "running"),
    ("25.05/v0.0.43-job-pending", "4743", "PENDING", 0, 0, (0, 0), 1762789015, None, None, 0, "not_started"),
    ("25.05/v0.0.43-job-running", "4739", "RUNNING", 25, 0, (0, 0), 1762789009, 1762789062, None, 1, "running"),
    ("25.05/v0.0.43-job-timeout", "4730", "TIMEOUT", 63, 0, (0, 0), 1762788995, 1762788995, 1762789058, 1, "attempt_rows"),
    ("25.11/v0.0.41-job-archived", "5715", "CANCELLED", 0, 0, (0, 0), 1762796066, None, 1762796066, 0, "not_started"),
    ("25.11/v0.0.41-job-failed", "6", "FAILED", 1, 0, (1, 0), 1762528140, 1762528142, 1762528143, 1, "attempt_rows"),
    ("25.11/v0.0.41-job-gpus-completed", "28", "COMPLETED", 30, 0, (0, 0), 1762528920, 1762528920, 1762528950, 1, "attempt_rows"),
    ("25.11/v0.0.41-job-gpus-multi-nodes", "25", "RUNNING", 0, 0, (0, 0), 1762528910, 1762528912, None, 1, "running"),
    ("25.11/v0.0.41-job-gpus-multi-types", "26", "RUNNING", 1, 0, (0, 0), 1762528914, 1762528914, None, 1, "running"),
    ("25.11/v0.0.41-job-pending", "17", "PENDING", 0, 0, (0, 0), 1762528157, None, None, 0, "not_started"),
    ("25.11/v0.0.41-job-running", "16", "RUNNING", 55, 0, (0, 0), 1762528155, 1762528174, None, 1, "running"),
    ("25.11/v0.0.41-job-timeout", "4", "TIMEOUT", 72, 0, (0, 0), 1762528137, 1762528137, 1762528209, 1, "attempt_rows"),
    ("25.11/v0.0.42-job-archived", "5653", "COMPLETED", 31, 0, (0, 0), 1762785661, 1762785661, 1762785692, 1, "attempt_rows"),
    ("25.11/v0.0.42-job-failed", "5656", "FAILED", 1, 0, (1, 0), 1762786299, 1762786302, 1762786303, 1, "attempt_rows"),
    ("25.11/v0.0.42-job-gpus-completed", "5646", "RUNNING", 31, 0, (0, 0), 1762785606, 1762785606, None, 1, "running"),
    ("25.11/v0.0.42-job-gpus-multi-nodes", "5650", "RUNNING", 1, 0, (0, 0), 1762785651, 1762785651, None, 1, "running"),
    ("25.11/v0.0.42-job-gpus-multi-types", "5652", "RUNNING", 1, 0, (0, 0), 1762785657, 1762785657, None, 1, "running"),
    ("25.11/v0.0.42-job-pending", "5667", "PENDING", 0, 0, (0, 0), 1762786316, None, None, 0, "not_started"),
    ("25.11/v0.0.42-job-running", "5658", "RUNNING", 5, 0, (0, 0), 1762786302, 1762786381, None, 1, "running"),
    ("25.11/v0.0.42-job-timeout", "5654", "TIMEOUT", 84, 0, (0, 0), 1762786296, 1762786296, 1762786380, 1, "attempt_rows"),
    ("25.11/v0.0.43-job-archived", "5735", "CANCELLED", 1, 0, (0, 0), 1762858440, 1762858441, 1762858442, 1, "attempt_rows"),
    ("25.11/v0.0.43-job-failed", "5758", "FAILED", 1, 0, (1, 0), 1762942594, 1762942595, 1762942596, 1, "attempt_rows"),
    ("25.11/v0.0.43-job-gpus-completed", "5625", "COMPLETED", 31, 0, (0, 0), 1762784865, 1762784865, 1762784896, 1, "attempt_rows"),
    ("25.11/v0.0.43-job-gpus-multi-nodes", "5636", "RUNNING", 0, 0, (0, 0), 1762785574, 1762785575, None, 1, "running"),
    ("25.11/v0.0.43-job-gpus-multi-types", "5624", "RUNNING", 1, 0, (0, 0), 1762784855, 1762784855, None, 1, "running"),
    ("25.11/v0.0.43-job-pending", "5769", "PENDING", 0, 0, (0, 0), 1762942611, None, None, 0, "not_started"),
    ("25.11/v0.0.43-job-running", "5761", "RUNNING", 22, 0, (0, 0), 1762942599, 1762942661, None, 1, "running"),
    ("25.11/v0.0.43-job-timeout", "5756", "TIMEOUT", 67, 0, (0, 0), 1762942591, 1762942592, 1762942659, 1, "attempt_rows"),
    ("25.11/v0.0.44-job-archived", "5735", "CANCELLED", 1, 0, (0, 0), 1762858440, 1762858441, 1762858442, 1, "attempt_rows"),
    ("25.11/v0.0.44-job-failed", "5739", "FAILED", 2, 0, (1, 0), 1762942459, 1762942460, 1762942462, 1, "attempt_rows"),
    ("25.11/v0.0.44-job-gpus-completed", "5141", "COMPLETED", 31, 0, (0, 0), 1762784359, 1762784359, 1762784390, 1, "attempt_rows"),
    ("25.11/v0.0.44-job-gpus-multi-nodes", "5679", "RUNNING", 1, 0, (0, 0), 1762788040, 1762788040, None, 1, "running"),
    ("25.11/v0.0.44-job-gpus-multi-types", "4716", "RUNNING", 1, 0, (0, 0), 1762783613, 1762783613, None, 1, "running"),
    ("25.11/v0.0.44-job-pending", "5750", "PENDING", 0, 0, (0, 0), 1762942475, None, None, 0, "not_started"),
    ("25.11/v0.0.44-job-running", "5748", "RUNNING", 72, 0, (0, 0), 1762942472, 1762942475, None, 1, "running"),
    ("25.11/v0.0.44-job-timeout", "5737", "TIMEOUT", 82, 0, (0, 0), 1762942456, 1762942457, 1762942539, 1, "attempt_rows"),
]
IDS = [h[0] for h in HAND]
WIDE = Period(datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))


def _path(name: str) -> Path:
    release, rest = name.split("/")
    return JSON / release / f"slurmweb-{rest}.json"


def _epoch(value: Any) -> int | None:
    return None if value is None else int(value.timestamp())


def test_every_recording_is_in_the_hand_table() -> None:
    on_disk = {f"{p.parent.name}/{p.stem.removeprefix('slurmweb-')}" for p in JSON.glob("*/slurmweb-*-job-*.json")
               if "-slurmctld-" not in p.name}
    assert on_disk == set(IDS)
    assert {_release_api(n) for n in IDS} == set(RELEASES)  # every data_parser of every release recorded


def _release_api(name: str) -> tuple[str, str]:
    """("24.11", "v0.0.42") from "24.11/v0.0.42-job-failed"."""
    release, rest = name.split("/")
    return release, rest.split("-")[0]


@pytest.mark.parametrize(("name", "job_id", "state", "elapsed", "gpus", "exit_", "submit", "start", "end", "steps",
                          "bucket"), HAND, ids=IDS)
def test_reads_as_by_hand(name: str, job_id: str, state: str, elapsed: int, gpus: int,
                          exit_: tuple[int, int] | None, submit: int, start: int | None, end: int | None,
                          steps: int, bucket: str) -> None:
    path = _path(name)
    release, api = _release_api(name)
    shape = read_shape(json.loads(path.read_bytes()))
    assert (shape.plugin, shape.release, shape.conflict) == (f"data_parser/{api}", RELEASES[(release, api)], "")
    parsed = pipeline.read_input(str(path))  # what `report build --input` reads with
    assert parsed.problems == [] and parsed.rejected == 0 and parsed.usage_problems == []
    (row,) = parsed.table.to_pylist()
    assert (row["job_id"], row["job_id_raw"], row["state"], row["elapsed_s"], row["gpus"]) == (
        job_id, int(job_id), state, elapsed, gpus)
    assert row["elapsed_s"] * row["gpus"] == elapsed * gpus == 0  # GPU-seconds: no gres/gpu accounted
    assert (_epoch(row["submit"]), _epoch(row["start"]), _epoch(row["end"])) == (submit, start, end)
    if exit_ is None:  # v0.0.39: return_code 0 for any exit, so unknown, never a made-up 0
        assert (row["exit_code"], row["exit_signal"], row["exit_code_known"]) == (None, None, False)
        assert parsed.exit_codes_known is False
    else:
        assert (row["exit_code"], row["exit_signal"], row["exit_code_known"]) == (*exit_, True)
    assert parsed.steps_dropped == steps


@pytest.mark.parametrize(("name", "job_id", "state", "elapsed", "gpus", "exit_", "submit", "start", "end", "steps",
                          "bucket"), HAND, ids=IDS)
def test_report_figures_as_by_hand(name: str, job_id: str, state: str, elapsed: int, gpus: int,
                                   exit_: tuple[int, int] | None, submit: int, start: int | None, end: int | None,
                                   steps: int, bucket: str) -> None:
    """The report `report build --input` makes: runs, completed and GPU-hours by hand; the row in one bucket."""
    report, _ = pipeline.build(load_config(str(SITE)), WIDE, input_path=str(_path(name)))
    totals, info = report.data["totals"], report.data["input"]
    ran = start is not None and end is not None
    assert (totals["runs"], totals["attempts"], totals["completed"]) == (
        int(ran), int(ran), int(ran and state == "COMPLETED"))
    assert totals["gpu_hours"] == gpus * elapsed / 3600 == 0
    accounted = info["rows_accounted"]
    assert accounted["balanced"] and accounted["read"] == 1 + steps and accounted["rejected"] == 0
    assert {k: v for k, v in accounted.items() if v and k not in ("read", "balanced")} == (
        {bucket: 1, "steps_dropped": steps} if steps else {bucket: 1})


def _cli(tmp_path: Path, path: Path) -> tuple[Any, dict[str, Any] | None]:
    conf = tmp_path / "site.conf"
    conf.write_text(SITE.read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "s")))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(path),
                                      "--format", "json", "--out", str(out)])
    report = out / "report.json"
    return result, json.loads(report.read_text()) if report.exists() else None


@pytest.mark.parametrize("name", ["23.02/v0.0.39-job-completed", "23.11/v0.0.40-job-failed",
                                  "24.05/v0.0.41-job-timeout", "24.11/v0.0.42-job-gpus-completed",
                                  "25.05/v0.0.43-job-failed", "25.11/v0.0.44-job-timeout"])
def test_cli_report_build_input(tmp_path: Path, name: str) -> None:
    """`gpuclust report build --input` on one ended job per release: exit 0, no traceback, one run."""
    hand = dict(zip(IDS, HAND, strict=True))[name]
    result, report = _cli(tmp_path, _path(name))
    assert result.exit_code == 0, result.output
    assert result.exception is None and "Traceback" not in result.output
    assert report is not None and report["totals"]["runs"] == 1
    assert report["totals"]["completed"] == int(hand[2] == "COMPLETED")
    assert report["totals"]["gpu_hours"] == 0
    assert report["input"]["rows_accounted"]["balanced"]


# ---- the live queue: the same data_parser, not accounting ----------------------------------------------------

@pytest.mark.parametrize(("name", "kind"), [("23.02/slurmweb-v0.0.39-slurmctld-job-completed.json", "openapi/v0.0.39"),
                                            ("24.11/slurmweb-v0.0.42-slurmctld-job-gpus-completed.json",
                                             "openapi/slurmctld")])
def test_slurmctld_queue_response_is_refused_by_name(tmp_path: Path, name: str, kind: str) -> None:
    """slurmrestd's /slurm/v0.0.NN/job/{id} (the same jobs 307 and 6372 as the slurmdb recordings, squeue's
    shape) names the same data_parser as the accounting response; it used to be read as rejected rows."""
    path = JSON / name
    with pytest.raises(InputError) as exc:
        pipeline.read_input(str(path))
    (problem,) = exc.value.problems
    text = str(problem)
    assert text.startswith(str(path)) and f"meta.plugin.type is {kind}" in text
    assert "not accounting" in text and "/slurmdb/v0.0.NN/jobs" in text and f"from {kind}" in text
    result, report = _cli(tmp_path, path)
    assert result.exit_code != 0 and report is None and "Traceback" not in result.output
    assert kind in result.output


@pytest.mark.parametrize(("command", "refused"), [(["squeue", "--json"], True), (["/usr/bin/scontrol", "show"], True),
                                                  (["sacct", "--json"], False), (["/opt/slurm/bin/sacct"], False),
                                                  ([], False)])
def test_meta_command_other_than_sacct_is_refused(command: list[str], refused: bool) -> None:
    """The CLI writes meta.command: a squeue --json document (v0.0.40+ meta, no plugin.type) is the queue too."""
    doc = json.loads(_path("24.11/v0.0.42-job-failed").read_bytes())
    doc["meta"]["plugin"]["type"] = ""
    doc["meta"]["command"] = command
    data = json.dumps(doc).encode()
    if refused:
        with pytest.raises(InputError) as exc:
            parse_input(data, "|", "q.json")
        assert f"meta.command is {command[0].rsplit('/', 1)[-1]}" in str(exc.value.problems[0])
    else:
        assert parse_input(data, "|", "q.json").table.num_rows == 1


def test_unknown_api_version_of_a_real_document_is_refused_by_name() -> None:
    """Every data_parser Slurm-web recorded is in the adapter table; one it lacks (v0.0.46, as a later slurmrestd
    would name it) is refused by name, nothing read."""
    doc = json.loads(_path("25.11/v0.0.44-job-failed").read_bytes())
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.46"
    doc["meta"]["slurm"]["release"] = "26.11.0"
    doc["meta"]["slurm"]["version"] = {"major": "26", "minor": "11", "micro": "0"}
    with pytest.raises(InputError) as exc:
        parse_input(json.dumps(doc).encode(), "|", "v46.json")
    text = str(exc.value.problems[0])
    assert "data_parser/v0.0.46 from openapi/slurmdbd, Slurm 26.11.0" in text and "data_parser/v0.0.44" in text


def test_no_gpu_in_any_alloctres_is_said() -> None:
    """Slurm-web's clusters do not account gres/gpu (the queue's tres_per_job names GPUs, AllocTRES none): the
    report says that its GPU-hours are 0 as recorded, and points to AccountingStorageTRES."""
    path = JSON / "25.11" / "slurmweb-v0.0.44-job-gpus-completed.json"
    report, _ = pipeline.build(load_config(str(SITE)), WIDE, input_path=str(path))
    assert any("AccountingStorageTRES" in note for note in report.data["input"]["notes"])
    # a dump whose jobs have GPUs says nothing of it
    gpu_dump, _ = pipeline.build(load_config(str(SITE)), None, input_path=str(DATA / "lab-pipe.txt"))
    assert not any("AccountingStorageTRES" in note for note in gpu_dump.data["input"]["notes"])
