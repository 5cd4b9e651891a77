"""gpuclust.accounting.figures.telemetry against a REAL Prometheus (/usr/bin/prometheus, loaded by `promtool tsdb
create-blocks-from openmetrics`), and against a local http.server for the failures Prometheus will not make.

Without the binaries the Prometheus tests skip, saying so; under CI=true they fail instead (the CI install step
installs the Debian `prometheus` package).

The data (step 60 s, one raw sample per minute; P0 = 2024-01-01T00:00Z, period [P0, P0+4h)):
    101  n1/0     0-60 min   util 2                         -> all idle
    102  n1/1,2   0-60 min   util 95, power 300, temp 70/75 -> busy
    103  n1/3     0-120 min  util 80 then 5 from 60 min; Xid 79 at 90 min; ECC DBE 5, 7, reset to 1
    104  n2/0     0-30 min   util 50 (execution A); n2/1 40-100 min util 20, then 3 from 70 min (execution B)
    105  -        no series                                 -> absent
    106  n2/2     0-60 min   util 30 with 1e9 at 10 min and NaN at 20 min -> dropped, counted
    n2/3 carries util without the job label (a GPU outside any job): never read
"""

from __future__ import annotations

import contextlib
import http.server
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuclust.accounting.figures.telemetry import JobWindow, TelemetryResult, fetch_telemetry
from gpuclust.config.site import TelemetryConfig, parse_config
from gpuclust.config.telemetry import TELEMETRY
from gpuclust.errors import ConfigError
from tests.unit.local_http import serve

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

P0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
T0 = int(P0.timestamp())
PERIOD_END = P0 + timedelta(hours=4)
UTIL = "DCGM_FI_DEV_GPU_UTIL"


def _minutes(m: float) -> datetime:
    return P0 + timedelta(minutes=m)


# ---- the Prometheus harness (also used by benchmarks/telemetry_prometheus.py) ------------------------------


def prometheus_missing() -> str | None:
    """Why the real-Prometheus tests cannot run here, or None."""
    for path in (PROMETHEUS, PROMTOOL):
        if not os.access(path, os.X_OK):
            return f"{path} not found: apt-get install -y prometheus (Debian 12 gives 2.42 with promtool)"
    return None


def require_prometheus() -> None:
    why = prometheus_missing()
    if why is None:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and the real Prometheus is missing: {why}")
    pytest.skip(why)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def label_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items())


class OpenMetrics:
    """OpenMetrics text for promtool: one family's samples together, each series in time order."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}

    def add(self, name: str, labels: dict[str, str], points: list[tuple[float, float]]) -> None:
        lines = self.families.setdefault(name, [])
        text = label_text(labels)
        lines.extend(f"{name}{{{text}}} {'NaN' if value != value else repr(value)} {ts:.3f}" for ts, value in points)

    def write(self, path: Path) -> None:
        with path.open("w") as fh:
            for name, lines in self.families.items():
                fh.write(f"# TYPE {name} gauge\n")  # (increase() does not read the type: gauges keep _total legal)
                fh.write("\n".join(lines))
                fh.write("\n")
            fh.write("# EOF\n")


@contextlib.contextmanager
def running_prometheus(data: OpenMetrics, workdir: Path) -> Iterator[str]:
    """Backfill `data` into a fresh TSDB, start Prometheus on 127.0.0.1:<free port>, yield its URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "data.om"
    data.write(source)
    storage = workdir / "tsdb"
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(source), str(storage)],
                   check=True, capture_output=True, text=True)
    source.unlink()
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\n")  # no scrape jobs: the backfilled blocks only
    port = free_port()
    log = (workdir / "prometheus.log").open("w")
    # retention 50y: the blocks are from 2024 and would be deleted at once under the default 15 d
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={storage}",
         f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=50y", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# ---- the data ------------------------------------------------------------------------------------------------


def _every_minute(first: float, last: float, value: float | dict[int, float]) -> list[tuple[float, float]]:
    """(ts, value) at each minute first..last inclusive; `value` may map minute -> value with a default."""
    out: list[tuple[float, float]] = []
    for m in range(int(first), int(last) + 1):
        v = value.get(m, value[-1]) if isinstance(value, dict) else value
        out.append((T0 + m * 60, v))
    return out


