"""`gpuclust report`: the sacct -> pandas accounting pipeline.

The accounting modules pull numpy, pandas and pyarrow (about a second): they are imported inside the commands
and callbacks that use them, never at the top, so that `gpuclust --help` and the other commands do not pay for
them (issue 30; tests/unit/test_cli_startup.py).
"""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from gpuclust.accounting.ingest.period import PERIODS, resolve_period
from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, echo_text, format_table, warn
from gpuclust.cli.params import TIME, TIME_HELP, HintChoice, HintIntRange, HintPath
from gpuclust.errors import InputError
from gpuclust.exitcodes import EXIT_NEGATIVE
from gpuclust.timespec import TimeSpec

if TYPE_CHECKING:
    from gpuclust.config import SiteConfig

_PERIOD_OPTIONS = [
    click.option("--since", type=TIME, help=f"Period start. {TIME_HELP} Without --until the period runs to now, "
                                             "as with sacct -S."),
    click.option("--until", type=TIME, help="Period end (exclusive), same forms as --since (default: now)."),
    click.option("--period", "period_name", type=HintChoice(PERIODS),
                 help="A named period instead of --since/--until (days in the site time zone)."),
]


VIA = ("parsable", "json")
"""gpuclust.accounting.history.fetch.VIA, spelled out: importing fetch pulls numpy and pyarrow (a test keeps them equal)."""


def _period_options(func):  # type: ignore[no-untyped-def]
    for option in reversed(_PERIOD_OPTIONS):
        func = option(func)
    return func


def _check_target(value: float | None) -> float | None:
    from gpuclust.accounting.figures.metrics import check_target

    try:
        check_target(value)
    except InputError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None
    return value


def _named(parse):  # type: ignore[no-untyped-def]
    """A click callback running a library parser, so its error names the option (exit 2, 3 in a Nagios check).
    Not run while the shell completes a word (resilient parsing): the parsers load the data libraries."""
    def callback(ctx: click.Context, _param: click.Parameter, value: str) -> str:
        if ctx.resilient_parsing:
            return value
        try:
            parse(value)
        except InputError as exc:
            raise click.BadParameter(str(exc)) from None
        return value

    return callback


def _dump_options(more: str):  # type: ignore[no-untyped-def]
    """--input, --delimiter and --slurm-version of a command that reads the store or, instead, a sacct dump as
    `report build --input` does (`more`: what the --input help adds for this command)."""
    def apply(func):  # type: ignore[no-untyped-def]
        for option in reversed((
            click.option("--input", "input_path", type=HintPath(dir_okay=False, exists=True),
                         help="Read this sacct dump (--parsable2 with its header line, or --json) instead of the "
                              "store, as `report build --input` does." + more),
            click.option("--delimiter", default=None, callback=_named(_decode_delimiter),
                         help="Delimiter of a --parsable2 --input file (default: told from the header line)."),
            click.option("--slurm-version", "slurm_version", callback=_named(_check_slurm_version),
                         help="With --input: the Slurm release that wrote a text dump (e.g. 23.11), for gres/gpuutil."),
        )):
            func = option(func)
        return func

    return apply


# The library parsers behind the option callbacks, imported when an option is parsed (not for --help).
def _decode_delimiter(text: str | None) -> str | None:
    from gpuclust.accounting.ingest.text import decode_delimiter

    return None if text is None else decode_delimiter(text)


def _parse_formats(text: str) -> tuple[str, ...]:
    from gpuclust.accounting.output.render import parse_formats

    return parse_formats(text)


def _check_slurm_version(version: str | None) -> str | None:
    from gpuclust.accounting.ingest.usage import check_slurm_version

    return check_slurm_version(version)


@click.group("report")
def group() -> None:
    """Accounting: fetch sacct records and build queue-wait, retry and cost reports."""
    from gpuclust.accounting.ingest.fast import memory

    memory.before_pyarrow_loads()  # (before any subcommand or its options load pyarrow ...)
    memory.before_numpy_loads()  # (... and numpy)
    memory.pause_collection()  # (... which make only long-lived objects: on again at the pipeline's start)
    click.get_current_context().call_on_close(memory.resume_collection)


TELEMETRY_WARNINGS_SHOWN = 10


