"""A small store for the store-tree tests (test_store_tree.py, test_fuzz_store.py), and the real CLI to read it.

Three UTC days, far enough apart that a report of one day reads no other (a report reads its period plus the
retry window + 7 days before it), fetched by `report fetch` from replayed sacct output: each day one completed
2-GPU job of an hour and one failed 1-GPU job of half an hour, of a user of its own. So the figures of every day
are known by hand, and a damaged day cannot hide in another day's figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from gpuclust.accounting.history import store
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.slurm.replay import ReplaySlurmClient

DAYS = (date(2026, 1, 5), date(2026, 1, 20), date(2026, 2, 5))
CLUSTER = "t"
# By hand, per day: runs 2 (1 completed), allocated GPU-hours 2 x 1 h + 1 x 0.5 h = 2.5.
RUNS_PER_DAY, GPU_HOURS_PER_DAY = 2, 2.5


def _row(job: int, day: date, user: str, state: str, exit_code: str, hours: float, gpus: int) -> dict[str, str]:
    start = f"{day.isoformat()}T10:00:00"
    minutes = int(hours * 60)
    end = f"{day.isoformat()}T{10 + minutes // 60:02d}:{minutes % 60:02d}:00"
    return {
        "JobID": str(job), "JobIDRaw": str(job), "JobName": f"train-{job}", "Comment": "", "Reason": "None",
        "WCKey": "", "User": user, "Account": "ml", "Partition": "gpu", "QOS": "normal", "State": state,
        "ExitCode": exit_code, "Submit": start, "Eligible": start, "Start": start, "End": end,
        "Elapsed": f"{minutes // 60:02d}:{minutes % 60:02d}:00",
        "AllocTRES": f"cpu=1,gres/gpu:h100={gpus},gres/gpu={gpus},mem=1000M,node=1", "NodeList": "n1", "NNodes": "1",
    }


def sacct_text(day: date) -> str:
    k = DAYS.index(day) if day in DAYS else 9
    rows = [_row(100 + k, day, f"u{k}", "COMPLETED", "0:0", 1.0, 2), _row(200 + k, day, f"u{k}", "FAILED", "1:0", 0.5, 1)]
    lines = [FETCH_DELIMITER.join(FETCH_FIELDS)]
    lines += [FETCH_DELIMITER.join(row.get(f, "") for f in FETCH_FIELDS) for row in rows]
    return "\n".join(lines) + "\n"


class Sacct(ReplaySlurmClient):
    """Replayed sacct for any day (DAYS have jobs; other days the same shape), recording the days asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[date] = []
        self.add("sacct", ["--version"], "slurm 24.11.1\n")

    def sacct_bytes(self, args: Sequence[str], *, timeout: float | None = None) -> bytes:
        since = date.fromisoformat(args[args.index("-S") + 1][:10])
        if list(args) == sacct_args(since):
            self.asked.append(since)
            return sacct_text(since).encode()
        return super().sacct_bytes(args, timeout=timeout)


def write_config(tmp: Path) -> Path:
    conf = tmp / "site.conf"
    conf.write_text(f"[site]\ncluster_name = {CLUSTER}\nstate_dir = {tmp / 'state'}\nreport_dir = {tmp / 'reports'}\n"
                    "retry_window = 24h\n[gpu_type h100]\nprice_per_gpu_hour = 2\n")
    return conf


def run(conf: Path, *args: str, client: ReplaySlurmClient | None = None) -> Result:
    """`gpuclust --config CONF report ARGS` through click, as a user runs it."""
    return CliRunner().invoke(cli, ["--config", str(conf), "report", *args], obj=AppContext(client=client or Sacct()))


def until(day: date) -> str:
    return (day + timedelta(days=1)).isoformat()


def fetch_all(conf: Path) -> Result:
    """Fetch every day of DAYS (one `report fetch` per day: they are weeks apart)."""
    result = None
    for day in DAYS:
        result = run(conf, "fetch", "--since", day.isoformat(), "--until", until(day))
        assert result.exit_code == 0, result.output
    assert result is not None
    return result


def root_of(tmp: Path) -> Path:
    return store.store_dir(str(tmp / "state"))


def cluster_dir(tmp: Path) -> Path:
    """The cluster's directory under `current/` (where an admin sees the days)."""
    return root_of(tmp) / "current" / f"cluster={CLUSTER}"


def show_day(conf: Path, day: date) -> Result:
    return run(conf, "show", "--since", day.isoformat(), "--until", until(day), "--format", "json")


def build_all(conf: Path, out: Path) -> Result:
    return run(conf, "build", "--since", DAYS[0].isoformat(), "--until", until(DAYS[-1]), "--format", "json",
               "--out", str(out))


def figures(report_json: Path) -> dict[str, Any]:
    """report.json without what differs from one build to the next (its time) or names the store's warnings."""
    data = json.loads(report_json.read_text())
    data.pop("generated_at", None)
    data["input"].pop("problems", None)
    data["input"].pop("source", None)  # (the store's path: each test reads a copy)
    return data


def show_figures(result: Result) -> dict[str, Any]:
    """`report show --format json`'s figures (without the store's path)."""
    data = json.loads(result.stdout)
    data.pop("source", None)
    return dict(data)
