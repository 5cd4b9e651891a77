"""`gpuclust config`: validate and inspect the site config."""

from __future__ import annotations

import dataclasses

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, echo_text
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
    queries = None if problems else _telemetry_queries(path)
    if as_json:
        doc = {"file": path, "ok": not problems, "problems": [dataclasses.asdict(p) for p in problems]}
        echo_json(doc if queries is None else {**doc, "telemetry_queries": queries})
    else:
        for problem in problems:
            echo_text(str(problem), err=True)
        if not problems:
            click.echo(f"{path}: OK")
        if queries is not None:
            click.echo(f"{path}: [telemetry] a report period makes at most {queries['per_day']} Prometheus "
                       f"queries for a day, {queries['per_7_days']} for 7 days, {queries['per_30_days']} for 30 "
                       f"days ({queries['per_window']} query_range per window of {queries['window_hours']:g} h, plus "
                       f"{queries['node_queries']} node queries), whatever the number of jobs")
    if problems:
        raise SystemExit(EXIT_INPUT)


def _telemetry_queries(path: str) -> dict[str, float] | None:
    """The Prometheus queries a report period makes ([telemetry] step and chunk_hours), or None when the
    Prometheus source is off."""
    from gpuclust.config.telemetry import (
        DCGM_QUERIES_PER_WINDOW,
        MAX_STEPS_PER_QUERY,
        NODE_QUERIES,
        query_count,
    )

    tel = load_config(path).telemetry
    if not tel.enabled:
        return None
    day = 86400.0
    return {
        "per_day": query_count(day, tel.step_s, tel.chunk_hours),
        "per_7_days": query_count(7 * day, tel.step_s, tel.chunk_hours),
        "per_30_days": query_count(30 * day, tel.step_s, tel.chunk_hours),
        "per_window": DCGM_QUERIES_PER_WINDOW,
        "window_hours": min(tel.chunk_hours, MAX_STEPS_PER_QUERY * tel.step_s / 3600),
        "node_queries": NODE_QUERIES,
    }


@group.command("show")
@pass_app
def show(app: AppContext) -> None:
    """Print the loaded config, with defaults filled in, as JSON."""
    echo_json(dataclasses.asdict(load_config(app.config_path)))
