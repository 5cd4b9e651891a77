"""`gpuclust job JOBID [JOBID ...]`: one job's use of its GPUs, with advice (gpuclust.accounting.jobview).

Imports no pandas, numpy or pyarrow (tests/unit/test_cli_startup.py): a user asks about one job and waits for it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, echo_text, warn
from gpuclust.cli.params import HintPath
from gpuclust.errors import InputError
from gpuclust.exitcodes import EXIT_INPUT


def _delimiter(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    # (ingest.text.decode_delimiter's rules; importing it loads pyarrow)
    try:
        decoded = value.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in value else value
    except UnicodeError as exc:
        raise click.BadParameter(f"bad delimiter {value!r}: {exc}; use a literal string or the escapes \\t, "
                                 "\\xHH, \\\\") from None
    if not decoded or "\n" in decoded or "\r" in decoded:
        raise click.BadParameter(f"bad delimiter {value!r}: give a non-empty string without newlines, e.g. '|'")
    return decoded


def _slurm_version(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    from gpuclust.accounting.figures.jobview import rule_for_version

    if value is not None and not ctx.resilient_parsing and rule_for_version(value) is None:
        raise click.BadParameter(f"{value!r} is not a Slurm release (e.g. 23.11, 24.05.3)")
    return value


def _config(app: AppContext, input_path: str | None):  # type: ignore[no-untyped-def]
    """The site config; with --input and no config file anywhere, the defaults (as `report build --input`)."""
    from gpuclust.config.site import DEFAULT_CONFIG_PATH, SiteConfig, find_config_path

    if (input_path and app.config_path is None and app.config_origin is None
            and find_config_path() == DEFAULT_CONFIG_PATH and not Path(DEFAULT_CONFIG_PATH).exists()):
        app.note(f"note: no site config ({find_config_path()} not found): defaults, no prices (no cost figures)")
        app.config = SiteConfig(path="(no site config: defaults)", cluster_name="unknown")
    return app.config


@click.command("job")
@click.argument("job_ids", nargs=-1, required=True, metavar="JOBID...")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON document: {\"jobs\": [one object per job: source, gpu_use figures, gpus, "
                   "findings], \"errors\": [...], \"warnings\": [...]} (README \"gpuclust job\").")
@click.option("--input", "input_path", type=HintPath(dir_okay=False, exists=True),
              help="Read this sacct dump (--parsable2 with its header line, at least JobID, State, Start, End; "
                   "without -X, so that the steps' MaxRSS and usage TRES come too) instead of running sacct.")
@click.option("--delimiter", default=None, callback=_delimiter,
              help="Delimiter of the --input dump; backslash escapes allowed, e.g. '\\x1f|\\x1e' (default: told "
                   "from the header line: gpuclust's '\\x1f|\\x1e', else '|').")
@click.option("--slurm-version", "slurm_version", callback=_slurm_version,
              help="With --input: the Slurm release that wrote the dump (e.g. 23.11), which picks how gres/gpuutil "
                   "becomes per-GPU utilisation (without Prometheus or a stored summary).")
@click.option("--nodes", "nodes_path", type=HintPath(dir_okay=False, exists=True),
              help="`scontrol show node -o` output for the partitions' CPUs and memory per GPU (default: scontrol "
                   "is asked, except with --input).")
@pass_app
def job(app: AppContext, job_ids: tuple[str, ...], as_json: bool, input_path: str | None, delimiter: str | None,
        slurm_version: str | None, nodes_path: str | None) -> None:
    """Show how jobs used their GPUs: per job, per node and per GPU, with advice.

    JOBID is a job (123: an array's every task, a het job's every component), an array task (123_4) or a het
    component (123+1); running and ended jobs. sacct runs as you: you see your own jobs. GPU figures come from
    Prometheus ([telemetry]), else the summary `report fetch` stored, else Slurm's usage TRES; each job says which.
    A job id sacct does not know is named on stderr and exits 2; the others are still shown.
    """
    from gpuclust.accounting.jobview import show_jobs

    config = _config(app, input_path)
    text = None
    if input_path is not None:
        try:
            text = Path(input_path).read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"{input_path}: {exc.strerror or exc}") from None
    nodes_text = Path(nodes_path).read_text(encoding="utf-8", errors="replace") if nodes_path else None
    answer = show_jobs(config, job_ids, client=None if text is not None else app.slurm, input_text=text,
                       input_name=input_path or "sacct", delimiter=delimiter, slurm_version=slurm_version,
                       nodes_text=nodes_text)
    for line in answer.warnings[:10]:
        warn(line)
    if len(answer.warnings) > 10:
        warn(f"{len(answer.warnings) - 10} more warning(s) (--json lists them)")
    if as_json:
        echo_json(answer.as_dict())
    elif not app.quiet:
        from gpuclust.accounting.output.jobview_render import render_text

        width = shutil.get_terminal_size((80, 24)).columns if sys.stdout.isatty() else None
        echo_text("\n\n".join(render_text(doc, width) for doc in answer.jobs))
    for error in answer.errors:
        echo_text(f"error: {error['error']}", err=True)
    if answer.errors:
        raise SystemExit(EXIT_INPUT)
