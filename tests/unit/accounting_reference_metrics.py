"""The pandas implementation of the accounting metrics that gpuclust.accounting.figures.metrics replaced, kept as
the oracle for tests/unit/test_accounting_metrics_equivalence.py (row-by-row pandas grouping, the JobID as
a string, every group table over all runs). Its shared, non-computational pieces (the report's assembly from its
tables, the exact resubmission matcher) are imported from the module under test.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures.metrics import (
    DEFAULT_TOP,
    GROUP_COLUMNS,
    WAIT_COLUMNS,
    Report,
    _exact_runs,
    assemble_report,
)
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import TIME_COLUMNS
from gpuclust.config import SiteConfig

NONE_LABEL = "(none)"


# ---- frames --------------------------------------------------------------------------------------------


# The run figures that are the sums of their attempts' own, computed per attempt below (`attempts`): a new one is
# computed there and named here, and every per-run, per-group and total step sums it.
RUN_SUMS = ("gpu_hours", "unpriced_gpu_hours", "gpu_device_hours")


def to_frame(table: pa.Table) -> pd.DataFrame:
    """Arrow -> pandas with times as float epoch seconds (NaN = unknown), cheap to subtract and compare."""
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        if name in TIME_COLUMNS or name == "fetched_at":
            cols[name] = pc.cast(pc.cast(col, pa.int64()), pa.float64())
        else:
            cols[name] = col
    # Categoricals make the many groupby/sort/take steps on string columns cheap.
    return pa.table(cols).to_pandas(strings_to_categorical=True)


# The columns the metrics read; the rest (free text such as NodeList and AllocTRES, line numbers...) are
# dropped before the pandas conversion, which is where most of the memory and time would go.
USED_COLUMNS = (
    "job_id", "job_base", "array_task", "het_offset", "job_name", "user", "account", "partition", "qos", "wckey",
    "comment", "state", "exit_code", "exit_signal", "exit_code_known", "submit", "eligible", "start", "end",
    "elapsed_s", "gpus", "gpu_type", "nodelist",
)


def allocated_mask(table: pa.Table) -> pa.ChunkedArray:
    """Rows that got an allocation. sacct gives a job cancelled while pending Start = End = the cancel time,
    but no allocation (AllocTRES empty, NodeList "None assigned", in text and JSON alike): it never started,
    so it is no attempt, and its "queue wait" would be a fiction."""
    alloc = table.column("alloc_tres")
    return pc.fill_null(pc.greater(pc.utf8_length(alloc), 0), False)


def attempts_frame(table: pa.Table, config: SiteConfig) -> pd.DataFrame:
    """One row per attempt (het components merged) with gpu_hours, cost, waits and the run key fields."""
    allocated = allocated_mask(table)
    # Select before filtering: the unused free-text columns (NodeList, AllocTRES...) are never copied.
    table = table.select([c for c in table.column_names if c in USED_COLUMNS]).filter(allocated)
    # job_id is (nearly) unique per row: as a categorical it would cost more than all other columns together.
    # It stays a plain string; only its categorical sort order (first appearance) is kept, as an integer.
    df = to_frame(table.drop_columns(["job_id"]))
    job_id = table.column("job_id").combine_chunks()
    df["job_id"] = job_id.to_pandas()
    df = df[df["start"].notna() & df["end"].notna()].copy()
    if not df["het_offset"].notna().any():
        # Only used without het jobs (see below); hashing a million ids is not free. Same column, same place.
        order = pc.dictionary_encode(job_id).indices.to_numpy(zero_copy_only=False)
        df.insert(list(df.columns).index("job_id") + 1, "job_id_order", order[df.index.to_numpy()])
    part_type = {name: p.gpu_type for name, p in config.partitions.items() if p.gpu_type}
    gtype = df["gpu_type"].astype(object).where(df["gpu_type"].notna(), df["partition"].map(part_type))
    df["gpu_type_eff"] = gtype
    df["gpu_hours"] = df["elapsed_s"].astype(float) * df["gpus"].astype(float) / 3600.0
    # device-hours: GPU GRES devices x Elapsed (the reference's inputs have whole GPUs only: the same product)
    df["gpu_device_hours"] = df["elapsed_s"].astype(float) * df["gpus"].astype(float) / 3600.0
    # The price of each distinct (GPU type, partition) pair, taken to the rows by integer codes (a merge on
    # the two string columns would hash a million rows twice).
    t_codes, t_values = pd.factorize(df["gpu_type_eff"])
    p_codes, p_values = pd.factorize(df["partition"])
    width = len(p_values) + 1  # codes shifted by one: 0 is a missing value
    pair = (t_codes.astype(np.int64) + 1) * width + (p_codes.astype(np.int64) + 1)
    uniq, inverse = np.unique(pair, return_inverse=True)
    prices = pd.Series([
        config.price_per_gpu_hour(_str_or_none(t_values, int(u) // width), _str_or_none(p_values, int(u) % width))
        for u in uniq
    ]).astype(float).to_numpy()
    df = df.reset_index(drop=True)
    df["price"] = prices[inverse.reshape(-1)]
    df["cost"] = df["gpu_hours"] * df["price"]
    df["unpriced_gpu_hours"] = np.where(df["price"].isna(), df["gpu_hours"], 0.0)

    het = df["het_offset"].notna()
    if het.any():
        # Merged het leads carry a plain-string job_id, which made the whole column plain strings (so sorted
        # as text) before job_id was taken out of the categoricals: no first-appearance order then (the
        # job_id_order column is not made at all).
        h = df[het]
        keys = [h["job_base"], h["start"]]
        sums = h.groupby(keys, sort=False)[[*RUN_SUMS, "gpus"]].sum()
        cost = h.groupby(keys, sort=False)["cost"].sum(min_count=1)
        lead = h.sort_values("het_offset", kind="stable").drop_duplicates(["job_base", "start"]).copy()
        idx = pd.MultiIndex.from_arrays([lead["job_base"], lead["start"]])
        for col in (*RUN_SUMS, "gpus"):
            lead[col] = sums[col].reindex(idx).to_numpy()
        lead["cost"] = cost.reindex(idx).to_numpy()
        lead["job_id"] = lead["job_base"].astype("int64").astype(str)
        df = pd.concat([df[~het], lead])

    # Rule (a): the JobID without a het suffix identifies the requeued executions of one job.
    df["job_key"] = df["job_id"].astype(str)
    exit_ok = (df["exit_code"] == 0) & (df["exit_signal"] == 0)
    df["done"] = (df["state"] == "COMPLETED") & (exit_ok | ~df["exit_code_known"].astype(bool))
    df["wait_s"] = df["start"] - df["eligible"].fillna(df["submit"])
    df["hold_s"] = df["eligible"] - df["submit"]
    df = df.reset_index(drop=True)
    df["job_key_rank"] = key_rank(df["job_key"])
    return df


def _str_or_none(values: Any, shifted_code: int) -> str | None:
    """values[code] for a factorize code shifted by +1 (0 = missing); None unless a string."""
    value = values[shifted_code - 1] if shifted_code > 0 else None
    return value if isinstance(value, str) else None


def key_rank(keys: pd.Series) -> np.ndarray:
    """Dense rank of each string in sorted (code point) order: sorting, grouping and matching on these
    integers gives the same order and groups as on the strings, without string comparisons."""
    if keys.isna().any():
        raise ValueError("job keys must not be null")
    arr = pa.array(keys.astype(object).to_numpy() if keys.dtype == object else keys, pa.large_string())
    return np.asarray(pc.rank(arr, sort_keys="ascending", tiebreaker="dense").to_numpy(), dtype=np.int64)


def _with_key_rank(att: pd.DataFrame) -> pd.DataFrame:
    """`att` with job_key replaced by its rank (the order and equality of the strings, as integers)."""
    rank = att["job_key_rank"].to_numpy() if "job_key_rank" in att.columns else key_rank(att["job_key"])
    return att.assign(job_key=rank)


# ---- runs ----------------------------------------------------------------------------------------------


_RUN_INPUTS = ("job_key", "job_key_rank", "start", "submit", "user", "account", "job_name", "array_task", "end", "done")


def assign_runs(att: pd.DataFrame, retry_window_s: float) -> pd.Series:
    """Run id of every attempt (index-aligned with `att`)."""
    if att.empty:
        return pd.Series([], dtype="int64", index=att.index)
    att = _with_key_rank(att[[c for c in _RUN_INPUTS if c in att.columns]])
    a = sort_stable(att, ["job_key", "start"])
    first = a.drop_duplicates("job_key", keep="first").set_index("job_key")
    last = a.drop_duplicates("job_key", keep="last").set_index("job_key")
    units = pd.DataFrame(
        {
            "submit": a.groupby("job_key", sort=True)["submit"].min(),
            "user": first["user"],
            "account": first["account"],
            "name": first["job_name"],
            "task": first["array_task"].fillna(-1),
            "end": last["end"],
            "done": last["done"],
        }
    )
    units["submit"] = units["submit"].fillna(first["start"])
    units = sort_stable(units.reset_index(), ["user", "account", "name", "task", "submit", "job_key"])
    gid = units.groupby(["user", "account", "name", "task"], sort=False, dropna=False, observed=True).ngroup().to_numpy()
    submit = units["submit"].to_numpy(dtype=float)
    end = units["end"].to_numpy(dtype=float)
    done = units["done"].to_numpy(dtype=bool)
    n = len(units)
    same = np.zeros(n, dtype=bool)
    same[1:] = gid[1:] == gid[:-1]
    prev_end = np.r_[np.nan, end[:-1]]
    prev_done = np.r_[True, done[:-1]]
    cont = same & ~prev_done & (submit > prev_end) & (submit - prev_end <= retry_window_s)
    # Overlap: a unit submitted before an earlier unit of its group ended. There the previous unit need not
    # be the run's latest attempt, so those groups go through the exact matcher.
    grp_max_end = pd.Series(end).groupby(gid).cummax().to_numpy()
    prev_max = np.r_[np.nan, grp_max_end[:-1]]
    overlap_unit = same & (submit <= prev_max)
    run = np.cumsum(~cont)
    if overlap_unit.any():
        bad_groups = np.unique(gid[overlap_unit])
        next_id = int(run.max()) + 1
        for g in bad_groups:
            idx = np.flatnonzero(gid == g)
            ids, next_id = _exact_runs(submit[idx], end[idx], done[idx], retry_window_s, next_id)
            run[idx] = ids
    unit_run = pd.Series(run, index=units["job_key"].to_numpy())
    return att["job_key"].map(unit_run).astype("int64")


_RUNS_FRAME_INPUTS = ("run", "start", "job_key", "job_key_rank", "account", "partition", "wckey", "user", "job_name",
                      "job_id", "cost", "end", "done", "comment", *RUN_SUMS)


def runs_frame(att: pd.DataFrame, labels: tuple[str, ...], config: SiteConfig) -> pd.DataFrame:
    a = _with_key_rank(att[[c for c in _RUNS_FRAME_INPUTS if c in att.columns]])
    a = sort_stable(a, ["run", "start", "job_key"])
    g = a.groupby("run", sort=True)
    first = a.drop_duplicates("run", keep="first").set_index("run")
    last = a.drop_duplicates("run", keep="last").set_index("run")
    runs = pd.DataFrame(
        {
            "account": first["account"],
            "partition": first["partition"],
            "wckey": first["wckey"],
            "user": first["user"],
            "job_name": first["job_name"],
            "first_job_id": first["job_id"],
            "last_job_id": last["job_id"],
            "attempts": g.size(),
            "cost": g["cost"].sum(min_count=1),
            **{name: g[name].sum() for name in RUN_SUMS},
            "end": last["end"],
            "completed": last["done"],
        }
    )
    runs["completed_run_gpu_hours"] = np.where(runs["completed"], last["gpu_hours"], 0.0)
    runs["wckey"] = _none_if_empty(runs["wckey"])
    for key, values in extract_labels(first["comment"], first["account"], labels, config).items():
        runs[f"label_{key}"] = values
    return runs


def _none_if_empty(values: pd.Series) -> pd.Series:
    """Object values with "" and missing as NONE_LABEL; for a categorical, decided once per category."""
    if not isinstance(values.dtype, pd.CategoricalDtype):
        return values.astype(object).where(values.astype(object).fillna("") != "", NONE_LABEL)
    cats = values.cat.categories.astype(object).to_numpy()
    # Code -1 (missing) takes the last entry.
    mapped = np.array([*(NONE_LABEL if pd.isna(c) or c == "" else c for c in cats), NONE_LABEL], dtype=object)
    return pd.Series(mapped[values.cat.codes.to_numpy()], index=values.index, dtype=object, name=values.name)


def sort_stable(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """``frame.sort_values(by, kind="stable")`` as one numpy lexsort over integer/float keys.

    Categoricals sort by their codes (category order, missing last), as pandas sorts them. Any other key
    type, or a missing float, takes pandas' own sort.
    """
    keys: list[np.ndarray] = []
    for col in by:
        values = frame[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            codes = values.cat.codes.to_numpy().astype(np.int64)
            keys.append(np.where(codes < 0, len(values.cat.categories), codes))
        elif isinstance(values.dtype, np.dtype) and values.dtype.kind in "iu":
            keys.append(values.to_numpy())
        elif isinstance(values.dtype, np.dtype) and values.dtype.kind == "f" and not values.isna().any():
            keys.append(values.to_numpy())
        else:
            return frame.sort_values(by, kind="stable")
    if not keys or len(frame) == 0:
        return frame.sort_values(by, kind="stable")
    return frame.take(_lex_order(keys))


def _lex_order(keys: list[np.ndarray]) -> np.ndarray:
    """Stable lexicographic order of the rows (first key most significant). Integer-valued keys are packed
    into as few int64 words as their ranges allow (63 bits each): one stable argsort, or a lexsort over a
    couple of words, instead of a lexsort over every key."""
    words: list[np.ndarray] = []
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    bits = 0
    for key in keys:
        if key.dtype.kind == "f" and not np.array_equal(key, np.floor(key)):
            return np.lexsort(keys[::-1])
        lo, hi = key.min(), key.max()
        if abs(float(lo)) >= 2**62 or abs(float(hi)) >= 2**62:
            return np.lexsort(keys[::-1])
        shifted = (key - lo).astype(np.int64)
        width = max(1, int(shifted.max()).bit_length())
        if bits + width > 63:
            words.append(packed)
            packed = np.zeros(len(keys[0]), dtype=np.int64)
            bits = 0
        bits += width
        packed = (packed << width) | shifted
    words.append(packed)
    if len(words) == 1:
        return np.argsort(words[0], kind="stable")
    return np.lexsort(words[::-1])


def extract_labels(
    comment: pd.Series, account: pd.Series, keys: tuple[str, ...], config: SiteConfig
) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    if isinstance(comment.dtype, pd.CategoricalDtype) and isinstance(account.dtype, pd.CategoricalDtype):
        return _labels_by_category(comment, account, keys, config)
    arr = pa.array(comment.astype(object).fillna("").to_numpy(), pa.string())
    for key in keys:
        found = pc.struct_field(pc.extract_regex(arr, rf"(?:^|[\s,;]){re.escape(key)}=(?P<v>[^\s,;]*)"), "v")
        values = found.to_numpy(zero_copy_only=False).astype(object)
        fallback = account.astype(object).map({name: acc.labels.get(key) for name, acc in config.accounts.items()})
        missing = pd.isna(values) | (values == "")
        values = np.where(missing, fallback.to_numpy(dtype=object), values)
        out[key] = np.where(pd.isna(values), NONE_LABEL, values).astype(object)
    return out


def _labels_by_category(
    comment: pd.Series, account: pd.Series, keys: tuple[str, ...], config: SiteConfig
) -> dict[str, np.ndarray]:
    """extract_labels computed once per distinct comment and account (a few thousand, not a million rows)."""
    out: dict[str, np.ndarray] = {}
    ccodes = comment.cat.codes.to_numpy()
    acodes = account.cat.codes.to_numpy()
    # Code -1 (missing) picks the last entry: "" for a comment (as fillna("")), None for an account.
    texts = pa.array([*comment.cat.categories.astype(object), ""], pa.string())
    acc_names: list[Any] = [*account.cat.categories.astype(object), None]
    # One label per distinct (comment, account) pair, taken to the rows.
    pair = (ccodes.astype(np.int64) + 1) * (len(acc_names) + 1) + (acodes.astype(np.int64) + 1)
    uniq, inverse = np.unique(pair, return_inverse=True)
    inverse = inverse.reshape(-1)
    u_comment = uniq // (len(acc_names) + 1) - 1
    u_account = uniq % (len(acc_names) + 1) - 1
    for key in keys:
        found = pc.struct_field(pc.extract_regex(texts, rf"(?:^|[\s,;]){re.escape(key)}=(?P<v>[^\s,;]*)"), "v")
        per_comment = found.to_numpy(zero_copy_only=False).astype(object)
        by_account = {name: acc.labels.get(key) for name, acc in config.accounts.items()}
        per_account = np.array([by_account.get(a) if isinstance(a, str) else None for a in acc_names], dtype=object)
        values = per_comment[u_comment]
        missing = pd.isna(values) | (values == "")
        values = np.where(missing, per_account[u_account], values)
        values = np.where(pd.isna(values), NONE_LABEL, values).astype(object)
        out[key] = values[inverse]
    return out


# ---- tables --------------------------------------------------------------------------------------------


def _num(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def group_table(runs: pd.DataFrame, by: str, name: str) -> pd.DataFrame:
    cols = ["runs", "completed", "attempts", "completed_run_gpu_hours", "cost", *RUN_SUMS]
    if runs.empty:
        return pd.DataFrame(columns=[name, *GROUP_COLUMNS])
    r = runs.assign(runs=1, completed=runs["completed"].astype(int))
    g = r.groupby(by, sort=False, dropna=False, observed=True)
    out = g[[c for c in cols if c != "cost"]].sum()
    out["cost"] = g["cost"].sum(min_count=1)
    out = out.reset_index().rename(columns={by: name})
    out[name] = out[name].astype(object).fillna("").astype(str)
    out = out.sort_values(name, kind="stable").reset_index(drop=True)
    return _finish_group(out, name)


def _finish_group(out: pd.DataFrame, name: str) -> pd.DataFrame:
    out["retries"] = out["attempts"] - out["runs"]
    out["cost_per_completed_run"] = np.where(out["completed"] > 0, out["cost"] / out["completed"].where(out["completed"] > 0, 1), np.nan)
    for col in ("completed_run_gpu_hours", "cost", "cost_per_completed_run", *RUN_SUMS):
        out[col] = out[col].astype(float).round(9)
    # The reference computes every column on its own: a new run figure is computed here too.
    missing = [column for column in GROUP_COLUMNS if column not in out.columns]
    assert not missing, f"the reference metrics do not compute {missing}: add them to this module"
    return out[[name, *GROUP_COLUMNS]]


def totals(runs: pd.DataFrame) -> dict[str, Any]:
    completed = int(runs["completed"].sum()) if len(runs) else 0
    cost = _num(runs["cost"].sum(min_count=1)) if len(runs) else None
    attempts = int(runs["attempts"].sum()) if len(runs) else 0
    out = {
        "runs": len(runs),
        "completed": completed,
        "attempts": attempts,
        "retries": attempts - len(runs),
        "gpu_hours": round(float(runs["gpu_hours"].sum()), 9) if len(runs) else 0.0,
        "completed_run_gpu_hours": round(float(runs["completed_run_gpu_hours"].sum()), 9) if len(runs) else 0.0,
        "cost": None if cost is None else round(cost, 9),
        "cost_per_completed_run": None if cost is None or not completed else round(cost / completed, 9),
    }
    # the other summed figures after these, in the order they joined the report
    out.update({name: round(float(runs[name].sum()), 9) if len(runs) else 0.0 for name in RUN_SUMS if name not in out})
    return out


def wait_table(att: pd.DataFrame, by: str, col: str = "wait_s") -> pd.DataFrame:
    d = att[[by, col]].dropna(subset=[col])
    if d.empty:
        return pd.DataFrame(columns=[by, *WAIT_COLUMNS])
    g = d.groupby(by, sort=False, observed=True)[col]
    out = pd.DataFrame(
        {"jobs": g.size(), "median_s": g.quantile(0.5), "p90_s": g.quantile(0.9), "max_s": g.max()}
    ).reset_index()
    out[by] = out[by].astype(object).fillna("").astype(str)
    out = out.sort_values(by, kind="stable").reset_index(drop=True)
    for c in ("median_s", "p90_s", "max_s"):
        out[c] = out[c].astype(float).round(3)
    return out


def top_failures(att: pd.DataFrame, top: int) -> pd.DataFrame:
    # Ties are ordered as the job_id column always sorted: by first appearance while it was a categorical
    # (job_id_order), as text once merged het leads had made it plain strings.
    tie = "job_id_order" if "job_id_order" in att.columns else "job_id"
    f = att[~att["done"]].sort_values(["gpu_hours", "end", tie], ascending=[False, True, True], kind="stable").head(top)
    known = f["exit_code_known"].astype(bool).to_numpy()
    text = (f["exit_code"].astype("Int64").astype(str) + ":" + f["exit_signal"].astype("Int64").astype(str)).to_numpy(dtype=object)
    exit_text = np.where(known, text, np.array([None] * len(f), dtype=object))
    return pd.DataFrame(
        {
            "job_id": f["job_id"].astype(str),
            "user": f["user"],
            "account": f["account"],
            "partition": f["partition"],
            "job_name": f["job_name"],
            "state": f["state"],
            "exit_code": exit_text,
            "gpu_hours": f["gpu_hours"].round(9),
            "cost": f["cost"].round(9),
            "node_list": f["nodelist"].astype(object).fillna(""),
            "start": [None if pd.isna(v) else pd.Timestamp(int(v), unit="s", tz="UTC").isoformat() for v in f["start"]],
        }
    ).reset_index(drop=True)


# ---- the report ----------------------------------------------------------------------------------------


def build_report(
    table: pa.Table,
    config: SiteConfig,
    period: Period,
    *,
    target: float | None = None,
    top: int = DEFAULT_TOP,
    input_info: dict[str, Any] | None = None,
) -> Report:
    att = attempts_frame(table, config)
    att["run"] = assign_runs(att, float(config.retry_window_s))
    labels = tuple(config.report_labels)
    runs = runs_frame(att, labels, config) if len(att) else pd.DataFrame(
        columns=["account", "partition", "wckey", "attempts", "cost", "end", "completed", "completed_run_gpu_hours",
                 *RUN_SUMS, *[f"label_{k}" for k in labels]]
    )
    lo, hi = float(period.start_epoch), float(period.end_epoch)
    runs_p = runs[(runs["end"] >= lo) & (runs["end"] < hi)]
    started_p = att[(att["start"] >= lo) & (att["start"] < hi)]
    ended_p = att[(att["end"] >= lo) & (att["end"] < hi)]

    tables: dict[str, pd.DataFrame] = {}
    for dim in ("partition", "account", "qos"):
        tables[f"queue_wait_by_{dim}"] = wait_table(started_p, dim)
        tables[f"hold_by_{dim}"] = wait_table(started_p, dim, "hold_s")
    tables["runs_by_account"] = group_table(runs_p, "account", "account")
    tables["runs_by_partition"] = group_table(runs_p, "partition", "partition")
    tables["runs_by_wckey"] = group_table(runs_p, "wckey", "wckey")
    for key in labels:
        tables[f"runs_by_label_{key}"] = group_table(runs_p, f"label_{key}", key)
    tables["runs_by_user"] = group_table(runs_p, "user", "user")
    tables["top_failures"] = top_failures(ended_p, top)

    return assemble_report(period, config, tables, totals(runs_p), _raw_sums(runs_p), len(ended_p),
                           target=target, input_info=input_info)


def _raw_sums(runs: pd.DataFrame) -> dict[str, Any]:
    """Unrounded totals, so ratios are not computed from rounded figures."""
    return {
        "completed": int(runs["completed"].sum()) if len(runs) else 0,
        "gpu_hours": float(runs["gpu_hours"].sum()) if len(runs) else 0.0,
        "completed_run_gpu_hours": float(runs["completed_run_gpu_hours"].sum()) if len(runs) else 0.0,
        "cost": _num(runs["cost"].sum(min_count=1)) if len(runs) else None,
    }
