"""The guard's files in its state dir: the lock, the per-job state, the append-only action log, the outbox.

    guard.lock           flock'ed for the whole run: two runs never overlap (the second exits, named)
    state.json           {"version": 1, "jobs": {JOBID: {"stages": [...], "first_seen": T, "user": U}}},
                         replaced atomically after every change, so a run that dies loses nothing it did
    actions.jsonl        one JSON object per line per action, appended and fsync'ed, never rewritten
    outbox/              gpuclust.mail's pending/ and sent/ notices
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuclust.atomicfile import write_atomic
from gpuclust.errors import InputError, Problem

STATE_VERSION = 1


class GuardBusy(Exception):
    """Another guard run holds the lock."""


@dataclass
class JobState:
    """What the guard remembers of a running job: the notice stages it reached, when first seen, its user."""

    stages: list[str] = field(default_factory=list)
    first_seen: float = 0.0
    user: str = ""


@dataclass
class GuardState:
    """state.json: what the guard remembers of each job it saw running, and the file it is kept in."""

    path: Path
    jobs: dict[str, JobState] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> GuardState:
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(path)
        try:
            doc = json.loads(raw)
            if doc.get("version") != STATE_VERSION or not isinstance(doc.get("jobs"), dict):
                raise ValueError(f"expected version {STATE_VERSION} with a jobs object")
            jobs = {str(k): JobState([str(s) for s in v.get("stages", [])], float(v.get("first_seen", 0.0)),
                                     str(v.get("user", ""))) for k, v in doc["jobs"].items()}
        except (ValueError, AttributeError, TypeError) as exc:
            # never guess: a state that cannot be read would re-send every notice
            raise InputError(Problem(str(path), None, f"unreadable guard state ({exc}); move it aside only "
                                     "after checking actions.jsonl (every notice already sent is logged there)")) from None
        return cls(path, jobs)

    def save(self) -> None:
        doc = {"version": STATE_VERSION,
               "jobs": {k: {"stages": v.stages, "first_seen": v.first_seen, "user": v.user}
                        for k, v in sorted(self.jobs.items())}}
        write_atomic(self.path, json.dumps(doc, indent=1) + "\n", mode=0o600, make_parents=True)

    def prune(self, running: set[str]) -> list[str]:
        """Forget the jobs that no longer run; returns their ids."""
        gone = sorted(j for j in self.jobs if j not in running)
        for job in gone:
            del self.jobs[job]
        return gone


class ActionLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


class Lock:
    """An exclusive flock on guard.lock, held until release (or the process ends)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise GuardBusy(f"{self.path}: another `gpuclust guard` run holds the lock") from None
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
