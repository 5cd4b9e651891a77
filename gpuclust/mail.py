"""Mail for any plane (the guard's notices now, `report notify` later): an outbox on disk, and SMTP delivery
that never loses a notice and never sends one twice.

A notice is first written, whole, to OUTBOX/pending/KEY.eml (an atomic write; KEY names it, so the same notice
is queued once however often its sender runs). `Outbox.flush` sends each pending file and only then moves it
to OUTBOX/sent/ (a rename). SMTP down, refusing or slower than the timeout: the file stays pending and the next
flush tries it again. After a connection failure or a timeout the rest of that flush is skipped (kept), so a
dead server costs one timeout per run, not one per notice.
"""

from __future__ import annotations

import os
import re
import smtplib
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formatdate, make_msgid
from pathlib import Path

from gpuclust.atomicfile import write_atomic

__all__ = ["AddressBook", "Notice", "Outbox", "SendResult", "SmtpSettings", "build_message", "render_address"]

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


@dataclass(frozen=True)
class SmtpSettings:
    """The SMTP server notices are sent through, its timeout, and the From address."""

    host: str
    port: int
    timeout_s: float
    mail_from: str


@dataclass(frozen=True)
class Notice:
    """One mail: its outbox key, recipient and subject, and its text and HTML bodies."""

    key: str  # unique per notice (e.g. guard-1234-warn): the outbox file's name
    to: str
    subject: str
    text: str
    html: str


@dataclass(frozen=True)
class SendResult:
    """What a flush did with one pending notice: sent, or kept and why."""

    key: str
    to: str
    sent: bool
    error: str = ""  # why it was kept (empty when sent)


def build_message(notice: Notice, mail_from: str) -> EmailMessage:
    """A multipart/alternative mail with the text and HTML parts."""
    msg = EmailMessage(policy=policy.SMTP)
    msg["From"] = mail_from
    msg["To"] = notice.to
    msg["Subject"] = notice.subject
    msg["Date"] = formatdate(localtime=False, usegmt=True)
    msg["Message-ID"] = make_msgid(idstring=notice.key, domain=mail_from.rpartition("@")[2] or None)
    msg["X-Gpuclust-Notice"] = notice.key
    msg.set_content(notice.text)
    msg.add_alternative(notice.html, subtype="html")
    return msg


def render_address(template: str, user: str, account: str = "") -> str:
    return template.format(user=user, account=account)


class AddressBook:
    """A user's address: the address file's line for the user, else the template, else none."""

    def __init__(self, template: str | None, address_file: str | None) -> None:
        self.template = template
        self.by_user: dict[str, str] = {}
        self.problems: list[str] = []
        if address_file:
            self._read(address_file)

    def _read(self, path: str) -> None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            self.problems.append(f"{path}: cannot read the address file: {exc.strerror or exc}")
            return
        for number, line in enumerate(text.splitlines(), 1):
            body = line.split("#", 1)[0].strip()
            if not body:
                continue
            parts = body.replace(":", " ", 1).split()
            if len(parts) != 2 or "@" not in parts[1]:
                self.problems.append(f"{path}:{number}: expected `user address`, got {line.strip()!r}")
                continue
            self.by_user[parts[0]] = parts[1]

    def address(self, user: str, account: str = "") -> str | None:
        if user in self.by_user:
            return self.by_user[user]
        if self.template and user:
            return render_address(self.template, user, account)
        return None


class Outbox:
    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.pending_dir = self.dir / "pending"
        self.sent_dir = self.dir / "sent"

    def _name(self, key: str) -> str:
        if not _KEY.fullmatch(key):
            raise ValueError(f"bad notice key {key!r}")
        return key + ".eml"

    def has(self, key: str) -> bool:
        name = self._name(key)
        return (self.pending_dir / name).exists() or (self.sent_dir / name).exists()

    def put(self, notice: Notice, mail_from: str) -> bool:
        """Queue the notice unless one with its key is queued or sent already; True when queued now."""
        if self.has(notice.key):
            return False
        self.pending_dir.mkdir(parents=True, exist_ok=True)
        data = build_message(notice, mail_from).as_bytes()
        write_atomic(self.pending_dir / self._name(notice.key), data, mode=0o600)
        return True

    def pending(self) -> list[Path]:
        if not self.pending_dir.is_dir():
            return []
        return sorted(p for p in self.pending_dir.iterdir() if p.suffix == ".eml" and not p.name.startswith("."))

    def _mark_sent(self, path: Path) -> None:
        self.sent_dir.mkdir(parents=True, exist_ok=True)
        os.replace(path, self.sent_dir / path.name)

    def flush(self, smtp: SmtpSettings) -> list[SendResult]:
        """Send every pending notice over one SMTP connection; a sent one moves to sent/, any other stays."""
        results: list[SendResult] = []
        files = self.pending()
        if not files:
            return results
        client: smtplib.SMTP | None = None
        dead = ""
        try:
            for path in files:
                key = path.stem
                msg = BytesParser(policy=policy.SMTP).parsebytes(path.read_bytes())
                to = str(msg.get("To", ""))
                if dead:
                    results.append(SendResult(key, to, False, f"skipped ({dead})"))
                    continue
                try:
                    if client is None:
                        client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_s)
                    client.send_message(msg, from_addr=smtp.mail_from, to_addrs=[to])
                except smtplib.SMTPRecipientsRefused as exc:
                    results.append(SendResult(key, to, False, "refused: " + _codes(exc.recipients.values())))
                    continue
                except (smtplib.SMTPSenderRefused, smtplib.SMTPDataError) as exc:
                    results.append(SendResult(key, to, False, f"refused: {exc.smtp_code} {_text(exc.smtp_error)}"))
                    _reset(client)
                    continue
                except (OSError, smtplib.SMTPException) as exc:
                    dead = _why(exc, smtp)
                    results.append(SendResult(key, to, False, dead))
                    _close(client)
                    client = None
                    continue
                self._mark_sent(path)
                results.append(SendResult(key, to, True))
        finally:
            _close(client)
        return results

    def prune_sent(self, older_than_s: float, now: float | None = None) -> int:
        """Forget sent notices older than this (their keys are then free again)."""
        if not self.sent_dir.is_dir():
            return 0
        limit = (time.time() if now is None else now) - older_than_s
        removed = 0
        for path in self.sent_dir.iterdir():
            try:
                if path.stat().st_mtime < limit:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue
        return removed


def _codes(answers: Iterable[tuple[int, bytes]]) -> str:
    return "; ".join(f"{code} {_text(text)}" for code, text in answers)


def _text(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return "".join(c if c.isprintable() else " " for c in text)[:300]


def _why(exc: BaseException, smtp: SmtpSettings) -> str:
    where = f"{smtp.host}:{smtp.port}"
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return f"{where}: timed out after {smtp.timeout_s:g} s"
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return f"{where}: disconnected ({_text(str(exc))})"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{where}: {exc.smtp_code} {_text(exc.smtp_error)}"
    if isinstance(exc, OSError):
        return f"{where}: unreachable ({_text(exc.strerror or str(exc))})"
    return f"{where}: {type(exc).__name__}: {_text(str(exc))}"


def _reset(client: smtplib.SMTP | None) -> None:
    if client is not None:
        try:
            client.rset()
        except (OSError, smtplib.SMTPException):
            pass


def _close(client: smtplib.SMTP | None) -> None:
    if client is not None:
        try:
            client.quit()
        except (OSError, smtplib.SMTPException):
            client.close()
