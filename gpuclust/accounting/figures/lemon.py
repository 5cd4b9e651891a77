"""Lemon nodes from production (issue 46 item 3): which nodes fail production jobs more than their peers, the
fleet's mean time to failure by job size and its effective training time ratio (report.json `lemon_nodes`, the
lemon_nodes table; output/lemon_render.py draws them; `audit partition` names a partition's lemons).

The rule, per node and UTC hour (the hour a job's End falls in; [lemon] failure_window sets another window), over
the GPU jobs that ended in the period on that node (its NodeList, expanded):

* node_fail: a job of the hour ended NODE_FAIL;
* shared_exit: at least MIN_SHARED_JOBS jobs of at least MIN_SHARED_USERS users ended in the hour, and every one
  of them ended with a non-zero exit (FAILED, or a non-zero ExitCode other than CANCELLED, TIMEOUT, PREEMPTED):
  a cause the node's jobs share, not one program's bug. One user's failing array on a node in an hour is NOT
  node-level (one user: that user's bug), however many of its tasks fail;
* xid / ecc: where telemetry is joined, a job of the hour saw an Xid or an uncorrectable (DBE) ECC error on one of
  the node's GPUs (dcgm-exporter, figures/telemetry.py).

A node's failures are its hours with any of these (a node that dies once kills its four jobs at once: one
failure); its exposure is the GPU-hours allocated on it (a job's GPUs x Elapsed / its nodes). The test: one-sided
Poisson, P(X >= failures) for X ~ Poisson(pooled rate of the node's partition x its GPU-hours), the pooled rate
being the failures / GPU-hours of every node whose partition (the one it gave most GPU-hours to) is the same;
Holm's step-down correction over every node with GPU-hours. A node is named (`suspect`) when its corrected
p-value is under ALPHA, it has at least MIN_FAILURES failures and its rate is above the pooled rate. A node
with more jobs at the same rate expects as many more failures, so it is never named. The thresholds are [lemon]'s
keys (gpuclust.config.lemon); these constants are their defaults.

MTTF by job size: the run hours (Elapsed) of the GPU jobs of each size bucket (GPUs) / how many of them failed
for a node-level cause (ended NODE_FAIL, or failed in one of a node's failure hours). ETTR as Meta defines it
(Kokolis et al., "Revisiting Reliability in Large-Scale ML Research Clusters", arXiv 2410.21680): productive
run time / wall-clock time; each failure costs the restart (restore) time plus, on average, half a checkpoint
interval of lost work, so E[ETTR] = 1 - (restore + checkpoint_interval / 2) / MTTF (0 at worst; `ettr`). The
restore is the median checkpoint restore the acceptance storage job measured (accept's results), else the
partitions' expect_restore_seconds, else [lemon] default_restore_seconds.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.accounting.figures import catalog
from gpuclust.config.lemon import LemonConfig
from gpuclust.slurm import hostlist

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from gpuclust.accounting.figures.metrics import Report
    from gpuclust.accounting.ingest.period import Period
    from gpuclust.config import SiteConfig

# The defaults of [lemon] (gpuclust.config.lemon, where each is explained)
MIN_SHARED_JOBS: int = LemonConfig.min_shared_jobs  # shared_exit: at least this many jobs ended in the window ...
MIN_SHARED_USERS: int = LemonConfig.min_shared_users  # ... of at least this many users
MIN_FAILURES: int = LemonConfig.min_failures  # a node is named with at least this many failure windows
ALPHA: float = LemonConfig.alpha  # ... and a Holm-corrected p-value under this
FAILURE_WINDOW_S: int = LemonConfig.failure_window_s  # the UTC hour
DEFAULT_RESTORE_S: float = LemonConfig.default_restore_s  # ETTR's restore time when none is measured or expected
DEFAULT_CHECKPOINT_INTERVAL_S = float(LemonConfig.checkpoint_interval_s)  # ETTR: a failure loses half of this
SIZE_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 8), (9, 64), (65, 512), (513, None))
TEST = "one-sided Poisson vs the partition's pooled rate, Holm-corrected over nodes"
NOT_NONZERO = frozenset({"CANCELLED", "TIMEOUT", "PREEMPTED", "REQUEUED", "COMPLETED", "RUNNING", "PENDING"})
CAUSES = ("node_fail", "shared_exit", "xid", "ecc")
DEFINITIONS: dict[str, str] = catalog.definitions(catalog.LEMON)  # (report.json: lemon_nodes.<key>)
COLUMNS = ("job_id", "user", "partition", "nodelist", "state", "exit_code", "exit_signal", "gpus", "elapsed_s", "end")


@dataclass(frozen=True)
class JobRow:
    """One GPU job that ended in the period, with what the lemon-node rule reads of it."""
    job_id: str
    user: str
    partition: str
    nodes: tuple[str, ...]
    state: str
    nonzero_exit: bool
    gpus: int
    elapsed_s: float
    end: float  # epoch seconds


@dataclass(frozen=True)
class GpuEvents:
    """What telemetry saw on one node during one job: Xid points and DBE ECC increase (telemetry.GpuTelemetry)."""
    node: str
    xid_errors: float = 0.0
    ecc_dbe: float = 0.0


@dataclass(frozen=True)
class _JobNodes:
    """compute's rows: one per (job, node), with its job (a position in the frame), its node (a code into
    `names`), its share of the job's GPU-seconds and its `slot`, the code of its (node, failure window)."""
    names: list[str]
    job: np.ndarray
    node: np.ndarray
    share: np.ndarray
    slot: np.ndarray
    slot_node: np.ndarray  # each slot's node

    @property
    def slots(self) -> int:
        return len(self.slot_node)


