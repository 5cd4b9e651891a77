"""GPU-equivalents in the accounting report (issue 44): MIG slices, shards and MPS counted as their share of one
physical GPU, against figures computed by hand on a recorded-shape dump (tests/data/gpushare/README.md)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import shares
from gpuclust.accounting.history.events import parse_events, parse_nodes
from gpuclust.accounting.ingest.period import Period
from gpuclust.config import load_config, parse_config
from gpuclust.errors import ConfigError

DATA = Path(__file__).resolve().parent.parent / "data" / "gpushare"
PERIOD = Period(datetime(2026, 12, 7, 10, tzinfo=timezone.utc), datetime(2026, 12, 7, 12, tzinfo=timezone.utc))
REL = 1e-3  # within 0.1%


def _build(**files):
    config = load_config(str(DATA / "site.conf"))
    paths = {"nodes_path": str(DATA / "nodes.txt"), "events_path": str(DATA / "events.txt"), **files}
    report, _ = pipeline.build(config, PERIOD, input_path=str(DATA / "sacct.txt"), **paths)
    return report.data


@pytest.fixture(scope="module")
def data():
    return _build()


# The jobs, by hand (h = hours of Elapsed; node5 = gpu:1g.10gb:4,gpu:3g.40gb:1 = one card of 7 slices;
# node6 = gpu:h100:2,shard:16, so one shard = 2/16 = 1/8 GPU; MPS = 1/100 GPU per unit):
#   101 h100 x2 on node1, 1 h          -> 2 x 1          = 2        GPU-h; devices 2 x 1   = 2
#   102 1g.10gb x1 on node5, 1 h       -> 1/7 x 1        = 0.142857        devices 1 x 1   = 1
#   103 3g.40gb x1 on node5, 0.5 h     -> 3/7 x 0.5      = 0.214286        devices 1 x 0.5 = 0.5
#   104 1g.10gb x2 on node5, 1.5 h     -> 2/7 x 1.5      = 0.428571        devices 2 x 1.5 = 3
#   105 shard=4 on node6, 1 h          -> 4/8 x 1        = 0.5             devices 0
#   106 mps=50 on node6, 1 h           -> 50/100 x 1     = 0.5             devices 0
#   107 5g.50gb (no such profile), 1 h -> unknown (never 0, never 1)       devices 1 x 1   = 1
#   108 shard=2 on node9 (not in the inventory, partition without shards_per_gpu) -> unknown; devices 0
#   109 shard=8 on node10, [partition sharedcfg] shards_per_gpu = 8, 1 h -> 8/8 x 1 = 1; devices 0
GPU_HOURS = 2 + 1 / 7 + 3 / 7 * 0.5 + 2 / 7 * 1.5 + 0.5 + 0.5 + 1.0  # = 4.785714
DEVICE_HOURS = 2 + 1 + 0.5 + 3 + 1  # = 7.5: exactly what gpu_hours was before slices counted
# Cost: h100 2.50 per card-hour; 1g.10gb 0.40 per slice device-hour (price_unit = slice); 3g.40gb has no price of
# its own: partition mig's 3.50 per card-hour; shared's type is h100; sharedcfg 2.00 per card-hour.
COST = (2 * 2.50            # 101
        + 1 * 0.40          # 102: 1 device-hour x 0.40
        + 3 / 14 * 3.50     # 103: 0.214286 GPU-h x 3.50 = 0.75
        + 3 * 0.40          # 104: 3 device-hours x 0.40
        + 0.5 * 2.50        # 105
        + 0.5 * 2.50        # 106
        + 1.0 * 2.00)       # 109  -> 11.85


def test_gpu_hours_count_gpu_equivalents(data):
    tot = data["totals"]
    assert tot["gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    assert tot["gpu_hours"] == pytest.approx(4.785714, rel=REL)
    # 107 failed: the completed runs are the others, all of whose shares are known
    assert tot["completed_run_gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    assert tot["gpu_device_hours"] == pytest.approx(DEVICE_HOURS, rel=REL)


def test_cost_per_card_and_per_slice(data):
    assert data["totals"]["cost"] == pytest.approx(COST, rel=REL)
    assert data["totals"]["cost"] == pytest.approx(11.85, rel=REL)
    assert data["totals"]["unpriced_gpu_hours"] == 0
    note = next(n for n in data["input"]["notes"] if "GPU-equivalents" in n)
    assert "per device-hour of one slice for 1g.10gb (price_unit = slice)" in note


def test_per_account_in_gpu_equivalents(data):
    by = {r["account"]: r for r in data["runs"]["by_account"]}
    # ml: 101, 102, 103, 106, 107 (unknown), 108 (unknown), 109; phys: 104, 105
    assert by["ml"]["gpu_hours"] == pytest.approx(2 + 1 / 7 + 3 / 14 + 0.5 + 1.0, rel=REL)
    assert by["phys"]["gpu_hours"] == pytest.approx(3 / 7 + 0.5, rel=REL)
    assert by["ml"]["gpu_device_hours"] == pytest.approx(2 + 1 + 0.5 + 1, rel=REL)
    assert by["phys"]["gpu_device_hours"] == pytest.approx(3, rel=REL)


def test_unknown_shares_are_counted_and_named(data):
    unknown = [u for u in data["input"]["unknown"] if u["missing"] == "GPU share"]
    assert [u["count"] for u in unknown] == [2]
    codes = {w["code"]: w for w in data["input"]["gpu_share_warnings"]}
    assert codes["unknown_mig_profile"]["rows"] == 1 and "5g.50gb" in codes["unknown_mig_profile"]["detail"]
    assert codes["shard_layout_unknown"]["rows"] == 1 and "node9" in codes["shard_layout_unknown"]["detail"]
    top = {r["job_id"]: r for r in data["top_failures"]}
    assert top["107"]["gpu_hours"] is None and top["107"]["cost"] is None  # unknown, never 0 or 1 GPU


def test_capacity_idle_in_gpu_equivalents(data):
    econ = data["economics"]
    assert econ["capacity"] == "known"
    parts = {r["partition"]: r for r in econ["by_partition"]}
    # 2 h window: node1 4 GPUs, node5 4 x 1/7 + 1 x 3/7 = 1 card, node6 2 GPUs (its 16 shards add nothing)
    assert econ["total"]["capacity_gpu_hours"] == pytest.approx((4 + 1 + 2) * 2, rel=REL)
    assert parts["mig"]["capacity_gpu_hours"] == pytest.approx(1 * 2, rel=REL)
    assert parts["mig"]["allocated_gpu_hours"] == pytest.approx(1 / 7 + 3 / 14 + 3 / 7, rel=REL)
    mig_idle = 2 - (1 / 7 + 3 / 14 + 3 / 7)  # = 17/14
    assert parts["mig"]["terms"]["idle"]["gpu_hours"] == pytest.approx(mig_idle, rel=REL)
    # node5's price per card-hour: 1g.10gb 0.40 / (1/7) = 2.80 on 4/7 of the card, 3g.40gb 3.50 on 3/7
    assert parts["mig"]["terms"]["idle"]["cost"] == pytest.approx(mig_idle * (2.80 * 4 / 7 + 3.50 * 3 / 7), rel=REL)
    assert parts["mig"]["terms"]["completed_run"]["cost"] == pytest.approx(0.40 + 0.75 + 1.20, rel=REL)
    assert parts["shared"]["capacity_gpu_hours"] == pytest.approx(2 * 2, rel=REL)
    assert parts["shared"]["terms"]["idle"]["gpu_hours"] == pytest.approx(4 - 1.0, rel=REL)


def test_gpu_use_allocated_basis(data):
    # every job holding a GPU, a slice, shards or MPS: 101..109; 107 and 108 unknown (none allocated, as in the
    # totals): the GPU use tables' allocated is the totals' GPU-equivalent hours
    assert data["gpu_use"]["totals"]["allocated_gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    assert data["gpu_use"]["totals"]["allocated_gpu_hours"] == pytest.approx(data["totals"]["gpu_hours"], rel=1e-9)


def test_outputs_carry_device_hours(tmp_path):
    from gpuclust.accounting.output.render import write_report

    config = load_config(str(DATA / "site.conf"))
    report, _ = pipeline.build(config, PERIOD, input_path=str(DATA / "sacct.txt"), nodes_path=str(DATA / "nodes.txt"),
                               events_path=str(DATA / "events.txt"))
    written = write_report(report, tmp_path, ("csv", "json", "prom"))
    header = (tmp_path / "totals.csv").read_text().splitlines()[0].split(",")
    assert "gpu_device_hours" in header
    prom = next(p for p in written if p.suffix == ".prom").read_text()
    assert 'gpuclust_report_gpu_device_seconds{cluster="share"} 27000.0' in prom  # 7.5 device-hours
    assert 'gpuclust_report_gpu_seconds{cluster="share"} 17228.57' in prom  # 4.785714 GPU-equivalent hours
    assert "gpu_device_hours" in report.data["definitions"] and "gpu_equivalents" in report.data["definitions"]


def test_layout_changed_makes_node_shares_unknown(tmp_path):
    events = (DATA / "events.txt").read_text() + (
        "Node|node6|2026-12-07T10:20:00|2026-12-07T10:40:00|DRAIN|root(0)|billing=8,cpu=8,gres/gpu:h100=1,"
        "gres/gpu=1,mem=16000M|re-cut\n")
    (tmp_path / "events.txt").write_text(events)
    data = _build(events_path=str(tmp_path / "events.txt"))
    codes = {w["code"] for w in data["input"]["gpu_share_warnings"]}
    assert "node_layout_changed" in codes
    # 105 and 106 (node6, shares read from its layout) are unknown now, beside 107 and 108
    assert [u["count"] for u in data["input"]["unknown"] if u["missing"] == "GPU share"] == [4]
    assert data["totals"]["gpu_hours"] == pytest.approx(GPU_HOURS - 1.0, rel=REL)


def test_bad_node_layouts_warn():
    text = ("NodeName=node7 Gres=gpu:a100:1,gpu:3g.40gb:2 State=IDLE Partitions=mix\n"
            "NodeName=node8 Gres=shard:8 State=IDLE Partitions=cpu\n"
            "NodeName=node11 Gres=gpu:9g.90gb:1 State=IDLE Partitions=mig\n")
    config = load_config(str(DATA / "site.conf"))
    layouts = shares.layouts_of(config, parse_nodes(text))
    got = {(w["code"], w["node"]) for w in shares.node_warnings(layouts)}
    assert ("mixed_mig_and_full_gpus", "node7") in got
    assert ("shards_without_gpu", "node8") in got
    assert ("mig_slice_exceeds_card", "node11") in got
    nodes = {nd.name: nd for nd in parse_nodes(text)}
    assert shares.node_equivalents(nodes["node11"], config) is None  # unknown capacity, never 1


def test_layouts_changed_from_events():
    config = load_config(str(DATA / "site.conf"))
    nodes = parse_nodes((DATA / "nodes.txt").read_text())
    events = parse_events("Event|NodeName|TimeStart|TimeEnd|State|User|TRES|Reason\n"
                          "Node|node5|2026-12-07T10:00:00|Unknown|DRAIN|root(0)|gres/gpu:1g.10gb=7,gres/gpu=7|x\n")

    class Source:  # (what layouts_of reads of an EventSource)
        pass

    source = Source()
    source.events = events  # type: ignore[attr-defined]
    layouts = shares.layouts_of(config, nodes, source)  # type: ignore[arg-type]
    assert "node5" in layouts.changed and "1g.10gb:7" in layouts.changed["node5"]


def test_whole_gpu_table_has_no_equivalents():
    """No slice, shard or MPS anywhere: None, so every figure is made of the gpus column as before."""
    table = pa.table({"alloc_tres": pa.array(["cpu=1,gres/gpu:h100=2,gres/gpu=2", "cpu=1", None]).dictionary_encode(),
                      "gpus": [2, 0, 0], "nodelist": ["node1", "node2", None], "partition": ["gpu"] * 3})
    got = shares.table_shares(table, load_config(str(DATA / "site.conf")))
    assert got.equivalents is None


def test_site_share_override_and_untyped_on_mig_node():
    config = parse_config("[site]\ncluster_name = c\n[gpu_type tiny]\ngpu_share = 1/7\n")
    layouts = shares.layouts_of(config, parse_nodes("NodeName=n1 Gres=gpu:2g.20gb:3 State=IDLE Partitions=p\n"))
    table = pa.table({"alloc_tres": ["gres/gpu:tiny=2,gres/gpu=2", "cpu=1,gres/gpu=1", "gres/gpu:h100=1,gres/gpu=1"],
                      "gpus": [2, 1, 1], "nodelist": ["x1", "n1", "x2"], "partition": ["p", "p", "p"]})
    got = shares.table_shares(table, config, layouts)
    assert got.equivalents is not None
    # tiny: 2 x 1/7; an untyped GPU on n1 (one kind of slice, 2g): 2/7; h100 on a node of no MIG: 1
    np.testing.assert_allclose(got.equivalents, [2 / 7, 2 / 7, 1.0])


def test_config_keys():
    config = load_config(str(DATA / "site.conf"))
    assert config.gpu_type_price_units == {"1g.10gb": "slice"}
    assert config.partitions["sharedcfg"].shards_per_gpu == 8
    with pytest.raises(ConfigError) as err:
        parse_config("[site]\ncluster_name = c\n[gpu_type x]\ngpu_share = 8/7\n")
    assert "[gpu_type x] gpu_share: a share of one GPU is in (0, 1]" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config("[site]\ncluster_name = c\n[gpu_type x]\nprice_unit = gpu\nprice_per_gpu_hour = 1\n")
    assert "price_unit" in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config("[site]\ncluster_name = c\n[gpu_type x]\n")
    assert "missing required key 'price_per_gpu_hour'" in str(err.value)


# ---- issue 44, the gaps closed: price units, mixes, changed layouts, shard and MPS jobs' use -------------------

def test_a_mig_type_price_is_per_slice_hour_by_default(tmp_path):
    """`[gpu_type 1g.10gb] price_per_gpu_hour = 0.40` without price_unit: that slice's hour, as with price_unit =
    slice; the report names the unit that applied to each priced type."""
    text = (DATA / "site.conf").read_text().replace("price_unit = slice\n", "")
    assert "price_unit" not in text
    (tmp_path / "site.conf").write_text(text)
    config = load_config(str(tmp_path / "site.conf"))
    assert config.gpu_type_price_units == {}
    report, _ = pipeline.build(config, PERIOD, input_path=str(DATA / "sacct.txt"), nodes_path=str(DATA / "nodes.txt"),
                               events_path=str(DATA / "events.txt"))
    data = report.data
    assert data["totals"]["cost"] == pytest.approx(COST, rel=REL)
    assert data["input"]["gpu_price_units"] == {"1g.10gb": "slice", "h100": "card"}
    note = next(n for n in data["input"]["notes"] if "GPU-equivalents" in n)
    assert "per device-hour of one slice for 1g.10gb (price_unit = slice)" in note
    assert "1g.10gb gave no price_unit: a MIG type's price is per slice-hour by default" in note


def test_price_unit_default_and_explicit_card():
    from gpuclust.accounting.figures.metrics.attempts import card_price, price_unit

    config = parse_config("[site]\ncluster_name = c\n[gpu_type 1g.10gb]\nprice_per_gpu_hour = 0.40\n"
                          "[gpu_type 3g.40gb]\nprice_per_gpu_hour = 8.40\nprice_unit = card\n"
                          "[gpu_type tiny]\nprice_per_gpu_hour = 0.50\ngpu_share = 1/4\n"
                          "[gpu_type h100]\nprice_per_gpu_hour = 2.50\n")
    assert {t: price_unit(config, t) for t in ("1g.10gb", "3g.40gb", "tiny", "h100")} == {
        "1g.10gb": "slice", "3g.40gb": "card", "tiny": "slice", "h100": "card"}
    # per GPU-equivalent hour: a slice's price / its share; a card's as given
    assert card_price(config, "1g.10gb", None) == pytest.approx(0.40 * 7)
    assert card_price(config, "3g.40gb", None) == pytest.approx(8.40)
    assert card_price(config, "tiny", None) == pytest.approx(0.50 * 4)
    assert card_price(config, "h100", None) == 2.50


def test_economics_prices_a_mix_with_slices_by_their_shares():
    """A row of `1g.10gb=1,h100=2` (gpu_type of a mix) holds 1/7 + 2 GPU-equivalents: each type weighs by its
    share of them, not by its device count (1 of 3)."""
    from gpuclust.accounting.figures.economics import Pricing

    config = load_config(str(DATA / "site.conf"))
    got = Pricing(config, None).price("1g.10gb=1,h100=2", "gpu")
    # 1g.10gb: 0.40 per slice-hour = 2.80 per card-hour on 1/7 of 15/7; h100: 2.50 on 2 of 15/7
    assert got == pytest.approx((2.80 * 1 / 7 + 2.50 * 2) / (15 / 7))
    assert got == pytest.approx(2.52)
    # whole GPUs alone: by their counts, as before
    assert Pricing(config, None).price("h100=2,*=2", "gpu") == pytest.approx(2.50)


def test_changed_layout_makes_capacity_unknown(tmp_path):
    events = (DATA / "events.txt").read_text() + (
        "Node|node6|2026-12-07T10:20:00|2026-12-07T10:40:00|DRAIN|root(0)|billing=8,cpu=8,gres/gpu:h100=1,"
        "gres/gpu=1,mem=16000M|re-cut\n")
    (tmp_path / "events.txt").write_text(events)
    data = _build(events_path=str(tmp_path / "events.txt"))
    econ = data["economics"]
    assert econ["capacity"] != "known"
    assert econ["total"]["capacity_gpu_hours"] is None
    note = next(n for n in econ["notes"] if "node6" in n and "changed" in n)
    assert "node_layout_changed" in note
    assert any(w["code"] == "node_layout_changed" and w.get("node") == "node6"
               for w in data["input"]["gpu_share_warnings"])


def test_shard_and_mps_jobs_count_in_gpu_use_with_unknown_utilisation():
    """A job of shards or MPS only shares a GPU: allocated its GPU-equivalents, its utilisation unknown (rule
    shard or mps) whatever usage TRES says, never 0 or held idle, and it counts against coverage."""
    from gpuclust.accounting.figures import gpuuse

    config = load_config(str(DATA / "site.conf"))
    table = pipeline.read_input(str(DATA / "sacct.txt")).table
    n = table.num_rows
    elapsed = np.asarray(table.column("elapsed_s").to_numpy(zero_copy_only=False), dtype=float)
    gpus = np.asarray(table.column("gpus").to_numpy(zero_copy_only=False), dtype=float)
    # usage TRES as if every job had read an idle GPU (util 1%): covered = its devices x Elapsed, or Elapsed
    covered = np.maximum(gpus, 1) * elapsed
    for name, values in (("gpu_util_gpu_s", covered), ("gpu_busy_gpu_s", covered * 0.01)):
        table = table.set_column(table.schema.get_field_index(name), name, pa.array(values, pa.float64()))
    table = table.set_column(table.schema.get_field_index("gpu_util_rule"), "gpu_util_rule",
                             pa.array(["summed"] * n, pa.string()))
    layouts = shares.layouts_of(config, parse_nodes((DATA / "nodes.txt").read_text()))
    eq = shares.table_shares(table, config, layouts).equivalents
    jobs, _ = gpuuse.job_use(table, config, PERIOD, equivalents=eq)
    by = {r["job_id"]: r for r in jobs.to_dict("records")}
    assert by["105"]["gpu_util_rule"] == "shard" and by["106"]["gpu_util_rule"] == "mps"
    assert by["109"]["gpu_util_rule"] == "shard"
    for job, alloc in (("105", 0.5), ("106", 0.5), ("109", 1.0)):
        assert by[job]["allocated_gpu_hours"] == pytest.approx(alloc)
        assert np.isnan(by[job]["covered_gpu_hours"]) and np.isnan(by[job]["util_mean_pct"])
        assert np.isnan(by[job]["held_idle_gpu_hours"])
    assert by["101"]["gpu_util_rule"] == "summed" and by["101"]["held_idle_gpu_hours"] == pytest.approx(2.0)
    use = gpuuse.use_sums(table, config, PERIOD, equivalents=eq)
    data = {"gpu_use": {}}

    class R:  # (what attach_sums writes into)
        pass

    r = R()
    r.data = data  # type: ignore[attr-defined]
    r.tables = {}  # type: ignore[attr-defined]
    gpuuse.attach_sums(r, use, config)
    totals = data["gpu_use"]["totals"]
    assert totals["allocated_gpu_hours"] == pytest.approx(GPU_HOURS, rel=REL)
    # covered: 101 only: the MIG jobs 102-104 are unknown by the MIG rule (usage TRES reads 0 on a slice), 107's
    # share is unknown (none allocated, none covered), the shard and MPS jobs by their own rule
    assert totals["covered_gpu_hours"] == pytest.approx(2.0, rel=REL)
    assert totals["coverage"] == pytest.approx(2.0 / GPU_HOURS, rel=REL)
    assert {"mig", "shard", "mps"} <= set(data["gpu_use"]["gpu_util_rules"])


def test_a_dump_without_slices_has_no_shard_rule():
    from gpuclust.accounting.figures import gpuuse

    assert gpuuse.shared_rules(pd_frame()) is None


def pd_frame():
    import pandas as pd

    return pd.DataFrame({"gpus": [1], "alloc_tres": ["gres/gpu=1"]})


def test_waste_findings_count_a_slice_idle_hour_as_its_share():
    """An idle 1g.10gb slice for an hour: held-idle 1/7 GPU-equivalent hour, priced at the slice's own 0.40."""
    from types import SimpleNamespace

    import pandas as pd

    from gpuclust.accounting.figures import findings

    config = load_config(str(DATA / "site.conf"))
    jobs = pd.DataFrame({"job_id": ["102", "101"], "user": ["bob", "alice"], "account": ["ml", "ml"],
                         "partition": ["mig", "gpu"], "gpu_type": ["1g.10gb", "h100"], "gpus": [1, 2],
                         "elapsed_s": [3600.0, 3600.0], "timelimit_s": [3600.0, 3600.0], "nnodes": [1, 1],
                         "mem_mb": [1000.0, 2000.0], "gpu_mem_max_mb": [np.nan, np.nan],
                         "gpu_equivalents": [1 / 7, 2.0]})

    def gpu(node, name):
        return SimpleNamespace(node=node, name=name, covered_s=3600.0, util_mean_pct=0.0, idle_s=3600.0,
                               longest_idle_s=3600.0, longest_idle_start=None, fb_used_max_mib=None, fb_total_mib=None)

    per_gpu = {0: [gpu("node5", "0")], 1: [gpu("node1", "0"), gpu("node1", "1")]}
    got = findings.job_findings(jobs, np.array([1.0, 2.0]), np.array([np.nan, np.nan]), per_gpu, {}, config)
    idle = got[got["kind"] == "idle_gpu"]
    by = idle.groupby("job_id")[["held_idle_gpu_hours", "held_idle_cost"]].sum()
    assert by.loc["102", "held_idle_gpu_hours"] == pytest.approx(1 / 7)
    assert by.loc["102", "held_idle_cost"] == pytest.approx(0.40)  # one slice-hour at 0.40
    assert by.loc["101", "held_idle_gpu_hours"] == pytest.approx(2.0)  # whole GPUs: as before
    assert by.loc["101", "held_idle_cost"] == pytest.approx(2 * 2.50)
