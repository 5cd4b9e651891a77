"""Unit economics on a real lab recording (tests/data/economics/README.md), against figures computed by hand.

Lab "econ" (Slurm 22.05): node[1-2] gpu:h100:4 in partition gpu, node[3-4] gpu:a100:2 in partition a100.
Period 09:00:00-09:20:00 UTC = 1/3 h. node4 drained 09:06:28-09:16:28 (600 s); node3 drained while job 8 ran on
it: slurmdbd's event starts when the job ended (09:14:30) and ends at the resume (09:15:36): 66 s.

GPU-seconds of the jobs (sacct.txt):
  a100: 1 (job 1) + 122 (2) + 30 (7) + 120 (8) = 273 completed-run; 20 (3, FAILED) retries/failures
  gpu:  364 (4) + 46 (6) = 410 completed-run; 60 (5, FAILED) retries/failures
Unavailable: node4 2 x 600 + node3 2 x 66 = 1332 GPU-s.  Prices: h100 2.50, a100 1.20 per GPU-hour.
[costs] per month: network 730, storage 1460, support 365, operations 2190 -> x (1/3) / 730 each.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.output.render import write_report
from gpuclust.config import load_config, parse_config

DATA = Path(__file__).resolve().parent.parent / "data" / "economics"
PERIOD = Period(datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc), datetime(2026, 12, 3, 9, 20, tzinfo=timezone.utc))
H = 1 / 3600  # GPU-seconds -> GPU-hours
FILES = {"events_path": str(DATA / "events.txt"), "nodes_path": str(DATA / "nodes.txt"),
         "reasons_path": str(DATA / "reasons.txt"), "log_path": str(DATA / "slurmctld.log")}


def _build(config=None, **files):
    config = config or load_config(str(DATA / "site.conf"))
    report, _ = pipeline.build(config, PERIOD, input_path=str(DATA / "sacct.txt"), **{**FILES, **files})
    return report


@pytest.fixture(scope="module")
def econ():
    return _build().data["economics"]


def _part(econ, name):
    return next(r for r in econ["by_partition"] if r["partition"] == name)


def test_capacity_allocated_unavailable_idle(econ):
    a100, gpu, total = _part(econ, "a100"), _part(econ, "gpu"), econ["total"]
    assert econ["capacity"] == "known"
    assert a100["capacity_gpu_hours"] == pytest.approx(4 / 3, abs=1e-6)
    assert gpu["capacity_gpu_hours"] == pytest.approx(8 / 3, abs=1e-6)
    assert total["capacity_gpu_hours"] == pytest.approx(4.0, abs=1e-6)
    assert a100["terms"]["completed_run"]["gpu_hours"] == pytest.approx(273 * H, abs=1e-6)
    assert a100["terms"]["retries_failures"]["gpu_hours"] == pytest.approx(20 * H, abs=1e-6)
    assert gpu["terms"]["completed_run"]["gpu_hours"] == pytest.approx(410 * H, abs=1e-6)
    assert gpu["terms"]["retries_failures"]["gpu_hours"] == pytest.approx(60 * H, abs=1e-6)
    # the drained node shows as unavailable, for exactly its drain time
    assert a100["terms"]["unavailable"]["gpu_hours"] == pytest.approx(1332 * H, abs=1e-6)
    assert gpu["terms"]["unavailable"]["gpu_hours"] == 0
    assert a100["terms"]["idle"]["gpu_hours"] == pytest.approx(4 / 3 - 293 * H - 1332 * H, abs=1e-6)
    assert gpu["terms"]["idle"]["gpu_hours"] == pytest.approx(8 / 3 - 470 * H, abs=1e-6)
    for row in (a100, gpu, total):  # idle = capacity - allocated - unavailable
        t = row["terms"]
        assert t["idle"]["gpu_hours"] == pytest.approx(
            row["capacity_gpu_hours"] - row["allocated_gpu_hours"] - t["unavailable"]["gpu_hours"], abs=1e-5)
        hours = sum(t[k]["gpu_hours"] for k in ("completed_run", "retries_failures", "in_progress", "idle", "unavailable"))
        assert hours == pytest.approx(row["capacity_gpu_hours"], abs=1e-5)


def test_costs_add_up(econ):
    a100, gpu, total = _part(econ, "a100"), _part(econ, "gpu"), econ["total"]
    assert a100["terms"]["unavailable"]["cost"] == pytest.approx(1332 * H * 1.20, abs=1e-5)
    assert gpu["terms"]["completed_run"]["cost"] == pytest.approx(410 * H * 2.50, abs=1e-5)
    assert total["terms"]["network"]["cost"] == pytest.approx(730 / 3 / 730, abs=1e-6)
    assert total["terms"]["operations"]["cost"] == pytest.approx(1.0, abs=1e-6)
    # every capacity GPU-hour is priced at its partition's rate, plus 1/3 h of the monthly fixed costs
    fixed = (730 + 1460 + 365 + 2190) / 3 / 730
    assert total["total_cost"] == pytest.approx(4 / 3 * 1.20 + 8 / 3 * 2.50 + fixed, abs=1e-5)
    for row in (a100, gpu, total):  # the terms add up to the total
        assert sum(t["cost"] for t in row["terms"].values()) == pytest.approx(row["total_cost"], abs=1e-5)
    assert a100["total_cost"] + gpu["total_cost"] == pytest.approx(total["total_cost"], abs=1e-5)
    # fixed costs split by capacity share (a100 1/3, gpu 2/3)
    assert a100["terms"]["storage"]["cost"] == pytest.approx(1460 / 3 / 730 / 3, abs=1e-6)


def test_runs_denominator_unit_cost_and_share(econ):
    total = econ["total"]
    assert econ["denominator"] == "runs"
    assert (_part(econ, "a100")["accepted_units"], _part(econ, "gpu")["accepted_units"]) == (4, 2)
    fixed = (730 + 1460 + 365 + 2190) / 3 / 730
    cost = 4 / 3 * 1.20 + 8 / 3 * 2.50 + fixed
    assert total["total_cost_per_accepted_unit"] == pytest.approx(cost / 6, abs=1e-5)
    assert total["completed_run_share_of_capacity"] == pytest.approx(683 * H / 4, abs=1e-6)


def test_baselines_and_break_even(econ):
    cloud, api = econ["baselines"]
    assert cloud["baseline"] == "cloud" and api["baseline"] == "api"
    rental = (293 * H * 2.00 + 470 * H * 4.00) / 6  # allocated GPU-hours by type x price, per completed run
    assert cloud["cost_per_accepted_unit"] == pytest.approx(rental, abs=1e-5)
    assert api["cost_per_accepted_unit"] == 5.0
    cluster, share = econ["total"]["total_cost_per_accepted_unit"], econ["total"]["completed_run_share_of_capacity"]
    assert cloud["break_even_completed_run_share_of_capacity"] == pytest.approx(cluster * share / rental, rel=1e-4)
    assert api["break_even_completed_run_share_of_capacity"] == pytest.approx(cluster * share / 5.0, rel=1e-4)


def test_units_denominator():
    text = (DATA / "site.conf").read_text().replace("denominator = runs", "denominator = units")
    config = parse_config(text, str(DATA / "site.conf"))
    econ = _build(config).data["economics"]
    # job 1 "units=5 x" 5, job 2 5, job 7 7 (its failed attempt 3 never counts), job 8 ml default 10,
    # job 6 ml default 10, job 4 physics: no label, no default -> 0
    assert _part(econ, "a100")["accepted_units"] == 27
    assert _part(econ, "gpu")["accepted_units"] == 10
    assert econ["total"]["accepted_units"] == 37 and econ["completed_without_units"] == 1


def test_compute_per_month_replaces_gpu_prices():
    text = (DATA / "site.conf").read_text().replace("operations = 2190", "operations = 2190\ncompute_per_month = 7300")
    econ = _build(parse_config(text, "site.conf")).data["economics"]
    total = econ["total"]
    rate = 7300 / 3 / 730 / 4.0  # the period's compute cost over 4 capacity GPU-hours
    assert total["terms"]["completed_run"]["cost"] == pytest.approx(683 * H * rate, abs=1e-5)
    gpu_terms = sum(total["terms"][t]["cost"] for t in ("completed_run", "retries_failures", "in_progress", "idle",
                                                         "unavailable"))
    assert gpu_terms == pytest.approx(7300 / 3 / 730, abs=1e-5)  # = the prorated compute_per_month


def test_refusals_counted(econ):
    ref = econ["refusals"]
    assert ref["known"] and ref["total"] == 7
    assert ref["by_rule"] == [{"rule": "account_missing", "refusals": 3}, {"rule": "partition_account", "refusals": 2},
                              {"rule": "partition_max_gpus", "refusals": 2}]
    assert {r["partition"]: r["refusals"] for r in ref["by_partition"]} == {"a100": 4, "gpu": 3}
    assert ref["ignored_log_lines"] > 0


def test_pending_reason_wait(econ):
    waits = {w["pending_reason"]: w for w in econ["pending_reason_wait"]}
    assert waits["quota"]["jobs"] == 1 and waits["quota"]["wait_s_total"] == 91  # job 5: AssocGrpGRES
    assert waits["none (not kept)"]["jobs"] == 7 and waits["none (not kept)"]["wait_s_total"] == 61  # job 3
    assert any("only" in n or "one Reason" in n for n in econ["notes"])


def test_missing_events_mark_capacity_unknown():
    econ = _build(events_path=None, nodes_path=None, reasons_path=None).data["economics"]
    assert econ["capacity"] == "unknown"
    for row in (*econ["by_partition"], econ["total"]):
        assert row["capacity_gpu_hours"] is None
        assert row["terms"]["idle"]["gpu_hours"] is None and row["terms"]["idle"]["cost"] is None
        assert row["terms"]["unavailable"]["gpu_hours"] is None
        assert row["total_cost"] is None and row["completed_run_share_of_capacity"] is None
    assert econ["total"]["terms"]["completed_run"]["gpu_hours"] == pytest.approx(683 * H, abs=1e-6)


def test_outputs(tmp_path):
    report = _build()
    written = write_report(report, tmp_path, ("html", "csv", "json", "prom"))
    names = {p.name for p in written}
    assert {"economics_terms.csv", "economics_baselines.csv", "refusals_by_rule.csv",
            "wait_by_pending_reason.csv"} <= names
    html = (tmp_path / "report.html").read_text()
    assert "Unit economics" in html
    assert "aria-label='Capacity GPU-hours by use, per partition'" in html and "aria-label='Cost by term" in html
    import re
    from xml.etree import ElementTree

    for chart in re.findall(r"<svg .*?</svg>", html, flags=re.S):
        ElementTree.fromstring(chart)  # well-formed standalone XML, like the report's other charts
    prom = (tmp_path / "gpuclust.prom").read_text()
    # the report's Prometheus conventions (issue 15): GPU time in seconds (0.37 GPU-h), one family per dimension
    assert 'gpuclust_report_partition_economics_gpu_seconds{cluster="econ",partition="a100",term="unavailable"} 1332.0' in prom
    assert 'gpuclust_report_policy_refusals_by_rule{cluster="econ",rule="account_missing"} 3.0' in prom
    data = json.loads((tmp_path / "report.json").read_text())
    assert "economics.idle_gpu_hours" in data["definitions"]


def test_node_loss_what_if_uses_the_measured_restore_time():
    from gpuclust.accounting.history.sources import measured_restore_seconds

    lab_results = DATA.parent / "accept" / "lab_results"  # a real acceptance storage job on the lab, partition gpu
    measured = measured_restore_seconds(str(lab_results))
    assert measured["gpu"] == pytest.approx(0.01773869800013017)
    text = (DATA / "site.conf").read_text().replace("state_dir = /var/lib/gpuclust-lab/econ-site",
                                                    f"state_dir = /var/lib/gpuclust-lab/econ-site\nresults_dir = {lab_results}")
    econ = _build(parse_config(text, "site.conf")).data["economics"]
    what_if = {w["partition"]: w for w in econ["sizing"]["node_loss_what_if"]}
    gpu = what_if["gpu"]
    assert gpu["restore_source"].startswith("measured") and gpu["restore_seconds"] == pytest.approx(measured["gpu"])
    # gpu: attempts 4, 5, 6 = 470 GPU-s over 3 attempts, 7 GPUs over 3 attempts
    assert gpu["mean_attempt_gpu_hours"] == pytest.approx(470 * H / 3, abs=1e-6)
    assert gpu["gpu_hours_lost_per_node_loss"] == pytest.approx(470 * H / 3 / 2 + measured["gpu"] / 3600 * 7 / 3,
                                                                 abs=1e-6)
    assert what_if["a100"]["restore_source"] is None  # nothing measured, nothing expected
    sizing = econ["sizing"]
    assert sizing["accepted_units_per_capacity_gpu_month"] == pytest.approx(6 / (4.0 / 730), rel=1e-6)


def test_slurm_24_11_recordings_parse():
    """24.11 (lab, Debian 13 root): the same event, node and reason shapes; its cluster TRES adds gres/gpumem and
    gres/gpuutil, which are no GPUs."""
    from gpuclust.accounting.figures.economics import pending_class
    from gpuclust.accounting.history import events, refusals

    d = DATA / "24.11"
    ev = events.parse_events((d / "events.txt").read_text(), "events.txt")
    assert not ev.problems and ev.cluster[0].gpus == 16 and ev.cluster[0].gpu_types == {"h100": 16}
    (drain,) = ev.nodes
    assert (drain.node, drain.state, drain.user, drain.gpus, drain.reason) == ("node4", "DRAIN", "root(0)", 4,
                                                                               "econ14 test drain")
    assert drain.end is not None and drain.end - drain.start == 20
    nodes = events.parse_nodes((d / "nodes.txt").read_text())
    assert [(n.name, n.gpus, n.partitions) for n in nodes][0] == ("node1", 4, ("gpu", "debug"))
    reasons = events.parse_reasons((d / "reasons.txt").read_text())
    assert sorted(pending_class(r) for r in reasons.values()) == ["none (not kept)", "none (not kept)", "quota"]
    lines = (d / "slurmctld-reject-lines.log").read_text().splitlines()
    parsed = [refusals.parse_line(line, ZoneInfo("UTC")) for line in lines]
    assert [(r.rule, r.gpus) for r in parsed if r] == [("account_missing", 1), ("partition_max_gpus", 3),
                                                       ("partition_max_gpus", 5)]


def test_registered_capacity_cross_check(econ):
    # 'Cluster Registered TRES' gres/gpu=12 from 09:03:58 (16 before the lab's reconfiguration at 09:03:58)
    assert econ["registered_capacity_gpu_hours"] == pytest.approx((238 * 16 + (1200 - 238) * 12) / 3600, abs=1e-6)


def test_sreport_cross_check_over_the_rolled_up_hour():
    """09:00-10:00, after slurmdbd's rollup: sreport -t minutes said Allocated 13, Down 24, Idle 699, Reported 736
    GPU-minutes. The hour also holds the integration test's three 20 s drains of node4 and its jobs."""
    period = Period(datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc), datetime(2026, 12, 3, 10, 0, tzinfo=timezone.utc))
    report, _ = pipeline.build(load_config(str(DATA / "site.conf")), period,
                               input_path=str(DATA / "sacct-0900-1000.txt"),
                               events_path=str(DATA / "events-0900-1000.txt"), nodes_path=str(DATA / "nodes.txt"),
                               sreport_path=str(DATA / "sreport-0900-1000.txt"))
    econ = report.data["economics"]
    cross = econ["sreport_cross_check"]
    assert cross["same_window"] and cross["sreport_gpu_hours"]["down"] == pytest.approx(24 / 60)
    ours = cross["gpuclust_gpu_hours"]
    # node4 600 s + 3 x 20 s, node3 66 s, 2 GPUs each
    assert ours["unavailable"] == pytest.approx(2 * (600 + 60 + 66) / 3600, abs=1e-6)
    assert abs(ours["unavailable"] - cross["sreport_gpu_hours"]["down"]) <= 1 / 60  # sreport: whole minutes
    assert abs(ours["allocated"] - cross["sreport_gpu_hours"]["allocated"]) <= 1 / 60
    # sreport's Reported is the registered GPUs (16 until the lab's reconfiguration at 09:03:58, then 12)
    assert econ["registered_capacity_gpu_hours"] == pytest.approx((238 * 16 + 3362 * 12) / 3600, abs=1e-6)
    assert abs(econ["registered_capacity_gpu_hours"] - cross["sreport_gpu_hours"]["reported"]) <= 1 / 60
    assert ours["capacity"] == pytest.approx(12.0)


