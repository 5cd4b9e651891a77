"""`gpuclust policy`: submit policy rendered to job_submit.lua, and sacctmgr quotas."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, warn
from gpuclust.cli.params import HintPath, complete_account, set_quiet
from gpuclust.errors import InputError, Problem
from gpuclust.exitcodes import EXIT_NEGATIVE, EXIT_OK
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.install import LUA_VERSIONS, PLUGIN_DIRS, LuaChoice, choose_lua, lua_label
from gpuclust.policy.quotas import apply_plan, plan_from_slurm
from gpuclust.policy.render import render_lua, write_lua
from gpuclust.policy.sbatch import DEFAULT_VERSION, SbatchRefusal, job_desc_from_options, table_for


@click.group("policy")
def group() -> None:
    """Submit policy: render job_submit.lua, check a job against it, plan sacctmgr quotas."""


@group.command("render")
@click.option("--out", "out", type=HintPath(dir_okay=False),
              help="Install job_submit.lua here instead of printing it: validated under the Lua slurmctld links, "
                   "then an atomic replace (the old file stays when validation fails).")
@click.option("--lua", "lua", type=click.Choice(LUA_VERSIONS),
              help="Validate under this Lua (default: [policy] lua, else the Lua the Slurm plugin dir's "
                   "job_submit_lua.so links, else 5.1).")
@click.option("--plugin-dir", "plugin_dir", type=HintPath(file_okay=False),
              help="Slurm's PluginDir, where job_submit_lua.so is (default: PluginDir from scontrol when SLURM_CONF "
                   "is set, else the distributions' usual directories).")
@pass_app
def render(app: AppContext, out: str | None, lua: str | None, plugin_dir: str | None) -> None:
    """Render the site config's policy as a job_submit.lua (data tables + the fixed engine) for Lua 5.1-5.4 and
    LuaJIT; with --out, validate it under the Lua the site's slurmctld links and install it."""
    policy = compile_policy(app.config)
    if out:
        if lua:
            choice = LuaChoice(lua, "--lua")
        else:
            choice = choose_lua(app.config.policy.lua, _plugin_dirs(app, plugin_dir) if not app.config.policy.lua else ())
        write_lua(policy, out, choice.version)
        warned = f", {len(policy.warn)} in warn mode" if policy.warn else ""
        app.note(f"wrote {out} ({len(policy.accounts)} accounts, {len(policy.partitions)} partitions, "
                 f"{policy.rule_count} rules{warned}, fail_mode={policy.fail_mode}; validated under "
                 f"{lua_label(choice.version)}: {choice.why}); then run: scontrol reconfigure")
    else:
        click.echo(render_lua(policy), nl=False)


def _plugin_dirs(app: AppContext, given: str | None) -> list[str]:
    """Where to look for job_submit_lua.so: --plugin-dir, else scontrol's PluginDir (when SLURM_CONF is set), then
    the distributions' usual directories."""
    if given:
        return [given]
    dirs: list[str] = []
    if os.environ.get("SLURM_CONF"):
        try:
            out = app.slurm.scontrol(["show", "config"], timeout=10)
        except Exception:  # noqa: BLE001 - no usable scontrol here: the usual directories
            out = ""
        for line in out.splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "PluginDir":
                dirs += [d for d in value.strip().split(":") if d]
    return dirs + list(PLUGIN_DIRS)


def _detect_version(app: AppContext) -> str:
    """The Slurm release of the sbatch on this machine (its recorded table), or the default when there is none.

    Only asked when SLURM_CONF is set: sbatch reads slurm.conf before anything else, and without it a client
    falls back to a DNS SRV lookup.
    """
    if not os.environ.get("SLURM_CONF"):
        return DEFAULT_VERSION
    try:
        out = app.slurm.sbatch(["--version"], timeout=10)
    except Exception:  # noqa: BLE001 - no usable sbatch here: policy check also works offline
        return DEFAULT_VERSION
    return table_for(out) if out.strip() else DEFAULT_VERSION


