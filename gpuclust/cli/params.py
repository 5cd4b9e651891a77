"""Parameter types and options every command shares: the one time grammar as a click type, `--config` and
`--quiet` accepted before or after the subcommand, and shell completion of names from the site config."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem

from gpuclust.cli.context import AppContext
from gpuclust.timespec import FORMS, TimeSpec, parse_time

if TYPE_CHECKING:
    from gpuclust.nagiosrange import NagiosRange


class TimeType(click.ParamType):
    """A point in time in gpuclust's one grammar (gpuclust.timespec); errors name the option."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> TimeSpec:
        if isinstance(value, TimeSpec):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "TIME"

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        words = ("now", "today", "yesterday", "24h", "7d", "30d", "now-7days")
        return [CompletionItem(w) for w in words if w.startswith(incomplete)]


TIME = TimeType()
TIME_HELP = f"Forms: {FORMS} (site time zone)."


# ---- click's own types, with a what-to-do -----------------------------------------------------------------
# click says what is wrong ("File 'x' does not exist.") but not what to do; every gpuclust message must, so the
# commands use these subclasses, which append the next step to click's message (its first words unchanged).


def _path_hint(message: str) -> str:
    if message.endswith("does not exist."):
        return "Check the spelling (a relative path starts at the current directory) and give an existing path."
    if message.endswith("is a directory."):
        return "Give a file, not a directory."
    if message.endswith("is a file."):
        return "Give a directory, not a file."
    return "Check the path and its permissions (ls -l)."


class HintPath(click.Path):
    """click.Path whose refusals say what to do."""

    def fail(self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> Any:
        super().fail(f"{message} {_path_hint(message)}", param, ctx)


class HintChoice(click.Choice):
    """click.Choice whose refusal says to pick one of the listed values."""

    def fail(self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> Any:
        super().fail(f"{message.rstrip('.')}: use one of those (see --help).", param, ctx)


class HintIntRange(click.IntRange):
    """click.IntRange whose refusal says to give a value in range."""

    def fail(self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> Any:
        super().fail(f"{message} Give a whole number in that range.", param, ctx)


class HintFloatRange(click.FloatRange):
    """click.FloatRange whose refusal says to give a value in range."""

    def fail(self, message: str, param: click.Parameter | None = None, ctx: click.Context | None = None) -> Any:
        super().fail(f"{message} Give a number in that range.", param, ctx)


# ---- names completed from the site config -----------------------------------------------------------------


class RangeType(click.ParamType):
    """A Nagios threshold range (gpuclust.nagiosrange) for -w/-c; a bad one is a usage error naming the option."""

    name = "range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> NagiosRange:
        from gpuclust.nagiosrange import NagiosRange, parse_range

        if isinstance(value, NagiosRange):
            return value
        try:
            return parse_range(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class CheckTimedOut(BaseException):  # noqa: N818 - BaseException: no `except Exception` on the way may swallow it
    """A check's -t/--timeout ran out."""


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise CheckTimedOut


def check_timeout_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`-t/--timeout SECONDS` of a Nagios check (`what`: "check", "audit"), ended by `check_deadline`."""
    return click.option(
        "-t", "--timeout", "timeout", type=HintIntRange(min=1), default=None, metavar="SECONDS",
        help=f"End with UNKNOWN ('timed out after N s', exit 3) when the whole {what} takes longer; keep it under "
             "the Nagios service check timeout. Default: no overall limit (each Slurm command has --slurm-timeout).")


@contextlib.contextmanager
def check_deadline(seconds: int | None) -> Iterator[None]:
    """Raise CheckTimedOut when the block runs past `seconds` (None: no limit), so that a Nagios check ends in
    UNKNOWN before the service check timeout kills it without a word. SIGALRM: the CLI's main thread only."""
    if seconds is None:
        yield
        return
    import signal

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _config_for_completion(ctx: click.Context) -> Any:
    """The site config the command line names (or the default one), or None: completion never fails aloud."""
    app = ctx.find_object(AppContext)
    path = app.config_path if app else None
    from gpuclust.config import load_config

    try:
        return load_config(path)
    except Exception:  # noqa: BLE001 - a missing or broken config completes nothing
        return None


def _parents(ctx: click.Context) -> list[click.Context]:
    out = []
    while ctx.parent is not None:
        ctx = ctx.parent
        out.append(ctx)
    return out


def _names(attr: str) -> Callable[[click.Context, click.Parameter, str], list[CompletionItem]]:
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
        config = _config_for_completion(ctx)
        names = sorted(getattr(config, attr, {}) or {}) if config is not None else []
        return [CompletionItem(n) for n in names if n.startswith(incomplete)]

    complete.__name__ = f"complete_{attr}"
    return complete


complete_partition = _names("partitions")
complete_account = _names("accounts")


# ---- --config and --quiet anywhere ----------------------------------------------------------------------------


def _app(ctx: click.Context) -> AppContext:
    return ctx.ensure_object(AppContext)


def set_config(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--config X, before the subcommand or after it (the later one wins); names where it came from."""
    app = _app(ctx)
    app.command_path = _path(ctx)
    if value is not None:
        source = ctx.get_parameter_source(param.name or "config_path")
        if value != app.config_path:
            app.reset_config()
        app.config_path = value
        app.config_origin = "$GPUCLUST_CONFIG" if source is click.core.ParameterSource.ENVIRONMENT else "--config"
    return value


class _Discard(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


def set_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """--quiet (for cron): nothing on stdout and no notes; warnings and errors still go to stderr."""
    app = _app(ctx)
    if value and not app.quiet:
        app.quiet = True
        ctx.find_root().with_resource(contextlib.redirect_stdout(_Discard()))
    return value


def _path(ctx: click.Context) -> tuple[str, ...]:
    names = [c.info_name or "" for c in reversed([ctx, *_parents(ctx)])]
    return tuple(names[1:])


def config_option(envvar: bool = False) -> click.Option:
    return click.Option(
        ["--config", "config_path"], type=HintPath(dir_okay=False), expose_value=False, is_eager=True,
        envvar="GPUCLUST_CONFIG" if envvar else None, callback=set_config,
        help="Site config (default: $GPUCLUST_CONFIG, then /etc/gpuclust/site.conf); before or after the "
             "subcommand." if envvar else "Site config, as gpuclust --config (either place works).")


def quiet_option() -> click.Option:
    return click.Option(["--quiet", "-q"], is_flag=True, expose_value=False, callback=set_quiet,
                        help="Print nothing on success (for cron): no stdout, no notes; warnings and errors "
                             "still go to stderr, and the exit code tells the rest.")


def add_common_options(command: click.Command) -> None:
    """--config and --quiet on `command` and every command under it (`gpuclust report build --config X`)."""
    names = {n for p in command.params for n in p.opts}
    if "--config" not in names:
        command.params.append(config_option())
    # A command that passes unknown options on (policy check: sbatch's own options) keeps -q/--quiet for them
    # (sbatch's -q is --qos); `gpuclust -q policy check ...` still works.
    if "--quiet" not in names and not command.context_settings.get("ignore_unknown_options"):
        command.params.append(quiet_option())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_common_options(sub)


def explicit_config_missing(app: AppContext) -> str | None:
    """Who named a config file that does not exist ("--config" or "$GPUCLUST_CONFIG"), else None."""
    path = app.config_path or os.environ.get("GPUCLUST_CONFIG") or None
    if path is None or Path(path).exists():
        return None
    return app.config_origin or ("--config" if app.config_path else "$GPUCLUST_CONFIG")
