"""The label scan of engine.lua (issue 18: one plain find per key, the value checked in place) on the edges of the
comment grammar, Lua against the Python twin: tokens separated by , ; and the six blanks; key=value split at the
token's first '='; the first token with the key and a non-empty value wins; labels reported in the policy's order;
`*` never matches a NUL byte. Keys may hold Lua pattern magic ('-', '.', '%') and be prefixes or suffixes of others."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.policy.compile import CompiledPolicy, LabelRule
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import render_lua

SEPARATORS = [",", ";", " ", "\t", "\n", "\r", "\v", "\f"]


def _rule(key: str, globs: tuple[str, ...]) -> LabelRule:
    return LabelRule(key, globs, ", ".join(globs) or "any value")


# Keys that are prefixes / suffixes of each other, keys with Lua pattern magic, and every kind of value rule:
# exact values, exact values with globs, globs only (open and closed ends, '?', inner '*'), '*', any value.
RULES = (
    _rule("ab", ("x", "y-*")),
    _rule("b", ("p*", "*q", "r?s", "t*u*v")),
    _rule("a", ()),
    _rule("a-b", ("1", "*")),
    _rule("a.b", ("z*", "*@*")),
    _rule("a%b", ("%*", "*.%")),
    _rule("ab.c", ("k*", "l*", "m*", "n?*")),
)
POLICY = CompiledPolicy(source="scan.conf", labels=RULES)
LUA, PY = LuaPolicy(render_lua(POLICY)), Evaluator(POLICY)
GOOD = {"ab": "x", "b": "p1", "a": "v", "a-b": "1", "a.b": "z", "a%b": "%", "ab.c": "k"}


def _agree(comment: str) -> None:
    job = {"user_name": "alice", "comment": comment}
    got, want = LUA.submit(job), PY.submit(job)
    assert (got.rc, got.message) == (want.rc, None if want.accepted else want.message), repr(comment)


def _comment(values: dict[str, str], sep: str = " ") -> str:
    return sep.join(f"{k}={v}" for k, v in values.items())


def test_good_comment_is_accepted_with_every_separator():
    for sep in SEPARATORS + [",;", " \t\n"]:
        comment = _comment(GOOD, sep)
        assert PY.submit({"user_name": "alice", "comment": comment}).accepted
        _agree(comment)


def test_prefix_and_suffix_keys_do_not_stand_in_for_each_other():
    for key in GOOD:
        rest = {k: v for k, v in GOOD.items() if k != key}
        _agree(_comment(rest))  # the label missing: its prefix/suffix keys must not count
        for other in ("x" + key, key + "x", "x" + key + "x", key[:-1], key[1:]):
            _agree(_comment({**rest, other: GOOD[key]}))


def test_first_non_empty_value_wins():
    for key in GOOD:
        rest = {k: v for k, v in GOOD.items() if k != key}
        for first, second in itertools.product(["", "bad", GOOD[key]], ["", "bad", GOOD[key]]):
            for sep in (" ", ",", ";", "\t"):
                _agree(_comment(rest) + f"{sep}{key}={first}{sep}{key}={second}")
                _agree(f"{key}={first}{sep}{key}={second}{sep}" + _comment(rest))


def test_equals_inside_values_and_keys():
    _agree(_comment({**GOOD, "ab": "x=y"}))
    _agree(_comment({**GOOD, "b": "p=q"}))
    _agree(_comment({**GOOD, "a": "="}))
    _agree("ab=x=" + " " + _comment({k: v for k, v in GOOD.items() if k != "ab"}))
    _agree("=ab=x " + _comment({k: v for k, v in GOOD.items() if k != "ab"}))  # key '' then value 'ab=x'
    _agree("a=ab=x " + _comment({k: v for k, v in GOOD.items() if k not in ("ab", "a")}))


def test_long_tokens_without_equals():
    for n in (1, 100, 10_000, 200_000):
        _agree("x" * n + " " + _comment(GOOD))
        _agree(_comment(GOOD) + " " + "ab" * n)
        _agree("ab" * n + "=y " + _comment(GOOD))
    _agree(("ab" * 50_000) + "=x")  # one long token whose key is not a label


def test_nul_bytes():
    for key, value in itertools.product(GOOD, ["\x00", "p\x00", "\x00q", "z\x00", "a\x00@b", "k\x00", "x\x00",
                                              "1\x00", "%\x00", "r\x00s"]):
        _agree(_comment({**GOOD, key: value}))
    _agree("\x00 " + _comment(GOOD))
    _agree("ab\x00=x " + _comment(GOOD))
    _agree(_comment(GOOD) + " \x00")


def test_the_first_failing_label_in_policy_order_decides():
    for bad in itertools.permutations(GOOD, 2):
        values = {**GOOD, bad[0]: "nope?", bad[1]: ""}
        _agree(_comment(values))
        _agree(_comment(dict(reversed(list(values.items())))))


token = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from([*GOOD, "", "abc", "bb", "a%", "%b"]),
              st.text(st.sampled_from(list("xyzpqrstuvklmn1%.@=-\x00é")), max_size=6)),
    st.text(st.sampled_from(list("ab=.%-x\x00")), max_size=8),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(token, st.sampled_from(SEPARATORS + ["", ",,"])), max_size=10))
def test_random_comments_agree(parts):
    _agree("".join(t + s for t, s in parts))
