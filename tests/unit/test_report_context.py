"""Every report output carries its context (cluster, period, generation time) so nightly files concatenate;
top failures name their NodeList and Start (issue 15 item 7)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from gpuclust.cli.main import cli

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"


def build(tmp_path: Path, *extra: str) -> Path:
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "state")))
    out = tmp_path / "out"
    args = ["--config", str(conf), "report", "build", "--input", str(DATA / "lab-parsable.txt"),
            "--delimiter", "\\x1f|\\x1e", "--since", "2026-12-02", "--until", "2026-12-03", "--out", str(out), *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return out


def test_json_and_every_csv_and_parquet_carry_the_context(tmp_path):
    out = build(tmp_path, "--format", "json,csv,parquet")
    data = json.loads((out / "report.json").read_text())
    assert list(data)[:5] == ["schema", "cluster", "period", "generated_at", "currency"]
    assert data["cluster"] == "acct"
    assert data["period"] == {"start": "2026-12-02T00:00:00+00:00", "end": "2026-12-03T00:00:00+00:00"}
    assert data["generated_at"].endswith("Z") and "T" in data["generated_at"]
    context = {"cluster": "acct", "period_start": data["period"]["start"], "period_end": data["period"]["end"],
               "generated_at": data["generated_at"]}
    csvs = sorted(out.glob("*.csv"))
    assert len(csvs) >= 10
    for path in csvs:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            assert reader.fieldnames and reader.fieldnames[-4:] == list(context), path.name
            for row in reader:
                assert {k: row[k] for k in context} == context, path.name
        parquet = pd.read_parquet(path.with_suffix(".parquet"))
        assert list(parquet.columns[-4:]) == list(context), path.name
    # Two nights' files concatenate into one table that still says which night each row is from.
    frames = [pd.read_csv(out / "runs_by_account.csv"), pd.read_csv(out / "runs_by_account.csv")]
    assert set(pd.concat(frames)["period_start"]) == {data["period"]["start"]}


def test_top_failures_name_nodelist_and_start(tmp_path):
    out = build(tmp_path, "--format", "json,csv")
    data = json.loads((out / "report.json").read_text())
    fails = data["top_failures"]
    assert fails and all(f["node_list"].startswith("node") for f in fails)
    assert all(f["start"].startswith("2026-12-02T") and f["start"].endswith("+00:00") for f in fails)
    header = (out / "top_failures.csv").read_text().splitlines()[0].split(",")
    assert {"node_list", "start"} <= set(header)
