"""gpuclust.prom: written by prometheus_client, read back by its parser and (where installed) promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures.metrics import deprecated
from gpuclust.accounting.output import prom
from gpuclust.cli.main import cli
from gpuclust.config import load_config

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
README = Path(__file__).resolve().parents[2] / "README.md"


def _conf(tmp_path: Path, extra: str = "") -> Path:
    conf = tmp_path / "site.conf"
    text = (DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "state"))
    if extra:  # a [costs] key (the currency of every price and cost)
        text += f"\n[costs]\n{extra}\n"
    conf.write_text(text)
    return conf


def _prom(tmp_path: Path, extra: str = "") -> str:
    out = tmp_path / "out"
    args = ["--config", str(_conf(tmp_path, extra)), "report", "build", "--input", str(DATA / "lab-parsable.txt"),
            "--delimiter", "\\x1f|\\x1e", "--since", "2026-12-02", "--until", "2026-12-03", "--out", str(out),
            "--format", "prom"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == ["gpuclust.prom"]  # no temporary file left beside it
    return (out / "gpuclust.prom").read_text()


def test_every_family_once_with_a_known_type_and_a_cluster_label(tmp_path):
    text = _prom(tmp_path, "currency = EUR")
    families = list(text_string_to_metric_families(text))
    names = Counter(f.name for f in families)
    assert [n for n, c in names.items() if c > 1] == []
    assert len(families) >= 40
    for family in families:
        assert family.type == "gauge", (family.name, family.type)  # (the info metric reads back as a gauge)
        assert not family.name.endswith("_total")  # a period's figures are gauges, not counters
        assert family.samples, family.name
        for sample in family.samples:
            assert sample.labels.get("cluster") == "acct", sample
            assert "quantile" not in sample.labels
    by_name = {f.name: f for f in families}
    # One family per dimension: summing one family never counts a run twice.
    total = by_name["gpuclust_report_runs"].samples[0].value
    assert total == 12
    for dim in ("partition", "account"):
        family = by_name[f"gpuclust_report_{dim}_runs"]
        assert all(set(s.labels) == {"cluster", dim} for s in family.samples)
        assert sum(s.value for s in family.samples) == total
    # Money carries its currency; so does the info metric.
    for name in ("gpuclust_report_cost", "gpuclust_report_account_cost", "gpuclust_report_cost_per_completed_run"):
        assert {s.labels["currency"] for s in by_name[name].samples} == {"EUR"}, name
    info = by_name["gpuclust_report_info"]
    assert info.samples[0].labels == {"cluster": "acct", "currency": "EUR"} and info.samples[0].value == 1
    assert by_name["gpuclust_report_gpu_seconds"].samples[0].value == pytest.approx(0.0125 * 3600)
    waits = by_name["gpuclust_report_partition_queue_wait_p90_seconds"]
    assert {s.labels["partition"] for s in waits.samples} == {"debug", "gpu"}
    start = by_name["gpuclust_report_period_start_timestamp_seconds"].samples[0].value
    end = by_name["gpuclust_report_period_end_timestamp_seconds"].samples[0].value
    assert end - start == 86400


def test_unit_suffixes():
    for suffix in ("_seconds", "_gpu_seconds", "_ratio"):
        assert any(name.endswith(suffix) for name in _documented_metrics()), suffix


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian: prometheus)")
def test_promtool_check_metrics_is_clean(tmp_path):
    text = _prom(tmp_path, "currency = EUR")
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), \
        result.stdout + result.stderr


def _documented_metrics() -> set[str]:
    """The metric names in the README's Prometheus table (first column, in backticks)."""
    section = README.read_text().split("## Prometheus metrics", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(gpuclust_report_\w+)`", section, flags=re.M))


def test_every_metric_is_documented_in_the_readme(tmp_path):
    text = _prom(tmp_path)
    written = {f.name for f in text_string_to_metric_families(text)}
    documented = _documented_metrics()
    # cost_per_completed_run and the like may be absent from one report; none may be undocumented.
    assert written - documented == set(), f"README's Prometheus table lacks {sorted(written - documented)}"
    every = {prom.PREFIX + name for name in _all_core_names()} | _economics_names() | _gpu_use_names()
    every |= _lemon_names()
    every |= {prom.PREFIX + old for old in deprecated.PROM}  # renamed families' old names, for one release
    assert every == documented, (f"README's Prometheus table (## Prometheus metrics): add rows for "
                                 f"{sorted(every - documented)}, remove {sorted(documented - every)}")


def _lemon_names() -> set[str]:
    """The lemon nodes' families (issue 46), every one of them (figures.catalog's lemon places)."""
    from gpuclust.accounting.figures import catalog

    places = (catalog.LEMON, catalog.LEMON_FLEET, catalog.LEMON_SIZES)
    return {prom.PREFIX + name for f in catalog.figures(*places) for name in catalog.prom_families(f)}


def _gpu_use_names() -> set[str]:
    """The families of the GPU-use contributor (issue 26), for a report with use figures."""
    from gpuclust.accounting.output.gpuuse_render import prom_families
    from tests.unit.test_economics_lab import _build

    report = _build()
    report.data["gpu_use"] = {"by_partition": [], "by_account": []}
    return {family.name for family in prom_families(prom.context_of(report))}


def _economics_names() -> set[str]:
    """The families the unit-economics contributor writes for a report with every part known (the recorded
    economics lab scenario: capacity, baselines, refusals)."""
    import tempfile

    from gpuclust.accounting.output.economics_render import economics_families
    from tests.unit.test_economics_lab import FILES, _build

    names = {family.name for family in economics_families(prom.context_of(_build()))}
    # and the would-be refusals of rules in warn mode (issue 47): the recorded log with a gpuclust-policy-warn line
    text = Path(FILES["log_path"]).read_text()
    line = next(x for x in text.splitlines() if "gpuclust-policy-reject" in x)
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "slurmctld.log"
        log.write_text(text + line.replace("gpuclust-policy-reject", "gpuclust-policy-warn") + "\n")
        report = _build(log_path=str(log))
    assert report.data["economics"]["refusals"]["would_refuse"]["total"] == 1
    return names | {family.name for family in economics_families(prom.context_of(report))}


def _all_core_names() -> set[str]:
    names = {"info", "period_start_timestamp_seconds", "period_end_timestamp_seconds", "generated_timestamp_seconds",
             "input_rejected_rows", "input_left_out_rows"}
    for f in prom.RUN_FIGURES:
        names.add(str(f.prom))
        names.update(f"{dim}_{f.prom}" for dim in prom.RUN_DIMENSIONS)
    for dim in prom.WAIT_DIMENSIONS:
        names.add(f"{dim}_queue_wait_attempts")
        names.update(f"{dim}_queue_wait_{stat}_seconds" for stat in ("median", "p90", "max"))
    names.update(str(f.prom) for f in prom.SIZING_FIGURES)
    return names


def test_another_module_contributes_families(tmp_path):
    config = load_config(str(_conf(tmp_path, "currency = CHF")))
    report, _ = pipeline.build(config, None, input_path=str(DATA / "lab-parsable.txt"), delimiter="\x1f|\x1e")

    def economics(ctx: prom.PromContext) -> list[GaugeMetricFamily]:
        family = ctx.gauge("baseline_cost_ratio", "Cost / baseline cost", ["baseline"])
        ctx.add(family, 0.75, "cloud")
        ctx.add(family, None, "skipped")
        return [family]

    text = prom.render(report, [economics])
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert [(s.labels, s.value) for s in fams["gpuclust_report_baseline_cost_ratio"].samples] == \
        [({"cluster": "acct", "baseline": "cloud"}, 0.75)]
    assert "gpuclust_report_runs" in fams

    def clash(ctx: prom.PromContext) -> list[GaugeMetricFamily]:
        return [ctx.gauge("runs", "again")]

    with pytest.raises(ValueError, match="gpuclust_report_runs"):
        prom.render(report, [clash])
