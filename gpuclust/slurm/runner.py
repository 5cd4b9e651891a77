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
    """What a command gave: its argv, exit code, stdout and stderr (and stdout's bytes when they were asked for)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str  # ("" when the raw bytes were asked for)
    stderr: str
    raw: bytes = b""  # stdout's bytes as the command wrote them (raw_stdout=True)


def _text(data: bytes) -> str:
    """A command's output as text, as Popen(text=True, errors="surrogateescape") gives it (universal newlines
    included)."""
    return data.decode("utf-8", "surrogateescape").replace("\r\n", "\n").replace("\r", "\n")


def run_command(
    argv: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    check: bool = True,
    raw_stdout: bool = False,
) -> CommandResult:
    """Run argv (never through a shell). `env` entries are laid over os.environ for this call only.

    Output is decoded as UTF-8 (undecodable bytes kept as surrogate escapes); with `raw_stdout`, stdout is
    kept as the bytes the command wrote (`CommandResult.raw`), never decoded: a reader takes them as they
    are (sacct's dump for the accounting reader)."""
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
            start_new_session=True,  # own process group, so a timeout can kill children too
        )
    except FileNotFoundError as exc:
        raise SlurmCommandNotFound(argv) from exc
    try:
        given = None if input_text is None else input_text.encode("utf-8", "surrogateescape")
        out, err = proc.communicate(given, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise SlurmTimeout(argv, timeout) from None
    except BaseException:
        _kill_group(proc)
        raise
    stdout = "" if raw_stdout else _text(out)
    stderr = _text(err)
    result = CommandResult(tuple(argv), proc.returncode, stdout, stderr, out if raw_stdout else b"")
    if check and proc.returncode != 0:
        raise SlurmCommandError(argv, proc.returncode, stderr, stdout)
    return result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()
