"""What every command gets through click's context: the config path and a SlurmClient.

Tests swap the client by passing `obj=AppContext(client=...)` to CliRunner.invoke.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from gpuclust.cli.output import echo_text
from gpuclust.config import SiteConfig, find_config_path, load_config
from gpuclust.errors import ConfigError
from gpuclust.slurm.client import CommandSlurmClient, SlurmClient
from gpuclust.slurm.runner import DEFAULT_TIMEOUT_S


@dataclass
class AppContext:
    """What every command shares: the site config (loaded on first use), the Slurm client and the global options."""

    config_path: str | None = None
    client: SlurmClient | None = None
    client_factory: Callable[..., SlurmClient] = field(default=CommandSlurmClient)
    slurm_timeout: float = DEFAULT_TIMEOUT_S
    quiet: bool = False  # --quiet: nothing on stdout, no notes
    config_origin: str | None = None  # "--config" or "$GPUCLUST_CONFIG" when one named the file
    command_path: tuple[str, ...] = ()  # the subcommand being run, e.g. ("audit", "partition")
    backend: str | None = None  # --backend; None: the site config's [slurm] backend, else cli
    _config: SiteConfig | None = None

    @property
    def config(self) -> SiteConfig:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    @config.setter
    def config(self, value: SiteConfig) -> None:
        self._config = value

    def reset_config(self) -> None:
        """Forget a loaded config (a later --config names another file)."""
        self._config = None

    def note(self, message: str) -> None:
        """An informational line on stderr; --quiet drops it (warnings and errors are echoed directly)."""
        if not self.quiet:
            echo_text(message, err=True)

    def slurm_backend(self) -> tuple[str, str]:
        """(backend, where it was chosen): --backend, else the site config's [slurm] backend, else cli. A missing
        or invalid config means cli here: the command itself reports the config as it always does."""
        if self.backend:
            return self.backend, f"--backend {self.backend}"
        if not Path(find_config_path(self.config_path)).exists():
            return "cli", "default"
        try:
            site = self.config
        except ConfigError:
            return "cli", "default"
        return site.slurm_backend, f"{site.path}: [slurm] backend = {site.slurm_backend}"

    @property
    def slurm(self) -> SlurmClient:
        if self.client is None:
            client = self.client_factory(timeout=self.slurm_timeout)
            backend, origin = self.slurm_backend()
            if backend == "pyslurm":  # nodes through pyslurm (imported on first use), every command via `client`
                from gpuclust.slurm.pyslurm_backend import PyslurmSlurmClient

                client = PyslurmSlurmClient(client, origin=origin)
            self.client = client
        return self.client


pass_app = click.make_pass_decorator(AppContext, ensure=True)