FRAME_COLUMNS = ("job_id", "user", "partition", "nodes", "state", "nonzero_exit", "gpus", "elapsed_s", "end")
EQUIVALENTS = "gpu_equivalents"  # (a frame's optional column: each job's GPU-equivalents, the GPU-hours' basis)


def job_rows(table: pa.Table, period: Period, equivalents: np.ndarray | None = None) -> pd.DataFrame:
    """The GPU jobs of `table` (normalized or stored rows) that ended in the period, one row each with JobRow's
    fields (FRAME_COLUMNS; `nodes` a tuple). Columnar: Arrow filters and converts, each distinct NodeList is
    expanded once (a 1M-line build has a few thousand), and nothing loops over the jobs in Python.
    `equivalents`: each row's GPU-equivalents (figures.shares; NaN: unknown): then the frame has a column
    EQUIVALENTS, the GPU-hours' basis, and shard or MPS jobs (no GPU device) are GPU jobs too."""
    import numpy as np
    import pandas as pd

    present = [c for c in COLUMNS if c in table.column_names]
    t = table.select(present)
    if equivalents is not None:
        t = t.append_column(EQUIVALENTS, pa.array(equivalents, pa.float64()))
    end = t.column("end")
    if pa.types.is_timestamp(end.type) and end.type.tz is None:
        end = end.cast(pa.timestamp("s", tz="UTC"))
    lo = pa.scalar(period.start, pa.timestamp("s", tz="UTC"))
    hi = pa.scalar(period.end, pa.timestamp("s", tz="UTC"))
    holds = pc.greater(t.column("gpus"), 0)
    if equivalents is not None:  # (a shard or MPS job holds part of a GPU; NaN, unknown: held still)
        eq = t.column(EQUIVALENTS)
        holds = pc.or_kleene(holds, pc.or_kleene(pc.greater(eq, 0), pc.is_nan(eq)))
    mask = pc.fill_null(pc.and_(pc.and_(pc.greater_equal(end, lo), pc.less(end, hi)), holds), False)
    t = t.filter(mask)
    n = t.num_rows

    def column(name: str, kind: str) -> Any:
        if name not in present:
            return pd.Series([None] * n, dtype=object) if kind == "object" else pd.Series([0] * n)
        return t.column(name).to_pandas()

    state = column("state", "object").fillna("")
    code = column("exit_code", "object")
    sig = column("exit_signal", "object")
    raised = code.fillna(0).astype(bool) | sig.fillna(0).astype(bool)
    nonzero = (state == "FAILED") | (~state.isin(NOT_NONZERO) & raised)
    codes, lists = pd.factorize(column("nodelist", "object"))  # (-1: null)
    expanded = np.empty(len(lists) + 1, dtype=object)  # (tuples filled by hand: numpy would read them as rows)
    expanded[:] = [tuple(hostlist.expand(str(text))) if text else () for text in lists] + [()]
    nodes = expanded[codes]  # a tuple per job, each distinct NodeList expanded once
    return pd.DataFrame({
        # (the text columns stay as Arrow gives them to pandas: converting 300,000 strings to Python objects cost
        # more than the whole lemon computation)
        "job_id": column("job_id", "object").array,
        "user": column("user", "object").fillna("").array,
        "partition": column("partition", "object").fillna("").array,
        "nodes": nodes,
        "state": state.array,
        "nonzero_exit": nonzero.to_numpy(dtype=bool),
        "gpus": t.column("gpus").to_pandas().fillna(0).astype(int).to_numpy(),
        "elapsed_s": column("elapsed_s", "float").fillna(0).astype(float).to_numpy(),
        "end": pc.cast(pc.cast(end.filter(mask), pa.timestamp("s", tz="UTC")), pa.int64()).to_numpy(
            zero_copy_only=False).astype(float),
        **({EQUIVALENTS: np.nan_to_num(t.column(EQUIVALENTS).to_numpy(zero_copy_only=False))}
           if equivalents is not None else {}),
    }, columns=[*FRAME_COLUMNS, *([EQUIVALENTS] if equivalents is not None else [])])


