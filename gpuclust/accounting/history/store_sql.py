"""The headline figures of the store in SQL, for engines other than gpuclust (README.md, "The store").

The one copy of this SQL: README.md quotes these strings verbatim and tests/unit/test_store_engines.py (whole GPUs)
and tests/unit/test_store_sql_gpu_equivalents.py (MIG slices, shards, MPS) run exactly them with DuckDB over a
store `report fetch` wrote, and check them against `report build`.

Every query reads a relation named `store`: the Parquet files under `<state_dir>/accounting/current/` with Hive
partitioning (columns `cluster` and `day`) and their columns matched by name (a day of an older layout version
lacks the newer columns: null there), e.g. in DuckDB::

    CREATE VIEW store AS SELECT * FROM read_parquet('/var/lib/gpuclust/accounting/current/**/part.parquet',
                                                    hive_partitioning = true, union_by_name = true);

(Spark: `mergeSchema`; Trino's Hive connector maps Parquet columns by name.) The figures read the columns
`alloc_gpu_equivalents` and `gpu_share_unknown` of store version 5: a store only an older gpuclust fetched into has
neither (DuckDB then names the column): the next `report fetch` writes them.

`LATEST` then defines `latest`: one row per execution in its latest state, the rule of store.latest_state (a
job seen by several windows or fetches, a pending row whose job started later). The figure queries read
`latest` and a window given once in `params` (UTC, `until` exclusive; replace the two literals). The session
time zone must be UTC (DuckDB `SET TimeZone = 'UTC'`, Spark `spark.sql.session.timeZone=UTC`, Trino
`SET TIME ZONE 'UTC'`): the stored times are UTC instants and the days are UTC days.

The SQL is DuckDB's, and runs on Trino as it is (`date_diff('second', a, b)`, `greatest`, `least`); on Spark
write `timestampdiff(SECOND, a, b)` for `date_diff('second', a, b)` and `` `end` `` for `"end"`.

Figure names are the GPU-hours glossary's (shared/gpu-hours-glossary.md): allocated = GPU-equivalents x the part
of Start..End inside the window (a row still running counts up to the window's end), as report.json
`economics` `allocated_gpu_hours`. A row's GPU-equivalents (`latest`'s column `gpu_equivalents`) are those `report fetch`
stored, computed as the report computes them (MIG slices, shards and MPS as shares of one physical GPU: the node
inventory the fetch read, the site's [gpu_type] gpu_share and [partition] shards_per_gpu); in a day written before
store version 5 (both columns null) the `gpus` column where AllocTRES names no MIG profile (`Ng.Mgb`), shard or
MPS, else unknown (a type the site names its own way, or an untyped GPU count on a MIG node, cannot be told from
AllocTRES there: re-fetch such days). An unknown share is never counted as a whole GPU: its row is left out of
allocated and counted in `unknown_share_rows` (report.json input.unknown "GPU share"). completed-run and retry /
failure need gpuclust's run logic (resubmissions matched by name, requeues, array tasks, het jobs): they are in
report.json, not here.
"""

from __future__ import annotations

# One row per execution (cluster, JobIDRaw, Start) in its latest state: the latest fetch, then the latest day
# (the window it was fetched in). A pending row (no Start) goes once any stored row shows its job started.
# gpu_equivalents: the row's GPUs in GPU-equivalents, null where unknown (the module's docstring).
LATEST = """\
CREATE VIEW latest AS
WITH ranked AS (
  SELECT *,
         row_number() OVER (PARTITION BY cluster, job_id_raw, start
                            ORDER BY fetched_at DESC, day DESC) AS rank_in_execution
  FROM store
),
started AS (
  SELECT DISTINCT cluster, job_id_raw FROM store WHERE start IS NOT NULL
)
SELECT r.*,
       CASE WHEN r.alloc_gpu_equivalents IS NOT NULL THEN r.alloc_gpu_equivalents
            WHEN r.gpu_share_unknown IS NULL AND lower(r.alloc_tres) NOT LIKE '%gres/gpu:%g.%gb%'
                 AND r.alloc_tres NOT LIKE '%gres/shard%' AND r.alloc_tres NOT LIKE '%gres/mps%'
            THEN CAST(r.gpus AS DOUBLE) END AS gpu_equivalents
FROM ranked r
LEFT JOIN started s ON r.start IS NULL AND s.cluster = r.cluster AND s.job_id_raw = r.job_id_raw
WHERE r.rank_in_execution = 1 AND s.job_id_raw IS NULL"""

