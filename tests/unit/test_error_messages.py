"""Every error a new user can provoke names the thing at fault, says what was expected and says what to do.

A table of hostile inputs, each run through the real CLI (click's CliRunner): no traceback, the documented exit
code (README "Exit codes": 2 bad input/usage/config, 3 Slurm failing or any Nagios check that cannot answer, 1 a
negative answer), the message names the file/line, field or option, and it carries a what-to-do: a verb phrase
("give", "run", "use", "fix", ...) or a command in backticks.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = str(REPO / "site.example.conf")

# What-to-do: an imperative a user can act on, or a command to run.
HINT = re.compile(r"\b(give|run|use|check|add|remove|set|point|fix|write|install|drop|rename|save|keep|move|"
                  r"merge|pass|choose|raise|put)\b|`[^`]+`", re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    code: int
    names: tuple[str, ...]  # what the message must name: file[:line], field or option
    env: dict[str, str] = field(default_factory=dict)


def C(id: str, argv: str | tuple[str, ...], code: int, *names: str, **env: str) -> Case:  # noqa: N802
    return Case(id, tuple(argv.split()) if isinstance(argv, str) else argv, code, names, env)


GOOD = "--config good.conf"
SBATCH = f"{GOOD} policy check --user alice --"

CASES = [
    # --- input files -------------------------------------------------------------------------------------------
    C("input-missing", "report build --input missing.txt --out o", 2, "--input", "missing.txt"),
    C("input-directory", "report build --input adir --out o", 2, "--input", "adir"),
    C("input-empty", f"{GOOD} report build --input empty.txt --out o", 2, "empty.txt:1"),
    C("input-binary", f"{GOOD} report build --input bin.dat --out o", 2, "bin.dat:1"),
    C("input-no-header", f"{GOOD} report build --input noheader.txt --out o", 2, "noheader.txt:1"),
    C("input-header-lacks-columns", f"{GOOD} report build --input nostart.txt --out o", 2, "nostart.txt:1", "Start"),
    C("input-json-not-jobs", f"{GOOD} report build --input notjobs.json --out o", 2, "notjobs.json"),
    C("input-json-truncated", f"{GOOD} report build --input trunc.json --out o", 2, "trunc.json:1"),
    C("input-strict-bad-rows", f"{GOOD} report build --input badrow.txt --out o --strict", 2, "row"),
    C("events-not-sacctmgr", f"{GOOD} report build --input badrow.txt --events junk.txt --out o", 2, "junk.txt:1"),
    C("out-under-a-file", f"{GOOD} report build --input badrow.txt --out empty.txt/x", 2, "empty.txt/x"),
    C("delimiter-empty", (*GOOD.split(), "report", "build", "--input", "badrow.txt", "--delimiter", "", "--out", "o"),
      2, "--delimiter"),
    C("format-unknown", f"{GOOD} report build --input badrow.txt --format pdf --out o", 2, "--format", "pdf"),
    C("target-negative", f"{GOOD} report build --input badrow.txt --target -1 --out o", 2, "--target"),
    C("top-zero", f"{GOOD} report build --input badrow.txt --top 0 --out o", 2, "--top"),
    # --- times and periods -------------------------------------------------------------------------------------
    C("since-typo", f"{GOOD} report build --input badrow.txt --since yesterdy --out o", 2, "--since", "yesterdy"),
    C("since-bare-number", f"{GOOD} report build --input badrow.txt --since 7 --out o", 2, "--since"),
    C("until-without-since", f"{GOOD} report build --input badrow.txt --until 1d --out o", 2, "--until"),
    C("period-and-since", f"{GOOD} report build --input badrow.txt --period today --since 2d --out o", 2,
      "--period"),
    C("period-unknown", f"{GOOD} report build --input badrow.txt --period lastweek --out o", 2, "--period"),
    C("rows-without-jsonl", f"{GOOD} report show --input badrow.txt --rows jobs", 2, "--rows"),
    # --- the site config ---------------------------------------------------------------------------------------
    C("config-misspelled-section", "config check badsec.conf", 2, "badsec.conf:3", "[sitee]"),
    C("config-misspelled-key", "config check badkey.conf", 2, "badkey.conf:2", "cluster_nmae"),
    C("config-bad-value-type", "config check badtype.conf", 2, "badtype.conf:3", "retry_window"),
    C("config-relative-path", "config check badval.conf", 2, "badval.conf:3", "results_dir"),
    C("config-missing-key", "config check nokey.conf", 2, "nokey.conf:1", "cluster_name"),
    C("config-no-key-value", "config check noeq.conf", 2, "noeq.conf:2"),
    C("config-key-outside-section", "config check nosection.conf", 2, "nosection.conf:1", "cluster_name"),
    C("config-duplicate-key", "config check dupkey.conf", 2, "dupkey.conf:3", "cluster_name"),
    C("config-empty", "config check empty.txt", 2, "empty.txt", "[site]"),
    C("config-binary", "config check bin.dat", 2, "bin.dat"),
    C("config-directory", "config check adir", 2, "adir"),
    C("config-unknown-example", "config example nosuch", 2, "nosuch"),
    C("man-unknown-page", "man nosuch", 2, "nosuch"),
    # --- policy check ------------------------------------------------------------------------------------------
    C("policy-unknown-partition", f"--config {EXAMPLE} policy check --user alice -- -A ml -p nosuch "
      "--gres=gpu:h100:2 --comment team=ml,project=x", 1, "nosuch", "--partition"),
    C("policy-unknown-account", f"--config {EXAMPLE} policy check --user alice -- -A nosuchacct "
      "--gres=gpu:h100:2 --comment team=ml,project=x", 1, "nosuchacct", "--account"),
    C("policy-slurm-version-unknown", f"{GOOD} policy check --slurm-version 99.99 -- -p gpu", 2,
      "--slurm-version", "99.99"),
    C("policy-slurm-version-garbage", f"{GOOD} policy check --slurm-version banana -- -p gpu", 2,
      "--slurm-version", "banana"),
    C("policy-sbatch-unknown-option", f"{SBATCH} --bogus", 2, "--bogus"),
    C("policy-sbatch-bad-time", f"{SBATCH} --time=forever", 2, "--time"),
    C("policy-sbatch-bad-node-count", f"{SBATCH} -N x", 2, "-N"),
    C("policy-script-missing", f"{GOOD} policy check --script missing.sh", 2, "--script", "missing.sh"),
    C("policy-script-empty", f"{GOOD} policy check --script empty.txt", 2, "empty.txt"),
    C("policy-script-no-shebang", f"{GOOD} policy check --script junk.txt", 2, "junk.txt:1"),
    C("policy-render-out-directory", f"{GOOD} policy render --out adir", 2, "--out", "adir"),
    # --- acceptance and audit (Nagios checks: anything that keeps them from answering is 3 UNKNOWN) --------------
    C("results-dir-missing", f"{GOOD} accept report --results-dir nodir", 3, "nodir", "--results-dir"),
    C("results-dir-is-file", f"{GOOD} accept report --results-dir empty.txt", 3, "--results-dir", "empty.txt"),
    C("results-file-foreign-schema", f"{GOOD} accept report --results-dir rdir", 3, "rdir/124.jsonl:1", "schema"),
    C("nagios-range-garbage", f"{GOOD} accept report --results-dir adir -w abc", 3, "--warning", "abc"),
    C("nagios-range-reversed", f"{GOOD} accept report --results-dir adir -c 5:1", 3, "--critical", "5:1"),
    C("accept-job-not-an-id", f"{GOOD} accept report --results-dir adir --job abc", 3, "--job", "abc"),
    C("accept-since-garbage", f"{GOOD} accept report --results-dir adir --since whenever", 3, "--since"),
    C("accept-max-drain-range", f"{GOOD} accept report --results-dir adir --drain --max-drain 2", 3, "--max-drain"),
    C("accept-submit-unknown-kind", f"{GOOD} accept submit nosuchkind -N 2 -p gpu", 2, "nosuchkind"),
    C("node-status-bad-name", f"{GOOD} accept node-status bad/node", 2, "bad/node"),
    C("audit-name-and-all", f"{GOOD} audit partition", 3, "--all"),
    C("audit-range-garbage", f"{GOOD} audit partition gpu -w x", 3, "--warning"),
    C("audit-unknown-skip", f"{GOOD} audit partition gpu --skip nosuch", 3, "--skip", "nosuch"),
    # --- Slurm itself --------------------------------------------------------------------------------------------
    C("slurm-not-installed", f"{GOOD} report fetch --since 1d", 3, "sacct", PATH="nobin"),
    C("slurm-failing", f"{GOOD} report fetch --since 1d", 3, "sacct", PATH="fakebin"),
]


def _write_inputs(d: Path) -> None:
    (d / "adir").mkdir()
    (d / "nobin").mkdir()
    (d / "empty.txt").write_text("")
    (d / "bin.dat").write_bytes(bytes(range(256)) * 2)
    (d / "noheader.txt").write_text("1|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00\n")
    (d / "nostart.txt").write_text("JobID|State\n1|COMPLETED\n")
    (d / "badrow.txt").write_text("JobID|State|Start|End\n1|COMPLETED|2026-01-01T00:00:00|2026-01-01T01:00:00\n"
                                  "2|BOGUS|x|y\n")
    (d / "junk.txt").write_text("not a header\n")
    (d / "notjobs.json").write_text('{"jobs": 5}')
    (d / "trunc.json").write_text('{"jobs": [')
    (d / "rdir").mkdir()
    (d / "rdir" / "124.jsonl").write_text('{"schema": "x"}\n')
    (d / "good.conf").write_text("[site]\ncluster_name = lab\n\n[partition gpu]\ngpu_type = h100\n")
    (d / "badsec.conf").write_text("[site]\ncluster_name = lab\n[sitee]\nfoo = 1\n")
    (d / "badkey.conf").write_text("[site]\ncluster_nmae = lab\n")
    (d / "badtype.conf").write_text("[site]\ncluster_name = lab\nretry_window = soon\n")
    (d / "badval.conf").write_text("[site]\ncluster_name = lab\nresults_dir = relative/path\n")
    (d / "nokey.conf").write_text("[site]\ntimezone = UTC\n")
    (d / "noeq.conf").write_text("[site]\ncluster_name lab\n")
    (d / "nosection.conf").write_text("cluster_name = lab\n")
    (d / "dupkey.conf").write_text("[site]\ncluster_name = lab\ncluster_name = lab2\n")
    fake = d / "fakebin"
    fake.mkdir()
    for tool in ("sacct", "sacctmgr", "scontrol", "sinfo", "sbatch"):  # a Slurm whose daemons are down
        script = fake / tool
        script.write_text(f"#!/bin/sh\necho '{tool}: error: Problem talking to the database: "
                          "Connection refused' >&2\nexit 1\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    _write_inputs(d)
    return d


def _run(case: Case, workdir: Path) -> tuple[int, str, BaseException | None]:
    env = {"GPUCLUST_CONFIG": None, "GPUCLUST_SLURM_VERSION": None, "GPUCLUST_DEBUG": None, "SLURM_CONF": None,
           "GPUCLUST_SLURM_TIMEOUT": None, "GPUCLUST_SLURM_BACKEND": None, "COLUMNS": "200"}
    for key, value in case.env.items():
        env[key] = str(workdir / value) if key == "PATH" else value
    old = os.getcwd()
    os.chdir(workdir)  # the cases use relative paths, as a user at a shell does
    try:
        result = CliRunner().invoke(cli, list(case.argv), env=env)
    finally:
        os.chdir(old)
    return result.exit_code, result.output, result.exception


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_gets_a_located_actionable_message(case: Case, workdir: Path) -> None:
    code, output, exc = _run(case, workdir)
    assert "Traceback" not in output and "internal error" not in output, output
    assert exc is None or isinstance(exc, SystemExit), repr(exc)
    assert code == case.code, f"exit {code}, expected {case.code}:\n{output}"
    for name in case.names:
        assert name in output, f"the message does not name {name!r}:\n{output}"
    assert HINT.search(output.replace("Try '", "")), f"no what-to-do in:\n{output}"


# A missing site config is the first thing a new user meets.
def test_missing_config_says_what_to_do(workdir: Path) -> None:
    code, output, _ = _run(C("config-missing", "--config missing.conf config show", 2), workdir)
    assert code == 2 and "missing.conf" in output
    assert HINT.search(output.replace("Try '", "")), output
