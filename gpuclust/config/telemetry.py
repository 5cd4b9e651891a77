"""Config section [telemetry]: where the Prometheus that holds dcgm-exporter's and node_exporter's series is,
how to query it, and the held-idle rule (shared/gpu-hours-glossary.md).

Kept apart from site.py like economics.py: site.py lists TELEMETRY in SECTIONS and calls `telemetry_config`
once; `TelemetryConfig` is re-exported there. The reader is gpuclust.accounting.figures.telemetry.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values

# Prometheus label names ([a-zA-Z_][a-zA-Z0-9_]*) and metric names (also ':'): they go into PromQL verbatim.
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METRIC_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def parse_prometheus_url(text: str) -> str:
    """http(s)://host[:port][/path], without a trailing '/' (the API paths are appended to it)."""
    raw = text.strip()
    if not raw or any(c.isspace() or ord(c) < 32 for c in raw):
        raise ValueError(f"expected a URL like http://prometheus:9090, got {text!r}")
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"expected an http:// or https:// URL, got {text!r}")
    try:
        port = parts.port  # (raises on a port that is not a number or out of range)
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if not parts.hostname or "@" in parts.netloc:
        raise ValueError(f"expected http(s)://host[:port][/path] (no user:password@), got {text!r}")
    if parts.query or parts.fragment or raw.endswith(("?", "#")):
        raise ValueError(f"the URL takes no ?query or #fragment, got {text!r}")
    if port == 0:
        raise ValueError(f"bad port in {text!r}")
    return raw.rstrip("/")


def parse_label_name(text: str) -> str:
    if not _LABEL_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not a Prometheus label name (letters, digits, '_')")
    return text


def parse_metric_name(text: str) -> str:
    if not _METRIC_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not a Prometheus metric name (letters, digits, '_', ':')")
    return text


# DCGM_FI_DEV_GPU_UTIL reads 0 on every MIG instance (dcgm-exporter issue #216): never a MIG utilisation.
MIG_UNTRUSTED_METRIC = "DCGM_FI_DEV_GPU_UTIL"
MAX_MIG_UTIL_SCALE = 1_000_000.0


def parse_mig_util_metric(text: str) -> str:
    """The metric read as a MIG instance's utilisation: a ratio such as DCGM_FI_PROF_GR_ENGINE_ACTIVE."""
    name = parse_metric_name(text.strip())
    if name == MIG_UNTRUSTED_METRIC:
        raise ValueError(f"{name} reads 0 on every MIG instance (dcgm-exporter issue #216); name a "
                         "DCGM_FI_PROF_* ratio such as DCGM_FI_PROF_GR_ENGINE_ACTIVE or DCGM_FI_PROF_SM_ACTIVE")
    return name


def parse_mig_util_scale(text: str) -> float:
    """The factor that turns mig_util_metric's value into percent (100 for a 0-1 ratio)."""
    value = v.parse_positive_float(text)
    if not math.isfinite(value) or value > MAX_MIG_UTIL_SCALE:
        raise ValueError(f"must be a positive number up to {MAX_MIG_UTIL_SCALE:g} that turns mig_util_metric's "
                         f"value into percent (100 for a 0-1 ratio such as DCGM_FI_PROF_GR_ENGINE_ACTIVE), got "
                         f"{text!r}")
    return value


def parse_percent(text: str) -> float:
    """A utilisation in percent, 0-100: `10` or `10%`."""
    raw = text.strip().removesuffix("%")
    value = v.parse_nonneg_float(raw)
    if value > 100:
        raise ValueError(f"must be a percentage between 0 and 100, got {text!r}")
    return value


# Bounds that keep the number of queries of a report finite and sane (query_count below): one point a second per
# series is finer than any exporter scrapes, and a window under 6 minutes would ask more than it receives.
MIN_STEP_S = 1.0
MIN_CHUNK_HOURS = 0.1
MAX_STEPS_PER_QUERY = 10_000  # Prometheus refuses a query_range of more than 11,000 points per series
DCGM_QUERIES_PER_WINDOW = 7  # util, fb_used, fb_used + fb_free, power, temp, xid, ecc_dbe
MIG_QUERIES_PER_WINDOW = 1  # mig_util_metric, only in a window whose utilisation answer has MIG instances
NODE_QUERIES = 6  # the node_exporter figures: instant queries, once per report
MAX_GAP_FACTOR = 1000.0
MAX_RESPONSE_MIB = 4096


def parse_step(text: str) -> float:
    value = v.parse_positive_seconds(text)
    if value < MIN_STEP_S:
        raise ValueError(f"must be at least {MIN_STEP_S:g} s (one point a second per series is already finer than "
                         f"exporters scrape), got {text!r}")
    return value


