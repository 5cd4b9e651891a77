"""`report build --user/--account/--partition`: the filter stage, between the deduplicated rows and the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class JobFilter:
    """`report build --user/--account/--partition`: only these jobs (empty: any). A filtered report leaves
    the unit economics out: capacity and idle belong to the whole partition, not to a part of its jobs."""

    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.users or self.accounts or self.partitions)

    def apply(self, table: pa.Table) -> pa.Table:
        mask = None
        for column, wanted in (("user", self.users), ("account", self.accounts), ("partition", self.partitions)):
            if not wanted:
                continue
            col = table.column(column)
            if pa.types.is_dictionary(col.type):
                col = col.cast(col.type.value_type)
            one = pc.is_in(col, pa.array(list(wanted), pa.string()))
            mask = one if mask is None else pc.and_(mask, one)
        return table if mask is None else table.filter(pc.fill_null(mask, False))

    def note(self, info: dict[str, Any], filtered_out: int) -> None:
        """Say in the report's input section (`info`) what was filtered, and that the economics are left out."""
        info["filtered_out"] = filtered_out
        info["only"] = self.describe()
        info.setdefault("notes", []).append("Filtered to " + ", ".join(
            f"{k} {', '.join(v)}" for k, v in self.describe().items() if v) + ": the unit economics (capacity, "
            "idle) are left out, they belong to whole partitions.")

    def describe(self) -> dict[str, list[str]]:
        return {"users": list(self.users), "accounts": list(self.accounts), "partitions": list(self.partitions)}