def _gpu_basis(frame: pd.DataFrame) -> np.ndarray:
    """Each job's GPUs as its GPU-hours count them: its GPU-equivalents where the frame has them (a frame of
    buckets some of which had none: their GPUs), else its GPU count."""
    import numpy as np

    gpus = frame["gpus"].to_numpy(dtype=float)
    if EQUIVALENTS not in frame.columns:
        return gpus
    eq = frame[EQUIVALENTS].to_numpy(dtype=float)
    return np.where(np.isnan(eq), gpus, eq)


def frame_of(jobs: pd.DataFrame | Iterable[JobRow]) -> pd.DataFrame:
    """`jobs` as job_rows' frame (a list of JobRow: the tests', and any caller's that builds rows by hand)."""
    import pandas as pd

    if isinstance(jobs, pd.DataFrame):
        return jobs
    import numpy as np

    rows = list(jobs)
    columns: dict[str, Any] = {name: [getattr(j, name) for j in rows] for name in FRAME_COLUMNS}
    nodes = np.empty(len(rows), dtype=object)
    nodes[:] = columns["nodes"]
    columns["nodes"] = nodes
    frame = pd.DataFrame(columns, columns=list(FRAME_COLUMNS))
    return frame.astype({"nonzero_exit": bool, "gpus": "int64", "elapsed_s": float, "end": float})


def _node_codes(lists: Any) -> tuple[list[str], list[Any]]:
    """Each distinct node list's nodes as integer codes into `names` (every node once)."""
    import numpy as np

    code: dict[str, int] = {}
    out = []
    for nodes in lists:
        out.append(np.fromiter((code.setdefault(n, len(code)) for n in nodes), dtype=np.int64, count=len(nodes)))
    return list(code), out


