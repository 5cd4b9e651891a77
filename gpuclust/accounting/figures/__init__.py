"""Stage 3, figures: every number of the report, computed from ingest's table (read fresh or from history).

`metrics/` has the runs, attempts and waits; `economics` the unit economics (capacity, idle, cost per completed
run); `gpuuse` and `telemetry` the busy and held-idle GPU-hours with their coverage; `trend` compares periods
from the store; `partitioned` builds a report larger than memory from the store, bucket by bucket;
`jobfilter` is `--user/--account/--partition`. Nothing here writes a file or formats a figure for a reader.
"""
