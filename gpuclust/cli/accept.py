"""`gpuclust accept`: acceptance jobs and their report."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, echo_text
from gpuclust.cli.params import (
    TIME,
    TIME_HELP,
    CheckTimedOut,
    HintChoice,
    HintFloatRange,
    HintIntRange,
    HintPath,
    RangeType,
    check_deadline,
    check_timeout_option,
    complete_account,
    complete_partition,
)
from gpuclust.timespec import TimeSpec

if TYPE_CHECKING:
    from datetime import datetime

    from gpuclust.accept.report import Report
    from gpuclust.config.site import SiteConfig
    from gpuclust.nagiosrange import NagiosRange, Thresholds


@click.group("accept")
def group() -> None:
    """Acceptance jobs: submit all_reduce, pairwise and storage benchmarks; gate their results."""


@group.command("submit")
@click.argument("kind", type=HintChoice(["allreduce", "pairwise", "storage", "all"]))
@click.option("--partition", "-p", required=True, shell_complete=complete_partition, help="Partition to test (its [partition] section sets GPUs and gates).")
@click.option("--nodes", "-N", type=HintIntRange(min=1), required=True, help="Nodes per job (pairwise and storage need 2+).")
@click.option("--gpus-per-node", type=HintIntRange(min=0), default=None,
              help="GPUs to request per node (default: gpus_per_node of the partition; 0 = CPU only).")
@click.option("--account", "-A", default=None, shell_complete=complete_account, help="Slurm account to charge.")
@click.option("--qos", default=None, help="Slurm QOS.")
@click.option("--time", "time_limit", default=None, help="Time limit, Slurm syntax (default: the template's 30 min).")
@click.option("--comment", default=None, help="Job comment, e.g. team=ops,project=acceptance.")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="Template parameter, e.g. --set ACCEPT_MAX_SIZE=64M (repeatable; see the template headers).")
@click.option("--python", default=None, help="Interpreter the jobs run (default: the one running gpuclust).")
@click.option("--template-dir", default=None, type=HintPath(file_okay=False),
              help="Directory of the sbatch templates (default: $GPUCLUST_TEMPLATE_DIR, then the repo's).")
@click.option("--container", "container_image", default=None, metavar="IMAGE",
              help="Run the steps inside this image (OCI bundle dir, SIF/squashfs file, or a reference pinned "
                   "@sha256:...); its digest and runtime are recorded with the results.")
@click.option("--container-runtime", type=HintChoice(["auto", "oci", "pyxis", "apptainer"]), default="auto",
              show_default=True, help="oci: Slurm's --container (oci.conf); pyxis: --container-image; "
                                      "apptainer: apptainer/singularity exec; auto: detect.")
@click.option("--dcgm-level", type=HintIntRange(0, 4), default=None,
              help="Before the run, also run `dcgmi diag -r N -j` on each node where dcgmi exists, and gate on it "
                   "(ACCEPT_DCGM_LEVEL; 1 quick, 2 medium, 3 long, 4 very long; 0 or absent: none).")
@click.option("--nodelist", "-w", default=None, metavar="HOSTLIST",
              help="Run on these nodes (sbatch --nodelist), e.g. the lemon nodes a report names; --nodes is their "
                   "count.")
@click.option("--json", "as_json", is_flag=True, help="Print the job ids as JSON.")
@click.option("--retest-drained", is_flag=True,
              help="Let the job(s) onto the partition's nodes that gpuclust drained (accept report --drain): resume "
                   "them until the jobs start, then drain them again with the same reason while they run.")
@pass_app
def submit(app: AppContext, kind: str, partition: str, nodes: int, gpus_per_node: int | None, account: str | None,
           qos: str | None, time_limit: str | None, comment: str | None, settings: tuple[str, ...],
           python: str | None, template_dir: str | None, container_image: str | None, container_runtime: str,
           as_json: bool, retest_drained: bool = False, dcgm_level: int | None = None,
           nodelist: str | None = None) -> None:
    """Submit acceptance job(s) with sbatch and print their job ids (one per line: KIND JOBID)."""
    from gpuclust.accept import submit as S

    config = app.config
    values = S.parse_settings(list(settings))
    if dcgm_level is not None:
        values["ACCEPT_DCGM_LEVEL"] = str(dcgm_level)
    templates = S.template_dir(template_dir)
    kinds = ["allreduce", "pairwise", "storage"] if kind == "all" else [kind]
    skipped = []
    part_cfg = config.partitions.get(partition)
    if part_cfg is not None and part_cfg.gpu_type:  # all_reduce on MIG slices: not submitted (accept.migskip)
        from gpuclust.accept.migskip import skip_note

        for k in list(kinds):
            note = skip_note(k, [part_cfg.gpu_type])
            if note:
                kinds.remove(k)
                skipped.append({"kind": k, "reason": note})
                echo_text(f"gpuclust: {k} not submitted: {note}", err=True)
    spec = None
    if container_image is not None:  # image, runtime and digest checked before anything is submitted
        from gpuclust.accept import container as C

        spec = C.resolve_with_client(container_image, container_runtime, app.slurm)
    plans = [S.build(k, config, partition, nodes, gpus_per_node=gpus_per_node, account=account, qos=qos,
                     time_limit=time_limit, comment=comment, settings=values, python=python, templates=templates,
                     container=spec, nodelist=nodelist)
             for k in kinds]  # all validated before anything is submitted
    drained = {}
    if retest_drained:
        from gpuclust.accept import drain

        drained = drain.own_drained(app.slurm, partition)
    jobs = []
    for plan in plans:
        jobs.append({"kind": plan.kind, "job_id": S.submit(app.slurm, plan)})
    if drained:
        for note in drain.retest(app.slurm, drained, [str(j["job_id"]) for j in jobs]):
            echo_text(f"gpuclust: {note}", err=True)
    if as_json:
        echo_json({"partition": partition, "nodes": nodes, "jobs": jobs,
                   **({"container": spec.as_dict()} if spec else {}), **({"skipped": skipped} if skipped else {})})
    else:
        for job in jobs:
            click.echo(f"{job['kind']} {job['job_id']}")


@group.command("report")
@click.option("--job", "job_id", default=None, help="Judge this job's results only.")
@click.option("--since", type=TIME, default=None, help=f"Judge every result since this time. {TIME_HELP}")
@click.option("--results-dir", default=None, type=HintPath(file_okay=False),
              help="Results directory (default: results_dir of the site config).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (per-node verdicts and reasons).")
@click.option("--compare-container", is_flag=True,
              help="Per node, the latest containerised run against the latest bare-metal one (figures, versions); "
                   "CRITICAL beyond the partition's container_tolerance.")
@click.option("--drain", "drain_nodes", is_flag=True,
              help="Drain each failed node (reason 'gpuclust:CLASS:DETAIL job ID ...'); resume the nodes gpuclust "
                   "drained once they pass again; never touch another's drain.")
@click.option("--dry-run", is_flag=True, help="With --drain: print the scontrol commands, run none.")
@click.option("--max-drain", type=HintFloatRange(0.0, 1.0), default=0.5, show_default=True,
              help="With --drain: drain nothing when more than this fraction of the judged nodes failed.")
@click.option("-w", "--warning", "warning", type=RangeType(), default=None, metavar="RANGE",
              help="WARNING when nodes_critical (the number of nodes whose own verdict is CRITICAL) is outside "
                   "this Nagios range, e.g. -w 0 (any failing node). With -w/-c, these ranges decide what "
                   "failing nodes make of the status, instead of any failing node being CRITICAL.")
@click.option("-c", "--critical", "critical", type=RangeType(), default=None, metavar="RANGE",
              help="CRITICAL when nodes_critical is outside this Nagios range, e.g. -c 3 (more than 3 failing "
                   "nodes); -w 0 -c 3: 1 to 3 failing nodes WARNING, 4 or more CRITICAL. Ranges: N (alert above "
                   "N), N: (below N), ~:N (above N), A:B (outside), @A:B (inside).")
@check_timeout_option("check")
@pass_app
def report(app: AppContext, job_id: str | None, since: TimeSpec | None, results_dir: str | None, as_json: bool,
           compare_container: bool = False, drain_nodes: bool = False, dry_run: bool = False,
           max_drain: float = 0.5, warning: NagiosRange | None = None, critical: NagiosRange | None = None,
           timeout: int | None = None) -> None:
    """Gate acceptance results; exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (Nagios).

    Without --job/--since, the latest result of each kind in each partition is judged. History (all results in
    the directory) gives each node's baseline and version drift. A node's state is its latest evidence: with
    --since, a node's latest run of each kind decides, and its earlier runs' findings are shown as history.
    The first line is the Nagios status line, `acceptance: STATUS - why; counts | perfdata`. A usage or config
    error is UNKNOWN (3). --drain acts on the verdicts through scontrol (for cron after a nightly acceptance
    run); a failing scontrol exits 3.
    """
    from gpuclust.nagiosrange import Thresholds

    try:
        with check_deadline(timeout):
            _report(app, job_id, since, results_dir, as_json, compare_container, drain_nodes, dry_run, max_drain,
                    Thresholds.given(warning, critical))
    except CheckTimedOut:
        if as_json:
            echo_json({"status": "UNKNOWN", "exit_code": 3, "summary": f"acceptance: UNKNOWN - timed out after "
                                                                       f"{timeout} s"})
        else:
            click.echo(f"acceptance: UNKNOWN - timed out after {timeout} s (--timeout); a slow results directory "
                       "or Slurm command: raise --timeout or look at the file system and slurmctld")
        raise SystemExit(3) from None


def _report(app: AppContext, job_id: str | None, since: TimeSpec | None, results_dir: str | None, as_json: bool,
            compare_container: bool, drain_nodes: bool, dry_run: bool, max_drain: float,
            thresholds: Thresholds | None) -> None:
    from gpuclust.accept import report as rep

    if job_id is not None and not job_id.replace("_", "").isdigit():
        raise click.BadParameter(f"{job_id!r} is not a Slurm job id; give the number sbatch printed, e.g. "
                                  "--job 12345", param_hint="--job")
    if job_id and since:
        raise click.UsageError("give --job or --since, not both")
    if dry_run and not drain_nodes:
        raise click.UsageError("--dry-run goes with --drain")
    config = app.config
    directory = results_dir or config.results_dir
    since_time = since.resolve(config.timezone) if since else None
    if compare_container:
        _compare_container(directory, config, job_id, since_time, as_json)
    result = rep.judge_results(directory, config, job=job_id, since=since_time, thresholds=thresholds)
    if drain_nodes:
        _drain(app, result, as_json, dry_run, max_drain)
    if as_json:
        echo_json(result.as_dict())
    else:
        click.echo(rep.render_table(result))
    raise SystemExit(int(result.status))


def _compare_container(results_dir: str, config: SiteConfig, job_id: str | None, since: datetime | None,
                       as_json: bool) -> None:
    """--compare-container: its own table/JSON and Nagios exit status (gpuclust.accept.container_compare): the
    results read, then compared, then shown."""
    from gpuclust.accept import container_compare as cc
    from gpuclust.accept.results import scan_results

    scan = scan_results(results_dir)
    comp = cc.compare(scan, config, since=since, jobs=(job_id,) if job_id else ())
    if as_json:
        echo_json(comp.as_dict())
    else:
        click.echo(cc.render_table(comp))
    raise SystemExit(int(comp.status))


def _drain(app: AppContext, result: Report, as_json: bool, dry_run: bool, max_drain: float) -> NoReturn:
    from gpuclust.accept import drain
    from gpuclust.accept.report import render_table
    from gpuclust.exitcodes import EXIT_SLURM

    nodes = drain.read_nodes(app.slurm) if result.nodes else {}  # all: a name Slurm lacks is skipped, not fatal
    plan = drain.plan(result, nodes, max_fraction=max_drain)
    if not dry_run:
        drain.apply(app.slurm, plan)
    if as_json:
        echo_json({**result.as_dict(), "drain": {**plan.as_dict(), "dry_run": dry_run}})
    else:  # the status line first (Nagios reads line 1), then what --drain did, then the detail
        status, _, detail = render_table(result).partition("\n")
        click.echo(status)
        click.echo(drain.render(plan, dry_run))
        if detail:
            click.echo(detail)
    if plan.errors:
        for error in plan.errors:
            echo_text(f"gpuclust: scontrol failed: {error}", err=True)
        raise SystemExit(EXIT_SLURM)
    raise SystemExit(int(result.status))


@group.command("node-status")
@click.argument("node")
@click.option("--results-dir", default=None, type=HintPath(file_okay=False),
              help="Results directory (default: results_dir of the site config).")
@click.option("--stale-days", type=HintIntRange(min=1), default=None,
              help="A result older than this is stale (default: [site] acceptance_stale_days).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@pass_app
def node_status(app: AppContext, node: str, results_dir: str | None, stale_days: int | None, as_json: bool) -> None:
    """One node's acceptance status, for NHC (examples/nhc/gpuclust_accept.nhc): exit 0 when its latest results
    pass and are fresh; 1 when the last one failed, is stale, or there is none; 2 on bad input."""
    from dataclasses import replace
    from datetime import datetime, timezone

    from gpuclust.accept import drain
    from gpuclust.accept.results import scan_results
    from gpuclust.errors import UnsafeValueError

    try:
        drain.valid_node_name(node)
    except UnsafeValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NODE") from None
    config = app.config
    if results_dir:
        config = replace(config, results_dir=results_dir)
    scan = scan_results(config.results_dir)
    status = drain.node_status(scan, config, node, datetime.now(timezone.utc), stale_days)
    if as_json:
        echo_json(status.as_dict())
    else:
        from gpuclust.output import terminal_safe

        click.echo(f"{status.status}: {terminal_safe(status.message)}")
    raise SystemExit(0 if status.ok else 1)