def _detect_gres(app: AppContext) -> frozenset[str]:
    """GresTypes of the local cluster (scontrol show config), or {gpu} offline."""
    if not os.environ.get("SLURM_CONF"):
        return frozenset({"gpu"})
    try:
        out = app.slurm.scontrol(["show", "config"], timeout=10)
    except Exception:  # noqa: BLE001 - no usable scontrol here: policy check also works offline
        return frozenset({"gpu"})
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "GresTypes":
            names = frozenset(v.strip() for v in value.split(",") if v.strip() and v.strip() != "(null)")
            return names or frozenset({"gpu"})
    return frozenset({"gpu"})


def _detect_partition_limits(app: AppContext) -> dict[str, int | None] | None:
    """Each partition's time limit for a job without --time (scontrol), or None offline."""
    from gpuclust.policy.replay import partition_time_defaults

    if not os.environ.get("SLURM_CONF"):
        return None
    try:
        return partition_time_defaults(app.slurm.scontrol(["-a", "-o", "show", "partition"], timeout=10)) or None
    except Exception:  # noqa: BLE001 - no usable scontrol here: the replay says the defaults are unknown
        return None


@group.command("check", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--user", "user", help="Submitting user name (default: the current user).")
@click.option("--account", "account", shell_complete=complete_account, help="Same as -A in the sbatch options (those win if both are given).")
@click.option("--default-account", "default_account", help="The user's default account, used by Slurm when the job has no -A.")
@click.option("--default-qos", "default_qos", help="The user's default QOS.")
@click.option("--script", "script", type=HintPath(exists=True, dir_okay=False), help="Batch script whose #SBATCH lines are read.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict and the job_desc as JSON.")
@click.option("--slurm-version", "slurm_version", default=None,
              help="Read the options as this Slurm release's sbatch does (default: env GPUCLUST_SLURM_VERSION, else the "
                   "local `sbatch --version`, else 22.05).")
@click.option("--gres-types", "gres_types", default=None,
              help="GRES names the cluster defines, comma-separated (default: GresTypes from scontrol when SLURM_CONF "
                   "is set, else gpu). sbatch refuses a --gres naming any other.")
@click.argument("sbatch_args", nargs=-1, type=click.UNPROCESSED)
@pass_app
def check(app: AppContext, user: str | None, account: str | None, default_account: str | None,
          default_qos: str | None, script: str | None, as_json: bool, slurm_version: str | None,
          gres_types: str | None, sbatch_args: tuple[str, ...]) -> None:
    """Decide a job exactly as the rendered job_submit.lua would: `policy check -- -A ml --gres=gpu:h100:2 ...`.

    The options are read exactly as sbatch reads them (its recorded getopt_long table, #SBATCH lines of --script or
    of the script operand). Exit 0 when accepted (with the warnings of rules in warn mode, if any), 1 when rejected
    (the message is what sbatch would print), 2 when sbatch itself would refuse the command line or script (the
    message names the option or the script line).

    \b
    From the first sbatch option (or `--`) on, every word is sbatch's: put this command's own options
    (--json, --user, ...) before them, and gpuclust's global ones before the subcommand:
    `gpuclust -q --config X policy check --json -- -A ml ...`. After `policy check`, -q is sbatch's -q/--qos;
    sbatch's --quiet/-Q among the sbatch options also quiets this command's output, as it quiets sbatch's.
    """
    args = list(sbatch_args)
    if args and args[0] == "--":
        args = args[1:]
    if account:
        args = ["--account", account, *args]
    text = None
    if script:
        try:
            text = Path(script).read_bytes()
        except OSError as exc:
            raise InputError(Problem(script, None, f"cannot read script: {exc}")) from None
    version = slurm_version or os.environ.get("GPUCLUST_SLURM_VERSION") or _detect_version(app)
    names = frozenset(n.strip() for n in gres_types.split(",") if n.strip()) if gres_types else _detect_gres(app)
    hints = _placement_hints(args)
    try:
        job = job_desc_from_options(args, script=text, user=user or getpass.getuser(),
                                    default_account=default_account, default_qos=default_qos, version=version,
                                    script_source=script, gres_names=names)
    except InputError as exc:
        notes = list(hints)
        if isinstance(exc, SbatchRefusal):  # sbatch's own words say what is wrong, not what to do
            notes.append(SBATCH_FIX_HINT)
        if not notes:
            raise
        raise type(exc)([*exc.problems, *(Problem("", None, f"hint: {h}") for h in notes)]) from None
    for hint in hints:  # accepted as sbatch reads it, yet most likely not what was meant
        if hint.startswith("-q "):
            click.echo(f"gpuclust: note: {hint}", err=True)
    if _sbatch_quiet(args, version):
        set_quiet(click.get_current_context(), click.Option(["--quiet"]), True)
    verdict = Evaluator(compile_policy(app.config)).submit(job)
    if as_json:
        echo_json({**verdict.as_dict(), "job_desc": job})
    elif verdict.accepted:
        click.echo(f"ACCEPT ({verdict.rule})")
        for warning in verdict.warnings:  # rules in warn mode: what sbatch would print, one line each
            click.echo(warning.text)
    else:
        click.echo(f"REJECT [{verdict.rule}] rc={verdict.rc}: {verdict.message}")
    raise SystemExit(EXIT_OK if verdict.accepted else EXIT_NEGATIVE)


# gpuclust's own options that sbatch lacks, given among the sbatch options: sbatch refuses them there.
_GLOBAL_ONLY = ("--config", "--slurm-timeout")


SBATCH_FIX_HINT = ("sbatch would refuse this too: fix the option or script line named above "
                   "(`man sbatch` gives each option's form)")


def _placement_hints(args: list[str]) -> list[str]:
    """Where the gpuclust options found among the sbatch options go, and what -q means there (sbatch's --qos)."""
    own = {o for p in check.params for o in p.opts if o.startswith("--")} - {"--account"}  # sbatch's too, same
    hints = []
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_ONLY:
            hints.append(f"{name} is a gpuclust option, not sbatch's: put it before the subcommand "
                         f"(gpuclust {name} VALUE policy check ...)")
        elif name in own:
            hints.append(f"{name} is an option of `policy check`, not sbatch's: put it before the sbatch options "
                         f"(gpuclust policy check {name} ... -- SBATCH OPTIONS)")
        elif arg == "-q" and (i + 1 == len(args) or args[i + 1].startswith("-")):
            took = f" (it takes {args[i + 1]!r} as the QOS)" if i + 1 < len(args) else ""
            hints.append(f"-q among the sbatch options is sbatch's -q/--qos{took}; gpuclust's quiet flag goes "
                         "before the subcommand: gpuclust -q policy check ...")
    return hints


def _sbatch_quiet(args: list[str], version: str) -> bool:
    """Whether the command line (not the script) gives sbatch's --quiet/-Q, read as sbatch reads it."""
    from gpuclust.policy.sbatch import getopt, option_table

    table = option_table(version)
    try:
        parsed = getopt(args, table, lambda i: "")
    except InputError:
        return False
    return any(name == table.key.get("quiet") for name, _, _ in parsed.options)


@group.command("replay")
@click.option("--since", "since", required=True,
              help="Replay the jobs submitted from then on: 30d, 12h, 2026-11-01, 2026-11-01T08:00 (site time zone).")
@click.option("--until", "until", default=None, help="Up to then (exclusive), same forms (default: now).")
@click.option("--config", "new_config", type=HintPath(exists=True, dir_okay=False),
              help="A second site config (the new policy) to replay beside the site's own (gpuclust --config, "
                   "GPUCLUST_CONFIG): lists the jobs whose verdict would change.")
@click.option("--slurm-version", "slurm_version", default=None,
              help="Read the submit lines as this Slurm release's sbatch does (default: env GPUCLUST_SLURM_VERSION, "
                   "else the local `sbatch --version`, else 22.05).")
@click.option("--gres-types", "gres_types", default=None,
              help="GRES names the cluster defines, comma-separated (default: GresTypes from scontrol when "
                   "SLURM_CONF is set, else gpu).")
@click.option("--limit", "limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="Changed verdicts listed in the table (--json lists all).")
@click.option("--json", "as_json", is_flag=True, help="Print the replay as JSON (with every job id).")
@pass_app
def replay_cmd(app: AppContext, since: str, until: str | None, new_config: str | None, slurm_version: str | None,
               gres_types: str | None, limit: int, as_json: bool) -> None:
    """Run the stored jobs' requests through the submit policy, as `policy check`
    decides one: what the site config (and, with --config NEW, the new one)
    would have refused, per rule, account and user; which jobs would change
    verdict; and what could not be replayed, and why.

    \b
      gpuclust policy replay --since 30d
      gpuclust --config site.conf policy replay --since 30d --config new.conf

    Reads the store `report fetch` writes: the jobs submitted from --since
    to --until. Columns: submissions (an array counts once), jobs (each array
    task) and allocated GPU-hours (GPU-equivalents x Elapsed).

    Each request is its submit line (sacct SubmitLine) over the recorded
    fields, or the fields alone where there is no line or no reading of it
    agrees with the record (counted, by reason). Where neither can say what
    was asked (a script job's time limit equal to the partition's default:
    read as no --time; an account not on the line: read as -A), the other
    reading is tried too, and the jobs whose verdict it changes are counted
    as uncertain. Partition default time limits come from scontrol when
    SLURM_CONF is set.

    Exit 0 when the config replayed (NEW with --config) refuses no job, 1
    when it refuses some, 2 on bad input (a config error names its file, line
    and key).
    """
    from gpuclust.accounting import stored_requests
    from gpuclust.accounting.ingest.period import resolve_period
    from gpuclust.config import load_config
    from gpuclust.policy.replay import render_table, replay

    period = resolve_period(since, until, None, app.config.timezone)
    assert period is not None  # (--since is required)
    evaluators = {"current": Evaluator(compile_policy(app.config))}
    if new_config:
        evaluators["new"] = Evaluator(compile_policy(load_config(new_config)))
    version = slurm_version or os.environ.get("GPUCLUST_SLURM_VERSION") or _detect_version(app)
    names = frozenset(n.strip() for n in gres_types.split(",") if n.strip()) if gres_types else _detect_gres(app)
    table = stored_requests(app.config, period.start, period.end)
    result = replay(table, evaluators, since=period.start.isoformat(), until=period.end.isoformat(),
                    version=table_for(version), gres_names=names, partition_limits=_detect_partition_limits(app))
    if as_json:
        echo_json(result.as_dict())
    else:
        click.echo(render_table(result, limit), nl=False)
    final = result.configs["new" if new_config else "current"]
    raise SystemExit(EXIT_NEGATIVE if final.refused.submissions else EXIT_OK)


@group.group("quotas")
def quotas() -> None:
    """GPU quotas as QOS and association limits in slurmdbd (sacctmgr)."""


def _print_plan_warnings(warnings: list[str]) -> None:
    for warning in warnings:
        warn(warning)


@quotas.command("plan")
@click.option("--json", "as_json", is_flag=True, help="Print the commands, reasons and warnings as JSON.")
@pass_app
def quotas_plan(app: AppContext, as_json: bool) -> None:
    """Print the sacctmgr commands that bring slurmdbd's GPU limits in line with the config.

    Prints nothing when in sync. Exit 0 when in sync, 1 when changes are pending.
    """
    plan = plan_from_slurm(app.config, app.slurm)
    if as_json:
        echo_json(plan.as_dict())
    else:
        _print_plan_warnings(plan.warnings)
        for command in plan.commands:
            click.echo(command.line)
    raise SystemExit(EXIT_NEGATIVE if plan.commands else EXIT_OK)


@quotas.command("apply")
@click.option("--yes", is_flag=True, help="Apply without asking.")
@click.option("--json", "as_json", is_flag=True, help="Print what was applied as JSON.")
@pass_app
def quotas_apply(app: AppContext, yes: bool, as_json: bool) -> None:
    """Run the quota plan in one `sacctmgr -i` session, then verify that nothing is left to change."""
    plan = plan_from_slurm(app.config, app.slurm)
    if not as_json:
        _print_plan_warnings(plan.warnings)
    if not plan.commands:
        if as_json:
            echo_json({"applied": [], "warnings": plan.warnings})
        else:
            app.note("quotas already in line with the config")
        return
    if not yes:
        for command in plan.commands:
            click.echo(command.line)
        if not click.confirm("apply these sacctmgr commands?", default=False, err=True):
            raise SystemExit(EXIT_NEGATIVE)
    result = apply_plan(app.config, app.slurm, plan)
    if as_json:
        echo_json({"applied": [c.argv for c in result.applied], "warnings": plan.warnings})
    else:
        for command in result.applied:
            click.echo(f"applied: {command.line}")
