"""The catalogue of report figures (gpuclust.accounting.figures.catalog): each figure declared once, and every
output reading it.

Two reports are built with `report build` and `report show`: the recorded economics lab scenario (capacity,
baselines, refusals, the utilisation-weighted view and a sizing target: the unit economics' figures) and a
dump with usage TRES (gres/gpuutil: GPU use's busy, held-idle and coverage). Every figure with a Prometheus
family is written under that name, every old name is an alias of a live figure, every definition is in
report.json, every label is on the page, and no module but the catalogue spells a figure's label, Prometheus
name or HELP text.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.metrics import GROUP_COLUMNS, deprecated
from gpuclust.accounting.figures.metrics.runs import ATTEMPT_SUMS, finish_totals
from gpuclust.accounting.output import prom, render, reportdoc, show
from gpuclust.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
ECON = ROOT / "tests" / "data" / "economics"
ACCT = ROOT / "tests" / "data" / "accounting"

HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "AllocTRES|NNodes|NodeList|TRESUsageInAve|TRESUsageInMax|TRESUsageInTot|TRESUsageOutTot|ConsumedEnergyRaw")


def _usage_dump(path: Path) -> Path:
    """Six 4-GPU jobs of an hour with gres/gpuutil (one failed, one on another partition and account), one
    job without any usage TRES (unknown, counted) and one that ended NODE_FAIL."""
    lines = [HEADER]
    for i in range(1, 7):
        state, code = ("FAILED", "1:0") if i == 2 else ("COMPLETED", "0:0")
        account, part = ("physics" if i == 4 else "ml"), ("debug" if i == 5 else "gpu")
        times = f"2026-12-02T0{i}:00:00|2026-12-02T0{i}:00:00|2026-12-02T0{i}:05:00|2026-12-02T0{i + 1}:05:00|01:00:00"
        util = i * 37 % 400  # summed over the 4 GPUs; job 1: 9 % per GPU, held idle
        lines.append(f"{i}|{i}|train{i}|alice|{account}|{part}|normal|{state}|{code}|{times}|"
                     f"billing=8,cpu=8,gres/gpu=4,mem=64G,node=1|1|n{i}|||||{i * 100000}")
        usage = f"cpu=00:30:00,gres/gpuutil={util},mem=10G"
        lines.append(f"{i}.0|{i}.0|python||{account}|||{state}|{code}|{times}|cpu=8,gres/gpu=4,mem=64G,node=1|1|n{i}|"
                     f"{usage}|{usage}|{usage}||0")
    lines.append("7|7|plain|carol|ml|gpu|normal|COMPLETED|0:0|2026-12-02T09:00:00|2026-12-02T09:00:00|"
                 "2026-12-02T09:05:00|2026-12-02T10:05:00|01:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|1|n7|||||")
    # and a node failure, so that the lemon nodes' MTTF and ETTR are known (their families written)
    lines.append("8|8|plain|carol|ml|gpu|normal|NODE_FAIL|0:0|2026-12-02T09:00:00|2026-12-02T09:00:00|"
                 "2026-12-02T09:05:00|2026-12-02T10:05:00|01:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1|1|n8|||||")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _outputs(runner: CliRunner, base: list[str], source: list[str], extra: list[str], out: Path) -> dict[str, Any]:
    """`report build` (with the build-only options `extra`) and `report show`, text and JSON, of one input."""
    built = runner.invoke(cli, [*base, "build", *source, *extra, "--out", str(out), "--format", "html,csv,json,prom"])
    assert built.exit_code == 0, built.output
    shown = runner.invoke(cli, [*base, "show", *source, "--wide"])
    as_json = runner.invoke(cli, [*base, "show", *source, "--format", "json"])
    assert shown.exit_code == 0 and as_json.exit_code == 0, shown.output
    return {
        "html": (out / "report.html").read_text(encoding="utf-8"),
        "json": json.loads((out / "report.json").read_text(encoding="utf-8")),
        "csv_headers": {p.stem: p.read_text(encoding="utf-8").splitlines()[0].split(",") for p in out.glob("*.csv")},
        "prom": (out / prom.FILENAME).read_text(encoding="utf-8"),
        "show": shown.stdout,
        "show_json": json.loads(as_json.stdout),
    }


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("catalog")
    runner = CliRunner()
    econ_conf = tmp / "econ.conf"
    econ_conf.write_text((ECON / "site.conf").read_text().replace("/var/lib/gpuclust-lab/econ-site", str(tmp / "e"))
                         + "\n[telemetry]\nweigh_useful = yes\n")
    econ_source = ["--input", str(ECON / "sacct.txt"), "--since", "2026-12-03T09:00", "--until", "2026-12-03T09:20"]
    econ_files = ["--events", str(ECON / "events.txt"), "--nodes", str(ECON / "nodes.txt"),
                  "--reasons", str(ECON / "reasons.txt"), "--slurmctld-log", str(ECON / "slurmctld.log"),
                  "--target", "50"]
    use_conf = tmp / "use.conf"
    use_conf.write_text((ACCT / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp / "u"))
                        + "\n[costs]\ncurrency = EUR\n")
    use_source = ["--input", str(_usage_dump(tmp / "usage.txt")), "--since", "2026-12-02", "--until", "2026-12-03",
                  "--slurm-version", "24.11"]
    return [_outputs(runner, ["--config", str(econ_conf), "report"], econ_source, econ_files, tmp / "econ"),
            _outputs(runner, ["--config", str(use_conf), "report"], use_source, ["--target", "100"], tmp / "use")]


# ---- the table itself ---------------------------------------------------------------------------------------


def test_no_figure_is_declared_twice() -> None:
    places = Counter((f.place, f.name) for f in catalog.FIGURES)
    assert [key for key, n in places.items() if n > 1] == []
    keys = Counter(e.definition_key for e in catalog.ENTRIES if e.definition is not None)
    assert [key for key, n in keys.items() if n > 1] == []
    families = Counter(name for f in catalog.FIGURES for name in catalog.prom_families(f))
    assert [name for name, n in families.items() if n > 1] == []
    # a column is labelled by its name wherever it appears: one label per name
    labels: dict[str, set[str]] = {}
    for f in catalog.FIGURES:
        if f.label is not None:
            labels.setdefault(f.name, set()).add(f.label)
    assert {name: found for name, found in labels.items() if len(found) > 1} == {}
    ranks = Counter(f.show_rank for f in catalog.show_columns())
    assert [rank for rank, n in ranks.items() if n > 1] == []
    for f in catalog.FIGURES:
        assert f.place in catalog.DEFINITION_SECTIONS, f
        assert (f.prom is None) == (f.prom_help is None), f  # a family always has its HELP text
        assert f.old_prom is None or f.prom is not None, f
        assert (f.show is None) == (f.show_rank == 0), f


def test_every_old_name_maps_to_a_live_figure() -> None:
    live = {(f.place, f.name) for f in catalog.FIGURES}
    for f in catalog.FIGURES:
        for old in f.old_names:
            assert (f.place, old) not in live, (f, old)  # an alias never shadows a figure of its place
        for place, old in f.old_places:
            assert (place, old) not in live and place in catalog.DEFINITION_SECTIONS, (f, old)
    every_family = {name for f in catalog.FIGURES for name in catalog.prom_families(f)}
    assert set(deprecated.PROM.values()) <= every_family
    assert not set(deprecated.PROM) & every_family
    for aliases in (deprecated.RUN_KEYS, deprecated.SIZING_KEYS, deprecated.ECONOMICS_ROW_KEYS,
                    deprecated.ECONOMICS_TERMS_COLUMNS, deprecated.BASELINE_KEYS, deprecated.ECONOMICS_SIZING_KEYS,
                    deprecated.WEIGHTED_KEYS, deprecated.SIZING_FROM_TOTALS):
        assert aliases and set(aliases.values()) <= {f.name for f in catalog.FIGURES}, aliases
    # every old name the catalogue declares is written somewhere (deprecated's places)
    declared = {old for f in catalog.FIGURES for old in (*f.old_names, *(o for _, o in f.old_places))}
    declared |= {old for old in deprecated.PROM}
    assert declared == set(deprecated.NAMES)


def test_definitions_come_from_the_catalogue() -> None:
    from gpuclust.accounting.figures import economics, gpuuse, trend
    from gpuclust.accounting.figures.metrics import DEFINITIONS

    assert DEFINITIONS == catalog.definitions(catalog.REPORT)
    assert gpuuse.DEFINITIONS == catalog.definitions(catalog.GPU_USE)
    assert economics.DEFINITIONS == catalog.definitions(catalog.ECONOMICS)
    assert {"trend": trend.DEFINITION} == catalog.definitions(catalog.TREND)


# ---- the outputs read it ------------------------------------------------------------------------------------


def test_every_prom_family_is_written(reports: list[dict[str, Any]]) -> None:
    written: dict[str, str] = {}
    for report in reports:
        for family in text_string_to_metric_families(report["prom"]):
            written[family.name.removeprefix(prom.PREFIX)] = family.documentation
    for f in catalog.FIGURES:
        for name in catalog.prom_families(f):
            assert name in written, (f.name, name)
            help_text = str(f.prom_help)
            dims = catalog.PROM_BREAKDOWNS.get(f.place, ())
            dim = next((d for d in dims if name.startswith(f"{d}_")), None)
            if "{dim}" in help_text:
                assert written[name] == help_text.format(dim=dim), name
            else:
                assert written[name].startswith(help_text), name
    for old, new in deprecated.PROM.items():
        assert old in written and written[old].endswith(written[new]), old


def test_every_definition_is_in_report_json(reports: list[dict[str, Any]]) -> None:
    econ = reports[0]["json"]["definitions"]
    want = {e.definition_key: e.definition for e in catalog.ENTRIES
            if e.definition is not None and catalog.DEFINITION_SECTIONS[e.place] != catalog.TREND}
    assert {key: econ.get(key) for key in want} == want
    assert set(econ) == set(want)  # (no trend: an --input build has none)
    for section, prefix in catalog.DEFINITION_PREFIX.items():  # each section in the catalogue's order
        keys = [prefix + key for key in catalog.definitions(section)]
        assert [key for key in econ if key in keys] == (keys if section != catalog.TREND else [])


def test_labels_are_on_the_page_and_old_names_in_the_files(reports: list[dict[str, Any]]) -> None:
    page = reports[1]["html"]
    # (a header keeps its hyphenated and slashed words whole: htmltext.words_whole wraps them in <span class=w>)
    unwrapped = re.sub(r"<span class=w>([^<]*)</span>", r"\1", page)
    for f in catalog.figures(catalog.RUNS, catalog.SIZING, catalog.QUEUE_WAIT):
        if f.label is not None:
            assert f">{f.label}" in unwrapped, f.name
    for key, figure, _ in render.HEADLINE:
        assert f"data-figure='{key}'><div class='name'>{figure.title}" in page
    headers = reports[0]["csv_headers"]
    for name, columns in headers.items():
        for old, new in deprecated.columns_for(name).items():
            assert (old in columns) == (new in columns), (name, old)
    assert set(deprecated.RUN_KEYS) <= set(headers["totals"]) and set(deprecated.BASELINE_KEYS) <= set(
        headers["economics_baselines"])


def test_report_show_columns_are_the_catalogue_s(reports: list[dict[str, Any]]) -> None:
    for report in reports:
        columns = report["show_json"]["columns"]
        assert columns == [{"key": f.name, "name": f.show} for f in catalog.show_columns()]
        head = next(line for line in report["show"].splitlines() if line.lstrip().startswith("partition "))
        assert [str(f.show) in head for f in catalog.show_columns()] == [True] * len(catalog.show_columns())
        for row in report["show_json"]["groups"]:
            for old, new in deprecated.RUN_KEYS.items():
                assert row[old] == row[new]


# ---- the guard: no module but the catalogue spells a figure out --------------------------------------------


def _spellings() -> dict[str, str]:
    """Text -> the figure it names: labels, glossary and `report show` names that are a figure's own (several
    words: a one-word label such as "Cost" or "Max" is a plain word elsewhere; a unit's name is no figure's),
    Prometheus family names with a place's words in them (two underscores or more: "gpu_seconds" is a unit of
    other families too) and HELP texts (up to their first placeholder)."""
    out: dict[str, str] = {}
    units = {catalog.GPU_HOURS}
    names = {f.name for f in catalog.FIGURES}
    for f in catalog.FIGURES:
        for text in (f.label, f.glossary, f.show):
            if text and (" " in text or "-" in text) and text not in units:
                out[text] = f.name
        for name in catalog.prom_families(f):
            if name.count("_") >= 2 and name not in names:  # (a family named as its figure: the key is no spelling)
                out[name] = f.name
        if f.prom_help:
            out[f.prom_help.split("{")[0].rstrip(", ")] = f.name
    return out


def _literals(tree: ast.AST) -> list[str]:
    """The string constants of a module that are not docstrings (a docstring may name a figure in prose)."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_no_module_outside_the_catalogue_spells_a_figure() -> None:
    spellings = _spellings()
    assert "Completed-run GPU-hours" in spellings and "completed_run_gpu_seconds" in spellings
    found = []
    for path in sorted((ROOT / "gpuclust").rglob("*.py")):
        if path == ROOT / "gpuclust" / "accounting" / "figures" / "catalog.py":
            continue
        for text in _literals(ast.parse(path.read_text(encoding="utf-8"))):
            for spelled, name in spellings.items():
                if text == spelled or (("_" in spelled or len(spelled) > 30) and spelled in text):
                    found.append((str(path.relative_to(ROOT)), name, text[:80]))
    assert found == []


