"""Issue 42 (classes 1, 6, 8) and issue 43's first defect, on the Prometheus source: hostile answers and slow
servers (a local http.server on 127.0.0.1 only), coverage that counts only sampled time, and the invariants
held-idle <= covered <= allocated, busy <= covered, coverage <= 1. Property tests are deterministic
(derandomize=True); their case counts are in the test names.

The fake Prometheus answers the utilisation query_range with the series a test gives (step 60 s, period
[P0, P0+1h): one window, so 7 DCGM queries + 6 node queries) and every other query with an empty result.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.figures.telemetry import JobTelemetry, JobWindow, TelemetryResult, fetch_telemetry
from gpuclust.config.site import TelemetryConfig
from tests.unit.local_http import serve
from tests.unit.test_telemetry_prometheus import P0, T0, UTIL

HOUR = P0 + timedelta(hours=1)
UTIL_QUERY = f'{UTIL}{{hpc_job!=""}}'
EMPTY_MATRIX = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'
EMPTY_VECTOR = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


def _cfg(url: str, **kw: Any) -> TelemetryConfig:
    args: dict[str, Any] = {"step_s": 60.0, "chunk_hours": 1.0, "timeout_s": 5.0} | kw
    return TelemetryConfig(prometheus_url=url, **args)


def _matrix(series: list[tuple[dict[str, Any], list[Any]]]) -> bytes:
    result = [{"metric": labels, "values": values} for labels, values in series]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


def _labels(job: str, gpu: int = 0, node: str = "n1") -> dict[str, str]:
    return {"__name__": UTIL, "hpc_job": job, "Hostname": node, "gpu": str(gpu)}


def _points(minutes: range | list[int], value: float | Callable[[int], float]) -> list[list[Any]]:
    return [[T0 + m * 60, str(value(m) if callable(value) else value)] for m in minutes]


class _Prom(http.server.BaseHTTPRequestHandler):
    """util_body: the utilisation answer; mode: how every answer is sent."""

    util_body: bytes = EMPTY_MATRIX
    mode = "normal"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers.get("Content-Length", 0))).decode())
        query = form.get("query", [""])[0]
        cls = type(self)
        if self.path.endswith("/query_range"):
            body = cls.util_body if query == UTIL_QUERY else EMPTY_MATRIX
        else:
            body = EMPTY_VECTOR
        try:
            self._send(cls.mode, body)
        except OSError:  # the client hung up (it gave up at its deadline)
            pass

    def _send(self, mode: str, body: bytes) -> None:
        if mode == "trickle-headers":
            for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.05)
            return
        if mode == "status-500":
            self.send_response(500)
            self.send_header("Content-Length", "14")
            self.end_headers()
            self.wfile.write(b"internal error")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if mode == "trickle-chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for byte in body * 100:
                self.wfile.write(b"1\r\n" + bytes([byte]) + b"\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            return
        self.send_header("Content-Length", str(len(body) * (100 if mode == "trickle" else 1)))
        self.end_headers()
        if mode == "trickle":  # a few bytes at a time, each well inside the timeout
            for i in range(0, len(body) * 100, 3):
                self.wfile.write((body * 100)[i:i + 3])
                self.wfile.flush()
                time.sleep(0.05)
            return
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def fake_prometheus(util_body: bytes = EMPTY_MATRIX, mode: str = "normal") -> Iterator[str]:
    with serve(type("Prom", (_Prom,), {"util_body": util_body, "mode": mode})) as url:
        yield url


def _fetch(body: bytes, jobs: list[JobWindow], **kw: Any) -> TelemetryResult:
    with fake_prometheus(body) as url:
        return fetch_telemetry(_cfg(url, **kw), jobs, P0, HOUR)


def _job(key: str, gpus: int = 1, minutes: int = 60) -> JobWindow:
    return JobWindow(key, P0, P0 + timedelta(minutes=minutes), gpus, key=key)


def assert_invariants(tel: JobTelemetry, win: JobWindow) -> None:
    allocated = win.gpus * (min(win.end, HOUR) - max(win.start, P0)).total_seconds()
    eps = 1e-6 * max(1.0, allocated)
    assert 0 <= tel.held_idle_gpu_s <= tel.covered_gpu_s + eps, tel
    assert 0 <= tel.busy_gpu_s <= tel.covered_gpu_s + eps, tel
    assert 0 <= tel.covered_gpu_s <= allocated + eps, tel  # coverage <= 1
    assert tel.util_mean_pct is None or 0 <= tel.util_mean_pct <= 100 + 1e-9, tel


# ---- coverage is true (issue 43) ----------------------------------------------------------------------------


def test_series_that_stops_at_half_time_covers_half() -> None:
    body = _matrix([(_labels("1"), _points(range(30), 80.0))])
    job = _fetch(body, [_job("1")]).jobs["1"]
    assert job.covered_gpu_s == pytest.approx(1800)  # minutes 0-29, each holding a minute: coverage 0.5
    assert job.busy_gpu_s == pytest.approx(1440)  # half what holding the last value to the end gave
    assert job.util_mean_pct == pytest.approx(80)


def test_short_idle_then_unseen_is_not_held_idle() -> None:
    # 2% for 2 minutes (the points at 0 and 1 min), then nothing: 95% unseen is no data, not idle
    result = _fetch(_matrix([(_labels("1"), _points(range(2), 2.0))]), [_job("1")])
    job = result.jobs["1"]
    assert job.held_idle_gpu_s == 0 and job.covered_gpu_s == pytest.approx(120)
    assert any("only part of their GPU time" in w and "1 (0.03)" in w for w in result.warnings), result.warnings


def test_series_that_starts_late_and_has_a_gap() -> None:
    # idle from 10 to 30 min and from 40 to 60 min: neither stretch reaches idle_min = 30 min across the gap
    minutes = [*range(10, 30), *range(40, 60)]
    job = _fetch(_matrix([(_labels("1"), _points(minutes, 2.0))]), [_job("1")]).jobs["1"]
    assert job.covered_gpu_s == pytest.approx(2400)
    assert job.held_idle_gpu_s == 0
    assert job.busy_gpu_s == pytest.approx(48)


def test_gap_within_gap_factor_is_held() -> None:
    # a point every 2 minutes (under 3 x step): the whole hour is covered, and idle
    job = _fetch(_matrix([(_labels("1"), _points(range(0, 60, 2), 2.0))]), [_job("1")]).jobs["1"]
    assert job.covered_gpu_s == pytest.approx(3600) and job.held_idle_gpu_s == pytest.approx(3600)
    wide = _fetch(_matrix([(_labels("1"), _points(range(0, 60, 2), 2.0))]), [_job("1")], gap_factor=1.0)
    assert wide.jobs["1"].covered_gpu_s == pytest.approx(1800)  # gap_factor 1: only a point every step holds


def test_clean_series_keeps_its_figures() -> None:
    job = _fetch(_matrix([(_labels("1"), _points(range(60), lambda m: 80.0 if m < 30 else 5.0))]),
                 [_job("1")]).jobs["1"]
    assert job.covered_gpu_s == pytest.approx(3600) and job.busy_gpu_s == pytest.approx(1530)
    assert job.held_idle_gpu_s == pytest.approx(1800) and job.util_mean_pct == pytest.approx(42.5)


# ---- invariants on hostile answers (issue 42 class 6) ---------------------------------------------------------


def test_points_out_of_order_and_repeated_read_as_sorted() -> None:
    values = _points(range(60), lambda m: 100.0 if m < 15 else 0.0)  # 25% over the hour
    shuffled = values[::-1] + values[10:20]
    for body in (_matrix([(_labels("1"), values)]), _matrix([(_labels("1"), shuffled)])):
        job = _fetch(body, [_job("1")]).jobs["1"]
        assert job.util_mean_pct == pytest.approx(25.0)
        assert job.covered_gpu_s == pytest.approx(3600)


def test_more_gpu_series_than_gpus_never_adds_gpu_hours() -> None:
    series = [(_labels("1", gpu=g), _points(range(60), 2.0)) for g in range(7)]
    result = _fetch(_matrix(series), [_job("1", gpus=2)])
    job = result.jobs["1"]
    assert job.gpus_seen == 7
    assert job.covered_gpu_s == pytest.approx(7200) and job.held_idle_gpu_s == pytest.approx(7200)
    assert job.busy_gpu_s == pytest.approx(144)
    assert any("7 GPUs have series, 2 allocated" in w and "never extra" in w for w in result.warnings)


def test_nan_inf_and_bad_times_are_dropped_and_counted() -> None:
    values = _points(range(60), 50.0)
    values[5][1], values[6][1], values[7][1] = "NaN", "+Inf", "-Inf"
    values[8][0] = "NaN"
    result = _fetch(_matrix([(_labels("1"), values)]), [_job("1")])
    job = result.jobs["1"]
    assert job.util_mean_pct == pytest.approx(50)
    assert job.covered_gpu_s == pytest.approx(3600 - 4 * 60)  # a 5-minute gap is more than 3 x step
    assert any("4 point(s) dropped" in w for w in result.warnings), result.warnings


@pytest.mark.parametrize(("body", "words"), [
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[NaN,"1"]]}]}}',
     "bad JSON"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"hpc_job":"1"},"values":[[1e999999,'
     b'"1"]]}]}}', "1 point(s) dropped"),  # (a time of inf)
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"hpc_job":"1"},"values":[[' + b"1" * 5000
     + b',"1"]]}]}}', "bad JSON"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"hpc_job":"1"},"values":{"a":1}}]}}',
     "malformed answer"),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"hpc_job":["1"]},"values":[]}]}}', None),
    (b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":"x","values":[]}]}}', "malformed answer"),
    (b'{"status":"error","errorType":"\\u001b[31mred","error":"\\u0007bell"}', "Prometheus error"),
])
def test_wrong_types_are_a_named_failure(body: bytes, words: str | None) -> None:
    result = _fetch(body, [_job("1")])
    assert "1" not in result.jobs
    if words:
        assert any(words in w and UTIL in w for w in result.warnings), result.warnings
    assert not any("\x1b" in w or "\x07" in w for w in result.warnings), result.warnings


def test_deep_json_is_a_named_failure_not_a_crash() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    result = _fetch(deep, [_job("1")])
    assert result.jobs == {}
    assert any("nested deeper" in w and UTIL in w for w in result.warnings), result.warnings


def test_answer_over_the_size_limit_is_a_named_failure() -> None:
    big = _matrix([(_labels("1", gpu=g), _points(range(60), 50.0)) for g in range(1000)])
    assert len(big) > 1 << 20
    result = _fetch(big, [_job("1")], max_response_mib=1)
    assert result.jobs == {}
    assert any("larger than 1 MiB" in w and "max_response_mib" in w for w in result.warnings), result.warnings


# ---- a deadline for the whole request (issue 42 class 1) ------------------------------------------------------


@pytest.mark.parametrize("mode", ["trickle", "trickle-chunked", "trickle-headers"])
def test_trickling_server_is_cut_off_at_the_timeout(mode: str) -> None:
    body = _matrix([(_labels("1"), _points(range(60), 50.0))])
    with fake_prometheus(body, mode) as url:
        began = time.monotonic()
        result = fetch_telemetry(_cfg(url, timeout_s=1.0), [_job("1")], P0, HOUR)
        took = time.monotonic() - began
    # (the body alone takes minutes to trickle; generous slack for a loaded machine)
    assert took < 30, took
    assert result.jobs == {} and result.queries == 1
    assert any(UTIL in w and "timed out after 1 s" in w for w in result.warnings), result.warnings
    assert any("12 further queries skipped" in w for w in result.warnings), result.warnings


# ---- property: any answer keeps the invariants ---------------------------------------------------------------

_TIMES = st.one_of(
    st.sampled_from([T0 + m * 60 for m in range(-5, 66)]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["NaN", "+Inf", "1704067200", None, [], {}]),
    st.integers(min_value=-(10**30), max_value=10**30),
)
_VALUES = st.one_of(
    st.sampled_from(["0", "2", "5", "9.99", "10", "50", "95", "100", "100.5", "-1", "NaN", "+Inf", "-Inf", "1e400",
                     "", "x", "1e-320"]),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-10, max_value=200),
    st.sampled_from([None, [], {}, True]),
)
_POINTS = st.one_of(
    st.lists(st.tuples(_TIMES, _VALUES).map(list), max_size=80),
    st.lists(st.lists(st.one_of(_TIMES, _VALUES), max_size=3), max_size=4),  # points of the wrong shape
)
_LABELS = st.fixed_dictionaries({"hpc_job": st.sampled_from(["1", "2", "3", "9"]),
                                 "Hostname": st.sampled_from(["n1", "n2"]),
                                 "gpu": st.sampled_from(["0", "1", "2", "3", "4"])})
FUZZ_JOBS = [
    JobWindow("1", P0, HOUR, 1, key="1"),
    JobWindow("2", P0 + timedelta(minutes=10), P0 + timedelta(minutes=50), 2, key="2"),
    JobWindow("3", P0 - timedelta(hours=1), P0 + timedelta(minutes=30), 4, key="3"),
]


def _in_order(points: list[Any]) -> list[Any]:
    def when(point: Any) -> float:
        t = point[0] if isinstance(point, list) and point else None
        return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else -1.0

    return sorted(points, key=when)


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(series=st.lists(st.tuples(_LABELS, _POINTS), max_size=10), in_order=st.booleans())
def test_prometheus_answer_fuzz_150_cases(series: list[tuple[dict[str, str], list[Any]]], in_order: bool) -> None:
    """Hostile utilisation answers (wrong types and shapes, NaN/Inf strings, times out of range, out of order,
    repeated, more series than GPUs): never an exception, and every job's figures keep the invariants."""
    if in_order:  # half the cases in time order, as Prometheus sends them
        series = [(labels, _in_order(points)) for labels, points in series]
    _SERVER.set(_matrix(series))
    result = fetch_telemetry(_cfg(_SERVER.url), FUZZ_JOBS, P0, HOUR)
    assert result.queries == 13
    for win in FUZZ_JOBS:
        tel = result.jobs.get(win.key)
        if tel is not None:
            assert_invariants(tel, win)


