"""The sbatch grammar replayed against what the real sbatch + slurmctld did (tests/data/policy/sbatch-grammar-*.json).

Each recorded case ran `sbatch ARGV` in an empty directory (job.sh holding the case's script, stdin empty). Where
sbatch refused before sending, Python must refuse (SbatchRefusal, exit 2); where the probe job_submit.lua saw a
job_desc, Python must produce the same fields.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuclust.policy.sbatch import SbatchRefusal, known_versions, read_sbatch

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
TABLES = sorted(DATA.glob("sbatch-grammar-*.json"))
FIELDS = ["account", "partition", "qos", "comment", "wckey", "min_nodes", "max_nodes", "num_tasks", "ntasks_per_node",
          "sockets_per_node", "ntasks_per_socket", "cores_per_socket", "threads_per_core", "cpus_per_task",
          "time_limit", "time_min", "gres", "tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket",
          "cpus_per_tres", "mem_per_tres", "ntasks_per_tres"]
# Cases where policy check deliberately differs: het jobs are refused (exit 2) instead of judged per component.
HET = "het"


def _cases():
    for path in TABLES:
        table = json.loads(path.read_text(encoding="utf-8"))
        for i, case in enumerate(table["cases"]):
            yield pytest.param(table["slurm_version"], case, id=f"{table['slurm_version']}-{i}-{' '.join(case['argv'][1:])[:60]}")


def _bytes_view(value):
    """The probe prints each byte >= 128 as its own \\u00XX: read those bytes back as UTF-8 (invalid -> U+FFFD)."""
    if isinstance(value, str) and all(ord(c) < 256 for c in value):
        return value.encode("latin-1").decode("utf-8", "replace")
    return value


@pytest.mark.parametrize("version,case", list(_cases()))
def test_replay(version, case):
    if ".".join(version.split(".")[:2]) not in known_versions():
        pytest.skip(f"no recorded sbatch option table for {version}")
    files = {}
    if case["script"] is not None:
        files["job.sh"] = case["script"].encode(case["script_encoding"])

    def read_file(path):
        if path in files:
            return files[path]
        raise FileNotFoundError(2, "No such file or directory", path)

    het = ":" in case["argv"] or (case["script"] or "").find("hetjob") >= 0
    if het or (case["job_desc"] is None and not case["queued"]):
        with pytest.raises(SbatchRefusal):
            read_sbatch(case["argv"], read_file=read_file, stdin=b"", version=version)
        return
    if case["job_desc"] is None:  # queued, but --quiet hid the probe's message: it must at least be read
        read_sbatch(case["argv"], read_file=read_file, stdin=b"", version=version)
        return
    job = read_sbatch(case["argv"], read_file=read_file, stdin=b"", version=version).job_desc
    got = {f: job.get(f) for f in FIELDS}
    want = {f: _bytes_view(case["job_desc"].get(f)) for f in FIELDS}
    assert got == want
