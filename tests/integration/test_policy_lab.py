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
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.render import render_lua, write_lua
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
    "partition_gpu_type": ["-A", "physics", "--gres=gpu:-1", "--comment", "team=physics project=x"],
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


# --- A table of jobs through the real slurmctld: its verdicts must equal `policy check`'s and the Python twin's ---
#
# The rendered policy is installed with a thin recording wrapper around its two entry points: each call logs (to
# slurmctld.log, via slurm.log_info) the fields slurmctld handed the engine, the engine's return code and the
# message it showed the user. So every row is checked three ways on the running version:
#   1. the engine inside slurmctld vs the Python twin (Evaluator) on the very job_desc/job_rec slurmctld presented;
#   2. what the user saw (sbatch / scontrol exit status and message) vs the engine's logged verdict;
#   3. submit rows: `gpuclust policy check` on the same sbatch line vs slurmctld (rc, rule and message).

_FIELDS = ("account", "default_account", "default_qos", "user_name", "partition", "qos", "comment", "wckey", "name",
           "time_limit", "gres", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "min_nodes",
           "max_nodes", "num_tasks", "min_cpus", "ntasks_per_node", "sockets_per_node", "ntasks_per_socket",
           "ntasks_per_tres", "shared")
_WRAPPER_TEMPLATE = r"""
-- ===== test-only recording wrapper (tests/integration/test_policy_lab.py) =====
local GPC_F = {@FIELDS@}
local function gpc_q(v)
  if v == nil then return "null" end
  if type(v) == "number" then return string.format("%.17g", v) end
  return '"' .. string.gsub(tostring(v), '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end) .. '"'
end
local function gpc_dump(t)
  if t == nil then return "null" end
  local out = {}
  for i = 1, #GPC_F do
    local v = t[GPC_F[i]]
    if v ~= nil then out[#out + 1] = '"' .. GPC_F[i] .. '": ' .. gpc_q(v) end
  end
  return "{" .. table.concat(out, ", ") .. "}"
end
local gpc_msg = nil
local gpc_log_user = slurm.log_user
pcall(function() slurm.log_user = function(...) gpc_msg = string.format(...); return gpc_log_user(...) end end)
local gpc_submit, gpc_modify = slurm_job_submit, slurm_job_modify
function slurm_job_submit(d, p, uid)
  gpc_msg = nil
  local rc = gpc_submit(d, p, uid)
  pcall(slurm.log_info, "%s", "GPCLAB [\"submit\", " .. gpc_q(rc) .. ", " .. gpc_q(gpc_msg) .. ", " .. gpc_q(uid)
    .. ", " .. gpc_dump(d) .. ", null]")
  return rc
end
function slurm_job_modify(d, r, p, uid)
  gpc_msg = nil
  local rc = gpc_modify(d, r, p, uid)
  pcall(slurm.log_info, "%s", "GPCLAB [\"modify\", " .. gpc_q(rc) .. ", " .. gpc_q(gpc_msg) .. ", " .. gpc_q(uid)
    .. ", " .. gpc_dump(d) .. ", " .. gpc_dump(r) .. "]")
  return rc
end
"""


def recording_wrapper(fields: tuple[str, ...]) -> str:
    """The recording wrapper logging these job_desc / job_rec fields (appended before the policy's last return)."""
    return _WRAPPER_TEMPLATE.replace("@FIELDS@", ", ".join(f'"{f}"' for f in fields))


_WRAPPER = recording_wrapper(_FIELDS)

