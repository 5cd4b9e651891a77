"""Lemon nodes of a partition, from the accounting store (gpuclust.accounting's lemon_nodes; the rule and the test
are figures/lemon.py's):

  lemon.nodes   WARNING  nodes of the partition that failed production jobs beyond chance over the lookback
                         (--lemon-days, else [lemon] audit_lookback: 7 days),
                         each with its failures, the test and its p-value, and the `accept submit` line
                OK       none (or: not checked, no store / no site config)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from gpuclust.config.lemon import LemonConfig
from gpuclust.config.site import SiteConfig
from gpuclust.errors import InputError
from gpuclust.exitcodes import Nagios

from .findings import Finding

DEFAULT_LOOKBACK_DAYS = LemonConfig.audit_lookback_s // 86400  # ([lemon] audit_lookback's default)

Lemons = Callable[[SiteConfig, datetime, datetime], dict[str, Any]]


def _store_lemons(site: SiteConfig, since: datetime, until: datetime) -> dict[str, Any]:
    from gpuclust.accounting import lemon_nodes

    return lemon_nodes(site, since, until)


def _span(seconds: int) -> str:
    """The lookback as the messages say it: "7 day(s)" (whole days), else hours, minutes or seconds."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}(s)"
    return f"{seconds} s"


def check_lemons(site: SiteConfig | None, nodes: Sequence[str], now: datetime, days: int | None = None,
                 *, source: Lemons = _store_lemons) -> list[Finding]:
    """`days`: the lookback (None: the site's [lemon] audit_lookback)."""
    if site is None:
        return [Finding.make("lemon", Nagios.OK, "lemon nodes not checked: no site config")]
    lookback_s = days * 86400 if days is not None else site.lemon.audit_lookback_s
    try:
        section = source(site, now - timedelta(seconds=lookback_s), now)
    except (InputError, OSError) as exc:
        return [Finding.make("lemon", Nagios.OK, f"lemon nodes not checked: the accounting store cannot be read "
                                                 f"({exc}); `gpuclust report fetch` fills it")]
    mine = set(nodes)
    named = [r for r in section.get("nodes", []) if r["suspect"] and r["node"] in mine]
    if not named:
        tested = sum(1 for r in section.get("nodes", []) if r["node"] in mine)
        return [Finding.make("lemon.nodes", Nagios.OK, f"no lemon node over the last {_span(lookback_s)} "
                                                       f"({tested} node(s) with production GPU jobs; {section['test']})")]
    lines = [r for r in section.get("findings", []) if r.split(":", 1)[0] in {x["node"] for x in named}]
    again = [line for line in (section.get("reaccept") or {}).get("suspects", [])]
    return [Finding.make("lemon.nodes", Nagios.WARNING,
                         f"{len(named)} lemon node(s) over the last {_span(lookback_s)}: " + "; ".join(lines)
                         + ("; re-accept: " + " && ".join(again) if again else ""),
                         [x["node"] for x in named])]
