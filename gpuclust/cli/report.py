"""`gpuclust report`: the sacct -> pandas accounting pipeline."""

from __future__ import annotations

import click


@click.group("report")
def group() -> None:
    """Accounting: fetch sacct records and build queue-wait, retry and cost reports."""
