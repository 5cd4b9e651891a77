"""A SlurmClient that replays output recorded from a real cluster (tests/data), for unit tests.

Calls are matched on (tool, args); an unexpected call raises, so a test never passes on invented output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuclust.errors import SlurmCommandError


@dataclass
class ReplaySlurmClient:
    """A SlurmClient answering each (tool, args) with recorded output or a recorded failure; it logs the calls."""

    responses: dict[tuple[str, ...], str] = field(default_factory=dict)
    failures: dict[tuple[str, ...], tuple[int, str]] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def add(self, tool: str, args: Sequence[str], stdout: str) -> None:
        self.responses[(tool, *args)] = stdout

    def fail(self, tool: str, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.failures[(tool, *args)] = (returncode, stderr)

    def _answer(self, tool: str, args: Sequence[str]) -> str:
        key = (tool, *args)
        self.calls.append(key)
        if key in self.failures:
            code, stderr = self.failures[key]
            raise SlurmCommandError(list(key), code, stderr)
        if key not in self.responses:
            raise AssertionError(f"ReplaySlurmClient has no recorded output for: {' '.join(key)}")
        return self.responses[key]

    def sacct(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self._answer("sacct", args)

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        """The recorded text as the bytes sacct wrote (recordings keep undecodable bytes as surrogate
        escapes)."""
        return self._answer("sacct", args).encode("utf-8", "surrogateescape")

    def scontrol(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self._answer("scontrol", args)

    def sinfo(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self._answer("sinfo", args)

    def sbatch(
        self, args: Sequence[str], *, script: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        return self._answer("sbatch", args)

    def squeue(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self._answer("squeue", args)

    def scancel(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self._answer("scancel", args)

    def sacctmgr(
        self, args: Sequence[str], *, input_text: str | None = None, timeout: float | None = None
    ) -> str:
        return self._answer("sacctmgr", args)
