"""Integration fixtures: a real Slurm lab (tests/slurm_lab/slurm-lab), shared by the whole session.

`slurm_lab` (session): runs `slurm-lab --name $GPUCLUST_LAB_NAME up` (default name gpuclust), loads
`slurm-lab env --json` and exports its "env" block (PATH with the lab's client wrappers first when it runs a
non-host Slurm version, SLURM_CONF, SLURM_LAB_*) into os.environ for the session, so every Slurm command a test
or gpuclust runs is the lab's version.  GPUCLUST_LAB_SLURM=24.11 brings a new lab up on that version
(GPUCLUST_LAB_LUA=5.4 with it: job_submit/lua rebuilt against Lua 5.4).
If the lab cannot start: pytest.fail under CI=true, else pytest.skip with the reason.
The lab is left running afterwards (set GPUCLUST_LAB_DOWN_AFTER=1 to stop it at session end).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.integration.labutil import (  # noqa: F401  (re-exported for tests)
    SLURM_LAB,
    lab_env_json,
    lab_exec,
    run_cmd,
    submit,
    wait_for_sacct,
    wait_job_done,
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@dataclass
class SlurmLab:
    """What `slurm-lab env --json` says about the running lab (info holds the full JSON)."""

    name: str
    info: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def conf_dir(self) -> str:
        return str(self.info["conf_dir"])

    @property
    def slurm_conf(self) -> str:
        return str(self.info["slurm_conf"])

    @property
    def nodes(self) -> dict[str, dict[str, str]]:
        return dict(self.info["nodes"])

    @property
    def gpu_nodes(self) -> list[str]:
        """The default partition's nodes (node[1-4]: whole H100s), apart from the MIG and shard nodes."""
        from gpuclust.slurm.hostlist import expand

        return sorted(expand(self.info["partitions"]["gpu"]["nodes"]))

    @property
    def node_gres(self) -> dict[str, str]:
        """Each node's Gres= as the lab's slurm.conf writes it (a lab of an older layout: gpu:h100:4 each)."""
        return dict(self.info.get("node_gres") or {n: str(self.info["gres"]) for n in self.info["nodes"]})

    def __getitem__(self, key: str) -> Any:
        return self.info[key]


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"slurm lab unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(f"slurm lab unavailable: {reason}")


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    name = os.environ.get("GPUCLUST_LAB_NAME", "gpuclust")
    if os.geteuid() != 0:
        _unavailable("slurm-lab needs root")
    try:
        # GPUCLUST_LAB_SLURM (set by scripts/test --slurm V) names the version a new lab must run; an existing
        # lab keeps its own (slurm-lab refuses a different one)
        version = os.environ.get("GPUCLUST_LAB_SLURM")
        lua = os.environ.get("GPUCLUST_LAB_LUA")  # scripts/test --slurm V --lua 5.4: job_submit/lua rebuilt on it
        cp = subprocess.run(
            [str(SLURM_LAB), "--name", name, "up", *(["--slurm", version] if version else []),
             *(["--lua", lua] if lua else [])],
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        _unavailable(f"slurm-lab up: {e}")
        raise  # unreachable
    if cp.returncode != 0:
        _unavailable(f"slurm-lab up rc={cp.returncode}:\n{cp.stdout[-2000:]}{cp.stderr[-4000:]}")
    info = lab_env_json(name)
    lab = SlurmLab(name=name, info=info, env=dict(info["env"]))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in lab.env.items():
            mp.setenv(k, v)
        yield lab
    if os.environ.get("GPUCLUST_LAB_DOWN_AFTER") == "1":
        subprocess.run([str(SLURM_LAB), "--name", name, "down"], capture_output=True, timeout=120)
