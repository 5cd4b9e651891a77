"""CSV outputs (render.csv_bytes): a long table is written by Arrow in slices side by side, and reads back as
pandas' own CSV of the same frame does."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from gpuclust.accounting.output import render


def _frame(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({
        "job_id": [f"{100 + i}_{i % 7}" for i in range(rows)],
        "user": pd.Categorical([f"user{i % 5}" for i in range(rows)]),
        "gpus": rng.integers(0, 9, rows),
        "gpu_hours": np.where(rng.random(rows) < 0.1, np.nan, rng.random(rows) * 1e4),
        "share": rng.random(rows) / 1e5,
        "completed": rng.random(rows) < 0.5,
        "note": [None if i % 3 else "x" for i in range(rows)],
    })


@pytest.mark.parametrize("rows", [9, 10, 11, 57, 403])
def test_long_table_in_slices_reads_back_as_pandas_writes_it(rows, monkeypatch):
    monkeypatch.setattr(render, "LARGE_CSV_ROWS", 10)
    frame = _frame(rows)
    got = render.csv_bytes(frame)
    assert got.startswith(b"job_id,user,gpus,gpu_hours,share,completed,note\n")
    assert got.count(b"\n") == rows + 1
    back, expected = (pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""])
                      for data in (got, frame.to_csv(index=False).encode()))
    pd.testing.assert_frame_equal(back, expected)


def test_a_value_arrow_cannot_write_plainly_falls_back_to_pandas(monkeypatch):
    monkeypatch.setattr(render, "LARGE_CSV_ROWS", 10)
    frame = _frame(40)
    frame.loc[33, "note"] = 'a, "quoted"\nname'
    assert render.csv_bytes(frame) == frame.to_csv(index=False).encode()


@pytest.mark.parametrize("rows", [9, 57])
def test_context_columns_as_with_context_appends_them(rows, monkeypatch):
    """The context columns of a long table are constant Arrow columns, not n objects each: the same text as
    the frame with_context gives (None as empty, a table's own column of that name kept)."""
    monkeypatch.setattr(render, "LARGE_CSV_ROWS", 10)
    frame = _frame(rows).assign(cluster=lambda f: [f"c{i}" for i in range(len(f))])
    context = {"cluster": "alpine", "period_start": "2026-11-01T00:00:00+00:00", "period_end": None,
               "generated_at": "2026-12-01T00:00:00+00:00"}
    got = render.csv_bytes(frame, context)
    expected = render.with_context(frame, context).to_csv(index=False).encode()
    assert got.split(b"\n", 1)[0] == expected.split(b"\n", 1)[0]
    back, want = (pd.read_csv(io.BytesIO(data), keep_default_na=False, na_values=[""]) for data in (got, expected))
    pd.testing.assert_frame_equal(back, want)
