"""Lemon nodes from production jobs on the real lab (issue 46): the same job script runs on every node and fails
only on one node the test picks at random (GPUCLUST_LEMON_NODE picks it instead), for two users at once; the
other nodes run it under CPU load and it succeeds there. `gpuclust report fetch` + `report build` and `gpuclust
audit partition` then:

* with the default [lemon] (failure windows of one UTC hour): count the failing node's shared non-zero exits
  once per UTC hour its jobs ended in, exactly as the test counts them from sacct, and no failure anywhere
  else; nobody is named (a few minutes hold at most 2 failure hours, under min_failures);
* with `[lemon] failure_window = 10s`: count each 10 s window the same way, name the failing node (and only it)
  as a lemon in the report and in `audit partition`, and count its MTTF failures as its jobs of those windows.

Jobs are submitted in waves until the failing node has FAILURE_WINDOWS qualifying 10 s windows (both users'
jobs ended in it); then the healthy nodes' long jobs are held until the test's own bound on the node's
Holm-corrected p-value (from sacct and the clock) is under half of alpha: the rule weighs the failures against the
GPU time of the partition, and how fast the waves ran (a quiet 24.11 lab ran them quickly) must not decide
whether the node is named. Every wait polls with a deadline. The audit's `[lemon] audit_lookback` covers this test's jobs
and no earlier ones, so a rerun on the same lab day (another node failing then) does not weigh in.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.labutil import quiet_start, run_cmd, submit, wait_for_sacct, wait_job_done

pytestmark = pytest.mark.slurm

WINDOW_S = 10
FAILURE_WINDOWS = 4  # the failing node's qualifying 10 s windows before the report is built
DEADLINE_S = 150  # for the waves
BURN_S = 3  # each healthy job's CPU burn
HOLD_S = 150  # for the carriers' GPU time after the waves
ALPHA = 0.01  # [lemon] alpha's default
CARRIER_GPUS = 2
SACCT_FIELDS = ("JobID", "JobName", "Partition", "State", "User", "NodeList", "End", "ElapsedRaw")


def _script(path: Path, bad: str) -> Path:
    """The production job: fails on `bad` (after 2 s of run), burns a CPU for BURN_S and succeeds elsewhere."""
    path.write_text("#!/bin/sh\n"
                    f'if [ "$(hostname)" = "{bad}" ]; then sleep 2; exit 1; fi\n'
                    f"timeout {BURN_S} sh -c 'while :; do :; done'\n"
                    "exit 0\n")
    path.chmod(0o755)
    return path


def _carrier(path: Path, flag: Path) -> Path:
    """A long job on a healthy node (2 GPUs until `flag` appears): the GPU time peers have in production."""
    path.write_text(f"#!/bin/sh\nfor i in $(seq 1200); do [ -e {flag} ] && exit 0; sleep 0.25; done\nexit 0\n")
    path.chmod(0o755)
    return path


class Submitter:
    def __init__(self, lab: Any) -> None:
        self.user = lab["unprivileged_user"]
        self.slurm_conf = lab.slurm_conf
        self.jobs: dict[str, tuple[str, str]] = {}  # job id -> (node, user)

    def __call__(self, node: str, user: str, script: Path, *extra: str) -> str:
        args = ["-A", "ml", "-p", "gpu", "-w", node, "-N1", "-t", "10", "-J", "lemon-prod", "-o", "/dev/null",
                "-e", "/dev/null", "-D", "/tmp", *extra, str(script)]
        if user == "root":
            job = submit(args)
        else:  # (fixed words only: no quoting needed)
            cp = run_cmd(["su", user, "-s", "/bin/sh", "-c",
                          f"SLURM_CONF={self.slurm_conf} sbatch --parsable {' '.join(args)}"])
            job = cp.stdout.strip().splitlines()[-1].split(";")[0]
        self.jobs[job] = (node, user)
        return job


def _utc(text: str) -> datetime:
    """A time sacct printed with TZ=UTC."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)


def _ended(rows: list[dict[str, str]]) -> list[tuple[str, str, str, int]]:
    """(node, user, state, End as epoch seconds) of settled sacct rows (sacct run with TZ=UTC)."""
    out = []
    for r in rows:
        out.append((r["NodeList"], r["User"], r["State"].split()[0], int(_utc(r["End"]).timestamp())))
    return out


