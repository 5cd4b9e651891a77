"""Every report figure, declared once: its name, definition, unit, rounding, page label, `report show` column,
Prometheus family and scale, and its old (deprecated) names.

The report's outputs read this table instead of spelling figures out: the definitions block (report.json
`definitions`, the page's "Metric definitions"), the page's column labels and summary band, `report show`'s
columns, the Prometheus families of gpuclust.prom, and the deprecated aliases (figures.metrics.deprecated).
A figure's value is computed where it always was (figures.metrics, figures.gpuuse, figures.economics); adding a
figure is its computation and one entry here. Names follow shared/gpu-hours-glossary.md.

It imports nothing of gpuclust, so every stage from figures on can read it.

Places (`Figure.place`) say where a figure's value sits in report.json; a figure's name is unique in its place:

* runs: `totals`, each row of `runs.by_*`, and the totals and runs_by_* tables;
* sizing: `sizing` and the sizing table;
* queue_wait: each row of `queue_wait.by_*` / `hold.by_*` and their tables;
* trend: the trend_daily table;
* gpu_use: `gpu_use.totals`, each row of `gpu_use.by_*` and the gpu_use_* tables;
* economics: `economics.total` and each row of `economics.by_partition`; economics.terms: the flat columns of
  the economics_terms table; economics.baselines, economics.sizing, economics.utilisation_weighted: those
  blocks (and the economics_baselines table).

Definitions are grouped in definition sections: the report's own and the trend's (keys without prefix), GPU use's
("gpu_use.") and the unit economics' ("economics."). A
`Concept` is a definition that is no single figure (an attempt, a run, the sizing rules); concepts and figures
give the definitions block in the order they are declared here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

# ---- units --------------------------------------------------------------------------------------------------

COUNT = "count"
GPU_HOURS = "GPU-hours"
MONEY = "money"  # in the site currency
RATIO = "ratio"  # 0..1
PERCENT = "percent"  # 0..100
SECONDS = "seconds"
GPUS = "GPUs"
HOURS = "hours"
TEXT = "text"
KWH = "kWh"
FLAG = "flag"
MIB = "MiB"

# Decimals a figure is written to in the CSVs when it declares none of its own (report.json keeps its own
# rounding): enough for the figure, none of a float's noise (0.5850000000000001).
CSV_DECIMALS = {COUNT: 6, GPU_HOURS: 6, MONEY: 6, RATIO: 6, PERCENT: 3, SECONDS: 3, GPUS: 6, HOURS: 6, KWH: 6, MIB: 1}
CSV_DEFAULT_DECIMALS = 9  # a float column no figure declares

# ---- places and definition sections --------------------------------------------------------------------------

RUNS = "runs"
SIZING = "sizing"
QUEUE_WAIT = "queue_wait"
TREND = "trend"
GPU_USE = "gpu_use"
ECONOMICS = "economics"
ECONOMICS_TERMS = "economics.terms"
ECONOMICS_BASELINES = "economics.baselines"
ECONOMICS_SIZING = "economics.sizing"
ECONOMICS_WEIGHTED = "economics.utilisation_weighted"
LEMON = "lemon_nodes"  # each row of lemon_nodes.nodes and the lemon_nodes table
LEMON_FLEET = "lemon_nodes.fleet"
LEMON_SIZES = "lemon_nodes.by_job_size"
FINDINGS = "findings"

# Definition sections: the report's own (always there), the trend's (with the trend) and those of GPU use and the
# unit economics (with them), each place's definitions in one; the prefix of their keys in report.json.
REPORT = "report"
DEFINITION_SECTIONS = {RUNS: REPORT, SIZING: REPORT, QUEUE_WAIT: REPORT, TREND: TREND, GPU_USE: GPU_USE,
                       ECONOMICS: ECONOMICS, ECONOMICS_TERMS: ECONOMICS, ECONOMICS_BASELINES: ECONOMICS,
                       ECONOMICS_SIZING: ECONOMICS, ECONOMICS_WEIGHTED: ECONOMICS, LEMON: LEMON, LEMON_FLEET: LEMON,
                       LEMON_SIZES: LEMON, FINDINGS: FINDINGS}
DEFINITION_PREFIX = {REPORT: "", TREND: "", GPU_USE: "gpu_use.", ECONOMICS: "economics.", LEMON: "lemon_nodes.",
                     FINDINGS: "findings."}

# Breakdowns of the Prometheus families: a figure's family gpuclust_report_<prom> is the whole cluster, and
# gpuclust_report_<dim>_<prom> (label <dim>) each breakdown its place has.
PROM_BREAKDOWNS: Mapping[str, tuple[str, ...]] = {
    RUNS: ("partition", "account"),
    QUEUE_WAIT: ("partition", "account", "qos"),  # (breakdowns only: no whole-cluster wait family)
    GPU_USE: ("partition", "account"),  # (breakdowns only)
    ECONOMICS: ("partition",),
    LEMON: ("node",),  # (breakdowns only)
    LEMON_SIZES: ("job_size",),  # (breakdowns only)
}
BREAKDOWNS_ONLY = frozenset({QUEUE_WAIT, GPU_USE, LEMON, LEMON_SIZES})  # places without a whole-cluster family
PROM_SCALE_GPU_SECONDS = 3600.0  # GPU-hours -> GPU-seconds (Prometheus base unit; promtool refuses "hours")


@dataclass(frozen=True)
class Figure:
    """One report figure.

    name: its report.json key and CSV column within `place`. definition: its text in the definitions block
    (None: defined by a Concept or not at all). unit, decimals: what it counts and the decimals report.json
    rounds it to (None: not rounded). label: the page's column header (None: the name, spaced and capitalised);
    glossary: its glossary name in words (the page's summary band, `report show`'s answers); percent: the page
    shows it x 100 with "%". show, show_rank: `report show`'s column header and its place among the columns;
    show_short: its header where the terminal is narrow; show_wide: shown only with --wide (per-group detail).
    prom, prom_help, prom_scale: its Prometheus family suffix (after gpuclust_report_), HELP text and the factor
    from report.json's value to the sample; money: the family carries the currency label. old_names: its
    deprecated report.json keys / CSV columns (same value, one release); old_places: further places an old
    name is written, with the figure's value (place -> old name). old_prom: its deprecated family suffix, for
    the whole cluster and the breakdowns in old_prom_breakdowns."""

    name: str
    place: str
    unit: str
    definition: str | None = None
    decimals: int | None = None
    label: str | None = None
    glossary: str | None = None
    percent: bool = False
    show: str | None = None
    show_rank: int = 0
    show_short: str | None = None
    show_wide: bool = False
    prom: str | None = None
    prom_help: str | None = None
    prom_scale: float = 1.0
    money: bool = False
    old_names: tuple[str, ...] = ()
    old_places: tuple[tuple[str, str], ...] = ()
    old_prom: str | None = None
    old_prom_breakdowns: tuple[str, ...] = ()

    @property
    def definition_key(self) -> str:
        return definition_key(self.place, self.name)

    @property
    def csv_decimals(self) -> int:
        """The decimals its CSV cells are rounded to: its own, else its unit's."""
        return self.decimals if self.decimals is not None else CSV_DECIMALS.get(self.unit, CSV_DEFAULT_DECIMALS)

    @property
    def title(self) -> str:
        """The glossary name as a heading ("Completed-run GPU-hours")."""
        text = self.glossary or self.name.replace("_", " ")
        return text[:1].upper() + text[1:]


