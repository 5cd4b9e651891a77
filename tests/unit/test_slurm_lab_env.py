"""`slurm-lab env` carries ACCEPT_GPU_DEVICE_GLOB: the lab's fake GPUs sit under its state directory, and
`gpuclust accept submit` (sbatch --export=ALL) passes the variable to the jobs, so the README's lab commands
pass their GRES check without `--set` (issue 28 item 14)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "slurm_lab" / "slurm-lab"
TEMPLATE_CHECK = re.compile(r"^/[][A-Za-z0-9._/+*?-]*$")  # the templates' check of ACCEPT_GPU_DEVICE_GLOB


@pytest.fixture(scope="module")
def lab() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("slurm_lab_env_script", str(SCRIPT))
    spec = importlib.util.spec_from_file_location("slurm_lab_env_script", SCRIPT, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


@pytest.fixture
def short() -> Iterator[Path]:
    """A state dir path short enough for the lab's unix-socket limit (pytest's tmp_path is not)."""
    path = Path(tempfile.mkdtemp(prefix="sle", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_glob_is_what_gres_conf_declares(lab: ModuleType, short: Path) -> None:
    inst = lab.Lab("envtest", short / "st")
    (inst.etc).mkdir(parents=True)
    (inst.etc / "gres.conf").write_text(lab.gen_gres_conf(inst))  # no fake devices here: gres.conf names ttys
    assert lab.lab_gpu_glob(inst) == "/dev/tty[0-3]"
    (inst.etc / "gres.conf").write_text(f"AutoDetect=off\nNodeName=node1 Name=gpu Type=h100 "
                                        f"File={inst.state}/dev/nvidia[0-3]\n")
    glob = lab.lab_gpu_glob(inst)
    assert glob == f"{inst.state}/dev/nvidia[0-3]" and TEMPLATE_CHECK.match(glob)


def test_glob_without_gres_conf_is_the_state_dir(lab: ModuleType, short: Path) -> None:
    inst = lab.Lab("envtest", short / "st")
    assert lab.lab_gpu_glob(inst) == f"{inst.state}/dev/nvidia[0-3]"


def test_env_prints_the_export(lab: ModuleType, short: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    inst = lab.Lab("envtest", short / "st")
    monkeypatch.setattr(lab, "resolve_lab", lambda args: inst)
    monkeypatch.setattr(type(inst), "index", property(lambda self: 7), raising=False)
    monkeypatch.setattr(type(inst), "client_env", lambda self: {"SLURM_CONF": "/x/slurm.conf"})
    assert lab.cmd_env(type("A", (), {"json": False})()) == 0
    out = capsys.readouterr().out
    assert f"export ACCEPT_GPU_DEVICE_GLOB='{inst.state}/dev/nvidia[0-3]'" in out
