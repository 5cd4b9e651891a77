"""The health source registry against the names the config accepts: one list of sources, kept in two places
because the config layer may not import the acceptance plane (test_import_graph)."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from gpuclust.accept.health import collect, sources
from gpuclust.accept.health.actions import CLASS_ACTIONS
from gpuclust.accept.health.kit import CLASSES, DRAIN_ORDER, HealthPaths
from gpuclust.config.health import HEALTH, HEALTH_SOURCES, parse_sources

TOP = Path(__file__).resolve().parents[2]


def test_config_accepts_exactly_the_snapshot_sources() -> None:
    names = [s.name for s in sources.SOURCES]
    assert len(names) == len(set(names))
    assert HEALTH_SOURCES == sources.SNAPSHOT_SOURCES == collect.SOURCES
    assert parse_sources(" ".join(reversed(HEALTH_SOURCES))) == tuple(reversed(HEALTH_SOURCES))


def test_a_plain_snapshot_has_the_config_sources_and_the_diagnostics_only_when_asked(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    paths = HealthPaths(**{f.name: missing for f in fields(HealthPaths)})
    plain = collect.snapshot("before", "1", paths=paths, node="n1")
    assert tuple(plain["sources"]) == HEALTH_SOURCES
    asked = collect.snapshot("before", "1", paths=paths, node="n1", dcgm_level=1, nvbandwidth=True)
    assert tuple(asked["sources"]) == (*HEALTH_SOURCES, "dcgm", "nvbandwidth")
    assert all(src["status"] == "unavailable" for src in asked["sources"].values())
    after = collect.snapshot("after", "1", paths=paths, node="n1", dcgm_level=1, nvbandwidth=True)
    assert tuple(after["sources"]) == HEALTH_SOURCES


def test_every_health_path_override_is_documented() -> None:
    # HealthPaths.from_env derives each variable from the field name, so no source names it literally.
    readme = (TOP / "README.md").read_text(encoding="utf-8")
    for f in fields(HealthPaths):
        name = f"GPUCLUST_HEALTH_{f.name.upper()}"
        assert f"`{name}`" in readme, f"README's list of health path variables lacks `{name}`"
        assert name in (HealthPaths.__doc__ or ""), f"kit.HealthPaths' docstring lacks {name}"
        assert getattr(HealthPaths.from_env({name: "/x"}), f.name) == "/x"
        assert getattr(HealthPaths.from_env({name: ""}), f.name) == f.default


def test_every_finding_class_has_a_row_in_the_readme_table() -> None:
    """README "Hardware health": the table of finding classes is what an admin reads a drain reason against."""
    readme = (TOP / "README.md").read_text(encoding="utf-8")
    table = readme.split("#### Hardware health", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    named = {cls for row in table.splitlines() for cls in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert set(CLASSES) <= named, f"README's health table lacks {sorted(set(CLASSES) - named)}"


def test_site_example_lists_the_sources_require_may_name() -> None:
    text = (TOP / "site.example.conf").read_text(encoding="utf-8")
    listed = re.search(r"Sources whose absence is UNKNOWN \(some of ([a-z_, ]+)\)", text)
    assert listed, "site.example.conf's [health] require comment lists the sources"
    assert tuple(listed.group(1).split(", ")) == HEALTH_SOURCES, \
        f"site.example.conf's [health] require comment: list {', '.join(HEALTH_SOURCES)}"


def test_every_class_that_can_drain_has_an_action() -> None:
    """A drain reason carries what to do (NVIDIA's words); Xid codes take theirs from NVIDIA's catalog."""
    acted = {key.split(":")[0] for key in CLASS_ACTIONS}
    lacking = sorted(set(DRAIN_ORDER) - acted - {"xid"})
    assert not lacking, f"gpuclust.accept.health.actions.CLASS_ACTIONS has no action for {lacking}"


def test_every_health_key_is_in_the_site_example() -> None:
    """site.example.conf is where an admin reads each [health] threshold and why it is set so."""
    text = (TOP / "site.example.conf").read_text(encoding="utf-8")
    section = text.split("\n[health]", 1)[1].split("\n[", 1)[0]
    written = set(re.findall(r"^#? ?([a-z_]+(?:\.\*)?) =", section, flags=re.M))
    keys = {key.name for key in HEALTH.keys}
    assert keys <= written, f"site.example.conf's [health] section lacks {sorted(keys - written)}"
