"""`gpuclust accept`: acceptance jobs and their report."""

from __future__ import annotations

import click


@click.group("accept")
def group() -> None:
    """Acceptance jobs: submit all_reduce, pairwise and storage benchmarks; gate their results."""
