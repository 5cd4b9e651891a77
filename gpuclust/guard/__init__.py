"""The guard plane: `gpuclust guard` warns, and where the site sets it cancels, running GPU jobs whose GPUs
sit idle (gpuclust.guard.run has the rules). Its public face for the CLI and other planes."""

from __future__ import annotations

from gpuclust.guard.run import STAGES, GuardReport, due_stage, run_guard, state_dir, textfile_text
from gpuclust.guard.state import GuardBusy

__all__ = ["STAGES", "GuardBusy", "GuardReport", "due_stage", "run_guard", "state_dir", "textfile_text"]
