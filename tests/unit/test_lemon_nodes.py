"""Lemon nodes from production (issue 46 item 3; gpuclust.accounting.figures.lemon): a generated dump where one
node fails far more jobs than its peers (named, with its p-value), a node with many more jobs at the same rate
(never named), one user's failing array on a node in one hour (not node-level: the rule), shared non-zero exits of
two users (node-level, once per hour), and the report's outputs (report.json, CSV, HTML, Prometheus)."""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpuclust.accounting.figures import lemon
from gpuclust.cli.main import cli

HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "AllocTRES|NNodes|NodeList|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot|TRESUsageOutTot|ConsumedEnergyRaw")
T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
HOURS = 7 * 24
PEERS = [f"n0{i}" for i in range(2, 8)]  # n02..n07
LEMON_FAIL_HOURS = 10


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def _dump(path: Path) -> Path:
    """A week on partition gpu: n01 (the lemon) and n02..n07 run one 4-GPU hour-long job every other hour (84
    jobs, 336 GPU-hours each); n08 runs four 1-GPU jobs every hour but the
    last (668 jobs, 668 GPU-hours). NODE_FAIL hours:
    n01 10, each peer 1, n08 2 (the peers' rate). On n03, user eve's 4-task array fails in one odd hour (6 min
    each, 1 GPU: 0.4 GPU-hours)."""
    lines = [HEADER]
    job = 1000

    def add(user: str, node: str, start: datetime, minutes: int, gpus: int, state: str = "COMPLETED",
            code: str = "0:0", job_id: str | None = None) -> None:
        nonlocal job
        job += 1
        end = start + timedelta(minutes=minutes)
        lines.append(f"{job_id or job}|{job}|train|{user}|ml|gpu|normal|{state}|{code}|{_stamp(start)}|"
                     f"{_stamp(start)}|{_stamp(start)}|{_stamp(end)}|{minutes // 60:02d}:{minutes % 60:02d}:00|"
                     f"billing=8,cpu=8,gres/gpu={gpus},mem=64G,node=1|1|{node}|||||")

    fails = {"n01": set(range(0, 2 * LEMON_FAIL_HOURS, 2)), **{n: {10 + 2 * i} for i, n in enumerate(PEERS)},
             "n08": {50, 51}}
    for node in ["n01", *PEERS]:
        for h in range(0, HOURS, 2):
            state = "NODE_FAIL" if h in fails[node] else "COMPLETED"
            add(f"u{h % 5}", node, T0 + timedelta(hours=h), 60, 4, state)
    for h in range(HOURS - 1):  # (a job of the last hour would end at the period's end: outside it)
        for k in range(4):
            add(f"u{k}", "n08", T0 + timedelta(hours=h), 60, 1, "NODE_FAIL" if h in fails["n08"] else "COMPLETED")
    for task in range(4):  # eve's failing array on n03, hour 31 (n03 idle then)
        add("eve", "n03", T0 + timedelta(hours=31, minutes=10 * task), 6, 1, "FAILED", "1:0", job_id=f"900_{task}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _poisson_tail(k: int, mu: float) -> float:
    return 1.0 - sum(math.exp(-mu) * mu ** i / math.factorial(i) for i in range(k))


def test_the_lemon_is_named_and_the_loaded_node_is_not(tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\nstate_dir = {tmp_path / 'state'}\nresults_dir = {tmp_path / 'results'}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(_dump(tmp_path / "d")),
                                      "--since", "2026-12-01", "--until", "2026-12-08", "--out", str(out),
                                      "--format", "json,csv,html,prom"])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "report.json").read_text())["lemon_nodes"]
    nodes = {r["node"]: r for r in doc["nodes"]}
    # by hand: 18 failure hours over 7 x 336 + 668 + 0.4 GPU-hours
    total_h = 7 * 336 + 668 + 0.4
    pooled = 18 / total_h
    assert nodes["n01"]["failures"] == 10 and nodes["n01"]["node_fail"] == 10
    assert math.isclose(nodes["n01"]["gpu_hours"], 336.0)
    assert math.isclose(nodes["n01"]["partition_failures_per_gpu_hour"], pooled)
    assert math.isclose(nodes["n01"]["expected_failures"], 336 * pooled)
    p = _poisson_tail(10, 336 * pooled)
    assert math.isclose(nodes["n01"]["p_value"], p, rel_tol=1e-9)
    assert math.isclose(nodes["n01"]["p_adjusted"], 8 * p, rel_tol=1e-9)  # Holm: the smallest of 8, x 8
    assert doc["suspects"] == ["n01"] and nodes["n01"]["rank"] == 1
    assert "n01" in doc["findings"][0] and "one-sided Poisson" in doc["findings"][0]
    assert f"{8 * p:.3g}" in doc["findings"][0]
    # n08: about 8x the jobs of a peer, twice the GPU-hours, the same rate: never named
    assert nodes["n08"]["jobs"] == 4 * (HOURS - 1) and nodes["n08"]["failures"] == 2 and not nodes["n08"]["suspect"]
    assert math.isclose(nodes["n08"]["p_value"], _poisson_tail(2, 668 * pooled), rel_tol=1e-9)
    # eve's array: one user, so no node-level failure on n03 (its NODE_FAIL hour only)
    assert nodes["n03"]["failures"] == 1 and nodes["n03"]["shared_exit"] == 0 and nodes["n03"]["jobs"] == 84 + 4
    # MTTF by size: the 1-GPU jobs (n08's and eve's) and the 4-GPU jobs (bucket 2-8)
    sizes = {r["job_size"]: r for r in doc["by_job_size"]}
    assert sizes["1"]["jobs"] == 668 + 4 and sizes["1"]["failed_jobs"] == 8  # n08's 2 hours x 4 jobs
    assert math.isclose(sizes["1"]["mttf_hours"], (668 + 0.4) / 8)
    assert sizes["2-8"]["failed_jobs"] == 16 and math.isclose(sizes["2-8"]["mttf_hours"], 7 * 84 / 16)
    fleet = doc["fleet"]
    assert fleet["restore_seconds"] == lemon.DEFAULT_RESTORE_S
    assert math.isclose(fleet["ettr"], 1 - (600 + 1800) / (fleet["mttf_hours"] * 3600))
    assert doc["reaccept"]["suspects"] == ["gpuclust accept submit allreduce --partition gpu --nodes 1 --nodelist n01"]
    assert doc["reaccept"]["sweep"] is None  # no acceptance results read
    with (out / "lemon_nodes.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["node"] == "n01" and rows[0]["suspect"] in ("True", "true", "1")
    page = (out / "report.html").read_text()
    assert "id='lemon-nodes'" in page and "--nodelist n01" in page
    fams = {f.name: f for f in text_string_to_metric_families((out / "gpuclust.prom").read_text())}
    suspect = {s.labels["node"]: s.value for s in fams["gpuclust_report_node_lemon_suspect"].samples}
    assert suspect["n01"] == 1 and suspect["n08"] == 0
    assert "gpuclust_report_job_size_lemon_mttf_seconds" in fams and "gpuclust_report_lemon_ettr_ratio" in fams


def _job(job_id: str, user: str, node: str, hour: int, state: str = "FAILED", gpus: int = 1) -> lemon.JobRow:
    return lemon.JobRow(job_id, user, "gpu", (node,), state, state == "FAILED", gpus, 600.0, hour * 3600.0 + 1800)


def test_shared_exits_of_two_users_count_once_and_one_users_array_not_at_all() -> None:
    jobs = [_job(f"a_{i}", "eve", "x", 5) for i in range(6)]  # eve's array: her bug
    jobs += [_job("b1", "ann", "y", 5), _job("b2", "bob", "y", 5), _job("b3", "cid", "y", 5)]  # node-level
    jobs += [_job("c1", "ann", "z", 5), _job("c2", "bob", "z", 5, "COMPLETED")]  # one fails: no shared exit
    jobs += [_job("d1", "ann", "y", 7, "NODE_FAIL")]
    doc = lemon.compute(jobs)
    nodes = {r["node"]: r for r in doc["nodes"]}
    assert (nodes["x"]["failures"], nodes["y"]["failures"], nodes["z"]["failures"]) == (0, 2, 0)
    assert (nodes["y"]["shared_exit"], nodes["y"]["node_fail"]) == (1, 1)
    assert doc["by_job_size"][0]["failed_jobs"] == 4  # y's three failed jobs and its NODE_FAIL


def test_telemetry_xid_and_ecc_count_as_failure_hours() -> None:
    jobs = [_job("1", "ann", "x", 3, "COMPLETED"), _job("2", "ann", "x", 4, "COMPLETED")]
    doc = lemon.compute(jobs, gpu_events={"1": [lemon.GpuEvents("x", xid_errors=1)],
                                          "2": [lemon.GpuEvents("x", ecc_dbe=2)]})
    row = doc["nodes"][0]
    assert (row["xid"], row["ecc"], row["failures"]) == (1, 1, 2)


def test_poisson_and_holm() -> None:
    assert math.isclose(lemon.poisson_sf(3, 1.5), _poisson_tail(3, 1.5))
    assert math.isclose(lemon.poisson_sf(40, 2.0), sum(math.exp(-2) * 2.0 ** i / math.factorial(i)
                                                       for i in range(40, 100)), rel_tol=1e-9)
    assert lemon.poisson_sf(0, 3.0) == 1.0 and lemon.poisson_sf(2, 0.0) == 0.0
    assert lemon.holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]


