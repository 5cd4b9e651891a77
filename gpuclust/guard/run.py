"""One guard run: read the running GPU jobs, read their utilisation, decide, act, record.

Order (each step's effect is on disk before the next, so a run that dies is finished by the next one):
  1. the lock (a second run exits at once), the state
  2. the running GPU jobs: one squeue
  3. telemetry checks: Prometheus's clock (`time()`, against this host's) and the newest utilisation sample
     (`max(timestamp(UTIL{job_label!=""}))`); then the utilisation of all jobs over the lookback, batched
     (fetch_telemetry, util only: one query_range per window for every job)
  4. per job: exempt? all GPUs seen? idle = the least trailing idle stretch over its GPUs (each ends now, or
     it is 0: a series that stops or pauses is never idle); the highest stage due that is not done yet
  5. act: a cancel (scancel) before its notice; each notice queued in the outbox; the stage recorded in the
     state; every action appended to the log
  6. send the outbox (this run's notices and any kept by an earlier run)
  7. forget ended jobs; counters to the textfile
Any doubt about telemetry in step 3 (Prometheus down, an HTTP error, an empty or stale answer, clock skew, a
failed utilisation window): no job is acted on, a warning says why, and the run's status is `telemetry`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuclust.accounting import JobWindow, TelemetryResult, fetch_telemetry
from gpuclust.atomicfile import write_atomic
from gpuclust.config import SiteConfig
from gpuclust.config.guard import GuardConfig
from gpuclust.errors import ConfigError, Problem
from gpuclust.guard.notice import NoticeFacts, build_notice
from gpuclust.guard.state import ActionLog, GuardState, JobState, Lock
from gpuclust.mail import AddressBook, Outbox, SmtpSettings
from gpuclust.output import terminal_safe
from gpuclust.prometheus import MIB, PrometheusClient, QueryFailed
from gpuclust.slurm.queue import QueueClient, RunningJob, cancel_job, running_gpu_jobs

STAGES = ("warn", "second_warn", "cancel")
SENT_KEEP_S = 30 * 86400  # sent notices are kept this long (their keys block a second send meanwhile)
TEXTFILE_NAME = "gpuclust_guard.prom"


@dataclass
class GuardReport:
    """One guard run: its status, the actions taken, every running GPU job's verdict, warnings and counters."""

    status: str  # ok | telemetry (nothing acted on: telemetry missing, partial, stale, or the clocks disagree)
    now: float
    dry_run: bool
    actions: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # every running GPU job and its verdict
    warnings: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    queries: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "now": _iso(self.now), "dry_run": self.dry_run, "counters": self.counters,
                "prometheus_queries": self.queries, "actions": self.actions, "jobs": self.jobs,
                "warnings": self.warnings}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def state_dir(site: SiteConfig) -> Path:
    return Path(site.guard.state_dir or os.path.join(site.state_dir, "guard"))


def idle_threshold(site: SiteConfig) -> float:
    g = site.guard.idle_threshold_pct
    return site.telemetry.idle_threshold_pct if g is None else g


def _exempt(job: RunningJob, g: GuardConfig) -> str | None:
    if job.user in g.exempt_users:
        return f"user {job.user}"
    if job.account in g.exempt_accounts:
        return f"account {job.account}"
    if job.partition in g.exempt_partitions:
        return f"partition {job.partition}"
    if job.qos in g.exempt_qos:
        return f"qos {job.qos}"
    if g.user_optout_label and g.user_optout_label in job.comment.replace(",", " ").split():
        return f"comment {g.user_optout_label}"
    return None


def due_stage(idle_s: float, age_s: float, g: GuardConfig, done: list[str]) -> str | None:
    """The highest stage reached that is not done yet (lower ones are passed over: one notice per run)."""
    reached = []
    if idle_s >= g.warn_after_s:
        reached.append("warn")
    if g.second_warn_after_s is not None and idle_s >= g.second_warn_after_s:
        reached.append("second_warn")
    if g.action == "cancel" and idle_s >= g.cancel_after_s and age_s >= g.cancel_after_s:
        reached.append("cancel")
    if not reached or reached[-1] in done:
        return None
    return reached[-1]