class _Shared:
    """One fake Prometheus for every fuzz case (its utilisation answer swapped per case)."""

    def __init__(self) -> None:
        self.handler = type("Prom", (_Prom,), {})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}"

    def set(self, body: bytes) -> None:
        self.handler.util_body = body


_SERVER = _Shared()


@settings(max_examples=200, derandomize=True, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 59), st.floats(0, 100)), max_size=60),
       gpus=st.integers(1, 4), extra=st.integers(0, 4), gap_factor=st.sampled_from([1.0, 3.0, 10.0]))
def test_coverage_invariants_property_200_cases(values: list[tuple[int, float]], gpus: int, extra: int,
                                                gap_factor: float) -> None:
    """Random points on up to gpus + extra series: held-idle <= covered <= allocated, busy <= covered, and busy
    and covered equal a hand count: each point holds until the next one within gap_factor x step, else a step."""
    series = [(_labels("1", gpu=g), [[T0 + m * 60, str(v)] for m, v in values if (m + g) % (g + 1) == 0])
              for g in range(gpus + extra)]
    series = [(labels, points) for labels, points in series if points]
    _SERVER.set(_matrix(series))
    win = _job("1", gpus=gpus)
    result = fetch_telemetry(_cfg(_SERVER.url, gap_factor=gap_factor), [win], P0, HOUR)
    tel = result.jobs.get("1")
    if not series:
        assert tel is None
        return
    assert tel is not None
    assert_invariants(tel, win)
    covered = busy = 0.0
    for _, points in series:
        by_time = {}
        for t, v in points:
            by_time[t] = max(by_time.get(t, -1.0), float(v))
        times = sorted(by_time)
        for k, t in enumerate(times):
            following = (times[k + 1] if k + 1 < len(times) else T0 + 3600) - t
            held = following if following <= gap_factor * 60 else min(60.0, following)
            if k == 0 and t - T0 <= gap_factor * 60:
                held += t - T0
            covered += held
            busy += held * by_time[t] / 100
    weight = min(1.0, gpus / len(series))
    assert tel.covered_gpu_s == pytest.approx(covered * weight)
    assert tel.busy_gpu_s == pytest.approx(busy * weight)


