"""Typed errors raised by the library. The CLI maps them to messages and exit codes in one place
(gpuclust.cli.main); library code never calls sys.exit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class GpuclustError(Exception):
    """Base class of every error the library raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One located problem in an input file: `file:line: message`."""

    file: str
    line: int | None
    message: str
    field: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        field = f" [{self.field}]" if self.field else ""
        if not where:  # a message about no file (InputError("...")): no made-up location
            return f"{field.strip()} {self.message}".strip()
        return f"{where}:{field} {self.message}"


class InputError(GpuclustError):
    """Bad input (config file, sacct dump, results file). Carries every problem found, never just the first."""

    def __init__(self, problems: Sequence[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem("", None, problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigError(InputError):
    """The site config is missing or invalid."""


class SlurmError(GpuclustError):
    """Anything that went wrong talking to Slurm."""


_SLURM_TOOLS = frozenset(("sacct", "sacctmgr", "sbatch", "scontrol", "sdiag", "sinfo", "squeue", "sreport", "srun",
                          "sshare", "sprio", "scancel"))


def _is_slurm_tool(argv: Sequence[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] in _SLURM_TOOLS


def _daemon_check(argv: Sequence[str]) -> str:
    """The command that tells whether the daemon behind this tool answers (slurmdbd for accounting)."""
    if argv[0].rsplit("/", 1)[-1] in ("sacct", "sacctmgr", "sreport"):
        return "`sacctmgr show cluster` checks that slurmdbd answers"
    return "`scontrol ping` checks that slurmctld answers"


class SlurmCommandNotFound(SlurmError):
    def __init__(self, argv: Sequence[str]):
        self.argv = list(argv)
        super().__init__(f"Slurm command not found: {self.argv[0]!r} (is Slurm installed and on PATH?); install "
                         "it on this host or add its directory to PATH")


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, stdout: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        detail = stderr.strip() or stdout.strip() or "(no output)"
        # Slurm's own stderr says what failed, not what to do: point at the check that tells which daemon is down.
        hint = f"\nhint: run the command by hand to see why; {_daemon_check(self.argv)}" if _is_slurm_tool(self.argv) else ""
        super().__init__(f"{' '.join(self.argv)} exited {returncode}: {detail}{hint}")


class SlurmTimeout(SlurmError):
    """A Slurm command ran past its timeout; its whole process group was killed."""

    def __init__(self, argv: Sequence[str], timeout: float):
        self.argv = list(argv)
        self.timeout = timeout
        hint = f"; raise --slurm-timeout, or check Slurm: {_daemon_check(self.argv)}" if _is_slurm_tool(self.argv) else ""
        super().__init__(f"{' '.join(self.argv)} timed out after {timeout:g}s (process group killed){hint}")


class SlurmOutputError(SlurmError):
    """Slurm answered, but with output we cannot parse."""


class UnsafeValueError(GpuclustError):
    """A value destined for an sbatch script or a command line failed validation."""
