"""`accept report --compare-container`: per node, containerised against bare-metal figures and versions; a gap
beyond container_tolerance is CRITICAL; a containerised result without a digest is left out with a note."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import container_compare as cc
from gpuclust.accept import results as R
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError
from gpuclust.exitcodes import Nagios
from tests.unit.test_accept_report import CONF, NODES, T0, allreduce, rank

DIGEST = "sha256:" + "ab" * 32
IMAGE = {"image": "/srv/prod-bundle", "runtime": "oci", "digest": DIGEST}
INSIDE = {"os": "Debian GNU/Linux 12 (bookworm)", "python": "3.11.2", "libc": "glibc 2.36", "root": "1:2"}
OUTSIDE = {"os": "Debian GNU/Linux 12 (bookworm)", "python": "3.11.7", "libc": "glibc 2.36", "root": "1:3"}


def run(job: str, busbw: float, container: dict[str, object] | None, minutes: int = 0) -> R.JobResult:
    seen = INSIDE if container else OUTSIDE
    ranks = tuple(rank(job, "allreduce", i, n, extra={"seen": seen}) for i, n in enumerate(NODES))
    res = allreduce(job, busbw, finished=T0 + timedelta(minutes=minutes), ranks=ranks)
    if container is not None:
        res = replace(res, job=replace(res.job, extra={"container": container}))
    return res


def scan(*results: R.JobResult) -> R.ResultScan:
    return R.ResultScan(list(results), [])


def config(tolerance: str | None = None):  # type: ignore[no-untyped-def]
    return parse_config(CONF + (f"container_tolerance = {tolerance}\n" if tolerance else ""), "t.conf")


def test_within_tolerance_ok_and_versions_shown() -> None:
    comp = cc.compare(scan(run("1", 0.60, None), run("2", 0.57, IMAGE, 5)), config())
    assert comp.status == Nagios.OK and [n.node for n in comp.nodes] == list(NODES)
    node = comp.nodes[0]
    [gap] = node.gaps
    assert (gap.metric, gap.bare, gap.container, gap.flagged) == ("allreduce_busbw_gbps", 0.60, 0.57, False)
    assert round(gap.gap, 3) == -0.05
    assert node.version_changes == {"python": ("3.11.7", "3.11.2")}
    assert node.container[0].container == IMAGE
    text = cc.render_table(comp)
    assert "container vs bare metal: OK" in text and "/srv/prod-bundle (oci, sha256:abababababab" in text
    assert "3.11.7" in text and "-5.0%" in text


def test_gap_beyond_tolerance_is_critical() -> None:
    comp = cc.compare(scan(run("1", 0.60, None), run("2", 0.40, IMAGE, 5)), config())
    assert comp.status == Nagios.CRITICAL and all(n.gaps[0].flagged for n in comp.nodes)
    # the partition's own tolerance decides
    assert cc.compare(scan(run("1", 0.60, None), run("2", 0.40, IMAGE, 5)), config("40%")).status == Nagios.OK
    # faster inside is never a gap
    assert cc.compare(scan(run("1", 0.60, None), run("2", 0.90, IMAGE, 5)), config()).status == Nagios.OK


def test_latest_of_each_side_counts() -> None:
    results = scan(run("1", 0.10, None), run("2", 0.60, None, 1), run("3", 0.58, IMAGE, 2), run("4", 0.2, IMAGE, -5))
    node = cc.compare(results, config()).nodes[0]
    assert (node.bare[0].job_id, node.container[0].job_id) == ("2", "3")
    assert cc.compare(results, config(), jobs=("1", "4")).status == Nagios.OK  # 0.2 inside vs 0.1 bare


def test_selected_jobs() -> None:
    results = scan(run("1", 0.10, None), run("4", 0.05, IMAGE, -5))
    assert cc.compare(results, config(), jobs=("1", "4")).status == Nagios.CRITICAL
    assert cc.compare(results, config(), jobs=("1",)).status == Nagios.UNKNOWN


def test_no_digest_is_left_out_with_a_note() -> None:
    nodigest = {"image": "/srv/prod-bundle", "runtime": "oci", "digest": None}
    comp = cc.compare(scan(run("1", 0.60, None), run("2", 0.10, nodigest, 5)), config())
    assert comp.status == Nagios.WARNING  # nothing left to compare (UNKNOWN) ranks below the left-out WARNING
    assert any("allreduce-2" in n and "without an image digest" in n for n in comp.notes)
    assert any("no node has both" in n for n in comp.notes)
    comp = cc.compare(scan(run("1", 0.60, None), run("2", 0.10, nodigest, 5), run("3", 0.59, IMAGE, 6)), config())
    assert comp.status == Nagios.WARNING and comp.nodes[0].container[0].job_id == "3"


def test_nothing_to_compare_is_unknown() -> None:
    comp = cc.compare(scan(run("1", 0.60, None)), config())
    assert comp.status == Nagios.UNKNOWN and "bare only" in cc.render_table(comp)
    assert cc.compare(scan(), config()).status == Nagios.UNKNOWN


def test_tolerance_key_validated() -> None:
    assert config("25%").partitions["gpu"].container_tolerance == 0.25
    assert config().partitions["gpu"].container_tolerance == 0.10
    with pytest.raises(ConfigError, match="container_tolerance"):
        config("150%")


def test_cli_compare_container(tmp_path: Path) -> None:
    results = tmp_path / "results"
    R.write_result(results, run("1", 0.60, None))
    R.write_result(results, run("2", 0.40, IMAGE, 5))
    conf = tmp_path / "site.conf"
    conf.write_text(CONF.replace("/nonexistent", str(results)))
    out = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--compare-container", "--json"])
    assert out.exit_code == 2, out.output
    doc = json.loads(out.output)
    assert doc["status"] == "CRITICAL" and doc["nodes"][0]["gaps"][0]["flagged"] is True
    assert doc["nodes"][0]["container"][0]["container"]["digest"] == DIGEST
