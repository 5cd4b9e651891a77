"""`gpuclust report notify`: each user's GPU use over a period by mail, and each account's to its owner (issue 43
item 3). The figures come from the report itself: the period's report is built by the pipeline as `report build`
builds it (the store, or --input), and figures/notices.py takes each recipient's figures from it.

Delivery goes through gpuclust.mail.Outbox in [notify] state_dir (default [site] state_dir/notify), keyed by
(cluster, period, recipient): a rerun for the same period queues nothing twice and sends nothing twice, and a
notice that SMTP did not take (down, refusing, slow) stays pending for the next run, whichever period that run
is for. A lock keeps two runs apart. With a dry-run directory the mails are written there as .eml files and
neither the outbox nor SMTP is touched.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures import notices as figures
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.output import notice_render
from gpuclust.atomicfile import write_atomic
from gpuclust.config import SiteConfig
from gpuclust.mail import AddressBook, Outbox, SendResult, SmtpSettings, build_message

SENT_KEEP_S = 400 * 86400  # a sent notice's file (its key) is kept this long: a rerun of an old period sends none


class NotifyBusy(Exception):
    """Another `report notify` run holds the lock."""


@dataclass
class Outcome:
    """One recipient's notice and what became of it (queued, written, skipped; then sent or kept), and why."""

    kind: str  # user | account
    name: str
    key: str
    to: str | None
    status: str  # queued | already_queued | written (dry run) | skipped; then sent | kept once flushed
    why: str = ""  # skipped: opted_out | no_address | no_gpu_use; kept: the SMTP error

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "key": self.key, "to": self.to, "status": self.status,
                **({"why": self.why} if self.why else {})}


@dataclass
class NotifyRun:
    """One `report notify` run: its cluster and period, each recipient's outcome, the deliveries and warnings."""

    cluster: str
    period: dict[str, str]
    dry_run: str | None
    outcomes: list[Outcome] = field(default_factory=list)
    deliveries: list[SendResult] = field(default_factory=list)  # every pending notice flushed, earlier ones too
    warnings: list[str] = field(default_factory=list)
    notices: list[figures.UseNotice] = field(default_factory=list)
    runs: int = 0  # the report's runs (0: an empty period)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "period": self.period, "dry_run": self.dry_run, "counts": self.counts(),
                "notices": [o.as_dict() for o in self.outcomes],
                "deliveries": [{"key": d.key, "to": d.to, "sent": d.sent, **({"error": d.error} if d.error else {})}
                               for d in self.deliveries],
                "warnings": list(self.warnings)}


def state_dir(config: SiteConfig) -> Path:
    return Path(config.notify.state_dir or Path(config.state_dir) / "notify")


_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9._-]+")


def _stamp(iso: str) -> str:
    return re.sub(r"[^0-9]", "", iso[:19]) or "0"


def notice_key(cluster: str, start: str, end: str, kind: str, name: str) -> str:
    """The outbox key of one recipient's notice for one period (gpuclust.mail's key: [A-Za-z0-9._-], at most
    200): readable where the names allow, with a digest of the exact names wherever they do not."""
    exact = "\x1f".join((cluster, start, end, kind, name))
    safe = [_UNSAFE_KEY.sub("_", part)[:60] for part in (cluster, kind, name)]
    key = f"notify-{safe[0]}-{_stamp(start)}-{_stamp(end)}-{safe[1]}-{safe[2]}"
    if "\x1f".join((safe[0], safe[1], safe[2])) != "\x1f".join((cluster, kind, name)):
        key += "-" + hashlib.sha256(exact.encode("utf-8")).hexdigest()[:12]
    return key.lstrip("._-")[:200]


