"""Config defaults are stated once, in the key definitions: the typed config objects take theirs from there."""

from __future__ import annotations

import dataclasses

from gpuclust.config.site import (
    PARTITION,
    POLICY,
    SITE,
    PartitionConfig,
    PolicyConfig,
    SiteConfig,
    parse_config,
)

# config object field -> (section, key) where the names differ
RENAMED = {"retry_window_s": "retry_window"}


def test_dataclass_defaults_come_from_the_keys() -> None:
    checked = 0
    for cls, spec in ((SiteConfig, SITE), (PartitionConfig, PARTITION), (PolicyConfig, POLICY)):
        for f in dataclasses.fields(cls):
            key = spec.key(RENAMED.get(f.name, f.name))
            if key is None or f.default is dataclasses.MISSING or key.default is None:
                continue
            assert f.default == key.default, (cls.__name__, f.name)
            checked += 1
    assert checked >= 15


def test_absent_keys_take_the_key_defaults() -> None:
    config = parse_config("[site]\ncluster_name = c\n\n[partition gpu]\ngpus_per_node = 4\n", "t.conf")
    part = config.partitions["gpu"]
    assert part.busbw_tolerance == PARTITION.default("busbw_tolerance") == 0.15
    assert part.busbw_min_size == 64 * 1024**2
    assert config.acceptance_stale_days == SITE.default("acceptance_stale_days") == 7
    assert config.results_dir == "/var/lib/gpuclust/results"  # derived from state_dir's default
    assert config.policy.fail_mode == POLICY.default("fail_mode") == "closed"
