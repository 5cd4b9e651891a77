"""tests/slurm_lab/slurm-lab: version handling that needs no lab (the lab itself is covered by -m slurm tests)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "slurm_lab" / "slurm-lab"


@pytest.fixture(scope="module")
def lab() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("slurm_lab_script", str(SCRIPT))
    spec = importlib.util.spec_from_file_location("slurm_lab_script", SCRIPT, loader=loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_unknown_slurm_version_exits_2_naming_the_supported_ones() -> None:
    cp = subprocess.run([sys.executable, str(SCRIPT), "up", "--name", "nolab", "--slurm", "23.02"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2
    assert "23.02" in cp.stderr and all(v in cp.stderr for v in ("22.05", "24.11", "26.05"))


def test_major_minor_from_debian_package_versions(lab: ModuleType) -> None:
    assert lab.major_minor("22.05.8-4+deb12u3") == "22.05"
    assert lab.major_minor("24.11.5-4+deb13u1") == "24.11"
    assert lab.major_minor("26.05.5-1") == "26.05"
    assert lab.major_minor("garbage") == ""


def test_cgroup_plugin_follows_the_version_not_the_os(lab: ModuleType) -> None:
    assert lab.version_at_least("24.11", "23.02") and not lab.version_at_least("22.05", "23.02")


def test_root_packages_use_t64_names_after_bookworm(lab: ModuleType) -> None:
    assert "libssl3" in lab.root_packages("bookworm")
    trixie = lab.root_packages("trixie")
    assert "libssl3t64" in trixie and "libssl3" not in trixie


def test_root_resolve_keeps_absolute_links_inside_the_root(lab: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "etc" / "alternatives").mkdir(parents=True)
    (tmp_path / "usr" / "sbin").mkdir(parents=True)
    (tmp_path / "usr" / "sbin" / "slurmctld-wlm").write_text("")
    (tmp_path / "etc" / "alternatives" / "slurmctld").symlink_to("/usr/sbin/slurmctld-wlm")
    (tmp_path / "usr" / "sbin" / "slurmctld").symlink_to("/etc/alternatives/slurmctld")
    assert lab.root_resolve(tmp_path, "/usr/sbin/slurmctld") == "/usr/sbin/slurmctld-wlm"


def test_minimal_binds_drop_nested_paths(lab: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "repo" / ".venv").mkdir(parents=True)
    got = lab.minimal_binds([str(tmp_path / "repo" / ".venv"), str(tmp_path / "repo"), str(tmp_path / "repo")])
    assert got == [str(tmp_path / "repo")]


def test_lua_rebuild_roots_are_named_apart_and_only_where_built(lab: ModuleType) -> None:
    assert lab.root_name("24.11") == "24.11" and lab.root_name("24.11", "5.1") == "24.11"
    assert lab.root_name("24.11", "5.4") == "24.11-lua5.4"
    assert lab.root_path("24.11", "5.4").name == "24.11-lua5.4"
    lab.check_lua_arg("24.11", "5.4")
    lab.check_lua_arg("22.05", "5.1")
    with pytest.raises(lab.UsageError, match="24.11 with Lua 5.4"):
        lab.check_lua_arg("26.05", "5.4")
    pkgs = lab.root_packages("trixie", "5.4")
    assert {"lua5.4", "liblua5.4-0"} <= set(pkgs) and "lua5.4" not in lab.root_packages("trixie")
    # the build's configure runs out of tree like dh's, so Debian's own plugin is reproduced byte for byte
    assert "--sysconfdir=/etc/slurm" in lab.LUA_BUILD_CONFIGURE and ".text" in lab.LUA_BUILD_SECTIONS


def test_unbuilt_lua_exits_2_naming_the_builds() -> None:
    # run as the test suite does, from a shell holding another lab's environment (CI's lab is up and 22.05)
    env = dict(os.environ, SLURM_LAB_NAME="gpuclust", SLURM_LAB_STATE="/var/lib/gpuclust-lab/gpuclust")
    cp = subprocess.run([sys.executable, str(SCRIPT), "up", "--name", "nolab", "--slurm", "26.05", "--lua", "5.4"],
                        capture_output=True, text=True, timeout=60, env=env)
    assert cp.returncode == 2 and "24.11 with Lua 5.4" in cp.stderr, cp.stderr


def test_a_named_lab_never_takes_the_shells_lab_state(lab: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_LAB_NAME", "gpuclust")
    monkeypatch.setenv("SLURM_LAB_STATE", "/srv/labs/gpuclust")
    ns = lab.argparse.Namespace
    assert lab.resolve_lab(ns(name="other", state_dir=None)).state == lab.STATE_ROOT / "other"
    assert str(lab.resolve_lab(ns(name=None, state_dir=None)).state) == "/srv/labs/gpuclust"
    assert str(lab.resolve_lab(ns(name="gpuclust", state_dir=None)).state) == "/srv/labs/gpuclust"
    assert str(lab.resolve_lab(ns(name="other", state_dir="/x")).state) == "/x"
