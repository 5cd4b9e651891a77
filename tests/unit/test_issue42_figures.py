"""Issue 42 class 6 (figures that keep their own definitions) and class 8 (silence), outside the Prometheus
source itself (tests/unit/test_telemetry_hostile.py): the per-job invariants as a property, usage TRES of a
step without GPUs, DST days of their true length, a period that ends before it starts in local time, `config
check`'s bounds and query count, and the stderr lines of failed sources."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures.gpuuse import hold_invariants, source_warnings
from gpuclust.accounting.ingest.period import resolve_period
from gpuclust.accounting.pipeline import read_input
from gpuclust.cli.main import cli
from gpuclust.config.site import parse_config
from gpuclust.config.telemetry import query_count
from gpuclust.errors import InputError
from gpuclust.timespec import parse_time
from tests.unit.test_accounting_usage import JOB, STEP, _dump

BERLIN = "Europe/Berlin"
HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Eligible|Start|End|Elapsed|"
          "AllocTRES|NNodes|NodeList")

# ---- invariants --------------------------------------------------------------------------------------------


_FIGURE = st.one_of(st.floats(min_value=-1e7, max_value=1e7), st.just(float("nan")))


@settings(max_examples=300, derandomize=True, deadline=None)
@given(rows=st.lists(st.tuples(st.floats(0, 1e6), _FIGURE, _FIGURE, _FIGURE), min_size=1, max_size=20))
def test_hold_invariants_property_300_cases(rows: list[tuple[float, float, float, float]]) -> None:
    allocated, covered, busy, held = (np.array(col, dtype=float) for col in zip(*rows, strict=True))
    was_nan = [np.isnan(a).copy() for a in (covered, busy, held)]
    hold_invariants(allocated, covered, busy, held)
    for before, after in zip(was_nan, (covered, busy, held), strict=True):
        assert (np.isnan(after) == before).all()  # unknown stays unknown, known stays known
    known = ~np.isnan(covered)
    assert (covered[known] <= allocated[known]).all() and (covered[known] >= 0).all()
    for figure in (busy, held):
        both = known & ~np.isnan(figure)
        assert (figure[both] <= covered[both]).all() and (figure[~np.isnan(figure)] >= 0).all()


def test_hold_invariants_leaves_clean_figures_alone() -> None:
    allocated, covered = np.array([7200.0, 3600.0]), np.array([7200.0, np.nan])
    busy, held = np.array([3600.0, np.nan]), np.array([1800.0, np.nan])
    assert hold_invariants(allocated, covered, busy, held) == 0
    assert covered[0] == 7200 and busy[0] == 3600 and held[0] == 1800 and np.isnan(covered[1])


def test_gpuutil_on_a_step_without_gres_gpu_is_unknown_not_idle(tmp_path: Path) -> None:
    """A step whose AllocTRES has no gres/gpu but that recorded gres/gpuutil (max 80%): its GPUs, so its
    utilisation, are unknown; never 0% busy and held idle. Counted as a usage warning."""
    no_gpu_step = STEP.replace("gres/gpu={g},", "")
    path = _dump(tmp_path, [JOB.format(id=1, e=0), no_gpu_step.format(id=1, s="0", ave="gres/gpuutil=40",
                                                                      max="gres/gpuutil=80", tot="gres/gpuutil=40")])
    result = read_input(str(path))
    job = result.table.to_pylist()[0]
    assert job["gpus"] == 4
    assert job["gpu_busy_gpu_s"] is None and job["gpu_util_gpu_s"] is None
    assert result.usage_warnings == 1 and "no gres/gpu" in result.usage_problems[0]


# ---- time: DST days have their true length -------------------------------------------------------------------


def test_dst_days_have_their_true_length() -> None:
    assert resolve_period("2026-10-25", "2026-10-26", None, BERLIN).seconds == 25 * 3600  # type: ignore[union-attr]
    assert resolve_period("2026-03-29", "2026-03-30", None, BERLIN).seconds == 23 * 3600  # type: ignore[union-attr]
    assert resolve_period("2026-12-01", "2026-12-02", None, BERLIN).seconds == 24 * 3600  # type: ignore[union-attr]


def test_period_that_ends_before_it_starts_in_local_time_is_refused() -> None:
    # 02:30 does not exist on 2026-03-29 in Berlin: read as 02:30+01:00 = 01:30 UTC, after 03:00+02:00 = 01:00 UTC
    with pytest.raises(InputError) as info:
        resolve_period("2026-03-29T02:30", "2026-03-29T03:00", None, BERLIN)
    text = str(info.value)
    assert "--until" in text and "the period is empty" in text and "does not exist in Europe/Berlin" in text


def test_elapsed_times_count_real_seconds_across_a_dst_change() -> None:
    now = datetime(2026, 10, 25, 12, 0, tzinfo=ZoneInfo(BERLIN))  # CET, 9 hours after the change
    back = parse_time("24h").resolve(BERLIN, now)
    assert now.timestamp() - back.timestamp() == 24 * 3600
    assert back.utcoffset() == timedelta(hours=2)  # 2026-10-24T13:00+02:00
    assert parse_time("yesterday").resolve(BERLIN, now) == datetime(2026, 10, 24, tzinfo=ZoneInfo(BERLIN))


def test_sizing_on_a_25_hour_day(tmp_path: Path) -> None:
    """One 4-GPU job over the whole 25-hour day: 4 GPUs used on average, not 100 / 24 = 4.17."""
    dump = tmp_path / "dst.txt"
    dump.write_text(f"{HEADER}\n1|1|train|alice|ml|gpu|normal|COMPLETED|0:0|2026-10-24T22:00:00|2026-10-24T22:00:00|"
                    "2026-10-24T22:00:00|2026-10-25T22:59:59|1-00:59:59|billing=8,cpu=8,gres/gpu=4,mem=64G,node=1|1|n1\n")
    config = parse_config(f"[site]\ncluster_name = c\ntimezone = {BERLIN}\n")
    report, _ = pipeline.build(config, resolve_period("2026-10-25", "2026-10-26", None, BERLIN), input_path=str(dump))
    assert report.data["totals"]["gpu_hours"] == pytest.approx(4 * (25 - 1 / 3600))
    assert report.data["sizing"]["gpus_used_on_average"] == pytest.approx(4 * (25 - 1 / 3600) / 25)


# ---- config check: bounds with file:line, and the query count ---------------------------------------------------


def _config_check(tmp_path: Path, telemetry: str, *args: str) -> tuple[int, str, str]:
    conf = tmp_path / "site.conf"
    conf.write_text(f"[site]\ncluster_name = c\n\n[telemetry]\nprometheus_url = http://127.0.0.1:9\n{telemetry}")
    result = CliRunner().invoke(cli, ["config", "check", *args, str(conf)])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(("line", "message"), [
    ("step = 0.001", "step: must be at least 1 s"),
    ("chunk_hours = 1e-9", "chunk_hours: must be at least 0.1"),
    ("chunk_hours = inf", "chunk_hours"),
    ("gap_factor = 0.5", "gap_factor: must be between 1 and 1000"),
    ("max_response_mib = 0", "max_response_mib"),
    ("max_response_mib = 100000", "must be at most 4096"),
])
def test_config_check_refuses_endless_query_counts(tmp_path: Path, line: str, message: str) -> None:
    code, _, err = _config_check(tmp_path, line + "\n")
    assert code == 2 and "site.conf:6:" in err and message in err, err


def test_config_check_shows_the_query_count(tmp_path: Path) -> None:
    code, out, _ = _config_check(tmp_path, "step = 30\nchunk_hours = 6\n")
    assert code == 0
    assert "at most 34 Prometheus queries for a day" in out  # 4 windows x 7 + 6 node queries
    assert query_count(86400, 30, 6) == 34 and query_count(86400, 1, 6) == 9 * 7 + 6
    code, out, _ = _config_check(tmp_path, "step = 1\nchunk_hours = 0.1\n", "--json")
    assert code == 0 and json.loads(out)["telemetry_queries"]["per_day"] == 240 * 7 + 6


# ---- failures said on stderr -----------------------------------------------------------------------------------


def test_source_warnings_are_listed_counted_and_summed_up() -> None:
    data = {"gpu_use": {"prometheus": {"warnings": 14, "warning_list": [f"http://p: w{i}" for i in range(14)]},
                        "usage_warnings": 120, "usage_problems": ["dump:3: gres/gpuutil reads 150% per GPU"]}}
    lines, summary = source_warnings(data)
    assert lines[:10] == [f"warning: http://p: w{i}" for i in range(10)]
    assert "4 more warning(s)" in lines[10]
    assert lines[11].startswith("warning: usage TRES: 120 warning(s)") and "dump:3:" in lines[11]
    assert len(lines) == 12  # usage TRES: counted, one line, not one per row
    assert summary == "summary: 14 telemetry warning(s), 120 usage TRES warning(s) (report.json gpu_use)"
    assert source_warnings({"gpu_use": {"prometheus": None, "usage_warnings": 0}}) == ([], None)