def _check_prometheus(client: PrometheusClient, site: SiteConfig, now: float, have_jobs: bool) -> list[str]:
    """Why telemetry cannot be trusted now (empty: it can)."""
    t = site.telemetry
    problems: list[str] = []
    try:
        doc = client.call("/api/v1/query", {"query": "time()"})
        server = float(doc["data"]["result"][1])
        skew = server - now
        if not math.isfinite(skew) or abs(skew) > site.guard.max_clock_skew_s:
            problems.append(f"{client.url}: Prometheus's clock is {skew:+.1f} s from this host's (more than "
                            f"[guard] max_clock_skew {site.guard.max_clock_skew_s:g} s): idle times cannot be "
                            "placed; nothing acted on")
    except QueryFailed as exc:
        return [f"{client.url}: query time(): {exc}; nothing acted on"]
    except (KeyError, TypeError, ValueError, IndexError):
        return [f"{client.url}: query time(): malformed answer; nothing acted on"]
    if not have_jobs:
        return problems
    query = f'max(timestamp({t.metric_util}{{{t.job_label}!=""}}))'
    try:
        doc = client.call("/api/v1/query", {"query": query, "time": f"{now:.3f}"})
        result = doc["data"]["result"]
        if not result:
            problems.append(f"{client.url}: query {query}: empty result: no GPU utilisation series with a job "
                            "label (dcgm-exporter down, or its job mapping off); nothing acted on")
        else:
            newest = float(result[0]["value"][1])
            age = float(result[0]["value"][0]) - newest
            if not math.isfinite(age) or age > site.guard.max_staleness_s:
                problems.append(f"{client.url}: the newest {t.metric_util} sample is {age:.0f} s old (more than "
                                f"[guard] max_staleness {site.guard.max_staleness_s:g} s): telemetry is stale; "
                                "nothing acted on")
    except QueryFailed as exc:
        problems.append(f"{client.url}: query {query}: {exc}; nothing acted on")
    except (KeyError, TypeError, ValueError, IndexError):
        problems.append(f"{client.url}: query {query}: malformed answer; nothing acted on")
    return problems


def run_guard(site: SiteConfig, slurm: QueueClient, *, dry_run: bool = False, now: float | None = None,
              slurm_timeout: float | None = None,
              telemetry: Callable[..., TelemetryResult] = fetch_telemetry) -> GuardReport:
    """One guard run (module docstring). Raises GuardBusy when another run holds the lock, ConfigError when
    Prometheus is not configured, SlurmError when squeue fails."""
    if not site.telemetry.enabled or site.telemetry.prometheus_url is None:
        raise ConfigError(Problem(site.path, None, "`gpuclust guard` reads GPU utilisation from Prometheus: set "
                                  "[telemetry] prometheus_url"))
    directory = state_dir(site)
    lock = Lock(directory / "guard.lock")
    if not dry_run or directory.is_dir():
        lock.acquire()
    try:
        return _run(site, slurm, directory, dry_run, now, slurm_timeout, telemetry)
    finally:
        lock.release()


