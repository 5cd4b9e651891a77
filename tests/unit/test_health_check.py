"""`gpuclust health check` (issue 46 items 1-2): the node check, its state, its exit codes per caller, the Xid
actions, and the bad input the issue lists (rotating kernel log, clock jump, unknown Xid, truncated or foreign
XML, no GPU, NHC under set -e). Fake binaries stand in for nvidia-smi and journalctl (GPUCLUST_HEALTH_*)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accept import drain
from gpuclust.accept.health import node as N
from gpuclust.accept.health.actions import XID_ACTIONS, action_for
from gpuclust.accept.health.kit import HealthPaths
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config.health import HealthConfig, parse_actions
from gpuclust.exitcodes import HEALTH_CHECK_MODES, health_check_exit

REPO = Path(__file__).resolve().parent.parent.parent
DATA = REPO / "tests" / "data" / "accept" / "health"
HEALTHY = DATA / "nvidia-smi-rtx-4000-sff-ada-v13.xml"
REMAP = DATA / "lab" / "nvidia-smi-rtx-4000-sff-ada-v13-remap-pending.xml"
T0 = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


class Node:
    """A fake node: nvidia-smi answers from `xml` (or hangs / is missing), journalctl prints `kernel_log`."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.xml = tmp / "nvidia-smi.xml"
        self.log = tmp / "kern.log"
        self.log.write_text("")
        self.proc = tmp / "proc"
        (self.proc / "sys" / "kernel" / "random").mkdir(parents=True)
        self.boot("boot-1")
        self.nvidia = _script(tmp / "nvidia-smi", f'exec cat "{self.xml}"\n')
        self.journal = _script(tmp / "journalctl", f'exec cat "{self.log}"\n')
        self.state = tmp / "state"
        self.use(HEALTHY)

    def boot(self, boot_id: str) -> None:
        (self.proc / "sys" / "kernel" / "random" / "boot_id").write_text(boot_id + "\n")

    def use(self, xml: Path | str) -> None:
        self.xml.write_text(xml.read_text() if isinstance(xml, Path) else xml)

    def paths(self, nvidia: str | None = None) -> HealthPaths:
        return HealthPaths(sysfs=str(self.tmp / "nosys"), proc=str(self.proc), nvidia_smi=nvidia or self.nvidia,
                           journalctl=self.journal, dmesg=str(self.tmp / "no-dmesg"))

    def check(self, cfg: HealthConfig | None = None, *, gres: int | None = 1, now: datetime = T0,
              nvidia: str | None = None, save: bool = True) -> N.NodeCheck:
        result = N.check_node("node3", cfg or HealthConfig(check_nvidia_smi_timeout_s=2.0), paths=self.paths(nvidia),
                              state_dir=self.state, gres_gpus=gres, now=now)
        if save:
            N.save_state(self.state, "node3", N.commit_xid(result))
        return result


def xid_line(when: datetime, code: int, msg: str = "pid=1, name=python") -> str:
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S+0000')} node3 kernel: NVRM: Xid (PCI:0000:06:00): {code}, {msg}\n"