# allocated GPU-hours by cluster, account and UTC day of the window: each row's GPU-equivalents x the part of its
# Start..End inside the day (a row still running: up to the window's end); the rows of unknown share counted.
ALLOCATED_BY_ACCOUNT_DAY = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
),
days AS (
  SELECT DISTINCT day, CAST(day AS TIMESTAMP) AS day_start,
         CAST(day AS TIMESTAMP) + INTERVAL '1' DAY AS day_end
  FROM store, params
  WHERE CAST(day AS TIMESTAMP) >= params.since AND CAST(day AS TIMESTAMP) < params.until
),
spans AS (
  SELECT l.cluster, l.account, d.day, l.gpu_equivalents,
         greatest(l.start, d.day_start) AS span_start,
         least(coalesce(l."end", p.until), d.day_end, p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  JOIN days d ON l.start < d.day_end AND coalesce(l."end", p.until) > d.day_start
  WHERE l.gpu_equivalents > 0 OR l.gpu_equivalents IS NULL
)
SELECT cluster, account, day,
       sum(gpu_equivalents * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours,
       count(*) - count(gpu_equivalents) AS unknown_share_rows
FROM spans
WHERE span_end > span_start
GROUP BY cluster, account, day
ORDER BY cluster, account, day"""

# allocated GPU-hours by cluster and partition over the whole window (report.json economics.by_partition); the rows
# of unknown share counted.
ALLOCATED_BY_PARTITION = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
),
spans AS (
  SELECT l.cluster, l.partition, l.gpu_equivalents,
         greatest(l.start, p.since) AS span_start,
         least(coalesce(l."end", p.until), p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  WHERE (l.gpu_equivalents > 0 OR l.gpu_equivalents IS NULL) AND l.start < p.until AND coalesce(l."end", p.until) > p.since
)
SELECT cluster, partition,
       sum(gpu_equivalents * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours,
       count(*) - count(gpu_equivalents) AS unknown_share_rows
FROM spans
GROUP BY cluster, partition
ORDER BY cluster, partition"""

# Attempts that ended in the window (report.json totals.attempts): rows with an allocation that started and
# ended, the components of a het job (JobID 123+0, 123+1) counted as one attempt.
ATTEMPTS = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
)
SELECT l.cluster,
       count(DISTINCT CASE WHEN l.het_offset IS NULL THEN 'j' || CAST(l.job_id_raw AS VARCHAR)
                           ELSE 'h' || CAST(l.job_base AS VARCHAR) END
                      || '@' || CAST(l.start AS VARCHAR)) AS attempts
FROM latest l
CROSS JOIN params p
WHERE l.alloc_tres <> '' AND l.start IS NOT NULL AND l."end" >= p.since AND l."end" < p.until
GROUP BY l.cluster
ORDER BY l.cluster"""

# The figure queries by name (README.md order).
FIGURES: dict[str, str] = {
    "allocated_by_account_day": ALLOCATED_BY_ACCOUNT_DAY,
    "allocated_by_partition": ALLOCATED_BY_PARTITION,
    "attempts": ATTEMPTS,
}

__all__ = ["ALLOCATED_BY_ACCOUNT_DAY", "ALLOCATED_BY_PARTITION", "ATTEMPTS", "FIGURES", "LATEST"]
