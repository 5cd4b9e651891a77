"""`policy quotas plan|apply`, replaying sacctmgr/scontrol output recorded on the lab (tests/data/policy)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import load_config, parse_config
from gpuclust.errors import SlurmError
from gpuclust.policy.quotas import (
    ASSOC_FORMAT,
    QOS_FORMAT,
    apply_plan,
    plan_from_slurm,
)
from gpuclust.slurm.parse import accounting_tres, parse_show_config
from gpuclust.slurm.replay import ReplaySlurmClient

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
LAB_CONF = DATA / "lab-site.conf"
QOS_ARGS = ["show", "qos", QOS_FORMAT, "--parsable2"]
ASSOC_ARGS = ["show", "assoc", "where", "cluster=policy", ASSOC_FORMAT, "--parsable2"]

EXPECTED = [
    "sacctmgr -i add qos gpuclust-test",
    "sacctmgr -i modify qos where name=gpuclust-test set MaxTRESPerUser=gres/gpu=8,gres/gpu:h100=8",
    "sacctmgr -i modify account where name=ml cluster=policy set MaxTRES=gres/gpu=8",
    "sacctmgr -i modify user where name=gpuclust-user account=ml cluster=policy set GrpTRES=gres/gpu=8",
    "sacctmgr -i modify user where name=root account=ml cluster=policy set GrpTRES=gres/gpu=8",
    "sacctmgr -i modify account where name=physics cluster=policy set GrpTRES=gres/gpu:h100=4 "
    "GrpTRESMins=gres/gpu=60000 MaxTRES=gres/gpu=8",
]


class LabReplay(ReplaySlurmClient):
    """Replays the 'before' state until `sacctmgr -i` runs the plan, then the 'after' state."""

    def __init__(self, when: str = "before"):
        super().__init__()
        self.stdin: list[str] = []
        self.load(when)
        self.add("scontrol", ["show", "config"], (DATA / "scontrol-show-config.txt").read_text())

    def load(self, when: str) -> None:
        self.add("sacctmgr", QOS_ARGS, (DATA / f"sacctmgr-qos.{when}.txt").read_text())
        self.add("sacctmgr", ASSOC_ARGS, (DATA / f"sacctmgr-assoc.{when}.txt").read_text())

    def sacctmgr(self, args, *, input_text=None, timeout=None):
        if list(args) == ["-i"]:
            self.calls.append(("sacctmgr", "-i"))
            self.stdin.append(input_text or "")
            self.load("after")
            return ""
        return super().sacctmgr(args, input_text=input_text, timeout=timeout)


def test_accounting_storage_tres():
    tres = accounting_tres(parse_show_config((DATA / "scontrol-show-config.txt").read_text()))
    assert {"gres/gpu", "gres/gpu:h100", "cpu"} <= tres


def test_plan_from_recorded_lab_state():
    plan = plan_from_slurm(load_config(str(LAB_CONF)), LabReplay())
    assert [c.line for c in plan.commands] == EXPECTED
    assert plan.warnings == []
    physics = plan.commands[-1].reason
    assert "GrpTRESMins gres/gpu: unset -> 60000" in physics


def test_plan_is_empty_after_apply():
    plan = plan_from_slurm(load_config(str(LAB_CONF)), LabReplay("after"))
    assert plan.commands == []


def test_apply_runs_one_sacctmgr_session_and_verifies():
    client = LabReplay()
    config = load_config(str(LAB_CONF))
    result = apply_plan(config, client, plan_from_slurm(config, client))
    assert [c.line for c in result.applied] == EXPECTED
    assert len(client.stdin) == 1
    lines = client.stdin[0].splitlines()
    assert lines[0] == "add qos gpuclust-test" and all(not line.startswith("-i") for line in lines)
    assert result.remaining.commands == []


def test_apply_reports_limits_that_did_not_take():
    class Stuck(LabReplay):
        def load(self, when):  # slurmdbd ignores the changes
            super().load("before")

    config = load_config(str(LAB_CONF))
    client = Stuck()
    with pytest.raises(SlurmError, match="still not in place"):
        apply_plan(config, client, plan_from_slurm(config, client))


def test_warns_when_accounting_storage_tres_lacks_the_type():
    text = LAB_CONF.read_text().replace("gpu_limit.h100 = 4", "gpu_limit.h100 = 4\ngpu_limit.a100 = 2")
    plan = plan_from_slurm(parse_config(text, "lab.conf"), LabReplay())
    assert any("gres/gpu:a100" in w and "AccountingStorageTRES" in w for w in plan.warnings)
    assert not any("a100" in c.line for c in plan.commands)


def test_unknown_account_is_a_warning_not_a_command():
    text = LAB_CONF.read_text() + "\n[account chem]\ngpu_limit = 2\n"
    text = text.replace("[policy]", "[policy]")
    plan = plan_from_slurm(parse_config(text, "lab.conf"), LabReplay("after"))
    assert plan.commands == [] and any("chem" in w for w in plan.warnings)


def test_cli_plan_and_apply_exit_codes():
    runner = CliRunner()
    result = runner.invoke(cli, ["--config", str(LAB_CONF), "policy", "quotas", "plan"], obj=AppContext(client=LabReplay()))
    assert result.exit_code == 1 and result.output.splitlines() == EXPECTED
    result = runner.invoke(cli, ["--config", str(LAB_CONF), "policy", "quotas", "plan", "--json"],
                           obj=AppContext(client=LabReplay("after")))
    assert result.exit_code == 0 and '"commands": []' in result.output
    client = LabReplay()
    result = runner.invoke(cli, ["--config", str(LAB_CONF), "policy", "quotas", "apply", "--yes"], obj=AppContext(client=client))
    assert result.exit_code == 0, result.output
    assert len(client.stdin) == 1
    result = runner.invoke(cli, ["--config", str(LAB_CONF), "policy", "quotas", "apply"], obj=AppContext(client=LabReplay()),
                           input="n\n")
    assert result.exit_code == 1


# --- the same plan on every recorded Slurm version (tests/data/policy/quotas-<version>/, record_quotas.py) ---

def _version_dirs() -> list[Path]:
    return sorted(DATA.glob("quotas-*/"))


class VersionReplay(ReplaySlurmClient):
    def __init__(self, folder: Path, cluster: str, when: str = "before"):
        super().__init__()
        self.folder, self.cluster = folder, cluster
        self.load(when)
        self.add("scontrol", ["show", "config"], (folder / "show-config.txt").read_text())

    def load(self, when: str) -> None:
        self.add("sacctmgr", QOS_ARGS, (self.folder / f"qos.{when}.txt").read_text())
        self.add("sacctmgr", ["show", "assoc", "where", f"cluster={self.cluster}", ASSOC_FORMAT, "--parsable2"],
                 (self.folder / f"assoc.{when}.txt").read_text())

    def sacctmgr(self, args, *, input_text=None, timeout=None):
        if list(args) == ["-i"]:
            self.load("after")
            return ""
        return super().sacctmgr(args, input_text=input_text, timeout=timeout)


def test_recorded_versions_include_24_11():
    assert {d.name for d in _version_dirs()} >= {"quotas-22.05", "quotas-24.11", "quotas-26.05"}


@pytest.mark.parametrize("folder", _version_dirs(), ids=lambda d: d.name)
def test_plan_and_apply_on_each_recorded_version(folder):
    import json

    meta = json.loads((folder / "meta.json").read_text())
    cluster = meta["cluster"]
    config = parse_config(LAB_CONF.read_text().replace("cluster_name = policy", f"cluster_name = {cluster}"),
                          "lab-site.conf")
    client = VersionReplay(folder, cluster)
    plan = plan_from_slurm(config, client)
    assert not plan.warnings, plan.warnings
    assert [c.argv for c in plan.commands] == meta["applied"]  # what apply really ran on that version
    expected = [line.replace("cluster=policy", f"cluster={cluster}") for line in EXPECTED]
    assert [c.line for c in plan.commands] == expected
    result = apply_plan(config, client, plan)
    assert result.remaining.commands == []  # the 'after' state, as sacctmgr printed it on that version
