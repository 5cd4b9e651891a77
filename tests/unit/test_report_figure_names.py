"""One name and one definition per figure in every output of the report (shared/gpu-hours-glossary.md).

Built on the recorded economics lab scenario (tests/data/economics: capacity, baselines and refusals known, so
the unit economics are on the page beside the runs): report.html, report.json, the CSVs, gpuclust.prom and
`report show` (text and JSON). "Useful" alone is no name and no output says "effective unit cost"; the only
old names left are the deprecated aliases (gpuclust.accounting.figures.metrics.deprecated), each holding exactly its new
name's value. The cost per completed run is one number in every output, and the unit economics' total cost per
accepted unit is another figure under another name.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpuclust.accounting.figures.metrics import deprecated
from gpuclust.accounting.output import prom
from gpuclust.accounting.output.render import number
from gpuclust.cli.main import cli

DATA = Path(__file__).resolve().parent.parent / "data" / "economics"
WINDOW = ("--since", "2026-12-03T09:00", "--until", "2026-12-03T09:20")
FILES = ("--events", str(DATA / "events.txt"), "--nodes", str(DATA / "nodes.txt"),
         "--reasons", str(DATA / "reasons.txt"), "--slurmctld-log", str(DATA / "slurmctld.log"))
USEFUL = re.compile(r"\buseful\b", re.I)  # (weigh_useful, the config key, is a word of its own)
EFFECTIVE = re.compile(r"effective[ _]unit[ _]cost", re.I)


def _conf(tmp: Path) -> Path:
    conf = tmp / "site.conf"
    text = (DATA / "site.conf").read_text().replace("/var/lib/gpuclust-lab/econ-site", str(tmp / "state"))
    conf.write_text(text + "\n[telemetry]\nweigh_useful = yes\n")  # the utilisation-weighted view too
    return conf


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("names")
    conf, out = _conf(tmp), tmp / "out"
    base = ["--config", str(conf), "report"]
    runner = CliRunner()
    built = runner.invoke(cli, [*base, "build", "--input", str(DATA / "sacct.txt"), *WINDOW, *FILES,
                                "--out", str(out), "--format", "html,csv,json,prom"])
    assert built.exit_code == 0, built.output
    show = [*base, "show", "--input", str(DATA / "sacct.txt"), *WINDOW]
    text = runner.invoke(cli, show)
    as_json = runner.invoke(cli, [*show, "--format", "json"])
    runs_jsonl = runner.invoke(cli, [*show, "--format", "jsonl", "--rows", "runs"])
    assert text.exit_code == 0 and as_json.exit_code == 0 and runs_jsonl.exit_code == 0, text.output
    csvs = {}
    for path in sorted(out.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            csvs[path.stem] = list(csv.DictReader(fh))
    return {
        "html": (out / "report.html").read_text(encoding="utf-8"),
        "json": json.loads((out / "report.json").read_text(encoding="utf-8")),
        "csv": csvs,
        "csv_headers": {path.stem: path.read_text(encoding="utf-8").splitlines()[0].split(",")
                        for path in sorted(out.glob("*.csv"))},
        "prom": (out / prom.FILENAME).read_text(encoding="utf-8"),
        "show_text": text.stdout,
        "show_json": json.loads(as_json.stdout),
        "show_jsonl": [json.loads(line) for line in runs_jsonl.stdout.splitlines()],
    }


def _keys(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, key) of every key in a JSON document."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}", key
            yield from _keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _keys(item, f"{path}[{i}]")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def _old(name: str) -> bool:
    return "useful" in name.lower() or "effective" in name.lower() or name in deprecated.NAMES


def test_the_page_has_no_useful_and_no_effective_unit_cost(outputs: dict[str, Any]) -> None:
    page = outputs["html"]
    assert not USEFUL.search(page), USEFUL.search(page)
    assert not EFFECTIVE.search(page)
    assert not [n for n in deprecated.NAMES if re.search(rf"\b{n}\b", page)]  # no alias shown either
    # the unit economics are on the page, under their own names
    for label in ("total cost per accepted unit", "completed-run share of capacity", "completed-run",
                  "break-even completed-run share of capacity", "Accepted units per capacity GPU-month"):
        assert label in page, label


def test_json_old_keys_are_only_deprecated_aliases(outputs: dict[str, Any]) -> None:
    doc = outputs["json"]
    old = [(path, key) for path, key in _keys(doc) if _old(key) and not path.startswith(".definitions")]
    assert old and {key for _, key in old} <= deprecated.NAMES, old
    assert "useful" not in doc["economics"]["total"]["terms"]  # (no alias there: the terms add up)
    for text in _strings(doc):  # definitions and notes included
        assert not USEFUL.search(text) and not EFFECTIVE.search(text), text
    t, s = doc["totals"], doc["sizing"]
    assert t["useful_gpu_hours"] == t["completed_run_gpu_hours"]
    assert s["useful_ratio"] == s["completed_run_share_of_allocated"]
    for row in doc["runs"]["by_account"] + doc["runs"]["by_partition"]:
        assert row["useful_gpu_hours"] == row["completed_run_gpu_hours"]
    for row in [*doc["economics"]["by_partition"], doc["economics"]["total"]]:
        assert row["effective_unit_cost"] == row["total_cost_per_accepted_unit"]
        assert row["useful_share"] == row["completed_run_share_of_capacity"]
        view = row["utilisation_weighted"]
        for old_key, new_key in deprecated.WEIGHTED_KEYS.items():
            assert view[old_key] == view[new_key]
    for row in doc["economics"]["baselines"]:
        for old_key, new_key in deprecated.BASELINE_KEYS.items():
            assert row[old_key] == row[new_key]
    sizing = doc["economics"]["sizing"]
    assert sizing["useful_work_per_gpu_month"] == sizing["accepted_units_per_capacity_gpu_month"]
    # every figure's definition is in `definitions` (the page's "Metric definitions"), once
    definitions = doc["definitions"]
    for key in ("completed_run_gpu_hours", "cost_per_completed_run", "economics.total_cost_per_accepted_unit",
                "economics.completed_run_share_of_capacity", "gpu_use.completed_run_busy_gpu_hours"):
        assert key in definitions, key
    assert not [k for k in definitions if _old(k.rsplit(".", 1)[-1])]


def test_csv_old_columns_are_only_deprecated_aliases(outputs: dict[str, Any]) -> None:
    for name, header in outputs["csv_headers"].items():
        old = [c for c in header if _old(c)]
        assert set(old) <= set(deprecated.columns_for(name)) | set(deprecated.SIZING_FROM_TOTALS), (name, old)
        for row in outputs["csv"][name]:
            for column in old:
                new = deprecated.columns_for(name).get(column)
                if new is not None:
                    assert row[column] == row[new], (name, column)
    assert "useful_gpu_hours" in outputs["csv_headers"]["runs_by_account"]  # the contract for one more release
    assert "completed_run_gpu_hours" in outputs["csv_headers"]["economics_terms"]


def test_prometheus_old_names_are_only_deprecated_aliases(outputs: dict[str, Any]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(outputs["prom"])}
    old = {n for n in families if _old(n.removeprefix(prom.PREFIX))}
    assert old and old <= {prom.PREFIX + o for o in deprecated.PROM}, old - {prom.PREFIX + o for o in deprecated.PROM}
    for name in old:
        new = families[prom.PREFIX + deprecated.PROM[name.removeprefix(prom.PREFIX)]]
        assert [(s.labels, s.value) for s in families[name].samples] == [(s.labels, s.value) for s in new.samples]
        assert families[name].documentation.startswith("Deprecated")
    for name, family in families.items():
        if name not in old:
            assert not USEFUL.search(family.documentation) and not EFFECTIVE.search(family.documentation), name
        for sample in family.samples:
            assert not any(USEFUL.search(v) for v in sample.labels.values()), sample  # term="useful" is gone


def test_report_show_says_completed_run_not_useful(outputs: dict[str, Any]) -> None:
    assert not USEFUL.search(outputs["show_text"]) and not EFFECTIVE.search(outputs["show_text"])
    summary = outputs["show_json"]
    assert {key for _, key in _keys(summary) if _old(key)} <= deprecated.NAMES
    assert all(c["name"] and not USEFUL.search(c["name"]) for c in summary["columns"])
    for group in summary["groups"] + outputs["show_jsonl"]:
        assert group["useful_gpu_hours"] == group["completed_run_gpu_hours"]


def test_cost_per_completed_run_is_one_number_everywhere(outputs: dict[str, Any]) -> None:
    doc = outputs["json"]
    value = doc["totals"]["cost_per_completed_run"]
    assert value is not None and value > 0
    # report.json: the totals' figure, which the deprecated sizing.effective_unit_cost repeats
    assert doc["sizing"]["effective_unit_cost"] == value
    assert "cost_per_completed_run" not in doc["sizing"]
    # the CSVs
    assert float(outputs["csv"]["totals"][0]["cost_per_completed_run"]) == value
    assert float(outputs["csv"]["sizing"][0]["effective_unit_cost"]) == value
    # gpuclust.prom: the family, and its deprecated old name
    families = {f.name: f for f in text_string_to_metric_families(outputs["prom"])}
    for name in ("gpuclust_report_cost_per_completed_run", "gpuclust_report_effective_unit_cost"):
        [sample] = families[name].samples
        assert sample.value == value and sample.labels["currency"] == "EUR", name
    # report.html: the summary band and the totals table show that number, and no other cost per completed run
    page = outputs["html"]
    band = re.search(r"data-figure='cost_per_completed_run'><div class='name'>([^<]*)</div><div class='v'>"
                     r"([^<]*)</div>", page)
    assert band and band.group(1) == "Cost per completed run (EUR)" and band.group(2) == number(value)
    row = re.search(r"<th scope='row'>Cost per completed run \(EUR\)</th><td class=n>([^<]*)</td>", page)
    assert row and row.group(1) == number(value)
    assert len(re.findall(r"<th scope='row'>Cost per completed run", page)) == 1  # not repeated in sizing
    # report show: the headline figure, on screen and in JSON
    [figure] = [f for f in outputs["show_json"]["headline"] if f["key"] == "totals.cost_per_completed_run"]
    assert figure["name"] == "cost per completed run" and figure["value"] == value
    assert re.search(rf"cost per completed run\s+{re.escape(f'{value:.3g}')} EUR", outputs["show_text"])
    # the unit economics' figure is another one (every cost term, per accepted unit), named so
    econ = doc["economics"]["total"]["total_cost_per_accepted_unit"]
    assert econ is not None and econ != value
