"""Site config: typed objects loaded from an INI file with file:line errors."""

from gpuclust.config.site import (
    AccountConfig,
    GpuLimits,
    PartitionConfig,
    PolicyConfig,
    QosConfig,
    SiteConfig,
    check_config,
    find_config_path,
    load_config,
    parse_config,
)

__all__ = [
    "AccountConfig",
    "GpuLimits",
    "PartitionConfig",
    "PolicyConfig",
    "QosConfig",
    "SiteConfig",
    "check_config",
    "find_config_path",
    "load_config",
    "parse_config",
]