_BASE = ["-A", "physics", "--comment", "team=physics project=x", "-t", "5"]
# lab-site.conf: partition gpu needs typed GPUs, allows 8 per job, 4 per node; accounts physics/ml allow 8.
SUBMIT_TABLE = {
    "typed gres": ["--gres=gpu:h100:2"],
    "-N 2 x 4": ["--gres=gpu:h100:4", "-N", "2"],
    "node range 2-4 x 4 (issue 13)": ["--gres=gpu:h100:4", "-N", "2-4"],
    "node range 4-64": ["--gres=gpu:h100:1", "-N", "4-64"],
    "node range 1-3 x 2": ["--gpus-per-node=h100:2", "-N", "1-3"],
    "node range 1-3 x 4": ["--gpus-per-node=h100:4", "-N", "1-3"],
    "tasks spread, no -N": ["--gres=gpu:h100:1", "-n", "12"],
    "-G typed 8": ["-G", "h100:8"],
    "-G typed 9": ["-G", "h100:9"],
    "-G untyped": ["-G", "2"],
    "--gpus untyped on debug": ["-p", "debug", "--gpus=2"],
    "gpus-per-task typed 8": ["--gpus-per-task=h100:1", "-n", "8"],
    "gpus-per-task typed 9": ["--gpus-per-task=h100:1", "-n", "9"],
    "gpus-per-task typed + cpus": ["--gpus-per-task=h100:1", "-n", "4", "-c", "2"],
    "gpus-per-task untyped": ["--gpus-per-task=1", "-n", "2"],
    "gpus-per-task x ntasks-per-node range": ["--gpus-per-task=h100:1", "-n", "2", "--ntasks-per-node=2", "-N", "1-4"],
    "gpus-per-socket": ["--gpus-per-socket=h100:1", "--sockets-per-node=2", "-N", "2"],
    "ntasks-per-gpu": ["--ntasks-per-gpu=2", "--gpus=h100:2"],
    "array": ["--array=0-3", "--gres=gpu:h100:2"],
    "array over the limit": ["--array=0-1", "--gres=gpu:h100:3", "-N", "3"],
    "exclusive 2 nodes": ["--exclusive", "-N", "2", "--gres=gpu:h100:1"],
    "exclusive 3 nodes": ["--exclusive", "-N", "3", "--gres=gpu:h100:1"],
    "exclusive=user": ["--exclusive=user", "-N", "3", "--gres=gpu:h100:1"],
    "no gpu": [],
    "two typed items": ["--gres=gpu:h100:2,gpu:h100:1"],
    # issue 13: sbatch and slurmctld take these as one GPU of type "-1" / "abc" (queued when held, never runnable);
    # partition gpu's gpu_type is h100, so partition_gpu_type refuses them, and a real type the partition lacks
    "gres gpu:-1 (issue 13)": ["--gres=gpu:-1"],
    "gpus=-1": ["--gpus=-1"],
    "gpus=abc": ["--gpus=abc"],
    "-G abc": ["-G", "abc"],
    "gres typed a100 on h100": ["--gres=gpu:a100:1"],
    "gpus-per-node a100": ["--gpus-per-node=a100:1"],
    "gres H100 (case)": ["--gres=gpu:H100:1"],
    "mixed typed items h100 + -1": ["--gres=gpu:h100:1,gpu:-1"],
    "mixed fields h100 + abc": ["--gres=gpu:h100:1", "--gpus=abc:1"],
}
# Rows whose verdict is known in advance (the others are only proven equal across the engines).
EXPECTED_RULE = {row: "partition_gpu_type" for row in (
    "gres gpu:-1 (issue 13)", "gpus=-1", "gpus=abc", "-G abc", "gres typed a100 on h100", "gpus-per-node a100",
    "gres H100 (case)", "mixed typed items h100 + -1", "mixed fields h100 + abc", "gres type -1", "gres type a100")}
MODIFY_TABLE = {  # scontrol update fields on a held 1-node, 1-GPU job owned by the unprivileged user
    "label change rejected": ["comment=team=chem,project=x"],
    "label change accepted": ["comment=team=ml,project=y"],
    "more nodes within the limit": ["NumNodes=2"],
    "node range over the limit": ["NumNodes=1-4", "Gres=gpu:h100:4"],
    "time over the partition max": ["TimeLimit=3000"],
    "partition debug": ["Partition=debug"],
    "gres type -1": ["Gres=gpu:-1"],
    "gres type a100": ["Gres=gpu:a100:1"],
}


class _Log:
    def __init__(self, path: Path):
        self.path = path
        self.offset = path.stat().st_size

    def records(self, kind: str, timeout: float = 10.0) -> list[list]:
        """GPCLAB records of `kind` logged since the last call (waits for at least one)."""
        import json

        deadline = time.monotonic() + timeout
        while True:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
            found = []
            for line in data.decode("utf-8", "replace").splitlines():
                if "GPCLAB [" in line:
                    rec = json.loads(line.split("GPCLAB ", 1)[1])
                    if rec[0] == kind:
                        found.append(rec)
            if found or time.monotonic() > deadline:
                self.offset += len(data)
                return found
            time.sleep(0.2)


@pytest.fixture(scope="module")
def recorded_policy(slurm_lab, lab_config, tmp_path_factory) -> Iterator[_Log]:
    text = render_lua(compile_policy(load_config(str(lab_config))))
    head, sep, tail = text.rpartition("return slurm.SUCCESS")
    assert sep
    path = tmp_path_factory.mktemp("lua") / "job_submit.lua"
    path.write_text(head + _WRAPPER + sep + tail)
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(path)], timeout=60)
    time.sleep(1.1)
    try:
        yield _Log(Path(slurm_lab["log_dir"]) / "slurmctld.log")
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)


def _lab_evaluator(lab_config: Path) -> Evaluator:
    return Evaluator(compile_policy(load_config(str(lab_config))))