@pytest.fixture
def fake(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_healthy_node_passes_and_writes_its_state(fake: Node) -> None:
    result = fake.check()
    assert result.state == "pass" and not result.critical, result.as_dict()
    data = json.loads((fake.state / "node3.json").read_text())
    assert data["node"] == "node3" and data["boot_id"] == "boot-1" and data["snapshot"]["nvidia_smi"]["status"] == "ok"


def test_remap_pending_fails_with_class_detail_and_action(fake: Node) -> None:
    fake.use(REMAP)
    result = fake.check()
    cause = result.cause()
    assert result.state == "fail" and cause is not None and (cause.cls, cause.detail) == ("remap", "pending")
    reason = drain.make_reason(cause.cls, cause.detail, "41", None, cause.message, action_for(cause.cls, cause.detail))
    assert reason.startswith("gpuclust:remap:pending RESET_GPU job 41: node3: GPU 0")


def test_fewer_gpus_than_gres_is_a_gres_finding(fake: Node) -> None:
    result = fake.check(gres=4)
    assert result.state == "fail" and [(f.cls, f.detail) for f in result.critical] == [("gres", "count")]
    assert action_for("gres", "count") == "RESTART_BM"


def test_xid_reported_once_across_checks_rotation_and_clock_jump(fake: Node) -> None:
    fake.log.write_text(xid_line(T0 - timedelta(minutes=1), 79, "GPU has fallen off the bus."))
    first = fake.check()
    assert first.state == "fail" and first.cause().cls == "xid"  # type: ignore[union-attr]
    assert action_for("xid", "79", first.cause().evidence) == "RESTART_BM"  # type: ignore[union-attr]
    assert "since the last check" in first.cause().message  # type: ignore[union-attr]
    # the same line again (a re-run, a restarted slurmd): not repeated
    again = fake.check(now=T0 + timedelta(minutes=5))
    assert again.state == "pass", again.as_dict()
    # the log rotated: the old line gone, a new one there
    fake.log.write_text(xid_line(T0 + timedelta(minutes=6), 13))
    rotated = fake.check(now=T0 + timedelta(minutes=7))
    assert [f.evidence["code"] for f in rotated.findings if f.cls == "xid"] == [13]
    assert rotated.state == "pass"  # 13 is a WARNING (RESTART_APP: the application's fault)
    # the clock went back an hour: the whole log is read, fingerprints decide; a new line is still found
    fake.log.write_text(xid_line(T0 + timedelta(minutes=6), 13) + xid_line(T0 - timedelta(minutes=30), 48))
    back = fake.check(now=T0 - timedelta(minutes=50))
    assert [f.evidence["code"] for f in back.findings if f.cls == "xid"] == [48]
    assert any("clock went back" in n for n in back.notes)
    # a new boot: fingerprints dropped (a new kernel log)
    fake.boot("boot-2")
    assert fake.check(now=T0 + timedelta(hours=1)).state == "fail"


def test_unknown_xid_code_is_named_and_gets_contact_support(fake: Node) -> None:
    fake.log.write_text(xid_line(T0, 999, "something new"))
    result = fake.check()
    [f] = [f for f in result.findings if f.cls == "xid"]
    assert "not list" in f.message and f.evidence["in_catalog"] is False
    assert action_for("xid", "999", f.evidence) == "CONTACT_SUPPORT"


@pytest.mark.parametrize("xml,reason", [
    ("<nvidia_smi_log><gpu id='0'><product_name>x", "nvidia-smi-unreadable"),
    ("<?xml version='1.0'?><html><body>login</body></html>", "nvidia-smi-unreadable"),
    ("", "nvidia-smi-unreadable"),
])
def test_truncated_or_foreign_xml_is_unchecked_never_fail(fake: Node, xml: str, reason: str) -> None:
    fake.use(xml)
    result = fake.check()
    assert result.state == "unchecked" and [r for r, _ in result.unchecked] == [reason], result.as_dict()


def test_timeout_and_missing_nvidia_smi_are_unchecked_and_a_cpu_node_is_no_gpu(fake: Node, tmp_path: Path) -> None:
    hang = _script(tmp_path / "hang", "exec sleep 60\n")
    slow = fake.check(HealthConfig(check_nvidia_smi_timeout_s=0.5), nvidia=hang)
    assert slow.state == "unchecked" and slow.unchecked[0][0] == "nvidia-smi-timeout"
    gone = fake.check(nvidia=str(tmp_path / "none" / "nvidia-smi"))
    assert gone.state == "unchecked" and gone.unchecked[0][0] == "no-nvidia-smi"
    assert not any(f.cls == "vanished" for f in gone.findings)  # a broken check is no vanished GPU
    cpu = fake.check(gres=0, nvidia=str(tmp_path / "none" / "nvidia-smi"))
    assert cpu.state == "no-gpu"


def test_a_corrupt_state_file_is_a_note_and_a_fresh_start(fake: Node) -> None:
    fake.state.mkdir()
    (fake.state / "node3.json").write_text("{not json")
    result = fake.check()
    assert result.state == "pass" and any("unreadable" in n for n in result.notes)


def test_exit_codes_per_caller() -> None:
    assert set(HEALTH_CHECK_MODES) == {"prolog", "epilog", "healthcheck", "nhc"}
    assert [health_check_exit("epilog", s, d) for s, d in (("pass", False), ("fail", True), ("fail", False))] == [0, 0, 1]
    assert [health_check_exit("prolog", s, d) for s, d in (("pass", False), ("fail", True), ("fail", False))] == [0, 1, 1]
    assert health_check_exit("nhc", "fail", False) == 1
    assert health_check_exit("epilog", "unchecked", False) == 0
    assert health_check_exit("epilog", "unchecked", False, unavailable_fails=True) == 1
    assert [health_check_exit(None, s, False) for s in ("pass", "fail", "unchecked")] == [0, 2, 3]


def test_catalog_and_site_overrides() -> None:
    assert len(XID_ACTIONS) == 162 and XID_ACTIONS[79] == "RESTART_BM" and XID_ACTIONS[48] == "WORKFLOW_XID_48"
    assert XID_ACTIONS[13] == "RESTART_APP" and XID_ACTIONS[63] == "IGNORE" and XID_ACTIONS[95] == "RESET_GPU"
    over = dict(parse_actions("xid:79=RESET_GPU, remap:failure=CONTACT_SUPPORT, pcie=IGNORE"))
    assert action_for("xid", "79", {"code": 79}, over) == "RESET_GPU"
    assert action_for("remap", "failure", None) == "CONTACT_SUPPORT"
    assert action_for("pcie", "gen1-x8", None, over) == "IGNORE"
    assert action_for("unavailable", "xid", None) is None
    with pytest.raises(ValueError):
        parse_actions("xid:79=reset gpu")


class FakeSlurm:
    def __init__(self, node_line: str):
        self.node_line = node_line
        self.calls: list[list[str]] = []

    def scontrol(self, args: list[str], *, timeout: float | None = None) -> str:
        self.calls.append(list(args))
        return self.node_line if args[:2] == ["-o", "show"] else ""


NODE_IDLE = "NodeName=node3 State=IDLE Gres=gpu:h100:1 Partitions=gpu\n"
NODE_OURS = ("NodeName=node3 State=IDLE+DRAIN Gres=gpu:h100:1 Partitions=gpu "
             "Reason=gpuclust:remap:pending RESET_GPU job 4: x [root@2026-05-01T11:00:00]\n")


def _cli(fake: Node, slurm: FakeSlurm, *args: str, nvidia: str | None = None) -> Any:
    conf = fake.tmp / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\n[health]\ncheck_state_dir = {fake.state}\n")
    env = {"GPUCLUST_CONFIG": str(conf), "GPUCLUST_HEALTH_NVIDIA_SMI": nvidia or fake.nvidia,
           "GPUCLUST_HEALTH_JOURNALCTL": fake.journal, "GPUCLUST_HEALTH_DMESG": str(fake.tmp / "no-dmesg"),
           "GPUCLUST_HEALTH_PROC": str(fake.proc), "GPUCLUST_HEALTH_SYSFS": str(fake.tmp / "nosys"),
           "SLURM_JOB_ID": "77"}
    return CliRunner().invoke(cli, ["health", "check", "--node", "node3", *args], env=env,
                              obj=AppContext(client_factory=lambda timeout: slurm))


def test_cli_epilog_drains_itself_and_exits_0(fake: Node) -> None:
    fake.use(REMAP)
    slurm = FakeSlurm(NODE_IDLE)
    res = _cli(fake, slurm, "--mode", "epilog", "--drain")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("FAIL: node3: gpuclust:remap:pending RESET_GPU job 77: node3: GPU 0")
    [drain_call] = [c for c in slurm.calls if c[0] == "update"]
    assert drain_call[:3] == ["update", "NodeName=node3", "State=DRAIN"]
    assert drain_call[3].startswith("Reason=gpuclust:remap:pending RESET_GPU job 77")
    # without --drain the epilog exits 1 (Slurm drains)
    assert _cli(fake, FakeSlurm(NODE_IDLE), "--mode", "epilog").exit_code == 1


def test_cli_broken_check_never_drains(fake: Node, tmp_path: Path) -> None:
    slurm = FakeSlurm(NODE_IDLE)
    res = _cli(fake, slurm, "--mode", "epilog", "--drain", nvidia=str(tmp_path / "none" / "nvidia-smi"))
    assert res.exit_code == 0 and res.output.startswith("UNCHECKED: node3: no-nvidia-smi"), res.output
    assert not [c for c in slurm.calls if c[0] == "update"]
    assert _cli(fake, slurm, nvidia=str(tmp_path / "none" / "nvidia-smi")).exit_code == 3  # Nagios UNKNOWN


def test_cli_retest_drained_resumes_only_after_a_pass(fake: Node) -> None:
    fake.use(REMAP)
    still = FakeSlurm(NODE_OURS)
    assert _cli(fake, still, "--mode", "healthcheck", "--drain", "--retest-drained").exit_code == 0
    assert not [c for c in still.calls if c[0] == "update"]  # ours, still failing: kept
    fake.use(HEALTHY)
    fixed = FakeSlurm(NODE_OURS)
    res = _cli(fake, fixed, "--mode", "healthcheck", "--drain", "--retest-drained")
    assert res.output.startswith("PASS: node3: resumed"), res.output
    assert ["update", "NodeName=node3", "State=RESUME"] in fixed.calls
    other = FakeSlurm(NODE_OURS.replace("gpuclust:remap:pending RESET_GPU", "disk"))
    _cli(fake, other, "--mode", "healthcheck", "--retest-drained")
    assert not [c for c in other.calls if c[0] == "update"]  # someone else's drain


NHC_DRIVER = REPO / "tests" / "data" / "nhc" / "nhc-driver-standin.bash"
NHC_CHECK = REPO / "examples" / "nhc" / "gpuclust_health.nhc"


@pytest.mark.parametrize("errexit", ["0", "1"])
@pytest.mark.parametrize("case", ["healthy", "remap", "missing gpuclust", "no nvidia-smi"])
def test_nhc_check(fake: Node, tmp_path: Path, case: str, errexit: str) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = t\n[health]\ncheck_state_dir = {fake.state}\n")
    wrapper = _script(tmp_path / "gpuclust", f'exec {sys.executable} -c "from gpuclust.cli.main import main; '
                                            f'main()" "$@"\n')
    if case == "remap":
        fake.use(REMAP)
    offline = tmp_path / "offline"
    offline.write_text("")
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf), PYTHONPATH=str(REPO), NHC_NODENAME="node3",
               NHC_STANDIN_OFFLINE=str(offline), NHC_STANDIN_ERREXIT=errexit, GPUCLUST_HEALTH_GRES_GPUS="1",
               GPUCLUST_NHC_CMD=str(tmp_path / "none" / "gpuclust") if case == "missing gpuclust" else wrapper,
               GPUCLUST_HEALTH_NVIDIA_SMI=str(tmp_path / "none" / "nvidia-smi") if case == "no nvidia-smi"
               else fake.nvidia, GPUCLUST_HEALTH_JOURNALCTL=fake.journal, GPUCLUST_HEALTH_PROC=str(fake.proc),
               GPUCLUST_HEALTH_SYSFS=str(tmp_path / "nosys"))
    proc = subprocess.run(["bash", str(NHC_DRIVER), str(NHC_CHECK), "check_gpuclust_health"], capture_output=True,
                          text=True, env=env, timeout=120)
    if case == "remap":
        assert proc.returncode == 1 and "FAIL: node3: gpuclust:remap:pending RESET_GPU" in offline.read_text()
    else:
        assert proc.returncode == 0 and not offline.read_text(), proc.stdout + proc.stderr
    if case == "missing gpuclust":
        assert "cannot run" in proc.stdout
