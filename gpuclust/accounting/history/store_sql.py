"""The headline figures of the store in SQL, for engines other than gpuclust (README.md, "The store").

The one copy of this SQL: README.md quotes these strings verbatim and tests/unit/test_store_engines.py runs
exactly them with DuckDB over a store `report fetch` wrote, and checks them against `report build`.

Every query reads a relation named `store`: the Parquet files under `<state_dir>/accounting/current/` with Hive
partitioning (columns `cluster` and `day`), e.g. in DuckDB::

    CREATE VIEW store AS SELECT * FROM read_parquet('/var/lib/gpuclust/accounting/current/**/*.parquet',
                                                    hive_partitioning = true);

`LATEST` then defines `latest`: one row per execution in its latest state, the rule of store.latest_state (a
job seen by several windows or fetches, a pending row whose job started later). The figure queries read
`latest` and a window given once in `params` (UTC, `until` exclusive; replace the two literals). The session
time zone must be UTC (DuckDB `SET TimeZone = 'UTC'`, Spark `spark.sql.session.timeZone=UTC`, Trino
`SET TIME ZONE 'UTC'`): the stored times are UTC instants and the days are UTC days.

The SQL is DuckDB's, and runs on Trino as it is (`date_diff('second', a, b)`, `greatest`, `least`); on Spark
write `timestampdiff(SECOND, a, b)` for `date_diff('second', a, b)` and `` `end` `` for `"end"`.

Figure names are the GPU-hours glossary's (shared/gpu-hours-glossary.md): allocated = GPUs x the part of
Start..End inside the window (a row still running counts up to the window's end), as report.json
`economics` `allocated_gpu_hours`. completed-run and retry / failure need gpuclust's run logic (resubmissions
matched by name, requeues, array tasks, het jobs): they are in report.json, not here.
"""

from __future__ import annotations

# One row per execution (cluster, JobIDRaw, Start) in its latest state: the latest fetch, then the latest day
# (the window it was fetched in). A pending row (no Start) goes once any stored row shows its job started.
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
SELECT r.*
FROM ranked r
LEFT JOIN started s ON r.start IS NULL AND s.cluster = r.cluster AND s.job_id_raw = r.job_id_raw
WHERE r.rank_in_execution = 1 AND s.job_id_raw IS NULL"""

# allocated GPU-hours by cluster, account and UTC day of the window: each row's GPUs x the part of its
# Start..End inside the day (a row still running: up to the window's end).
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
  SELECT l.cluster, l.account, d.day, l.gpus,
         greatest(l.start, d.day_start) AS span_start,
         least(coalesce(l."end", p.until), d.day_end, p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  JOIN days d ON l.start < d.day_end AND coalesce(l."end", p.until) > d.day_start
  WHERE l.gpus > 0
)
SELECT cluster, account, day,
       sum(gpus * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours
FROM spans
WHERE span_end > span_start
GROUP BY cluster, account, day
ORDER BY cluster, account, day"""

# allocated GPU-hours by cluster and partition over the whole window (report.json economics.by_partition).
ALLOCATED_BY_PARTITION = """\
WITH params AS (
  SELECT TIMESTAMP '2026-12-02 00:00:00' AS since, TIMESTAMP '2026-12-04 00:00:00' AS until
),
spans AS (
  SELECT l.cluster, l.partition, l.gpus,
         greatest(l.start, p.since) AS span_start,
         least(coalesce(l."end", p.until), p.until) AS span_end
  FROM latest l
  CROSS JOIN params p
  WHERE l.gpus > 0 AND l.start < p.until AND coalesce(l."end", p.until) > p.since
)
SELECT cluster, partition,
       sum(gpus * date_diff('second', span_start, span_end)) / 3600.0 AS allocated_gpu_hours
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