def poisson_sf(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean): 1 - sum_{i<k} e^-mean mean^i / i!, summed in log space."""
    if k <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    if k > mean:  # the upper tail directly: no cancellation when it is tiny
        total, i = 0.0, k
        while True:
            term = math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1))
            total += term
            if term < total * 1e-17 or i > k + 10000:
                return min(1.0, total)
            i += 1
    below = sum(math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) for i in range(k))
    return max(0.0, 1.0 - below)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def size_bucket(gpus: int) -> str:
    for lo, hi in SIZE_BUCKETS:
        if gpus >= lo and (hi is None or gpus <= hi):
            return f"{lo}" if lo == hi else (f"{lo}+" if hi is None else f"{lo}-{hi}")
    return "0"


def restore_seconds(measured: Mapping[str, float], expected: Mapping[str, float | None],
                    default: float = DEFAULT_RESTORE_S) -> tuple[float, str]:
    """ETTR's restore time and where it came from (the module docstring's order)."""
    if measured:
        values = sorted(measured.values())
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return float(median), "measured (acceptance storage checkpoint restore, median over partitions)"
    given = [float(v) for v in expected.values() if v is not None]
    if given:
        return max(given), "expect_restore_seconds (site config, largest over partitions)"
    return default, "default (no restore measured or expected)"


def ettr(mttf_hours: float | None, restore_s: float, checkpoint_s: float) -> float | None:
    """Expected ETTR of a job that fails every `mttf_hours` of its run, restarts in `restore_s` and checkpoints
    every `checkpoint_s`; None with no failure seen (MTTF unknown)."""
    if mttf_hours is None or mttf_hours <= 0:
        return None
    # Kokolis et al., arXiv 2410.21680, section "Effective Training Time Ratio": ETTR = productive runtime /
    # wall-clock time available, and its expected value E[ETTR] ~= 1 - (u0 + dt_cp / 2) / MTTF, u0 the restart
    # overhead and dt_cp the checkpoint interval (a failure lands on average half an interval after the last
    # checkpoint). The approximation holds while u0 + dt_cp / 2 << MTTF; past MTTF it would go negative: 0.
    return max(0.0, 1.0 - (restore_s + checkpoint_s / 2.0) / (mttf_hours * 3600.0))


def window_words(window_s: int) -> str:
    """How the findings name a failure window: "hour" for the default, else its length."""
    return "hour" if window_s == 3600 else f"{window_s} s window"


def compute(jobs: pd.DataFrame | Iterable[JobRow], *, gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None,
            restore_s: float | None = None, restore_source: str = "default",
            settings: LemonConfig | None = None) -> dict[str, Any]:
    """report.json's `lemon_nodes`: per node, the ranking, the named nodes, MTTF and ETTR by job size. Over one
    row per (job, node), as integer codes and numpy arrays: a node's figures are sums over its rows, its failure
    hours the distinct hours (failure windows) of its rows with a cause (module docstring). Only the float sums
    go through pandas' groupby (its compensated sum: the figures stay those of a pandas grouping); the rest are
    counts (bincount), so a small period pays a few pandas calls, not a frame step per figure. `settings`:
    [lemon] (its defaults when None); `restore_s` None: its default_restore_seconds."""
    import numpy as np

    cfg = settings or LemonConfig()
    restore = cfg.default_restore_s if restore_s is None else restore_s
    checkpoint_s = float(cfg.checkpoint_interval_s)
    frame = frame_of(jobs)
    events = gpu_events or {}
    nonzero = frame["nonzero_exit"].to_numpy(dtype=bool)
    node_fail = (frame["state"] == "NODE_FAIL").to_numpy()
    rows = _job_nodes(frame, cfg.failure_window_s)
    marked = _failure_windows(frame, rows, nonzero, node_fail, events, cfg)
    failed_slot = np.asarray(marked.any(axis=1), dtype=bool)  # (a failure window: any cause)
    ranked, tested = _ranked_nodes(frame, rows, marked, failed_slot, cfg)
    by_size, total = _by_job_size(frame, rows, failed_slot, nonzero, node_fail, events, restore, checkpoint_s)
    fleet_mttf = total[1] / total[2] if total[2] else None
    return {
        "test": TEST, "alpha": cfg.alpha, "min_failures": cfg.min_failures, "min_shared_jobs": cfg.min_shared_jobs,
        "min_shared_users": cfg.min_shared_users, "failure_window_seconds": cfg.failure_window_s,
        "min_jobs": cfg.min_jobs, "min_gpu_hours": cfg.min_gpu_hours, "nodes_tested": tested,
        "telemetry_joined": bool(gpu_events),
        "suspects": [r["node"] for r in ranked if r["suspect"]],
        "findings": [finding_text(r, cfg.failure_window_s) for r in ranked if r["suspect"]],
        "nodes": ranked,
        "fleet": {"jobs": int(total[0]), "run_hours": round(total[1], 6), "failed_jobs": int(total[2]),
                  "mttf_hours": fleet_mttf, "ettr": ettr(fleet_mttf, restore, checkpoint_s),
                  "restore_seconds": restore, "restore_source": restore_source,
                  "checkpoint_interval_seconds": checkpoint_s},
        "by_job_size": by_size,
    }


def _job_nodes(frame: pd.DataFrame, window_s: int) -> _JobNodes:
    """compute's step 1: the jobs' (job, node) rows, each in its (node, failure window) slot. A job without
    nodes has none (it still counts in MTTF)."""
    import numpy as np
    import pandas as pd

    # ("hour" is the failure window's index: the UTC hour by default)
    hour = (frame["end"] // window_s).astype("int64").to_numpy(dtype=np.int64)
    list_code, distinct_lists = pd.factorize(frame["nodes"], sort=False)  # each distinct node list once
    names, node_codes_of = _node_codes(distinct_lists)
    nn_of_list = np.fromiter((len(x) for x in node_codes_of), dtype=np.int64, count=len(node_codes_of))
    nnodes = nn_of_list[list_code] if len(frame) else np.zeros(0, dtype=np.int64)
    job_of = np.repeat(np.arange(len(frame)), nnodes)
    flat = np.concatenate(node_codes_of) if node_codes_of else np.zeros(0, dtype=np.int64)
    list_start = np.r_[0, np.cumsum(nn_of_list)[:-1]] if len(nn_of_list) else np.zeros(0, dtype=np.int64)
    within = np.arange(len(job_of)) - np.repeat(np.cumsum(nnodes) - nnodes, nnodes)
    node_of = flat[list_start[list_code[job_of]] + within] if len(job_of) else np.zeros(0, dtype=np.int64)
    share = (_gpu_basis(frame) * frame["elapsed_s"].to_numpy(dtype=float) / np.where(nnodes > 0, nnodes, 1))
    # the hours coded first, so the (node, hour) pair's code cannot overflow
    hour_code = pd.factorize(hour[job_of])[0]
    slot = pd.factorize(node_of * (int(hour_code.max()) + 1 if len(hour_code) else 1) + hour_code)[0]
    slot_node = np.zeros(int(slot.max()) + 1 if len(slot) else 0, dtype=np.int64)
    slot_node[slot] = node_of  # (every row of a slot has its node)
    return _JobNodes(names, job_of, node_of, share[job_of], slot, slot_node)


def _failure_windows(frame: pd.DataFrame, rows: _JobNodes, nonzero: np.ndarray, node_fail: np.ndarray,
                     events: Mapping[str, Sequence[GpuEvents]], cfg: LemonConfig) -> np.ndarray:
    """compute's step 2: per slot, whether each of CAUSES (in its order) made it a failure window. `nonzero`
    and `node_fail`: per job, a non-zero exit, and ended NODE_FAIL."""
    import numpy as np
    import pandas as pd

    job_of, slot, slots = rows.job, rows.slot, rows.slots
    marked = np.zeros((slots, len(CAUSES)), dtype=bool)
    marked[slot[node_fail[job_of]], 0] = True
    if events:  # (a few jobs: those telemetry saw)
        job_ids = frame["job_id"].to_numpy()
        seen = np.flatnonzero(frame["job_id"].isin(list(events)).to_numpy()[job_of])
        for row in seen:
            saw = {e.node: e for e in events.get(job_ids[job_of[row]], ())}.get(rows.names[rows.node[row]])
            if saw is not None and saw.xid_errors > 0:
                marked[slot[row], 2] = True
            if saw is not None and saw.ecc_dbe > 0:
                marked[slot[row], 3] = True
    # shared_exit: enough jobs of enough users in the (node, hour), every one with a non-zero exit
    user_code = pd.factorize(frame["user"])[0]
    row_user = user_code[job_of]
    users = max(int(user_code.max()) + 1, 1) if len(user_code) else 1
    known = row_user >= 0  # (no user: not counted among the distinct users)
    distinct_users = np.bincount(pd.unique(slot[known].astype(np.int64) * users + row_user[known]) // users,
                                 minlength=slots)
    marked[:, 1] = ((np.bincount(slot, minlength=slots) >= cfg.min_shared_jobs)
                    & (distinct_users >= cfg.min_shared_users)
                    & (np.bincount(slot[~nonzero[job_of]], minlength=slots) == 0))
    return marked


def _ranked_nodes(frame: pd.DataFrame, rows: _JobNodes, marked: np.ndarray, failed_slot: np.ndarray,
                  cfg: LemonConfig) -> tuple[list[dict[str, Any]], int]:
    """compute's step 3: one row per node (its failures and exposure, its partition's pooled rate, the Poisson
    test and Holm's correction, whether it is named), ranked; and how many nodes were tested."""
    import numpy as np
    import pandas as pd

    names, node_of, job_of = rows.names, rows.node, rows.job
    counted = np.bincount(rows.slot_node[failed_slot], minlength=len(names))
    fails_of = {names[n]: int(v) for n, v in enumerate(counted) if v}
    cause_count = {(names[n], c): int(v) for i, c in enumerate(CAUSES)
                   for n, v in enumerate(np.bincount(rows.slot_node[marked[:, i]], minlength=len(names))) if v}
    node_sums = pd.Series(rows.share).groupby(node_of, sort=False).sum()
    jobs_on = np.bincount(node_of, minlength=len(names))
    node_gpu_s = dict(sorted((names[n], float(v)) for n, v in zip(node_sums.index, node_sums.to_numpy(), strict=True)))
    node_jobs = {names[n]: int(jobs_on[n]) for n in node_sums.index}
    # the partition holding most of a node's GPU time (a tie: the first by name); codes shifted by one (-1: none)
    part_code, part_names = pd.factorize(frame["partition"])
    parts = len(part_names) + 1
    by_part = pd.Series(rows.share).groupby(node_of * parts + part_code[job_of] + 1, sort=False).sum()
    part_name = np.asarray(part_names, dtype=object)
    best: dict[int, tuple[bool, float, str]] = {}
    for pair, value in zip(by_part.index, by_part.to_numpy(), strict=True):
        on, part = divmod(int(pair), parts)
        rank_key = (bool(np.isnan(value)), 0.0 if np.isnan(value) else -float(value), str(part_name[part - 1]))
        if on not in best or rank_key < best[on]:
            best[on] = rank_key
    primary = {names[n]: k[2] for n, k in best.items()}
    pooled: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for n, gpu_s in node_gpu_s.items():
        pooled[primary[n]][0] += int(fails_of.get(n, 0))
        pooled[primary[n]][1] += gpu_s / 3600.0
    out: list[dict[str, Any]] = []
    for n, gpu_s in node_gpu_s.items():
        gpu_h = gpu_s / 3600.0
        fails = int(fails_of.get(n, 0))
        part_fails, part_h = pooled[primary[n]]
        rate = part_fails / part_h if part_h > 0 else 0.0
        expected = rate * gpu_h
        out.append({"node": n, "partition": primary[n], "jobs": int(node_jobs[n]), "gpu_hours": round(gpu_h, 6),
                    "failures": fails, **{c: int(cause_count.get((n, c), 0)) for c in CAUSES},
                    "failures_per_gpu_hour": fails / gpu_h if gpu_h > 0 else None,
                    "partition_failures_per_gpu_hour": rate, "expected_failures": expected,
                    "p_value": poisson_sf(fails, expected) if gpu_h > 0 else 1.0})
    tested = [i for i, r in enumerate(out) if r["gpu_hours"] > 0 and r["jobs"] >= cfg.min_jobs
              and r["gpu_hours"] >= cfg.min_gpu_hours]
    adjusted = holm([out[i]["p_value"] for i in tested])
    for i, p in zip(tested, adjusted, strict=True):
        out[i]["p_adjusted"] = p
    for r in out:
        r.setdefault("p_adjusted", 1.0)
        r["suspect"] = bool(r["failures"] >= cfg.min_failures and r["p_adjusted"] < cfg.alpha
                            and (r["failures_per_gpu_hour"] or 0) > r["partition_failures_per_gpu_hour"])
    ranked = sorted(out, key=lambda r: (-(r["failures_per_gpu_hour"] or 0.0), r["p_value"], r["node"]))
    for rank, r in enumerate(ranked, 1):
        r["rank"] = rank
    return ranked, len(tested)