@group.command("fetch")
@_period_options
@click.option("--via", type=HintChoice(VIA), default="parsable", show_default=True,
              help="Read sacct as --parsable2 text (multi-character delimiter) or as --json (22.05's JSON loses exit codes; "
                   "a JSON shape gpuclust was not proven on is refused, use parsable).")
@click.option("--json", "as_json", is_flag=True, help="Print the fetch summary as JSON.")
@click.option("--repair", is_flag=True,
              help="Fetch again only the stored days that cannot be read (a damaged or empty day file, another "
                   "schema, a day directory without its file, a dangling link): all of them, or those of "
                   "--since/--until/--period. Nothing to repair: nothing is fetched.")
@pass_app
def fetch_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None, via: str,
              as_json: bool, repair: bool) -> None:
    """Pull `sacct -a -D -X` in UTC day windows into the Parquet store under STATE_DIR/accounting.

    Re-fetching a window replaces its days in one atomic swap (default period: yesterday). With --repair, only
    the stored days a report could not read are fetched again (they are named; the other days stay as they are).
    """
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.ingest.fast import memory

    config = app.config
    memory.keep_freed_memory()
    given = resolve_period(since, until, period_name, config.timezone)
    period = given or resolve_period(None, None, "yesterday", config.timezone)
    assert period is not None
    days = period.utc_days()
    repaired: dict[str, str] | None = None
    if repair:
        broken = pipeline.repair_days(config, given)
        repaired = {day.isoformat(): why for day, why in broken.items()}
        for why in dict.fromkeys(broken.values()):  # (a dangling `current`: one reason for every day)
            echo_text(f"repair: {why}", err=True)
        if not broken:
            where = "of the period" if given else "stored"
            if as_json:
                echo_json({"store": str(Path(config.state_dir) / "accounting"), "days": [], "rejected_rows": 0,
                           "problems": [], "economics": {}, "repaired": {}})
            else:
                click.echo(f"nothing to repair: every day {where} reads")
            return
        days = sorted(broken)
    if sys.stderr.isatty() and not as_json:
        with click.progressbar(length=len(days), label="sacct day windows", file=sys.stderr) as bar:
            def tick(_day: date) -> None:
                bar.update(1)

            summary = pipeline.fetch(app.slurm, config, period, via=via, progress=tick, days=days)
    else:
        summary = pipeline.fetch(app.slurm, config, period, via=via, days=days)
    summary.repaired = repaired
    for problem in summary.problems[:50]:
        warn(problem)
    for problem in summary.economics.get("problems", [])[:50]:
        warn(problem)
    tel = summary.telemetry
    if tel is not None:
        listed = list(tel.get("warning_list") or [])
        for line in listed[:TELEMETRY_WARNINGS_SHOWN]:
            click.echo(f"warning: {line}", err=True)
        if tel["warnings"] > TELEMETRY_WARNINGS_SHOWN:
            click.echo(f"warning: telemetry: {tel['warnings'] - TELEMETRY_WARNINGS_SHOWN} more warning(s)"
                       + (" (--json: telemetry.warning_list)" if not as_json else ""), err=True)
    usage = sum(int(d.get("usage_warnings") or 0) for d in summary.days)
    if usage:  # (counted, not one line per row: `report build` lists the first ones)
        click.echo(f"warning: usage TRES: {usage} warning(s) in the fetched days: those jobs' utilisation is "
                   "unknown, not 0 (report build lists them in report.json gpu_use.usage_problems)", err=True)
    unknown = (summary.gpu_shares or {}).get("unknown_rows", 0)
    if unknown:  # (counted: the store names each row's reason, report build the warnings)
        click.echo(f"warning: GPU-equivalents: {unknown} stored row(s) of unknown share (never counted as whole GPUs; "
                   "column gpu_share_unknown says why, report build lists them in report.json "
                   "input.gpu_share_warnings)", err=True)
    if as_json:
        echo_json(summary.as_dict())
    else:
        click.echo(format_table(["day", "rows", "rejected_rows", "steps_dropped"],
                                [[d["day"], d["rows"], d["rejected_rows"], d["steps_dropped"]] for d in summary.days]))
        click.echo(f"store: {summary.store}")
        if tel is not None:
            click.echo(f"telemetry: {tel['summaries']} of {tel['gpu_jobs']} GPU job(s) got a stored summary "
                       f"({tel['partial']} still running: partial), {tel['kept']} stored before kept; "
                       f"{tel['unknown']} without one (from {tel['source']})")


