"""MIG instances in gpuclust.accounting.figures.telemetry, against a REAL Prometheus (the harness of
test_telemetry_prometheus), fed with dcgm-exporter's MIG series as real exporters wrote them
(tests/data/telemetry/mig, README names each source) with an hpc_job label and times added.

The data (step 60 s, P0 = 2024-01-01T00:00Z, period [P0, P0+2h)), an A30 cut into four 1g.6gb instances
(GPU_I_ID 3-6 on gpu 0) as issue #317 recorded it; DCGM_FI_DEV_GPU_UTIL is 0 on every instance, as real:
    201  1g.6gb   instance 3 alone carries its label (a per-instance mapping)   engine active 0.9 -> busy 90 %
    202  1g.6gb   instance 4 alone                                              engine active 0.0 -> held idle
    203  1g.6gb   instances 5 and 6 both carry it (dcgm-exporter's per-card mapping) -> which one is unknown
    204  3g.24gb  instances 5 and 6 carry it too, but no instance has its profile -> none is its
    205  h100     a whole GPU on node w1, DCGM_FI_DEV_GPU_UTIL 50 -> as before
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuclust.accounting.figures.telemetry import JobWindow, TelemetryResult, fetch_telemetry
from gpuclust.config.site import TelemetryConfig
from gpuclust.config.telemetry import parse_mig_util_metric, parse_mig_util_scale
from tests.unit.test_telemetry_prometheus import OpenMetrics, require_prometheus, running_prometheus

DATA = Path(__file__).resolve().parents[1] / "data" / "telemetry" / "mig"
P0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
T0 = int(P0.timestamp())
END = P0 + timedelta(hours=2)
_LINE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of each sample line of Prometheus's text format (no timestamps, as exporters
    write it)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, line
        labels = dict(_LABEL.findall(m.group("labels")))
        assert ",".join(f'{k}="{v}"' for k, v in labels.items()) == m.group("labels")  # nothing left unread
        out.append((m.group("name"), labels, float(m.group("value"))))
    return out


RECORDED = parse_exposition((DATA / "dcgm-exporter-issue-317-a30-mig.prom").read_text())
FB_FREE = parse_exposition((DATA / "dcgm-exporter-pr-736-a30-mig-fb-free.prom").read_text())


def test_recordings_are_mig_instances_as_dcgm_exporter_writes_them() -> None:
    assert [labels["GPU_I_ID"] for _, labels, _ in RECORDED] == ["3", "4", "5", "6"]
    for name, labels, value in RECORDED:
        assert name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and 0 <= value <= 1  # a ratio, not percent
        assert list(labels) == ["gpu", "UUID", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname"]
        assert labels["GPU_I_PROFILE"] == "1g.6gb" and labels["gpu"] == "0"
    (name, labels, value), = FB_FREE
    assert (name, labels["GPU_I_ID"], labels["GPU_I_PROFILE"], value) == ("DCGM_FI_DEV_FB_FREE", "3", "1g.6gb", 2207)


def _minutes(first: int, last: int, value: float) -> list[tuple[float, float]]:
    return [(T0 + m * 60, value) for m in range(first, last + 1)]


def _data() -> OpenMetrics:
    om = OpenMetrics()
    by_instance = {labels["GPU_I_ID"]: labels for _, labels, _ in RECORDED}
    jobs_on = {"3": ["201"], "4": ["202"], "5": ["203", "204"], "6": ["203", "204"]}
    active = {"3": 0.9, "4": 0.0, "5": 0.5, "6": 0.2}
    for instance, labels in by_instance.items():
        for job in jobs_on[instance]:
            series = {**labels, "hpc_job": job}
            om.add("DCGM_FI_DEV_GPU_UTIL", series, _minutes(0, 59, 0.0))  # what dcgm-exporter gives a MIG instance
            om.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", series, _minutes(0, 59, active[instance]))
            om.add("DCGM_FI_DEV_FB_USED", series, _minutes(0, 59, 1000.0))
            om.add("DCGM_FI_DEV_FB_FREE", series, _minutes(0, 59, 4000.0))
    whole = {"gpu": "0", "UUID": "GPU-w1-0", "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3",
             "Hostname": "w1", "hpc_job": "205"}
    om.add("DCGM_FI_DEV_GPU_UTIL", whole, _minutes(0, 59, 50.0))
    om.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", whole, _minutes(0, 59, 0.5))
    (_, fb_labels, free), = FB_FREE
    om.add("DCGM_FI_DEV_GPU_UTIL", {**fb_labels, "hpc_job": "206"}, _minutes(0, 59, 0.0))
    om.add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", {**fb_labels, "hpc_job": "206"}, _minutes(0, 59, 0.4))
    om.add("DCGM_FI_DEV_FB_FREE", {**fb_labels, "hpc_job": "206"}, _minutes(0, 59, free))
    om.add("DCGM_FI_DEV_FB_USED", {**fb_labels, "hpc_job": "206"}, _minutes(0, 59, 3000.0))
    return om


def _window(job: str, gpu_type: str | None) -> JobWindow:
    return JobWindow(job, P0, P0 + timedelta(hours=1), 1, key=job, gpu_type=gpu_type)


JOBS = [_window("201", "1g.6gb"), _window("202", "1g.6gb"), _window("203", "1g.6gb"), _window("204", "3g.24gb"),
        _window("205", "h100")]


def _cfg(url: str, **kw: object) -> TelemetryConfig:
    args: dict[str, object] = {"step_s": 60.0, "chunk_hours": 1.0, "timeout_s": 20.0, "idle_min_s": 600.0} | kw
    return TelemetryConfig(prometheus_url=url, **args)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_prometheus()
    with running_prometheus(_data(), tmp_path_factory.mktemp("prometheus-mig")) as url:
        yield url


@pytest.fixture(scope="module")
def result(prometheus: str) -> TelemetryResult:
    return fetch_telemetry(_cfg(prometheus), JOBS, P0, END)


def test_busy_mig_instance_reads_engine_activity_not_gpu_util(result: TelemetryResult) -> None:
    job = result.jobs["201"]
    assert job.util_mean_pct == pytest.approx(90.0)
    assert job.busy_gpu_s == pytest.approx(0.9 * 3600)
    assert job.held_idle_gpu_s == 0.0  # DCGM_FI_DEV_GPU_UTIL read 0 all along: never held idle
    (gpu,) = job.gpus
    assert (gpu.node, gpu.gpu, gpu.instance, gpu.profile) == ("yg-data-k8s-gpu-a30-node-test-test0003.mt", "0", "3",
                                                              "1g.6gb")
    assert gpu.fb_used_max_mib == 1000.0 and gpu.fb_total_mib == 5000.0  # the instance's own memory


def test_idle_mig_instance_is_held_idle(result: TelemetryResult) -> None:
    job = result.jobs["202"]
    assert job.util_mean_pct == 0.0
    assert job.held_idle_gpu_s == pytest.approx(3600.0)
    assert [g.instance for g in job.gpus] == ["4"]


def test_slice_that_labels_cannot_tell_is_unknown_and_named(result: TelemetryResult) -> None:
    assert "203" not in result.jobs and "204" not in result.jobs  # unknown: never 0, never held idle
    (warning,) = [w for w in result.warnings if "MIG slices" in w]
    assert "1 job window(s)" in warning and "203 (2 1g.6gb instances, 1 held)" in warning
    assert "204" not in warning  # (no instance of its profile carries its label: none was its, nothing to tell)
    assert any("203, 204" in w and "have no DCGM_FI_DEV_GPU_UTIL points" in w for w in result.warnings)


def test_whole_gpu_keeps_gpu_util(result: TelemetryResult) -> None:
    job = result.jobs["205"]
    assert job.util_mean_pct == pytest.approx(50.0)  # not the 0.5 x 100 of its engine activity
    assert [(g.instance, g.profile) for g in job.gpus] == [("", "")]


def test_one_more_query_only_in_windows_with_mig_instances(prometheus: str, result: TelemetryResult) -> None:
    # 2 windows of 1 h: 7 DCGM queries each, + 1 engine-activity query in each (the second window's first 5
    # points still see the MIG instances: Prometheus's lookback), + 6 node queries
    assert result.queries == 7 * 2 + 2 + 6
    later = P0 + timedelta(minutes=70)
    late = fetch_telemetry(_cfg(prometheus), [JobWindow("205", later, END, 1, key="205", gpu_type="h100")], later, END)
    assert late.queries == 7 + 6  # no MIG instance answers there: nothing more asked


def test_per_card_mapping_of_a_job_holding_the_unique_profile(prometheus: str) -> None:
    # 204 said 3g.24gb; said 1g.6gb x 2 it holds both instances carrying its label
    got = fetch_telemetry(_cfg(prometheus), [JobWindow("204", P0, P0 + timedelta(hours=1), 2, key="x",
                                                       gpu_type="1g.6gb")], P0, END)
    job = got.jobs["x"]
    assert sorted(g.instance for g in job.gpus) == ["5", "6"]
    assert job.util_mean_pct == pytest.approx(35.0)


def test_mig_util_scale_and_metric_are_the_sites(prometheus: str) -> None:
    got = fetch_telemetry(_cfg(prometheus, mig_util_scale=50.0), JOBS[:1], P0, END)
    assert got.jobs["201"].util_mean_pct == pytest.approx(45.0)
    gone = fetch_telemetry(_cfg(prometheus, mig_util_metric="DCGM_FI_PROF_SM_ACTIVE"), JOBS[:1], P0, END)
    assert "201" not in gone.jobs  # no such series: unknown, not the 0 of DCGM_FI_DEV_GPU_UTIL
    assert any("DCGM_FI_PROF_SM_ACTIVE" in w and "empty result" in w for w in gone.warnings)


def test_recorded_fb_free_of_a_mig_instance_with_lower_case_hostname(prometheus: str) -> None:
    got = fetch_telemetry(_cfg(prometheus, node_label="hostname"), [_window("206", "1g.6gb")], P0, END)
    job = got.jobs["206"]
    assert job.util_mean_pct == pytest.approx(40.0)
    assert job.fb_total_mib == 2207 + 3000
    assert [(g.node, g.instance) for g in job.gpus] == [("dcgm-exporter-wwwjh", "3")]


@pytest.mark.parametrize(("text", "words"), [
    ("DCGM_FI_DEV_GPU_UTIL", "reads 0 on every MIG instance"),
    ("not a metric", "is not a Prometheus metric name"),
])
def test_mig_util_metric_refusals(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_mig_util_metric(text)


@pytest.mark.parametrize("text", ["0", "-1", "inf", "1e9", "x"])
def test_mig_util_scale_refusals(text: str) -> None:
    with pytest.raises(ValueError):
        parse_mig_util_scale(text)


def test_mig_util_defaults() -> None:
    cfg = TelemetryConfig()
    assert (cfg.mig_util_metric, cfg.mig_util_scale, cfg.gpu_instance_label, cfg.gpu_profile_label) == (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 100.0, "GPU_I_ID", "GPU_I_PROFILE")
    assert parse_mig_util_scale("100") == 100.0 and parse_mig_util_metric("DCGM_FI_PROF_SM_ACTIVE")