def _shared_windows(ended: list[tuple[str, str, str, int]], node: str, window_s: int) -> dict[int, int]:
    """The rule, counted by hand: per window of `node`, its job count where >= 2 jobs of >= 2 users all failed."""
    jobs: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for n, user, state, end in ended:
        if n == node:
            jobs[end // window_s].append((user, state))
    return {w: len(js) for w, js in jobs.items()
            if len(js) >= 2 and len({u for u, _ in js}) >= 2 and all(s == "FAILED" for _, s in js)}


def _poisson_at_least(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean), summed directly (k is a few windows)."""
    return max(0.0, 1.0 - sum(math.exp(-mean) * mean ** i / math.factorial(i) for i in range(k)))


def _holm_bound(failures: int, bad_gpu_s: float, peer_gpu_s: float, tested: int) -> float:
    """An upper bound of the failing node's Holm-corrected p-value: its failures against the pooled rate of
    the partition, whose every failure is the node's, over at least bad_gpu_s + peer_gpu_s GPU-seconds (the
    report counts more peer time, never less, and more of it only lowers the expected count). Its p-value is
    the smallest of `tested` (every peer's is 1), so Holm multiplies it by `tested`."""
    expected = failures * bad_gpu_s / (bad_gpu_s + peer_gpu_s)
    return min(1.0, tested * _poisson_at_least(failures, expected))


def _started_at(jobs: list[str], env: dict[str, str]) -> list[float]:
    """Each running or ended job's Start as epoch seconds (sacct run with TZ=UTC; none yet: left out)."""
    out = run_cmd(["sacct", "-n", "-P", "-X", "-j", ",".join(jobs), "-o", "JobID,Start"], env=env).stdout
    starts = []
    for line in out.splitlines():
        _, _, start = line.partition("|")
        if start[:1].isdigit():
            starts.append(_utc(start).timestamp())
    return starts


def _audit_lookback(mine: set[str], started: datetime, env: dict[str, str]) -> int:
    """Seconds of `[lemon] audit_lookback` that reach back past every job of this test and to no job that ended
    before it (`audit partition` reads the store's whole UTC days: an earlier run of this test that day, on
    another node, would weigh in)."""
    now = datetime.now(timezone.utc)
    out = run_cmd(["sacct", "-a", "-X", "-n", "-P", "-S", (started - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S"),
                   "-E", "now", "-o", "JobID,End"], env=env).stdout
    ends = [_utc(end)
            for job, end in (line.split("|") for line in out.splitlines() if line.count("|") == 1)
            if job.split("_")[0] not in mine and end[:1].isdigit()]
    before = [e for e in ends if e <= started]
    if not before:
        return int((now - started).total_seconds()) + 60
    # (the audit's now is later than this one: its window then starts after the last earlier job, never before)
    return max(1, int((now - max(before)).total_seconds()) - 1)


def _gpuclust(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf))
    return subprocess.run([sys.executable, "-m", "gpuclust.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


@pytest.fixture
def workdir() -> Iterator[Path]:
    # directly under /tmp (pytest's own is root-only): every lab node and the unprivileged user read the scripts
    root = Path(tempfile.mkdtemp(prefix="gpuclust-lemon-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_failing_node_is_a_lemon_and_loaded_healthy_nodes_are_not(slurm_lab: Any, workdir: Path) -> None:
    nodes = slurm_lab.gpu_nodes  # (the production-like jobs run on the gpu partition)
    bad = os.environ.get("GPUCLUST_LEMON_NODE") or random.choice(nodes)
    assert bad in nodes, (bad, nodes)
    healthy = [n for n in nodes if n != bad]
    users = ("root", slurm_lab["unprivileged_user"])
    flag = workdir / "done"
    script, carrier = _script(workdir / "prod.sh", bad), _carrier(workdir / "carrier.sh", flag)
    sb = Submitter(slurm_lab)
    started = quiet_start()  # (an earlier test's job ending in this second would count on the nodes)
    sacct_env = dict(os.environ, TZ="UTC")
    try:
        carriers = [sb(n, users[i % 2], carrier, f"--gres=gpu:h100:{CARRIER_GPUS}") for i, n in enumerate(healthy)]
        deadline = time.monotonic() + DEADLINE_S
        bad_jobs: list[str] = []
        wave = 0
        while True:
            mine = [sb(bad, u, script, "--gres=gpu:h100:1") for u in users]
            for i, n in enumerate(healthy):
                sb(n, users[(wave + i) % 2], script, "--gres=gpu:h100:1")
            bad_jobs += mine
            for job in mine:
                assert wait_job_done(job, timeout=max(5.0, deadline - time.monotonic())) == "FAILED", job
            rows = [wait_for_sacct(j, fields=SACCT_FIELDS, env=sacct_env) for j in bad_jobs]
            failures = len(_shared_windows(_ended(rows), bad, WINDOW_S))
            if failures >= FAILURE_WINDOWS:
                break
            assert time.monotonic() < deadline, f"{wave + 1} waves: too few shared failure windows on {bad}"
            wave += 1
        bad_gpu_s = float(sum(int(r["ElapsedRaw"]) for r in rows))  # (one GPU each)
        hold_until = time.monotonic() + HOLD_S
        while True:  # the peers' GPU time so far: the carriers' run time (their short jobs add to it)
            peer_gpu_s = sum(CARRIER_GPUS * max(0.0, time.time() - t0) for t0 in _started_at(carriers, sacct_env))
            bound = _holm_bound(failures, bad_gpu_s, peer_gpu_s, len(nodes))
            if bound < ALPHA / 2:
                break
            assert time.monotonic() < hold_until, (failures, bad_gpu_s, peer_gpu_s, bound)
            time.sleep(1)
    finally:
        flag.touch()
    for job in sb.jobs:
        wait_job_done(job, timeout=60)
    rows = [wait_for_sacct(j, fields=SACCT_FIELDS, env=sacct_env) for j in sb.jobs]
    ended = _ended(rows)
    assert {s for n, _, s, _ in ended if n != bad} == {"COMPLETED"}, ended  # healthy nodes: every job succeeded
    assert {s for n, _, s, _ in ended if n == bad} == {"FAILED"}, ended
    assert all(r["NodeList"] == sb.jobs[r["JobID"]][0] for r in rows), rows
    hourly = _shared_windows(ended, bad, 3600)
    windows = _shared_windows(ended, bad, WINDOW_S)

    state = workdir / "state"
    default_conf, lemon_conf = workdir / "default.conf", workdir / "lemon.conf"
    base = f"[site]\ncluster_name = {slurm_lab['cluster_name']}\ntimezone = UTC\nstate_dir = {state}\n" \
           f"results_dir = {workdir / 'results'}\n[partition gpu]\ngpu_type = h100\ngpus_per_node = 4\n"
    default_conf.write_text(base)
    lemon_conf.write_text(base + f"[lemon]\nfailure_window = {WINDOW_S}s\n")
    since = started.strftime("%Y-%m-%dT%H:%M:%S+00:00")
    until = (datetime.now(timezone.utc) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    fetched = _gpuclust(default_conf, "report", "fetch", "--since", since, "--until", until, "--json")
    assert fetched.returncode == 0, fetched.stderr
    sections = {}
    for name, conf in (("default", default_conf), ("lemon", lemon_conf)):
        out = workdir / f"out-{name}"
        built = _gpuclust(conf, "report", "build", "--since", since, "--until", until, "--out", str(out),
                          "--format", "json,html,prom")
        assert built.returncode == 0, built.stderr
        sections[name] = json.loads((out / "report.json").read_text())["lemon_nodes"]
        by_node = {r["node"]: r for r in sections[name]["nodes"]}
        assert set(by_node) == set(nodes), by_node
        assert by_node[bad]["jobs"] == len(bad_jobs), (by_node[bad], bad_jobs)
        for n in healthy:  # CPU load, every job a success: no failure of any kind, never named
            assert (by_node[n]["failures"], by_node[n]["suspect"]) == (0, False), by_node[n]
    node_rows = {r["node"]: r for r in sections["default"]["nodes"]}
    # one UTC hour: its shared non-zero exits once per hour, as counted from sacct; too few hours to name it
    assert node_rows[bad]["shared_exit"] == node_rows[bad]["failures"] == len(hourly) >= 1, (node_rows[bad], hourly)
    assert sections["default"]["suspects"] == [] and sections["default"]["failure_window_seconds"] == 3600
    # 10 s windows: each one counted, the node named, and its MTTF failures are its jobs of those windows
    section = sections["lemon"]
    row = {r["node"]: r for r in section["nodes"]}[bad]
    assert row["shared_exit"] == row["failures"] == len(windows) >= FAILURE_WINDOWS, (row, windows)
    assert section["suspects"] == [bad] and row["p_adjusted"] <= bound and section["alpha"] == ALPHA, (bound, section)
    assert section["findings"][0].startswith(f"{bad}: {len(windows)} failure 10 s window(s)"), section["findings"]
    sizes = {r["job_size"]: r for r in section["by_job_size"]}
    assert sizes["1"]["failed_jobs"] == sum(windows.values()), (sizes["1"], windows)
    assert (sizes["2-8"]["jobs"], sizes["2-8"]["failed_jobs"]) == (len(carriers), 0)
    page = (workdir / "out-lemon" / "report.html").read_text()
    assert f"--nodelist {bad}" in page
    prom = (workdir / "out-lemon" / "gpuclust.prom").read_text()
    (suspect,) = [f for f in text_string_to_metric_families(prom) if f.name == "gpuclust_report_node_lemon_suspect"]
    assert {s.labels["node"]: s.value for s in suspect.samples} == {n: float(n == bad) for n in nodes}

    def lemon_finding(conf: Path) -> dict[str, Any]:
        lookback = _audit_lookback(set(sb.jobs), started, sacct_env)
        conf.write_text(conf.read_text() + ("" if "[lemon]" in conf.read_text() else "[lemon]\n")
                        + f"audit_lookback = {lookback}s\n")
        audit = _gpuclust(conf, "audit", "partition", "gpu", "--json", "--results-dir", str(workdir / "results"))
        assert audit.stdout, audit.stderr
        (finding,) = [f for f in json.loads(audit.stdout)["findings"] if f["check"].startswith("lemon")]
        return finding

    named = lemon_finding(lemon_conf)
    assert (named["check"], named["severity"], named["nodes"]) == ("lemon.nodes", "WARNING", bad), named
    assert "one-sided Poisson" in named["message"] and f"--nodelist {bad}" in named["message"], named
    clean = lemon_finding(default_conf)
    assert (clean["check"], clean["severity"]) == ("lemon.nodes", "OK"), clean