def _build_config(app: AppContext, input_path: str | None, writes: bool = True) -> SiteConfig:
    """The site config; with --input and no config file anywhere (none named, none at the default place),
    the defaults (pipeline.default_config: no prices, so no money figures), said in a note (`writes`: the
    command writes a report, so the note says where)."""
    from gpuclust.config.site import DEFAULT_CONFIG_PATH, find_config_path

    if (input_path and app.config_path is None and app.config_origin is None
            and find_config_path() == DEFAULT_CONFIG_PATH and not Path(DEFAULT_CONFIG_PATH).exists()):
        from gpuclust.accounting import pipeline

        where = f", output in ./{pipeline.NO_CONFIG_REPORT_DIR} unless --out" if writes else ""
        app.note(f"note: no site config ({find_config_path()} not found): defaults, no prices (no cost "
                 f"figures){where}")
        app.config = pipeline.default_config()
    return app.config


@group.command("build")
@_period_options
@click.option("--input", "input_path", type=HintPath(dir_okay=False, exists=True),
              help="Read this sacct dump (--parsable2 with its header line, at least JobID, State, Start, End; or "
                   "--json) instead of the store. Needs no site config (then: defaults, no prices).")
@click.option("--events", "events_path", type=HintPath(dir_okay=False, exists=True),
              help="With --input: `sacctmgr show event -P format=Event,NodeName,Start,End,State,User,TRES,Reason` "
                   "output for the period (capacity unknown without it).")
@click.option("--nodes", "nodes_path", type=HintPath(dir_okay=False, exists=True),
              help="With --input: `scontrol show node -o` output (each node's GPUs and partitions).")
@click.option("--sreport", "sreport_path", type=HintPath(dir_okay=False, exists=True),
              help="With --input: `sreport -P -n cluster utilization -T gres/gpu -t minutes` output (cross-check).")
@click.option("--reasons", "reasons_path", type=HintPath(dir_okay=False, exists=True),
              help="With --input: `sacct -a -D -X -P -n -o JobIDRaw,Start,Reason` output (queue wait by pending reason). "
                   "Not needed when the dump has the Reason column (`report fetch` asks for it); where both give a "
                   "job's reason, this file's wins.")
@click.option("--slurmctld-log", "log_path", type=HintPath(dir_okay=False),
              help="With --input: slurmctld's log (its rotated .1 and .gz siblings are read too) for the refusals.")
@click.option("--delimiter", default=None, callback=_named(_decode_delimiter),
              help="Delimiter of a --parsable2 --input file; backslash escapes allowed, e.g. '\\x1f|\\x1e' "
                   "(default: told from the header line: gpuclust's fetch delimiter '\\x1f|\\x1e', else '|').")
@click.option("--format", "formats", default="html,csv,json,prom", show_default=True, callback=_named(_parse_formats),
              help="Comma-separated outputs: html, csv, json, prom, parquet.")
@click.option("--out", "out_dir", type=HintPath(file_okay=False),
              help="Output directory (default: site report_dir).")
@click.option("--target", type=float, callback=lambda c, _p, value: value if c.resilient_parsing else _check_target(value),
              help="Completed runs per month to size for, >= 0 (default: site config).")
@click.option("--top", type=HintIntRange(1, 10000), default=20, show_default=True,
              help="How many top failures to list.")
@click.option("--strict", is_flag=True, help="Exit 2 if any input row could not be parsed (default: report and go on).")
@click.option("--json", "as_json", is_flag=True, help="Print report.json's content on stdout too.")
@click.option("--user", "users", multiple=True, help="Only jobs of this user (repeat for several).")
@click.option("--account", "accounts", multiple=True, help="Only jobs of this account (repeat for several).")
@click.option("--partition", "partitions", multiple=True, help="Only jobs of this partition (repeat for several).")
@click.option("--slurm-version", "slurm_version", callback=_named(_check_slurm_version),
              help="With --input: the Slurm release that wrote a text dump (e.g. 23.11), which picks how "
                   "gres/gpuutil becomes per-GPU utilisation (summed over the GPUs since 24.05). "
                   "A --json document names its own.")