def parse_chunk_hours(text: str) -> float:
    value = v.parse_positive_float(text)
    if value < MIN_CHUNK_HOURS:
        raise ValueError(f"must be at least {MIN_CHUNK_HOURS:g} (6 minutes; smaller windows multiply the queries), "
                         f"got {text!r}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number of hours, got {text!r}")
    return value


def parse_gap_factor(text: str) -> float:
    value = v.parse_positive_float(text)
    if not 1.0 <= value <= MAX_GAP_FACTOR:
        raise ValueError(f"must be between 1 and {MAX_GAP_FACTOR:g} (steps), got {text!r}")
    return value


def parse_response_mib(text: str) -> int:
    value = v.parse_positive_int(text)
    if value > MAX_RESPONSE_MIB:
        raise ValueError(f"must be at most {MAX_RESPONSE_MIB} (MiB), got {text!r}")
    return value


def query_windows(seconds: float, step_s: float, chunk_hours: float) -> int:
    """How many query_range windows cover `seconds` (the grid start + i*step, chunk_hours a window, at most
    MAX_STEPS_PER_QUERY steps each): gpuclust.accounting.figures.telemetry._grid_windows counts the same."""
    if seconds <= 0:
        return 0
    points = math.ceil(seconds / step_s)
    per_window = max(1, min(int(chunk_hours * 3600 / step_s), MAX_STEPS_PER_QUERY))
    return math.ceil(points / per_window)


def query_count(seconds: float, step_s: float, chunk_hours: float) -> int:
    """HTTP requests a report over `seconds` makes at most (whatever the number of jobs)."""
    return DCGM_QUERIES_PER_WINDOW * query_windows(seconds, step_s, chunk_hours) + NODE_QUERIES


# key -> TelemetryConfig field, where they differ (the unit suffix goes on the field, not the key)
FIELD_OF_KEY = {
    "timeout": "timeout_s",
    "step": "step_s",
    "idle_threshold": "idle_threshold_pct",
    "idle_min": "idle_min_s",
    **{f"metric.{m}": f"metric_{m}" for m in ("util", "fb_used", "fb_free", "power", "temp", "xid", "ecc_dbe")},
}