def test_unreadable_event_rows_are_said(tmp_path):
    """A node event row that cannot be read is left out and said in the economics notes, with its file:line."""
    events = tmp_path / "events.txt"
    events.write_text((DATA / "events.txt").read_text() + "node9|only two\n")
    notes = _build(events_path=str(events)).data["economics"]["notes"]
    said = [n for n in notes if "node event row(s) could not be read" in n]
    assert len(said) == 1 and f"{events}:" in said[0] and "sacctmgr show event -P" in said[0]
    assert not any("could not be read" in n for n in _build().data["economics"]["notes"])


def test_a_build_without_site_config_never_reads_the_current_directory_as_results(tmp_path, monkeypatch):
    """Without a site config results_dir is unset (""), which is no results directory: a build run from inside a
    directory of real acceptance results (the lab's storage job, which measured a restore time on partition gpu)
    must not take them as the site's measured restore times."""
    from click.testing import CliRunner

    from gpuclust.accounting.history.sources import measured_restore_seconds
    from gpuclust.cli.main import cli

    lab_results = DATA.parent / "accept" / "lab_results"
    monkeypatch.chdir(lab_results)
    monkeypatch.delenv("GPUCLUST_CONFIG", raising=False)
    monkeypatch.setattr("gpuclust.config.site.DEFAULT_CONFIG_PATH", str(tmp_path / "none" / "site.conf"))
    assert measured_restore_seconds("") == {} and measured_restore_seconds(".")  # (".": asked for by name)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["report", "build", "--input", str(DATA / "sacct.txt"), "--format", "json",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "no site config" in result.output
    what_if = json.loads((out / "report.json").read_text())["economics"]["sizing"]["node_loss_what_if"]
    assert what_if and all(w["restore_source"] is None and w["restore_seconds"] is None for w in what_if)
