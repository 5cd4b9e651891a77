"""`gpuclust health check` as the lab's Epilog (issue 46 item 4): after a job ends on every node, the node whose
nvidia-smi stand-in answers with a recorded unhealthy document (a pending row remap) is drained by the check
itself with `gpuclust:remap:pending RESET_GPU job <id>`, and the others are not; a broken check (nvidia-smi
hanging past its bound on one node, missing on another) drains nothing. Then `--retest-drained` resumes the
faulty node once its fault is cleared and a re-check passes.

The Epilog is installed as a hook of the lab's own Epilog (STATE/etc/epilog.d, tests/slurm_lab/README.md "Prolog
and Epilog hooks"). GPUCLUST_FAULT_NODE picks the faulty node (default node3); the broken ones are two others.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.labutil import REPO, SLURM_LAB, lab_exec, run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm

REMAP_XML = REPO / "tests" / "data" / "accept" / "health" / "lab" / "nvidia-smi-rtx-4000-sff-ada-v13-remap-pending.xml"
HOOK = "50-gpuclust-health"


def fault(lab: Any, node: str, *args: str) -> None:
    subprocess.run([str(SLURM_LAB), "--name", lab.name, "fault", node, *args], check=True, capture_output=True,
                   text=True, timeout=60, stdin=subprocess.DEVNULL)


def node_line(node: str) -> str:
    return run_cmd(["scontrol", "-o", "show", "node", node]).stdout


def drain_reason(node: str) -> str | None:
    out = node_line(node)
    if "DRAIN" not in out.split("State=", 1)[1].split()[0]:
        return None
    return out.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in out else ""


@pytest.fixture(scope="module")
def epilog(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The check installed as the lab's Epilog hook, with its own site config and state dir under /tmp."""
    root = tmp_path_factory.mktemp("healthcheck")
    os.chmod(root, 0o755)
    state_dir = root / "state"
    conf = root / "site.conf"
    conf.write_text(f"[site]\ncluster_name = {slurm_lab.info['cluster_name']}\n[health]\n"
                    f"check_state_dir = {state_dir}\ncheck_nvidia_smi_timeout = 3s\n")
    lab_state = Path(slurm_lab.info["state_dir"])
    hooks = Path(slurm_lab.conf_dir) / "epilog.d"
    hooks.mkdir(exist_ok=True)
    env = {"PYTHONPATH": str(REPO), "GPUCLUST_CONFIG": str(conf), "SLURM_CONF": slurm_lab.slurm_conf,
           "SLURM_LAB_STATE": str(lab_state), "PATH": slurm_lab.env["PATH"],
           "GPUCLUST_HEALTH_NVIDIA_SMI": str(REPO / "tests" / "slurm_lab" / "gpu-bin" / "nvidia-smi"),
           # the stand-in's recording has one GPU where the lab's GRES declares four (a real mismatch the check
           # would drain for: class gres, tested in tests/unit/test_health_check.py)
           "GPUCLUST_HEALTH_GRES_GPUS": "1"}
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    # nvidia-smi "missing" on a node: STATE/health/NODE/nvidia-smi.missing (this hook's own switch)
    hook = hooks / HOOK
    hook.write_text(f"""#!/bin/sh
{exports}
if [ -e "$SLURM_LAB_STATE/health/$SLURMD_NODENAME/nvidia-smi.missing" ]; then
    export GPUCLUST_HEALTH_NVIDIA_SMI=/nonexistent/nvidia-smi
fi
exec {shlex.quote(sys.executable)} -c 'from gpuclust.cli.main import main; main()' health check --mode epilog --drain
""")
    hook.chmod(0o755)
    yield {"root": root, "state_dir": state_dir, "env": env, "lab_state": lab_state}
    hook.unlink(missing_ok=True)
    for node in slurm_lab.nodes:
        fault(slurm_lab, node, "clear")
        (lab_state / "health" / node / "nvidia-smi.missing").unlink(missing_ok=True)
        reason = drain_reason(node)
        if reason is not None and reason.startswith("gpuclust:"):
            run_cmd(["scontrol", "update", f"NodeName={node}", "State=RESUME"])


def wait_checked(state_dir: Path, nodes: list[str], after: float, timeout: float = 90.0) -> dict[str, Any]:
    """Each node's state file once its Epilog check has run after `after` (epoch seconds)."""
    deadline = time.monotonic() + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for node in nodes:
            path = state_dir / f"{node}.json"
            try:
                data = json.loads(path.read_text())
                from datetime import datetime

                if datetime.fromisoformat(data["last"]["time"]).timestamp() >= after:
                    seen[node] = data
            except (OSError, ValueError, KeyError):
                continue
        if len(seen) == len(nodes):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"Epilog check did not run on {sorted(set(nodes) - set(seen))} within {timeout:.0f}s")


def test_epilog_drains_the_faulty_node_with_class_and_action_and_nothing_for_a_broken_check(
        slurm_lab: Any, epilog: dict[str, Any]) -> None:
    nodes = slurm_lab.gpu_nodes  # (the epilog's jobs run on the gpu partition)
    bad = os.environ.get("GPUCLUST_FAULT_NODE", "node3")
    hang, missing = [n for n in nodes if n != bad][:2]
    for node in nodes:
        assert drain_reason(node) is None, f"{node} drained before the test: {node_line(node)}"
    fault(slurm_lab, bad, "nvidia-smi", str(REMAP_XML))
    fault(slurm_lab, hang, "nvidia-smi", "hang")
    flag = epilog["lab_state"] / "health" / missing / "nvidia-smi.missing"
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.write_text("")
    start = time.time() - 1
    job = submit(["-N4", "-o", "/dev/null", "--wrap", "true"])
    assert wait_job_done(job, 120) == "COMPLETED"
    states = wait_checked(epilog["state_dir"], nodes, start)
    assert states[bad]["last"]["state"] == "fail", states[bad]["last"]
    assert states[hang]["last"]["state"] == "unchecked" and states[missing]["last"]["state"] == "unchecked"
    deadline = time.monotonic() + 30
    while drain_reason(bad) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    reason = drain_reason(bad)
    assert reason is not None and reason.startswith(f"gpuclust:remap:pending RESET_GPU job {job}: "), \
        (reason, (Path(slurm_lab.info["log_dir"]) / "epilog-hooks.log").read_text()[-3000:])
    for node in nodes:
        if node != bad:
            assert drain_reason(node) is None, f"{node} drained: {node_line(node)}"
    hooks_log = (Path(slurm_lab.info["log_dir"]) / "epilog-hooks.log").read_text()
    assert f"UNCHECKED: {hang}: nvidia-smi-timeout" in hooks_log and f"UNCHECKED: {missing}: no-nvidia-smi" in hooks_log

    # The fault cleared (a GPU reset): a re-check with --retest-drained resumes the node; its reason was ours.
    fault(slurm_lab, bad, "clear")
    env = {**epilog["env"], "SLURMD_NODENAME": bad}
    argv = ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-c",
            "from gpuclust.cli.main import main; main()", "health", "check", "--mode", "healthcheck", "--drain",
            "--retest-drained"]
    out = lab_exec(bad, argv, name=slurm_lab.name, check=False)
    assert out.returncode == 0 and out.stdout.startswith(f"PASS: {bad}: resumed"), (out.stdout, out.stderr)
    assert drain_reason(bad) is None, node_line(bad)
