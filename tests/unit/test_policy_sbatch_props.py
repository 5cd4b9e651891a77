"""Property tests: sbatch command lines and scripts drawn from a grammar of valid and broken inputs.

`policy check` must never raise a traceback: it either reads the job (exit 0/1) or refuses as sbatch would (exit 2,
naming the option or the script line).
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.cli.main import cli
from gpuclust.errors import InputError
from gpuclust.policy.sbatch import option_table, read_sbatch

TABLE = option_table("22.05")
LONG = sorted(TABLE.has_arg)
VALUES = st.one_of(st.sampled_from(["1", "2", "4-64", "-1", "0", "gpu:h100:2", "gpu:-1", "h100:3", "ml", "", "x",
                                    "2k", "1-12", "=", "--", ":", "gpu::1", "gpu:h100:", "1:30"]),
                   st.text(max_size=6))


def _long(draw):
    name = draw(st.sampled_from(LONG))
    cut = draw(st.integers(min_value=1, max_value=len(name)))
    name = name[:cut]
    form = draw(st.sampled_from(["bare", "eq", "sep"]))
    value = draw(VALUES)
    if form == "bare":
        return ["--" + name]
    if form == "eq":
        return [f"--{name}={value}"]
    return ["--" + name, value]


ARG = st.one_of(
    st.builds(lambda p: p, st.composite(lambda draw: _long(draw))()),
    st.builds(lambda letter, v, glue: ["-" + letter + v] if glue else ["-" + letter, v],
              st.sampled_from(sorted(TABLE.short) + ["Z", "z", ":"]), VALUES, st.booleans()),
    st.builds(lambda v: [v], VALUES),
)
ARGV = st.lists(ARG, max_size=8).map(lambda parts: [a for p in parts for a in p])


def _check(argv, script):
    try:
        read_sbatch(argv, script=script, read_file=lambda p: b"#!/bin/sh\n", stdin=None)
    except InputError as exc:
        text = str(exc)
        assert text and ("argument" in text or "<script>" in text or "<options>" in text or "--" in text
                         or "Unable to open" in text), text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ARGV)
def test_argv_never_crashes(argv):
    _check(argv, None)


LINE = st.one_of(
    st.builds(lambda a: "#SBATCH " + " ".join(a), ARGV),
    st.sampled_from(["", "# comment", "   ", "#SBATCH", "#SBATCH \"unterminated", "#SBATCH 'a b' -N2",
                     "#SBATCH -G :2", "#SBATCH hetjob", "srun true", "#SLURM -N 2", "#SBATCH --gres",
                     "#SBATCH --comment=a#b"]),
    st.text(max_size=20),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINE, max_size=8), st.binary(max_size=4), st.booleans())
def test_scripts_never_crash(lines, junk, shebang):
    body = ("#!/bin/bash\n" if shebang else "") + "\n".join(lines) + "\n"
    _check([], body.encode("utf-8", "surrogatepass") + junk)


# --- the CLI: exit codes only 0/1/2, never a traceback -------------------------------------------------------

SITE = str(Path(__file__).resolve().parent.parent.parent / "site.example.conf")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ARGV, st.lists(LINE, max_size=5), st.binary(max_size=3))
def test_cli_exit_codes(tmp_path, argv, lines, junk):
    script = tmp_path / "job.sh"
    script.write_bytes(("#!/bin/bash\n" + "\n".join(lines) + "\n").encode("utf-8", "surrogatepass") + junk)
    res = CliRunner().invoke(cli, ["--config", SITE, "policy", "check", "--user", "alice", "--script", str(script),
                                   "--", *argv])
    assert res.exit_code in (0, 1, 2), (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    if res.exit_code == 2:
        assert "Error:" in res.output and ("argument" in res.output or "job.sh" in res.output
                                           or "--" in res.output), res.output
