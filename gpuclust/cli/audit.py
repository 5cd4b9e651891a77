"""`gpuclust audit`: partition health, homogeneity and limits (Nagios exit codes)."""

from __future__ import annotations

from pathlib import Path

import click

from gpuclust.audit import CHECK_FAMILIES, audit_partitions, unknown_report, worst
from gpuclust.audit.collect import SOURCES
from gpuclust.audit.findings import AuditReport, Finding, audit_document
from gpuclust.audit.render import render_reports
from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json
from gpuclust.cli.params import (
    CheckTimedOut,
    HintChoice,
    HintIntRange,
    HintPath,
    RangeType,
    check_deadline,
    check_timeout_option,
    complete_partition,
    explicit_config_missing,
)
from gpuclust.config import SiteConfig, find_config_path
from gpuclust.errors import ConfigError, Problem, SlurmError
from gpuclust.exitcodes import Nagios
from gpuclust.nagiosrange import NagiosRange, Thresholds


@click.group("audit")
def group() -> None:
    """Audit GPU partitions: homogeneity, drains, limits, acceptance freshness (Nagios exit codes)."""


@group.command("partition")
@click.argument("name", required=False, shell_complete=complete_partition)
@click.option("--all", "all_partitions", is_flag=True, help="Audit every partition (exit with the worst status).")
@click.option("--json", "as_json", is_flag=True, help="Print every finding as JSON {check, severity, nodes, message}.")
@click.option("--baseline", "baseline_path", type=HintPath(dir_okay=False),
              help="Diff the nodes against a saved `--json` output: nodes added, removed or changed.")
@click.option("--source", type=HintChoice(SOURCES), default="auto", show_default=True,
              help="Where node data comes from: JSON where the Slurm version has it (auto), or scontrol -o text.")
@click.option("--skip", type=HintChoice(CHECK_FAMILIES), multiple=True,
              help="Skip a family of checks (repeatable).")
@click.option("--results-dir", type=HintPath(file_okay=False),
              help="Acceptance results store (default: results_dir from the site config).")
@click.option("--problems-only", is_flag=True, help="Text output: hide OK findings.")
@click.option("-w", "--warning", "warning", type=RangeType(), default=None, metavar="RANGE",
              help="WARNING when the partition's unavailable nodes (down + drained) are outside this Nagios range, "
                   "e.g. -w 1 (more than one). With -w/-c these ranges set the severity of node.down and "
                   "node.drain instead of the defaults (any down node CRITICAL, a drain WARNING).")
@click.option("-c", "--critical", "critical", type=RangeType(), default=None, metavar="RANGE",
              help="CRITICAL when the unavailable nodes are outside this Nagios range; -w 1 -c 4: 2 to 4 "
                   "unavailable WARNING, 5 or more CRITICAL. Ranges: N (alert above N), N: (below N), ~:N, "
                   "A:B (outside), @A:B (inside).")
@click.option("--lemon-days", type=HintIntRange(min=1), default=None,
              help="Lookback of the lemon check: production jobs of the accounting store that ended this many days "
                   "before now.  [default: the site config's [lemon] audit_lookback, 7 days]")
@check_timeout_option("audit")
@pass_app
def partition(app: AppContext, name: str | None, all_partitions: bool, as_json: bool, baseline_path: str | None,
              source: str, skip: tuple[str, ...], results_dir: str | None, problems_only: bool,
              warning: NagiosRange | None = None, critical: NagiosRange | None = None,
              timeout: int | None = None, lemon_days: int | None = None) -> None:
    """Audit partition NAME (or --all) and exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.

    \b
    Checks and the severity of what they find:
      node.down            CRITICAL  DOWN/FAIL/not responding, full reason, who set it, its age
      node.drain           WARNING   drained/draining, full reason; CRITICAL if most nodes unavailable
      node.gres_used       CRITICAL  more GPUs used than configured (else OK: GPUs in use)
      node.gres_drained    WARNING   drained GPUs on a usable node
      homogeneity.gres     CRITICAL  GPU type/count differs: odd nodes vs the majority, as node sets
      homogeneity.*        WARNING   CPUs, RealMemory, features, slurmd version differ
      config.gpus          CRITICAL  GPUs differ from the site config (gpus_per_node, gpu_type)
      partition.state      CRITICAL  partition DOWN/INACTIVE/empty; WARNING if DRAIN
      limits.maxtime       WARNING   no MaxTime and no site max_time; MaxTime below the site max_time
      limits.oversubscribe WARNING   OverSubscribe YES/FORCE on a GPU partition
      limits.gpu           WARNING   QOS/association GPU limit above the partition's GPUs (never binds)
      limits.typed_tres    WARNING   typed GPU limit or GPU type missing from AccountingStorageTRES
      limits.accounts      WARNING   allowed account without an association
      limits.accounting    UNKNOWN   sacctmgr unreadable (limits not checked)
      acceptance.*         WARNING   no/stale passing all_reduce or storage result, version drift;
                           CRITICAL  a later acceptance job named the node as failed
      lemon.nodes          WARNING   nodes failing production jobs beyond chance (accounting store,
                                     --lemon-days; one-sided Poisson, Holm; its p-value)
      baseline.*           WARNING   nodes added/removed/changed since --baseline
    UNKNOWN (3): Slurm unreachable, no such partition, a usage error, a --config that is missing or invalid,
    or --timeout ran out.
    """
    if all_partitions == bool(name):
        raise click.UsageError("give a partition NAME or --all (not both)")
    site, config_findings = _site_config(app)
    try:
        with check_deadline(timeout):
            reports = audit_partitions(app.slurm, None if all_partitions else [name or ""], site, source=source,
                                       baseline_path=baseline_path, skip=skip, results_dir=results_dir,
                                       thresholds=Thresholds.given(warning, critical), lemon_days=lemon_days)
    except SlurmError as exc:
        reports = [unknown_report(name or "(all)", f"Slurm unreachable: {exc}")]
    except CheckTimedOut:
        reports = [unknown_report(name or "(all)", f"timed out after {timeout} s (--timeout): a slow slurmctld, "
                                                   "slurmdbd or results directory; raise --timeout or look there",
                                  check="timeout")]
    for report in reports:
        report.add(config_findings)
    _emit(reports, as_json, all_partitions, problems_only)
    raise SystemExit(int(worst(reports)))


def _site_config(app: AppContext) -> tuple[SiteConfig | None, list[Finding]]:
    """The site config, or None with a finding saying why: the audit still runs without the default one.

    A config named by --config or $GPUCLUST_CONFIG that does not exist is an error (UNKNOWN), not a skip."""
    missing = explicit_config_missing(app)
    if missing:
        raise ConfigError(Problem(find_config_path(app.config_path), None, f"no such file (named by {missing})"))
    path = find_config_path(app.config_path)
    if not Path(path).exists():
        return None, [Finding.make("config", Nagios.OK,
                                   f"no site config at {path}: site expectations and acceptance checks skipped")]
    try:
        return app.config, []
    except ConfigError as exc:
        return None, [Finding.make("config", Nagios.UNKNOWN, f"site config unusable: {exc}")]


def _emit(reports: list[AuditReport], as_json: bool, all_partitions: bool, problems_only: bool) -> None:
    if as_json:
        echo_json(audit_document(reports, all_partitions))
    else:
        click.echo(render_reports(reports, problems_only))