@pass_app
def build_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None,
              input_path: str | None, events_path: str | None, nodes_path: str | None, sreport_path: str | None,
              reasons_path: str | None, log_path: str | None, delimiter: str | None, formats: str,
              out_dir: str | None,
              target: float | None,
              top: int, strict: bool, as_json: bool, users: tuple[str, ...], accounts: tuple[str, ...],
              partitions: tuple[str, ...], slurm_version: str | None) -> None:
    """Build report.html, CSV tables, report.json and gpuclust.prom for a period.

    Reads the store (fetch first) or --input. Rows that cannot be parsed are listed with their line numbers.
    """
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.ingest.fast import memory
    from gpuclust.accounting.ingest.text import decode_delimiter
    from gpuclust.accounting.output.render import parse_formats, prepare_out_dir, write_report

    config = _build_config(app, input_path)
    memory.keep_freed_memory()
    fmts = parse_formats(formats)
    delim = None if delimiter is None else decode_delimiter(delimiter)
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
        warn(problem)
    _say_rejected(info)
    said = _say_source_warnings(report.data)
    left = info.get("left_out") or {}
    if left.get("rows"):
        app.note(f"note: {left['rows']} row(s) are no attempt and count nowhere: {left['running']} running "
                   f"(End Unknown), {left['not_started']} not started, {left['no_allocation']} never ran "
                   "(cancelled while pending) (report.json input.left_out)")
    for entry in info.get("unknown") or []:
        count = "every attempt" if entry.get("count") is None else f"{entry['count']} attempt(s)"
        app.note(f"note: unknown for {count}, no {entry['missing']}: {entry['unknown']}")
    if strict and info.get("rejected_rows"):
        raise InputError(f"{info['rejected_rows']} input row(s) could not be parsed (see warnings above): fix "
                         "those lines, or drop --strict to report without them")
    written = write_report(report, out, fmts)
    if as_json:
        echo_json(report.data)
    else:
        t = report.data["totals"]
        cost = "n/a (no price configured)" if t["cost"] is None else f"{t['cost']:.6g}"
        if t["runs"]:
            unknown = sum(e.get("count") or 0 for e in info.get("unknown") or [] if e.get("missing") == "AllocTRES")
            hours = f"{t['gpu_hours']:.3f} GPU-hours" + (f" (+ {unknown} attempt(s) unknown)" if unknown else "")
            inferred = " (inferred from the rows)" if (info.get("window") or {}).get("source") == "inferred" else ""
            click.echo(f"period {report.data['period']['start']} .. {report.data['period']['end']}{inferred}: "
                       f"{t['runs']} runs, {t['completed']} completed, {t['attempts']} attempts, "
                       f"{hours}, cost {cost}")
        for path in written:
            click.echo(f"wrote {path}")
    if said:
        click.echo(said, err=True)
    if not report.data["totals"]["runs"]:
        click.echo(f"no job attempts in the period {report.data['period']['start']} .. "
                   f"{report.data['period']['end']} (an empty report was written)", err=True)
        if not input_path:
            # From the store an empty period is an answer, but not the one a nightly job expects: exit 1. A
            # dump's empty period is simply its report (exit 0).
            raise SystemExit(EXIT_NEGATIVE)


def _say_rejected(info: dict[str, Any]) -> None:
    """The rejected rows' total and their likely fix, after the warnings that list the first of them."""
    rejected = int(info.get("rejected_rows") or 0)
    if not rejected:
        return
    from gpuclust.accounting.ingest.normalize import rejection_advice

    problems = info.get("problems") or []
    read = (info.get("rows_accounted") or {}).get("read")
    of = f" of {read:,}" if isinstance(read, int) else ""
    listed = f"the first {len(problems)} listed above" if len(problems) < rejected else "listed above"
    warn(f"{rejected:,}{of} row(s) rejected, in no figure ({listed}; report build --strict refuses them). "
         f"Likely fix: {rejection_advice(problems)}")


def _say_source_warnings(data: dict[str, Any]) -> str | None:
    """The use sources' failures on stderr (a failed Prometheus, usage TRES it could not read); returns the
    summary line that ends the run."""
    from gpuclust.accounting.figures.gpuuse import source_warnings

    lines, summary = source_warnings(data)
    for line in lines:
        echo_text(line, err=True)
    return summary


