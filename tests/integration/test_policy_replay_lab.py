"""`policy replay` on real Slurm (issue 47), against a hand count.

The lab runs its pass-through job_submit.lua (everything is accepted), and this test submits a varied set of jobs:
two accounts (physics, ml), root and the unprivileged lab user, 1 to 4 GPUs, the gpu and debug partitions, with and
without --time, with and without --comment labels, a job array, --wrap jobs and script jobs with #SBATCH lines, job
names with spaces, quotes and pipes, a job without -A (the user's default account) and an srun job. Each sleeps
SLEEP_S so it has an Elapsed. `report fetch` stores them; `policy replay --json` then runs them through a lenient
current config (no rule: nothing refused) and, with --config NEW, a stricter one:

  [policy]          required_labels = team, label.team = physics, ml, default_partition = gpu (without it,
                    the partition rules skip a job without -p, as the rendered job_submit.lua does)
  [partition gpu]   max_time = 30m
  [partition debug] max_time = 30m        (the lab's debug partition: MaxTime=60, no DefaultTime)
  [account physics] max_gpus_per_job = 2

Each job's verdict under NEW is written down below by hand (JOBS: `rule`), from what was submitted and the order
in which the policy checks (labels, then the partition's rules, then the account's). The per-rule, per-account and
per-user counts and GPU-hours are summed from that table and from sacct (ElapsedRaw x the GPUs asked for, the
GPUs cross-checked against AllocTRES), and compared with the replay's.

What the record cannot say is checked too: script jobs without --time record their partition's default limit
(22.05: 365-00:00:00 for the unlimited gpu partition, 24.11: UNLIMITED; debug: 01:00:00). They are read as "no
--time" (accepted), and counted as uncertain under NEW, because a --time of that value would be refused. The
srun job is read from its fields (its line is not sbatch's). Every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gpuclust.policy.replay import NOT_SBATCH, TIME_DEFAULT
from tests.integration.labutil import TERMINAL_STATES, run_cmd, submit, wait_job_done

pytestmark = pytest.mark.slurm

SLEEP_S = 3
WAIT_S = 150  # for all the jobs to end (physics' GrpTRES gres/gpu=4 runs its jobs a few at a time)


@dataclass
class Job:
    key: str
    user: str  # "root" or "lab" (the unprivileged lab user)
    account: str  # the account Slurm records (the user's default where the job has no -A)
    gpus: int  # per job (per array task)
    args: list[str]  # sbatch's arguments ("script" stands for the job's script); srun's for the srun job
    rule: str | None  # the rule NEW refuses it by, worked out by hand; None: accepted
    tasks: int = 1  # array tasks
    script: str | None = None  # the #SBATCH lines of its script
    srun: bool = False
    uncertain: str | None = None  # the reason NEW's verdict is uncertain


JOBS = [
    Job("a", "root", "physics", 1, ["-A", "physics", "-p", "gpu", "--gres=gpu:h100:1", "-t", "10",
                                    "--comment", "team=physics", "--wrap", f"sleep {SLEEP_S}"], None),
    # 4 GPUs > physics' max_gpus_per_job 2; its labels and 10 min pass; the comment has spaces
    Job("b", "root", "physics", 4, ["-A", "physics", "--gres=gpu:h100:4", "-t", "10",
                                    "--comment", "team=physics project=big x", "--wrap", f"sleep {SLEEP_S}"],
        "account_max_gpus"),
    # no -A: the lab user's default account physics, which Slurm hands job_submit.lua as default_account
    Job("c", "lab", "physics", 3, ["--gres=gpu:h100:3", "--comment", "team=physics", "--wrap", f"sleep {SLEEP_S}"],
        "account_max_gpus"),
    Job("d", "lab", "ml", 4, ["-A", "ml", "--gres=gpu:h100:4", "-t", "60", "--comment", "team=ml",
                              "--wrap", f"sleep {SLEEP_S}"], "partition_max_time"),  # 60 min > 30m
    Job("e", "root", "ml", 2, ["-A", "ml", "--gres=gpu:h100:2", "-J", 'e "q" | p x',
                               "--wrap", f"sleep {SLEEP_S}; true"], "label_missing"),
    Job("f", "root", "ml", 1, ["-A", "ml", "-p", "debug", "--gres=gpu:h100:1", "-t", "5", "--comment", "team=chem",
                               "--wrap", f"sleep {SLEEP_S}"], "label_value"),
    Job("g", "root", "ml", 1, ["-A", "ml", "--array=0-2", "--gres=gpu:h100:1", "-t", "5",
                               "--comment", "team=ml project=arr", "--wrap", f"sleep {SLEEP_S}"], None, tasks=3),
    # a script job whose -A, --time and GPUs are #SBATCH lines: 45 min is not the gpu partition's default
    Job("h", "root", "physics", 1, ["-J", 'h "x" | y z', "script"], "partition_max_time",
        script="#SBATCH -A physics\n#SBATCH --time=45\n#SBATCH --comment=team=physics\n#SBATCH --gres=gpu:h100:1\n"),
    # no --time anywhere: the gpu partition's default (unlimited) recorded; no --time as replayed, a --time=UNLIMITED
    # would be refused
    Job("i", "root", "ml", 2, ["-A", "ml", "--gres=gpu:h100:2", "script"], None,
        script="#SBATCH --comment=team=ml\n", uncertain=TIME_DEFAULT),
    # no --time in debug: MaxTime 60 recorded (> 30m if it had been asked for)
    Job("j", "lab", "physics", 1, ["-p", "debug", "script"], None,
        script="#SBATCH --gres=gpu:h100:1\n#SBATCH --comment=team=physics\n", uncertain=TIME_DEFAULT),
    # srun: its line is not sbatch's, so read from the recorded fields (Timelimit 5 is no partition's default)
    Job("k", "root", "ml", 1, ["-A", "ml", "--gres=gpu:h100:1", "-t", "5", "--comment=team=ml", "-J", "k-srun",
                               "sh", "-c", f'echo "$SLURM_JOB_ID"; sleep {SLEEP_S}'], None, srun=True),
]

NEW = """max_time = 30m

