"""`gpuclust report`: the sacct -> pandas accounting pipeline."""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path

import click

from gpuclust.accounting import memory, pipeline
from gpuclust.accounting.fetch import VIA
from gpuclust.accounting.metrics import check_target
from gpuclust.accounting.period import PERIODS, resolve_period
from gpuclust.accounting.render import parse_formats, prepare_out_dir, write_report
from gpuclust.accounting.text import decode_delimiter
from gpuclust.accounting.usage import check_slurm_version
from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, format_table
from gpuclust.cli.params import TIME, TIME_HELP
from gpuclust.errors import InputError
from gpuclust.exitcodes import EXIT_NEGATIVE
from gpuclust.timespec import TimeSpec

_PERIOD_OPTIONS = [
    click.option("--since", type=TIME, help=f"Period start. {TIME_HELP} Without --until the period runs to now, "
                                             "as with sacct -S."),
    click.option("--until", type=TIME, help="Period end (exclusive), same forms as --since (default: now)."),
    click.option("--period", "period_name", type=click.Choice(PERIODS),
                 help="A named period instead of --since/--until (days in the site time zone)."),
]


def _period_options(func):  # type: ignore[no-untyped-def]
    for option in reversed(_PERIOD_OPTIONS):
        func = option(func)
    return func


def _check_target(value: float | None) -> float | None:
    try:
        check_target(value)
    except InputError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None
    return value


def _named(parse):  # type: ignore[no-untyped-def]
    """A click callback running a library parser, so its error names the option (exit 2, 3 in a Nagios check)."""
    def callback(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        try:
            parse(value)
        except InputError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return callback


@click.group("report")
def group() -> None:
    """Accounting: fetch sacct records and build queue-wait, retry and cost reports."""


@group.command("fetch")
@_period_options
@click.option("--via", type=click.Choice(VIA), default="parsable", show_default=True,
              help="Read sacct as --parsable2 text (multi-character delimiter) or as --json (22.05's JSON loses exit codes; "
                   "a JSON shape gpuclust was not proven on is refused, use parsable).")
@click.option("--json", "as_json", is_flag=True, help="Print the fetch summary as JSON.")
@pass_app
def fetch_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None, via: str,
              as_json: bool) -> None:
    """Pull `sacct -a -D -X` in UTC day windows into the Parquet store under STATE_DIR/accounting.

    Re-fetching a window replaces its days in one atomic swap (default period: yesterday).
    """
    config = app.config
    memory.keep_freed_memory()
    period = resolve_period(since, until, period_name, config.timezone) or resolve_period(
        None, None, "yesterday", config.timezone)
    assert period is not None
    days = period.utc_days()
    if sys.stderr.isatty() and not as_json:
        with click.progressbar(length=len(days), label="sacct day windows", file=sys.stderr) as bar:
            def tick(_day: date) -> None:
                bar.update(1)

            summary = pipeline.fetch(app.slurm, config, period, via=via, progress=tick)
    else:
        summary = pipeline.fetch(app.slurm, config, period, via=via)
    for problem in summary.problems[:50]:
        click.echo(f"warning: {problem}", err=True)
    for problem in summary.economics.get("problems", [])[:50]:
        click.echo(f"warning: {problem}", err=True)
    if as_json:
        echo_json(summary.as_dict())
    else:
        click.echo(format_table(["day", "rows", "rejected_rows", "steps_dropped"],
                                [[d["day"], d["rows"], d["rejected_rows"], d["steps_dropped"]] for d in summary.days]))
        click.echo(f"store: {summary.store}")


@group.command("build")
@_period_options
@click.option("--input", "input_path", type=click.Path(dir_okay=False, exists=True),
              help="Read this sacct dump (--parsable2 with a header, or --json) instead of the store.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False, exists=True),
              help="With --input: `sacctmgr show event -P format=Event,NodeName,Start,End,State,User,TRES,Reason` "
                   "output for the period (capacity unknown without it).")
@click.option("--nodes", "nodes_path", type=click.Path(dir_okay=False, exists=True),
              help="With --input: `scontrol show node -o` output (each node's GPUs and partitions).")
@click.option("--sreport", "sreport_path", type=click.Path(dir_okay=False, exists=True),
              help="With --input: `sreport -P -n cluster utilization -T gres/gpu -t minutes` output (cross-check).")
@click.option("--reasons", "reasons_path", type=click.Path(dir_okay=False, exists=True),
              help="With --input: `sacct -a -D -X -P -n -o JobIDRaw,Start,Reason` output (queue wait by pending reason). "
                   "Not needed when the dump has the Reason column (`report fetch` asks for it); where both give a "
                   "job's reason, this file's wins.")