def _read_lines(path: str, warnings: list[str], fields: int) -> list[list[str]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        warnings.append(f"{path}: cannot read: {exc.strerror or exc}")
        return []
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        body = line.split("#", 1)[0].strip()
        if not body:
            continue
        parts = body.split()
        if len(parts) != fields or (fields == 2 and "@" not in parts[1]):
            want = "`account address`" if fields == 2 else "one user name"
            warnings.append(f"{path}:{number}: expected {want}, got {line.strip()!r}")
            continue
        out.append(parts)
    return out


def opted_out(config: SiteConfig, warnings: list[str]) -> set[str]:
    users = set(config.notify.opt_out)
    if config.notify.opt_out_file:
        users |= {parts[0] for parts in _read_lines(config.notify.opt_out_file, warnings, 1)}
    return users


def account_owners(config: SiteConfig, warnings: list[str]) -> dict[str, str]:
    owners = dict(config.notify.account_owners)
    if config.notify.account_owners_file:
        owners.update({a: addr for a, addr in _read_lines(config.notify.account_owners_file, warnings, 2)})
    return owners


class _Lock:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise NotifyBusy(f"{path}: another `gpuclust report notify` run holds the lock") from None

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def run_notify(config: SiteConfig, period: Period | None, *, input_path: str | None = None,
               delimiter: str | None = None, slurm_version: str | None = None, dry_run_dir: str | None = None,
               now: float | None = None) -> NotifyRun:
    """Build the period's report, then queue (or, with dry_run_dir, write) each recipient's notice and send
    what the outbox holds. Raises NotifyBusy when another run holds the lock."""
    report, _ = pipeline.build(config, period, input_path=input_path, delimiter=delimiter, trend_days=0,
                               slurm_version=slurm_version)
    data = report.data
    run = NotifyRun(str(data.get("cluster") or config.cluster_name), dict(data.get("period") or {}), dry_run_dir,
                    runs=int((data.get("totals") or {}).get("runs") or 0))
    owners = account_owners(config, run.warnings)
    skip = opted_out(config, run.warnings)
    book = AddressBook(config.notify.mail.address_template, config.notify.mail.address_file)
    run.warnings += book.problems
    run.notices = figures.notices(report, config, worst=config.notify.worst_jobs, accounts=set(owners))
    staged: list[tuple[Outcome, Any]] = []
    for n in run.notices:
        key = notice_key(run.cluster, n.period_start, n.period_end, n.kind, n.name)
        if n.kind == "user":
            to = book.address(n.name, n.account)
        else:
            to = owners.get(n.name)
        outcome = Outcome(n.kind, n.name, key, to, "skipped")
        run.outcomes.append(outcome)
        if n.kind == "user" and n.name in skip:
            outcome.why = "opted_out"
        elif n.allocated_gpu_hours <= 0:
            outcome.why = "no_gpu_use"
        elif not to:
            outcome.why = "no_address"
        else:
            mail = notice_render.render(n, key=key, to=to, subject_template=config.notify.subject)
            staged.append((outcome, mail))
    if dry_run_dir is not None:
        out = Path(dry_run_dir)
        out.mkdir(parents=True, exist_ok=True)
        for outcome, mail in staged:
            write_atomic(out / f"{mail.key}.eml", build_message(mail, config.notify.mail.mail_from).as_bytes(),
                         mode=0o600)
            outcome.status = "written"
        return run
    directory = state_dir(config)
    lock = _Lock(directory / "notify.lock")
    try:
        outbox = Outbox(directory / "outbox")
        for outcome, mail in staged:
            outcome.status = "queued" if outbox.put(mail, config.notify.mail.mail_from) else "already_queued"
        m = config.notify.mail
        run.deliveries = outbox.flush(SmtpSettings(m.smtp_host, m.smtp_port, m.smtp_timeout_s, m.mail_from))
        by_key = {o.key: o for o in run.outcomes}
        for d in run.deliveries:
            o = by_key.get(d.key)
            if o is not None:
                o.status, o.why = ("sent", "") if d.sent else ("kept", d.error)
            if not d.sent:
                run.warnings.append(f"mail {d.key} to {d.to} kept in the outbox for the next run: {d.error}")
        outbox.prune_sent(SENT_KEEP_S, time.time() if now is None else now)
    finally:
        lock.release()
    return run


__all__ = ["NotifyBusy", "NotifyRun", "Outcome", "notice_key", "run_notify", "state_dir"]
