"""Lemon nodes of a partition, from the accounting store (gpuclust.accounting's lemon_nodes; the rule and the test
are figures/lemon.py's):

  lemon.nodes   WARNING  nodes of the partition that failed production jobs beyond chance over the lookback,
                         each with its failures, the test and its p-value, and the `accept submit` line
                OK       none (or: not checked, no store / no site config)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from gpuclust.config.site import SiteConfig
from gpuclust.errors import InputError
from gpuclust.exitcodes import Nagios

from .findings import Finding

DEFAULT_LOOKBACK_DAYS = 7

Lemons = Callable[[SiteConfig, datetime, datetime], dict[str, Any]]


def _store_lemons(site: SiteConfig, since: datetime, until: datetime) -> dict[str, Any]:
    from gpuclust.accounting import lemon_nodes

    return lemon_nodes(site, since, until)


def check_lemons(site: SiteConfig | None, nodes: Sequence[str], now: datetime, days: int = DEFAULT_LOOKBACK_DAYS,
                 *, source: Lemons = _store_lemons) -> list[Finding]:
    if site is None:
        return [Finding.make("lemon", Nagios.OK, "lemon nodes not checked: no site config")]
    try:
        section = source(site, now - timedelta(days=days), now)
    except (InputError, OSError) as exc:
        return [Finding.make("lemon", Nagios.OK, f"lemon nodes not checked: the accounting store cannot be read "
                                                 f"({exc}); `gpuclust report fetch` fills it")]
    mine = set(nodes)
    named = [r for r in section.get("nodes", []) if r["suspect"] and r["node"] in mine]
    if not named:
        tested = sum(1 for r in section.get("nodes", []) if r["node"] in mine)
        return [Finding.make("lemon.nodes", Nagios.OK, f"no lemon node over the last {days} day(s) "
                                                       f"({tested} node(s) with production GPU jobs; {section['test']})")]
    lines = [r for r in section.get("findings", []) if r.split(":", 1)[0] in {x["node"] for x in named}]
    again = [line for line in (section.get("reaccept") or {}).get("suspects", [])]
    return [Finding.make("lemon.nodes", Nagios.WARNING,
                         f"{len(named)} lemon node(s) over the last {days} day(s): " + "; ".join(lines)
                         + ("; re-accept: " + " && ".join(again) if again else ""),
                         [x["node"] for x in named])]
