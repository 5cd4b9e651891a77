"""Issue 28: mutation fuzz of every input surface, seeded with the real recordings in tests/data.

Each test starts from recorded real output (provenance in the README/SOURCES of each tests/data directory),
applies 1-4 drawn mutations (delete, duplicate or swap lines; truncate; insert a delimiter, newline, CR, NUL, a
byte that is no UTF-8 or a BOM; blank a field, put random bytes or an out-of-range value in it; CRLF line ends;
for sacct text, reorder the columns; for JSON, drop a key or element, retype a value, duplicate an element) and
runs the real command through click's CliRunner. Asserted for every case:
- no uncaught exception but SystemExit, no "Traceback" and no "internal error" (exit 70) in the output;
- the exit code is in the command's documented set: `report build` 0/1/2, `config check` 0/2, `policy check`
  0/1/2, `accept report` and `audit partition` (Nagios) 0/1/2/3;
- for sacct text and JSON (and the report with node events / slurmctld log), report.json's
  input.rows_accounted balances: every row read lands in exactly one bucket (tests/unit/test_accounting_buckets.py);
  for JSON, `read` is the document's jobs + steps; for text, the direct reader (strict) counts as the reference;
- a refusal of `report build` or `config check` names one of the files it was given.

Deterministic (derandomize=True); case counts are in the test names and in BENCHMARKS.md ("Fuzz").
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.history.events import parse_events
from gpuclust.accounting.ingest import text
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.audit import collect as col
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.errors import InputError
from gpuclust.slurm.replay import ReplaySlurmClient
from gpuclust.slurm.runner import _text as slurm_text  # (how Slurm's output is decoded)
from tests.unit.audit_replay import SCENARIOS, VERSIONS, scenario_dir

DATA = Path(__file__).resolve().parents[1] / "data"
ACCT = DATA / "accounting"
ECON = DATA / "economics"
FETCH = b"\x1f|\x1e"
NAGIOS = {0, 1, 2, 3}
REPORT_CODES = {0, 1, 2}

# ---- seeds: real recordings (and, for the JSON shapes no real document was found for, the spec-derived ones) --

PIPE_SEEDS = [ACCT / p for p in (
    "lab-pipe.txt", "lab-holes-pipe.txt", "lab-pipe-steps.txt", "lab-cancelled-pending.txt", "lab-typed-only.txt",
    "24.11/lab-pipe.txt", "26.05/lab-pipe.txt", "reason/22.05/lab-pipe.txt", "public/slurm2sql-test-data1.txt",
    "usage/lab-22.05-steps-pipe.txt")] + [ECON / "sacct.txt"]
FETCH_SEEDS = [ACCT / p for p in ("lab-parsable.txt", "lab-holes-fetch.txt", "24.11/day-parsable.txt",
                                  "26.05/day-parsable.txt", "26.05/lab-parsable.txt")]
# One document per shape: 22.05 (openapi/dbv0.0.38), 24.11 (v0.0.42), 26.05, a real slurmrestd v0.0.40 job, the
# 22.05 steps document, and the spec-derived 21.08/23.02/23.11/24.05/25.05/25.11 (json/SOURCES.md).
JSON_SEEDS = [ACCT / p for p in (
    "lab-json.json", "24.11/lab-json.json", "26.05/lab-json.json", "lab-cancelled-pending.json",
    "usage/lab-22.05-steps.json", "json/24.05/slurmrestd-v0.0.40-job-26.json", "json/21.08/spec-dbv0.0.37.json",
    "json/23.02/spec-v0.0.39.json", "json/23.11/spec-v0.0.40.json", "json/24.05/spec-v0.0.41.json",
    "json/25.05/spec-v0.0.43.json", "json/25.11/spec-v0.0.44.json")]
# Real slurmrestd /slurmdb/ (and a /slurm/ queue) job responses of 23.02-25.11 recorded by Slurm-web
# (json/SOURCES.md): drawn as a second group, so they do not crowd out the lab recordings.
SLURMWEB_SEEDS = sorted((ACCT / "json").glob("*/slurmweb-*.json"))
CONFIG_SEEDS = [ACCT / "site.conf", ECON / "site.conf", DATA / "audit" / "site-lab.conf",
                DATA / "policy" / "lab-site.conf", DATA / "policy" / "diff-site.conf",
                DATA.parents[1] / "site.example.conf"]
RESULT_SEEDS = sorted((DATA / "accept" / "lab_results").glob("*.jsonl"))
# --events/--nodes/--reasons/--sreport/--slurmctld-log of the economics recordings (22.05 and 24.11).
SIDE_SEEDS: dict[str, list[Path]] = {
    "--events": [ECON / "events-0900-1000.txt", ECON / "events.txt", ECON / "24.11" / "events.txt"],
    "--nodes": [ECON / "nodes.txt", ECON / "24.11" / "nodes.txt"],
    "--reasons": [ECON / "reasons.txt", ECON / "24.11" / "reasons.txt", ACCT / "reason" / "24.11" / "reasons.txt"],
    "--sreport": [ECON / "sreport-0900-1000.txt"],
    "--slurmctld-log": [ECON / "slurmctld.log", ECON / "24.11" / "slurmctld-reject-lines.log"],
}
SIDE_SEP = {"--events": b"|", "--nodes": b" ", "--reasons": b"|", "--sreport": b"|", "--slurmctld-log": b" "}

# ---- case counts (the test names carry them; BENCHMARKS.md "Fuzz" lists them) ----------------------------------

N_PIPE, N_FETCH, N_JSON, N_CONFIG, N_POLICY, N_RESULTS, N_SIDE, N_AUDIT = 60, 40, 60, 100, 200, 100, 50, 150


def _settings(n: int) -> Callable[[Any], Any]:
    # GPUCLUST_FUZZ_SCALE=K runs K times the cases, GPUCLUST_FUZZ_RANDOM=1 other cases on each run (a deeper
    # local search); CI runs the counts in the names, the same cases every time.
    n *= max(1, int(os.environ.get("GPUCLUST_FUZZ_SCALE", "1")))
    fixed = os.environ.get("GPUCLUST_FUZZ_RANDOM", "") in ("", "0")
    return settings(max_examples=n, deadline=None, derandomize=fixed, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


# ---- the mutator ---------------------------------------------------------------------------------------------

TOKENS = [b"\n", b"\r\n", b"\r", b"\x00", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"|", FETCH, b"\x1f", b"\x1e", b"=",
          b" ", b"\t", b'"', b"'", b"#", b"[", b"]", b",", b":", b"\\", b"{", b"}"]
VALUES = [b"", b"-1", b"0", b"99999999999999999999999", b"1e400", b"nan", b"inf", b"Unknown", b"None", b"INVALID",
          b"2026-13-45T99:99:99", b"9999-12-31T23:59:59", b"0001-01-01T00:00:00", b"1970-01-01T00:00:00",
          b"-00:00:01", b"1-99:99:99", b"99999999-00:00:00", b"gres/gpu=-4", b"gres/gpu=99999999999999999999",
          b"gres/gpu:=1", b"1:0:0", b"\xff\xfe", b"\x00", b"CANCELLED by 4294967295", b"node[1-", b"12_[",
          b"1+", b"1.", b"=", b"  ", "\u00fc\u2028".encode()]


def _field_spans(line: bytes, sep: bytes) -> list[tuple[int, int]]:
    spans, start = [], 0
    while True:
        at = line.find(sep, start)
        if at < 0:
            spans.append((start, len(line)))
            return spans
        spans.append((start, at))
        start = at + len(sep)


SEEDS: dict[str, bytes] = {}  # name -> content: strategies take names (a short repr, no shared state)


def seed_name(path: Path) -> str:
    name = str(path.relative_to(DATA.parents[1]))
    SEEDS.setdefault(name, path.read_bytes())
    return name


@st.composite
def mutated(draw: st.DrawFn, seed: str | bytes, sep: bytes, columns: bool = False, max_ops: int = 4) -> bytes:
    """The seed (a name in SEEDS, or bytes) with 1..max_ops drawn mutations; `sep` splits a line into fields;
    `columns`: sacct text, whose columns may be reordered (header and rows alike)."""
    data = SEEDS[seed] if isinstance(seed, str) else seed
    for _ in range(draw(st.integers(1, max_ops))):
        lines = data.split(b"\n")
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.integers(0, 11 if columns else 10))
        if op == 0:  # delete a line
            del lines[i]
        elif op == 1:  # duplicate a line
            lines.insert(i, lines[i])
        elif op == 2:  # swap two lines
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 3:  # truncate
            data = data[: draw(st.integers(0, len(data)))]
            continue
        elif op == 4:  # insert a token anywhere
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.sampled_from(TOKENS)) + data[at:]
            continue
        elif op in (5, 6, 7):  # blank a field, random bytes in it, an out-of-range value in it
            spans = _field_spans(lines[i], sep)
            a, b = spans[draw(st.integers(0, len(spans) - 1))]
            new = b"" if op == 5 else draw(st.binary(max_size=8)) if op == 6 else draw(st.sampled_from(VALUES))
            lines[i] = lines[i][:a] + new + lines[i][b:]
        elif op == 8:  # CRLF line ends
            data = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
            continue
        elif op == 9:  # insert a line of junk or a copy of a line with one more/less field
            junk = draw(st.one_of(st.binary(max_size=30), st.sampled_from([b"", sep * 3, lines[i] + sep,
                                                                          lines[i].rsplit(sep, 1)[0]])))
            lines.insert(i, junk)
        elif op == 10:  # random bytes over a byte range
            at = draw(st.integers(0, len(data)))
            data = data[:at] + draw(st.binary(min_size=1, max_size=6)) + data[at + draw(st.integers(0, 6)):]
            continue
        else:  # reorder the columns of every line with the header's field count (sacct text)
            header = lines[0].split(sep)
            order = draw(st.permutations(range(len(header))))
            lines = [sep.join(f[k] for k in order) if len(f := line.split(sep)) == len(header) else line
                     for line in lines]
        data = b"\n".join(lines)
    return data


JSON_VALUES: list[Any] = [None, "", "x", -1, 0, 2**63, 2**64 + 1, -(2**63) - 1, 1e308, -1e308, 0.5, True, [], {},
                          {"set": True, "infinite": False, "number": -1}, {"set": False, "infinite": True},
                          {"set": True, "infinite": False, "number": 2**70}, "Unknown", "9" * 40, "\udcff",
                          [{"type": "gres", "name": "gpu", "id": 1001, "count": -4}]]


@st.composite
def json_mutated(draw: st.DrawFn, seed: str, line: int | None = None, max_ops: int = 4) -> Any:
    """The JSON seed (a name in SEEDS; `line`: that line of a JSON-lines file) with 1..max_ops structural
    mutations at drawn depths: drop a key or element, a value of another type, a duplicated element."""
    doc = json.loads(SEEDS[seed] if line is None else SEEDS[seed].split(b"\n")[line])
    for _ in range(draw(st.integers(1, max_ops))):
        parent: Any = None
        key: Any = None
        node = doc
        while isinstance(node, (dict, list)) and node and (parent is None or draw(st.integers(0, 5)) > 0):
            key = draw(st.sampled_from(sorted(node))) if isinstance(node, dict) else draw(
                st.integers(0, len(node) - 1))
            parent, node = node, node[key]
        if parent is None:
            continue
        op = draw(st.integers(0, 3))
        if op == 0:
            del parent[key]
        elif op in (1, 2):
            parent[key] = copy.deepcopy(draw(st.sampled_from(JSON_VALUES)))
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(node))
        else:
            parent[key] = [node] if draw(st.booleans()) else str(node)
    return doc


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc).encode("utf-8", "surrogateescape")


# ---- the invariants ----------------------------------------------------------------------------------------------


def _no_crash(result: Result, codes: set[int]) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    assert "internal error" not in result.output, result.output
    assert result.exit_code in codes, (result.exit_code, result.output)


def _report_build(src: Path, out: Path, *extra: str, config: Path = ACCT / "site.conf") -> tuple[Result, Any]:
    """`report build --input src` (and the extra options); a refusal names one of the files it was given."""
    result = CliRunner().invoke(cli, ["--config", str(config), "report", "build", "--input", str(src), "--out",
                                      str(out), "--format", "json", *extra])
    _no_crash(result, REPORT_CODES)
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    if result.exit_code == 0:
        assert report is not None, result.output
        accounted = report["input"]["rows_accounted"]
        assert accounted["balanced"], accounted
        assert accounted["read"] == sum(v for k, v in accounted.items() if k not in ("read", "balanced")), accounted
    else:
        named = [src.name, config.name] + [Path(a).name for a in extra if "/" in a]
        assert any(n in result.output for n in named), result.output
    return result, report


def _check_sacct(data: bytes, name: str, extra: list[str]) -> Any:
    """The report.json of a clean run (None when refused)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / name
        src.write_bytes(data)
        result, report = _report_build(src, Path(tmp) / "out", *extra)
        return report if result.exit_code == 0 else None


