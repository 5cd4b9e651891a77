"""Label globs become Lua patterns matched in place on the comment, filed by their first byte (issue 18: fewer
calls and no value string per job in Lua). The split must decide exactly as the full glob (Python's glob_to_regex): every kind,
odd bytes, UTF-8, values shorter than the literals, and NUL bytes (which `*` never matches)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.config import parse_config
from gpuclust.policy.compile import compile_policy, glob_checks
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import render_lua

GLOBS = {
    "pre": "proj-*, res-*, p*, long-prefix-*",
    "suf": "*-prod, *.exp, *d",
    "both": "lab-*-dev, a*a, é*é",
    "inf": "*gpu*, *%*, *x.y*",
    "any": "*",
    "stars": "**, x**",
    "mixed": "team1, ext-*, *-guest, ?x?, x*y*z, g-20??-*, *mid*, e*e",
    "sep": "a b*, c;*, *, d",
}

CONF = "\n".join([
    "[site]", "cluster_name = globs", "",
    "[policy]", f"required_labels = {', '.join(GLOBS)}",
    *(f"label.{k} = {v}" for k, v in GLOBS.items()),
]) + "\n"

VALUES = ["proj-", "proj-1", "proj", "res-x", "p", "pq", "long-prefix", "long-prefix-", "x-prod", "-prod", "prod",
          "a.exp", ".exp", "d", "dd", "lab--dev", "lab-dev", "lab-x-dev", "a", "aa", "aba", "éé", "é", "éxé", "gpu",
          "agpub", "gp", "%", "a%b", "x.y", "xxy", "team1", "team", "ext-", "x-guest", "axa", "xx", "xyz", "xaybzc",
          "x", "g-2026-1", "g-20a-1", "ee", "e", "emide", "a\x00", "proj-\x00", "\x00-prod", "g\x00pu", "x\x00y\x00z",
          "lab-\x00-dev", "é\x00é", "\x00"]

_POLICY = compile_policy(parse_config(CONF, "globs.conf"))
_LUA, _PY = LuaPolicy(render_lua(_POLICY)), Evaluator(_POLICY)


def _job(values: dict[str, str]) -> dict:
    return {"user_name": "alice", "comment": " ".join(f"{k}={v}" for k, v in values.items())}


def _agree(values: dict[str, str]) -> None:
    job = _job(values)
    got, want = _LUA.submit(job), _PY.submit(job)
    assert (got.rc, got.message) == (want.rc, None if want.accepted else want.message), job


def test_every_value_in_every_label_agrees():
    good = {"pre": "proj-1", "suf": "a.exp", "both": "aa", "inf": "gpu", "any": "v", "stars": "x", "mixed": "team1", "sep": "d"}
    assert _PY.submit(_job(good)).accepted
    for key, value in itertools.product(GLOBS, VALUES):
        _agree({**good, key: value})


def test_split_kinds():
    g = glob_checks(("proj-*", "res-*", "*-prod", "lab-*-dev", "*", "?x?", "a**", "a b*", "**"))
    assert g.any and g.suffix == (b"-prod",)  # '*-prod': its literal, compared at the value's end
    # '?x?' alone is wild; 'a b*' holds a separator: it matches no value
    assert sorted(g.by_first) == [ord("a"), ord("l"), ord("p"), ord("r")]
    assert g.by_first[ord("a")] == (b"^a",)  # a glob ending in '*' stops where its last '*' starts (no end check)
    assert g.wild == (b"^[^,; \t\n\r\x0b\x0c%z]x[^,; \t\n\r\x0b\x0c%z]%f[,; \t\n\r\x0b\x0c%z]",)
    assert glob_checks(("*.exp", "*x*", "*?y", "*")).suffix == (b".exp",)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(list(GLOBS)), st.one_of(
    st.sampled_from(VALUES),
    st.text(alphabet="apxyz-.é%\x00d", min_size=1, max_size=8),
)))
def test_random_values_agree(values):
    good = {"pre": "proj-1", "suf": "a.exp", "both": "aa", "inf": "gpu", "any": "v", "stars": "x", "mixed": "team1", "sep": "d"}
    _agree({**good, **values})
