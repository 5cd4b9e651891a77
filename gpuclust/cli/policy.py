"""`gpuclust policy`: submit policy rendered to job_submit.lua, and sacctmgr quotas."""

from __future__ import annotations

import click


@click.group("policy")
def group() -> None:
    """Submit policy: render job_submit.lua, check a job against it, plan sacctmgr quotas."""