def test_the_guard_sees_a_spelled_label() -> None:
    spellings = _spellings()
    tree = ast.parse('HEADERS = {"completed_run_gpu_hours": "Completed-run GPU-hours"}\n'
                     'NAME = "partition_completed_run_gpu_seconds"\n')
    assert {"Completed-run GPU-hours", "partition_completed_run_gpu_seconds"} <= set(_literals(tree)) & set(spellings)
    assert "Completed-run GPU-hours" not in _literals(ast.parse('"""Completed-run GPU-hours."""\n'))


def test_show_reads_the_catalogue() -> None:
    assert show.GROUP_COLUMNS == tuple((f.name, f.show) for f in catalog.show_columns())
    assert render.HEADERS["completed_run_gpu_hours"] == catalog.figure(catalog.RUNS, "completed_run_gpu_hours").label


def test_the_run_tables_and_totals_hold_the_catalogue_s_run_figures() -> None:
    """GROUP_COLUMNS orders the runs_by_* CSV columns and report.json `totals`; it holds each run figure of the
    catalogue, and report.json's contract (reportdoc.Totals, schemas/report.schema.json) declares each."""
    assert sorted(GROUP_COLUMNS) == sorted(f.name for f in catalog.figures(catalog.RUNS))
    zero = {"runs": 0, "completed": 0, "attempts": 0, "cost": None, "completed_run_gpu_hours": 0.0,
            **dict.fromkeys(ATTEMPT_SUMS, 0.0)}
    assert tuple(finish_totals(zero)) == GROUP_COLUMNS
    declared = {f.name for f in reportdoc.Totals.__dataclass_fields__.values()}
    assert set(GROUP_COLUMNS) <= declared, f"reportdoc.Totals lacks {sorted(set(GROUP_COLUMNS) - declared)}"
