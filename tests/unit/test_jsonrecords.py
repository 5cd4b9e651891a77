"""figures.jsonrecords.records reads numeric, boolean and text columns column by column (tolist); every other
frame goes through to_dict. Both give the same rows: what to_dict(orient="records") gives, made plain."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from gpuclust.accounting.figures.jsonrecords import _plain, records


def _reference(df: pd.DataFrame) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (duplicate columns)
        return [{str(k): _plain(v) for k, v in row.items()} for row in df.to_dict(orient="records")]


FRAMES = [
    pd.DataFrame({"a": ["x", None, "z"], "b": [1, 2, 3], "c": [1.5, np.nan, np.inf], "d": [True, False, True],
                  "e": np.array([1, 2, 3], dtype=np.uint8), "f": np.array([1.5, 2, 3], dtype=np.float32)}),
    pd.DataFrame({"a": pd.array(["x", None, "y"], dtype="string"), 1: [1, 2, 3], 2.5: [0.1, 0.2, -0.0]}),
    pd.DataFrame({"a": pd.array(["x", None], dtype=pd.StringDtype("python")), "b": [2**62, -1]}),
    pd.DataFrame({"a": pd.array(["x", None], dtype=pd.StringDtype("pyarrow")), "b": [1e300, -1e-300]}),
    pd.DataFrame({"a": []}), pd.DataFrame(), pd.DataFrame(index=[1, 2]),
    pd.DataFrame({"a": [1, 2], "t": pd.to_datetime(["2026-01-01", None], utc=True), "o": [np.int64(1), "x"]}),
    pd.DataFrame({"a": pd.array([1, None], dtype="Int64"), "b": pd.Categorical(["x", "y"])}),
    pd.DataFrame([[1, 2]], columns=["a", "a"]),
    pd.DataFrame({"a": [1, 2]}, index=[5, 3]),
]


@pytest.mark.parametrize("frame", FRAMES, ids=range(len(FRAMES)))
def test_records_are_to_dicts_rows_made_plain(frame: pd.DataFrame) -> None:
    got, want = records(frame), _reference(frame)
    assert [list(r) for r in got] == [list(r) for r in want]
    for g, w in zip(got, want, strict=True):
        for key in g:
            assert type(g[key]) is type(w[key]), key
            assert g[key] == w[key] or (g[key] != g[key] and w[key] != w[key]), key