def _run(site: SiteConfig, slurm: QueueClient, directory: Path, dry_run: bool, now: float | None,
         slurm_timeout: float | None, telemetry: Callable[..., TelemetryResult]) -> GuardReport:
    g = site.guard
    state = GuardState.load(directory / "state.json")
    log = ActionLog(directory / "actions.jsonl")
    outbox = Outbox(directory / "outbox")
    jobs = running_gpu_jobs(slurm, timeout=slurm_timeout)
    t_now = time.time() if now is None else now
    report = GuardReport("ok", t_now, dry_run)
    counters = dict.fromkeys(("jobs_seen", "jobs_idle", "jobs_unknown", "jobs_exempt", "warned", "cancelled",
                              "ended_before_cancel", "no_address", "mail_sent", "mail_failures",
                              "telemetry_ok"), 0)
    counters["jobs_seen"] = len(jobs)
    t = site.telemetry
    assert t.prometheus_url is not None
    client = PrometheusClient(t.prometheus_url, t.timeout_s, int(t.max_response_mib) * MIB)
    problems = _check_prometheus(client, site, t_now, bool(jobs))
    report.queries = client.queries
    result: TelemetryResult | None = None
    if not problems and jobs:
        tcfg = dataclasses.replace(t, idle_threshold_pct=idle_threshold(site))
        end = datetime.fromtimestamp(t_now, timezone.utc)
        start = end - timedelta(seconds=g.lookback_s)
        windows = [JobWindow(j.job_id, min(j.start, end), end, j.gpus, key=j.job_id, nodes=j.nodes, gpu_type=j.gpu_type)
                   for j in jobs]
        result = telemetry(tcfg, windows, start, end, util_only=True)
        report.queries += result.queries
        if result.util_failed:
            problems.append(f"{t.prometheus_url}: {result.util_failed} utilisation quer"
                            f"{'y' if result.util_failed == 1 else 'ies'} failed; nothing acted on")
            problems += [terminal_safe(w) for w in result.warnings[:5]]
        elif not result.jobs:
            problems.append(f"{t.prometheus_url}: no utilisation points for any of the {len(jobs)} running GPU "
                            "job(s) (empty result); nothing acted on")
    if problems:
        report.status = "telemetry"
        report.warnings += problems
    else:
        counters["telemetry_ok"] = 1

    unsaved: list[dict[str, Any]] = []  # actions done, not yet in the log and the state (RECORD_BATCH)
    book = AddressBook(g.mail.address_template, g.mail.address_file)
    report.warnings += book.problems
    threshold = idle_threshold(site)
    for job in jobs:
        verdict: dict[str, Any] = {"job": job.job_id, "user": job.user, "account": job.account,
                                   "partition": job.partition, "gpus": job.gpus, "nodes": list(job.nodes)}
        report.jobs.append(verdict)
        js = state.jobs.get(job.job_id)
        if js is None:
            js = JobState([], t_now, job.user)
            if not dry_run:
                state.jobs[job.job_id] = js
        why = _exempt(job, g)
        if why:
            counters["jobs_exempt"] += 1
            verdict.update(verdict="exempt", why=why)
            continue
        if problems or result is None:
            counters["jobs_unknown"] += 1
            verdict.update(verdict="unknown", why="telemetry")
            continue
        tel = result.jobs.get(job.job_id)
        if tel is None or tel.gpus_seen != job.gpus:
            counters["jobs_unknown"] += 1
            seen = 0 if tel is None else tel.gpus_seen
            verdict.update(verdict="unknown", why=f"{seen} of {job.gpus} GPUs have utilisation series")
            continue
        idle_s = min(gpu.trailing_idle_s for gpu in tel.gpus)
        verdict["idle_s"] = round(idle_s, 1)
        if idle_s <= 0:
            verdict["verdict"] = "busy"
            continue
        counters["jobs_idle"] += 1
        verdict["verdict"] = "idle"
        age_s = t_now - job.start.timestamp()
        stage = due_stage(idle_s, age_s, g, js.stages)
        if stage is None:
            continue
        price = site.price_per_gpu_hour(job.gpu_type or site.partition_gpu_type(job.partition), job.partition)
        facts = NoticeFacts(
            job=job.job_id, user=job.user, account=job.account, partition=job.partition, stage=stage,
            cluster=site.cluster_name, idle_s=idle_s, gpus=job.gpus, nodes=job.nodes,
            per_gpu=tuple((gpu.node, gpu.gpu, gpu.trailing_idle_s) for gpu in tel.gpus),
            threshold_pct=threshold, cost=None if price is None else price * job.gpus * idle_s / 3600,
            currency=site.currency, warn_after_s=g.warn_after_s, cancel_after_s=g.cancel_after_s, action=g.action)
        action: dict[str, Any] = {"time": _iso(t_now), "job": job.job_id, "user": job.user, "account": job.account,
                                  "partition": job.partition, "stage": stage, "idle_s": round(idle_s, 1),
                                  "gpus": job.gpus, "nodes": list(job.nodes),
                                  "cost": None if facts.cost is None else round(facts.cost, 2),
                                  "currency": site.currency}
        if stage == "cancel":
            if dry_run:
                action["action"] = "would_cancel"
            elif cancel_job(slurm, job.job_id, timeout=slurm_timeout):
                action["action"] = "cancel"
                counters["cancelled"] += 1
            else:
                action["action"] = "ended"  # it ended between read and act: nothing to cancel, nothing to say
                counters["ended_before_cancel"] += 1
                _record(report, log, state, js, stage, action, dry_run, unsaved)
                continue
        else:
            action["action"] = "would_notice" if dry_run else "notice"
            counters["warned"] += 1
        to = book.address(job.user, job.account)
        notice = build_notice(facts, to or "")
        action["notice"] = notice.key
        if to is None:
            counters["no_address"] += 1
            action["mail"] = "no_address"
        elif dry_run:
            action["mail"] = "would_queue"
            action["to"] = to
        else:
            action["mail"] = "queued" if outbox.put(notice, g.mail.mail_from) else "already_queued"
            action["to"] = to
        _record(report, log, state, js, stage, action, dry_run, unsaved)
    if not dry_run:
        _save(log, state, unsaved)  # before any mail goes out
        smtp = SmtpSettings(g.mail.smtp_host, g.mail.smtp_port, g.mail.smtp_timeout_s, g.mail.mail_from)
        sends = outbox.flush(smtp)
        mail_records = []
        for sent in sends:
            counters["mail_sent" if sent.sent else "mail_failures"] += 1
            mail_records.append({"time": _iso(time.time()), "action": "mail_sent" if sent.sent else "mail_kept",
                                 "notice": sent.key, "to": sent.to, **({"error": sent.error} if sent.error else {})})
            if not sent.sent:
                report.warnings.append(f"mail {sent.key} to {sent.to} kept in the outbox for the next run: "
                                       f"{sent.error}")
        log.append(mail_records)
        report.actions += mail_records
        outbox.prune_sent(SENT_KEEP_S, t_now)
        gone = state.prune({j.job_id for j in jobs})
        if gone:
            log.append([{"time": _iso(t_now), "action": "forget", "job": j} for j in gone])
        state.save()
    report.counters = counters
    if not dry_run and g.textfile_dir:
        write_textfile(Path(g.textfile_dir) / TEXTFILE_NAME, report)
    return report


