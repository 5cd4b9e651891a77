"""`gpuclust policy render|check` through click."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.sbatch import job_desc_from_options

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = str(REPO / "site.example.conf")


def _run(*args, **kw):
    return CliRunner().invoke(cli, ["--config", EXAMPLE, "policy", *args], **kw)


def test_render_stdout_and_out(tmp_path):
    out = _run("render")
    assert out.exit_code == 0 and out.output == (REPO / "job_submit" / "job_submit.lua").read_text()
    target = tmp_path / "job_submit.lua"
    res = _run("render", "--out", str(target))
    assert res.exit_code == 0 and target.read_text() == out.output


def test_check_accept_and_reject_exit_codes():
    ok = _run("check", "--user", "alice", "--", "-A", "ml", "--gres=gpu:h100:2", "--comment", "team=ml project=x")
    assert ok.exit_code == 0 and ok.output.startswith("ACCEPT")
    bad = _run("check", "--user", "alice", "--", "-A", "ml", "--gres=gpu:2", "--comment", "team=ml project=x")
    assert bad.exit_code == 1 and "partition_typed_gpu" in bad.output and "rc=2072" in bad.output
    exempt = _run("check", "--user", "root", "--", "--gres=gpu:2")
    assert exempt.exit_code == 0 and "exempt" in exempt.output


def test_check_account_option_and_json():
    res = _run("check", "--json", "--user", "alice", "--account", "physics", "--", "--gpus=h100:9",
               "--comment=team=physics,project=q")
    data = json.loads(res.output)
    assert res.exit_code == 1 and data["rule"] == "account_max_gpus" and data["job_desc"]["tres_per_job"] == "gres:gpu:h100:9"


def test_check_script_matches_the_rendered_lua(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -A physics -N 3\n#SBATCH --gpus-per-node=h100:4\n"
                      "#SBATCH --comment='team=physics project=qcd'\nsrun true\n")
    res = _run("check", "--json", "--user", "alice", "--script", str(script))
    data = json.loads(res.output)
    lua = LuaPolicy(_run("render").output)
    job = job_desc_from_options([], script=script.read_text(), user="alice")
    result = lua.submit(job)
    assert res.exit_code == 1 and data["rc"] == result.rc == -1 and data["message"] == result.message
    assert data["rule"] == "account_max_gpus" and "job asks for 12 GPUs" in data["message"]


def test_check_bad_option_is_input_error():
    res = _run("check", "--", "-t", "soon")
    assert res.exit_code == 2
