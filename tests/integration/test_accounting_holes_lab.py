"""Issue 13 on the real lab: newlines and pipes in names and in the LAST sacct column (Comment), an array, a
running job. The plain `|` dump with Comment last must read as the fetch's own dump of the same jobs, every
record counted, and the running job reported as left out."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, RAW_FIELDS
from gpuclust.accounting.ingest.text import parse_parsable
from tests.integration.labutil import run_cmd, submit

pytestmark = pytest.mark.slurm

SITE_CONF = """[site]
cluster_name = ah
state_dir = {state}
[gpu_type h100]
price_per_gpu_hour = 2.50
[partition gpu]
gpu_type = h100
"""


def _sacct(since: str, until: str, fields: tuple[str, ...], delimiter: str | None) -> bytes:
    env = dict(os.environ, TZ="UTC", SLURM_TIME_FORMAT="%Y-%m-%dT%H:%M:%S")
    args = ["sacct", "-a", "-D", "-X", "-S", since, "-E", until, "--parsable2", "-o", ",".join(fields)]
    if delimiter:
        args.insert(-2, f"--delimiter={delimiter}")
    return subprocess.run(args, env=env, capture_output=True, check=True, timeout=60).stdout


def test_last_column_newlines_and_running_job(slurm_lab, tmp_path: Path) -> None:
    since = (datetime.now(timezone.utc) - timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
    common = ["-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", "-A", "ml", "-p", "gpu", "--gres=gpu:h100:1"]
    done = [
        submit([*common, "-J", "ah|pipe", "--comment=team=ml\nproject=nl-last", "--wrap", "sleep 1"]),
        submit([*common, "-J", "ah\nname", "--comment=team=ml|project=pipe", "--wrap", "sleep 1"]),
        submit([*common, "-J", "ah-trailing", "--comment=trailing\n", "--wrap", "sleep 1"]),
        submit([*common, "-J", "ah-array", "-a", "0-1", "--comment=arr\n|x", "--wrap", "sleep 1"]),
    ]
    running = submit([*common, "-J", "ah-running", "--comment=still\nrunning", "--wrap", "sleep 120"])
    expected = {*done[:3], f"{done[3]}_0", f"{done[3]}_1"}
    try:
        # (labutil.wait_for_sacct splits sacct's lines on `|`: these names and comments break that on purpose)
        deadline = time.monotonic() + 120
        while True:
            until = (datetime.now(timezone.utc) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
            fetch = _sacct(since, until, FETCH_FIELDS, FETCH_DELIMITER)
            rows = parse_parsable(fetch, FETCH_DELIMITER, "fetch").table.to_pylist()
            ended = {r["job_id"] for r in rows if r["state"] in ("COMPLETED", "FAILED") and r["partition"]}
            if expected <= ended and any(r["job_id"] == running and r["state"] == "RUNNING" for r in rows):
                break
            assert time.monotonic() < deadline, f"sacct never showed every job settled: {rows}"
            time.sleep(1)
        plain = _sacct(since, until, RAW_FIELDS, None)  # Comment is the last column
        fetch = _sacct(since, until, FETCH_FIELDS, FETCH_DELIMITER)
    finally:
        run_cmd(["scancel", running], check=False)
    a = parse_parsable(plain, "|", "plain")
    b = parse_parsable(fetch, FETCH_DELIMITER, "fetch")
    assert a.rejected == b.rejected == 0, [str(p) for p in a.problems + b.problems]
    cols = ["job_id", "job_name", "comment", "state"]
    rows_a = sorted(a.table.select(cols).cast(b.table.select(cols).schema).to_pylist(), key=str)
    rows_b = sorted(b.table.select(cols).to_pylist(), key=str)
    assert rows_a == rows_b
    comments = {r["comment"] for r in rows_a}
    # (22.05 shows a running job's comment empty: slurmdbd gets it when the job ends)
    assert {"team=ml\nproject=nl-last", "trailing\n", "arr\n|x"} <= comments

    # The report through the CLI: the running job is left out, and says so.
    src = tmp_path / "plain.txt"
    src.write_bytes(plain)
    conf = tmp_path / "site.conf"
    conf.write_text(SITE_CONF.format(state=tmp_path / "state"))
    cp = subprocess.run([sys.executable, "-m", "gpuclust.cli.main", "--config", str(conf), "report", "build",
                         "--input", str(src), "--out", str(tmp_path / "out"), "--format", "json", "--json"],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stderr
    import json

    report = json.loads(cp.stdout)
    assert report["input"]["left_out"]["running"] >= 1
    assert report["input"]["rejected_rows"] == 0
