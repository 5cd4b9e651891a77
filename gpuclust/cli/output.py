"""The CLI's printing: JSON and tables come from gpuclust.output (the planes use it too)."""

from __future__ import annotations

from typing import Any

import click

from gpuclust.output import format_table, to_json

__all__ = ["echo_json", "format_table", "to_json"]


def echo_json(obj: Any) -> None:
    click.echo(to_json(obj))
