"""The numpy metrics give the figures of the pandas implementation they replaced.

`accounting_reference_metrics.py` (beside this file) is that implementation, kept as the oracle: row by row
pandas grouping, the JobID as a string, every table grouped over all runs. The two may differ only in the
last bits of float sums (a different summation order), and in the order of top failures that tie on
GPU-hours and End (now: input order, stated in the definitions).
"""

from __future__ import annotations

import importlib.util
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.figures import metrics
from gpuclust.accounting.history import store
from gpuclust.accounting.ingest import text
from gpuclust.accounting.ingest.fast import sorting
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, SCHEMA
from gpuclust.config import parse_config
from tests.reportcompare import assert_same
from tests.unit import accounting_reference_metrics as reference

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _bench():
    spec = importlib.util.spec_from_file_location("accounting_bench", REPO / "benchmarks" / "accounting_bench.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def assert_close(new: Any, old: Any, path: str = "") -> None:
    assert_same(old, new, path, rel_tol=1e-11, abs_tol=1e-6)


def _plain_strings(table: pa.Table) -> pa.Table:
    """The oracle predates dictionary-encoded string columns."""
    return pa.table({name: (col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col)
                     for name, col in zip(table.column_names, table.columns, strict=True)})


def assert_same_report(table: pa.Table, config_text: str, period: Period, **kw: Any) -> dict[str, Any]:
    config = parse_config(config_text)
    threads = {"parallel_min_attempts": kw.pop("parallel_min_attempts")} if "parallel_min_attempts" in kw else {}
    new = metrics.build_report(table, config, period, **kw, **threads)
    old = reference.build_report(_plain_strings(table), config, period, **kw)
    new_data, old_data = dict(new.data), dict(old.data)
    new_data["input"] = {k: v for k, v in new_data["input"].items() if k != "left_out"}  # (newer than the oracle)
    assert new_data.pop("definitions").keys() == old_data.pop("definitions").keys()
    # Top failures: the same rows; those tied on GPU-hours and End may come in another order.
    new_top, old_top = new_data.pop("top_failures"), old_data.pop("top_failures")
    assert [r["gpu_hours"] for r in new_top] == [r["gpu_hours"] for r in old_top]
    if len({r["gpu_hours"] for r in old_top}) == len(old_top):
        assert_close(new_top, old_top, "top_failures")
    else:
        key = lambda r: (r["gpu_hours"], r["job_id"])  # noqa: E731
        last = old_top[-1]["gpu_hours"] if old_top else None  # rows at the cut may differ
        assert_close(sorted((r for r in new_top if r["gpu_hours"] != last), key=key),
                     sorted((r for r in old_top if r["gpu_hours"] != last), key=key), "top_failures")
    assert_close(new_data, old_data)
    assert list(new.tables) == list(old.tables)
    for name, frame in old.tables.items():
        assert list(new.tables[name].columns) == list(frame.columns), name
        assert len(new.tables[name]) == len(frame), name
    return new.data


CONF = BENCH.CONF + "\n[partition cpu]\n"


@pytest.fixture(scope="module")
def generated_table(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    path = tmp_path_factory.mktemp("bench") / "sacct.txt"
    BENCH.generate(path, 6000, seed=5)
    return store.latest_state(text.parse_parsable(path.read_bytes(), FETCH_DELIMITER).table)


@pytest.mark.parametrize("days", [(0, 30), (3, 4), (10, 17), (40, 41)])
@pytest.mark.parametrize("threaded", [False, True])
def test_generated_input_same_figures(generated_table, days, threaded, monkeypatch):
    # threaded: pricing, waits and top failures on the second thread, as for a large input
    period = Period(T0 + timedelta(days=days[0]), T0 + timedelta(days=days[1]))
    data = assert_same_report(generated_table, CONF, period, **({"parallel_min_attempts": 0} if threaded else {}))
    assert days[0] >= 30 or data["totals"]["runs"] > 0


def test_dictionary_encoded_columns_same_figures(generated_table):
    encoded = pa.table({
        name: (col.dictionary_encode() if pa.types.is_string(col.type) else col)
        for name, col in zip(generated_table.column_names, generated_table.columns, strict=True)
    })
    period = Period(T0, T0 + timedelta(days=30))
    config = parse_config(CONF)
    a = metrics.build_report(encoded, config, period).data
    b = metrics.build_report(generated_table, config, period).data
    assert a == b


def test_chunked_columns_and_target_same_figures(generated_table):
    half = generated_table.num_rows // 2
    chunked = pa.concat_tables([generated_table.slice(0, half), generated_table.slice(half)])
    assert chunked.column("job_id").num_chunks == 2
    assert_same_report(chunked, CONF, Period(T0, T0 + timedelta(days=30)), target=123.0, top=7)


# ---- random attempts: the run rules (requeues, resubmissions, overlaps, windows, het jobs) -------------------

NAMES = ["a", "b", "a|b", ""]
STATES = ["COMPLETED", "FAILED", "TIMEOUT", "REQUEUED", "CANCELLED", "NODE_FAIL", "PENDING"]


@st.composite
def job_rows(draw: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    next_id = 100
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["plain", "plain", "array", "requeue", "het", "pending"]))
        base = next_id
        next_id += 10
        submit = draw(st.integers(0, 20_000))
        wait = draw(st.integers(0, 3000))
        run = draw(st.integers(0, 5000))
        common = {
            "user": draw(st.sampled_from(["u1", "u2"])), "account": draw(st.sampled_from(["ml", "bio", ""])),
            "partition": draw(st.sampled_from(["gpu", "a100", "cpu", "nowhere"])),
            "job_name": draw(st.sampled_from(NAMES)), "qos": draw(st.sampled_from(["normal", "high"])),
            "comment": draw(st.sampled_from(["", "team=x project=p1", "project=p2,model=m", "team="])),
            "wckey": draw(st.sampled_from(["", "wk"])),
        }
        eligible = None if draw(st.booleans()) and kind != "pending" else submit + draw(st.integers(0, 50))
        state = draw(st.sampled_from(STATES))
        exit_code = 0 if state == "COMPLETED" and draw(st.integers(0, 4)) else draw(st.integers(0, 3))
        gpus = draw(st.sampled_from([0, 1, 2, 8]))
        gtype = draw(st.sampled_from([None, "h100", "a100", "v100"]))
        if kind == "pending":
            rows.append(_row(str(base), base, submit, eligible, None, None, "PENDING", 0, gpus, gtype, common))
        elif kind == "plain":
            rows.append(_row(str(base), base, submit, eligible, submit + wait, submit + wait + run, state,
                             exit_code, gpus, gtype, common))
        elif kind == "array":
            for task in range(draw(st.integers(1, 3))):
                rows.append(_row(f"{base}_{task}", base + task + 1, submit, eligible, submit + wait + task,
                                 submit + wait + task + run, draw(st.sampled_from(STATES[:3])), exit_code, gpus,
                                 gtype, common, task=task))
        elif kind == "requeue":
            rows.append(_row(str(base), base, submit, eligible, submit + wait, submit + wait + run, "REQUEUED", 0,
                             gpus, gtype, common))
            rows.append(_row(str(base), base, submit, eligible, submit + wait + run + 60,
                             submit + 2 * (wait + run) + 60, state, exit_code, gpus, gtype, common))
        else:
            for offset in range(draw(st.integers(1, 3))):
                rows.append(_row(f"{base}+{offset}", base + offset, submit, eligible, submit + wait,
                                 submit + wait + run, state, exit_code, draw(st.sampled_from([0, 1, 4])),
                                 draw(st.sampled_from([None, "h100", "a100"])), common, het=offset, het_base=base))
    return rows


def _row(job_id: str, raw: int, submit: int, eligible: int | None, start: int | None, end: int | None,
         state: str, exit_code: int, gpus: int, gtype: str | None, common: dict[str, Any], *,
         task: int | None = None, het: int | None = None, het_base: int | None = None) -> dict[str, Any]:
    def ts(s: int | None) -> datetime | None:
        return None if s is None else T0 + timedelta(seconds=s)

    base = het_base if het_base is not None else int(job_id.split("_")[0])
    return {
        "line": raw, "job_id": job_id, "job_id_raw": raw, "job_base": base, "array_task": task,
        "array_pending": None, "het_offset": het, "nodelist": "n1", "state": state, "state_raw": state,
        "exit_code": exit_code, "exit_signal": 0, "exit_code_known": True, "submit": ts(submit),
        "eligible": ts(eligible), "start": ts(start), "end": ts(end),
        "elapsed_s": (end - start) if start is not None and end is not None else 0, "nnodes": 1,
        "alloc_tres": f"cpu=1,gres/gpu={gpus}" if start is not None else "", "gpus": gpus, "gpu_type": gtype,
        "mem_mb": None, **common,
    }


HYPO_CONF = """
[site]
cluster_name = t
retry_window = 2h
report_labels = team, project
[gpu_type h100]
price_per_gpu_hour = 2.0
[partition gpu]
gpu_type = h100
price_per_gpu_hour = 3.0
[partition a100]
gpu_type = a100
[partition cpu]
[account ml]
labels = team=ml-team
"""


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=job_rows(), lo=st.integers(0, 20_000), span=st.integers(1, 40_000))
def test_random_jobs_same_figures(rows, lo, span):
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    period = Period(T0 + timedelta(seconds=lo), T0 + timedelta(seconds=lo + span))
    assert_same_report(table, HYPO_CONF, period)


