import os
import sys
import time

import pytest

from gpuclust.errors import SlurmCommandError, SlurmCommandNotFound, SlurmTimeout
from gpuclust.slurm.client import CommandSlurmClient
from gpuclust.slurm.runner import run_command


def test_argv_is_passed_verbatim_without_a_shell():
    out = run_command([sys.executable, "-c", "import sys; print(sys.argv[1:])", "a b", "$(id)", ";|&"])
    assert out.stdout.strip() == "['a b', '$(id)', ';|&']"


def test_string_argv_is_refused():
    with pytest.raises(TypeError):
        run_command("echo hi")  # type: ignore[arg-type]


def test_error_carries_argv_exit_code_and_stderr():
    argv = [sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(7)"]
    with pytest.raises(SlurmCommandError) as info:
        run_command(argv)
    assert info.value.argv == argv
    assert info.value.returncode == 7
    assert "boom" in info.value.stderr
    assert "exited 7" in str(info.value)


def test_missing_binary_is_a_typed_error():
    with pytest.raises(SlurmCommandNotFound):
        run_command(["/nonexistent/sacct", "-a"])


def test_timeout_kills_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(SlurmTimeout):
        run_command([sys.executable, "-c", script], timeout=2)
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        # a killed child may linger as a zombie until reaped by init
        with open(f"/proc/{grandchild}/stat") as stat:
            if stat.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        pytest.fail("grandchild survived the timeout")


def test_env_is_per_call_and_pins_time_format(monkeypatch):
    monkeypatch.delenv("SLURM_CONF", raising=False)
    client = CommandSlurmClient(slurm_conf="/lab/slurm.conf", tz="UTC")
    env = client.base_env()
    assert env["SLURM_CONF"] == "/lab/slurm.conf"
    assert env["TZ"] == "UTC"
    assert env["SLURM_TIME_FORMAT"] == "%Y-%m-%dT%H:%M:%S"
    assert "SLURM_CONF" not in os.environ


def test_client_refuses_non_slurm_tools():
    with pytest.raises(ValueError):
        CommandSlurmClient().run("rm", ["-rf", "/"])


def test_global_slurm_timeout_reaches_the_client(monkeypatch):
    import click
    from click.testing import CliRunner

    from gpuclust.cli.context import AppContext
    from gpuclust.cli.main import cli

    seen = {}

    @cli.command("probe-timeout", hidden=True)
    @click.pass_obj
    def probe(app: AppContext) -> None:
        """Test-only: report the client's timeout."""
        seen["timeout"] = app.slurm.timeout  # type: ignore[attr-defined]

    try:
        monkeypatch.setenv("GPUCLUST_SLURM_TIMEOUT", "7")
        assert CliRunner().invoke(cli, ["probe-timeout"]).exit_code == 0
        assert seen["timeout"] == 7
        assert CliRunner().invoke(cli, ["--slurm-timeout", "3", "probe-timeout"]).exit_code == 0
        assert seen["timeout"] == 3
    finally:
        del cli.commands["probe-timeout"]
