"""The sbatch grammar against the live lab: every case of record_sbatch_grammar.py is run through the real sbatch
(with the probe job_submit.lua) and through gpuclust's reader for the lab's release; both must agree.

Refused by sbatch before job_submit <=> SbatchRefusal; otherwise the job_desc fields the probe printed == ours.
The pass-through job_submit.lua is put back afterwards.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclust.policy.sbatch import SbatchRefusal, read_sbatch, table_for
from tests.integration.labutil import SLURM_LAB, run_cmd
from tests.unit.test_policy_sbatch_grammar import FIELDS, _bytes_view

pytestmark = pytest.mark.slurm

DATA = Path(__file__).resolve().parent.parent / "data" / "policy"
_spec = importlib.util.spec_from_file_location("record_sbatch_grammar", DATA / "record_sbatch_grammar.py")
assert _spec and _spec.loader
recorder: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recorder)


@pytest.fixture(scope="module")
def probe(slurm_lab) -> Iterator[str]:
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(DATA / "probe_job_submit.lua")], timeout=60)
    try:
        out = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, timeout=30).stdout
        yield table_for(out)
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=60)


@pytest.mark.parametrize("index", range(len(recorder.CASES)))
def test_reader_matches_live_sbatch(probe, index):
    live = recorder.run_case(recorder.CASES[index])
    files = {}
    if live["script"] is not None:
        files["job.sh"] = live["script"].encode(live["script_encoding"])

    def read_file(path: str) -> bytes:
        if path in files:
            return files[path]
        raise FileNotFoundError(2, "No such file or directory", path)

    het = ":" in live["argv"] or "hetjob" in (live["script"] or "")
    if het or (live["job_desc"] is None and not live["queued"]):
        with pytest.raises(SbatchRefusal):
            read_sbatch(live["argv"], read_file=read_file, stdin=b"", version=probe)
        return
    if live["job_desc"] is None:  # queued, but --quiet hid the probe's message
        read_sbatch(live["argv"], read_file=read_file, stdin=b"", version=probe)
        return
    job = read_sbatch(live["argv"], read_file=read_file, stdin=b"", version=probe).job_desc
    assert {f: job.get(f) for f in FIELDS} == {f: _bytes_view(live["job_desc"].get(f)) for f in FIELDS}, live["stderr"]
