"""gpuclust.mail against a real SMTP server (tests/smtpsink.py: aiosmtpd in its own process): a notice is kept
in the outbox while the server is down, refusing or silent, retried on the next flush, and delivered once."""

from __future__ import annotations

from pathlib import Path

from gpuclust.mail import AddressBook, Notice, Outbox, SmtpSettings
from tests.smtpsink import SmtpSink, free_port


def _notice(key: str = "guard-7-warn") -> Notice:
    return Notice(key, "alice@example.org", "job 7: idle GPUs", "text part\n", "<p>html part</p>\n")


def _smtp(port: int) -> SmtpSettings:
    return SmtpSettings("127.0.0.1", port, 1.5, "gpuclust@example.org")


def test_delivery_text_and_html_once(tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "maildir").start()
    try:
        box = Outbox(tmp_path / "outbox")
        assert box.put(_notice(), "gpuclust@example.org")
        assert not box.put(_notice(), "gpuclust@example.org")  # same key: queued once
        results = box.flush(_smtp(sink.port))
        assert [(r.key, r.sent) for r in results] == [("guard-7-warn", True)]
        assert box.flush(_smtp(sink.port)) == [] and not box.put(_notice(), "gpuclust@example.org")  # sent: never again
        (msg,) = sink.messages()
        assert msg["To"] == "alice@example.org" and msg["From"] == "gpuclust@example.org"
        assert msg["X-Gpuclust-Notice"] == "guard-7-warn"
        kinds = [p.get_content_type() for p in msg.walk() if not p.is_multipart()]
        assert kinds == ["text/plain", "text/html"]
    finally:
        sink.stop()


def _kept_then_sent_once(tmp_path: Path, mode: str | None) -> None:
    sink = SmtpSink(tmp_path / "maildir")
    box = Outbox(tmp_path / "outbox")
    box.put(_notice("guard-7-warn"), "gpuclust@example.org")
    box.put(_notice("guard-8-warn"), "gpuclust@example.org")
    if mode is not None:
        sink.start(mode)
    try:
        results = box.flush(_smtp(sink.port))
        assert [r.sent for r in results] == [False, False], results
        assert len(box.pending()) == 2 and sink.messages() == []
        sink.start("ok")  # the server is back: the next run delivers each kept notice, once
        assert [r.sent for r in box.flush(_smtp(sink.port))] == [True, True]
        assert box.pending() == [] and box.flush(_smtp(sink.port)) == []
        assert sorted(m["X-Gpuclust-Notice"] for m in sink.messages()) == ["guard-7-warn", "guard-8-warn"]
    finally:
        sink.stop()


def test_smtp_down_keeps_and_retries(tmp_path: Path) -> None:
    _kept_then_sent_once(tmp_path, None)


def test_smtp_refusing_550_keeps_and_retries(tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "probe").start("refuse")
    try:
        box = Outbox(tmp_path / "o")
        box.put(_notice(), "gpuclust@example.org")
        (result,) = box.flush(_smtp(sink.port))
        assert not result.sent and result.error.startswith("refused: 550")
    finally:
        sink.stop()
    _kept_then_sent_once(tmp_path / "again", "refuse")


def test_smtp_silent_times_out_keeps_and_retries(tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "probe").start("slow")
    try:
        box = Outbox(tmp_path / "o")
        box.put(_notice(), "gpuclust@example.org")
        box.put(_notice("guard-9-warn"), "gpuclust@example.org")
        results = box.flush(_smtp(sink.port))
        assert "timed out" in results[0].error and results[1].error.startswith("skipped")  # one timeout a run
    finally:
        sink.stop()
    _kept_then_sent_once(tmp_path / "again", "slow")


def test_address_book(tmp_path: Path) -> None:
    path = tmp_path / "addresses"
    path.write_text("# who\nalice alice@lab.example.org\nbob: bob@elsewhere.org\nbroken\n")
    book = AddressBook("{user}@example.org", str(path))
    assert book.address("alice") == "alice@lab.example.org" and book.address("bob") == "bob@elsewhere.org"
    assert book.address("carol") == "carol@example.org"
    assert book.problems == [f"{path}:4: expected `user address`, got 'broken'"]
    assert AddressBook(None, None).address("carol") is None
    assert free_port() > 0