@dataclass(frozen=True)
class Concept:
    """A definition that is no single figure: a term the figures are made of, or a group's rules."""

    key: str
    place: str
    definition: str

    @property
    def definition_key(self) -> str:
        return definition_key(self.place, self.key)


def definition_key(place: str, key: str) -> str:
    """A definition's key in report.json's `definitions`."""
    return DEFINITION_PREFIX[DEFINITION_SECTIONS[place]] + key


_GPU_TIME = "(GPU-hours x 3600)"

ENTRIES: tuple[Figure | Concept, ...] = (
    # ---- the report's own definitions and the run figures ---------------------------------------------------
    Concept("rows", RUNS,
            "Input rows are job allocation records (no steps). With sacct -D, earlier executions of a requeued job "
            "are their own rows, in state REQUEUED. One row is kept per execution (JobIDRaw + Start), in its latest "
            "state."),
    Concept("gpus", RUNS,
            "A row's GPUs are the count of the untyped gres/gpu key in AllocTRES; without it, the sum of the typed "
            "gres/gpu:<type> keys (sacct 24.11 can record those alone); 0 if neither. Its GPU type is the <type> of "
            "its typed keys when they name one type, else the partition's configured gpu_type; GPUs of several types"
            " (gres/gpu:a100=1,gres/gpu:h100=3) are a mix, and GPUs of the untyped total beyond the typed ones are "
            "of the partition's type."),
    Concept("gpu_hours", RUNS, 'GPU-hours = Elapsed seconds x GPU-equivalents / 3600: allocated, in hours of whole '
            'physical GPUs.'),
    Concept("gpu_equivalents", RUNS,
            "A row's GPU-equivalents: its GPUs' share of physical GPUs. A whole GPU is 1; a MIG slice Ng.Mgb is N of "
            "the card's 7 compute slices (4 on A30), or its [gpu_type NAME] gpu_share; gres/shard=N is N / the "
            "node's shards per GPU (its Gres, e.g. gpu:4,shard:32: 1/8; else [partition NAME] shards_per_gpu); "
            "gres/mps=N is N / the node's MPS per GPU (100). A share the input cannot give (an unknown profile, "
            "shards without a known layout, a node whose layout changed in the period) is unknown: counted and "
            "named in input.unknown and input.gpu_share_warnings, never 0 and never a whole GPU."),
    Concept("attempt", RUNS,
            "An allocation row that started and ended. The components of a het job (123+0, 123+1) form one attempt: "
            "GPU-hours and cost are summed; times, state and name come from component +0."),
    Concept("queue_wait", QUEUE_WAIT,
            "queue wait = Start - Eligible, or Start - Submit where Eligible is unknown; over attempts that started "
            "in the period. Median and p90 use linear interpolation (pandas quantile)."),
    Concept("hold", QUEUE_WAIT,
            "hold = Eligible - Submit, over attempts that started in the period and have a known Eligible."),
    Concept("run", RUNS,
            "The unit of work a user wants done. Its attempts are (a) all rows of one job: one JobID and user, each "
            "execution submitted at most 1 h after the previous one ended (a requeue resubmits at once; a JobID that"
            " Slurm reused after a database reset or counter wrap, for another user or a later Submit, is another "
            "job) and (b) resubmissions: attempts by the same user, account and job name (array tasks: name plus "
            "task index) where the run's latest attempt did not complete, the new attempt's Submit comes after that "
            "attempt's End, and within the retry window."),
    Concept("completed", RUNS,
            "A run is completed when its last attempt is COMPLETED with ExitCode 0:0. retries = attempts - 1."),
    Concept("attribution", RUNS,
            "A run belongs to the account, partition and labels of its first attempt, and to the period in which its"
            " last attempt ended; all its attempts, GPU-hours and cost count there."),
    Concept("cost", RUNS,
            "Cost of an attempt = GPU-hours x the price per GPU-hour of its GPU type (site config [gpu_type]), "
            "falling back to the partition's price_per_gpu_hour. A [gpu_type] price is per GPU-equivalent hour "
            "(price_unit = card, the default for a whole GPU), or per device-hour of one GRES of the type "
            "(price_unit = slice, the default for a MIG type: device-hours x price); a slice in a mix weighs by its "
            "GPU-equivalents. A mix of types is priced type by type: each type's "
            "share of the GPUs at its own price (a100=1,h100=3 for 1 h: 1 x a100 + 3 x h100). GPU-hours without any "
            "price are reported as unpriced_gpu_hours and add nothing to cost."),
    # runs: totals, runs.by_* (in the order of their Prometheus families: GPU time before money)
    Figure("runs", RUNS, COUNT, label="Runs", glossary="runs", show="runs", show_rank=1,
           prom="runs", prom_help="Runs whose last attempt ended in the period"),
    Figure("completed", RUNS, COUNT, label="Completed", glossary="completed runs", show="completed", show_rank=2, show_short="done",
           prom="completed_runs", prom_help="Runs that completed (last attempt COMPLETED 0:0)"),
    Figure("attempts", RUNS, COUNT, label="Attempts", prom="attempts", prom_help="Attempts of those runs"),
    Figure("retries", RUNS, COUNT, label="Retries", prom="retries", prom_help="Retries (attempts - runs)"),
    Figure("gpu_hours", RUNS, GPU_HOURS, decimals=9, label="GPU-hours", glossary="allocated GPU-hours",
           show="allocated GPU-h", show_rank=3, show_short="GPU-h", prom="gpu_seconds",
           prom_help=f"Allocated GPU time of those runs' attempts {_GPU_TIME}", prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("completed_run_gpu_hours", RUNS, GPU_HOURS,
           "completed-run GPU-hours: GPU-hours of the completing attempt of each completed run (the work done, after"
           " failures and retries).",
           decimals=9, label="Completed-run GPU-hours", glossary="completed-run GPU-hours",
           show="completed-run GPU-h", show_rank=4, show_short="done GPU-h",
           show_wide=True, prom="completed_run_gpu_seconds",
           prom_help=f"Completed-run GPU time: the completing attempts of completed runs {_GPU_TIME}",
           prom_scale=PROM_SCALE_GPU_SECONDS, old_names=("useful_gpu_hours",), old_prom="useful_gpu_seconds",
           old_prom_breakdowns=("partition", "account")),
    Figure("unpriced_gpu_hours", RUNS, GPU_HOURS, decimals=9, label="Unpriced GPU-hours", prom="unpriced_gpu_seconds",
           prom_help=f"GPU time without any configured price {_GPU_TIME}", prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("gpu_device_hours", RUNS, GPU_HOURS,
           "device-hours: GPU GRES devices x Elapsed / 3600, a MIG slice counting as one device and shards and MPS "
           "as none (what gpu_hours was before slices were counted); gpu_hours counts GPU-equivalents.",
           decimals=9, label="Device-hours", glossary="device-hours", prom="gpu_device_seconds",
           prom_help="GPU GRES device time of those runs' attempts, a slice counting as one (device-hours x 3600)",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("cost", RUNS, MONEY, decimals=9, label="Cost", glossary="cost", show="cost", show_rank=8, prom="cost",
           prom_help="Cost of all attempts (GPU-hours x price)", money=True),
    Figure("cost_per_completed_run", RUNS, MONEY,
           "cost (all attempts, failed and retried included) / completed runs; null when 0. The report's one cost "
           "per completed run (the summary, totals, runs tables, trend, `report show` and "
           "gpuclust_report_cost_per_completed_run are this figure). It prices allocated GPU-hours only; the unit "
           "economics' total_cost_per_accepted_unit also carries idle, unavailable and fixed costs.",
           decimals=9, label="Cost per completed run", glossary="cost per completed run",
           show="cost per completed run", show_rank=9, show_short="cost/run", prom="cost_per_completed_run",
           prom_help="Cost / completed runs (absent when none completed)", money=True,
           old_places=((SIZING, "effective_unit_cost"),), old_prom="effective_unit_cost"),
    Concept("labels", RUNS,
            "Report dimensions: account, wckey, and key=value pairs in --comment for the configured keys (site "
            "report_labels); a key missing from the comment takes the account's configured label, else '(none)'."),
    Concept("top_failures", RUNS,
            "Attempts that ended in the period and are not COMPLETED 0:0, ranked by GPU-hours (then earliest End, "
            "then input order), with their NodeList and Start (UTC)."),
    Concept("sizing", SIZING,
            "completed_run_share_of_allocated = completed-run GPU-hours / allocated GPU-hours; completed runs per "
            "GPU-month = completed runs / (GPU-hours / 730); required GPUs = target completed runs per month / "
            "completed runs per GPU-month. (The cost per completed run is in the totals.)"),
    # sizing
    Figure("completed_run_share_of_allocated", SIZING, RATIO, decimals=9,
           label="Completed-run share of allocated GPU-hours", glossary="completed-run share of allocated GPU-hours",
           percent=True, prom="completed_run_share_of_allocated_ratio",
           prom_help="Sizing: completed-run / allocated GPU-hours (0..1)", old_names=("useful_ratio",),
           old_prom="useful_ratio"),
    Figure("completed_runs_per_gpu_month", SIZING, COUNT, decimals=9, label="Completed runs per GPU-month",
           prom="completed_runs_per_gpu_month", prom_help="Sizing: completed runs per GPU-month (730 h)"),
    Figure("target_completed_runs_per_month", SIZING, COUNT, label="Target completed runs per month",
           prom="target_completed_runs_per_month", prom_help="Sizing: the target it sizes for"),
    Figure("target_source", SIZING, TEXT, label="Target from"),
    Figure("required_gpus", SIZING, GPUS, label="Required GPUs", prom="required_gpus",
           prom_help="Sizing: GPUs needed for the target at this period's rate"),
    Figure("gpus_used_on_average", SIZING, GPUS, decimals=9, label="GPUs used on average",
           prom="gpus_used_on_average", prom_help="Sizing: allocated GPU-hours / hours in the period"),
    Figure("gpu_month_hours", SIZING, HOURS, label="Hours in a GPU-month"),
    # queue wait and hold, per partition, account and QOS
    Figure("jobs", QUEUE_WAIT, COUNT, label="Attempts", prom="queue_wait_attempts",
           prom_help="Attempts started in the period, per {dim}"),
    Figure("median_s", QUEUE_WAIT, SECONDS, label="Median", glossary="median queue wait", prom="queue_wait_median_seconds",
           prom_help="Queue wait (Start - Eligible) of attempts started in the period, median, per {dim}"),
    Figure("p90_s", QUEUE_WAIT, SECONDS, label="p90", glossary="p90 queue wait", prom="queue_wait_p90_seconds",
           prom_help="Queue wait (Start - Eligible) of attempts started in the period, p90, per {dim}"),
    Figure("max_s", QUEUE_WAIT, SECONDS, label="Max", prom="queue_wait_max_seconds",
           prom_help="Queue wait (Start - Eligible) of attempts started in the period, max, per {dim}"),
    # the daily trend (its runs, completed, gpu_hours, cost and cost_per_completed_run are the runs' figures)
    Concept("trend", TREND,
            "Daily trend (site time zone), from the stored history: a run counts on the day its last attempt ended "
            "(runs, completed, GPU-hours, cost, cost per completed run); p90 wait is over the attempts started that "
            "day."),
    Figure("started_attempts", TREND, COUNT, label="Attempts started"),
    Figure("p90_wait_s", TREND, SECONDS, label="p90 queue wait"),
    # ---- GPU use --------------------------------------------------------------------------------------------
    # (its Prometheus families: GPU time of each figure, then coverage, per breakdown)
    Figure("allocated_gpu_hours", GPU_USE, GPU_HOURS,
           "GPUs allocated to a job x its elapsed time, summed over jobs that ended in the period.",
           label="Allocated GPU-hours", glossary="allocated GPU-hours", prom="allocated_gpu_seconds",
           prom_help=f"GPU time allocated {_GPU_TIME}, per {{dim}} of the job; glossary name 'allocated'",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("covered_gpu_hours", GPU_USE, GPU_HOURS,
           "Allocated GPU-hours that have utilisation samples: from Prometheus, each GPU series' sampled time (a gap "
           "of more than gap_factor x step, or the time before a series starts or after it stops, has none); else "
           "a job's allocation where Slurm's usage TRES has gres/gpuutil.",
           label="Covered GPU-hours", prom="covered_gpu_seconds",
           prom_help=f"GPU time covered {_GPU_TIME}, per {{dim}} of the job; glossary name 'covered'",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("coverage", GPU_USE, RATIO,
           "covered / allocated GPU-hours (0..1); every busy and held-idle figure carries it.",
           label="Coverage", glossary="coverage", show="coverage", show_rank=6, show_short="cov",
           percent=True, prom="gpu_coverage_ratio",
           prom_help="Coverage: covered / allocated GPU-hours (0..1), per {dim}"),
    Figure("busy_gpu_hours", GPU_USE, GPU_HOURS,
           "Covered GPU-hours x measured mean per-GPU utilisation (0-100%). From Prometheus a time average; from "
           "usage TRES (telemetry = usage_tres) an upper bound, because Slurm records each task's PEAK sample of "
           "gres/gpuutil, not its average.",
           label="Busy GPU-hours", glossary="busy GPU-hours", show="busy GPU-h", show_rank=5, show_short="busy", prom="busy_gpu_seconds",
           prom_help=f"GPU time busy {_GPU_TIME}, per {{dim}} of the job; glossary name 'busy'",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("held_idle_gpu_hours", GPU_USE, GPU_HOURS,
           "Covered GPU-hours during which a GPU ran under the idle threshold for at least the minimum time "
           "(Prometheus: per GPU series; usage TRES: the whole covered time of a job whose mean is under the "
           "threshold).",
           label="Held-idle GPU-hours", glossary="held-idle GPU-hours", show="held-idle GPU-h", show_rank=7,
           show_short="held-idle", prom="held_idle_gpu_seconds",
           prom_help=f"GPU time held-idle {_GPU_TIME}, per {{dim}} of the job; glossary name 'held-idle'",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("util_mean_pct", GPU_USE, PERCENT,
           "busy / covered GPU-hours x 100: mean per-GPU utilisation over the covered part.",
           label="Mean GPU utilisation (%)"),
    Figure("util_max_pct", GPU_USE, PERCENT, label="Max GPU utilisation (%)"),
    Figure("gpu_mem_max_mib", GPU_USE, MIB, label="GPU memory peak (MiB)"),
    Figure("gpu_mem_total_mib", GPU_USE, MIB, label="GPU memory (MiB)"),
    Figure("unknown_jobs", GPU_USE, COUNT,
           "Jobs with GPUs and no utilisation telemetry: their busy and held-idle are unknown, never 0.",
           label="Jobs without telemetry", show="unknown jobs", show_rank=10, show_wide=True,
           show_short="unknown"),
    Figure("gpu_util_rule", GPU_USE, TEXT,
           "How Slurm's gres/gpuutil became per-GPU utilisation: summed (23.02.x and 24.05.1 on: the step's Tot, "
           "summed over its GPUs, divided by its GPUs) or last-gpu (23.11.0 to 24.05.0 recorded only the node's last"
           " GPU: utilisation unknown, counted in usage_warnings). Three more name why a job's utilisation is "
           "unknown, never 0 or held idle: mig (a job on MIG slices: gres/gpuutil reads 0 on a MIG instance, so "
           "there is no trustworthy per-slice value; only Prometheus' mig_util_metric covers it), shard and mps (a "
           "job of shards or MPS only shares a GPU with other jobs: no trustworthy per-shard value, from any "
           "source).", label="Utilisation rule"),
    Figure("energy_kwh", GPU_USE, KWH,
           "ConsumedEnergyRaw (J) / 3.6e6, else the integral of DCGM power; unknown where not recorded.",
           label="Energy (kWh)"),
    Figure("cpu_efficiency", GPU_USE, RATIO, "CPU time of the job's steps / (Elapsed x allocated CPUs).",
           label="CPU efficiency", percent=True),
    Figure("mem_efficiency", GPU_USE, RATIO, 'Peak task RSS (TRESUsageInMax mem) / allocated memory.',
           label="Memory efficiency", percent=True),
    Concept("telemetry_nodes", GPU_USE,
            "Per node over the period, from node_exporter: disk read/write latency (ms per completed I/O) and "
            "network receive/transmit errors and drops (increase of the counters)."),
    Figure("completed", GPU_USE, FLAG,
           "The job is a completed run (COMPLETED, exit 0:0): the economics' completed-run term."),
    Concept("completed_run_busy_gpu_hours", GPU_USE,
            "With [telemetry] weigh_useful = yes: an economics row's completed-run GPU-hours x the measured mean "
            "per-GPU utilisation of its completed jobs that have telemetry (their coverage beside it); "
            "total_cost_per_completed_run_busy_gpu_hour = the row's total cost / it."),
    # ---- waste findings (figures/findings.py over figures/waste.py) ------------------------------------------
    Concept("finding", FINDINGS,
            "One waste detector's verdict on one ended GPU job (figures/waste.py, the detectors of `gpuclust job`): "
            "its kind (idle_gpu, idle_stretch, gpu_too_large, time_limit, cpu_share, mem_share, multi_node), the "
            "evidence it was judged on and its advice. findings.csv holds every finding, report.json the "
            "`listed_limit` most costly."),
    Figure("kind", FINDINGS, TEXT, label="Finding"),
    Figure("message", FINDINGS, TEXT, label="What was seen"),
    Figure("advice", FINDINGS, TEXT, label="Advice"),
    Figure("evidence", FINDINGS, TEXT, "The numbers the finding was judged on, by name (JSON).", label="Evidence"),
    Figure("held_idle_cost", FINDINGS, MONEY,
           "The finding's held-idle GPU-hours (an idle GPU's, or an idle stretch's) x the site's price per GPU-hour "
           "of the job's GPU type, else its partition; unknown without a price or for a kind with no GPU-hour "
           "figure (the over-asks).", label="Held-idle cost", glossary="held-idle cost"),
    Figure("findings", FINDINGS, COUNT, "Per kind: the findings of that kind.", label="Findings"),
    Figure("jobs", FINDINGS, COUNT, "Per kind: the distinct jobs with a finding of that kind."),
    # ---- unit economics -------------------------------------------------------------------------------------
    # economics_terms' flat columns first: their deprecated columns come first in that table
    Figure("completed_run_gpu_hours", ECONOMICS_TERMS, GPU_HOURS, old_names=("useful_gpu_hours",)),
    Figure("completed_run_cost", ECONOMICS_TERMS, MONEY, old_names=("useful_cost",)),
    # economics.total and economics.by_partition (in the order of their Prometheus families)
    Figure("capacity_gpu_hours", ECONOMICS, GPU_HOURS,
           "Each node's GPUs (CfgTRES gres/gpu of `scontrol show node`, read by `report fetch`) x the hours of the "
           "period up to when the events were read; per partition over its nodes, in total over distinct nodes (a "
           "node in two partitions counts in both partitions, once in the total). Unknown without the node events: "
           "then idle and unavailable are unknown too, never 0.",
           prom="economics_capacity_gpu_seconds", prom_help="GPU time the GPUs could deliver in the period.",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("allocated_gpu_hours", ECONOMICS, GPU_HOURS,
           "GPU-hours of every allocation row (AllocTRES GPUs x the part of Start..End inside the period; a row "
           "still running counts up to the period end), split into completed-run (COMPLETED 0:0), in progress (no "
           "End yet) and retries/failures (every other ended row: failed, cancelled, timed out, requeued, node "
           "fail). The completed-run term counts the part inside the window, so the terms add up to the capacity; "
           "the runs' completed_run_gpu_hours counts a run whole in the period its last attempt ended."),
    Figure("unavailable_gpu_hours", ECONOMICS, GPU_HOURS,
           "GPU-hours of nodes down, drained or failed, from slurmdbd's node events (`sacctmgr show event`: an open "
           "event runs to the period end), overlapping events of a node merged, minus the GPU-hours jobs still held "
           "on that node meanwhile (a draining node finishes its jobs: those count as allocated)."),
    Figure("idle_gpu_hours", ECONOMICS, GPU_HOURS, 'capacity - allocated - unavailable.'),
    Figure("registered_capacity_gpu_hours", ECONOMICS, GPU_HOURS,
           "Cross-check of capacity: the GPUs of slurmdbd's 'Cluster Registered TRES' events x their time in the "
           "period (it follows node and GRES changes; the capacity uses today's inventory)."),
    Concept("term_cost", ECONOMICS,
            "GPU-hour terms are priced like jobs: a job's GPU type (else its partition's) at [gpu_type] "
            "price_per_gpu_hour, else the partition's price; idle and unavailable at their nodes' GPU types. With "
            "[costs] compute_per_month, the compute cost of the period (prorated) is spread evenly over the capacity"
            " GPU-hours instead. network, storage, support and operations are [costs] per month x period hours / "
            "730, split over the partitions by their share of capacity GPU-hours."),
    Figure("total_cost", ECONOMICS, MONEY, prom="economics_total_cost", prom_help="All unit-economics terms summed.",
           money=True),
    Figure("accepted_units", ECONOMICS, COUNT,
           "The denominator. denominator = runs (default): completed attempts (COMPLETED 0:0) that ended in the "
           "period (one per run; het components once). denominator = units: each such attempt's units_label=N in its"
           " --comment, else its account's units_per_job, else 0 (counted as completed_without_units). Failed "
           "attempts never count.",
           prom="economics_accepted_units", prom_help="The denominator: completed runs or accepted units."),
    Figure("total_cost_per_accepted_unit", ECONOMICS, MONEY,
           "total cost (every term: allocated, idle, unavailable and fixed) / accepted units. Not the cost per "
           "completed run of the totals, which prices allocated GPU-hours only.",
           glossary="total cost per accepted unit", prom="economics_total_cost_per_accepted_unit",
           prom_help="Total cost (every term) per accepted unit.", money=True, old_names=("effective_unit_cost",),
           old_prom="economics_effective_unit_cost", old_prom_breakdowns=("partition",)),
    Figure("completed_run_share_of_capacity", ECONOMICS, RATIO,
           "completed-run GPU-hours (the term) / capacity GPU-hours.",
           glossary="completed-run share of capacity", prom="economics_completed_run_share_of_capacity_ratio",
           prom_help="Completed-run GPU time / capacity.", old_names=("useful_share",),
           old_prom="economics_useful_ratio", old_prom_breakdowns=("partition",)),
    Concept("baseline", ECONOMICS_BASELINES,
            "gpu_hour: (completed-run + retries/failures GPU-hours) of each GPU type x the baseline's price for that"
            " type / speed, per accepted unit (rental pays for every allocated hour and no idle, unavailable or site"
            " fixed cost); unit: its price per unit. Both are cost_per_accepted_unit, beside the cluster's "
            "cluster_total_cost_per_accepted_unit. break_even_completed_run_share_of_capacity = the completed-run "
            "share of capacity at which the cluster's total cost per accepted unit equals the baseline's cost per "
            "accepted unit, with this period's total cost and accepted units per completed-run GPU-hour: total cost "
            "per accepted unit x completed-run share of capacity / baseline cost per accepted unit (above 1: the "
            "cluster cannot match it)."),
    Figure("cost_per_accepted_unit", ECONOMICS_BASELINES, MONEY, old_names=("unit_cost",),
           prom="economics_baseline_cost_per_accepted_unit", prom_help="A baseline's cost per accepted unit.",
           money=True, old_prom="economics_baseline_unit_cost"),
    Figure("cluster_total_cost_per_accepted_unit", ECONOMICS_BASELINES, MONEY, old_names=("cluster_unit_cost",)),
    Figure("break_even_completed_run_share_of_capacity", ECONOMICS_BASELINES, RATIO,
           glossary="break-even completed-run share of capacity", old_names=("break_even_useful_share",),
           prom="economics_baseline_break_even_completed_run_share_of_capacity_ratio",
           prom_help="Completed-run share of capacity at which the cluster's total cost per accepted unit equals "
           "the baseline's cost per accepted unit.", old_prom="economics_baseline_break_even_useful_ratio"),
    Figure("accepted_units_per_capacity_gpu_month", ECONOMICS_SIZING, COUNT,
           glossary="accepted units per capacity GPU-month", old_names=("useful_work_per_gpu_month",)),
    Figure("required_gpu_capacity", ECONOMICS_SIZING, GPUS,
           "target per month / accepted units per capacity GPU-month, where accepted units per capacity GPU-month = "
           "accepted units / (capacity GPU-hours / 730): measured after failures, idle, retries and unavailability.",
           prom="economics_required_gpus",
           prom_help="GPUs needed for the target at the measured accepted units per capacity GPU-month."),
    Concept("node_loss_what_if", ECONOMICS,
            "A node lost mid-run costs the work of the run on it since its start (the mean GPU-hours of the "
            "partition's attempts, halved: lost at a uniformly random moment) plus its restart: the restore time x "
            "the mean GPUs of an attempt. The restore time is the median checkpoint_read seconds the acceptance "
            "storage job measured on the partition (results_dir), else the partition's expect_restore_seconds."),
    Concept("refusals", ECONOMICS,
            "Jobs the submit policy rejected: one `gpuclust-policy-reject v1` line each in slurmctld's log (rotated "
            "files included), counted by rule, account (the job's, else the user's default), user and partition. "
            "Lines not written by gpuclust are ignored and counted."),
    Concept("pending_reason_wait", ECONOMICS,
            "Queue wait (Start - Eligible) of attempts started in the period, by the pending reason sacct keeps: "
            "priority, resources, quota (AssocGrp*, AssocMax*, QOSGrp*, QOSMax*), dependency, held, other. sacct "
            "keeps only the LAST reason of a job, and Slurm 22.05 resets it to None once the job starts: a started "
            "job then shows as 'none (not kept)'."),
    # economics rows' utilisation_weighted ([telemetry] weigh_useful); defined by gpu_use.completed_run_busy_gpu_hours
    Figure("completed_run_gpu_hours", ECONOMICS_WEIGHTED, GPU_HOURS, old_names=("useful_gpu_hours",)),
    Figure("completed_run_busy_gpu_hours", ECONOMICS_WEIGHTED, GPU_HOURS, old_names=("useful_busy_gpu_hours",)),
    Figure("total_cost_per_completed_run_busy_gpu_hour", ECONOMICS_WEIGHTED, MONEY,
           old_names=("cost_per_useful_busy_gpu_hour",)),
    # ---- lemon nodes (figures/lemon.py) ----------------------------------------------------------------------
    Concept("rule", LEMON,
            "Per node and UTC hour (the hour a job's End falls in; [lemon] failure_window), over the GPU jobs that "
            "ended in the period on the node: node_fail when one ended NODE_FAIL; shared_exit when at least 2 jobs "
            "of at least 2 users ([lemon] min_shared_jobs, min_shared_users) ended "
            "and every one with a non-zero exit (FAILED, or a non-zero ExitCode other than CANCELLED, TIMEOUT, "
            "PREEMPTED): one user's failing array on a node is that user's bug, never node-level; xid and ecc when "
            "telemetry saw an Xid or an uncorrectable ECC error on the node's GPUs during one of them."),
    Figure("failures", LEMON, COUNT,
           "The node's failure hours: hours with node_fail, shared_exit, xid or ecc (each hour once).",
           prom="lemon_failures", prom_help="Failure hours of the node's production jobs in the period.",
           label="Failure hours"),
    Figure("node_fail", LEMON, COUNT, label="Node-fail hours"),
    Figure("shared_exit", LEMON, COUNT, label="Shared non-zero exit hours"),
    Figure("xid", LEMON, COUNT, label="Xid hours"),
    Figure("ecc", LEMON, COUNT, label="ECC (DBE) hours"),
    Figure("gpu_hours", LEMON, GPU_HOURS,
           "GPU-hours allocated on the node: each job's GPUs x Elapsed / its nodes.",
           prom="lemon_gpu_seconds", prom_help="GPU time allocated on the node in the period (GPU-hours x 3600).",
           prom_scale=PROM_SCALE_GPU_SECONDS),
    Figure("failures_per_gpu_hour", LEMON, RATIO, "failures / gpu_hours.", label="Failures per GPU-hour"),
    Figure("partition_failures_per_gpu_hour", LEMON, RATIO,
           "The pooled rate: failures / GPU-hours over every node of the node's partition (the partition it gave "
           "most GPU-hours to).", label="Partition failures per GPU-hour"),
    Figure("expected_failures", LEMON, COUNT, "partition_failures_per_gpu_hour x gpu_hours.",
           label="Expected failures"),
    Figure("p_value", LEMON, RATIO,
           "One-sided Poisson test: P(X >= failures) for X ~ Poisson(expected_failures).", label="p-value"),
    Figure("p_adjusted", LEMON, RATIO, "p_value after Holm's step-down correction over every judged node (with "
           "GPU-hours, and at least [lemon] min_jobs and min_gpu_hours); 1 for a node not judged.",
           label="Holm-corrected p-value", prom="lemon_p_adjusted",
           prom_help="Holm-corrected one-sided Poisson p-value of the node's failures against its partition."),
    Figure("suspect", LEMON, FLAG,
           "A lemon: p_adjusted under the alpha ([lemon] alpha, 0.01 by default), at least min_failures (3 by "
           "default) failures and a rate above the pooled one. A node with more jobs at the same rate is never one.",
           label="Lemon",
           prom="lemon_suspect", prom_help="1 when the node fails production jobs beyond chance (a lemon)."),
    Figure("mttf_hours", LEMON_FLEET, HOURS,
           "Mean time to failure: run hours (Elapsed) of the GPU jobs / those of them that failed for a node-level "
           "cause (ended NODE_FAIL, or failed in one of their node's failure hours); unknown with none.",
           prom="lemon_mttf_seconds", prom_help="Mean time to failure of the GPU jobs (run seconds per node-level "
           "failure).", prom_scale=3600.0),
    Figure("ettr", LEMON_FLEET, RATIO,
           "Effective training time ratio (Meta, arXiv 2410.21680): productive run time / wall-clock time, "
           "E[ETTR] = 1 - (restore_seconds + checkpoint_interval_seconds / 2) / MTTF, at least 0. restore_seconds: "
           "the median checkpoint restore the acceptance storage job measured, else the partitions' "
           "expect_restore_seconds, else [lemon] default_restore_seconds (600 s); checkpoint_interval_seconds: "
           "[lemon] checkpoint_interval (3600 s).",
           prom="lemon_ettr_ratio", prom_help="Effective training time ratio at the fleet's MTTF."),
    Figure("mttf_hours", LEMON_SIZES, HOURS, prom="lemon_mttf_seconds",
           prom_help="Mean time to failure of the GPU jobs of this size (GPUs).", prom_scale=3600.0),
    Figure("ettr", LEMON_SIZES, RATIO, prom="lemon_ettr_ratio",
           prom_help="Effective training time ratio of the GPU jobs of this size (GPUs)."),
)

FIGURES: tuple[Figure, ...] = tuple(e for e in ENTRIES if isinstance(e, Figure))
CONCEPTS: tuple[Concept, ...] = tuple(e for e in ENTRIES if isinstance(e, Concept))
_BY_PLACE: dict[tuple[str, str], Figure] = {(f.place, f.name): f for f in FIGURES}


# ---- readers --------------------------------------------------------------------------------------------------


def figure(place: str, name: str) -> Figure:
    """The figure `name` of `place` (KeyError naming it when there is none)."""
    try:
        return _BY_PLACE[(place, name)]
    except KeyError:
        raise KeyError(f"no figure {name!r} in {place!r} in the catalogue") from None


def figures(*places: str) -> tuple[Figure, ...]:
    """The figures of `places` (all when none given), in catalogue order."""
    return tuple(f for f in FIGURES if not places or f.place in places)


def definitions(section: str = REPORT) -> dict[str, str]:
    """The definitions of one definition section (REPORT, TREND, GPU_USE, ECONOMICS), keys without its prefix,
    in catalogue order: report.json's `definitions` holds the report's, then each other section's that the
    report has, its keys prefixed (DEFINITION_PREFIX)."""
    out: dict[str, str] = {}
    for entry in ENTRIES:
        text = entry.definition
        if text is None or DEFINITION_SECTIONS[entry.place] != section:
            continue
        out[entry.name if isinstance(entry, Figure) else entry.key] = text
    return out


def aliases(*places: str) -> dict[str, str]:
    """Old name -> current name of the figures of `places` (in catalogue order), as written there."""
    out: dict[str, str] = {}
    for f in figures(*places):
        for old in f.old_names:
            out[old] = f.name
    return out


def aliases_from(place: str) -> Iterator[tuple[str, Figure]]:
    """(old name, figure of another place) for each old name written in `place` with another place's value."""
    for f in FIGURES:
        for where, old in f.old_places:
            if where == place:
                yield old, f


def prom_families(f: Figure) -> tuple[str, ...]:
    """The family suffixes a figure's value is written to: the whole cluster (unless its place writes
    breakdowns only), then one per breakdown."""
    if f.prom is None:
        return ()
    dims = PROM_BREAKDOWNS.get(f.place, ())
    whole = () if f.place in BREAKDOWNS_ONLY else (f.prom,)
    return (*whole, *(f"{dim}_{f.prom}" for dim in dims))


def prom_aliases() -> dict[str, str]:
    """Old family suffix -> current suffix, over every figure with an old_prom."""
    out: dict[str, str] = {}
    for f in FIGURES:
        if f.old_prom is None or f.prom is None:
            continue
        out[f.old_prom] = f.prom
        for dim in f.old_prom_breakdowns:
            out[f"{dim}_{f.old_prom}"] = f"{dim}_{f.prom}"
    return out


def labels() -> dict[str, str]:
    """Column name -> page label, for every figure that has a label (a column's name is its figure's name in
    whichever table it appears)."""
    return {f.name: f.label for f in FIGURES if f.label is not None}


def show_columns() -> tuple[Figure, ...]:
    """`report show`'s group columns, in their order."""
    return tuple(sorted((f for f in FIGURES if f.show is not None), key=lambda f: f.show_rank))
