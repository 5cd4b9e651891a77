"""The CLI's printing: JSON and tables come from gpuclust.output (the planes use it too)."""

from __future__ import annotations

from typing import Any

import click

from gpuclust.output import format_table, terminal_lines, to_json

__all__ = ["echo_json", "echo_text", "format_table", "to_json", "warn"]


def echo_text(text: str, err: bool = False) -> None:
    """Text for a person, which may carry what a node or a user wrote (a job name, a label, a log line): every
    line terminal_safe, so an escape sequence in it is shown, never obeyed by the terminal."""
    click.echo(terminal_lines(str(text).split("\n")), err=err)


def warn(problem: object) -> None:
    echo_text(f"warning: {problem}", err=True)


def echo_json(obj: Any) -> None:
    click.echo(to_json(obj))
