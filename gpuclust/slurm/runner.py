"""The one way gpuclust runs an external command: argv lists only, a timeout that kills the whole process
group, and typed errors that carry argv, exit code and stderr."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuclust.errors import SlurmCommandError, SlurmCommandNotFound, SlurmTimeout

DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run_command(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    check: bool = True,
) -> CommandResult:
    """Run argv (never through a shell). `env` entries are laid over os.environ for this call only."""
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError(f"run_command takes a non-empty list of str, got {argv!r}")
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            start_new_session=True,  # own process group, so a timeout can kill children too
        )
    except FileNotFoundError as exc:
        raise SlurmCommandNotFound(argv) from exc
    try:
        stdout, stderr = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SlurmTimeout(argv, timeout) from None
    except BaseException:
        _kill_group(proc)
        raise
    result = CommandResult(tuple(argv), proc.returncode, stdout, stderr)
    if check and proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, stderr, stdout)
    return result


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
