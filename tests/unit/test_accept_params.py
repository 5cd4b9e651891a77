"""Template parameters: the bash and Python checks are the same, and no value can inject shell."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuclust.accept import params as P
from gpuclust.errors import UnsafeValueError

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((REPO / "sbatch_templates").glob("*.sbatch"))
CHECK_LINE = re.compile(r"^check (\w+) '([^']*)'$", re.M)


def test_templates_exist() -> None:
    assert {t.name for t in TEMPLATES} == {"allreduce.sbatch", "pairwise.sbatch", "storage.sbatch"}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_bash_regexes_equal_python_regexes(template: Path) -> None:
    checks = CHECK_LINE.findall(template.read_text())
    assert checks, "template validates nothing"
    for name, regex in checks:
        assert name in P.PARAMS, f"{template.name} checks unknown {name}"
        assert regex == P.PARAMS[name].regex, f"{template.name}: {name} regex differs from params.py"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_used_parameter_is_checked_and_documented(template: Path) -> None:
    text = template.read_text()
    checked = {name for name, _ in CHECK_LINE.findall(text)}
    program = {"allreduce.sbatch": "allreduce", "pairwise.sbatch": "pairwise", "storage.sbatch": "storage"}[template.name]
    module = __import__(f"gpuclust.accept.{program}", fromlist=["PARAM_NAMES"])
    for name in module.PARAM_NAMES:
        assert name in checked, f"{template.name} passes {name} to Python unchecked"
        assert f"#   {name}" in text, f"{template.name} does not document {name}"


EVIL = ["1G; touch /tmp/pwned", "$(id)", "`id`", "64M\nid", "../../x", "1G && id", "nccl;id"]


@pytest.mark.parametrize("value", EVIL)
def test_python_refuses_injection(value: str) -> None:
    for name in ("ACCEPT_MAX_SIZE", "ACCEPT_BACKEND", "ACCEPT_RESULTS_DIR", "GPUCLUST_PYTHON", "ACCEPT_STORAGE_TESTS"):
        with pytest.raises(UnsafeValueError):
            P.check_value(name, value)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
@pytest.mark.parametrize("name,value", [("ACCEPT_RESULTS_DIR", "/tmp/x; touch /tmp/pwned-accept"),
                                         ("GPUCLUST_PYTHON", "python3 -c 'import os'"),
                                         ("ACCEPT_MASTER_PORT", "$(touch /tmp/pwned-accept)")])
def test_bash_refuses_before_running_anything(template: Path, name: str, value: str, tmp_path: Path) -> None:
    marker = Path("/tmp/pwned-accept")
    marker.unlink(missing_ok=True)
    env = {"PATH": os.environ["PATH"], name: value, "SLURM_JOB_ID": "1"}
    cp = subprocess.run(["bash", str(template)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert cp.returncode == 2
    assert f"refusing {name}=" in cp.stderr
    assert not marker.exists()


def test_defaults_and_types() -> None:
    got = P.read_params(["ACCEPT_MIN_SIZE", "ACCEPT_MAX_SIZE", "ACCEPT_ITERS", "ACCEPT_STORAGE_TESTS"], env={})
    assert got == {"ACCEPT_MIN_SIZE": 8, "ACCEPT_MAX_SIZE": 1024**3, "ACCEPT_ITERS": 20,
                   "ACCEPT_STORAGE_TESTS": ("staging", "checkpoint", "dcp", "aggregate")}
    assert P.read_param("ACCEPT_MAX_SIZE", {"ACCEPT_MAX_SIZE": "64M"}) == 64 * 1024**2
    assert P.read_param("ACCEPT_GPU_DEVICE_GLOB", {"ACCEPT_GPU_DEVICE_GLOB": "/x/dev/nvidia[0-9]*"}) == "/x/dev/nvidia[0-9]*"
    assert P.read_param("ACCEPT_LOCAL_DIR", {"ACCEPT_LOCAL_DIR": "/lab/nodes/%n/tmp"}) == "/lab/nodes/%n/tmp"


def test_all_bad_values_reported_together() -> None:
    with pytest.raises(UnsafeValueError) as info:
        P.read_params(["ACCEPT_ITERS", "ACCEPT_DTYPE"], env={"ACCEPT_ITERS": "x", "ACCEPT_DTYPE": "bf16"})
    assert "ACCEPT_ITERS" in str(info.value) and "ACCEPT_DTYPE" in str(info.value)


def test_ranges() -> None:
    with pytest.raises(UnsafeValueError):
        P.check_value("ACCEPT_STEP_FACTOR", "1")
    with pytest.raises(UnsafeValueError):
        P.check_value("ACCEPT_MASTER_PORT", "80")
    assert 23000 <= P.default_master_port("123456") < 32000