def _by_job_size(frame: pd.DataFrame, rows: _JobNodes, failed_slot: np.ndarray, nonzero: np.ndarray,
                 node_fail: np.ndarray, events: Mapping[str, Sequence[GpuEvents]], restore: float,
                 checkpoint_s: float) -> tuple[list[dict[str, Any]], list[float]]:
    """compute's step 4: MTTF and ETTR per job-size bucket, and the fleet's [jobs, run hours, failed jobs]. A job
    failed for a node-level cause when it ended NODE_FAIL, or when it failed (a non-zero exit, or an Xid or ECC
    event of its own) in a failure window of one of its nodes."""
    import numpy as np
    import pandas as pd

    flagged = {j for j, evs in events.items() if any(e.xid_errors > 0 or e.ecc_dbe > 0 for e in evs)}
    hit = np.zeros(len(frame), dtype=bool)
    hit[rows.job[failed_slot[rows.slot]]] = True
    own = nonzero | frame["job_id"].isin(list(flagged)).to_numpy()
    node_level = node_fail | (own & hit)
    gpus = frame["gpus"].to_numpy(dtype=np.int64)
    if EQUIVALENTS in frame.columns:  # (a shard or MPS job, no GPU device: part of one GPU)
        gpus = np.maximum(gpus, 1)
    names = [size_bucket(lo) for lo, _ in SIZE_BUCKETS]
    buckets = np.select([(gpus >= lo) & (gpus <= (hi if hi is not None else np.iinfo(np.int64).max))
                         for lo, hi in SIZE_BUCKETS], names, default="0")
    sizes: dict[str, list[float]] = {size_bucket(lo): [0.0, 0.0, 0.0] for lo, _ in SIZE_BUCKETS}
    # (the hours summed by pandas' groupby, as before; the counts by numpy)
    bucket_names, bucket_of = np.unique(buckets, return_inverse=True)
    run_hours = pd.Series(frame["elapsed_s"].to_numpy(dtype=float) / 3600.0).groupby(bucket_of).sum()
    in_bucket = np.bincount(bucket_of, minlength=len(bucket_names))
    failed_in = np.bincount(bucket_of[node_level], minlength=len(bucket_names))
    for b, summed in zip(run_hours.index, run_hours.to_numpy(), strict=True):
        sizes[str(bucket_names[b])] = [float(in_bucket[b]), float(summed), float(failed_in[b])]
    by_size = []
    total = [0.0, 0.0, 0.0]
    for bucket, (count, hours, failed) in sizes.items():
        total = [total[0] + count, total[1] + hours, total[2] + failed]
        mttf = hours / failed if failed else None
        by_size.append({"job_size": bucket, "jobs": int(count), "run_hours": round(hours, 6),
                        "failed_jobs": int(failed), "mttf_hours": mttf, "ettr": ettr(mttf, restore, checkpoint_s)})
    return by_size, total