def _gpu(node: str, gpu: int, job: str | None) -> dict[str, str]:
    labels = {"gpu": str(gpu), "UUID": f"GPU-{node}-{gpu}", "Hostname": node, "modelName": "NVIDIA H100 80GB HBM3"}
    if job is not None:
        labels["hpc_job"] = job
    return labels


def lab_data() -> OpenMetrics:
    om = OpenMetrics()

    def gpu_series(node: str, gpu: int, job: str | None, first: int, last: int, util: float | dict[int, float],
                   power: float = 100.0, temp: float = 40.0, fb_used: float = 1000.0) -> None:
        labels = _gpu(node, gpu, job)
        om.add(UTIL, labels, _every_minute(first, last, util))
        om.add("DCGM_FI_DEV_FB_USED", labels, _every_minute(first, last, fb_used))
        om.add("DCGM_FI_DEV_FB_FREE", labels, _every_minute(first, last, 81559 - fb_used))
        om.add("DCGM_FI_DEV_POWER_USAGE", labels, _every_minute(first, last, power))
        om.add("DCGM_FI_DEV_GPU_TEMP", labels, _every_minute(first, last, temp))

    gpu_series("n1", 0, "101", 0, 59, 2.0)
    gpu_series("n1", 1, "102", 0, 59, 95.0, power=300.0, temp=70.0, fb_used=60000.0)
    gpu_series("n1", 2, "102", 0, 59, 95.0, power=300.0, temp=75.0, fb_used=70000.0)
    gpu_series("n1", 3, "103", 0, 119, {m: 80.0 for m in range(60)} | {-1: 5.0})
    gpu_series("n2", 0, "104", 0, 29, 50.0)
    gpu_series("n2", 1, "104", 40, 99, {m: 20.0 for m in range(40, 70)} | {-1: 3.0})
    gpu_series("n2", 2, "106", 0, 59, {10: 1e9, 20: math.nan, -1: 30.0})
    gpu_series("n2", 3, None, 0, 239, 0.0)  # no job: the selector {hpc_job!=""} never returns it
    # join = node (no job label at all): n3 and n4 have 2 GPUs each
    gpu_series("n3", 0, None, 0, 119, {m: 90.0 for m in range(60)} | {-1: 10.0})
    gpu_series("n3", 1, None, 0, 119, {m: 70.0 for m in range(60)} | {-1: 10.0})
    gpu_series("n4", 0, None, 0, 119, 50.0)
    gpu_series("n4", 1, None, 0, 119, 50.0)
    # Xid: the last Xid code, with err_code as dcgm-exporter writes it; 0 until 90 min, then 79
    xid = _gpu("n1", 3, "103")
    om.add("DCGM_FI_DEV_XID_ERRORS", xid | {"err_code": "0", "err_msg": "No Error"}, _every_minute(0, 89, 0.0))
    om.add("DCGM_FI_DEV_XID_ERRORS", xid | {"err_code": "79", "err_msg": "GPU has fallen off the bus"},
           _every_minute(90, 119, 79.0))
    om.add("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", xid, _every_minute(0, 119, {**{m: 5.0 for m in range(30)},
                                                                         **{m: 7.0 for m in range(30, 60)}, -1: 1.0}))
    # node_exporter counters, one sample a minute over the whole period [P0, P0+4h], linear (so increase() is exact)
    for node, device, reads, read_s, writes, write_s in (
        ("n1", "sda", 10, 0.1, 20, 0.1),
        ("n1", "sdb", 30, 0.5, 0, 0.0),
        ("n2", "nvme0n1", 0, 0.0, 60, 0.3),
    ):
        labels = {"instance": f"{node}:9100", "device": device}
        for name, per_min in (("node_disk_reads_completed_total", reads), ("node_disk_read_time_seconds_total", read_s),
                              ("node_disk_writes_completed_total", writes), ("node_disk_write_time_seconds_total", write_s)):
            om.add(name, labels, [(T0 + m * 60, 1000 + per_min * m) for m in range(241)])
    for device, rx_errs, rx_drop in (("eth0", 2, 0.5), ("ib0", 1, 0.0)):
        labels = {"instance": "n1:9100", "device": device}
        for name, per_min in (("node_network_receive_errs_total", rx_errs), ("node_network_transmit_errs_total", 0),
                              ("node_network_receive_drop_total", rx_drop), ("node_network_transmit_drop_total", 0)):
            om.add(name, labels, [(T0 + m * 60, 100 + per_min * m) for m in range(241)])
    return om