@click.option("--slurmctld-log", "log_path", type=click.Path(dir_okay=False),
              help="With --input: slurmctld's log (its rotated .1 and .gz siblings are read too) for the refusals.")
@click.option("--delimiter", default="|", show_default=True, callback=_named(decode_delimiter),
              help="Delimiter of a --parsable2 --input file; backslash escapes allowed, e.g. '\\x1f|\\x1e'.")
@click.option("--format", "formats", default="html,csv,json,prom", show_default=True, callback=_named(parse_formats),
              help="Comma-separated outputs: html, csv, json, prom, parquet.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output directory (default: site report_dir).")
@click.option("--target", type=float, callback=lambda _c, _p, value: _check_target(value),
              help="Completed runs per month to size for, >= 0 (default: site config).")
@click.option("--top", type=click.IntRange(1, 10000), default=20, show_default=True,
              help="How many top failures to list.")
@click.option("--strict", is_flag=True, help="Exit 2 if any input row could not be parsed (default: report and go on).")
@click.option("--json", "as_json", is_flag=True, help="Print report.json's content on stdout too.")
@click.option("--user", "users", multiple=True, help="Only jobs of this user (repeat for several).")
@click.option("--account", "accounts", multiple=True, help="Only jobs of this account (repeat for several).")
@click.option("--partition", "partitions", multiple=True, help="Only jobs of this partition (repeat for several).")
@click.option("--slurm-version", "slurm_version", callback=_named(check_slurm_version),
              help="With --input: the Slurm release that wrote a text dump (e.g. 23.11), which picks how "
                   "gres/gpuutil becomes per-GPU utilisation (summed over the GPUs since 24.05). "
                   "A --json document names its own.")
@pass_app
def build_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None,
              input_path: str | None, events_path: str | None, nodes_path: str | None, sreport_path: str | None,
              reasons_path: str | None, log_path: str | None, delimiter: str, formats: str, out_dir: str | None,
              target: float | None,
              top: int, strict: bool, as_json: bool, users: tuple[str, ...], accounts: tuple[str, ...],
              partitions: tuple[str, ...], slurm_version: str | None) -> None:
    """Build report.html, CSV tables, report.json and gpuclust.prom for a period.

    Reads the store (fetch first) or --input. Rows that cannot be parsed are listed with their line numbers.
    """
    config = app.config
    memory.keep_freed_memory()
    fmts = parse_formats(formats)
    delim = decode_delimiter(delimiter)
    out = Path(out_dir or config.report_dir)
    prepare_out_dir(out)  # an unwritable --out fails now, not after the work
    period = resolve_period(since, until, period_name, config.timezone)
    if period is None and not input_path:
        period = resolve_period(None, None, "yesterday", config.timezone)
    if not input_path and (events_path or nodes_path or sreport_path or log_path or reasons_path):
        raise InputError("--events, --nodes, --sreport, --reasons and --slurmctld-log go with --input (the store "
                         "has its own)")
    report, _ = pipeline.build(config, period, input_path=input_path, delimiter=delim,
                               target=target, top=top, events_path=events_path, nodes_path=nodes_path,
                               sreport_path=sreport_path, log_path=log_path, reasons_path=reasons_path,
                               only=pipeline.JobFilter(users, accounts, partitions), slurm_version=slurm_version)
    info = report.data["input"]
    for problem in info.get("problems", []):
        click.echo(f"warning: {problem}", err=True)
    left = info.get("left_out") or {}
    if left.get("rows"):
        app.note(f"note: {left['rows']} row(s) are no attempt and count nowhere: {left['running']} running "
                   f"(End Unknown), {left['not_started']} not started, {left['no_allocation']} ended without "
                   "an allocation (report.json input.left_out)")
    if strict and info.get("rejected_rows"):
        raise InputError(f"{info['rejected_rows']} input row(s) could not be parsed (see warnings above)")
    written = write_report(report, out, fmts)
    if as_json:
        echo_json(report.data)
    else:
        t = report.data["totals"]
        cost = "n/a (no price configured)" if t["cost"] is None else f"{t['cost']:.6g}"
        if t["runs"]:
            click.echo(f"period {report.data['period']['start']} .. {report.data['period']['end']}: "
                       f"{t['runs']} runs, {t['completed']} completed, {t['attempts']} attempts, "
                       f"{t['gpu_hours']:.3f} GPU-hours, cost {cost}")
        for path in written:
            click.echo(f"wrote {path}")
    if not report.data["totals"]["runs"]:
        # An empty period is an answer, but not the one a nightly job expects: say so, on stderr, and exit 1.
        click.echo(f"no job attempts in the period {report.data['period']['start']} .. "
                   f"{report.data['period']['end']} (an empty report was written)", err=True)
        raise SystemExit(EXIT_NEGATIVE)
