"""Accounting on the real lab: run the issue's jobs, fetch through the parsable AND the JSON path, check the
report's figures, and check both paths agree (except exit codes, which 22.05's JSON cannot know).

Also a recorder: `python -m tests.integration.test_accounting_lab --record DIR` (with the lab's SLURM_CONF
exported) runs the same scenario and saves the sacct outputs the unit tests replay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures.metrics import build_report
from gpuclust.accounting.history import store
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import RAW_FIELDS
from gpuclust.config import parse_config
from gpuclust.slurm.client import CommandSlurmClient
from tests.integration.labutil import (  # noqa: F401
    job_state,
    run_cmd,
    submit,
    wait_for_recorded_start,
    wait_for_sacct,
    wait_job_done,
)
from tests.reportcompare import assert_same, figures

SITE_CONF = """
[site]
cluster_name = acct
timezone = UTC
state_dir = {state}
report_dir = {state}/reports
retry_window = 24h
report_labels = team, project
target_completed_runs_per_month = 100

[gpu_type h100]
price_per_gpu_hour = 2.50

[partition gpu]
gpu_type = h100
price_per_gpu_hour = 2.50

[partition debug]
gpu_type = h100
price_per_gpu_hour = 1.00

[account physics]
labels = team=physics

[account ml]
labels = team=ml
"""


@dataclass
class Scenario:
    project: str
    jobs: dict[str, str] = field(default_factory=dict)  # role -> job id
    started: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    held_back_reason: str = ""
    suffix: str = ""

    @property
    def bases(self) -> set[int]:
        return {int(j.split("_")[0].split("+")[0]) for j in self.jobs.values()}


def _sb(scn: Scenario, role: str, *args: str, team: str = "ml") -> str:
    if scn.suffix:  # names unique to this run, so earlier runs' failures cannot be "resubmitted" by this one
        args = tuple(f"{a}-{scn.suffix}" if i and args[i - 1] == "-J" else a for i, a in enumerate(args))
    jid = submit(["-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp",
                  f"--comment=team={team} project={scn.project} model=m-{role}", *args])
    scn.jobs[role] = jid
    return jid


def _wait_state(job_id: str, states: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        st = job_state(job_id)
        if st in states:
            return st
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} not in {states} (is {st})")
        time.sleep(0.2)


def _reason(job_id: str) -> str:
    out = run_cmd(["scontrol", "show", "job", "-o", job_id], check=False).stdout
    for tok in out.split():
        if tok.startswith("Reason="):
            return tok.split("=", 1)[1]
    return ""


def run_scenario(unique_names: bool = True) -> Scenario:
    """The jobs the issue lists. Returns their ids; every job carries the comment project=<unique>.

    With unique_names, job names get the project as a suffix: resubmission matching is by name, and a lab
    shared with earlier runs holds the same scenario's failures.
    """
    project = f"acct{uuid.uuid4().hex[:8]}"
    scn = Scenario(project=project, suffix=project if unique_names else "")
    gpu1 = "--gres=gpu:h100:1"
    # Physics' GrpTRES gres/gpu=4: the big job takes all four, the next waits (AssocGrpGRES).
    # The big job runs until the test has seen the next job held back (a flag file under /tmp, which every lab
    # node sees; at most 120 s): a fixed `sleep 4` could end, under load, before the scheduler gave the next job
    # its reason, and that job would then just start.
    flag = Path(tempfile.mkdtemp(prefix="acct-phys-big-")) / "seen"
    big = _sb(scn, "phys-big", "-A", "physics", "-J", "acct-phys-big", "--gres=gpu:h100:4", "--wrap",
              f"for i in $(seq 1200); do [ -e {flag} ] && exit 0; sleep 0.1; done", team="physics")
    _wait_state(big, {"RUNNING"})
    held_back = _sb(scn, "phys-wait", "-A", "physics", "-J", "acct-phys-wait", "--gres=gpu:h100:2", "--wrap", "sleep 1",
                    team="physics")
    held_back_at = time.monotonic()
    _sb(scn, "ok", "-A", "ml", "-J", "acct-ok", gpu1, "--wrap", "sleep 1")
    flaky = _sb(scn, "flaky-1", "-A", "ml", "-J", "acct-flaky", "--gres=gpu:h100:2", "--wrap", "sleep 1; exit 3")
    requeue = _sb(scn, "requeue", "-A", "ml", "-J", "acct-requeue", gpu1, "--requeue", "--wrap",
                  'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 1; else sleep 60; fi')
    _sb(scn, "array", "-A", "ml", "-p", "debug", "-J", "acct-array", "--array=0-2", gpu1, "--wrap",
        'sleep 1; test "$SLURM_ARRAY_TASK_ID" -ne 1')
    _sb(scn, "het", "-A", "ml", "-J", "acct-het", gpu1, "--wrap", "sleep 2", ":", "--gres=gpu:h100:2")
    held = _sb(scn, "held", "-A", "ml", "-J", "acct-held", "-H", gpu1, "--wrap", "sleep 1")
    _sb(scn, "pipe", "-A", "ml", "-J", 'acct|pipe "q" ü', gpu1, "--wrap", "sleep 1")
    _sb(scn, "newline", "-A", "ml", "-J", "acct-multi\nline", gpu1, "--wrap", "sleep 1")
    deadline = time.monotonic() + 60
    while _reason(held_back) != "AssocGrpGRES" and time.monotonic() < deadline:
        time.sleep(0.2)
    scn.held_back_reason = _reason(held_back)
    # the held-back job waits at least 3 s (its queue wait is asserted to be >= 1 s): then the big job ends
    time.sleep(max(0.0, held_back_at + 3 - time.monotonic()))
    flag.touch()
    _wait_state(requeue, {"RUNNING"})
    # Requeue only once the database holds the first execution's start: requeued before that, the execution
    # has no Start and is no attempt (seen under load: attempts 13, retries 1, not 14 and 2).
    wait_for_recorded_start(requeue)
    run_cmd(["scontrol", "requeue", requeue])
    # A requeued job waits ~2 min (BeginTime) unless its StartTime is moved, which scontrol takes only once the
    # job is back in the queue (PENDING). Not to `now`: slurmd refuses a credential of the same job made in the
    # second it revoked the last one ("Job credential revoked": the execution FAILED, seen under load), so the
    # next execution starts 3 s on.
    _wait_state(requeue, {"PENDING"})
    run_cmd(["scontrol", "update", f"jobid={requeue}", "StartTime=now+3"], check=False)
    run_cmd(["scontrol", "release", held])
    assert wait_job_done(flaky) == "FAILED"
    wait_for_sacct(flaky)
    time.sleep(1)  # the resubmission's Submit must come after the failed attempt's End
    _sb(scn, "flaky-2", "-A", "ml", "-J", "acct-flaky", "--gres=gpu:h100:2", "--wrap", "sleep 1")
    for role, jid in scn.jobs.items():
        if role not in ("array", "het"):
            wait_job_done(jid, timeout=180)
    _wait_settled(scn)
    return scn


EXPECTED_ROWS = 15  # 8 one-row jobs, requeue 2 (REQUEUED + COMPLETED), array 3 tasks, het 2 components


def _wait_settled(scn: Scenario, timeout: float = 120) -> None:
    """Poll the day's sacct (through the real fetch parser) until every row of the scenario is settled."""
    from gpuclust.accounting.history.fetch import fetch_day

    terminal = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "REQUEUED", "NODE_FAIL", "OUT_OF_MEMORY"}
    deadline = time.monotonic() + timeout
    while True:
        rows = _mine(fetch_day(CommandSlurmClient(), scn.started.date()).table, scn).to_pylist()
        settled = [r for r in rows if r["state"] in terminal and r["partition"] and r["job_name"] != "allocation"
                   and r["end"] is not None]
        if len(rows) == EXPECTED_ROWS and len(settled) == EXPECTED_ROWS:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"sacct rows not settled: {len(settled)}/{len(rows)} of {EXPECTED_ROWS}")
        time.sleep(0.5)