JOBS = [
    JobWindow("101", _minutes(0), _minutes(60), 1, key="101"),
    JobWindow("102", _minutes(0), _minutes(60), 2, key="102"),
    JobWindow("103", _minutes(0), _minutes(120), 1, key="103"),
    JobWindow("104", _minutes(0), _minutes(30), 1, key="104a"),
    JobWindow("104", _minutes(40), _minutes(100), 1, key="104b"),
    JobWindow("105", _minutes(0), _minutes(60), 1, key="105"),
    JobWindow("106", _minutes(0), _minutes(60), 1, key="106"),
    JobWindow("107", _minutes(300), _minutes(360), 1, key="107"),  # after the period
]


NODE_JOBS = [
    JobWindow("301", _minutes(0), _minutes(60), 2, key="301", nodes=("n3",)),  # whole n3, alone: known
    JobWindow("302", _minutes(0), _minutes(60), 2, key="302", nodes=("n4",)),  # 302 and 303 overlap on n4
    JobWindow("303", _minutes(30), _minutes(90), 2, key="303", nodes=("n4",)),
    JobWindow("304", _minutes(60), _minutes(120), 1, key="304", nodes=("n3",)),  # 1 of n3's 2 GPUs
    JobWindow("305", _minutes(0), _minutes(60), 2, key="305"),  # no NodeList
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_prometheus()
    with running_prometheus(lab_data(), tmp_path_factory.mktemp("prometheus")) as url:
        yield url


def _cfg(url: str, **kw: object) -> TelemetryConfig:
    args: dict[str, object] = {"step_s": 60.0, "chunk_hours": 1.0, "timeout_s": 20.0} | kw
    return TelemetryConfig(prometheus_url=url, **args)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lab_result(prometheus: str) -> TelemetryResult:
    return fetch_telemetry(_cfg(prometheus), JOBS, P0, PERIOD_END)


# ---- figures, computed by hand -----------------------------------------------------------------------------------


def test_idle_job(lab_result: TelemetryResult) -> None:
    job = lab_result.jobs["101"]
    assert job.gpus_seen == 1
    assert job.util_mean_pct == pytest.approx(2.0)
    assert job.util_max_pct == 2.0
    assert job.held_idle_gpu_s == pytest.approx(3600)  # 60 points x 60 s, one stretch >= 30 min
    assert job.covered_gpu_s == pytest.approx(3600)
    assert job.busy_gpu_s == pytest.approx(72)  # 3600 x 2%
    assert job.power_mean_w == pytest.approx(100) and job.energy_j == pytest.approx(360_000)
    assert job.fb_used_max_mib == 1000 and job.fb_total_mib == 81559 and job.temp_max_c == 40
    assert job.xid_errors is None and job.ecc_dbe is None  # no series of those for this job: unknown


def test_busy_two_gpu_job(lab_result: TelemetryResult) -> None:
    job = lab_result.jobs["102"]
    assert job.gpus_seen == 2
    assert job.util_mean_pct == pytest.approx(95.0)
    assert job.held_idle_gpu_s == 0
    assert job.covered_gpu_s == pytest.approx(7200)
    assert job.busy_gpu_s == pytest.approx(6840)
    assert job.power_mean_w == pytest.approx(300) and job.energy_j == pytest.approx(2 * 300 * 3600)
    assert job.temp_max_c == 75 and job.fb_used_max_mib == 70000 and job.fb_total_mib == 81559


def test_job_idle_for_its_second_half(lab_result: TelemetryResult) -> None:
    job = lab_result.jobs["103"]
    assert job.util_mean_pct == pytest.approx(42.5)  # (80 x 3600 + 5 x 3600) / 7200
    assert job.util_max_pct == 80
    assert job.held_idle_gpu_s == pytest.approx(3600)
    assert job.covered_gpu_s == pytest.approx(7200)
    assert job.busy_gpu_s == pytest.approx(3060)
    assert job.xid_errors == 1  # 0 -> 79 once (the stale err_code="0" series loses the tie to 79)
    assert job.ecc_dbe == pytest.approx(3)  # 5 -> 7 (+2), then a reset to 1 (+1)


def test_requeued_job_windows_take_their_own_points(lab_result: TelemetryResult) -> None:
    first, second = lab_result.jobs["104a"], lab_result.jobs["104b"]
    assert first.util_mean_pct == pytest.approx(50) and first.held_idle_gpu_s == 0
    assert first.covered_gpu_s == pytest.approx(1800) and first.busy_gpu_s == pytest.approx(900)
    # 20% for 30 min, then 3% for exactly 30 min: a stretch of exactly idle_min counts
    assert second.util_mean_pct == pytest.approx(11.5)
    assert second.held_idle_gpu_s == pytest.approx(1800)
    assert second.covered_gpu_s == pytest.approx(3600) and second.busy_gpu_s == pytest.approx(414)
    assert first.gpus_seen == second.gpus_seen == 1


def test_job_without_series_is_absent_and_named(lab_result: TelemetryResult) -> None:
    assert "105" not in lab_result.jobs and "107" not in lab_result.jobs
    assert any("1 of 7 job window(s) have no DCGM_FI_DEV_GPU_UTIL points" in w and "105" in w
               for w in lab_result.warnings), lab_result.warnings


def test_absurd_value_is_dropped_and_counted(lab_result: TelemetryResult) -> None:
    job = lab_result.jobs["106"]
    assert job.util_mean_pct == pytest.approx(30) and job.util_max_pct == 30  # the 9 and 19 min points hold 120 s
    assert any(f"{UTIL}: 2 point(s) dropped" in w and "job 106" in w for w in lab_result.warnings), lab_result.warnings


def test_node_figures(lab_result: TelemetryResult) -> None:
    nodes = {n["node"]: n for n in lab_result.nodes}
    assert set(nodes) == {"n1", "n2"}
    n1, n2 = nodes["n1"], nodes["n2"]
    assert n1["disk_read_latency_ms"] == pytest.approx(15)  # (0.1 + 0.5) s / (10 + 30) reads a minute
    assert n1["disk_write_latency_ms"] == pytest.approx(5)  # 0.1 s / 20 writes
    assert n1["net_receive_errs"] == pytest.approx(720)  # (2 + 1) a minute x 240
    assert n1["net_receive_drop"] == pytest.approx(120)
    assert n1["net_transmit_errs"] == 0 and n1["net_transmit_drop"] == 0
    assert n2["disk_read_latency_ms"] is None  # no reads: 0/0
    assert n2["disk_write_latency_ms"] == pytest.approx(5)  # 0.3 s / 60 writes
    assert n2["net_receive_errs"] is None  # no network series for n2


def test_query_count(lab_result: TelemetryResult) -> None:
    # 4 h in windows of 1 h: 4 windows x 7 DCGM queries + 6 node queries
    assert lab_result.queries == 34
    assert lab_result.source.startswith("http://127.0.0.1:")


def test_query_count_does_not_grow_with_jobs(prometheus: str) -> None:
    cfg = _cfg(prometheus)
    many = [JobWindow(str(1000 + i), _minutes(i % 200), _minutes(i % 200 + 30), 1, key=i) for i in range(300)]
    assert fetch_telemetry(cfg, JOBS[:3], P0, PERIOD_END).queries == fetch_telemetry(cfg, many, P0, PERIOD_END).queries


def test_step_of_one_second_stays_under_the_point_limit(prometheus: str) -> None:
    # the lab's step: 14,400 points per series in 4 h, split so no query exceeds Prometheus's 11,000
    result = fetch_telemetry(_cfg(prometheus, step_s=1.0, chunk_hours=6.0), JOBS, P0, PERIOD_END)
    assert result.queries == 2 * 7 + 6
    assert not [w for w in result.warnings if "query_range" in w and "empty" not in w], result.warnings
    assert result.jobs["103"].held_idle_gpu_s == pytest.approx(3600)
    assert result.jobs["104b"].held_idle_gpu_s == pytest.approx(1800)
    assert result.jobs["106"].util_mean_pct == pytest.approx(30)
    assert any(f"{UTIL}: 120 point(s) dropped" in w for w in result.warnings)  # the raw 1e9 and NaN held a minute


def test_missing_metric_is_an_empty_result_warning(prometheus: str) -> None:
    result = fetch_telemetry(_cfg(prometheus, metric_power="NO_SUCH_METRIC"), JOBS, P0, PERIOD_END)
    assert result.jobs["102"].power_mean_w is None and result.jobs["102"].energy_j is None
    assert result.jobs["102"].util_mean_pct == pytest.approx(95)
    assert any("NO_SUCH_METRIC" in w and "empty result" in w and prometheus in w for w in result.warnings)


def test_job_clipped_to_the_period(prometheus: str) -> None:
    # the period starts at 30 min: job 103 keeps 30-120 min, 30 min busy then 60 min idle
    result = fetch_telemetry(_cfg(prometheus), [JOBS[2]], _minutes(30), PERIOD_END)
    job = result.jobs["103"]
    assert job.covered_gpu_s == pytest.approx(5400)
    assert job.util_mean_pct == pytest.approx((80 * 1800 + 5 * 3600) / 5400)
    assert job.held_idle_gpu_s == pytest.approx(3600)


# ---- failures: never raised, always named ---------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "500"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        mode = type(self).mode
        if mode == "hang":
            time.sleep(3)
            return
        status, body = {
            "500": (500, b"internal error"),
            "badjson": (200, b'{"status": "success", "data": {"resultType": "matr'),
            "error": (422, b'{"status":"error","errorType":"execution","error":"too many samples"}'),
            "empty": (200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'),
        }[mode]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _fake_server(mode: str) -> Iterator[str]:
    with serve(type("Handler", (_Handler,), {"mode": mode})) as url:
        yield url


def _fetch(url: str, timeout: float = 5.0) -> TelemetryResult:
    return fetch_telemetry(_cfg(url, timeout_s=timeout), JOBS, P0, PERIOD_END)


def test_unreachable_port_is_one_warning_and_stops_asking() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = _fetch(url)
    assert result.jobs == {} and result.nodes == []
    assert result.queries == 1  # the rest are skipped, not each refused in turn
    assert any(url in w and UTIL in w and "unreachable" in w for w in result.warnings), result.warnings
    assert any("33 further queries skipped" in w for w in result.warnings), result.warnings


@pytest.mark.parametrize(("mode", "words"), [
    ("500", "HTTP 500"),
    ("badjson", "bad JSON"),
    ("error", "HTTP 422 Unprocessable Entity: execution: too many samples"),
])
def test_server_errors_are_warnings(mode: str, words: str) -> None:
    with _fake_server(mode) as url:
        result = _fetch(url)
    assert result.jobs == {} and result.nodes == []
    assert result.queries == 34  # each query is tried: the next one may succeed
    assert any(url in w and UTIL in w and words in w for w in result.warnings), result.warnings
    assert any("node_disk_read_time_seconds_total" in w and words in w for w in result.warnings)


def test_hanging_server_times_out() -> None:
    with _fake_server("hang") as url:
        began = time.monotonic()
        result = _fetch(url, timeout=0.5)
        took = time.monotonic() - began
    assert took < 3
    assert result.jobs == {} and result.queries == 1
    assert any(url in w and UTIL in w and "timed out" in w for w in result.warnings), result.warnings


def test_empty_results_are_named() -> None:
    with _fake_server("empty") as url:
        result = _fetch(url)
    assert result.jobs == {}
    assert any(f'{UTIL}{{hpc_job!=""}}: empty result' in w for w in result.warnings), result.warnings
    assert any("7 of 7 job window(s)" in w for w in result.warnings)


def test_off_and_invalid_url_never_query() -> None:
    off = fetch_telemetry(TelemetryConfig(), JOBS, P0, PERIOD_END)
    assert off.queries == 0 and off.jobs == {} and "prometheus_url is not set" in off.warnings[0]
    bad = fetch_telemetry(TelemetryConfig(prometheus_url="ftp://x"), JOBS, P0, PERIOD_END)
    assert bad.queries == 0 and "http:// or https://" in bad.warnings[0]
    with pytest.raises(ValueError, match="tz-aware"):
        fetch_telemetry(TelemetryConfig(), [JobWindow("1", datetime(2024, 1, 1), PERIOD_END, 1)], P0, PERIOD_END)


# ---- the [telemetry] config section ------------------------------------------------------------------------------

SITE = "[site]\ncluster_name = c\n\n"


def test_config_section_parses_every_key() -> None:
    cfg = parse_config(SITE + """[telemetry]
prometheus_url = https://prom.example.org:9443/prometheus/
timeout = 2m
step = 1
chunk_hours = 0.5
job_label = slurm_job
node_label = hostname
gpu_label = gpu_index
node_exporter_node_label = nodename
metric.util = DCGM_FI_PROF_GR_ENGINE_ACTIVE
metric.fb_used = U
metric.fb_free = F
metric.power = P
metric.temp = T
metric.xid = X
metric.ecc_dbe = E
idle_threshold = 5%
idle_min = 10m
""", "t.conf").telemetry
    assert cfg == TelemetryConfig(
        prometheus_url="https://prom.example.org:9443/prometheus", timeout_s=120.0, step_s=1.0, chunk_hours=0.5,
        job_label="slurm_job", node_label="hostname", gpu_label="gpu_index", node_exporter_node_label="nodename",
        metric_util="DCGM_FI_PROF_GR_ENGINE_ACTIVE", metric_fb_used="U", metric_fb_free="F", metric_power="P",
        metric_temp="T", metric_xid="X", metric_ecc_dbe="E", idle_threshold_pct=5.0, idle_min_s=600.0,
    )


def test_config_absent_section_gives_the_defaults() -> None:
    cfg = parse_config(SITE, "t.conf").telemetry
    assert cfg == TelemetryConfig() and cfg.prometheus_url is None and not cfg.enabled
    assert cfg.idle_min_s == 1800.0 and TELEMETRY.default("idle_threshold") == cfg.idle_threshold_pct == 10.0


@pytest.mark.parametrize(("line", "message"), [
    ("prometheus_url = prom:9090", "http:// or https://"),
    ("prometheus_url = http://prom:99999", "bad port"),
    ("prometheus_url = http://user:pw@prom:9090", "no user:password@"),
    ("prometheus_url = http://prom:9090/?x=1", "no ?query"),
    ("step = 0", "must be a duration > 0"),
    ("timeout = -1", "must be a duration > 0"),
    ("chunk_hours = 0", "must be > 0"),
    ("idle_threshold = 150", "between 0 and 100"),
    ("idle_min = soon", "expected a duration"),
    ("job_label = hpc-job", "not a Prometheus label name"),
    ("metric.util = DCGM FI", "not a Prometheus metric name"),
    ("metric.utl = X", "did you mean 'metric.util'"),
])
def test_config_errors_name_file_line_and_key(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(SITE + f"[telemetry]\n{line}\n", "t.conf")
    text = str(info.value)
    assert "t.conf:5" in text and message in text, text


def test_join_by_node_attributes_only_whole_node_jobs_alone(prometheus: str, lab_result: TelemetryResult) -> None:
    """[telemetry] join = node: 301 held n3 (both GPUs) alone -> n3's points, by hand: GPU 0 at 90 %, GPU 1 at
    70 % for the hour, mean 80 %, covered 2 x 3600 GPU-s. 302/303 shared n4 in time, 304 held 1 of n3's 2 GPUs,
    305 has no NodeList: all unknown (absent), each counted in a warning; nothing is guessed."""
    result = fetch_telemetry(_cfg(prometheus, join="node"), NODE_JOBS, P0, PERIOD_END)
    assert set(result.jobs) == {"301"}, result.warnings
    job = result.jobs["301"]
    assert job.gpus_seen == 2 and job.util_mean_pct == pytest.approx(80.0) and job.util_max_pct == 90.0
    assert job.covered_gpu_s == pytest.approx(7200) and job.busy_gpu_s == pytest.approx(5760)
    assert any("share a node" in w and w.count("3 job window") for w in result.warnings), result.warnings
    assert any("part of a node" in w and "1 job window" in w for w in result.warnings), result.warnings
    assert result.queries == lab_result.queries  # the same batched queries as the job-label join


# ---- per-GPU figures (JobTelemetry.gpus), by hand ------------------------------------------------------------------


def test_per_gpu_figures_of_a_job_idle_for_its_second_half(lab_result: TelemetryResult) -> None:
    (gpu,) = lab_result.jobs["103"].gpus
    assert (gpu.node, gpu.gpu) == ("n1", "3")
    assert gpu.covered_s == pytest.approx(7200) and gpu.busy_s == pytest.approx(3060)
    assert gpu.util_mean_pct == pytest.approx(42.5) and gpu.util_max_pct == 80
    assert gpu.idle_s == pytest.approx(3600) and gpu.under_threshold_s == pytest.approx(3600)
    assert gpu.longest_idle_s == pytest.approx(3600) and gpu.longest_idle_start == T0 + 3600
    assert gpu.trailing_idle_s == pytest.approx(3600)  # still idle at the window's end
    assert gpu.xid_errors == 1 and gpu.ecc_dbe == pytest.approx(3)
    assert len(gpu.util_profile) == 120  # 60 s slices of the 2 h window
    assert gpu.util_profile[:60] == pytest.approx([80.0] * 60) and gpu.util_profile[60:] == pytest.approx([5.0] * 60)


def test_per_gpu_figures_add_up_to_the_job_figures(lab_result: TelemetryResult) -> None:
    job = lab_result.jobs["102"]
    assert [(g.node, g.gpu) for g in job.gpus] == [("n1", "1"), ("n1", "2")]
    assert [g.temp_max_c for g in job.gpus] == [70, 75]
    assert all(g.power_mean_w == pytest.approx(300) and g.power_max_w == 300 for g in job.gpus)
    assert sum(g.energy_j or 0 for g in job.gpus) == pytest.approx(job.energy_j)
    assert sum(g.busy_s for g in job.gpus) == pytest.approx(job.busy_gpu_s)
    assert sum(g.covered_s for g in job.gpus) == pytest.approx(job.covered_gpu_s)
    assert all(g.trailing_idle_s == 0 and g.longest_idle_start is None for g in job.gpus)


def test_per_gpu_idle_stretch_of_a_requeued_execution(lab_result: TelemetryResult) -> None:
    (gpu,) = lab_result.jobs["104b"].gpus
    assert (gpu.node, gpu.gpu) == ("n2", "1")
    assert gpu.longest_idle_s == pytest.approx(1800) and gpu.longest_idle_start == T0 + 70 * 60
    assert gpu.idle_s == pytest.approx(1800) and gpu.trailing_idle_s == pytest.approx(1800)


def test_a_series_that_stops_early_is_never_trailing_idle(prometheus: str) -> None:
    # 103's last raw sample is at 119 min; Prometheus's 5 min lookback gives grid points up to 124 min; the window
    # runs to 150 min: after the last point's one step there is no data, so the GPU is not "still idle" at the end
    # (the guard must never act on a stale series), and the late slices have no value.
    result = fetch_telemetry(_cfg(prometheus), [JobWindow("103", _minutes(0), _minutes(150), 1, key="late")],
                             P0, PERIOD_END)
    (gpu,) = result.jobs["late"].gpus
    assert gpu.covered_s == pytest.approx(7500)  # points 0..124 min, each holding 60 s (the last: one step)
    assert gpu.trailing_idle_s == 0 and gpu.longest_idle_s == pytest.approx(3900)  # 60..124 min
    width = 150 * 60 / 120
    first_empty = math.ceil(7500 / width)
    assert all(v is None for v in gpu.util_profile[first_empty:])
    assert all(v is not None for v in gpu.util_profile[:first_empty])
