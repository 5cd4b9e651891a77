"""The unit of a configured GPU price and the price of one GPU-equivalent hour (glossary "GPU-equivalent"), without
numpy: the report's figures (metrics.attempts, economics, findings) and `gpuclust job` (which starts without
numpy) price alike."""

from __future__ import annotations

from gpuclust.config import SiteConfig
from gpuclust.slurm import gpushare


def price_unit(config: SiteConfig, gpu_type: str) -> str:
    """The unit of `[gpu_type NAME] price_per_gpu_hour`: its price_unit where given; else `slice` for a MIG type (a
    profile name or a gpu_share below one GPU: `[gpu_type 1g.10gb] price_per_gpu_hour = 0.40` is that slice's
    hour), `card` for a whole GPU."""
    given = config.gpu_type_price_units.get(gpu_type)
    if given is not None:
        return given
    return "slice" if gpushare.is_mig_type(gpu_type, config.gpu_type_shares) else "card"


def card_price(config: SiteConfig, gpu_type: str | None, partition: str | None) -> float | None:
    """The price of one GPU-equivalent hour of `gpu_type` on `partition`: the configured price, or where the
    type's price is per slice (price_unit), that price / the slice's share (so that GPU-equivalent hours x it =
    device-hours x the slice price). None: unpriced (or a slice of unknown share)."""
    price = config.price_per_gpu_hour(gpu_type, partition)
    if price is None or not gpu_type or gpu_type not in config.gpu_type_prices \
            or price_unit(config, gpu_type) != "slice":
        return price
    share, _ = gpushare.type_share(gpu_type, config.gpu_type_shares)
    return None if share is None else price / float(share)