def fetch_outputs(day: datetime) -> dict[str, str]:
    """The raw sacct outputs of one UTC day, exactly as the fetch asks for them."""
    client = CommandSlurmClient()
    d = day.date()
    # The plain dump in sacct's usual order (Comment last), as an admin would write it by hand.
    plain = [*sacct_args(d, "parsable")[:6], "--parsable2", "-o", ",".join(RAW_FIELDS)]
    return {
        "parsable": client.sacct(sacct_args(d, "parsable")),
        "pipe": client.sacct(plain),
        "json": client.sacct(sacct_args(d, "json")),
    }


# ---- the test -------------------------------------------------------------------------------------------


def _gpuclust(*args: str, conf: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf))
    return subprocess.run([sys.executable, "-m", "gpuclust.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


def _mine(table: pa.Table, scn: Scenario) -> pa.Table:
    return table.filter(pc.is_in(table.column("job_base"), value_set=pa.array(sorted(scn.bases), pa.int64())))


def _json_exit_codes_known() -> bool:
    """Whether this lab's sacct --json carries exit codes (gpuclust.slurm.sacct_json: 24.11 on, not 22.05)."""
    out = run_cmd(["sacct", "--version"]).stdout
    major = int(out.split()[-1].split(".")[0])
    return major >= 23


def _figures(data: dict) -> dict:
    """The figures both paths must agree on (exit codes excluded: JSON cannot know them)."""
    return {
        "totals": data["totals"],
        "runs": data["runs"],
        "queue_wait": data["queue_wait"],
        "hold": data["hold"],
        "failures": [{k: v for k, v in f.items() if k != "exit_code"} for f in data["top_failures"]],
        "sizing": data["sizing"],
    }


@pytest.mark.slurm
def test_accounting_on_lab(slurm_lab, tmp_path):
    scn = run_scenario()
    assert scn.held_back_reason == "AssocGrpGRES"
    conf = tmp_path / "site.conf"
    state_p, state_j = tmp_path / "p", tmp_path / "j"
    period = Period(scn.started - timedelta(minutes=5), datetime.now(timezone.utc) + timedelta(minutes=5))
    since, until = (t.strftime("%Y-%m-%dT%H:%M:%S+00:00") for t in (period.start, period.end))

    reports = {}
    for via, state in (("parsable", state_p), ("json", state_j)):
        conf.write_text(SITE_CONF.format(state=state))
        r = _gpuclust("report", "fetch", "--since", since, "--until", until, "--via", via, "--json", conf=conf)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["rejected_rows"] == 0, r.stdout
        out = tmp_path / f"out-{via}"
        r = _gpuclust("report", "build", "--since", since, "--until", until, "--out", str(out), conf=conf)
        assert r.returncode == 0, r.stderr
        cli_json = json.loads((out / "report.json").read_text())
        for name in ("report.html", "gpuclust.prom", "runs_by_account.csv", "top_failures.csv"):
            assert (out / name).stat().st_size > 0
        # The CLI report includes every job in the window; this scenario's runs are its project label.
        mine_cli = [row for row in cli_json["runs"]["by_label"]["project"] if row["project"] == scn.project]
        assert len(mine_cli) == 1 and mine_cli[0]["runs"] == 12, mine_cli

        config = parse_config(SITE_CONF.format(state=state))
        table = _mine(store.load(store.store_dir(str(state))), scn)
        reports[via] = build_report(table, config, period).data
        # The real store built partitioned (issue 31 item 3) gives the one-table figures: users whole in
        # buckets, and every user split by resubmission group (buckets of 2 rows).
        one, _ = pipeline.build(config, period, trend_days=0)
        for rows_per_bucket in (10_000, 2):
            split, _ = pipeline.build(config, period, trend_days=0, rows_in_memory=0, rows_per_bucket=rows_per_bucket)
            assert split.data["input"]["partitioned"]["buckets"] >= (1 if rows_per_bucket > 2 else 2)
            assert_same(figures(one), figures(split))

    p, j = reports["parsable"], reports["json"]
    t = p["totals"]
    assert (t["runs"], t["completed"], t["attempts"], t["retries"]) == (12, 11, 14, 2)
    by_acct = {r["account"]: r for r in p["runs"]["by_account"]}
    assert (by_acct["ml"]["runs"], by_acct["ml"]["completed"], by_acct["ml"]["attempts"]) == (10, 9, 12)
    assert (by_acct["physics"]["runs"], by_acct["physics"]["completed"], by_acct["physics"]["attempts"]) == (2, 2, 2)
    by_part = {r["partition"]: r for r in p["runs"]["by_partition"]}
    assert (by_part["debug"]["runs"], by_part["debug"]["completed"]) == (3, 2)
    assert (by_part["gpu"]["runs"], by_part["gpu"]["completed"], by_part["gpu"]["attempts"]) == (9, 9, 11)
    fails = {(f["job_id"], f["state"], f["exit_code"]) for f in p["top_failures"]}
    jobs = scn.jobs
    assert fails == {(jobs["flaky-1"], "FAILED", "3:0"), (f"{jobs['array']}_1", "FAILED", "1:0"),
                     (jobs["requeue"], "REQUEUED", "0:0")}
    if _json_exit_codes_known():  # 24.11+: the JSON's exit codes are right, FAILED jobs included
        assert [f["exit_code"] for f in j["top_failures"]] == [f["exit_code"] for f in p["top_failures"]]
    else:  # 22.05: unknown on the JSON path, never invented
        assert {f["exit_code"] for f in j["top_failures"]} == {None}
    # GPU-hours = Elapsed x GPUs / 3600, checked against the raw rows of this scenario.
    raw = _mine(store.load(store.store_dir(str(state_p))), scn)
    started = pc.is_valid(raw.column("start"))
    ended = pc.is_valid(raw.column("end"))
    expect = sum(e * g for e, g, s, en in zip(raw.column("elapsed_s").to_pylist(), raw.column("gpus").to_pylist(),
                                             started.to_pylist(), ended.to_pylist(), strict=True) if s and en) / 3600
    assert t["gpu_hours"] == pytest.approx(expect)
    assert t["cost"] == pytest.approx(sum(r["cost"] for r in p["runs"]["by_partition"]))
    het_rows = [r for r in raw.to_pylist() if r["job_base"] == int(jobs["het"])]
    assert sorted(r["gpus"] for r in het_rows) == [1, 2]
    # Waits: the physics job held back by GrpTRES waited for the big one; the held job's hold is visible.
    waits = {r["job_id"]: r for r in raw.to_pylist()}
    wait = waits[jobs["phys-wait"]]
    assert (wait["start"] - wait["eligible"]).total_seconds() >= 1
    held = waits[jobs["held"]]
    assert held["start"] >= held["submit"] + timedelta(seconds=1)
    assert p["queue_wait"]["by_account"] and p["hold"]["by_account"]
    # Both paths: identical figures.
    assert _figures(p) == _figures(j)


if __name__ == "__main__":  # recorder for tests/data/accounting
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--record", required=True, help="directory to write the sacct outputs into")
    args = parser.parse_args()
    out_dir = Path(args.record)
    out_dir.mkdir(parents=True, exist_ok=True)
    scenario = run_scenario(unique_names=False)  # run on a freshly purged lab
    outputs = fetch_outputs(scenario.started)
    day = scenario.started.date().isoformat()
    (out_dir / "lab-parsable.txt").write_bytes(outputs["parsable"].encode("utf-8", "surrogateescape"))
    (out_dir / "lab-pipe.txt").write_bytes(outputs["pipe"].encode("utf-8", "surrogateescape"))
    (out_dir / "lab-json.json").write_bytes(outputs["json"].encode("utf-8", "surrogateescape"))
    (out_dir / "lab-scenario.json").write_text(json.dumps(
        {"day": day, "project": scenario.project, "jobs": scenario.jobs,
         "held_back_reason": scenario.held_back_reason}, indent=2) + "\n")
    print(json.dumps({"day": day, "jobs": scenario.jobs}))
