"""The README's DuckDB session over a store (README "The store", gpuclust/accounting/history/store_sql.py): the
tests that run store_sql's figures share it, so they run exactly what the README tells a site to run."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

# store_sql's queries give their window once, in `params`, as these two literals (README: "replace the two literals")
README_SINCE, README_UNTIL = "2026-12-02 00:00:00", "2026-12-04 00:00:00"


def readme_session(current: Path) -> Any:
    """A DuckDB connection in UTC with the view `store` over `current`'s day files and store_sql.LATEST's `latest`."""
    import duckdb

    from gpuclust.accounting.history import store_sql

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"CREATE VIEW store AS SELECT * FROM read_parquet('{current}/**/part.parquet', hive_partitioning = true, "
                "union_by_name = true)")
    con.execute(store_sql.LATEST)
    return con


def in_window(sql: str, since: datetime | str, until: datetime | str) -> str:
    """A store_sql query with its window set to since..until (UTC)."""
    def text(t: datetime | str) -> str:
        return t if isinstance(t, str) else t.strftime("%Y-%m-%d %H:%M:%S")

    return sql.replace(README_SINCE, text(since)).replace(README_UNTIL, text(until))
