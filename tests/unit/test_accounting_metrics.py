"""Metric definitions on small synthetic tables: runs (requeues, resubmissions, windows, overlaps), het
merging, pricing fallbacks, labels, period attribution."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

from gpuclust.accounting.figures.metrics import build_report
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import SCHEMA
from gpuclust.config import parse_config

CONF = """
[site]
cluster_name = t
retry_window = 1h
report_labels = team, project

[gpu_type h100]
price_per_gpu_hour = 2.0

[partition gpu]
gpu_type = h100
price_per_gpu_hour = 9.0

[partition a100p]
gpu_type = a100
price_per_gpu_hour = 1.5

[partition cpu]

[account ml]
labels = team=ml-team
"""
T0 = datetime(2026, 1, 10, tzinfo=timezone.utc)
PERIOD = Period(T0, datetime(2026, 1, 11, tzinfo=timezone.utc))
_next = iter(range(1000, 100000))


def row(job_id: str, submit: int, start: int | None, end: int | None, *, state="COMPLETED", exit_code=0,
        name="job", user="u", account="ml", partition="gpu", gpus=1, gpu_type="h100", comment="",
        raw: int | None = None, eligible: int | None = None, known=True) -> dict:
    base = int(job_id.split("_")[0].split("+")[0])
    task = int(job_id.split("_")[1]) if "_" in job_id else None
    het = int(job_id.split("+")[1]) if "+" in job_id else None

    def ts(s):
        return None if s is None else datetime.fromtimestamp(T0.timestamp() + s, tz=timezone.utc)

    return {
        "line": next(_next), "job_id": job_id, "job_id_raw": raw if raw is not None else next(_next), "job_base": base,
        "array_task": task, "array_pending": None, "het_offset": het, "job_name": name, "user": user,
        "account": account, "partition": partition, "qos": "normal", "wckey": "", "comment": comment,
        "nodelist": "n1", "state": state, "state_raw": state, "exit_code": exit_code if known else None,
        "exit_signal": 0 if known else None, "exit_code_known": known, "submit": ts(submit),
        "eligible": ts(eligible if eligible is not None else submit), "start": ts(start), "end": ts(end),
        "elapsed_s": (end - start) if start is not None and end is not None else 0, "nnodes": 1,
        # as sacct prints it: an allocation's TRES once the job started, nothing for one that never did
        "alloc_tres": _alloc_tres(gpus, gpu_type) if start is not None else "", "gpus": gpus, "gpu_type": gpu_type, "mem_mb": None,
    }


def _alloc_tres(gpus: int, gpu_type: str | None) -> str:
    tres = "billing=1,cpu=1,mem=1G,node=1"
    if gpus:
        tres += f",gres/gpu={gpus}" + (f",gres/gpu:{gpu_type}={gpus}" if gpu_type else "")
    return tres


def report(rows, conf=CONF, period=PERIOD, **kw):
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return build_report(table, parse_config(conf), period, **kw).data


def test_failure_then_resubmission_is_one_run():
    d = report([row("1", 0, 10, 3610, state="FAILED", exit_code=1), row("2", 3700, 3700, 7300)])
    assert (d["totals"]["runs"], d["totals"]["completed"], d["totals"]["attempts"], d["totals"]["retries"]) == (1, 1, 2, 1)
    assert d["totals"]["gpu_hours"] == pytest.approx(2.0)
    assert d["totals"]["completed_run_gpu_hours"] == pytest.approx(1.0)
    assert d["totals"]["cost_per_completed_run"] == pytest.approx(4.0)


@pytest.mark.parametrize(
    "second,runs",
    [
        (dict(submit=3610 + 3601), 2),  # outside the 1 h retry window
        (dict(submit=3000), 2),  # submitted before the failed attempt ended
        (dict(submit=3700, user="v"), 2),  # another user
        (dict(submit=3700, account="physics"), 2),
        (dict(submit=3700, name="other"), 2),
        (dict(submit=3700), 1),
    ],
)
def test_resubmission_conditions(second, runs):
    submit = second.pop("submit")
    d = report([row("1", 0, 10, 3610, state="TIMEOUT"), row("2", submit, submit + 5, submit + 10, **second)])
    assert d["totals"]["runs"] == runs


def test_success_is_not_continued_and_array_tasks_are_separate_runs():
    d = report([row("1", 0, 0, 10), row("2", 20, 20, 30),
                row("5_0", 0, 0, 10, name="arr"), row("5_1", 0, 0, 10, name="arr", state="FAILED", exit_code=1),
                row("9_1", 20, 20, 30, name="arr")])
    # 1 and 2 both completed (2 runs); 5_1 failed and 9_1 (same name, same task index) retried it.
    assert (d["totals"]["runs"], d["totals"]["completed"], d["totals"]["attempts"]) == (4, 4, 5)


def test_requeued_executions_are_one_run():
    d = report([row("7", 0, 5, 50, state="REQUEUED", raw=7), row("7", 60, 70, 100, raw=7)])
    assert (d["totals"]["runs"], d["totals"]["attempts"], d["totals"]["completed"]) == (1, 2, 1)
    assert [f["state"] for f in d["top_failures"]] == ["REQUEUED"]


def test_overlapping_same_name_jobs_use_exact_matching():
    # A fails at 100; B (submitted 50, before A ended) completes at 400; C submitted at 150 continues A's run.
    d = report([row("1", 0, 0, 100, state="FAILED", exit_code=2), row("2", 50, 50, 400),
                row("3", 150, 150, 300)])
    assert (d["totals"]["runs"], d["totals"]["attempts"], d["totals"]["completed"], d["totals"]["retries"]) == (2, 3, 2, 1)


def test_het_components_are_one_attempt():
    d = report([row("30+0", 0, 0, 3600, gpus=1), row("30+1", 0, 0, 3600, gpus=2, gpu_type="a100", partition="a100p")])
    assert (d["totals"]["runs"], d["totals"]["attempts"]) == (1, 1)
    assert d["totals"]["gpu_hours"] == pytest.approx(3.0)
    assert d["totals"]["cost"] == pytest.approx(1 * 2.0 + 2 * 1.5)  # each component at its own type's price


def test_prices_fall_back_to_partition_and_unpriced_is_reported():
    d = report([row("1", 0, 0, 3600, gpu_type=None, partition="a100p"),  # no typed key: partition's type a100
                row("2", 0, 0, 3600, gpu_type="v100", partition="gpu"),  # unknown type: partition price 9
                row("3", 0, 0, 3600, gpu_type=None, partition="cpu")])  # nothing configured
    costs = {r["partition"]: r["cost"] for r in d["runs"]["by_partition"]}
    assert costs == {"a100p": pytest.approx(1.5), "gpu": pytest.approx(9.0), "cpu": None}
    assert d["totals"]["unpriced_gpu_hours"] == pytest.approx(1.0)
    assert d["totals"]["cost"] == pytest.approx(10.5)


def test_labels_from_comment_then_account_config():
    d = report([row("1", 0, 0, 3600, comment="team=vision project=p1"), row("2", 0, 0, 3600, name="b"),
                row("3", 0, 0, 3600, name="c", account="physics", comment="project=p2,x=y")])
    teams = {r["team"]: r["runs"] for r in d["runs"]["by_label"]["team"]}
    projects = {r["project"]: r["runs"] for r in d["runs"]["by_label"]["project"]}
    assert teams == {"vision": 1, "ml-team": 1, "(none)": 1}
    assert projects == {"p1": 1, "p2": 1, "(none)": 1}


def test_run_attributed_to_period_of_last_attempt_with_all_its_attempts():
    day = 86400
    d = report([row("1", -2000, -1900, -100, state="FAILED", exit_code=1), row("2", 0, 10, 3610)])
    assert (d["totals"]["runs"], d["totals"]["attempts"]) == (1, 2)
    # A run that ended after the period is not counted in it.
    d = report([row("1", 0, 10, 100, state="FAILED", exit_code=1), row("2", 200, 200, day + 5)])
    assert d["totals"]["runs"] == 0


def test_queue_wait_uses_eligible_else_submit_and_pandas_quantiles():
    rows = [row(str(i), 0, w, w + 10, eligible=e, name=f"n{i}") for i, (w, e) in
            enumerate([(10, None), (20, None), (30, 25), (100, None)], start=1)]
    rows[0]["eligible"] = None
    d = report(rows)
    qw = d["queue_wait"]["by_partition"][0]
    # waits: 10 (Submit), 20, 5 (Eligible 25), 100
    assert (qw["jobs"], qw["median_s"], qw["p90_s"], qw["max_s"]) == (4, 15.0, pytest.approx(76.0), 100.0)


def test_json_unknown_exit_completed_counts_and_failures_have_null_exit():
    d = report([row("1", 0, 0, 10, known=False), row("2", 0, 0, 20, state="FAILED", name="x", known=False)])
    assert d["totals"]["completed"] == 1
    assert d["top_failures"][0]["exit_code"] is None


def test_non_attempts_do_not_count_and_sizing():
    rows = [row("1", 0, 0, 3600, gpus=2), row("2", 0, None, None, state="PENDING", name="p"),
            row("3", 0, 5, None, state="RUNNING", name="r")]
    d = report(rows, target=10)
    assert d["totals"]["runs"] == 1
    s = d["sizing"]
    assert d["totals"]["cost_per_completed_run"] == pytest.approx(4.0)  # (not repeated in sizing)
    assert "effective_unit_cost" not in s and s["completed_run_share_of_allocated"] == pytest.approx(1.0)
    assert s["completed_runs_per_gpu_month"] == pytest.approx(1 / (2 / 730))
    assert s["required_gpus"] == pytest.approx(10 / 365)
    assert s["target_source"] == "--target"


def test_empty_input_gives_empty_report():
    d = report([])
    assert d["totals"]["runs"] == 0 and d["totals"]["cost_per_completed_run"] is None
    assert d["queue_wait"]["by_partition"] == [] and d["top_failures"] == []
