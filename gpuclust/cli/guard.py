"""`gpuclust guard`: one run of the idle-GPU guard (gpuclust.guard), meant for a systemd timer or cron."""

from __future__ import annotations

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.output import echo_json, echo_text, warn
from gpuclust.exitcodes import EXIT_BUSY, EXIT_OK, EXIT_TELEMETRY


@click.command("guard")
@click.option("--dry-run", is_flag=True, help="Print what this run would do (notices, cancels) and change "
              "nothing: no mail, no scancel, no state, log or textfile written.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON: status (ok | telemetry), now, "
              "dry_run, counters, prometheus_queries, actions (one object per notice, cancel and mail "
              "delivery, as in the state dir's actions.jsonl), jobs (every running GPU job and its verdict: "
              "exempt, unknown, busy or idle, with idle_s) and warnings.")
@pass_app
def guard(app: AppContext, dry_run: bool, as_json: bool) -> None:
    """Warn, and with [guard] action = cancel cancel, running GPU jobs whose GPUs all sit idle.

    Reads the running GPU jobs (one squeue) and their GPU utilisation over [guard] lookback from Prometheus
    (batched queries), then mails the user at warn_after and second_warn_after of idle time and, only with
    action = cancel, cancels at cancel_after with a last mail. Exempt users, accounts, partitions, QOS and
    the opt-out label are never touched. Every action goes to STATE_DIR/actions.jsonl; notices wait in
    STATE_DIR/outbox until the SMTP server takes them.

    \b
    Exit codes: 0 the run finished (mail kept for a later run is a warning), 2 bad config, 3 Slurm failing,
    4 telemetry missing, partial, stale or clock skew (nothing acted on), 75 another run holds the lock.
    """
    from gpuclust.guard import GuardBusy, run_guard
    from gpuclust.slurm.queue import QueueClient

    site = app.config
    client = app.slurm
    if not isinstance(client, QueueClient):  # every client gpuclust builds reads the queue
        raise click.ClickException("this Slurm client cannot read the queue (squeue)")
    try:
        report = run_guard(site, client, dry_run=dry_run, slurm_timeout=app.slurm_timeout)
    except GuardBusy as exc:
        warn(exc)
        raise click.exceptions.Exit(EXIT_BUSY) from None
    if as_json:
        echo_json(report.to_json())
    elif not app.quiet:
        for action in report.actions:
            what = action.get("action", "")
            if action.get("job"):
                extra = f" mail={action['mail']}" if "mail" in action else ""
                to = f" to={action['to']}" if "to" in action else ""
                echo_text(f"{what} job {action['job']} ({action.get('user', '')}): stage {action.get('stage')}, "
                          f"idle {action.get('idle_s', 0) / 60:.0f} min{extra}{to}")
            else:
                echo_text(f"{what} {action.get('notice', '')} to {action.get('to', '')}"
                          + (f": {action['error']}" if action.get("error") else ""))
        c = report.counters
        echo_text(f"guard: {c.get('jobs_seen', 0)} running GPU job(s), {c.get('jobs_idle', 0)} idle, "
                  f"{c.get('jobs_exempt', 0)} exempt, {c.get('jobs_unknown', 0)} unknown; {c.get('warned', 0)} "
                  f"warned, {c.get('cancelled', 0)} cancelled" + (" (dry run: nothing done)" if dry_run else ""))
    for problem in report.warnings:
        warn(problem)
    raise click.exceptions.Exit(EXIT_TELEMETRY if report.status == "telemetry" else EXIT_OK)