[partition debug]
max_time = 30m

[account physics]
max_gpus_per_job = 2

[policy]
default_partition = gpu
required_labels = team
label.team = physics, ml
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    # directly under /tmp (pytest's own is root-only): the lab user's sbatch reads its scripts there
    root = Path(tempfile.mkdtemp(prefix="gpuclust-replay-"))
    os.chmod(root, 0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _submit(lab: Any, job: Job, workdir: Path) -> tuple[str, subprocess.Popen[str] | None]:
    args = list(job.args)
    if job.script is not None:
        path = workdir / f"{job.key}.sh"
        path.write_text(f"#!/bin/sh\n{job.script}sleep {SLEEP_S}\n")
        path.chmod(0o755)
        args[args.index("script")] = str(path)
    common = ["-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp"]
    if job.srun:  # (stdout: the job id the step prints)
        proc = subprocess.Popen(["srun", *common[4:], *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, stdin=subprocess.DEVNULL)
        return "", proc
    if job.user == "root":
        return submit([*common, *args]), None
    env = f"PATH={shlex.quote(os.environ['PATH'])} SLURM_CONF={shlex.quote(lab.slurm_conf)}"
    cp = run_cmd(["su", lab["unprivileged_user"], "-s", "/bin/sh", "-c",
                  f"{env} sbatch --parsable {shlex.join([*common, *args])}"])
    return cp.stdout.strip().splitlines()[-1].split(";")[0], None


def _settled(job_id: str, deadline: float) -> dict[str, str]:
    """The job's sacct row once settled (its partition known, not the placeholder `allocation`, a final state).
    JobName goes last: the names with pipes in them split the line into more than the fields."""
    fields = ("JobID", "Partition", "State", "User", "Account", "ElapsedRaw", "AllocTRES", "JobName")
    row: dict[str, str] | None = None
    while True:
        out = run_cmd(["sacct", "-a", "-X", "-n", "-P", "-j", job_id, "-o", ",".join(fields)], check=False).stdout
        for line in out.splitlines():
            parts = line.split("|")
            if parts[0] == job_id and len(parts) >= len(fields):
                row = dict(zip(fields, [*parts[:len(fields) - 1], "|".join(parts[len(fields) - 1:])], strict=True))
        if row and row["Partition"] and row["JobName"] != "allocation" and row["State"].split()[0] in TERMINAL_STATES:
            return row
        assert time.monotonic() < deadline, f"sacct row for job {job_id} not settled (last: {row})"
        time.sleep(0.3)


def _gpuclust(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GPUCLUST_CONFIG=str(conf))
    return subprocess.run([sys.executable, "-m", "gpuclust.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, stdin=subprocess.DEVNULL)


def _tally(subs: list[Job], ids: dict[str, str], hours: dict[str, float]) -> dict[str, Any]:
    return {"submissions": len(subs), "jobs": sum(j.tasks for j in subs),
            "gpu_hours": sum(hours[ids[j.key]] for j in subs), "gpu_hours_unknown_jobs": 0}


def _same(got: dict[str, Any], want: dict[str, Any]) -> bool:
    """A replay tally equals the hand count: GPU-hours as the replay rounds them (3 decimals)."""
    return (got["submissions"], got["jobs"], got["gpu_hours_unknown_jobs"]) == \
        (want["submissions"], want["jobs"], want["gpu_hours_unknown_jobs"]) and \
        abs(got["gpu_hours"] - want["gpu_hours"]) <= 0.0005 + 1e-9


def test_replay_against_a_hand_count(slurm_lab: Any, workdir: Path) -> None:
    lab_user = slurm_lab["unprivileged_user"]
    # the replay window starts on a whole second after every earlier job of the lab (submit times are whole seconds)
    started = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=1)
    while datetime.now(timezone.utc) < started:
        time.sleep(0.05)
    ids: dict[str, str] = {}
    sruns: dict[str, subprocess.Popen[str]] = {}
    for job in JOBS:
        job_id, proc = _submit(slurm_lab, job, workdir)
        if proc is not None:
            sruns[job.key] = proc
        else:
            ids[job.key] = job_id
    for key, proc in sruns.items():
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        ids[key] = out.split()[0]
    deadline = time.monotonic() + WAIT_S
    # every job (array task) as sacct settles it: ElapsedRaw x GPUs is its allocated GPU-seconds
    hours: dict[str, float] = {}
    for job in JOBS:
        task_ids = [f"{ids[job.key]}_{t}" for t in range(job.tasks)] if job.tasks > 1 else [ids[job.key]]
        seconds = 0
        for tid in task_ids:
            assert wait_job_done(tid, timeout=max(5.0, deadline - time.monotonic())) == "COMPLETED", (job.key, tid)
            row = _settled(tid, time.monotonic() + 60)
            assert row["User"] == ("root" if job.user == "root" else lab_user), row
            assert row["Account"] == job.account, row
            assert re.search(rf"gres/gpu={job.gpus}(,|$)", row["AllocTRES"]), row  # the GPUs asked for: allocated
            seconds += int(row["ElapsedRaw"]) * job.gpus
        hours[ids[job.key]] = seconds / 3600

    state = workdir / "state"
    current, new = workdir / "current.conf", workdir / "new.conf"
    current.write_text(f"[site]\ncluster_name = {slurm_lab['cluster_name']}\ntimezone = UTC\nstate_dir = {state}\n"
                       f"results_dir = {workdir / 'results'}\n[partition gpu]\ngpu_type = h100\ngpus_per_node = 4\n")
    new.write_text(current.read_text() + NEW)  # (the first line goes on in [partition gpu])
    since = started.strftime("%Y-%m-%dT%H:%M:%S+00:00")
    until = (datetime.now(timezone.utc) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    fetched = _gpuclust(current, "report", "fetch", "--since", since, "--until", until)
    assert fetched.returncode == 0, fetched.stderr

    alone = _gpuclust(current, "policy", "replay", "--since", since, "--until", until, "--json")
    assert alone.returncode == 0, alone.stdout + alone.stderr  # the current config refuses nothing
    doc = json.loads(alone.stdout)
    everything = _tally(JOBS, ids, hours)
    assert doc["partition_defaults"] == "scontrol"
    assert _same(doc["replayed"], everything), (doc["replayed"], everything)
    # the srun job from its fields, every sbatch one from its submit line; none left out
    assert doc["replayed"]["from_submit_line"] == len(JOBS) - 1
    assert doc["replayed"]["from_fields"] == {NOT_SBATCH.format(prog="srun"): 1}
    assert doc["not_replayed"]["submissions"] == 0 and doc["not_replayed"]["reasons"] == []
    cur = doc["configs"]["current"]
    assert cur["refused"]["submissions"] == 0 and _same(cur["accepted"], everything)
    assert cur["uncertain"] == []
    assert list(doc["configs"]) == ["current"] and doc["changed"]["submissions"] == 0

    both = _gpuclust(current, "policy", "replay", "--since", since, "--until", until, "--config", str(new), "--json")
    assert both.returncode == 1, both.stdout + both.stderr  # NEW refuses some
    doc = json.loads(both.stdout)
    got = doc["configs"]["new"]
    refused = [j for j in JOBS if j.rule]

    # The hand count, summed from JOBS:
    #   label_missing       e                (ml, root)            1 submission, 1 job
    #   label_value         f                (ml, root)            1 submission, 1 job
    #   partition_max_time  d, h             (ml lab user, physics root)
    #   account_max_gpus    b, c             (physics root, physics lab user)
    #   accepted            a, g (3 tasks), i, j, k: 5 submissions, 7 jobs
    # by account: physics b, c, h; ml d, e, f.  by user: root b, e, f, h; the lab user c, d.
    def by(key: str, value: Any) -> list[Job]:
        return [j for j in refused if getattr(j, key) == value]

    want_rule = {rule: _tally(by("rule", rule), ids, hours) for rule in {j.rule for j in refused}}
    assert sorted((k, v["submissions"]) for k, v in want_rule.items()) == [
        ("account_max_gpus", 2), ("label_missing", 1), ("label_value", 1), ("partition_max_time", 2)]
    want_account = {a: _tally(by("account", a), ids, hours) for a in ("physics", "ml")}
    want_user = {"root": _tally(by("user", "root"), ids, hours), lab_user: _tally(by("user", "lab"), ids, hours)}
    assert [len(by("user", "root")), len(by("user", "lab"))] == [4, 2]
    for section, key, want in (("refused_by_rule", "rule", want_rule), ("refused_by_account", "account", want_account),
                               ("refused_by_user", "user", want_user)):
        rows = {r[key]: r for r in got[section]}
        assert set(rows) == set(want), (section, rows)
        for name, tally in want.items():
            assert _same(rows[name], tally), (section, name, rows[name], tally)
    assert _same(got["refused"], _tally(refused, ids, hours))
    accepted = [j for j in JOBS if not j.rule]
    assert _same(got["accepted"], _tally(accepted, ids, hours)) and got["accepted"]["jobs"] == 7

    # every refusal under NEW is a changed verdict (the current config accepts all)
    changed = {c["job_id"]: c for c in doc["changed"]["list"]}
    assert set(changed) == {ids[j.key] for j in refused}, changed
    for job in refused:
        c = changed[ids[job.key]]
        assert c["current"]["accepted"] and not c["new"]["accepted"] and c["new"]["rule"] == job.rule, c
        assert abs(c["gpu_hours"] - hours[ids[job.key]]) <= 0.0005 + 1e-9, c
        assert c["uncertain"] == [], c
    assert doc["changed"]["submissions"] == len(refused) and doc["changed"]["jobs"] == len(refused)

    # no --time in a script job: read as none (accepted), and said to be uncertain under NEW only
    unsure = [j for j in JOBS if j.uncertain]
    assert [(u["reason"], sorted(u["job_ids"])) for u in got["uncertain"]] == \
        [(TIME_DEFAULT, sorted(ids[j.key] for j in unsure))], got["uncertain"]
    assert _same(got["uncertain"][0], _tally(unsure, ids, hours))
    assert doc["configs"]["current"]["uncertain"] == []

    table = _gpuclust(current, "policy", "replay", "--since", since, "--until", until, "--config", str(new))
    assert table.returncode == 1, table.stderr
    assert max(len(line) for line in table.stdout.splitlines()) <= 80, table.stdout
    assert "uncertain" in table.stdout and "account_max_gpus" in table.stdout