def test_stale_acceptance_sweep() -> None:
    section = lemon.compute([_job("1", "ann", "x", 3, "COMPLETED"), _job("2", "ann", "y", 3, "COMPLETED")])
    now = datetime(2026, 12, 10, tzinfo=timezone.utc)
    lines = lemon.reaccept_lines(section, {"x": now - timedelta(days=1), "y": now - timedelta(days=30)}, now, 7)
    assert lines["stale"] == ["y"]
    assert lines["sweep"] == ["gpuclust accept submit allreduce --partition gpu --nodes 1 --nodelist y"]


def test_the_printed_line_submits_on_the_named_nodes(tmp_path: Path) -> None:
    import pytest

    from gpuclust.accept import submit as S
    from gpuclust.config import parse_config
    from gpuclust.errors import UnsafeValueError

    cfg = parse_config(f"[site]\ncluster_name = lab\nresults_dir = {tmp_path}/results\n[partition gpu]\n"
                       "gpus_per_node = 4\n")
    assert "--nodelist=n[01-02],n08" in S.build("allreduce", cfg, "gpu", 3, nodelist="n[01-02],n08").args
    with pytest.raises(UnsafeValueError):
        S.build("allreduce", cfg, "gpu", 1, nodelist="n01;id")


def test_audit_partition_names_the_partition_s_lemons(tmp_path: Path) -> None:
    from gpuclust.audit.lemon import check_lemons
    from gpuclust.config import parse_config
    from gpuclust.exitcodes import Nagios

    jobs = [_job(f"{n}{h}", f"u{h % 3}", n, h, "NODE_FAIL" if (n == "bad" and h % 2) or (n != "bad" and h == 1)
                 else "COMPLETED", 4) for n in ("bad", "a", "b", "c", "d", "e") for h in range(24)]
    site = parse_config(f"[site]\ncluster_name = t\nstate_dir = {tmp_path}/state\n")
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    found = check_lemons(site, ["bad", "a", "b"], now, 3, source=lambda *_: lemon.compute(jobs))
    assert [(f.check, f.severity, f.nodes) for f in found] == [("lemon.nodes", Nagios.WARNING, "bad")]
    assert "p = " in found[0].message and "one-sided Poisson" in found[0].message
    assert check_lemons(site, ["a", "b"], now, 3, source=lambda *_: lemon.compute(jobs))[0].severity == Nagios.OK
    # no store yet: not checked, never an alarm
    missing = check_lemons(site, ["a"], now, 3)
    assert missing[0].severity == Nagios.OK and "not checked" in missing[0].message