TELEMETRY = SectionSpec(
    "telemetry",
    "GPU and node telemetry from Prometheus (dcgm-exporter with its HPC job mapping, node_exporter).",
    (
        Key("prometheus_url", parse_prometheus_url, "Base URL of the Prometheus HTTP API, http(s)://host[:port][/path]; "
            "absent: the Prometheus source is off."),
        Key("timeout", v.parse_positive_seconds, "Limit of each HTTP request as a whole, from connect through the "
            "last byte and the JSON parse (seconds or 30s, 2m).", default=30.0),
        Key("step", parse_step, "query_range resolution: one point per series every STEP seconds (at least 1).",
            default=30.0),
        Key("chunk_hours", parse_chunk_hours, "The period is queried in windows of this many hours (bounds each "
            "response; a window never exceeds 10,000 steps; at least 0.1).", default=6.0),
        Key("gap_factor", parse_gap_factor, "coverage: a series' points more than GAP_FACTOR x step apart (or a "
            "series that starts late or stops early by that much) leave no data in between; 1-1000.", default=3.0),
        Key("max_response_mib", parse_response_mib, "Largest answer read from Prometheus, MiB (a larger one is a "
            "failed query, named).", default=256),
        Key("job_label", parse_label_name, "dcgm-exporter's HPC job mapping label (value: the Slurm job id).",
            default="hpc_job"),
        Key("node_label", parse_label_name, "Label with the node name on the DCGM series.", default="Hostname"),
        Key("gpu_label", parse_label_name, "Label with the GPU index on the DCGM series.", default="gpu"),
        Key("node_exporter_node_label", parse_label_name, "Label with the Slurm node name on node_exporter series "
            "(a :port suffix is stripped).", default="instance"),
        Key("metric.util", parse_metric_name, "GPU utilisation, percent.", default="DCGM_FI_DEV_GPU_UTIL"),
        Key("metric.fb_used", parse_metric_name, "GPU memory used, MiB.", default="DCGM_FI_DEV_FB_USED"),
        Key("metric.fb_free", parse_metric_name, "GPU memory free, MiB (used + free = the GPU's memory).",
            default="DCGM_FI_DEV_FB_FREE"),
        Key("metric.power", parse_metric_name, "GPU power draw, W.", default="DCGM_FI_DEV_POWER_USAGE"),
        Key("metric.temp", parse_metric_name, "GPU temperature, C.", default="DCGM_FI_DEV_GPU_TEMP"),
        Key("metric.xid", parse_metric_name, "The GPU's last Xid error code.", default="DCGM_FI_DEV_XID_ERRORS"),
        Key("metric.ecc_dbe", parse_metric_name, "Double-bit volatile ECC errors (a counter).",
            default="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        Key("mig_util_metric", parse_mig_util_metric, "Utilisation of a MIG instance (a series with the "
            "gpu_instance_label), read instead of metric.util, which dcgm-exporter gives as 0 there; a DCGM_FI_PROF_* "
            "ratio.", default="DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        Key("mig_util_scale", parse_mig_util_scale, "mig_util_metric x this = percent (100 for a 0-1 ratio).",
            default=100.0),
        Key("gpu_instance_label", parse_label_name, "Label with the MIG GPU instance id on the DCGM series "
            "(absent or empty: a whole GPU).", default="GPU_I_ID"),
        Key("gpu_profile_label", parse_label_name, "Label with the MIG profile on the DCGM series (1g.10gb).",
            default="GPU_I_PROFILE"),
        Key("idle_threshold", parse_percent, "held-idle: a GPU under this utilisation (percent, 0-100) ...",
            default=10.0),
        Key("idle_min", v.parse_duration, "... for at least this long (30m, 1800).", default=1800),
        Key("join", v.parse_choice("hpc_job", "node"), "How DCGM series are matched to jobs: hpc_job (the job "
            "label of dcgm-exporter's --hpc-job-mapping-dir) or node (no job label: a job takes its nodes' GPUs, "
            "only where it held whole nodes alone; other jobs are unknown).", default="hpc_job"),
        Key("weigh_useful", v.parse_bool, "Unit economics: also weigh each partition's completed-run GPU-hours by "
            "the measured utilisation of its completed jobs (report.json economics ... utilisation_weighted), beside "
            "the allocation view, which stays as it is.", default=False),
    ),
)


@dataclass(frozen=True)
class TelemetryConfig:
    """[telemetry]: where Prometheus is, how to query it, the series' names and labels, and the held-idle rule."""

    prometheus_url: str | None = None  # None: the Prometheus source is off
    timeout_s: float = TELEMETRY.default("timeout")  # per HTTP request
    step_s: float = TELEMETRY.default("step")  # query_range resolution (the lab uses 1)
    chunk_hours: float = TELEMETRY.default("chunk_hours")  # the period is queried in windows of this length
    gap_factor: float = TELEMETRY.default("gap_factor")  # points further apart than this x step: no data between
    max_response_mib: int = TELEMETRY.default("max_response_mib")  # a larger answer is a failed query
    job_label: str = TELEMETRY.default("job_label")  # dcgm-exporter HPC job mapping label (value = JobIDRaw)
    node_label: str = TELEMETRY.default("node_label")  # the node name on DCGM series
    gpu_label: str = TELEMETRY.default("gpu_label")
    node_exporter_node_label: str = TELEMETRY.default("node_exporter_node_label")  # port stripped
    metric_util: str = TELEMETRY.default("metric.util")
    metric_fb_used: str = TELEMETRY.default("metric.fb_used")  # MiB
    metric_fb_free: str = TELEMETRY.default("metric.fb_free")  # MiB (used+free = the GPU's memory)
    metric_power: str = TELEMETRY.default("metric.power")  # W
    metric_temp: str = TELEMETRY.default("metric.temp")
    metric_xid: str = TELEMETRY.default("metric.xid")
    metric_ecc_dbe: str = TELEMETRY.default("metric.ecc_dbe")
    mig_util_metric: str = TELEMETRY.default("mig_util_metric")  # a MIG instance's utilisation (a ratio) ...
    mig_util_scale: float = TELEMETRY.default("mig_util_scale")  # ... x this = percent
    gpu_instance_label: str = TELEMETRY.default("gpu_instance_label")  # MIG GPU instance id (GPU_I_ID)
    gpu_profile_label: str = TELEMETRY.default("gpu_profile_label")  # MIG profile (GPU_I_PROFILE)
    idle_threshold_pct: float = TELEMETRY.default("idle_threshold")  # glossary held-idle: under this ...
    idle_min_s: float = float(TELEMETRY.default("idle_min"))  # ... for at least this long
    join: str = TELEMETRY.default("join")  # hpc_job | node
    weigh_useful: bool = TELEMETRY.default("weigh_useful")  # economics: busy completed-run GPU-hours too

    @property
    def enabled(self) -> bool:
        return self.prometheus_url is not None


def telemetry_config(sections: list[ParsedSection]) -> TelemetryConfig:
    """The typed [telemetry] section (defaults when absent; the schema already reported bad values)."""
    if not sections:
        return TelemetryConfig()
    values = field_values(sections[0], TelemetryConfig, FIELD_OF_KEY)
    if "idle_min_s" in values:
        values["idle_min_s"] = float(values["idle_min_s"])
    return TelemetryConfig(**values)
