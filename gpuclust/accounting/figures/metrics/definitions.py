"""What the report computes, in words (printed on the report page), and the names shared by the metrics
modules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gpuclust.accounting.ingest.period import Period

GPU_MONTH_HOURS = 730.0  # 365 * 24 / 12: one GPU allocated for an average month
DEFAULT_TOP = 20

DEFINITIONS: dict[str, str] = {
    "rows": "Input rows are job allocation records (no steps). With sacct -D, earlier executions of a requeued "
    "job are their own rows, in state REQUEUED. One row is kept per execution (JobIDRaw + Start), in its latest state.",
    "gpus": "A row's GPUs are the count of the untyped gres/gpu key in AllocTRES; without it, the sum of the typed "
    "gres/gpu:<type> keys (sacct 24.11 can record those alone); 0 if neither. Its GPU type is the <type> of its "
    "typed keys when they name one type, else the partition's configured gpu_type; GPUs of several types "
    "(gres/gpu:a100=1,gres/gpu:h100=3) are a mix, and GPUs of the untyped total beyond the typed ones are of "
    "the partition's type.",
    "gpu_hours": "GPU-hours = Elapsed seconds x GPUs / 3600.",
    "attempt": "An allocation row that started and ended. The components of a het job (123+0, 123+1) form one "
    "attempt: GPU-hours and cost are summed; times, state and name come from component +0.",
    "queue_wait": "queue wait = Start - Eligible, or Start - Submit where Eligible is unknown; over attempts that "
    "started in the period. Median and p90 use linear interpolation (pandas quantile).",
    "hold": "hold = Eligible - Submit, over attempts that started in the period and have a known Eligible.",
    "run": "The unit of work a user wants done. Its attempts are (a) all rows of one job: one JobID and user, "
    "each execution submitted at most 1 h after the previous one ended (a requeue resubmits at once; a JobID "
    "that Slurm reused after a database reset or counter wrap, for another user or a later Submit, is "
    "another job) "
    "and (b) resubmissions: attempts by the same user, account and job name (array tasks: name plus task index) "
    "where the run's latest attempt did not complete, the new attempt's Submit comes after that attempt's End, "
    "and within the retry window.",
    "completed": "A run is completed when its last attempt is COMPLETED with ExitCode 0:0. retries = attempts - 1.",
    "attribution": "A run belongs to the account, partition and labels of its first attempt, and to the period in "
    "which its last attempt ended; all its attempts, GPU-hours and cost count there.",
    "cost": "Cost of an attempt = GPU-hours x the price per GPU-hour of its GPU type (site config [gpu_type]), "
    "falling back to the partition's price_per_gpu_hour. A mix of types is priced type by type: each type's "
    "share of the GPUs at its own price (a100=1,h100=3 for 1 h: 1 x a100 + 3 x h100). GPU-hours without any "
    "price are reported as unpriced_gpu_hours and add nothing to cost.",
    "completed_run_gpu_hours": "completed-run GPU-hours: GPU-hours of the completing attempt of each completed "
    "run (the work done, after failures and retries).",
    "cost_per_completed_run": "cost (all attempts, failed and retried included) / completed runs; null when 0. "
    "The report's one cost per completed run (the summary, totals, runs tables, trend, `report show` and "
    "gpuclust_report_cost_per_completed_run are this figure). It prices allocated GPU-hours only; the unit "
    "economics' total_cost_per_accepted_unit also carries idle, unavailable and fixed costs.",
    "labels": "Report dimensions: account, wckey, and key=value pairs in --comment for the configured keys "
    "(site report_labels); a key missing from the comment takes the account's configured label, else '(none)'.",
    "top_failures": "Attempts that ended in the period and are not COMPLETED 0:0, ranked by GPU-hours (then "
    "earliest End, then input order), with their NodeList and Start (UTC).",
    "sizing": "completed_run_share_of_allocated = completed-run GPU-hours / allocated GPU-hours; completed runs "
    "per GPU-month = completed runs / (GPU-hours / 730); required GPUs = target completed runs per month / "
    "completed runs per GPU-month. (The cost per completed run is in the totals.)",
}

GROUP_COLUMNS = ("runs", "completed", "attempts", "retries", "gpu_hours", "completed_run_gpu_hours", "cost",
                 "cost_per_completed_run", "unpriced_gpu_hours")
WAIT_COLUMNS = ("jobs", "median_s", "p90_s", "max_s")
NONE_LABEL = "(none)"
PARALLEL_MIN_ATTEMPTS = 20_000  # rows; below this a second thread costs more than it saves


@dataclass
class Report:
    period: Period
    data: dict[str, Any]
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
