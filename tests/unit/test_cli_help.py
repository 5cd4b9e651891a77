"""Every command and option documents itself (the sqlite-utils rule)."""

import click
import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli


def _walk(command: click.Command, path: tuple[str, ...] = ()):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(cli))


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "gpuclust" for p, _ in COMMANDS])
def test_command_has_help(path, command):
    assert (command.help or "").strip(), f"gpuclust {' '.join(path)} has no help text"
    for param in command.params:
        if isinstance(param, click.Option) and param.name not in ("help", "version"):
            assert (param.help or "").strip(), f"gpuclust {' '.join(path)} option {param.opts} has no help"
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output


def test_top_level_lists_every_group():
    result = CliRunner().invoke(cli, ["--help"])
    for group in ("accept", "audit", "config", "policy", "report"):
        assert group in result.output