def finding_text(row: Mapping[str, Any], window_s: int = FAILURE_WINDOW_S) -> str:
    causes = ", ".join(f"{row[c]} {c}" for c in CAUSES if row[c])
    return (f"{row['node']}: {row['failures']} failure {window_words(window_s)}(s) ({causes}) in "
            f"{row['gpu_hours']:.1f} GPU-hours, "
            f"{row['failures_per_gpu_hour']:.4g}/GPU-hour vs {row['partition_failures_per_gpu_hour']:.4g} pooled "
            f"on {row['partition'] or '(none)'} (expected {row['expected_failures']:.2f}); {TEST}: "
            f"p = {row['p_value']:.3g}, Holm-corrected p = {row['p_adjusted']:.3g}")


def reaccept_lines(section: Mapping[str, Any], last_pass: Mapping[str, datetime] | None, now: datetime,
                   stale_days: int) -> dict[str, Any]:
    """The `gpuclust accept submit` lines for the named nodes (one per partition), and the sweep of this
    period's nodes whose last passing acceptance is older than `stale_days` (or none: never accepted); the sweep
    is left out when no acceptance results were read (`last_pass` None)."""
    def line(part: str, names: Sequence[str]) -> str:
        return (f"gpuclust accept submit allreduce --partition {part} --nodes {len(names)} "
                f"--nodelist {hostlist.fold(names)}")

    suspects: dict[str, list[str]] = defaultdict(list)
    by_part: dict[str, list[str]] = defaultdict(list)
    for r in section.get("nodes", []):
        by_part[r["partition"]].append(r["node"])
        if r["suspect"]:
            suspects[r["partition"]].append(r["node"])
    out: dict[str, Any] = {"suspects": [line(p, n) for p, n in sorted(suspects.items()) if p],
                           "stale_days": stale_days, "stale": None, "sweep": None}
    if last_pass is not None:
        cutoff = now - timedelta(days=stale_days)
        stale = {p: [n for n in names if n not in last_pass or last_pass[n] < cutoff] for p, names in by_part.items()}
        out["stale"] = sorted(n for names in stale.values() for n in names)
        out["sweep"] = [line(p, n) for p, n in sorted(stale.items()) if p and n]
    return out


