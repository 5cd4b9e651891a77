"""Rendering, lint, the 22.05 `slurm` mock, pcall fail modes, and the committed example's freshness."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpuclust.config import load_config, parse_config
from gpuclust.policy.compile import compile_policy, glob_to_lua, glob_to_regex
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.luasim import LuaPolicy
from gpuclust.policy.render import SLURM_NAMES_22_05, lint, render_lua
from gpuclust.policy.sbatch import job_desc_from_options

REPO = Path(__file__).resolve().parent.parent.parent
DATA = REPO / "tests" / "data" / "policy"
EXAMPLE = REPO / "site.example.conf"
COMMITTED = REPO / "job_submit" / "job_submit.lua"


def _policy(path: Path = EXAMPLE):
    return compile_policy(load_config(str(path)))


def _with_fail_mode(mode: str):
    text = EXAMPLE.read_text().replace("fail_mode = closed", f"fail_mode = {mode}")
    return compile_policy(parse_config(text, "site.example.conf"))


GOOD = ["-A", "ml", "--gres=gpu:h100:2", "--comment", "team=ml project=llm"]


def _job(args=GOOD, user="alice"):
    return job_desc_from_options(args, user=user, default_account="ml")


def test_committed_example_is_fresh():
    assert COMMITTED.read_text(encoding="utf-8") == render_lua(_policy()), (
        "job_submit/job_submit.lua is stale: run `gpuclust --config site.example.conf policy render "
        "--out job_submit/job_submit.lua`")


@pytest.mark.parametrize("conf", [EXAMPLE, DATA / "diff-site.conf", DATA / "lab-site.conf"])
def test_rendered_file_passes_lint(conf):
    text = render_lua(_policy(conf))
    assert lint(text) == []
    for word in ("io.", "os.execute", "popen", "require"):  # plain substrings, as a grep would check
        assert word not in text
    used = set(re.findall(r"\bslurm\.([A-Za-z_][A-Za-z0-9_]*)", text))
    assert used <= SLURM_NAMES_22_05


@pytest.mark.parametrize("bad", ['local f = io.open("/etc/passwd")', "os.execute('id')", "local p = io.popen('x')",
                                 "local json = require('cjson')", "return slurm.ESLURM_INVALID_GRES"])
def test_lint_catches(bad):
    assert lint(render_lua(_policy()) + "\n" + bad + "\n")


def test_rendered_file_compiles_under_system_lua51(tmp_path):
    luac = "/usr/bin/luac5.1"
    if not Path(luac).exists():
        pytest.skip("luac5.1 not installed")
    path = tmp_path / "job_submit.lua"
    path.write_text(render_lua(_policy()))
    subprocess.run([luac, "-p", str(path)], check=True)


def test_mock_mirrors_22_05():
    lua = LuaPolicy(render_lua(_policy()))
    assert lua.eval("_VERSION") == "Lua 5.1"
    assert lua.eval("slurm.ESLURM_INVALID_GRES") is None  # absent in 22.05: must not be relied upon
    assert lua.eval("slurm.to_json") is None
    assert lua.eval("slurm.ESLURM_INVALID_ACCOUNT") == 2045
    assert lua.eval("slurm.ERROR") == -1


def test_job_desc_proxy_hides_unknown_names_and_pairs():
    probe = LuaPolicy(
        "function slurm_job_submit(j) local n = 0; for _ in pairs(j) do n = n + 1 end; "
        "if j.not_a_field ~= nil or j.account ~= 'ml' or j.num_tasks ~= 4294967294 then return -7 end; return n end")
    assert probe.submit({**_job(), "not_a_field": "x"}).rc == 0  # pairs() sees nothing, unknown names are nil


def test_every_rejection_returns_a_number_and_one_message():
    # (`--gres=gpu:h100:x` was here: the real sbatch refuses it itself, before job_submit -- sbatch-grammar-22.05.json)
    lua, py = LuaPolicy(render_lua(_policy())), Evaluator(_policy())
    cases = [[], ["-A", "ml"], ["-A", "ml", "--comment=team=ml,project=x"],
             ["-A", "ml", "--comment=team=ml,project=x", "--gres=gpu:2"],
             ["-A", "nope", "--comment=team=ml,project=x", "--gres=gpu:h100:1"],
             ["-A", "ml", "--comment=team=ml,project=x", "--gres=gpu:h100:1", "-t", "3-0"]]
    for args in cases:
        job = _job(args)
        res, verdict = lua.submit(job), py.submit(job)
        assert isinstance(res.rc, (int, float)) and res.rc != 0, args
        assert res.message == verdict.message and res.message.startswith("gpuclust policy [")
        assert "\n" not in res.message


def test_data_strings_never_spell_forbidden_words():
    text = EXAMPLE.read_text().replace("label.project = *", "label.project = bio.*, ratio.x, popen, required, os.execute")
    rendered = render_lua(compile_policy(parse_config(text, "x.conf")))
    assert lint(rendered) == []
    lua = LuaPolicy(rendered)
    ok = lua.submit(_job(["-A", "ml", "--gres=gpu:h100:1", "--comment=team=ml project=ratio.x"]))
    bad = lua.submit(_job(["-A", "ml", "--gres=gpu:h100:1", "--comment=team=ml project=ratioXx"]))
    assert ok.rc == 0 and bad.rc == -1 and "bio.*, ratio.x, popen, required, os.execute" in bad.message


def test_percent_in_user_values_does_not_break_log_user():
    # slurm.log_user is string.format-based: a raw '%' in a message would raise inside slurmctld.
    lua = LuaPolicy(render_lua(_policy()))
    res = lua.submit(_job(["-A", "ml", "--gres=gpu:h100:1", "--comment=team=100%s project=x"]))
    assert res.rc == -1 and "team=100%s is not allowed" in res.message and res.n_errors == 0


@pytest.mark.parametrize("field", ["comment", "tres_per_node", "account", "min_nodes"])
def test_engine_error_fail_closed_rejects_and_logs(field):
    lua = LuaPolicy(render_lua(_with_fail_mode("closed")))
    res = lua.submit(_job(), explode_on=field)
    assert res.rc == -1
    assert res.n_errors == 1 and "internal error" in res.error and f"reading {field}" in res.error
    assert "fail_mode=closed" in res.message


@pytest.mark.parametrize("field", ["comment", "tres_per_node"])
def test_engine_error_fail_open_accepts_and_logs(field):
    lua = LuaPolicy(render_lua(_with_fail_mode("open")))
    bad = _job(["-A", "ml", "--gres=gpu:2", "--comment=team=ml project=x"])  # rejected if the engine ran
    res = lua.submit(bad, explode_on=field)
    assert res.rc == 0 and res.n_messages == 0
    assert res.n_errors == 1 and "fail_mode=open" in res.error


def test_unguarded_error_would_accept_which_is_why_pcall_exists():
    # Documented 22.05 behaviour we guard against: a nil return accepts. The mock's LuaResult models it.
    from gpuclust.policy.luasim import LuaResult

    assert LuaResult(None, None, 0, None, 0).accepted


def test_modify_by_root_is_never_blocked_and_user_modify_is_checked():
    lua, py = LuaPolicy(render_lua(_policy())), Evaluator(_policy())
    rec = _job()
    longer = {"time_limit": 10 * 24 * 60}
    assert lua.modify(longer, rec, 0).rc == 0
    res, verdict = lua.modify(longer, rec, 1000), py.modify(longer, rec, 1000)
    assert res.rc == 2051 and res.message == verdict.message and "partition_max_time" in res.message
    assert lua.modify({"time_limit": 4294967294}, rec, 1000).rc == 0  # NO_VAL: unchanged field


@pytest.mark.parametrize("glob,yes,no", [
    ("proj-*", ["proj-", "proj-a-b"], ["proj", "xproj-"]),
    ("?x?", ["axa", " x-"], ["ax", "axaa"]),
    ("a.b*", ["a.b", "a.bcd"], ["axb"]),
    ("100%", ["100%"], ["1000"]),
    ("[x]", ["[x]"], ["x"]),
    ("%d+", ["%d+"], ["5"]),
])
def test_globs_mean_the_same_in_lua_and_python(glob, yes, no):
    lua = LuaPolicy("return 0")
    find = lua.eval("function(s, p) return string.find(s, p) ~= nil end")
    pat = glob_to_lua(glob).decode("latin-1")
    for value in yes:
        assert find(value, pat) and glob_to_regex(glob).fullmatch(value.encode())
    for value in no:
        assert not find(value, pat) and not glob_to_regex(glob).fullmatch(value.encode())


# --- every datum enters the Lua through lua_string: hostile names render, lint clean, and load in real Lua 5.1 ---

HOSTILE = ['studio.conf', 'site-required.conf', 'load.conf', 'a"b\'c.conf', "new\nline.conf", "x]]y.conf",
           "--[[c.conf", "-- c.conf", "é漢\u2028.conf", "back\\slash.conf", "dofile(x).conf", "package.path.conf",
           "module(y).conf", "os.execute.conf", "io.popen.conf", "\x01ctl\x7f.conf", "%s%d.conf", "load'.conf"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_config_names_render_and_load_in_lua51(tmp_path, name):
    text = EXAMPLE.read_text().replace("label.project = *", 'label.project = load.x, io.y, "q", ]]z, --w, é*')
    policy = compile_policy(parse_config(text, str(tmp_path / name)))
    rendered = render_lua(policy)  # raised AssertionError for studio.conf / site-required.conf / load.conf
    assert lint(rendered) == []
    lua = LuaPolicy(rendered)
    assert lua.eval("1") == 1
    from gpuclust.policy.install import validate_lua_file

    out = tmp_path / "job_submit.lua"
    out.write_text(rendered, encoding="utf-8")
    validate_lua_file(out)  # real lua5.1 (or liblua5.1): loads, returns SUCCESS, both entry points run
    ok = lua.submit(_job(["-A", "ml", "--gres=gpu:h100:1", "--comment=team=ml project=load.x"]))
    assert ok.rc == 0


def test_lua_string_round_trips_every_byte():
    import lupa.lua51 as lupa51

    from gpuclust.policy.render import lua_string

    data = bytes(range(256)) + b"]]--[[load.io.require popen"
    lit = lua_string(data)
    assert lit.isascii() and "\n" not in lit and lint(lit) == []  # "]]" or "--" inside "..." are inert
    assert lupa51.LuaRuntime(encoding=None).eval(lit) == data


# --- install: validate under Lua 5.1, then an atomic replace; never a broken or partial file ---

def test_render_out_installs_atomically_and_keeps_mode(tmp_path):
    from gpuclust.policy.render import write_lua

    out = tmp_path / "job_submit.lua"
    out.write_text("-- old\n")
    out.chmod(0o640)
    write_lua(_policy(), out)
    assert out.read_text() == render_lua(_policy())
    assert (out.stat().st_mode & 0o777) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job_submit.lua"]  # no temp file left


@pytest.mark.parametrize("broken", ["function x(", "error('boom at load')", "return 7",
                                    "function slurm_job_submit() return 0 end return 0",
                                    "function slurm_job_submit() return 0 end\nfunction slurm_job_modify() error('x') end\nreturn 0"])
def test_install_refuses_a_broken_script_and_keeps_the_old_one(tmp_path, broken):
    from gpuclust.errors import InputError
    from gpuclust.policy.install import install_lua

    out = tmp_path / "job_submit.lua"
    good = render_lua(_policy())
    out.write_text(good)
    with pytest.raises(InputError) as exc:
        install_lua(broken, out)
    assert "not a valid job_submit.lua" in str(exc.value)
    assert out.read_text() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job_submit.lua"]


def test_install_validates_without_the_lua51_binary(tmp_path, monkeypatch):
    """The ctypes path (liblua5.1, the library job_submit_lua.so links) when no lua5.1 binary is on PATH."""
    import ctypes.util

    from gpuclust.errors import InputError
    from gpuclust.policy import install

    if not ctypes.util.find_library("lua5.1"):
        pytest.skip("liblua5.1 not installed")
    monkeypatch.setattr(install.shutil, "which", lambda name: None)
    monkeypatch.setattr(install, "_has_lupa", lambda version: False)  # lupa's runtime comes before ctypes
    assert install.lua_validator().endswith("(ctypes)")
    out = tmp_path / "job_submit.lua"
    install.install_lua(render_lua(_policy()), out)
    with pytest.raises(InputError):
        install.install_lua("function x(", out)
    assert out.read_text() == render_lua(_policy())


def test_render_out_cli_errors_are_exit_2_and_leave_nothing(tmp_path):
    from click.testing import CliRunner

    from gpuclust.cli.main import cli

    for bad in (tmp_path / "no" / "dir" / "job_submit.lua", tmp_path):
        res = CliRunner().invoke(cli, ["--config", str(EXAMPLE), "policy", "render", "--out", str(bad)])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output