# Actions reach actions.jsonl and state.json in batches of this many: saving the whole state after each of
# thousands of notices made a first run on a large cluster quadratic (BENCHMARKS.md "gpuclust guard with 10,000
# running jobs"). A crash inside a batch sends nothing twice: the outbox keeps each notice by its job and stage key
# (a repeated stage finds it `already_queued`), and a repeated scancel finds the job ended.
RECORD_BATCH = 200


def _record(report: GuardReport, log: ActionLog, state: GuardState, js: JobState, stage: str,
            action: dict[str, Any], dry_run: bool, unsaved: list[dict[str, Any]]) -> None:
    report.actions.append(action)
    if dry_run:
        return
    js.stages.append(stage)
    unsaved.append(action)
    if len(unsaved) >= RECORD_BATCH:
        _save(log, state, unsaved)


def _save(log: ActionLog, state: GuardState, unsaved: list[dict[str, Any]]) -> None:
    """The log first (what was done), then the stages (what is not to be done again)."""
    log.append(unsaved)
    unsaved.clear()
    state.save()


def textfile_text(report: GuardReport) -> str:
    lines = []
    for name, value in report.counters.items():
        metric = f"gpuclust_guard_{name}"
        lines += [f"# HELP {metric} gpuclust guard, last run: {name.replace('_', ' ')}", f"# TYPE {metric} gauge",
                  f"{metric} {value}"]
    lines += ["# HELP gpuclust_guard_last_run_timestamp_seconds gpuclust guard: when the last run ended",
              "# TYPE gpuclust_guard_last_run_timestamp_seconds gauge",
              f"gpuclust_guard_last_run_timestamp_seconds {report.now:.3f}"]
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, report: GuardReport) -> None:
    write_atomic(path, textfile_text(report), make_parents=True)