def _json_records(doc: Any) -> int | None:
    """The records of a sacct --json document, counted without gpuclust's readers: jobs and their steps."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        return None
    return sum(1 + (len(j["steps"]) if isinstance(j, dict) and isinstance(j.get("steps"), list) else 0)
               for j in doc["jobs"])


# ---- sacct --parsable2 text, both delimiters -----------------------------------------------------------------


def _readers_agree(dump: bytes, delimiter: str | None) -> None:
    """The CLI falls back to the reference reader when the direct one fails unexpectedly, which would hide its
    crash: run the direct reader strict, and it must count what the reference counts."""
    def counts(options: ReaderOptions) -> tuple[Any, ...]:
        try:
            res = text.parse_parsable(dump, delimiter, "dump.txt", options=options)
        except InputError as exc:
            assert all(p.file == "dump.txt" for p in exc.problems), exc.problems
            return ("refused",)
        return res.table.num_rows, res.rejected, res.steps_dropped

    assert counts(ReaderOptions(strict=True)) == counts(ReaderOptions(fast=False))

_PIPE = [seed_name(p) for p in PIPE_SEEDS]
_FETCH = [seed_name(p) for p in FETCH_SEEDS]


@_settings(N_PIPE)
@given(data=st.data(), strict=st.booleans(), explicit=st.booleans(), json_out=st.booleans())
def test_sacct_text_pipe_fuzz_60_cases(data: st.DataObject, strict: bool, explicit: bool, json_out: bool) -> None:
    seed = data.draw(st.sampled_from(_PIPE))
    dump = data.draw(mutated(seed, b"|", columns=True))
    extra = (["--strict"] if strict else []) + (["--delimiter", "|"] if explicit else []) + (
        ["--json"] if json_out else [])
    _readers_agree(dump, "|" if explicit else None)
    _check_sacct(dump, "dump.txt", extra)


@_settings(N_FETCH)
@given(data=st.data(), strict=st.booleans(), explicit=st.booleans(), json_out=st.booleans())
def test_sacct_text_fetch_delimiter_fuzz_40_cases(data: st.DataObject, strict: bool, explicit: bool, json_out: bool) -> None:
    seed = data.draw(st.sampled_from(_FETCH))
    dump = data.draw(mutated(seed, FETCH, columns=True))
    extra = (["--strict"] if strict else []) + (["--delimiter", r"\x1f|\x1e"] if explicit else []) + (
        ["--json"] if json_out else [])
    _readers_agree(dump, FETCH.decode() if explicit else None)
    _check_sacct(dump, "dump.txt", extra)


# ---- sacct --json, every shape --------------------------------------------------------------------------------

_JSON = [seed_name(p) for p in JSON_SEEDS]
_JSON_GROUPS = [_JSON] + ([[seed_name(p) for p in SLURMWEB_SEEDS]] if SLURMWEB_SEEDS else [])


@_settings(N_JSON)
@given(data=st.data(), bytes_too=st.integers(0, 4))
def test_sacct_json_fuzz_60_cases(data: st.DataObject, bytes_too: int) -> None:
    group = data.draw(st.sampled_from(_JSON_GROUPS))
    doc = data.draw(json_mutated(data.draw(st.sampled_from(group))))
    dump = _dumps(doc)
    if bytes_too == 0:  # one in five: the document's bytes too (most then are no JSON: exit 2, named)
        dump = data.draw(mutated(dump, b",", max_ops=2))
    report = _check_sacct(dump, "dump.json", [])
    if report is not None and bytes_too != 0 and (want := _json_records(doc)) is not None:
        assert report["input"]["rows_accounted"]["read"] == want, report["input"]["rows_accounted"]


# ---- the site config ------------------------------------------------------------------------------------------

_CONFIGS = [seed_name(p) for p in CONFIG_SEEDS]


@_settings(N_CONFIG)
@given(data=st.data())
def test_site_config_fuzz_100_cases(data: st.DataObject) -> None:
    conf_bytes = data.draw(mutated(data.draw(st.sampled_from(_CONFIGS)), b"="))
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "site.conf"
        conf.write_bytes(conf_bytes)
        result = CliRunner().invoke(cli, ["config", "check", str(conf)])
        _no_crash(result, {0, 2})
        if result.exit_code == 2:
            assert "site.conf" in result.output, result.output
            return
        # A config that passes its check drives a report (the state dir of a seed may not exist: --out).
        _report_build(ACCT / "lab-pipe.txt", Path(tmp) / "out", config=conf)


# ---- sbatch command lines and scripts (policy check) ---------------------------------------------------------

_GRAMMAR = [c for v in ("22.05", "24.11", "26.05")
            for c in json.loads((DATA / "policy" / f"sbatch-grammar-{v}.json").read_text())["cases"]]
_ARGVS = [c["argv"] for c in _GRAMMAR]
_SCRIPTS = sorted({c["script"].encode(c["script_encoding"]) for c in _GRAMMAR if c["script"]}) + [
    p.read_bytes() for p in sorted((DATA.parents[1] / "sbatch_templates").glob("*.sbatch"))]
_POLICY_CONF = DATA / "policy" / "lab-site.conf"


@_settings(N_POLICY)
@given(data=st.data(), version=st.sampled_from(["22.05", "24.11", "26.05"]), json_out=st.booleans())
def test_policy_check_sbatch_fuzz_200_cases(data: st.DataObject, version: str, json_out: bool) -> None:
    argv = list(data.draw(st.sampled_from(_ARGVS)))
    script = data.draw(st.sampled_from(_SCRIPTS))
    which = data.draw(st.sampled_from(["argv", "script", "both"]))
    if which != "script":  # the command line as a "line" of NUL-separated words: split, joined, dropped, retyped
        line = data.draw(mutated(b"\x00".join(a.encode() for a in argv), b"\x00", max_ops=2))
        argv = [w.decode("utf-8", "surrogateescape") for w in line.split(b"\x00")]
    if which != "argv":
        script = data.draw(mutated(script, b" "))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.sh"
        path.write_bytes(script)
        argv = [str(path) if a == "job.sh" else a for a in argv]
        result = CliRunner().invoke(cli, ["--config", str(_POLICY_CONF), "policy", "check", "--user", "alice",
                                          "--slurm-version", version, "--gres-types", "gpu", "--script",
                                          str(path), *(["--json"] if json_out else []), "--", *argv])
        _no_crash(result, {0, 1, 2})
        if json_out and result.exit_code in (0, 1) and result.output:  # (sbatch's -Q/--quiet quiets it all)
            json.loads(result.output)


# ---- acceptance result files (accept report) -------------------------------------------------------------------

_RESULTS = {p.name: seed_name(p) for p in RESULT_SEEDS}
_ACCEPT_CONF = """[site]
cluster_name = accept
results_dir = {results}
[partition gpu]
gpu_type = h100
gpus_per_node = 4
expect_busbw_gbps = 0.1
busbw_tolerance = 50%
expect_staging_mbps = 20
storage_tolerance = 50%
"""


@st.composite
def _result_file(draw: st.DrawFn, seed: str) -> bytes:
    lines = SEEDS[seed].split(b"\n")
    if draw(st.booleans()):  # a record's values (JSON) mutated, then maybe its bytes
        i = draw(st.integers(0, len(lines) - 1))
        if lines[i].strip():
            lines[i] = _dumps(draw(json_mutated(seed, line=i, max_ops=2)))
        if draw(st.booleans()):
            return b"\n".join(lines)
    return draw(mutated(b"\n".join(lines), b", ", max_ops=3))


@_settings(N_RESULTS)
@given(data=st.data(), args=st.sampled_from([["--json"], [], ["--job", "14", "--json"], ["--since", "30d"]]))
def test_accept_report_results_fuzz_100_cases(data: st.DataObject, args: list[str]) -> None:
    name = data.draw(st.sampled_from(sorted(_RESULTS)))
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        for other, content in _RESULTS.items():
            (results / other).write_bytes(SEEDS[content])
        (results / name).write_bytes(data.draw(_result_file(_RESULTS[name])))
        conf = Path(tmp) / "site.conf"
        conf.write_text(_ACCEPT_CONF.format(results=results))
        result = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", *args], obj=AppContext())
        _no_crash(result, NAGIOS)
        if "--json" in args:
            assert json.loads(result.output)["exit_code"] == result.exit_code


# ---- node events, nodes, reasons, sreport and slurmctld log (report build --input ... --events ...) ------------

_SIDE = {opt: [seed_name(p) for p in paths] for opt, paths in SIDE_SEEDS.items()}
_SACCT_HOUR = ECON / "sacct-0900-1000.txt"


@_settings(N_SIDE)
@given(data=st.data(), opt=st.sampled_from(sorted(SIDE_SEEDS)), window=st.booleans(), gz=st.integers(0, 3))
def test_node_events_and_slurmctld_log_fuzz_50_cases(data: st.DataObject, opt: str, window: bool, gz: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args: list[str] = []
        for side, seeds in _SIDE.items():
            content = SEEDS[seeds[0]]
            if side == opt:
                content = data.draw(mutated(data.draw(st.sampled_from(seeds)), SIDE_SEP[side]))
            path = Path(tmp) / side.lstrip("-")
            path.write_bytes(content)
            args += [side, str(path)]
        if opt == "--slurmctld-log" and gz == 0:  # a rotated sibling, compressed, maybe cut or damaged
            packed = gzip.compress(SEEDS[data.draw(st.sampled_from(_SIDE[opt]))], mtime=0)
            packed = data.draw(mutated(packed, b"\x00", max_ops=2))
            (Path(tmp) / "slurmctld-log.1.gz").write_bytes(packed)
        if window:
            args += ["--since", "2026-12-03T09:00:00", "--until", "2026-12-03T10:00:00"]
        _report_build(_SACCT_HOUR, Path(tmp) / "out", *args, config=ECON / "site.conf")


# ---- audit partition (the recorded Slurm outputs it reads, replayed) -------------------------------------------

_AUDIT_FILES = {
    "scontrol_version.txt": ("scontrol", col.VERSION_ARGS),
    "scontrol_show_config.txt": ("scontrol", col.CONFIG_ARGS),
    "scontrol_a_show_partition_o.txt": ("scontrol", col.PARTITION_ARGS),
    "scontrol_d_show_node_o.txt": ("scontrol", col.NODE_TEXT_ARGS),
    "sinfo.json": ("sinfo", col.NODE_SINFO_JSON_ARGS),
    "scontrol_json_show_node.json": ("scontrol", col.NODE_SCONTROL_JSON_ARGS),
    "sacctmgr_show_qos.txt": ("sacctmgr", col.QOS_ARGS),
}
_AUDIT_SEP = {"sinfo.json": b",", "scontrol_json_show_node.json": b",", "sacctmgr_show_qos.txt": b"|",
              "scontrol_version.txt": b" "}
_AUDIT_CONF = DATA / "audit" / "site-lab.conf"


def _audit_client(d: Path, mutate: str, content: bytes) -> ReplaySlurmClient:
    client = ReplaySlurmClient()
    for name, (tool, args) in _AUDIT_FILES.items():
        if (d / name).exists():
            raw = content if name == mutate else (d / name).read_bytes()
            client.add(tool, args, slurm_text(raw))
    cluster = (d / "cluster_name.txt").read_text().strip()
    raw = content if mutate == "sacctmgr_show_assoc.txt" else (d / "sacctmgr_show_assoc.txt").read_bytes()
    client.add("sacctmgr", col.assoc_args(cluster), slurm_text(raw))
    return client


@_settings(N_AUDIT)
@given(data=st.data(), scenario=st.sampled_from(SCENARIOS), version=st.sampled_from(VERSIONS),
       json_out=st.booleans())
def test_audit_partition_fuzz_150_cases(data: st.DataObject, scenario: str, version: str, json_out: bool) -> None:
    d = scenario_dir(scenario, version)
    names = sorted(n for n in [*_AUDIT_FILES, "sacctmgr_show_assoc.txt"] if (d / n).exists())
    name = data.draw(st.sampled_from(names))
    content = data.draw(mutated(seed_name(d / name), _AUDIT_SEP.get(name, b" ")))
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--config", str(_AUDIT_CONF), "audit", "partition", "gpu", "--results-dir", tmp]
        result = CliRunner().invoke(cli, args + (["--json"] if json_out else []),
                                    obj=AppContext(client=_audit_client(d, name, content),
                                                   config_path=str(_AUDIT_CONF)))
        _no_crash(result, NAGIOS)
        if json_out and result.exit_code != 3:
            json.loads(result.output)


# ---- regressions found by the fuzz (minimized inputs) ----------------------------------------------------------


def test_damaged_gz_rotated_slurmctld_log_is_a_named_warning(tmp_path: Path) -> None:
    """A rotated slurmctld log whose deflate data is damaged (zlib.error, not an OSError) used to end the report
    with an internal error (exit 70); now the file is named, the refusals read so far are kept, exit 0."""
    log = tmp_path / "slurmctld.log"
    log.write_bytes((ECON / "24.11" / "slurmctld-reject-lines.log").read_bytes())
    packed = gzip.compress(log.read_bytes(), mtime=0)
    (tmp_path / "slurmctld.log.1.gz").write_bytes(packed[:10] + b"\x00" + packed[11:])  # first deflate byte
    result, report = _report_build(_SACCT_HOUR, tmp_path / "out", "--slurmctld-log", str(log),
                                   "--since", "2026-12-03T09:00:00", "--until", "2026-12-03T10:00:00",
                                   config=ECON / "site.conf")
    assert result.exit_code == 0, result.output
    refusals = report["economics"]["refusals"]
    (problem,) = refusals["unreadable_lines"]
    assert problem.startswith(f"{tmp_path / 'slurmctld.log.1.gz'}: stopped reading after line 0: "), problem
    assert refusals["total"] == 3  # the plain log's three refusals are still counted


def test_policy_check_json_with_a_byte_that_is_no_utf8() -> None:
    """sbatch words are bytes: one that is no UTF-8 (kept by surrogateescape) in --comment made `policy check
    --json` die writing stdout (UnicodeEncodeError, exit 70). The JSON escapes it now."""
    bad = b"team=\xe2".decode("utf-8", "surrogateescape")
    result = CliRunner().invoke(cli, ["--config", str(_POLICY_CONF), "policy", "check", "--user", "alice",
                                      "--slurm-version", "22.05", "--gres-types", "gpu", "--json", "--", "-A", "ml",
                                      "-G", "1", f"--comment={bad}", "--wrap=true"])
    _no_crash(result, {1})
    assert json.loads(result.output)["rule"] == "label_value"
    assert "\\udce2" in result.output


def test_events_and_nodes_with_a_byte_that_is_no_utf8(tmp_path: Path) -> None:
    """A node name in `sacctmgr show event` with a byte that is no UTF-8 made report.json unwritable (exit 2
    naming the output); one in `scontrol show node -o` Partitions was an internal error (exit 70). The event row
    is a problem at its line now, the node inventory is refused naming the node and field."""
    events = tmp_path / "events.txt"
    events.write_bytes((ECON / "events.txt").read_bytes().replace(b"Node|node4", b"Node|node\x804"))
    result, report = _report_build(_SACCT_HOUR, tmp_path / "out", "--events", str(events),
                                   config=ECON / "site.conf")
    assert result.exit_code == 0, result.output
    parsed = parse_events(events.read_text(encoding="utf-8", errors="surrogateescape"), "events.txt")
    assert [str(p) for p in parsed.problems] == ["events.txt:5: [NodeName] NodeName b'node\\x804' holds a byte that "
                                                 "is not UTF-8 (sacctmgr writes UTF-8: fix the file or record it again)"]
    assert [e.node for e in parsed.nodes] == ["node3"]
    nodes = tmp_path / "nodes.txt"
    nodes.write_bytes((ECON / "nodes.txt").read_bytes().replace(b"Partitions=a100", b"Partitions=a1\x8000"))
    result, _ = _report_build(_SACCT_HOUR, tmp_path / "out2", "--nodes", str(nodes), config=ECON / "site.conf")
    assert result.exit_code == 2
    assert f"{nodes}: [Partitions] node b'node3': Partitions b'a1\\x8000' holds a byte that is not UTF-8" \
        in result.output, result.output


def test_json_steps_of_a_rejected_job_are_counted() -> None:
    """A job object with an unreadable field is a rejected row; its steps (no row made of them) used to vanish
    from rows_accounted.read (2 jobs + 4 steps read as 4); they are dropped steps now."""
    doc = json.loads((ACCT / "usage" / "lab-22.05-steps.json").read_bytes())
    doc["jobs"][1]["qos"] = []
    report = _check_sacct(_dumps(doc), "dump.json", [])
    accounted = report["input"]["rows_accounted"]
    assert (accounted["read"], accounted["rejected"], accounted["steps_dropped"]) == (6, 1, 4), accounted


@pytest.mark.parametrize(("name", "content"), [
    ("sacctmgr_show_assoc.txt", b"audit|root||||||normal\naudit|root|root|||||normal\n"),
    ("sacctmgr_show_qos.txt", b"normal|||||\ngpu-normal||||gres/gpu=8|\n")], ids=["assoc", "qos"])
def test_audit_sacctmgr_output_without_header(tmp_path: Path, name: str, content: bytes) -> None:
    """Found by this fuzz: sacctmgr -P output without its header line was an internal error (KeyError in
    gpuclust/slurm/records.py, exit 70); fixed by the audit's owner (commit f554097): named, limits UNKNOWN."""
    client = _audit_client(scenario_dir("clean"), name, content)
    result = CliRunner().invoke(cli, ["--config", str(_AUDIT_CONF), "audit", "partition", "gpu", "--results-dir",
                                      str(tmp_path)], obj=AppContext(client=client, config_path=str(_AUDIT_CONF)))
    _no_crash(result, NAGIOS)
    assert "line 1 is not a header" in result.output and "limits.accounting" in result.output, result.output


def test_case_counts_in_the_names() -> None:
    """The count in each fuzz test's name is the cases it runs (BENCHMARKS.md "Fuzz" quotes the names)."""
    scale = max(1, int(os.environ.get("GPUCLUST_FUZZ_SCALE", "1")))
    tests = {name: fn for name, fn in globals().items() if name.startswith("test_") and name.endswith("_cases")}
    assert len(tests) == 8
    for name, fn in tests.items():
        assert fn._hypothesis_internal_use_settings.max_examples == int(name.split("_")[-2]) * scale, name
