"""The `gpuclust` command. Library errors become messages and exit codes here, and only here.

Exit codes (README "Exit codes"): 0 success, 1 a negative answer, 2 bad input, usage or config, 3 Slurm
failing, 70 a bug. `audit` and `accept report` are Nagios checks: anything that keeps them from answering
(usage, config, input, Slurm) is 3 UNKNOWN, never 2, which Nagios reads as CRITICAL.
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
from typing import Any

# The imports below (click, the site config's schema, the Slurm edge) make only long-lived objects: the cyclic
# collector's passes over them while they load, and after, are wasted start-up time (BENCHMARKS.md, "the small
# build's start"). So it is off while they load, and what they made is frozen (never scanned again).
_collecting = gc.isenabled()
gc.disable()
try:
    import click

    from gpuclust import __version__
    from gpuclust.cli.context import AppContext
    from gpuclust.cli.params import add_common_options, config_option, quiet_option
    from gpuclust.errors import ConfigError, GpuclustError, InputError, SlurmError, UnsafeValueError
    from gpuclust.exitcodes import EXIT_INPUT, EXIT_INTERNAL, EXIT_SLURM, Nagios
    from gpuclust.output import terminal_lines
    from gpuclust.slurm.runner import DEFAULT_TIMEOUT_S
finally:
    gc.freeze()
    if _collecting:
        gc.enable()

NAGIOS_COMMANDS = (("audit",), ("accept", "report"))
"""Commands (and groups) with Nagios exit codes; the rest use the general table."""

DEBUG_ENV = "GPUCLUST_DEBUG"
"""Set to 1 to get the traceback of an unexpected error instead of the one-line exit 70."""


def is_nagios(path: tuple[str, ...]) -> bool:
    return any(path[: len(prefix)] == prefix for prefix in NAGIOS_COMMANDS)


class CliError(click.ClickException):
    def __init__(self, message: str, exit_code: int, nagios: bool = False):
        # An error names what it was given (a file's line, a node's answer): escaped for the terminal, its
        # own line breaks kept.
        super().__init__(terminal_lines(message.split("\n")))
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it a class default; per-instance is intended
        self.nagios = nagios

    def show(self, file: Any = None) -> None:
        if self.nagios:  # a Nagios check answers on stdout: the status line, then the detail
            click.echo(f"UNKNOWN - {self.format_message()}", file=file)
        else:
            super().show(file)


def exit_code_for(exc: BaseException, nagios: bool = False) -> int:
    """The one map from errors to exit codes (README "Exit codes"; 3 doubles as Nagios UNKNOWN)."""
    if isinstance(exc, (click.UsageError, ConfigError, InputError, UnsafeValueError, OSError)):
        return int(Nagios.UNKNOWN) if nagios else EXIT_INPUT
    if isinstance(exc, SlurmError):
        return EXIT_SLURM
    if isinstance(exc, click.ClickException):
        return int(Nagios.UNKNOWN) if nagios else exc.exit_code
    return EXIT_INTERNAL


def _bug_report_hint() -> str:
    try:
        from importlib.metadata import metadata

        for entry in metadata("gpuclust").get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if label.strip().lower() in ("issues", "bug tracker"):
                return f"please report it at {url.strip()}"
    except Exception:  # noqa: BLE001 - not installed as a distribution: the generic hint
        pass
    return "please report it to the gpuclust issue tracker"


def internal_error_message(exc: BaseException) -> str:
    where = ""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    text = " ".join(str(exc).split()) or "(no message)"
    return (f"internal error{where}: {type(exc).__name__}: {text} -- a bug in gpuclust {__version__}; "
            f"{_bug_report_hint()} with the command line ({DEBUG_ENV}=1 shows the traceback)")


# The subcommands: name -> (module under gpuclust.cli, attribute), in the order they were always registered
# (`commands` keeps it). Each module is imported when its command is looked up, so that `gpuclust report build`
# does not import the audit, acceptance and policy code (BENCHMARKS.md "Whole-process `report build`").
LAZY_COMMANDS = {"config": ("config", "group"), "report": ("report", "group"), "policy": ("policy", "group"),
                 "accept": ("accept", "group"), "audit": ("audit", "group"), "guard": ("guard", "guard"),
                 "man": ("docs", "man"), "job": ("job", "job"), "health": ("health", "group")}


class GpuclustGroup(click.Group):
    """The root group. Its subcommands load when looked up (get_command: the one a command line names; `commands`
    and list_commands: all of them, as --help, the man pages and completion need)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._lazy = list(LAZY_COMMANDS)
        super().__init__(*args, **kwargs)

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        if self._lazy:
            for name in list(self._lazy):
                self._load(name)
            order = [*LAZY_COMMANDS, *(name for name in self._commands if name not in LAZY_COMMANDS)]
            loaded = {name: self._commands[name] for name in order if name in self._commands}
            self._commands.clear()
            self._commands.update(loaded)
        return self._commands

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._commands = value

    def _load(self, name: str) -> None:
        if name not in self._lazy:
            return
        self._lazy.remove(name)
        module, attribute = LAZY_COMMANDS[name]
        command = getattr(importlib.import_module(f"gpuclust.cli.{module}"), attribute)
        if name == "config":
            from gpuclust.cli import docs

            command.add_command(docs.config_example)
        add_common_options(command)
        self._commands[name] = command

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        name = name or cmd.name
        if name is None:
            raise TypeError("Command has no name.")
        if name in self._lazy:
            self._lazy.remove(name)
        self._commands[name] = cmd

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        self._load(cmd_name)
        return self._commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self._commands, *self._lazy})

    def invoke(self, ctx: click.Context) -> Any:
        app = ctx.ensure_object(AppContext)
        try:
            return super().invoke(ctx)
        except click.UsageError as caught:
            exc = _global_option_error(caught)
            path = _context_path(exc.ctx) if exc.ctx is not None else app.command_path
            if is_nagios(path):
                click.echo(f"UNKNOWN - {terminal_lines(exc.format_message().split(chr(10)))}")
                exc.exit_code = exit_code_for(exc, nagios=True)  # type: ignore[misc]  # per instance, as in CliError
            if exc is not caught:
                raise exc from None
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            if is_nagios(app.command_path):
                raise CliError(exc.format_message(), exit_code_for(exc, True), nagios=True) from exc
            raise
        except GpuclustError as exc:
            nagios = is_nagios(app.command_path)
            raise CliError(str(exc), exit_code_for(exc, nagios), nagios) from exc
        except BrokenPipeError:
            raise  # the reader went away (`| head`): main() dies of SIGPIPE like any filter, never a message
        except OSError as exc:
            # A file the command was told to read or write that the system refuses (an --out under a file, under
            # /proc, without permission; a full disk): bad input, named, never a traceback.
            where = f"{exc.filename}: " if exc.filename else ""
            nagios = is_nagios(app.command_path)
            raise CliError(f"{where}{exc.strerror or exc}", exit_code_for(exc, nagios), nagios) from exc
        except Exception as exc:
            if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
                raise
            raise CliError(internal_error_message(exc), EXIT_INTERNAL) from exc


