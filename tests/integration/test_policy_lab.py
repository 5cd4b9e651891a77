"""The rendered policy in a real 22.05 slurmctld, and `policy quotas plan|apply` against the lab's slurmdbd.

State changed here is restored in fixture teardowns: the pass-through job_submit.lua, and every sacctmgr limit the
quota apply set (the lab's own physics GrpTRES gres/gpu=4 is part of the lab default and stays).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.render import write_lua
from tests.integration.labutil import SLURM_LAB, run_cmd, submit

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent.parent
LAB_CONF = REPO / "tests" / "data" / "policy" / "lab-site.conf"
GPUCLUST = [str(REPO / ".venv" / "bin" / "gpuclust")]
GOOD = ["-A", "physics", "--gres=gpu:h100:1", "--comment", "team=physics project=lattice", "-t", "5"]


@pytest.fixture(scope="module")
def lab_config(slurm_lab, tmp_path_factory) -> Path:
    text = LAB_CONF.read_text().replace("cluster_name = policy", f"cluster_name = {slurm_lab['cluster_name']}")
    path = tmp_path_factory.mktemp("policy") / "lab-site.conf"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def installed_policy(slurm_lab, lab_config, tmp_path_factory) -> Iterator[Path]:
    lua = write_lua(compile_policy(load_config(str(lab_config))), tmp_path_factory.mktemp("lua") / "job_submit.lua")
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(lua)], timeout=60)
    time.sleep(1.1)  # slurmctld compares the script's mtime at 1 s granularity
    try:
        yield lua
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)


def _sbatch(args: list[str]) -> subprocess.CompletedProcess[str]:
    return run_cmd(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", "true"], check=False, timeout=30)


def test_compliant_job_is_accepted(installed_policy):
    cp = _sbatch(GOOD)
    assert cp.returncode == 0, cp.stderr
    run_cmd(["scancel", cp.stdout.strip().split(";")[0]], check=False)


NONCOMPLIANT = {
    "account_missing": ["--gres=gpu:h100:1", "--comment", "team=physics project=x"],
    "label_missing": ["-A", "physics", "--gres=gpu:h100:1", "--comment", "team=physics"],
    "label_value": ["-A", "physics", "--gres=gpu:h100:1", "--comment", "team=chem project=x"],
    "partition_account": ["-A", "root", "--gres=gpu:h100:1", "--comment", "team=physics project=x"],
    "partition_gpu": ["-A", "physics", "--comment", "team=physics project=x"],
    "partition_typed_gpu": ["-A", "physics", "--gres=gpu:1", "--comment", "team=physics project=x"],
    "partition_max_gpus": ["-A", "ml", "-N", "3", "--gres=gpu:h100:4", "--comment", "team=ml project=x"],
    "partition_max_time": ["-A", "physics", "--gres=gpu:h100:1", "-t", "2-00:00:00", "--comment", "team=physics project=x"],
    "untyped_gpu": ["-A", "physics", "-p", "debug", "--gpus=2", "--comment", "team=physics project=x"],
}


@pytest.mark.parametrize("rule", sorted(NONCOMPLIANT))
def test_noncompliant_job_is_rejected_with_its_message(installed_policy, lab_config, rule):
    args = NONCOMPLIANT[rule]
    cp = _sbatch(args)
    assert cp.returncode != 0, f"{rule}: accepted as job {cp.stdout}"
    assert f"sbatch: error: gpuclust policy [{rule}]:" in cp.stderr, cp.stderr
    # `policy check` decides the same, with the same message.
    check = run_cmd([*GPUCLUST, "--config", str(lab_config), "policy", "check", "--user", "root",
                     "--default-account", "root", "--", *args], check=False)
    assert check.returncode == 1 and f"gpuclust policy [{rule}]" in check.stdout
    message = check.stdout.split(": ", 1)[1].strip()
    assert message in cp.stderr


def test_job_modify_is_checked_for_users_not_for_root(slurm_lab, installed_policy):
    user = slurm_lab["unprivileged_user"]

    def as_user(*argv: str) -> subprocess.CompletedProcess[str]:
        cmd = " ".join(argv)  # fixed, validated words only
        return run_cmd(["su", user, "-s", "/bin/sh", "-c", f"SLURM_CONF={slurm_lab.slurm_conf} {cmd}"], check=False)

    cp = as_user("sbatch", "--parsable", "--hold", "-A", "physics", "--gres=gpu:h100:1",
                 "--comment", "team=physics,project=x", "-t", "5", "-o", "/dev/null", "--wrap", "true")
    assert cp.returncode == 0, cp.stderr
    job = cp.stdout.strip().split(";")[0]
    try:
        bad = as_user("scontrol", "update", f"jobid={job}", "comment=team=chem,project=x")
        assert bad.returncode != 0  # 22.05 shows only "Unspecified error" for a rejected modify
        assert "comment=team=physics,project=x" in run_cmd(["scontrol", "show", "job", job]).stdout.lower()
        good = as_user("scontrol", "update", f"jobid={job}", "comment=team=ml,project=y")
        assert good.returncode == 0, good.stderr
        run_cmd(["scontrol", "update", f"jobid={job}", "comment=nolabels"])  # uid 0 is never blocked
    finally:
        run_cmd(["scancel", job], check=False)


def _sacctmgr(*args: str) -> None:
    run_cmd(["sacctmgr", "-i", *args], check=False, timeout=60)


@pytest.fixture
def quotas_restored(slurm_lab) -> Iterator[None]:
    cluster = slurm_lab["cluster_name"]
    try:
        yield
    finally:  # undo what lab-site.conf's quotas add to the lab defaults (-1 clears a TRES limit)
        _sacctmgr("modify", "account", "where", "name=physics", f"cluster={cluster}", "set",
                  "GrpTRES=gres/gpu:h100=-1", "GrpTRESMins=gres/gpu=-1", "MaxTRES=gres/gpu=-1")
        _sacctmgr("modify", "account", "where", "name=ml", f"cluster={cluster}", "set", "MaxTRES=gres/gpu=-1")
        for user in ("root", slurm_lab["unprivileged_user"]):
            _sacctmgr("modify", "user", "where", f"name={user}", "account=ml", f"cluster={cluster}", "set",
                      "GrpTRES=gres/gpu=-1")
        _sacctmgr("delete", "qos", "gpuclust-test")


def test_quotas_plan_apply_idempotent_and_pending_over_quota(slurm_lab, lab_config, installed_policy, quotas_restored):
    base = [*GPUCLUST, "--config", str(lab_config), "policy", "quotas"]
    plan = run_cmd([*base, "plan"], check=False, timeout=120)
    assert plan.returncode in (0, 1), plan.stderr
    applied = run_cmd([*base, "apply", "--yes"], timeout=180)
    assert "Traceback" not in applied.stderr
    again = run_cmd([*base, "plan"], check=False, timeout=120)
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    shown = run_cmd(["sacctmgr", "show", "assoc", "where", "account=physics", f"cluster={slurm_lab['cluster_name']}",
                     "format=User,GrpTRES,GrpTRESMins,MaxTRES", "--parsable2", "--noheader"]).stdout
    assert "gres/gpu:h100=4" in shown and "gres/gpu=60000" in shown
    # 8 GPUs for physics (GrpTRES gres/gpu=4): accepted by the policy, held by the association limit.
    job = submit(["-A", "physics", "-N", "2", "--gres=gpu:h100:4", "--comment", "team=physics project=big", "-t", "5",
                  "-o", "/dev/null", "--wrap", "true"])
    try:
        reason = ""
        for _ in range(30):
            out = run_cmd(["squeue", "-h", "-j", job, "-o", "%T %r"], check=False).stdout.split()
            if len(out) == 2 and out[1] not in ("None", "Priority", "Resources"):
                reason = out[1]
                break
            time.sleep(0.5)
        assert out[0] == "PENDING" and reason in ("AssocGrpGRES", "AssocGrpGRESMinutes", "QOSGrpGRES"), out
    finally:
        run_cmd(["scancel", job], check=False)


def test_lab_policy_env_is_set(slurm_lab):
    assert os.environ.get("SLURM_CONF") == slurm_lab.slurm_conf
