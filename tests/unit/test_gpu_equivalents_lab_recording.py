"""GPU-equivalents (issue 44) from the real Slurm 22.05 lab recording (tests/data/gpushare/lab-22.05/README.md): no
lab needed. Every job ran 3 s (its recorded Elapsed 00:00:03); by hand:

  job  9  -p gpu    --gres=gpu:1          1   x 3 s GPU-equivalent seconds, 1 device
  job 10  -p mig    --gres=gpu:3g.40gb:1  3/7 x 3 s (3 of 7 compute slices), 1 device
  job 11  -p mig    --gres=gpu:1g.10gb:2  2/7 x 3 s, 2 devices
  job 12  -p shared --gres=shard:4        4/8 x 3 s (node6: 2 GPUs / 16 shards = 1/8 per shard), no device
  capacity over the 20 s window: mig 1 GPU (4 x 1/7 + 3/7), shared 2 GPUs (shards add nothing)
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import parse_config

LAB = Path(__file__).resolve().parent.parent / "data" / "gpushare" / "lab-22.05"
PERIOD = Period(datetime(2026, 12, 7, 6, 44, 50, tzinfo=timezone.utc),
                datetime(2026, 12, 7, 6, 45, 10, tzinfo=timezone.utc))
REL = 1e-3
H = 3 / 3600  # each job's Elapsed, hours
WINDOW_H = 20 / 3600
SITE = """[site]
cluster_name = acct2
timezone = UTC
state_dir = /tmp/gpuclust-gpushare-lab-unused
[gpu_type h100]
price_per_gpu_hour = 2.50
[gpu_type 1g.10gb]
price_per_gpu_hour = 0.40
[partition gpu]
gpu_type = h100
[partition mig]
price_per_gpu_hour = 3.50
[costs]
currency = EUR
"""


@pytest.fixture(scope="module")
def data():
    report, _ = pipeline.build(parse_config(SITE), PERIOD, input_path=str(LAB / "sacct.txt"),
                               nodes_path=str(LAB / "nodes.txt"), events_path=str(LAB / "events.txt"))
    return report.data


def test_the_recording_is_what_the_readme_says():
    sacct = (LAB / "sacct.txt").read_text()
    assert "gres/gpu:3g.40gb=1,gres/gpu=1" in sacct and "gres/gpu:1g.10gb=2,gres/gpu=2" in sacct
    assert "billing=1,cpu=1,gres/shard=4,mem=1000M,node=1|None|node6" in sacct
    assert "Gres=gpu:h100:2,shard:h100:16" in (LAB / "nodes.txt").read_text()  # (Slurm types shards by the GPU)
    assert sacct.count("|00:00:03|") == 8  # 4 jobs and their batch steps


def test_gpu_equivalent_and_device_hours(data):
    by = {r["partition"]: r for r in data["runs"]["by_partition"]}
    assert by["gpu"]["gpu_hours"] == pytest.approx(1 * H, rel=REL)
    assert by["mig"]["gpu_hours"] == pytest.approx((3 / 7 + 2 / 7) * H, rel=REL)
    assert by["shared"]["gpu_hours"] == pytest.approx(4 / 8 * H, rel=REL)
    assert data["totals"]["gpu_hours"] == pytest.approx((1 + 5 / 7 + 1 / 2) * H, rel=REL)
    assert by["mig"]["gpu_device_hours"] == pytest.approx(3 * H, rel=REL)
    assert by["shared"]["gpu_device_hours"] == 0
    assert data["totals"]["gpu_device_hours"] == pytest.approx(4 * H, rel=REL)
    assert "gpu_share_warnings" not in data["input"]


def test_capacity_of_mig_and_shared(data):
    econ = data["economics"]
    assert econ["capacity"] == "known"
    parts = {r["partition"]: r for r in econ["by_partition"]}
    assert parts["mig"]["capacity_gpu_hours"] == pytest.approx(1 * WINDOW_H, rel=REL)
    assert parts["shared"]["capacity_gpu_hours"] == pytest.approx(2 * WINDOW_H, rel=REL)
    assert parts["shared"]["terms"]["idle"]["gpu_hours"] == pytest.approx(2 * WINDOW_H - H / 2, rel=REL)


def test_cost_slice_priced_by_default_and_shard_job_in_gpu_use(data):
    # 9: 2.50 x 1 x H; 10: partition mig's 3.50 per card-hour x 3/7 H; 11: 0.40 per slice-hour x 2 H (default unit
    # slice); 12: h100 of node6 has no partition type: unpriced
    assert data["totals"]["cost"] == pytest.approx((2.50 + 3.50 * 3 / 7 + 0.40 * 2) * H, rel=REL)
    assert data["input"]["gpu_price_units"] == {"1g.10gb": "slice", "h100": "card"}
    use = data["gpu_use"]
    assert use["totals"]["allocated_gpu_hours"] == pytest.approx(data["totals"]["gpu_hours"], rel=REL)
    assert use["gpu_util_rules"] == ["shard"]  # (22.05 gathers no gres/gpuutil: the MIG rule has none to set aside)
