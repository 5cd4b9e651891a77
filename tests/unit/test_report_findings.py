"""The waste detectors in the report (issue 43 item 5): report.json `findings`, findings.csv and the page's table,
`report show --rows findings`, over a recorded dump and a generated one, with hand-computed expectations; the
verdicts are those of `gpuclust job` (figures/waste.py, one copy); Timelimit through the field registry."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import findings, waste
from gpuclust.accounting.figures.telemetry import GpuTelemetry
from gpuclust.accounting.jobview import show_jobs
from gpuclust.accounting.output import show
from gpuclust.accounting.output.render import render_html, write_report
from gpuclust.config import load_config, parse_config
from gpuclust.slurm import sacct_json as sj

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
NODES = Path(__file__).resolve().parents[1] / "data" / "audit" / "clean" / "scontrol_d_show_node_o.txt"
CONFIG = parse_config("[site]\ncluster_name = t\nstate_dir = /nonexistent\n\n[partition gpu]\n"
                      "price_per_gpu_hour = 2.50\n")

HEADER = "JobID|JobIDRaw|JobName|User|Account|Partition|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|" \
         "NNodes|NodeList|Timelimit"


def _row(job: int, user: str, start: str, end: str, elapsed: str, tres: str, nnodes: int, nodes: str,
         limit: str) -> str:
    return (f"{job}|{job}|train|{user}|ml|gpu|COMPLETED|0:0|2026-12-02T00:00:00|2026-12-02T{start}|"
            f"2026-12-02T{end}|{elapsed}|{tres}|{nnodes}|{nodes}|{limit}")


# The lab's nodes (tests/data/audit/clean): 8 CPUs, RealMemory 16000 MB and 4 GPUs each, partitions gpu and debug:
# partition gpu's share is 2 CPUs and 4000 MB per GPU, 4 GPUs (and 8 CPUs) on one node.
GENERATED = "\n".join([
    HEADER,
    # 8 CPUs for 1 GPU (share 2, x 1.25 = 2.5): cpu_share; 30 min of a 24 h limit: time_limit, --time=01:00:00
    _row(101, "alice", "01:00:00", "01:30:00", "00:30:00", "cpu=8,mem=4000M,node=1,gres/gpu=1", 1, "node1",
         "1-00:00:00"),
    # 32000 MB for 2 GPUs (16000 per GPU, share 4000 x 1.25): mem_share; 2 nodes for 2 GPUs: multi_node;
    # 2 h of a 4 h limit is half: no time_limit
    _row(102, "bob", "01:00:00", "03:00:00", "02:00:00", "cpu=4,mem=32000M,node=2,gres/gpu=2", 2, "node[1-2]",
         "04:00:00"),
    # within every share, 10 h of 12 h
    _row(103, "carol", "01:00:00", "11:00:00", "10:00:00", "cpu=8,mem=16000M,node=1,gres/gpu=4", 1, "node3",
         "12:00:00"),
    # no limit known (UNLIMITED): no time_limit finding, never one of 0
    _row(104, "dave", "01:00:00", "01:10:00", "00:10:00", "cpu=2,mem=4000M,node=1,gres/gpu=1", 1, "node4",
         "UNLIMITED"),
    # 5 min of 2 h: time_limit (a formula-like user name: spreadsheet_safe in the CSV)
    _row(105, "=HYPERLINK(1)", "01:00:00", "01:05:00", "00:05:00", "cpu=2,mem=4000M,node=1,gres/gpu=1", 1,
         "node4", "02:00:00"),
    # no GPUs: not a job the detectors look at
    _row(106, "erin", "01:00:00", "01:05:00", "00:05:00", "cpu=64,mem=4000M,node=1", 1, "node4", "1-00:00:00"),
]) + "\n"

EXPECTED = [("101", "cpu_share"), ("101", "time_limit"), ("102", "mem_share"), ("102", "multi_node"),
            ("105", "time_limit")]


@pytest.fixture()
def generated(tmp_path: Path) -> Path:
    path = tmp_path / "generated.txt"
    path.write_text(GENERATED)
    return path


def _build(path: Path, nodes: Path | None = NODES):  # type: ignore[no-untyped-def]
    report, _ = pipeline.build(CONFIG, None, input_path=str(path), delimiter="|",
                               nodes_path=str(nodes) if nodes else None)
    return report


def test_generated_dump_gives_hand_computed_findings(generated: Path) -> None:
    report = _build(generated)
    sec = report.data["findings"]
    assert sec["jobs_checked"] == 5 and sec["findings"] == 5 and sec["jobs"] == 3
    assert sec["partition_shares"] == "nodes"
    assert [(f["job_id"], f["kind"]) for f in sec["listed"]] == EXPECTED
    by = {(f["job_id"], f["kind"]): f for f in sec["listed"]}
    cpu = by[("101", "cpu_share")]
    assert cpu["user"] == "alice" and cpu["account"] == "ml" and cpu["partition"] == "gpu"
    assert cpu["evidence"] == {"cpus": 8, "gpus": 1, "cpus_per_gpu": 8.0, "partition_cpus_per_gpu": 2.0}
    assert cpu["advice"].startswith("ask for at most 2 CPUs (2 per GPU)")
    assert by[("101", "time_limit")]["evidence"] == {"elapsed_s": 1800.0, "timelimit_s": 86400.0,
                                                     "time_limit_efficiency": round(1800 / 86400, 6),
                                                     "advised_time_s": 3600.0}
    assert "--time=01:00:00" in by[("101", "time_limit")]["advice"]
    assert by[("102", "mem_share")]["evidence"] == {"mem_mb": 32000.0, "gpus": 2, "mem_mb_per_gpu": 16000.0,
                                                    "partition_mem_mb_per_gpu": 4000.0}
    assert by[("102", "multi_node")]["evidence"] == {"nodes": 2, "gpus": 2, "partition_gpus_per_node": 4}
    assert by[("105", "time_limit")]["evidence"]["advised_time_s"] == 3600.0  # 5 min x 2, rounded up to 1 h
    # the over-asks have no GPU-hour figure: no price, unknown (never 0)
    assert all(f["held_idle_gpu_hours"] is None and f["held_idle_cost"] is None for f in sec["listed"])
    assert sec["by_kind"] == [
        {"kind": "time_limit", "findings": 2, "jobs": 2, "held_idle_gpu_hours": None, "held_idle_cost": None},
        {"kind": "cpu_share", "findings": 1, "jobs": 1, "held_idle_gpu_hours": None, "held_idle_cost": None},
        {"kind": "mem_share", "findings": 1, "jobs": 1, "held_idle_gpu_hours": None, "held_idle_cost": None},
        {"kind": "multi_node", "findings": 1, "jobs": 1, "held_idle_gpu_hours": None, "held_idle_cost": None}]
    assert "findings.held_idle_cost" in report.data["definitions"]


def test_the_verdicts_are_gpuclust_jobs(generated: Path) -> None:
    """One set of detectors: `gpuclust job` on the same dump and nodes finds the same kinds, job by job."""
    report = _build(generated)
    answer = show_jobs(CONFIG, ["101", "102", "103", "104", "105"], input_text=generated.read_text(),
                       nodes_text=NODES.read_text())
    job_kinds = sorted((j["job_id"], f["kind"]) for j in answer.jobs for f in j["findings"])
    assert job_kinds == sorted((f["job_id"], f["kind"]) for f in report.data["findings"]["listed"])


def test_without_nodes_only_the_configured_gpus_per_node(generated: Path) -> None:
    report = _build(generated, nodes=None)
    assert report.data["findings"]["partition_shares"] == "none"
    assert [(f["job_id"], f["kind"]) for f in report.data["findings"]["listed"]] == [("101", "time_limit"),
                                                                                      ("105", "time_limit")]
    config = parse_config("[site]\ncluster_name = t\nstate_dir = /nonexistent\n\n[partition gpu]\n"
                          "gpus_per_node = 4\n")
    shares, source = findings.partition_shares(config, None)
    assert source == "config" and shares["gpu"] == waste.PartitionShare("gpu", None, None, 4, None)


def test_findings_csv_page_and_show_rows(generated: Path, tmp_path: Path) -> None:
    report = _build(generated)
    out = tmp_path / "out"
    write_report(report, out, ("csv", "html", "json"))
    with open(out / "findings.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["job_id"], r["kind"]) for r in rows] == EXPECTED
    assert rows[-1]["user"] == "'=HYPERLINK(1)"  # spreadsheet_safe
    assert json.loads(rows[0]["evidence"])["cpus"] == 8
    with open(out / "findings_by_kind.csv", newline="", encoding="utf-8") as handle:
        assert [r["kind"] for r in csv.DictReader(handle)] == ["time_limit", "cpu_share", "mem_share", "multi_node"]
    page = render_html(report)
    assert "Waste findings (the most costly first)" in page and "Waste findings by kind" in page
    assert json.loads((out / "report.json").read_text())["findings"]["findings"] == 5
    recs = show.row_records(report, "findings")
    waste_rows = [r for r in recs if r["kind"] not in ("failure", "held-idle")]
    assert [(r["job_id"], r["kind"]) for r in waste_rows] == EXPECTED
    assert all(r["row"] == "finding" and isinstance(r["evidence"], dict) for r in waste_rows)
    # what the rows held before stays first
    kept = [r["kind"] for r in recs[:len(recs) - len(waste_rows)]]
    assert set(kept) <= {"failure", "held-idle"}


def test_recorded_dumps_json_has_timelimit_text_without_it_is_unknown() -> None:
    """The lab recording (22.05): sacct --json carries time.limit (365 d for partition gpu's jobs, 60 min for
    others); the text recordings were made before Timelimit was fetched: unknown, so no time_limit finding."""
    config = load_config(str(DATA / "site.conf"))
    json_report, _ = pipeline.build(config, None, input_path=str(DATA / "lab-json.json"), delimiter="|")
    sec = json_report.data["findings"]
    # jobs of 1-4 s under a 365-day limit: --time=01:00:00 (the floor); the 60-minute ones have under 1 h slack
    assert {(f["job_id"], f["kind"]) for f in sec["listed"]} == {(j, "time_limit") for j in
                                                                  ("1", "5", "9", "10", "11", "14")}
    first = next(f for f in sec["listed"] if f["job_id"] == "1")
    assert first["evidence"] == {"elapsed_s": 4.0, "timelimit_s": 365 * 86400.0, "time_limit_efficiency": 0.0,
                                 "advised_time_s": 3600.0}
    text_report, _ = pipeline.build(config, None, input_path=str(DATA / "lab-parsable.txt"))
    assert text_report.data["findings"]["findings"] == 0
    assert text_report.data["findings"]["jobs_checked"] == sec["jobs_checked"]


def test_idle_findings_are_priced_from_per_gpu_telemetry() -> None:
    """Per-GPU telemetry (Prometheus or the store): GPU 0 held idle 7000 s of 7200 (idle_gpu), GPU 1 at 80% with
    a 2400 s stretch under the threshold (idle_min 1800 s: idle_stretch); priced at partition gpu's 2.50 per GPU-hour."""
    jobs = pd.DataFrame({"job_id": ["7"], "user": ["u"], "account": ["a"], "partition": ["gpu"], "gpu_type": [None],
                         "gpus": [2], "elapsed_s": [7200.0], "timelimit_s": [np.nan], "nnodes": [1],
                         "mem_mb": [np.nan], "gpu_mem_max_mb": [np.nan]})
    gpus = [GpuTelemetry("node1", "0", 7200.0, 144.0, 2.0, 5.0, 7000.0, 7100.0, 7000.0, 1.0e9, 0.0),
            GpuTelemetry("node1", "1", 7200.0, 5760.0, 80.0, 100.0, 2400.0, 2400.0, 2400.0, 1.0e9 + 600, 0.0)]
    frame = findings.job_findings(jobs, np.array([np.nan]), np.array([np.nan]), {0: gpus}, {}, CONFIG)
    assert list(frame["kind"]) == ["idle_gpu", "idle_stretch"]  # the most costly first
    assert frame["held_idle_gpu_hours"].tolist() == pytest.approx([7000 / 3600, 2400 / 3600])
    assert frame["held_idle_cost"].tolist() == pytest.approx([7000 / 3600 * 2.5, 2400 / 3600 * 2.5], abs=1e-6)
    assert "ask for 1 GPU" in frame["advice"][0]
    by = findings.by_kind(frame)
    assert by["held_idle_cost"].tolist() == pytest.approx([7000 / 3600 * 2.5, 2400 / 3600 * 2.5], abs=1e-6)


def test_sacct_json_time_limit_text() -> None:
    assert sj.time_limit(60, "time.limit") == "01:00:00"
    assert sj.time_limit(525600, "time.limit") == "365-00:00:00"
    assert sj.time_limit({"set": True, "infinite": False, "number": 90}, "time.limit") == "01:30:00"
    assert sj.time_limit({"set": False, "infinite": True, "number": 0}, "time.limit") == "UNLIMITED"
    assert sj.time_limit(None, "time.limit") == ""
    assert sj.time_limit(sj.INFINITE, "time.limit") == "UNLIMITED"
    assert sj.time_limit(sj.NO_VAL, "time.limit") == "Partition_Limit"