def _same_as_engine(verdict, rc, msg, where):
    assert verdict.rc == int(rc), (where, verdict, rc, msg)
    if verdict.accepted:
        assert msg is None, (where, msg)
    else:
        assert msg == verdict.message, (where, msg, verdict.message)


@pytest.mark.parametrize("row", sorted(SUBMIT_TABLE))
def test_submit_table_slurmctld_equals_policy_check(recorded_policy, lab_config, row):
    args = [*_BASE, *SUBMIT_TABLE[row]]
    cp = run_cmd(["sbatch", "--parsable", "--hold", "-o", "/dev/null", *args, "--wrap", "true"], check=False, timeout=30)
    if cp.returncode == 0:
        run_cmd(["scancel", cp.stdout.strip().split(";")[0]], check=False)
    recs = recorded_policy.records("submit", timeout=10.0 if cp.returncode == 0 or "gpuclust" in cp.stderr else 2.0)
    if not recs:
        pytest.skip(f"{row}: sbatch refused it before job_submit ({cp.stderr.strip()})")
    _, rc, msg, _uid, desc, _ = recs[-1]
    # 1. the engine in slurmctld == the Python twin on the job_desc slurmctld presented
    verdict = _lab_evaluator(lab_config).submit(desc)
    _same_as_engine(verdict, rc, msg, (row, desc))
    assert verdict.rule == EXPECTED_RULE.get(row, verdict.rule), (row, desc, verdict)
    # 2. what the user saw
    if verdict.accepted:
        assert cp.returncode == 0, (row, cp.stderr)
    else:
        assert cp.returncode != 0 and f"sbatch: error: {verdict.message}" in cp.stderr, (row, cp.stderr)
    _SLURMCTLD_VERDICTS[row] = verdict


_SLURMCTLD_VERDICTS: dict[str, Any] = {}


@pytest.mark.parametrize("row", sorted(SUBMIT_TABLE))
def test_submit_table_policy_check_equals_slurmctld(recorded_policy, lab_config, row):
    """`gpuclust policy check` on the same sbatch line decides as slurmctld did (rc, rule and message).
    Reads the sbatch line with gpuclust/policy/sbatch.py, so it also proves that reader against real sbatch."""
    verdict = _SLURMCTLD_VERDICTS.get(row)
    if verdict is None:
        pytest.skip("the slurmctld row did not run or sbatch refused the line")
    args = [*_BASE, *SUBMIT_TABLE[row]]
    check = run_cmd([*GPCLUST_CHECK(lab_config), *args], check=False, timeout=60)
    assert check.returncode == (0 if verdict.accepted else 1), (row, check.stdout, check.stderr, verdict)
    if not verdict.accepted:
        assert verdict.message in check.stdout, (row, check.stdout, verdict.message)


def GPCLUST_CHECK(lab_config: Path) -> list[str]:  # noqa: N802
    return [*GPUCLUST, "--config", str(lab_config), "policy", "check", "--user", "root", "--default-account", "root",
            "--"]


@pytest.mark.parametrize("row", sorted(MODIFY_TABLE))
def test_modify_table_slurmctld_equals_twin(slurm_lab, recorded_policy, lab_config, row):
    import shutil

    user = slurm_lab["unprivileged_user"]
    env_prefix = f"SLURM_CONF={slurm_lab.slurm_conf} PATH={os.environ['PATH']}"

    def as_user(*argv: str) -> subprocess.CompletedProcess[str]:
        return run_cmd(["su", user, "-s", "/bin/sh", "-c", f"{env_prefix} {' '.join(argv)}"], check=False)

    assert shutil.which("scontrol")
    cp = as_user("sbatch", "--parsable", "--hold", "-A", "physics", "--gres=gpu:h100:1", "-N", "1",
                 "--comment", "team=physics,project=x", "-t", "5", "-o", "/dev/null", "--wrap", "true")
    assert cp.returncode == 0, cp.stderr
    job = cp.stdout.strip().split(";")[0]
    recorded_policy.records("submit")
    try:
        upd = as_user("scontrol", "update", f"jobid={job}", *MODIFY_TABLE[row])
        recs = recorded_policy.records("modify")
        assert recs, (row, upd.stderr)
        _, rc, msg, uid, desc, rec = recs[-1]
        assert int(uid) != 0
        verdict = _lab_evaluator(lab_config).modify(desc, rec, int(uid))
        _same_as_engine(verdict, rc, msg, (row, desc, rec))
        assert verdict.rule == EXPECTED_RULE.get(row, verdict.rule), (row, desc, rec, verdict)
        if not verdict.accepted:
            assert upd.returncode != 0, (row, upd.stdout, upd.stderr)
    finally:
        run_cmd(["scancel", job], check=False)


