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


def test_script_bytes_are_read_per_line_not_rejected():
    from gpuclust.policy.sbatch import SbatchRefusal, read_sbatch

    body = b"#!/bin/bash\n# caf\xe9 \xff\n#SBATCH -A ml --comment=\xe9t\xe9\n#SBATCH -G 2\nsrun true\n"
    job = read_sbatch([], script=body).job_desc
    assert job["account"] == "ml" and job["tres_per_job"] == "gres:gpu:2" and job["comment"] == "\ufffdt\ufffd"
    for bad, line in ((b"#!/bin/sh\n#SBATCH -A ml\n\0\n", 3), (b"#!/bin/sh\n#SBATCH -A ml\r\n", 2),
                      (b"#!/bin/sh\n\n#SBATCH --comment='x\n", 3), (b"#!/bin/sh\n#SBATCH -A ml stray\n", 2)):
        with pytest.raises(SbatchRefusal) as exc:
            read_sbatch([], script=bad, script_source="job.sh")
        assert exc.value.problems[0].line == line and exc.value.problems[0].file == "job.sh", exc.value


def test_issue_13_grammar_cases():
    from gpuclust.policy.sbatch import SbatchRefusal, read_sbatch

    assert read_sbatch(["-G", "64", "-A", "ml"]).job_desc["tres_per_job"] == "gres:gpu:64"
    assert read_sbatch(["-A", "ml"], script="#!/bin/sh\n#SBATCH -G 64\n").job_desc["tres_per_job"] == "gres:gpu:64"
    assert read_sbatch(["--gpus-per-n=4"]).job_desc["tres_per_node"] == "gres:gpu:4"
    assert read_sbatch(["--gpus-per-t=1", "-n", "2"], version="24.11").job_desc["tres_per_task"] == "gres/gpu=1"
    job = read_sbatch(["--gres=gpu:h100:4", "-N", "4-64"]).job_desc
    assert (job["min_nodes"], job["max_nodes"]) == (4, 64)
    for args in (["--frobnicate", "yes", "-A", "ml"], ["--acc=physics"], ["--gres=gpu:h100:-1"], ["-N", "4-2"]):
        with pytest.raises(SbatchRefusal) as exc:
            read_sbatch(args)
        assert args[0] in str(exc.value) or args[0].split("=")[0] in str(exc.value)
    with pytest.raises(SbatchRefusal) as exc:  # --gres takes "-A" as its value; "ml" is then a stray word
        read_sbatch([], script="#!/bin/sh\n#SBATCH --gres\n#SBATCH -A ml\n", script_source="job.sh")
    assert exc.value.problems[0].line == 3
