"""The findings model every plane shares, and the Nagios status line with performance data."""

from __future__ import annotations

import re
from datetime import timedelta

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.audit.findings import AuditReport, PartitionFigures, read_audit_document
from gpuclust.audit.render import render_reports
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Finding, Perf, status_line

# Nagios plugin guidelines: 'label'=value[UOM];[warn];[crit];[min];[max]
PERF_ITEM = re.compile(r"^('[^']+'|[^' =]+)=-?[0-9.]+[a-zA-Z%]*(;[^; ]*){0,4}$")


def perf_items(line: str) -> dict[str, str]:
    text, sep, perf = line.partition(" | ")
    assert sep and "|" not in text
    items = perf.split(" ")
    assert all(PERF_ITEM.match(item) for item in items), items
    return {item.split("=", 1)[0]: item.split("=", 1)[1] for item in items}


def test_perf_format() -> None:
    assert str(Perf("gpus", 16, min=0)) == "gpus=16;;;0"
    assert str(Perf("drained", 1)) == "drained=1"
    assert str(Perf("used", 2, min=0, max=14)) == "used=2;;;0;14"
    assert str(Perf("busbw", 0.41234567, "GB", warn="0.3:", min=0)) == "busbw=0.412346GB;0.3:;;0"
    assert str(Perf("my gpus", 3)) == "'my gpus'=3"
    assert status_line("x", Nagios.OK, "a | b", [Perf("n", 1)]) == "x: OK - a / b | n=1"
    assert status_line("x", Nagios.WARNING, "text") == "x: WARNING - text"


def test_finding_is_one_model() -> None:
    f = Finding.make("drift", Nagios.WARNING, "torch differs", ["node10", "node2", "node2"], job_id="7",
                     kind="allreduce", field="torch")
    assert f.node_list == ("node2", "node10") and f.nodes == "node[2,10]" and f.node is None
    assert f.status == f.severity == Nagios.WARNING
    assert Finding.from_dict(f.as_dict()) == f
    assert Finding.make("gate", Nagios.OK, "x", ["n1"]).node == "n1"


def test_audit_status_line_carries_perfdata() -> None:
    report = AuditReport("gpu", [Finding.make("node.drain", Nagios.WARNING, "drained", ["node2"])],
                         figures=PartitionFigures(nodes=4, gpus=16, gpus_used=3, down=0, drained=1))
    first = render_reports([report]).splitlines()[0]
    # the first line says why: the first finding at the status's level (issue 28 item 12)
    assert first.startswith("partition gpu: WARNING - [node.drain] node2: drained; 1 warning | ")
    perf = perf_items(first)
    assert perf["gpus"] == "16;;;0" and perf["drained"] == "1;;;0;4" and perf["warning"] == "1;;;0"
    # several partitions: one overall first line holds all the data; later lines hold no '|'
    other = AuditReport("debug", [], figures=PartitionFigures(nodes=1, gpus=0))
    lines = render_reports([report, other]).splitlines()
    assert lines[0].startswith("audit: WARNING - gpu WARNING, debug OK; gpu: [node.drain] node2: drained | ")
    assert perf_items(lines[0])["debug_nodes"] == "1;;;0"
    assert not any("|" in line for line in lines[1:])


def test_audit_json_round_trip_and_old_output() -> None:
    report = AuditReport("gpu", [Finding.make("node.drain", Nagios.WARNING, "drained", ["node2"])],
                         {"node2": {"gres": "gpu:h100:4", "state": "IDLE+DRAIN"}}, "lab", "2026-12-03T00:00:00+00:00",
                         PartitionFigures(nodes=1, gpus=4, drained=1))
    (back,) = read_audit_document(report.as_dict())
    assert back == report
    old = {"partition": "gpu", "nodes": {"node1": {"gres": "gpu:h100:4"}}, "findings": []}  # before the tag
    assert read_audit_document({"status": "OK", "partitions": [old]})[0].nodes == old["nodes"]
    try:
        read_audit_document({**old, "schema": "gpuclust.audit/2"})
    except ValueError as exc:
        assert "gpuclust.audit/2" in str(exc)
    else:
        raise AssertionError("a future schema version was read")


def test_accept_status_line_carries_perfdata() -> None:
    from tests.unit.test_accept_report import CONFIG, NODES, T0, allreduce, rank, scan_of

    old = allreduce("1", 0.4, T0)
    ranks = tuple(rank("2", "allreduce", i, n, versions=R.Versions(torch="2.14.0" if n == "node4" else "2.13.0+cpu"))
                  for i, n in enumerate(NODES))
    report = rep.evaluate(scan_of(old, allreduce("2", 0.4, T0 + timedelta(days=1), ranks=ranks)), CONFIG)
    first = rep.render_table(report).splitlines()[0]
    assert first.startswith("acceptance: WARNING - node4: [drift] torch changed on node4: 2.13.0+cpu -> 2.14.0 "
                            "(since job 1); 1 job(s), 4 node(s): 1 warning | ")
    assert perf_items(first) == {"jobs": "1;;;0", "nodes": "4;;;0", "nodes_critical": "0;;;0;4",
                                 "nodes_warning": "1;;;0;4", "unknown": "0;;;0", "problems": "0;;;0"}
    assert report.as_dict()["figures"]["nodes_warning"] == 1


def test_accept_drift_tie_is_a_run_level_warning() -> None:
    from tests.unit.test_accept_report import CONFIG, NODES, allreduce, rank, scan_of

    ranks = tuple(rank("3", "allreduce", i, n, versions=R.Versions(torch="2.14.0" if i % 2 else "2.13.0"))
                  for i, n in enumerate(NODES))
    report = rep.evaluate(scan_of(allreduce("3", 0.4, ranks=ranks)), CONFIG)
    assert rep.nodes_with(report, "drift") == []
    assert any(f.check == "drift" and "no majority" in f.message for f in report.findings)
