"""Start-up cost of the CLI (issue 30 item 1): NHC and Nagios run `accept node-status` and `audit partition`
every few minutes on every node, so the CLI imports pandas, numpy, pyarrow and torch only inside the commands that
use them. Each case runs in a fresh interpreter and reads `sys.modules` afterwards, which is deterministic; how
long it takes is measured by benchmarks/cli_startup.py, never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "pyarrow", "torch")
LAB_CONF = REPO / "tests" / "slurm_lab" / "lab-site.conf"
AUDIT_CONF = REPO / "tests" / "data" / "audit" / "site-lab.conf"

# Runs the CLI in-process as the console script does (an optional recorded Slurm for the audit), then prints
# its exit status and which heavy modules got imported, and ends as the console script ends.
_RUN = """
import json, sys
heavy, scenario, argv = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3:]
from gpuclust.cli.main import cli
obj = None
if scenario:
    from gpuclust.cli.context import AppContext
    from tests.unit.audit_replay import replay
    obj = AppContext(client=replay(scenario))
try:
    cli.main(argv, prog_name="gpuclust", obj=obj)
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
print(json.dumps({"exit": code, "heavy": sorted(m for m in heavy if m in sys.modules)}), file=sys.stderr)
from gpuclust.cli.main import _end
_end(0)  # as the console script ends, without the interpreter's teardown (pyarrow's threads may abort in it)
"""


def _env() -> dict[str, str]:
    """No Slurm cluster and no site config from the caller's environment: each case names what it reads."""
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "GPUCLUST_CONFIG", "GPUCLUST_SLURM_VERSION")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _run(argv: list[str], scenario: str = "", modules: tuple[str, ...] = HEAVY,
         env: dict[str, str] | None = None) -> dict[str, object]:
    cp = subprocess.run([sys.executable, "-c", _RUN, json.dumps(modules), scenario, *argv], capture_output=True,
                        text=True, cwd=REPO, env={**_env(), **(env or {})}, timeout=120)
    assert cp.stderr.strip(), cp.stdout
    result: dict[str, object] = json.loads(cp.stderr.strip().splitlines()[-1])
    result["output"] = cp.stdout
    return result


def test_importing_the_entry_point_imports_no_heavy_library() -> None:
    code = f"import sys, gpuclust.cli.main; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=_env(),
                        timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "[]"


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["report", "--help"], ["report", "build", "--help"],
                                  ["audit", "partition", "--help"]], ids=" ".join)
def test_version_and_help_import_no_heavy_library(argv: list[str]) -> None:
    result = _run(argv)
    assert result["exit"] == 0, result["output"]
    assert result["heavy"] == []


def test_policy_check_imports_no_heavy_library() -> None:
    result = _run(["--config", str(LAB_CONF), "policy", "check", "--slurm-version", "22.05", "--gres-types", "gpu",
                   "--", "-A", "ml", "-p", "gpu", "--gres=gpu:h100:2", "--comment", "team=ml,project=x", "--wrap",
                   "true"])
    assert (result["exit"], result["heavy"]) == (0, []), result["output"]
    assert str(result["output"]).startswith("ACCEPT")


def test_accept_node_status_imports_no_heavy_library(tmp_path: Path) -> None:
    result = _run(["--config", str(LAB_CONF), "accept", "node-status", "node1", "--results-dir", str(tmp_path)])
    assert (result["exit"], result["heavy"]) == (1, []), result["output"]  # no results at all: NONE, exit 1
    assert str(result["output"]).startswith("NONE")


@pytest.mark.parametrize("scenario", ["clean", "degraded"])
def test_audit_partition_imports_no_heavy_library(scenario: str, tmp_path: Path) -> None:
    result = _run(["--config", str(AUDIT_CONF), "audit", "partition", "gpu", "--json", "--results-dir",
                   str(tmp_path)], scenario)
    assert result["heavy"] == [], result["output"]
    assert json.loads(str(result["output"]))["partition"] == "gpu"