@group.command("notify")
@_period_options
@_dump_options("")
@click.option("--dry-run", "dry_run_dir", type=HintPath(file_okay=False),
              help="Write each mail as DIR/KEY.eml (text and HTML parts) instead of sending it; the outbox and "
                   "the SMTP server are not touched.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run as JSON: cluster, period, counts, notices (one per user and account owner: "
                   "key, to, status queued | already_queued | sent | kept | written | skipped, and why: "
                   "opted_out, no_address, no_gpu_use or the SMTP error), deliveries and warnings.")
@pass_app
def notify_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None,
               input_path: str | None, delimiter: str | None, slurm_version: str | None, dry_run_dir: str | None,
               as_json: bool) -> None:
    """Mail each user their GPU use over a period, and each account's to its owner ([notify] account_owners).

    Builds the period's report as `report build` does (the store, default period last-7d; or --input) and
    mails each user with GPU jobs their allocated, busy and held-idle GPU-hours, what they cost at the site's
    prices, their worst jobs by held-idle GPU-hours and the advice on them. Users in [notify] opt_out get
    none. Mails wait in the [notify] state_dir outbox until the SMTP server ([notify], else [guard], mail
    settings) takes them: a rerun for the same period sends nothing twice, and a mail kept by a failing
    server goes with the next run.

    \b
    Exit codes: 0 done (a mail kept for a later run is a warning), 1 no job in the period (from the store),
    2 bad config or input, 75 another notify run holds the lock.
    """
    from gpuclust.accounting.ingest.fast import memory
    from gpuclust.accounting.ingest.text import decode_delimiter
    from gpuclust.accounting.notify import NotifyBusy, run_notify
    from gpuclust.exitcodes import EXIT_BUSY

    config = _build_config(app, input_path, writes=False)
    memory.keep_freed_memory()
    delim = None if delimiter is None else decode_delimiter(delimiter)
    period = resolve_period(since, until, period_name, config.timezone)
    if period is None and not input_path:
        period = resolve_period(None, None, "last-7d", config.timezone)
    try:
        run = run_notify(config, period, input_path=input_path, delimiter=delim, slurm_version=slurm_version,
                         dry_run_dir=dry_run_dir)
    except NotifyBusy as exc:
        warn(exc)
        raise click.exceptions.Exit(EXIT_BUSY) from None
    if as_json:
        echo_json(run.as_dict())
    elif not app.quiet:
        for o in run.outcomes:
            where = f" to {o.to}" if o.to else ""
            why = f" ({o.why})" if o.why else ""
            echo_text(f"{o.status} {o.kind} {o.name}{where}{why}")
        for d in run.deliveries:
            if not any(o.key == d.key for o in run.outcomes):  # an earlier run's notice, sent or kept now
                echo_text(f"{'sent' if d.sent else 'kept'} earlier notice {d.key} to {d.to}")
        counts = ", ".join(f"{n} {status}" for status, n in sorted(run.counts().items())) or "no recipient"
        p = run.period
        echo_text(f"notify {p.get('start', '')} .. {p.get('end', '')}: {counts}"
                  + (f" (dry run: mails written to {dry_run_dir})" if dry_run_dir else ""))
    for problem in run.warnings:
        warn(problem)
    if not run.runs and not input_path:
        click.echo(f"no job attempts in the period {run.period.get('start', '')} .. {run.period.get('end', '')}",
                   err=True)
        raise SystemExit(EXIT_NEGATIVE)


SHOW_BY = ("partition", "account", "user")
"""gpuclust.accounting.output.show.BY, spelled out (importing show pulls pandas)."""
SHOW_ROWS = ("jobs", "runs", "findings")
SHOW_SORT = ("cost", "held-idle", "gpu-hours", "runs", "name")
"""gpuclust.accounting.output.show.SORT, spelled out."""


