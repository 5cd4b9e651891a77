"""[guard]: defaults, typed values, and the problems `config check` names with file:line."""

from __future__ import annotations

import pytest

from gpuclust.config import parse_config
from gpuclust.errors import ConfigError

BASE = "[site]\ncluster_name = lab\n"


def _problems(guard: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(BASE + "[guard]\n" + guard, "site.conf")
    return [str(p) for p in caught.value.problems]


def test_defaults_and_values() -> None:
    site = parse_config(BASE)
    g = site.guard
    assert (g.action, g.warn_after_s, g.cancel_after_s, g.lookback_s, g.idle_threshold_pct) == ("warn", 3600, 7200,
                                                                                                 10800, None)
    site = parse_config(BASE + "[guard]\nwarn_after = 1m\nsecond_warn_after = 90s\ncancel_after = 2m\n"
                        "lookback = 5m\naction = cancel\nexempt_users = alice, bob\nidle_threshold = 5%\n"
                        "address_template = {user}@example.org\nsmtp_port = 2525\nuser_optout_label = guard=off\n")
    g = site.guard
    assert (g.warn_after_s, g.second_warn_after_s, g.cancel_after_s, g.lookback_s) == (60, 90, 120, 300)
    assert g.action == "cancel" and g.exempt_users == ("alice", "bob") and g.idle_threshold_pct == 5.0
    assert g.mail.address_template == "{user}@example.org" and g.mail.smtp_port == 2525
    assert g.user_optout_label == "guard=off"


def test_unknown_template_field_is_named_with_file_and_line() -> None:
    (problem,) = _problems("warn_after = 1h\naddress_template = {login}@example.org\n")
    assert problem.startswith("site.conf:5:") and "unknown field {login}" in problem


@pytest.mark.parametrize(("text", "line", "words"), [
    ("address_template = example.org\n", 4, "must name {user}"),
    ("warn_after = 2h\ncancel_after = 1h\nlookback = 3h\n", 5, "cancel_after (3600 s) must be longer"),
    ("cancel_after = 4h\nlookback = 3h\n", 5, "lookback (10800 s) must be at least"),
    ("second_warn_after = 30m\n", 4, "second_warn_after must lie between"),
    ("action = kill\n", 4, "expected"),
    ("smtp_port = 70000\n", 4, "TCP port"),
    ("mail_from = nobody\n", 4, "address like"),
])
def test_problems(text: str, line: int, words: str) -> None:
    problems = _problems(text)
    assert any(p.startswith(f"site.conf:{line}:") and words in p for p in problems), problems
