"""`report fetch` streams: sacct's raw bytes go from the runner into the reader (never decoded to str and
back), and each UTC day is written to the staged snapshot before the next is fetched (memory: one day)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.history import store
from gpuclust.accounting.history.fetch import fetch_day, sacct_args
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER
from gpuclust.errors import SlurmCommandError
from gpuclust.slurm.replay import ReplaySlurmClient
from gpuclust.slurm.runner import run_command
from tests.unit.test_accounting_store import D1, D2, config, out, period


class BytesOnlyClient(ReplaySlurmClient):
    """Answers sacct with bytes only (text use would fail), and notes which days the store's staging
    snapshot already holds at each call."""

    def __init__(self, root: Path, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.root = root
        self.staged_days: list[list[str]] = []

    def sacct(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        raise AssertionError("the fetch must read sacct's bytes, not text")

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        snaps = sorted((self.root / "snapshots").iterdir(), key=lambda p: p.stat().st_mtime)
        current = (self.root / "current").resolve() if (self.root / "current").exists() else None
        staging = [p for p in snaps if p != current]
        self.staged_days.append(sorted(d.name for d in staging[-1].glob("cluster=*/day=*")) if staging else [])
        return super().sacct_bytes(args, timeout=timeout)


def test_fetch_reads_bytes_and_writes_each_day_before_the_next(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    client = BytesOnlyClient(root)
    client.add("sacct", sacct_args(D1), out({}))
    client.add("sacct", sacct_args(D2), out({"JobID": "2", "JobIDRaw": "2"}))
    summary = pipeline.fetch(client, cfg, period(D1, D2))
    assert [d["rows"] for d in summary.days] == [1, 1]
    # When day 2 was fetched, day 1 was already on disk in the staging snapshot (not held in memory).
    assert client.staged_days == [[], [f"day={D1.isoformat()}"]]
    assert store.load(root).num_rows == 2


def test_failure_mid_fetch_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    root = store.store_dir(str(tmp_path))
    first = ReplaySlurmClient()
    first.add("sacct", sacct_args(D1), out({}))
    pipeline.fetch(first, cfg, period(D1))
    before = (root / "current").resolve()
    broken = ReplaySlurmClient()
    broken.add("sacct", sacct_args(D1), out({"JobID": "5", "JobIDRaw": "5"}))
    broken.fail("sacct", sacct_args(D2), 1, "sacct: error: slurmdbd down")
    with pytest.raises(SlurmCommandError):
        pipeline.fetch(broken, cfg, period(D1, D2))
    assert (root / "current").resolve() == before
    assert store.load(root).column("job_id").to_pylist() == ["1"]
    assert [p for p in (root / "snapshots").iterdir()] == [before]


def test_fetch_day_keeps_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    """A name with a byte that is no UTF-8 reaches the reader as sacct wrote it (replaced per value, as the
    reader does for any input), and a carriage return stays a carriage return."""
    text = out({"JobName": "bad\udcffname"}, {"JobID": "2", "JobIDRaw": "2", "JobName": "cr\rname"})
    client = ReplaySlurmClient()
    client.add("sacct", sacct_args(D1), text)
    got = fetch_day(client, D1)
    assert got.table.column("job_name").to_pylist() == ["bad\ufffdname", "cr\rname"]
    assert got.reader in ("direct", "reference")


def test_runner_raw_stdout_is_the_exact_bytes() -> None:
    res = run_command(["printf", "a\\377\\r\\nb" + FETCH_DELIMITER.replace("|", "\\174")], raw_stdout=True)
    assert res.raw == b"a\xff\r\nb\x1f|\x1e" and res.stdout == ""
    assert run_command(["printf", "a\\r\\nb"]).stdout == "a\nb"  # the text form: universal newlines, as before