TABLE_COLUMNS = ("rank", "node", "partition", "jobs", "gpu_hours", "failures", *CAUSES, "failures_per_gpu_hour",
                 "partition_failures_per_gpu_hour", "expected_failures", "p_value", "p_adjusted", "suspect")


def table_rows(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The lemon_nodes table (CSV, Parquet, the page): one row per node, ranked."""
    return [{k: r[k] for k in TABLE_COLUMNS} for r in section.get("nodes", [])]


def last_pass(results_dir: str) -> dict[str, datetime] | None:
    """Per node, its last passing acceptance (accept's public face); None when no results could be read."""
    if not results_dir or not Path(results_dir).is_dir():
        return None
    from gpuclust.accept import last_pass_by_node, scan_results

    try:
        scan = scan_results(results_dir)
    except OSError:
        return None
    return last_pass_by_node(scan.jobs)


def section_for(jobs: pd.DataFrame | Iterable[JobRow], config: SiteConfig, now: datetime, *,
                gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None) -> dict[str, Any]:
    """report.json's `lemon_nodes` for the site: the restore time from the acceptance results, the
    re-acceptance lines as of `now` (the period's end in a report)."""
    from gpuclust.accounting.history.sources import measured_restore_seconds

    measured = measured_restore_seconds(config.results_dir) if config.results_dir else {}
    restore, source = restore_seconds(measured, {p: c.expect_restore_seconds for p, c in config.partitions.items()},
                                      config.lemon.default_restore_s)
    section = compute(jobs, gpu_events=gpu_events, restore_s=restore, restore_source=source, settings=config.lemon)
    section["reaccept"] = reaccept_lines(section, last_pass(config.results_dir), now, config.acceptance_stale_days)
    return section


def attach(report: Report, jobs: pd.DataFrame | Iterable[JobRow], config: SiteConfig, period: Period, *,
           gpu_events: Mapping[str, Sequence[GpuEvents]] | None = None) -> None:
    """Add `lemon_nodes`, its table and its definitions to a built report."""
    import pandas as pd

    section = section_for(jobs, config, period.end, gpu_events=gpu_events)
    report.data["lemon_nodes"] = section
    report.tables["lemon_nodes"] = pd.DataFrame(table_rows(section), columns=list(TABLE_COLUMNS))
    report.data["definitions"] = {**report.data.get("definitions", {}),
                                  **{f"lemon_nodes.{k}": v for k, v in DEFINITIONS.items()}}