def terminal_width() -> int:
    """The columns `report show` fits: $COLUMNS where set, else the terminal's, else 80 (a pipe or a file: the
    width a mail, a pager or a terminal that opens it is sure to have; --wide, or --format json for scripts,
    gives every column)."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:  # the stdout this command writes to (not sys.__stdout__, as shutil.get_terminal_size asks)
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except (OSError, ValueError, AttributeError):
        pass
    return 80


@group.command("show")
@_period_options
@_dump_options(" Needs no site config (then: defaults, no prices).")
@click.option("--by", type=HintChoice(SHOW_BY), default="partition", show_default=True,
              help="Group the detail table (and --rows runs) by partition, account or user.")
@click.option("--format", "fmt", type=HintChoice(("table", "json", "jsonl")), default="table", show_default=True,
              help="table: the answers, then the detail, for reading; json: the same summary as one JSON "
                   "document; jsonl: one JSON object per --rows row, for log shippers.")
@click.option("--rows", type=HintChoice(SHOW_ROWS), default="jobs", show_default=True,
              help="With --format jsonl: jobs (one per GPU job that ended in the period), runs (the runs table "
                   "per --by group) or findings (the top failures, the jobs that held GPUs idle longest, then every "
                   "waste finding with its evidence, advice and held-idle cost).")
@click.option("--top", type=HintIntRange(1, 10000), default=None,
              help="How many top failures (default 5; with --rows findings, to emit) and --by groups (default 10; "
                   "--format json has every group) to show.")
@click.option("--sort", "sort", type=HintChoice(SHOW_SORT), default="cost", show_default=True,
              help="Order of the --by groups, the largest first: cost (held-idle GPU-hours where no group has a "
                   "cost), held-idle, gpu-hours, runs, or name.")
@click.option("--wide", is_flag=True,
              help="Every column, whatever the terminal's width (by default the table fits $COLUMNS or the "
                   "terminal, and the per-group detail is left out there).")
@pass_app
def show_cmd(app: AppContext, since: TimeSpec | None, until: TimeSpec | None, period_name: str | None,
             input_path: str | None, delimiter: str | None, slurm_version: str | None, by: str, fmt: str,
             rows: str, top: int | None, sort: str, wide: bool) -> None:
    """Print the report for a period in the terminal: the answers first (cost per completed run, completed-run
    share, busy share and coverage, held-idle GPU-hours, top failures), then a table per --by group.

    Reads the store (fetch first; default period: yesterday) or --input, computes the report as `report build`
    does and writes no file. An empty period is said and exits 0.
    """
    from gpuclust.accounting import pipeline
    from gpuclust.accounting.ingest.fast import memory
    from gpuclust.accounting.ingest.text import decode_delimiter
    from gpuclust.accounting.output import show

    if fmt != "jsonl" and click.get_current_context().get_parameter_source("rows") is not ParameterSource.DEFAULT:
        raise click.UsageError("--rows goes with --format jsonl (the table and json formats show the summary): add "
                                "--format jsonl or drop --rows")
    config = _build_config(app, input_path, writes=False)
    memory.keep_freed_memory()
    delim = None if delimiter is None else decode_delimiter(delimiter)
    period = resolve_period(since, until, period_name, config.timezone)
    if period is None and not input_path:
        period = resolve_period(None, None, "yesterday", config.timezone)
    # trend_days=0: the daily trend is an HTML view, the terminal does not show it
    failures = 5 if top is None else top
    report, _ = pipeline.build(config, period, input_path=input_path, delimiter=delim, top=failures, trend_days=0,
                               slurm_version=slurm_version)
    for problem in (report.data.get("input") or {}).get("problems", []):
        warn(problem)
    _say_rejected(report.data.get("input") or {})
    said = _say_source_warnings(report.data)
    if said:  # (stderr: it ends the run there, whatever stdout carries)
        click.echo(said, err=True)
    if fmt == "jsonl":
        click.echo(show.jsonl(show.row_records(report, rows, by)), nl=False)
        if not report.data["totals"]["runs"]:
            p = report.data["period"]
            click.echo(f"no job attempts in the period {p['start']} .. {p['end']}", err=True)
        return
    summary = show.summarize(report, by=by, top=failures, sort=sort)
    if fmt == "json":
        echo_json(summary.as_dict())
        return
    # Bold headings on a terminal; click.echo drops the escapes when stdout is piped.
    click.echo(show.render_text(summary, style=lambda text: click.style(text, bold=True), width=terminal_width(),
                                wide=wide, groups_shown=show.GROUPS_SHOWN if top is None else top))
