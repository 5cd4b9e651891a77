"""The Slurm client protocol and its command-line implementation.

Everything in gpuclust that needs Slurm takes a `SlurmClient`. The CLI builds a `CommandSlurmClient` and
injects it through click's context; tests inject a `ReplaySlurmClient` fed with output recorded from the
real lab. The pyslurm backend (gpuclust.slurm.pyslurm_backend, `--backend pyslurm`) wraps a CLI client and is a
`NodeObjectSource` too: the audit takes its nodes from it, and every command from the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpuclust.slurm.runner import DEFAULT_TIMEOUT_S, CommandResult, run_command

# ISO-like, unambiguous, parseable by datetime.fromisoformat; Slurm honours it in sacct/scontrol text output.
SLURM_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
SLURM_TOOLS = ("sacct", "scontrol", "sinfo", "sbatch", "scancel", "sacctmgr", "squeue", "srun", "sreport")


@runtime_checkable
class SlurmClient(Protocol):
    """Raw access to the Slurm commands; each returns stdout and raises SlurmError subclasses."""

    def sacct(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        """sacct's stdout as the bytes it wrote (for the accounting reader, which reads them in place)."""
        ...

    def scontrol(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...

    def sinfo(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...

    def sbatch(
        self, args: Sequence[str], *, script: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> str: ...

    def scancel(self, args: Sequence[str], *, timeout: float | None = None) -> str: ...

    def sacctmgr(
        self, args: Sequence[str], *, input_text: str | None = None, timeout: float | None = None
    ) -> str: ...


@runtime_checkable
class NodeObjectSource(Protocol):
    """A client that reads nodes without scontrol: node objects of the `sinfo --json` shape (the audit maps them
    with gpuclust.slurm.records.node_from_json). `node_source` names it in the audit snapshot."""

    node_source: str

    def node_objects(self, slurm_version: tuple[int, int, int]) -> list[dict[str, Any]]: ...


@dataclass
class CommandSlurmClient:
    """Runs the real Slurm commands through `run_command`.

    Every call gets TZ and SLURM_TIME_FORMAT pinned, so parsed times do not depend on the caller's
    locale, and SLURM_CONF when one is configured (a client without it falls back to a DNS SRV lookup).
    """

    slurm_conf: str | None = None
    tz: str = "UTC"
    timeout: float = DEFAULT_TIMEOUT_S
    bin_dir: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)

    def base_env(self) -> dict[str, str]:
        env = {"TZ": self.tz, "SLURM_TIME_FORMAT": SLURM_TIME_FORMAT, "LC_ALL": "C.UTF-8"}
        conf = self.slurm_conf or os.environ.get("SLURM_CONF")
        if conf:
            env["SLURM_CONF"] = conf
        env.update(self.extra_env)
        return env

    def run(
        self,
        tool: str,
        args: Sequence[str],
        *,
        input_text: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        raw_stdout: bool = False,
    ) -> CommandResult:
        if tool not in SLURM_TOOLS:
            raise ValueError(f"not a Slurm tool: {tool!r}")
        exe = os.path.join(self.bin_dir, tool) if self.bin_dir else tool
        call_env = self.base_env()
        if env:
            call_env.update(env)
        return run_command(
            [exe, *args], timeout=timeout or self.timeout, env=call_env, input_text=input_text,
            raw_stdout=raw_stdout,
        )

    def sacct(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.run("sacct", args, timeout=timeout).stdout

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        return self.run("sacct", args, timeout=timeout, raw_stdout=True).raw

    def sacct_version(self) -> str:
        """`sacct --version` (``slurm 24.11.5``, ``slurm-wlm 22.05.8``): the release whose records it prints."""
        return self.run("sacct", ["--version"]).stdout.strip()

    def scontrol(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.run("scontrol", args, timeout=timeout).stdout

    def sinfo(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.run("sinfo", args, timeout=timeout).stdout

    def sbatch(
        self, args: Sequence[str], *, script: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> str:
        return self.run("sbatch", args, input_text=script, env=env, timeout=timeout).stdout

    def squeue(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.run("squeue", args, timeout=timeout).stdout

    def scancel(self, args: Sequence[str], *, timeout: float | None = None) -> str:
        return self.run("scancel", args, timeout=timeout).stdout

    def sacctmgr(
        self, args: Sequence[str], *, input_text: str | None = None, timeout: float | None = None
    ) -> str:
        return self.run("sacctmgr", args, input_text=input_text, timeout=timeout).stdout
