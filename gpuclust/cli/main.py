"""The `gpuclust` command. Library errors become messages and exit codes here, and only here."""

from __future__ import annotations

import sys
from typing import Any

import click

from gpuclust import __version__
from gpuclust.cli.context import AppContext
from gpuclust.errors import ConfigError, GpuclustError, InputError, SlurmError, UnsafeValueError
from gpuclust.exitcodes import EXIT_INPUT, EXIT_INTERNAL, EXIT_SLURM
from gpuclust.slurm.runner import DEFAULT_TIMEOUT_S


class CliError(click.ClickException):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it a class default; per-instance is intended


def exit_code_for(exc: GpuclustError) -> int:
    """The one map from library errors to exit codes (3 doubles as Nagios UNKNOWN)."""
    if isinstance(exc, (ConfigError, InputError, UnsafeValueError)):
        return EXIT_INPUT
    if isinstance(exc, SlurmError):
        return EXIT_SLURM
    return EXIT_INTERNAL


class GpuclustGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GpuclustError as exc:
            raise CliError(str(exc), exit_code_for(exc)) from exc
        except OSError as exc:
            # A file the command was told to read or write that the system refuses (an --out under a file, under
            # /proc, without permission; a full disk): bad input, named, never a traceback.
            where = f"{exc.filename}: " if exc.filename else ""
            raise CliError(f"{where}{exc.strerror or exc}", EXIT_INPUT) from exc


@click.group(cls=GpuclustGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar="GPUCLUST_CONFIG",
    help="Site config (default: $GPUCLUST_CONFIG, then /etc/gpuclust/site.conf).",
)
@click.option(
    "--slurm-timeout",
    type=click.FloatRange(min=1),
    envvar="GPUCLUST_SLURM_TIMEOUT",
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds each Slurm command may take before its process group is killed (keep it under a Nagios "
    "check's own timeout: Slurm clients retry an unreadable slurm.conf for 60 s).",
)
@click.version_option(__version__, prog_name="gpuclust")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, slurm_timeout: float) -> None:
    """gpuclust: prove that a Slurm GPU cluster turns GPUs into useful work.

    Acceptance jobs (accept), submit policy (policy), accounting reports (report), partition audit (audit),
    and site config validation (config).
    """
    app = ctx.ensure_object(AppContext)
    if config_path:
        app.config_path = config_path
    app.slurm_timeout = slurm_timeout


def _register() -> None:
    from gpuclust.cli import accept, audit, config, policy, report

    for module in (config, report, policy, accept, audit):
        cli.add_command(module.group)


_register()


def main() -> None:
    try:
        cli.main(prog_name="gpuclust")
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
