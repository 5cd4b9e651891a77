"""The shipped systemd units (examples/systemd): `systemd-analyze verify` accepts them and `systemd-analyze
security --offline=true` rates the service's exposure under 4."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "examples" / "systemd"
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (Debian package "
                                "systemd; scripts/bootstrap installs it)")


def _copy(tmp_path: Path) -> Path:
    """The units with ExecStart pointed at a program that exists here (verify checks it is executable)."""
    for unit in ("gpuclust-guard.service", "gpuclust-guard.timer"):
        text = (UNITS / unit).read_text()
        (tmp_path / unit).write_text(text.replace("ExecStart=/opt/gpuclust/bin/gpuclust ", "ExecStart=/bin/true "))
    return tmp_path


def test_units_verify(tmp_path: Path) -> None:
    assert ANALYZE is not None
    d = _copy(tmp_path)
    man_root = tmp_path / "man"  # Documentation=man:gpuclust(1), as the README's install step writes the pages
    written = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "man", "--write", str(man_root / "man1")],
                             capture_output=True, text=True, timeout=120)
    assert written.returncode == 0, written.stderr
    check_man = "--man=yes" if shutil.which("man") else "--man=no"
    cp = subprocess.run([ANALYZE, "verify", check_man, str(d / "gpuclust-guard.service"),
                         str(d / "gpuclust-guard.timer")], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                        env=dict(os.environ, MANPATH=str(man_root)))
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "ExecStart=/opt/gpuclust/bin/gpuclust guard" in (UNITS / "gpuclust-guard.service").read_text()


def test_service_exposure_under_4(tmp_path: Path) -> None:
    assert ANALYZE is not None
    d = _copy(tmp_path)
    cp = subprocess.run([ANALYZE, "security", "--offline=true", str(d / "gpuclust-guard.service")],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    m = re.search(r"Overall exposure level for gpuclust-guard.service: ([0-9.]+)", cp.stdout)
    assert m, cp.stdout[-2000:] + cp.stderr
    assert float(m.group(1)) < 4.0, cp.stdout[-3000:]


def test_service_is_hardened() -> None:
    text = (UNITS / "gpuclust-guard.service").read_text()
    for line in ("Type=oneshot", "User=gpuclust", "ProtectSystem=strict", "ReadWritePaths=/var/lib/gpuclust/guard",
                 "PrivateTmp=yes", "NoNewPrivileges=yes", "CapabilityBoundingSet=\n"):
        assert line in text, line
    assert "OnUnitActiveSec=5min" in (UNITS / "gpuclust-guard.timer").read_text()