# ---- the sorting helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_lex_order_is_a_stable_lexsort(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    keys = []
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(0, 6))
        keys.append([
            rng.integers(-3, 3, n), rng.integers(-2**61, 2**61, n), rng.choice([0.0, 1.0, 5.0, 1.79e9], n),
            np.sort(rng.integers(0, 5, n)), rng.integers(0, 9, n).astype(np.int32),
            rng.choice([0.5, 1.0, np.nan], n),
        ][kind])
    before = [k.copy() for k in keys]
    assert np.array_equal(sorting.lex_order(keys), np.lexsort(keys[::-1]))
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(keys, before, strict=True))  # inputs kept


@pytest.mark.parametrize("seed", range(10))
def test_group_ids_equal_exactly_for_equal_rows(seed):
    rng = np.random.default_rng(seed)
    n = 500
    wide = seed % 2 == 1  # too wide to pack: the sort path
    keys = [rng.integers(0, 3, n), rng.integers(0, 2**40 if wide else 5, n), rng.integers(-1, 2, n)]
    if wide:
        keys[1] = rng.choice(np.array([0, 2**40, 2**39 + 7]), n)
        keys.append(rng.choice(np.array([0, 2**40]), n))
    ids = sorting.group_ids(keys)
    rows = list(zip(*(k.tolist() for k in keys), strict=True))
    first: dict[tuple[int, ...], int] = {}
    for i, row in enumerate(rows):
        assert ids[i] == ids[first.setdefault(row, i)]
    assert len(set(ids.tolist())) == len(first)


def test_factorize_small_and_large_ranges():
    for key in (np.array([5, 3, 5, 9]), np.array([2**40, 3, 2**40, -7])):
        ids, values = sorting.factorize(key)
        assert np.array_equal(values[ids], key)
        assert np.array_equal(values, np.unique(key))
