"""Issue 47: warn mode in the site config, `policy check` and `policy render --out`; validation before install
under the Lua that the site's slurmctld links (its plugin's shared-library dependencies, or [policy] lua)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError, InputError
from gpuclust.policy import install
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.luasim import RUNTIMES, runtime_module
from gpuclust.policy.render import render_lua

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = (REPO / "site.example.conf").read_text()
WARN = "\nmode = warn\nmode.account_missing = enforce\nenforce_from = 2026-09-01\nenforce_from.label_value = 2026-10-01\n"


ANCHOR = "reject_untyped_gpu_where_typed_limits = yes\n"


def _with(extra: str) -> str:
    """The example with `extra` lines added to its [policy] section."""
    return EXAMPLE.replace(ANCHOR, ANCHOR + extra.lstrip("\n"))


def _config(extra: str = "", path: str = "site.conf"):
    return parse_config(_with(extra), path)


def _problems(extra: str) -> str:
    with pytest.raises(ConfigError) as exc:
        _config(extra)
    return str(exc.value)


# ---- config ------------------------------------------------------------------------------------------------

def test_example_enforces_every_rule():
    assert EXAMPLE.count(ANCHOR) == 1 and EXAMPLE.index("[policy]") < EXAMPLE.index(ANCHOR)
    assert _config().policy.mode == "enforce" and compile_policy(_config()).warn == {}


def test_warn_mode_compiles_per_rule_with_dates():
    warn = compile_policy(_config(WARN)).warn
    assert "account_missing" not in warn and "gres_syntax" not in warn  # enforced here / always
    assert warn["label_value"] == "from 2026-10-01" and warn["partition_max_gpus"] == "from 2026-09-01"
    only = compile_policy(_config("\nmode.untyped_gpu = warn\n")).warn
    assert only == {"untyped_gpu": "once the rule is enforced"}


@pytest.mark.parametrize(("extra", "needle"), [
    ("\nmode = soft\n", "expected one of enforce, warn"),
    ("\nmode.partition_max_gpu = warn\n", "did you mean 'partition_max_gpus'"),
    ("\nenforce_from.nope = 2026-01-01\n", "unknown rule 'nope'"),
    ("\nmode.gres_syntax = warn\n", "gres_syntax is always enforced"),
    ("\nenforce_from = 2026-02-30\n", "expected a date YYYY-MM-DD"),
    ("\nenforce_from = next week\n", "expected a date YYYY-MM-DD"),
    ("\nlua = 5.5\n", "expected one of 5.1, 5.2, 5.3, 5.4, luajit"),
])
def test_bad_warn_and_lua_keys_are_config_errors(extra, needle):
    assert needle in _problems(extra)


# ---- policy check --------------------------------------------------------------------------------------------

def _check(tmp_path, *args):
    conf = tmp_path / "site.conf"
    conf.write_text(_with(WARN))
    return CliRunner().invoke(cli, ["--config", str(conf), "policy", "check", *args])


def test_check_in_warn_mode_accepts_and_says_what_will_be_refused(tmp_path):
    res = _check(tmp_path, "--user", "alice", "--", "-A", "ml", "--gres=gpu:2", "--comment", "team=chem project=x")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == "ACCEPT (ok)"
    assert lines[1].startswith("gpuclust policy [label_value] warning: accepted now, refused from 2026-10-01: team=chem")
    assert lines[2].startswith("gpuclust policy [partition_typed_gpu] warning: accepted now, refused from 2026-09-01: ")
    data = json.loads(_check(tmp_path, "--json", "--user", "alice", "--", "-A", "ml", "--gres=gpu:2", "--comment",
                             "team=chem project=x").output)
    assert data["accepted"] and [w["rule"] for w in data["warnings"]] == ["label_value", "partition_typed_gpu"]
    refused = _check(tmp_path, "--user", "alice", "--", "--gres=gpu:h100:1", "--comment", "team=ml project=x")
    assert refused.exit_code == 1 and "[account_missing]" in refused.output  # enforced


# ---- which Lua: the plugin's NEEDED libraries, or [policy] lua ---------------------------------------------------

@pytest.mark.parametrize(("name", "version"), [
    ("liblua5.1.so.0", "5.1"), ("liblua-5.4.so", "5.4"), ("liblua5.3.so.0", "5.3"), ("liblua.so.5.4", "5.4"),
    ("liblua-5.2.so", "5.2"), ("libluajit-5.1.so.2", "luajit"), ("libc.so.6", None), ("liblua-c++.so", None),
])
def test_lua_of_library_names(name, version):
    assert install.lua_of_library(name) == version


def _elf64(needed: list[str]) -> bytes:
    """A minimal little-endian ELF64 shared object: a string table and a dynamic section with DT_NEEDED entries."""
    strtab = b"\0"
    offsets = []
    for name in needed:
        offsets.append(len(strtab))
        strtab += name.encode() + b"\0"
    dyn = b"".join(struct.pack("<qQ", 1, off) for off in offsets) + struct.pack("<qQ", 0, 0)
    header_size, sh_size = 64, 64
    strtab_off = header_size
    dyn_off = strtab_off + len(strtab)
    shoff = dyn_off + len(dyn)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, header_size, 0, 0, sh_size, 3, 0)
    sections = bytes(sh_size)  # SHT_NULL
    sections += struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0)  # SHT_STRTAB
    sections += struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dyn_off, len(dyn), 1, 0, 8, 16)  # SHT_DYNAMIC -> link 1
    return header + strtab + dyn + sections


def test_plugin_dependencies_decide_the_lua(tmp_path):
    rhel = tmp_path / "lib64" / "slurm"
    rhel.mkdir(parents=True)
    (rhel / install.PLUGIN).write_bytes(_elf64(["liblua-5.4.so", "libc.so.6"]))
    assert install.needed_libraries(rhel / install.PLUGIN) == ["liblua-5.4.so", "libc.so.6"]
    choice = install.choose_lua(None, [str(tmp_path / "none"), str(rhel)])
    assert choice.version == "5.4" and str(rhel / install.PLUGIN) in choice.why
    assert install.choose_lua("luajit", [str(rhel)]).version == "luajit"  # [policy] lua wins
    assert install.choose_lua(None, [str(tmp_path / "none")]).version == "5.1"
    (rhel / install.PLUGIN).write_bytes(b"not an ELF")
    assert install.choose_lua(None, [str(rhel)]) == install.LuaChoice("5.1", f"the default: {rhel / install.PLUGIN} "
                                                                      "names no Lua library (set [policy] lua)")


def test_the_labs_plugin_links_lua_5_1():
    plugin = install.find_plugin()
    if plugin is None:
        pytest.skip("no Slurm job_submit_lua.so on this machine")
    assert install.lua_of_plugin(plugin) == "5.1"  # Debian 12's slurm-wlm


# ---- validation under that Lua ----------------------------------------------------------------------------------

def _runtime(version):
    try:
        runtime_module(version)
    except ImportError:
        pytest.skip(f"lupa has no {RUNTIMES[version]}")


@pytest.mark.parametrize("version", list(RUNTIMES))
def test_rendered_policy_validates_under_every_lua(tmp_path, version):
    _runtime(version)
    out = tmp_path / "job_submit.lua"
    install.install_lua(render_lua(compile_policy(_config(WARN))), out, version)
    assert out.exists()


# Scripts that load under Lua 5.1 and fail under 5.4 as slurmctld would run them: the global unpack is gone (it
# is table.unpack), and a count formatted with %d from a non-integral float raises from 5.3 on.
UNPACK = ("function slurm_job_submit(j, p, u) return select('#', unpack({1, 2})) - 2 end\n"
           "function slurm_job_modify(j, r, p, u) return 0 end\nreturn 0\n")
PCALLED = ("local function eval(j) return string.format('%d', (j.min_nodes or 3) / 3) end\n"
           "function slurm_job_submit(j, p, u)\n  local ok, err = pcall(eval, j)\n"
           "  if not ok then slurm.log_error('internal error: %s', tostring(err)) return slurm.ERROR end\n"
           "  return 0\nend\nfunction slurm_job_modify(j, r, p, u) return 0 end\nreturn slurm.SUCCESS\n")


@pytest.mark.parametrize("script", [UNPACK, PCALLED])
def test_a_script_that_fails_under_the_sites_lua_is_refused(tmp_path, script):
    _runtime("5.4")
    out = tmp_path / "job_submit.lua"
    install.install_lua(script, out, "5.1")  # fine under Debian's Lua
    good = out.read_text()
    with pytest.raises(InputError) as exc:
        install.install_lua(script + "-- new\n", out, "5.4")
    assert "not a valid job_submit.lua under Lua 5.4" in str(exc.value)
    assert out.read_text() == good and sorted(p.name for p in tmp_path.iterdir()) == ["job_submit.lua"]


def test_the_ctypes_and_lupa_validators(tmp_path, monkeypatch):
    """Without an interpreter on PATH: lupa's runtime; without lupa too: the shared library through ctypes."""
    import ctypes.util

    _runtime("5.4")
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    assert install.lua_validator("5.4") == "lupa.lua54"
    with pytest.raises(InputError, match="under Lua 5.4: .*unpack"):
        install.validate_lua_file(_write(tmp_path, UNPACK), "5.4")
    monkeypatch.setattr(install, "_has_lupa", lambda version: False)
    if ctypes.util.find_library("lua5.1"):
        assert install.lua_validator("5.1").endswith("(ctypes)")
        install.validate_lua_file(_write(tmp_path, render_lua(compile_policy(_config()))), "5.1")
    monkeypatch.setattr(install.ctypes.util, "find_library", lambda name: None)
    with pytest.raises(InputError, match="no Lua 5.4 to validate with"):
        install.validate_lua_file(_write(tmp_path, UNPACK), "5.4")


def _write(tmp_path, text):
    path = tmp_path / "candidate.lua"
    path.write_text(text)
    return path


def test_render_out_says_which_lua_validated(tmp_path):
    _runtime("5.4")
    conf = tmp_path / "site.conf"
    conf.write_text(_with(WARN + "lua = 5.4\n"))
    target = tmp_path / "job_submit.lua"
    res = CliRunner().invoke(cli, ["--config", str(conf), "policy", "render", "--out", str(target)])
    assert res.exit_code == 0, res.output
    assert "in warn mode" in res.output and "validated under Lua 5.4: [policy] lua" in res.output
    res = CliRunner().invoke(cli, ["--config", str(conf), "policy", "render", "--lua", "luajit", "--out", str(target)])
    assert res.exit_code == 0 and "validated under LuaJIT: --lua" in res.output, res.output
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / install.PLUGIN).write_bytes(_elf64(["liblua-5.3.so"]))
    conf.write_text(EXAMPLE)
    res = CliRunner().invoke(cli, ["--config", str(conf), "policy", "render", "--plugin-dir", str(plugin_dir),
                                   "--out", str(target)])
    assert res.exit_code == 0 and "validated under Lua 5.3: " + str(plugin_dir / install.PLUGIN) in res.output, res.output
