"""Stage 2, history: what was fetched and kept between runs.

`fetch` runs sacct for a window and hands the text to ingest; `store` writes and `storeread` reads the Parquet
day files (`store_sql` is the same figures in SQL for other engines); `events` reads node events and the node
inventory, `refusals` the submit policy's refusal log, `sources` gathers what the unit economics read besides
the jobs (events, refusals, the restore times acceptance measured).
"""
