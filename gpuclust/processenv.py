"""The environment of gpuclust's own process, and the one the processes it starts get.

gpuclust does no linear algebra, yet numpy's OpenBLAS starts a thread per core when numpy loads, and each one
spins on a core waiting for work that never comes: CPU time a command never uses, taken from it on a small or
busy login node (BENCHMARKS.md, "OpenBLAS's idle threads"). The console script asks OpenBLAS for one thread,
unless the caller chose a number. What it sets is for gpuclust's process alone: a child process (a Slurm
command; through `sbatch --export=ALL`, an acceptance job and its torch) gets the caller's environment as it was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

OWN_SETTINGS: dict[str, str] = {"OPENBLAS_NUM_THREADS": "1"}
"""Variables the console script sets for its own process where the caller has not set them."""

_set_here: dict[str, str] = {}


def apply_own_settings() -> None:
    """Set OWN_SETTINGS that the caller left unset (before numpy loads: OpenBLAS reads them once, then)."""
    for name, value in OWN_SETTINGS.items():
        if name not in os.environ:
            os.environ[name] = value
            _set_here[name] = value


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a process gpuclust starts: the caller's (without what apply_own_settings set), with
    `extra` laid over it."""
    env = {name: value for name, value in os.environ.items() if _set_here.get(name) != value}
    if extra:
        env.update(extra)
    return env
