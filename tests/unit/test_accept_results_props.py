"""Property tests for acceptance result files (JSON lines), the input of `gpuclust accept report`.

Files are drawn from a grammar of valid records (every type, pair attempts included) and broken lines: a
valid record with a key dropped or replaced by any JSON value, numbers out of range (NaN, Infinity, 1e999,
integers of thousands of digits), garbage text, invalid UTF-8, deep nesting, U+2028 inside strings, a BOM,
CRLF ends, several or no job lines. Asserted for every file:
- no traceback from the reader, the verdict or the CLI;
- every non-blank line is either a record counted in the result or a problem naming file:line (never both,
  never silently dropped);
- `accept report` exits 0, 1, 2 or 3 only (Nagios), with valid JSON under --json.
Case counts: see tests/README.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accept import report as rep
from gpuclust.accept import results as R
from gpuclust.accept import verdict
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config

CONF = """
[site]
cluster_name = lab
results_dir = {results}
[partition gpu]
gpu_type = h100
gpus_per_node = 4
expect_busbw_gbps = 0.1
busbw_tolerance = 50%
expect_staging_mbps = 20
storage_tolerance = 50%
"""
JOB_ID = "7"
NODES = ["node1", "node2", "node3", "node4"]

names = st.sampled_from(NODES + ["node5", "n-x.y", ""])
numbers = st.one_of(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.integers(0, 10**6))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _base(rtype: str, kind: str) -> dict[str, Any]:
    return {"schema": R.SCHEMA, "type": rtype, "job_id": JOB_ID, "kind": kind}


@st.composite
def job_line(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    d = _base("job", kind)
    d.update(cluster="lab", partition=draw(st.sampled_from(["gpu", "cpu", None])), nodes=NODES,
             started="2026-12-01T00:00:00+00:00", finished=draw(st.sampled_from(
                 ["2026-12-01T00:01:00+00:00", "2026-12-01T00:01:00Z", "2026-12-01T00:01:00"])),
             passed=draw(st.booleans()), failed_nodes=draw(st.lists(names, max_size=2)),
             declared_gres={n: draw(st.sampled_from(["gpu:h100:1(IDX:0)", "gpu:2", "weird"])) for n in NODES},
             node_gres={n: "gpu:h100:4" for n in NODES})
    return d


@st.composite
def rank_line(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    d = _base("rank", kind)
    node = draw(names)
    d.update(rank=draw(st.integers(0, 8)), local_rank=0, world_size=4, hostname=node, node=node,
             versions={"torch": "2.13.0+cpu", "driver": draw(st.sampled_from([None, "550", "535"]))},
             cuda_visible_devices=draw(st.sampled_from([None, "0", "0,1", ""])),
             gpus_seen=draw(st.integers(0, 4)), gpus_bound=draw(st.sampled_from([None, 0, 1, 4])),
             devices_found=draw(st.sampled_from([None, 4])), backend=draw(st.sampled_from(["gloo", "nccl"])))
    return d


@st.composite
def attempt(draw: st.DrawFn, n: int) -> dict[str, Any]:
    status = draw(st.sampled_from(["ok", "ok", "failed", "timeout"]))
    return {"attempt": n, "status": status, "busbw_gbps": draw(numbers) if status == "ok" else None,
            "iters": draw(st.integers(0, 20)), "samples_gbps": draw(st.lists(numbers, max_size=6))}


@st.composite
def pair_line(draw: st.DrawFn) -> dict[str, Any]:
    d = _base("pair", "pairwise")
    a, b = draw(st.lists(st.sampled_from(NODES), min_size=2, max_size=2, unique=True))
    attempts = [draw(attempt(i + 1)) for i in range(draw(st.integers(0, 3)))]
    status = draw(st.sampled_from(["ok", "failed"]))
    d.update(nodes=[a, b], size=4 << 20, iters=5, time_us=draw(numbers), algbw_gbps=draw(numbers),
             busbw_gbps=draw(st.one_of(numbers, st.none())) if status == "ok" else None, wrong=draw(st.integers(0, 2)),
             status=status, attempts=attempts)
    return d


@st.composite
def sweep_line(draw: st.DrawFn) -> dict[str, Any]:
    d = _base("sweep", "allreduce")
    d.update(size=draw(st.integers(1, 1 << 30)), count=1, dtype="float32", iters=5, warmup=1, time_us=draw(numbers),
             time_us_max=draw(numbers), algbw_gbps=draw(numbers), busbw_gbps=draw(numbers),
             wrong=draw(st.integers(0, 3)), world_size=4)
    return d


@st.composite
def storage_line(draw: st.DrawFn) -> dict[str, Any]:
    d = _base("storage", "storage")
    d.update(metric=draw(st.sampled_from(R.STORAGE_METRICS)), node=draw(names), bytes=1 << 20,
             seconds=draw(numbers), mbps=draw(numbers), ok=draw(st.booleans()),
             write_node=draw(st.sampled_from([None, "node1"])), read_node=draw(st.sampled_from([None, "node2"])))
    return d


def records(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    extra = {"pairwise": pair_line(), "allreduce": sweep_line(), "storage": storage_line()}[kind]
    return st.one_of(rank_line(kind), extra, extra)


@st.composite
def broken(draw: st.DrawFn, record: dict[str, Any]) -> bytes:
    """A valid record made invalid (or still valid: the reader decides), or a line of junk."""
    how = draw(st.integers(0, 9))
    d = dict(record)
    if how == 0 and d:
        d.pop(draw(st.sampled_from(sorted(d))))
    elif how == 1:
        d[draw(st.sampled_from(sorted(d)))] = draw(json_values)
    elif how == 2:
        text = json.dumps(d)
        key = draw(st.sampled_from(sorted(d)))
        return text.replace(f'"{key}": ', f'"{key}": {draw(st.sampled_from(["NaN", "Infinity", "-1e999", "1" * 5000]))}, "x": ', 1).encode()
    elif how == 3:
        return draw(st.binary(max_size=40))
    elif how == 4:
        return draw(st.text(max_size=40)).encode("utf-8", "surrogatepass")
    elif how == 5:
        depth = draw(st.integers(1, 20_000))
        return b"[" * depth + b"]" * draw(st.sampled_from([0, depth]))
    elif how == 6:
        d["note"] = "a\u2028b\u0085c\x1c"  # raw, legal in JSON strings; not line ends
        return json.dumps(d, ensure_ascii=False).encode()
    elif how == 7:
        return json.dumps(d).encode()[: draw(st.integers(0, 30))]
    elif how == 8:
        return json.dumps([d]).encode()
    elif how == 9:
        d["schema"] = draw(st.sampled_from(["gpuclust.accept/2", None, 1]))
    return json.dumps(d).encode()


@st.composite
def result_file(draw: st.DrawFn) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(R.KINDS))
    lines: list[bytes] = []
    jobs = draw(st.sampled_from([0, 1, 1, 1, 2]))
    for _ in range(jobs):
        lines.append(json.dumps(draw(job_line(kind))).encode())
    for _ in range(draw(st.integers(0, 8))):
        record = draw(records(kind))
        lines.append(draw(broken(record)) if draw(st.booleans()) else json.dumps(record).encode())
    lines = draw(st.permutations(lines))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b"   ")
    sep = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = sep.join(lines) + draw(st.sampled_from([b"", sep]))
    if draw(st.integers(0, 9)) == 0:
        data = b"\xef\xbb\xbf" + data
    name = draw(st.sampled_from([f"{kind}-{JOB_ID}.jsonl", f"{kind}-{JOB_ID}.jsonl", "pairwise-8.jsonl"]))
    return name, data


def nonblank_lines(data: bytes) -> set[int]:
    text = data.decode("utf-8", "surrogateescape").removeprefix("\ufeff")
    return {i for i, line in enumerate(text.split("\n"), start=1) if line.removesuffix("\r").strip(" \t\r")}


def counted(result: R.JobResult | None) -> int:
    if result is None:
        return 0
    return 1 + len(result.ranks) + len(result.sweep) + len(result.pairs) + len(result.storage)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(result_file())
def test_every_line_counted_or_rejected_with_file_line(case: tuple[str, bytes]) -> None:
    name, data = case
    path = f"/results/{name}"
    result, problems = R.parse_result_text(data.decode("utf-8", "surrogateescape"), path)
    lines = nonblank_lines(data)
    rejected = [p.line for p in problems if p.line is not None]
    assert len(rejected) == len(set(rejected)), problems  # one verdict per line
    assert set(rejected) <= lines
    assert counted(result) + len(rejected) == len(lines), (problems, result)
    for p in problems:
        assert str(p).startswith(f"{path}:{p.line}:" if p.line is not None else f"{path}:")
    if result is not None:
        verdict.judge(result.pairs)  # the judgement takes whatever the reader accepted


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                 HealthCheck.function_scoped_fixture])
@given(files=st.lists(result_file(), min_size=0, max_size=3))
def test_accept_report_exit_codes_only_nagios(tmp_path_factory: Any, files: list[tuple[str, bytes]]) -> None:
    root = Path(tmp_path_factory.mktemp("props"))
    results = root / "results"
    results.mkdir()
    for name, data in files:
        (results / name).write_bytes(data)
    conf = root / "site.conf"
    conf.write_text(CONF.format(results=results))
    runner = CliRunner()
    for args in (["--json"], [], ["--job", JOB_ID, "--json"]):
        out = runner.invoke(cli, ["--config", str(conf), "accept", "report", *args], obj=AppContext())
        assert out.exception is None or isinstance(out.exception, SystemExit), out.output
        assert out.exit_code in (0, 1, 2, 3), out.output
        if "--json" in args:
            doc = json.loads(out.output)
            assert doc["exit_code"] == out.exit_code
    scan = R.scan_results(results)
    report = rep.evaluate(scan, parse_config(CONF.format(results=results), "site.conf"))
    assert int(report.status) in (0, 1, 2, 3)