# ---- through the public command: said on stderr, never past the timeout ---------------------------------------

HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "AllocTRES|NNodes|NodeList")
JOB = ("1|1|train|alice|ml|gpu|normal|COMPLETED|0:0|2024-01-01T00:00:00|2024-01-01T00:00:00|2024-01-01T00:00:00|"
       "2024-01-01T01:00:00|01:00:00|billing=8,cpu=8,gres/gpu=1,mem=64G,node=1|1|n1")


def _report_build(tmp_path: Path, url: str, timeout: str = "1s") -> tuple[subprocess.CompletedProcess[str], float]:
    dump = tmp_path / "dump.txt"
    dump.write_text(f"{HEADER}\n{JOB}\n")
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = c\ntimezone = UTC\nreport_dir = {tmp_path / 'out'}\n\n"
                    f"[telemetry]\nprometheus_url = {url}\ntimeout = {timeout}\nstep = 60\nchunk_hours = 1\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", "from gpuclust.cli.main import main; main()", "--config", str(conf),
                           "report", "build", "--input", str(dump), "--since", "2024-01-01T00:00",
                           "--until", "2024-01-01T02:00", "--format", "json"],
                          capture_output=True, text=True, env=env, timeout=300)
    return done, time.monotonic() - began


def test_report_build_with_a_trickling_prometheus_ends_by_its_timeout(tmp_path: Path) -> None:
    body = _matrix([(_labels("1"), _points(range(60), 50.0))])
    with fake_prometheus(body, "trickle") as url:
        done, took = _report_build(tmp_path, url)
    assert done.returncode == 0, done.stderr
    assert "timed out after 1 s" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("summary: "), done.stderr
    assert took < 60, took  # (the trickle alone would take minutes; start-up on a loaded machine is slack)


def test_report_build_says_a_failing_prometheus_on_stderr(tmp_path: Path) -> None:
    with fake_prometheus(mode="status-500") as url:
        done, _ = _report_build(tmp_path, url, timeout="10s")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.rstrip().splitlines()
    assert any(line.startswith("warning: ") and "HTTP 500" in line and UTIL in line for line in lines), done.stderr
    assert lines[-1].startswith("summary: ") and "telemetry warning(s)" in lines[-1], done.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["gpu_use"]["prometheus"]["warnings"] >= 13
