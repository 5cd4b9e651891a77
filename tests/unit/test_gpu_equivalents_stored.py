"""GPU-equivalents (issue 44) in the store's builds: the partitioned build (more rows than ROWS_IN_MEMORY), the
trend and the lemon nodes give the in-memory build's GPU-equivalent figures for a sliced dump
(tests/data/gpushare/README.md), stored as `report fetch` stores it."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import partitioned
from gpuclust.accounting.history import events, store
from gpuclust.accounting.ingest.schema import SCHEMA
from gpuclust.config import parse_config
from tests.reportcompare import assert_same, figures
from tests.unit.test_gpu_equivalents_report import DATA, DEVICE_HOURS, GPU_HOURS, PERIOD, REL

DAY = date(2026, 12, 7)


def stored(tmp_path: Path, events_text: str | None = None):
    """The gpushare dump in a store (each job a user of its own, so that the jobs fall in several buckets), with
    its node inventory and events; the config pointing at it."""
    text = (DATA / "site.conf").read_text().replace("/tmp/gpuclust-gpushare-unused", str(tmp_path))
    config = parse_config(text)
    table = pipeline.read_input(str(DATA / "sacct.txt")).table.cast(SCHEMA)
    users = [f"u{raw}" for raw in table.column("job_id_raw").to_pylist()]
    table = table.set_column(table.schema.get_field_index("user"), "user", pa.array(users, pa.string()))
    store.replace_days(store.store_dir(str(tmp_path)), {DAY: table},
                       fetched_at=datetime(2026, 12, 7, 12, 1, tzinfo=timezone.utc))
    target = events.day_dir(str(tmp_path), DAY)
    target.mkdir(parents=True)
    (target / events.EVENTS_FILE).write_text(events_text or (DATA / "events.txt").read_text())
    (target / events.NODES_FILE).write_text((DATA / "nodes.txt").read_text())
    (target / events.META_FILE).write_text('{"fetched_at": "2026-12-07T12:01:00+00:00"}')
    return config


@pytest.mark.parametrize("rows_per_bucket", [1, 4])
def test_partitioned_build_gives_the_in_memory_gpu_equivalents(tmp_path, rows_per_bucket):
    config = stored(tmp_path)
    one, _ = pipeline.build(config, PERIOD, trend_days=0)
    split, _ = pipeline.build(config, PERIOD, trend_days=0, rows_in_memory=-1, rows_per_bucket=rows_per_bucket)
    assert split.data["input"]["partitioned"]["buckets"] > 1
    assert one.data["totals"]["gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    assert one.data["totals"]["gpu_device_hours"] == pytest.approx(DEVICE_HOURS, rel=REL)
    assert_same(figures(one), figures(split))
    for key in ("economics", "gpu_use", "lemon_nodes"):
        assert_same(one.data[key], split.data[key])
    for key in ("unknown", "gpu_share_warnings", "gpu_price_units"):
        assert one.data["input"][key] == split.data["input"][key], key
    assert [n for n in one.data["input"]["notes"] if "GPU-equivalents" in n] == \
        [n for n in split.data["input"]["notes"] if "GPU-equivalents" in n]


def test_cli_partitioned_above_a_lowered_threshold(tmp_path, monkeypatch):
    """ROWS_IN_MEMORY lowered: `report build` takes the partitioned path and writes the same GPU-equivalent hours."""
    config = stored(tmp_path)
    one, _ = pipeline.build(config, PERIOD, trend_days=0)
    monkeypatch.setattr(partitioned, "ROWS_IN_MEMORY", 3)
    monkeypatch.setattr(partitioned, "ROWS_PER_BUCKET", 2)
    split, _ = pipeline.build(config, PERIOD, trend_days=0)
    assert "partitioned" in split.data["input"]
    assert split.data["totals"]["gpu_hours"] == pytest.approx(one.data["totals"]["gpu_hours"], rel=1e-9)
    assert split.data["economics"]["by_partition"] == one.data["economics"]["by_partition"]


def test_trend_counts_gpu_equivalent_hours(tmp_path):
    config = stored(tmp_path)
    report, _ = pipeline.build(config, PERIOD, trend_days=30)
    day = next(d for d in report.data["trend"]["daily"] if d["day"] == DAY.isoformat())
    # every run of the dump ended on the day: the trend's GPU-hours are the totals' GPU-equivalent hours
    assert day["gpu_hours"] == pytest.approx(report.data["totals"]["gpu_hours"], rel=1e-9)
    assert day["gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    assert day["cost"] == pytest.approx(report.data["totals"]["cost"], rel=1e-9)


def test_lemon_nodes_count_gpu_equivalent_hours(tmp_path):
    config = stored(tmp_path)
    report, _ = pipeline.build(config, PERIOD, trend_days=0)
    rows = {r["node"]: r for r in report.data["lemon_nodes"]["nodes"]}
    # node5: 102 (1/7 x 1 h), 103 (3/7 x 0.5 h), 104 (2/7 x 1.5 h), 107 (unknown: 0) = 11/14 GPU-h
    assert rows["node5"]["gpu_hours"] == pytest.approx(1 / 7 + 3 / 14 + 3 / 7, rel=REL)
    # node6: the shard job 105 (4/8 x 1 h) and the MPS job 106 (50/100 x 1 h), GPU jobs though they hold no device
    assert rows["node6"]["gpu_hours"] == pytest.approx(1.0, rel=REL)
    assert rows["node6"]["jobs"] == 2
    assert rows["node1"]["gpu_hours"] == pytest.approx(2.0, rel=REL)
