"""The Slurm edge: the only package that runs Slurm commands."""

from gpuclust.slurm.client import CommandSlurmClient, SlurmClient
from gpuclust.slurm.runner import CommandResult, run_command

__all__ = ["CommandResult", "CommandSlurmClient", "SlurmClient", "run_command"]
