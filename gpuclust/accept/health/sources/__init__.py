"""The health sources, one module each (net.py holds three: net, snmp and qdisc are judged together).

A source module holds everything about its source: the parser (text in, frozen dataclasses with `as_dict()`
out), the collector (reads the node through HealthPaths, returns ok(...) or, through guard(), unavailable(...)
with a reason), the rules (add HealthFindings to a Judge from the before/after snapshots), its snapshot data
shape (in its docstring, and as the JSON Schema `Source.shape` that collect.load_snapshots checks every
snapshot file against), and a `Source` entry that ties them to the source's name. The shared pieces are in
gpuclust.accept.health.kit; collect.py and rules.py only iterate over SOURCES below.

Parser conventions: every value a source reports as unknown ("N/A", "Not Supported", "[N/A]", "Unknown Error",
absent) becomes None, never 0 (a counter nobody can read is not a counter that reads zero), and so does a
number past 64 bits (kit.bounded_int/to_int/to_float: never int() on unbounded text); output that is not
what the source writes raises HealthParseError naming the source and the line or element. The shapes were
checked against recorded output from real machines (tests/data/accept/health/SOURCES.md).

To add a source:
  1. write sources/<name>.py: parser, collect_<name>(paths, ...), judge_<name>(j, before, after), its data's
     SHAPE (gpuclust.accept.health.shape), and `SOURCE = Source("<name>", collect, judge, shape=SHAPE)`
     (on_request=True for a diagnostic only run when asked);
  2. add it to SOURCES below (the order is the snapshot's and the "unavailable" notes');
  3. add the name to gpuclust.config.health.HEALTH_SOURCES (unless on_request) and to site.example.conf's
     `require` comment, and any thresholds its rules read to the [health] section there (a HealthConfig field
     each) and to site.example.conf's [health], with why (tests/unit/test_health_sources.py fails until they
     agree);
  4. record a real sample of its output under tests/data/accept/health (its origin in SOURCES.md) and add the
     source's reading of it to the fixture snapshots of test_health_collect.py and test_health_rules.py (both
     fail until every snapshot source is there, and until its reading fits its shape).
The snapshot runs as the job's user (one srun step per node): a source that needs root (a device node, an
admin command) comes back unavailable there, so say so in its docstring and in README's table.
Only where the source needs more: a new root or binary is a HealthPaths field (kit.py), whose variable
GPUCLUST_HEALTH_<FIELD> goes in HealthPaths' docstring and README's list of them; a new finding class goes in
kit.DRAIN_ORDER at its place in the cause order if it can be CRITICAL (the drains of `accept report --drain`
and `health check` follow), else in kit.NOTE_CLASSES, with its action in actions.CLASS_ACTIONS and its row in
README's table of finding classes (tests name what is missing); a new snapshot option goes in kit.Request and
__main__.py. `gpuclust health check` (node.py) runs nvidia_smi, xid and infiniband only, the sources a Prolog
can afford, with state kept between checks: a source that belongs at every job boundary is wired in there.
"""

from __future__ import annotations

from gpuclust.accept.health.kit import Source
from gpuclust.accept.health.sources import dcgm, infiniband, net, nvbandwidth, nvidia_smi, xid

# The registry, in snapshot order.
SOURCES: tuple[Source, ...] = (net.NET, net.SNMP, net.QDISC, infiniband.SOURCE, nvidia_smi.SOURCE, xid.SOURCE,
                               dcgm.SOURCE, nvbandwidth.SOURCE)

# The names every snapshot has (the on-request diagnostics aside): what [health] require may name.
SNAPSHOT_SOURCES = tuple(s.name for s in SOURCES if not s.on_request)

# The GPU's own sources are judged first (their findings lead a node's list), then the rest in registry order.
_JUDGED_FIRST = ("xid", "nvidia_smi")
JUDGE_ORDER: tuple[Source, ...] = tuple(sorted(
    SOURCES, key=lambda s: _JUDGED_FIRST.index(s.name) if s.name in _JUDGED_FIRST else len(_JUDGED_FIRST)))

__all__ = ["JUDGE_ORDER", "SNAPSHOT_SOURCES", "SOURCES"]