# What `report build --format json` of a dump does not need: the other commands' code, the Prometheus writer
# (prometheus_client: only for --format prom), the store's partitioned build and its Parquet reader and writer,
# ClusterShell (no --events: no hostlist to expand), the readers of the economics' other sources (node events,
# refusals, Slurm's node records: none given), the acceptance results reader (no result file in the results
# directory) and difflib (no misspelt config key to suggest a spelling for).
NOT_FOR_A_JSON_BUILD = ("prometheus_client", "ClusterShell", "gpuclust.accounting.output.prom", "gpuclust.cli.accept",
                        "gpuclust.cli.audit", "gpuclust.cli.policy", "gpuclust.cli.config", "gpuclust.cli.docs",
                        "gpuclust.audit", "gpuclust.policy", "gpuclust.accounting.figures.partitioned",
                        "pyarrow.parquet", "gpuclust.accounting.history.events", "gpuclust.accounting.history.refusals",
                        "gpuclust.slurm.records", "gpuclust.accept.results", "difflib")


# A word being completed (TAB) on each command line: the options before it are parsed resiliently, their
# callbacks (the delimiter, format, target and Slurm-version parsers) must not load the data libraries.
@pytest.mark.parametrize(("shell", "words", "expected"), [
    ("bash", "gpuclust report build --f", "--format"),
    ("bash", "gpuclust report build --format ", ""),
    ("bash", "gpuclust report build --delimiter | --format csv --target 3 --slurm-version 22.05 --to", "--top"),
    ("zsh", "gpuclust report show --delimiter | --slurm-version 22.05 --f", "--format"),
    ("bash", "gpuclust report fetch --", "--via"),
])
def test_shell_completion_imports_no_heavy_library(shell: str, words: str, expected: str) -> None:
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    result = _run([], env={"_GPUCLUST_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
    assert (result["exit"], result["heavy"]) == (0, []), result["output"]
    assert expected in str(result["output"])


def test_report_build_json_imports_only_what_it_needs(tmp_path: Path) -> None:
    dump = REPO / "tests" / "data" / "accounting" / "lab-parsable.txt"
    result = _run(["report", "build", "--input", str(dump), "--format", "json", "--out", str(tmp_path)],
                  modules=NOT_FOR_A_JSON_BUILD)
    assert (result["exit"], result["heavy"]) == (0, []), result["output"]
    assert (tmp_path / "report.json").is_file() and not (tmp_path / "gpuclust.prom").exists()


# Every gpuclust module a json build of a dump loads (issue 41: each is fixed cost of the smallest build; the
# new figures' modules took the 1,000-line build from 2.0 to 2.3 G instructions, BENCHMARKS.md "Whole-process
# `report build`"). A module belongs here only if every such build needs it; else import it where it is used.
FOR_A_JSON_BUILD = frozenset((
    "gpuclust", "gpuclust.accept", "gpuclust.accept.resultfiles", "gpuclust.accounting",
    "gpuclust.accounting.figures", "gpuclust.accounting.figures.catalog", "gpuclust.accounting.figures.economics",
    "gpuclust.accounting.figures.findings", "gpuclust.accounting.figures.gpuuse",
    "gpuclust.accounting.figures.jobfilter", "gpuclust.accounting.figures.jsonrecords",
    "gpuclust.accounting.figures.lemon", "gpuclust.accounting.figures.metrics",
    # every build asks whether its rows hold MIG slices, shards or MPS (issue 44), and reads [lemon]
    "gpuclust.accounting.figures.shares", "gpuclust.slurm.gpushare", "gpuclust.config.lemon",
    "gpuclust.accounting.figures.prices",
    "gpuclust.accounting.figures.metrics.assembly", "gpuclust.accounting.figures.metrics.attempts",
    "gpuclust.accounting.figures.metrics.definitions", "gpuclust.accounting.figures.metrics.deprecated",
    "gpuclust.accounting.figures.metrics.runs", "gpuclust.accounting.figures.metrics.waits",
    "gpuclust.accounting.figures.trend", "gpuclust.accounting.figures.waste", "gpuclust.accounting.history",
    "gpuclust.accounting.history.fetch", "gpuclust.accounting.history.sources", "gpuclust.accounting.history.store",
    "gpuclust.accounting.history.storepath", "gpuclust.accounting.history.storeread",
    "gpuclust.accounting.history.storetree", "gpuclust.accounting.ingest", "gpuclust.accounting.ingest.fast",
    "gpuclust.accounting.ingest.fast.direct", "gpuclust.accounting.ingest.fast.direct.arrays",
    "gpuclust.accounting.ingest.fast.direct.assemble", "gpuclust.accounting.ingest.fast.direct.columns",
    "gpuclust.accounting.ingest.fast.direct.layout", "gpuclust.accounting.ingest.fast.direct.pieces",
    "gpuclust.accounting.ingest.fast.direct.prepare", "gpuclust.accounting.ingest.fast.direct.records",
    "gpuclust.accounting.ingest.fast.memory", "gpuclust.accounting.ingest.fast.sorting",
    "gpuclust.accounting.ingest.fast.swar", "gpuclust.accounting.ingest.fast.tres_values",
    "gpuclust.accounting.ingest.fields", "gpuclust.accounting.ingest.jsonin", "gpuclust.accounting.ingest.normalize",
    "gpuclust.accounting.ingest.period", "gpuclust.accounting.ingest.registry", "gpuclust.accounting.ingest.schema",
    "gpuclust.accounting.ingest.text", "gpuclust.accounting.ingest.textcommon", "gpuclust.accounting.ingest.usage",
    "gpuclust.accounting.ingest.usage_rules", "gpuclust.accounting.output",
    "gpuclust.accounting.output.economics_render", "gpuclust.accounting.output.gpuuse_render",
    "gpuclust.accounting.output.htmltext", "gpuclust.accounting.output.lemon_render",
    "gpuclust.accounting.output.render", "gpuclust.accounting.output.reportdoc", "gpuclust.accounting.output.svgplot",
    "gpuclust.accounting.pipeline", "gpuclust.atomicfile", "gpuclust.cli", "gpuclust.cli.context",
    "gpuclust.cli.main", "gpuclust.cli.output", "gpuclust.cli.params", "gpuclust.cli.report", "gpuclust.config",
    "gpuclust.config.economics", "gpuclust.config.guard", "gpuclust.config.health", "gpuclust.config.ini",
    "gpuclust.config.mail", "gpuclust.config.notify", "gpuclust.config.schema", "gpuclust.config.site",
    "gpuclust.config.telemetry", "gpuclust.config.values", "gpuclust.contract", "gpuclust.errors",
    "gpuclust.exitcodes", "gpuclust.output", "gpuclust.slurm", "gpuclust.slurm.client", "gpuclust.slurm.hostlist",
    "gpuclust.slurm.jsonshape", "gpuclust.slurm.parse", "gpuclust.slurm.runner", "gpuclust.slurm.sacct_json",
    "gpuclust.timespec",
))


def test_report_build_json_loads_only_the_known_gpuclust_modules(tmp_path: Path) -> None:
    dump = REPO / "tests" / "data" / "accounting" / "lab-parsable.txt"
    code = ("import json, sys\nfrom gpuclust.cli.main import cli\ncode = None\n"
            "try:\n    cli.main(sys.argv[1:], prog_name='gpuclust')\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] == 'gpuclust')]), file=sys.stderr)")
    cp = subprocess.run([sys.executable, "-c", code, "report", "build", "--input", str(dump), "--format", "json",
                         "--out", str(tmp_path)], capture_output=True, text=True, cwd=REPO, env=_env(), timeout=120)
    status, loaded = json.loads(cp.stderr.strip().splitlines()[-1])
    assert status in (0, None), cp.stderr
    assert sorted(set(loaded) - FOR_A_JSON_BUILD) == [], "new at start-up: import it where used, or list it"


def test_report_build_prom_still_writes_the_textfile(tmp_path: Path) -> None:
    dump = REPO / "tests" / "data" / "accounting" / "lab-parsable.txt"
    result = _run(["report", "build", "--input", str(dump), "--format", "prom", "--out", str(tmp_path)],
                  modules=("prometheus_client",))
    assert (result["exit"], result["heavy"]) == (0, ["prometheus_client"]), result["output"]
    assert (tmp_path / "gpuclust.prom").read_text().startswith("# HELP")


def test_the_commands_load_when_looked_up_in_their_order() -> None:
    """The root group imports a command's module when the command line names it; `commands` (man pages,
    completion, --help) holds them all, in the order they were always registered."""
    code = ("import sys\nfrom gpuclust.cli.main import cli\n"
            "before = 'gpuclust.cli.audit' in sys.modules\n"
            "print(before, list(cli.commands), 'gpuclust.cli.audit' in sys.modules)")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=_env(),
                        timeout=120)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["False", "['config',", "'report',", "'policy',", "'accept',", "'audit',", "'guard',", "'man',",
                                 "'job',", "'health']",
                                 "True"]


def test_report_via_choices_are_the_fetchers() -> None:
    """`report fetch --via` spells the choices out so that --help does not import the fetcher (numpy, pyarrow)."""
    from gpuclust.accounting.history.fetch import VIA
    from gpuclust.cli.report import VIA as CLI_VIA

    assert CLI_VIA == VIA


def test_job_imports_no_heavy_library(tmp_path):
    """`gpuclust job` answers one job without pandas, numpy or pyarrow when no store is there to read (issue 43
    item 1)."""
    dump = REPO / "tests" / "data" / "accounting" / "usage" / "lab-22.05-steps-pipe.txt"
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\nstate_dir = {tmp_path / 'state'}\n")
    result = _run(["--config", str(conf), "job", "--json", "--input", str(dump), "2"])
    assert (result["exit"], result["heavy"]) == (0, []), result["output"]
    assert json.loads(str(result["output"]))["jobs"][0]["job_id"] == "2"


def test_job_answered_from_the_store_imports_no_pandas(tmp_path):
    """From the store, the Parquet reader (pyarrow) loads, never pandas."""
    from benchmarks.job_view import DUMP, JOB, write_store

    write_store(tmp_path, 2, 3)
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = lab\nstate_dir = {tmp_path}\n")
    result = _run(["--config", str(conf), "job", "--json", "--input", str(DUMP), JOB])
    assert result["exit"] == 0 and "pandas" not in result["heavy"], result
    (job,) = json.loads(str(result["output"]))["jobs"]
    assert job["source"] == "store" and job["gpu_use"]["util_mean_pct"] == 50.0, job


@pytest.mark.parametrize(("argv", "status"), [(["--version"], 0), (["report", "build", "--bogus"], 2),
                                              (["report", "build", "--input", "/nonexistent"], 2)])
def test_the_console_script_ends_as_the_interpreter_would(argv: list[str], status: int, tmp_path: Path) -> None:
    """main() ends without the interpreter's teardown (os._exit), but as it would end: the same status, the exit
    handlers run, the output flushed, the other threads finished."""
    mark = tmp_path / "atexit"
    code = ("import atexit, sys, threading, time\n"
            f"atexit.register(lambda: open({str(mark)!r}, 'w').write('ran'))\n"
            "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', file=sys.stderr))).start()\n"
            "sys.stdout.write('pending')\n"
            "from gpuclust.cli.main import main\nsys.argv[0] = 'gpuclust'\nmain()\n")
    cp = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=REPO, env=_env(),
                        timeout=120)
    assert cp.returncode == status, cp.stderr
    assert cp.stdout.startswith("pending") and "thread done" in cp.stderr
    assert mark.read_text() == "ran"


@pytest.mark.parametrize(("code", "status", "stderr"), [(None, 0, ""), (3, 3, ""), (256 + 4, 4, ""),
                                                         ("no such thing", 1, "no such thing\n")])
def test_the_console_script_keeps_the_interpreters_exit_status(code: object, status: int, stderr: str) -> None:
    script = ("import gpuclust.cli.main as m\n"
              f"m.cli.main = lambda **_: (_ for _ in ()).throw(SystemExit({code!r}))\nm.main()\n")
    cp = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, env=_env(),
                        timeout=120)
    assert (cp.returncode, cp.stderr) == (status, stderr)
