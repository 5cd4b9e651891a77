"""`gpuclust config`: validate and inspect the site config."""

from __future__ import annotations

import dataclasses

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json
from gpuclust.cli.params import HintPath
from gpuclust.config import check_config, find_config_path, load_config
from gpuclust.exitcodes import EXIT_INPUT


@click.group("config")
def group() -> None:
    """Validate and show the site config."""


@group.command("check")
@click.argument("file", required=False, type=HintPath(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print problems as JSON.")
@pass_app
def check(app: AppContext, file: str | None, as_json: bool) -> None:
    """Validate FILE (default: --config, $GPUCLUST_CONFIG, /etc/gpuclust/site.conf).

    Prints each problem as file:line with a suggestion for unknown keys; exits 0 when clean, 2 otherwise.
    """
    path = find_config_path(file or app.config_path)
    problems = check_config(path)
    if as_json:
        echo_json({"file": path, "ok": not problems, "problems": [dataclasses.asdict(p) for p in problems]})
    else:
        for problem in problems:
            click.echo(str(problem), err=True)
        if not problems:
            click.echo(f"{path}: OK")
    if problems:
        raise SystemExit(EXIT_INPUT)


@group.command("show")
@pass_app
def show(app: AppContext) -> None:
    """Print the loaded config, with defaults filled in, as JSON."""
    echo_json(dataclasses.asdict(load_config(app.config_path)))