def _global_option_error(exc: click.UsageError) -> click.UsageError:
    """A global option (`--slurm-timeout`, `--version`) given after the subcommand: say where it goes, instead of
    click's "no such option" and its guess at a near name (accept report: "did you mean --timeout?")."""
    if not isinstance(exc, click.NoSuchOption) or exc.ctx is None:
        return exc
    name = exc.option_name.split("=", 1)[0]
    if name not in {o for p in cli.params for o in (*p.opts, *p.secondary_opts)}:
        return exc
    where = " ".join(_context_path(exc.ctx))
    return click.NoSuchOption(exc.option_name, f"{name} is a global option: put it before the subcommand "
                                               f"(gpuclust {name} ... {where} ...)", ctx=exc.ctx)


def _context_path(ctx: click.Context) -> tuple[str, ...]:
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


@click.group(cls=GpuclustGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--slurm-timeout",
    type=click.FloatRange(min=1),
    envvar="GPUCLUST_SLURM_TIMEOUT",
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds each Slurm command may take before its process group is killed (keep it under a Nagios "
    "check's own timeout: Slurm clients retry an unreadable slurm.conf for 60 s). Env: GPUCLUST_SLURM_TIMEOUT.",
)
@click.option(
    "--backend",
    type=click.Choice(("cli", "pyslurm")),
    envvar="GPUCLUST_SLURM_BACKEND",
    default=None,
    help="How Slurm is read: cli (the Slurm commands; the default and primary interface) or pyslurm, which only "
    "`audit partition` uses, for its nodes (with --source auto); every other read, and every other command, "
    "stays on the commands. pyslurm must be built against this site's Slurm (README \"pyslurm\"). "
    "Default: the site config's [slurm] backend, else cli. Env: GPUCLUST_SLURM_BACKEND.",
)
@click.version_option(__version__, prog_name="gpuclust")
@click.pass_context
def cli(ctx: click.Context, slurm_timeout: float, backend: str | None) -> None:
    """gpuclust: prove that a Slurm GPU cluster turns GPUs into useful work.

    Acceptance jobs (accept), submit policy (policy), accounting reports (report), partition audit (audit),
    and site config validation (config).

    \b
    Exit codes: 0 success, 1 a negative answer, 2 bad input or config, 3 Slurm failing, 70 a bug in gpuclust.
    `audit` and `accept report` are Nagios checks: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (usage and
    config errors included).
    Shell completion (bash): eval "$(_GPUCLUST_COMPLETE=bash_source gpuclust)" (zsh_source, fish_source).
    """
    app = ctx.ensure_object(AppContext)
    app.slurm_timeout = slurm_timeout
    app.backend = backend


cli.params.insert(0, config_option(envvar=True))
cli.params.insert(1, quiet_option())


def main() -> None:
    """The console script. A closed stdout (`gpuclust ... | head`) ends it the way it ends `cat`: by SIGPIPE
    (exit status 141 in the shell), silently; never as exit 1 with a traceback or a made-up error."""
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        cli.main(prog_name="gpuclust")
    except SystemExit as done:
        _end(done.code)


def _end(code: Any) -> None:
    """End the process as the interpreter's own exit would, less its teardown: the other threads joined, the
    exit handlers run (temporary directories, logging), stdout and stderr flushed, then the exit status, without
    freeing every object of the imported libraries one by one (which a report command's exit spent most of its
    last tens of milliseconds on: BENCHMARKS.md, "Whole-process `report build`")."""
    import atexit
    import sys
    import threading

    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # (what the interpreter does with any other SystemExit value)
        print(code, file=sys.stderr)
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # (closed: nothing left to write; the status says how it went)
            pass
    os._exit(status & 0xFF)


if __name__ == "__main__":  # pragma: no cover
    main()