def test_the_report_joins_the_jobs_xid_from_the_real_prometheus(tmp_path: Path) -> None:
    """report build with [telemetry]: job 103 of the recorded-shape Prometheus data (tests/unit/
    test_telemetry_prometheus.py: Xid 79 at 90 min on n1/3) makes an xid failure hour on n1; job 101 (idle, no
    Xid) adds none on n1, and job 104's node n2 has none."""
    from tests.unit.test_telemetry_prometheus import lab_data, require_prometheus, running_prometheus

    require_prometheus()
    header = "JobID|JobIDRaw|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|NNodes|NodeList"
    rows = [
        "101|101|alice|ml|gpu|normal|COMPLETED|0:0|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T01:00:00|"
        "01:00:00|billing=1,cpu=1,gres/gpu=1,mem=1000M,node=1|1|n1",
        "103|103|bob|ml|gpu|normal|COMPLETED|0:0|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T02:00:00|"
        "02:00:00|billing=1,cpu=1,gres/gpu=1,mem=1000M,node=1|1|n1",
        "104|104|carol|ml|gpu|normal|COMPLETED|0:0|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:30:00|"
        "00:30:00|billing=1,cpu=1,gres/gpu=1,mem=1000M,node=1|1|n2",
    ]
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join([header, *rows]) + "\n")
    out = tmp_path / "out"
    with running_prometheus(lab_data(), tmp_path / "prometheus") as url:
        conf = tmp_path / "site.conf"
        conf.write_text(f"[site]\ncluster_name = t\ntimezone = UTC\nstate_dir = {tmp_path / 'state'}\n"
                        f"[telemetry]\nprometheus_url = {url}\nstep = 60\nchunk_hours = 1\n")
        built = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump),
                                         "--since", "2024-01-01T00:00:00", "--until", "2024-01-02T00:00:00",
                                         "--out", str(out), "--format", "json"])
    assert built.exit_code == 0, built.output
    section = json.loads((out / "report.json").read_text())["lemon_nodes"]
    assert section["telemetry_joined"] is True, section
    nodes = {n["node"]: n for n in section["nodes"]}
    assert nodes["n1"]["xid"] == 1 and nodes["n1"]["failures"] == 1, nodes["n1"]
    assert nodes["n2"]["xid"] == 0 and nodes["n2"]["failures"] == 0, nodes["n2"]
