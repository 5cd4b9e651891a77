"""A real SMTP server for the tests, run as its own process: aiosmtpd (PyPI), storing every message it accepts
as a file in a Maildir's new/ directory, which the tests read back.

    python tests/smtpsink.py --port PORT --maildir DIR [--mode ok|refuse|slow]

ok: accept and store. refuse: answer 550 to every RCPT TO. slow: accept TCP connections and never say a word
(a server that hangs: the client's timeout must end the conversation). Prints `READY <port>` on stdout once
it listens; a test waits for that line.

`SmtpSink` starts and stops it from a test (by its own PID).
"""

from __future__ import annotations

import argparse
import mailbox
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any


def _serve_aiosmtpd(port: int, maildir: str, refuse: bool) -> None:
    from aiosmtpd.controller import Controller

    box = mailbox.Maildir(maildir, create=True)
    lock = threading.Lock()

    class Handler:
        async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                              rcpt_options: Any) -> str:
            if refuse:
                return "550 5.1.1 mailbox unavailable (test sink refuses)"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            with lock:
                box.add(envelope.original_content or envelope.content)
            return "250 Message accepted for delivery"

    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    print(f"READY {port}", flush=True)
    try:
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
    finally:
        controller.stop()


def _serve_silent(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(16)
    print(f"READY {port}", flush=True)
    held = []
    while True:
        conn, _ = srv.accept()
        held.append(conn)  # never answered, never closed until we are killed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--maildir", required=True)
    parser.add_argument("--mode", choices=("ok", "refuse", "slow"), default="ok")
    args = parser.parse_args()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    if args.mode == "slow":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
        _serve_silent(args.port)
    else:
        _serve_aiosmtpd(args.port, args.maildir, args.mode == "refuse")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmtpSink:
    """The sink as a child process of a test; `messages()` reads back what it stored."""

    def __init__(self, maildir: Path, port: int | None = None) -> None:
        self.maildir = maildir
        self.port = port or free_port()
        self.proc: subprocess.Popen[str] | None = None

    def start(self, mode: str = "ok", timeout: float = 30.0) -> SmtpSink:
        self.stop()
        self.proc = subprocess.Popen([sys.executable, __file__, "--port", str(self.port), "--maildir",
                                      str(self.maildir), "--mode", mode], stdout=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        ready = [""]

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            ready[0] = self.proc.stdout.readline()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(max(0.0, deadline - time.monotonic()))
        if not ready[0].startswith("READY"):
            self.stop()
            raise RuntimeError(f"smtp sink ({mode}) did not start within {timeout} s")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def messages(self) -> list[EmailMessage]:
        new = self.maildir / "new"
        if not new.is_dir():
            return []
        return [message_from_bytes(p.read_bytes(), policy=policy.default)  # type: ignore[misc]
                for p in sorted(new.iterdir())]


if __name__ == "__main__":
    main()
