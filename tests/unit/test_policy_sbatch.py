"""sbatch options -> job_desc, replayed against what 22.05's slurmctld really presented (jobdesc-probe.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclust.errors import InputError
from gpuclust.policy.sbatch import INFINITE, job_desc_from_options, script_options, slurm_time_minutes

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
PROBES = json.loads((DATA / "jobdesc-probe.json").read_text())
# Context the probe's submitter (root) had; "name" is sbatch's own default (wrap/sbatch) and not read by the policy.
SKIP = {"name", "user_id", "default_qos"}


@pytest.mark.parametrize("case", PROBES, ids=[" ".join(c["args"]) + (" +script" if c["script"] else "") for c in PROBES])
def test_matches_what_slurmctld_presented(case):
    job = job_desc_from_options(case["args"], script=case["script"], user="root", default_account="root")
    for field, value in case["job_desc"].items():
        if field not in SKIP:
            assert job.get(field) == value, field


@pytest.mark.parametrize("text,minutes", [("90", 90), ("1:30", 2), ("10:00:01", 601), ("2-00:00:00", 2880),
                                           ("1-12", 2160), ("1-0:30", 1470), ("UNLIMITED", INFINITE)])
def test_time_forms(text, minutes):
    assert slurm_time_minutes(text) == minutes


def test_script_options_stop_at_first_command():
    script = "#!/bin/bash\n#SBATCH -A ml\n# plain comment\n#SBATCH --comment='team=ml project=x' # trailing\nhostname\n#SBATCH -A physics\n"
    assert script_options(script) == ["-A", "ml", "--comment=team=ml project=x"]


def test_command_line_overrides_script():
    job = job_desc_from_options(["-A", "physics"], script="#!/bin/sh\n#SBATCH -A ml\n")
    assert job["account"] == "physics"


def test_bad_values_are_input_errors():
    with pytest.raises(InputError):
        job_desc_from_options(["-t", "soon"])
    with pytest.raises(InputError):
        job_desc_from_options(["-N", "many"])
    with pytest.raises(InputError):
        job_desc_from_options(["-A"])
