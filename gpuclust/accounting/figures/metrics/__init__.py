"""Metrics over normalized accounting rows: attempts, runs, queue wait, cost, sizing.

The definitions (``DEFINITIONS``) are printed on the report page; this module implements them exactly.

A million rows must take well under a second, so the row-level work is numpy over integer codes: string
columns become dictionary codes once, groups are sorts and ``reduceat``/``bincount`` over those codes, and
strings are only looked at per distinct value. The results are pandas DataFrames (one per report table).
The only Python loop is the resubmission matcher for the rare groups of same-named jobs that overlap in
time (``_exact_runs``).
"""


from __future__ import annotations

from gpuclust.accounting.figures.metrics.assembly import (  # noqa: F401
    BUCKETS,
    _plain,
    assemble_report,
    build_report,
    check_target,
    no_gpu_accounted,
    note_no_gpu,
    records,
    rows_accounted,
    run_tables,
    sizing,
    top_failures,
)
from gpuclust.accounting.figures.metrics.attempts import (  # noqa: F401
    _BUFFER_TYPES,
    LEFT_OUT_WHY,
    Attempts,
    Coded,
    _ints,
    _job_key,
    _merge_het,
    _numbers,
    _values,
    allocated_mask,
    attempts,
    coded,
    left_out_counts,
    price_table,
)
from gpuclust.accounting.figures.metrics.definitions import (  # noqa: F401
    DEFAULT_TOP,
    DEFINITIONS,
    GPU_MONTH_HOURS,
    GROUP_COLUMNS,
    NONE_LABEL,
    PARALLEL_MIN_ATTEMPTS,
    WAIT_COLUMNS,
    Report,
)
from gpuclust.accounting.figures.metrics.runs import (  # noqa: F401
    REQUEUE_GAP_S,
    SUM_FIELDS,
    Runs,
    _exact_runs,
    _groups,
    _raw_sums,
    _split_reused_ids,
    assign_runs,
    group_table,
    label_names,
    run_sums,
    runs_of,
    totals,
)
from gpuclust.accounting.figures.metrics.waits import (  # noqa: F401
    KnownValues,
    _quantile_sorted,
    _sorted_by_group,
    wait_table,
    wait_tables,
)
