"""The rendered policy's refusal log lines, written by the real slurmctld, read back by the report (issue 47).

From Lua 5.3 on, the numbers slurmctld pushes into job_desc are floats, and a count written with tostring would
read `gpus=16.0`. On whatever Lua the lab's job_submit_lua.so links (Debian's 5.1, or the 5.4 rebuild of
`slurm-lab up --slurm 24.11 --lua 5.4`), slurmctld's log must carry `gpus=16`, the (rule, account, gpus) that
`policy check` gives for the same sbatch line, and `report build --slurmctld-log` must count exactly those refusals.
A probe around the engine logs the interpreter's `_VERSION` and the Lua type of a job_desc number, so the test
also proves which Lua it ran under and that its numbers were floats there.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.render import render_lua
from tests.integration.labutil import SLURM_LAB, run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent.parent
LAB_CONF = REPO / "tests" / "data" / "policy" / "lab-site.conf"
LABEL = ["--comment", "team=ml project=x", "-t", "5"]
REFUSED = {  # each one over a GPU limit of lab-site.conf, so its line carries a count above 9
    "16 gpus over 4 nodes": ["-A", "ml", "-N", "4", "--gres=gpu:h100:4", *LABEL],
    "12 gpus by -G": ["-A", "ml", "-G", "h100:12", *LABEL],
    "10 gpus by task": ["-A", "physics", "--gpus-per-task=h100:1", "-n", "10", "--comment", "team=physics project=x",
                        "-t", "5"],
}
ACCEPTED = ["-A", "ml", "--gres=gpu:h100:1", *LABEL]  # the policy accepts it: only REFUSED are counted
# Logged at the first submit: the interpreter, and math.type of a job_desc number (nil before Lua 5.3).
_PROBE = r"""
local gpc_probe_submit, gpc_probed = slurm_job_submit, false
function slurm_job_submit(d, p, uid)
  if not gpc_probed then
    gpc_probed = true
    local kind = math.type and math.type(d.min_nodes) or "none"
    pcall(slurm.log_info, "%s", "GPCPROBE lua=" .. _VERSION:gsub(" ", "_") .. " number=" .. tostring(kind))
  end
  return gpc_probe_submit(d, p, uid)
end
"""


def _read_since(path: Path, offset: int) -> str:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode("utf-8", "replace")


def test_refusal_lines_are_integers_and_the_report_counts_them(slurm_lab, tmp_path: Path) -> None:
    conf = tmp_path / "lab-site.conf"
    conf.write_text(LAB_CONF.read_text().replace("cluster_name = policy",
                                                 f"cluster_name = {slurm_lab['cluster_name']}"))
    text = render_lua(compile_policy(load_config(str(conf))))
    head, sep, tail = text.rpartition("return slurm.SUCCESS")
    assert sep
    lua = tmp_path / "job_submit.lua"
    lua.write_text(head + _PROBE + sep + tail)
    log = Path(slurm_lab["log_dir"]) / "slurmctld.log"
    expected_lua = slurm_lab.info.get("lua", "5.1")
    since = datetime.now(timezone.utc).replace(microsecond=0)
    time.sleep(1)
    offset = log.stat().st_size
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(lua)], timeout=60)
    try:
        # slurmctld loads the new script when its mtime changes (1 s granularity): submit until the probe has run
        deadline = time.monotonic() + 60
        while "GPCPROBE" not in _read_since(log, offset):
            assert time.monotonic() < deadline, "the probed policy never took effect"
            cp = run_cmd(["sbatch", "--parsable", "--hold", "-o", "/dev/null", *ACCEPTED, "--wrap", "true"],
                         check=False)
            if cp.returncode == 0:
                run_cmd(["scancel", cp.stdout.strip().split(";")[0]], check=False)
            time.sleep(0.3)
        probe = re.search(r"GPCPROBE lua=(\S+) number=(\S+)", _read_since(log, offset))
        assert probe, "no probe line"
        assert probe.group(1) == f"Lua_{expected_lua}", (probe.group(0), expected_lua)
        assert probe.group(2) == ("float" if expected_lua >= "5.3" else "none"), probe.group(0)
        start = log.stat().st_size
        for row, args in REFUSED.items():
            cp = run_cmd(["sbatch", "-o", "/dev/null", *args, "--wrap", "true"], check=False)
            assert cp.returncode == 1 and "gpuclust policy [" in cp.stderr, (row, cp.stderr)
        job = submit(["-o", "/dev/null", *ACCEPTED, "--wrap", "true"])
        assert wait_job_done(job) == "COMPLETED"
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)

    # what `policy check` says for each sbatch line, and the line the Python twin of the engine logs for it
    twin = Evaluator(compile_policy(load_config(str(conf))))
    expected = []
    for args in REFUSED.values():
        cp = run_cmd([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), "policy", "check",
                      "--user", "root", "--json", "--", *args], check=False)
        check = json.loads(cp.stdout)
        verdict = twin.submit(check["job_desc"])
        assert cp.returncode == 1 and not check["accepted"] and verdict.rule == check["rule"], cp.stdout
        expected.append((check["rule"], args[1], twin.log_lines(check["job_desc"], verdict)[-1]))
    # the raw lines, as slurmctld wrote them: the twin's lines, integer counts (never `16.0`)
    deadline = time.monotonic() + 30
    while True:
        lines = [x.split("lua: ", 1)[-1] for x in _read_since(log, start).splitlines()
                 if "gpuclust-policy-reject v1" in x]
        if len(lines) >= len(REFUSED) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert lines == [line for _, _, line in expected], (lines, expected)
    assert [re.search(r" gpus=(\d+)$", x) is not None for x in lines] == [True] * len(REFUSED), lines
    assert " gpus=16" in lines[0] and "16.0" not in lines[0], lines[0]

    # the report reads them back: refusal counts by rule and account from the real log
    until = datetime.now(timezone.utc).replace(microsecond=0)
    time.sleep(1)
    dump = tmp_path / "sacct.txt"
    dump.write_text(run_cmd(["sacct", "-a", "-D", "-X", "-P", "-S", since.strftime("%Y-%m-%dT%H:%M:%S"),
                             "-E", "now", "-o", "JobID,JobIDRaw,State,Start,End,Elapsed,Account,User,Partition,"
                             "AllocTRES,ExitCode"]).stdout)
    out = tmp_path / "report"
    cp = run_cmd([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), "report", "build",
                  "--input", str(dump), "--slurmctld-log", str(log), "--since", since.strftime("%Y-%m-%dT%H:%M:%S"),
                  "--until", until.strftime("%Y-%m-%dT%H:%M:%S"),
                  "--format", "json", "--out", str(out)], check=False, timeout=300)
    assert cp.returncode == 0, cp.stderr
    refusals = json.loads((out / "report.json").read_text())["economics"]["refusals"]
    assert refusals["total"] == len(REFUSED), refusals
    assert {r["rule"]: r["refusals"] for r in refusals["by_rule"]} == dict(Counter(r for r, _, _ in expected))
    assert {r["account"]: r["refusals"] for r in refusals["by_account"]} == dict(Counter(a for _, a, _ in expected))
