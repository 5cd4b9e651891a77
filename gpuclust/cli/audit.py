"""`gpuclust audit`: partition health, homogeneity and limits."""

from __future__ import annotations

import click


@click.group("audit")
def group() -> None:
    """Audit GPU partitions: homogeneity, drains, limits, acceptance freshness (Nagios exit codes)."""