def test_installing_on_the_live_lab_never_breaks_slurmctld(slurm_lab, lab_config, tmp_path):
    """24.11's slurmctld exits on `scontrol reconfigure` with a script that fails to load: `render --out` onto the
    live path validates first, and a broken script (gpuclust's installer or `slurm-lab policy`) is refused."""
    from gpuclust.errors import InputError
    from gpuclust.policy.install import install_lua

    live = Path(slurm_lab["job_submit_lua"])
    try:
        run_cmd([*GPUCLUST, "--config", str(lab_config), "policy", "render", "--out", str(live)])
        run_cmd(["scontrol", "reconfigure"])
        installed = live.read_text()
        with pytest.raises(InputError):
            install_lua("function slurm_job_submit(", live)
        bad = tmp_path / "bad.lua"
        bad.write_text("function slurm_job_submit(j) return 0 end\nreturn 0\n")  # no slurm_job_modify
        cp = run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(bad)], check=False, timeout=60)
        assert cp.returncode != 0 and "slurm_job_modify" in cp.stderr
        assert live.read_text() == installed
        assert sorted(p.name for p in live.parent.iterdir() if "job_submit" in p.name) == ["job_submit.lua"]
        run_cmd(["scontrol", "reconfigure"])
        time.sleep(1)
        assert "UP" in run_cmd(["scontrol", "ping"]).stdout
        cp = _sbatch(["-A", "physics", "--gres=gpu:h100:4", "-N", "2-4", "--comment", "team=physics project=x"])
        assert cp.returncode != 0 and "[partition_max_gpus]" in cp.stderr  # the new policy is live
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)


# --- warn mode in the real slurmctld (issue 47): accepted, the user told, a gpuclust-policy-warn line per rule ---

WARN_MODE = ("mode.label_value = warn\nmode.partition_max_gpus = warn\nmode.account_max_gpus = warn\n"
             "enforce_from = 2027-01-04\n")
WARN_JOB = ["-A", "ml", "-N", "3", "--gres=gpu:h100:4", "--comment", "team=chem project=x", "-t", "5", "--hold"]


@pytest.fixture(scope="module")
def warn_policy(slurm_lab, lab_config, tmp_path_factory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("warn")
    conf = d / "warn-site.conf"
    conf.write_text(lab_config.read_text().replace("[policy]\n", "[policy]\n" + WARN_MODE))
    lua = write_lua(compile_policy(load_config(str(conf))), d / "job_submit.lua")
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(lua)], timeout=60)
    try:
        yield conf
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)


def _submit_held(args: list[str]) -> subprocess.CompletedProcess[str]:
    cp = _sbatch(args)
    if cp.returncode == 0:
        run_cmd(["scancel", cp.stdout.strip().split(";")[0]], check=False)
    return cp


def test_warn_mode_in_slurmctld_equals_policy_check(slurm_lab, warn_policy):
    from click.testing import CliRunner

    from gpuclust.accounting.history.refusals import parse_line
    from gpuclust.cli.main import cli

    # slurmctld loads the new script when its mtime changes (1 s granularity): submit until the warnings show
    deadline = time.monotonic() + 60
    while "warning: accepted now" not in _submit_held(WARN_JOB).stderr:
        assert time.monotonic() < deadline, "the warn-mode policy never took effect"
        time.sleep(0.3)
    log = Path(slurm_lab["log_dir"]) / "slurmctld.log"
    offset = log.stat().st_size
    cp = _submit_held(WARN_JOB)
    assert cp.returncode == 0, cp.stderr
    check = CliRunner().invoke(cli, ["--config", str(warn_policy), "policy", "check", "--user", "root", "--",
                                     *WARN_JOB])
    assert check.exit_code == 0, check.output
    lines = check.output.splitlines()
    assert lines[0] == "ACCEPT (ok)" and len(lines) == 4, lines
    for line in lines[1:]:  # what sbatch printed is what `policy check` says
        assert "refused from 2027-01-04: " in line and line in cp.stderr, (line, cp.stderr)
    warned: list = []
    while len(warned) < 3 and time.monotonic() < deadline + 30:
        with open(log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
        warned = [r for r in (parse_line(x, ZoneInfo("UTC")) for x in text.splitlines()) if r is not None]
        time.sleep(0.2)
    assert sorted((r.rule, r.account, r.user, r.gpus, r.warn) for r in warned) == [
        ("account_max_gpus", "ml", "root", 12, True), ("label_value", "ml", "root", 12, True),
        ("partition_max_gpus", "ml", "root", 12, True)]
    # a rule left in enforce mode still refuses
    refused = _sbatch(["-A", "root", "--gres=gpu:h100:1", "--comment", "team=ml project=x", "-t", "5"])
    assert refused.returncode != 0 and "gpuclust policy [partition_account]:" in refused.stderr
