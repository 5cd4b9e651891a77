"""gpuclust.output.to_json writes report.json (and every plane's --json) with its own indented writer: the text
must be json.dumps(_clean(obj), indent=2, default=_default, ensure_ascii=False)'s, byte for byte, surrogates
escaped alike."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone
from enum import IntEnum
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.output import _SURROGATE, _clean, _default, to_json


def _reference(obj: Any) -> str:
    text = json.dumps(_clean(obj), indent=2, sort_keys=False, default=_default, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Level(IntEnum):
    HIGH = 3


TRICKY: dict[Any, Any] = {
    "scalars": [1, -0.0, 2.5, 1e300, 10**30, True, False, None, Level.HIGH, "é\n\"\\\t\x00\u2028", "\udcff"],
    "not finite": [math.nan, math.inf, -math.inf, np.float64("nan"), np.float64(-np.inf)],
    "numpy": [np.float64(1.25), np.int64(3), np.float32(0.1), np.float32("nan"), np.bool_(True), np.array([1.5])],
    "containers": [(), [], {}, (1, (2, {})), [[[[]]]], {3}, frozenset(), {math.nan}],
    7: "int key", 2.5: "float key", math.nan: "nan key", True: "true key", None: "none key",
    "times": {"dt": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "d": date(2026, 1, 2)},
    "nested": {"x": {"y": [{"z": [], "w": {}}, "a", [1, {"b": math.nan}]]}},
}


@pytest.mark.parametrize("obj", [TRICKY, 1, "x", None, 2.5, math.nan, [], {}, [math.nan], np.float64(2.0), (1,),
                                 np.float32("nan"), {"": ""}], ids=repr)
def test_to_json_is_json_dumps_text(obj: Any) -> None:
    assert to_json(obj) == _reference(obj)


@pytest.mark.parametrize("obj", [{(1, 2): 1}, {"a": object()}, [object()]], ids=repr)
def test_to_json_refuses_what_json_refuses(obj: Any) -> None:
    with pytest.raises(TypeError) as ours:
        to_json(obj)
    with pytest.raises(TypeError) as theirs:
        _reference(obj)
    assert str(ours.value) == str(theirs.value)


_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(), st.floats(width=32).map(np.float32), st.integers(-2**63, 2**63 - 1).map(np.int64))
_KEYS = st.one_of(st.text(), st.integers(), st.floats(), st.booleans(), st.none())
_DOCS = st.recursive(_LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                                                      st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_DOCS)
def test_to_json_matches_json_on_any_document(obj: Any) -> None:
    assert to_json(obj) == _reference(obj)
