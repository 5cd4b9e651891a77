"""Nagios threshold ranges, as the Monitoring Plugins guidelines define them for -w/--warning and -c/--critical
(https://www.monitoring-plugins.org/doc/guidelines.html#THRESHOLDFORMAT).

`[@]start:end`: start defaults to 0 (`10` is `0:10`), `~` is minus infinity, an empty end is plus infinity.
A value outside the range alerts; with a leading `@`, a value inside it (both ends included) alerts.

    10      alert if < 0 or > 10
    10:     alert if < 10
    ~:10    alert if > 10
    10:20   alert if < 10 or > 20
    @10:20  alert if >= 10 and <= 20
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuclust.exitcodes import Nagios

RANGE_HELP = ("a Nagios range: N (alert above N), N: (below N), ~:N (above N), A:B (outside), @A:B (inside); "
              "give one of those forms, e.g. -w 0 -c 2")


@dataclass(frozen=True)
class NagiosRange:
    """A parsed Nagios range: [start, end], whether it alerts inside or outside, and the text as given."""

    start: float
    end: float
    inside: bool  # `@`: alert when the value lies inside [start, end]
    text: str  # as given, for performance data

    def alerts(self, value: float) -> bool:
        within = self.start <= value <= self.end
        return within if self.inside else not within

    def __str__(self) -> str:
        return self.text


def _number(text: str, what: str, given: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{given!r}: {what} {text!r} is not a number; expected {RANGE_HELP}") from None
    if math.isnan(value):
        raise ValueError(f"{given!r}: {what} is NaN; expected {RANGE_HELP}")
    return value


def parse_range(text: str) -> NagiosRange:
    """A Nagios range; ValueError naming the text and the grammar when it is not one."""
    given = text
    body = text.strip()
    inside = body.startswith("@")
    if inside:
        body = body[1:]
    if not body:
        raise ValueError(f"{given!r}: empty range; expected {RANGE_HELP}")
    if ":" in body:
        low, _, high = body.partition(":")
        if ":" in high:
            raise ValueError(f"{given!r}: more than one ':'; expected {RANGE_HELP}")
        start = -math.inf if low == "~" else _number(low, "start", given) if low else 0.0
        end = _number(high, "end", given) if high else math.inf
    else:
        start, end = 0.0, _number(body, "end", given)
    if start > end:
        raise ValueError(f"{given!r}: start {start:g} is above end {end:g}; expected {RANGE_HELP}")
    return NagiosRange(start, end, inside, given.strip())


def check_value(value: float, warning: NagiosRange | None, critical: NagiosRange | None) -> Nagios:
    """CRITICAL when the critical range alerts, else WARNING when the warning range does, else OK."""
    if critical is not None and critical.alerts(value):
        return Nagios.CRITICAL
    if warning is not None and warning.alerts(value):
        return Nagios.WARNING
    return Nagios.OK


@dataclass(frozen=True)
class Thresholds:
    """A check's -w/--warning and -c/--critical ranges on one gated figure (None: that level is not gated)."""

    warning: NagiosRange | None = None
    critical: NagiosRange | None = None

    def judge(self, value: float) -> Nagios:
        return check_value(value, self.warning, self.critical)

    def as_dict(self) -> dict[str, str | None]:
        return {"warning": None if self.warning is None else str(self.warning),
                "critical": None if self.critical is None else str(self.critical)}

    @classmethod
    def given(cls, warning: NagiosRange | None, critical: NagiosRange | None) -> Thresholds | None:
        """None when neither range was given: the check keeps its own severities."""
        return None if warning is None and critical is None else cls(warning, critical)
