"""benchmarks/policy_engine_in_slurmctld.py: its wrapper renders with the policy, runs every timing loop and logs the
lines the script parses (on lupa's Lua 5.1 with the 22.05 `slurm` mock; the script itself runs it in slurmctld)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("lupa")

REPO = Path(__file__).resolve().parent.parent.parent
SCRIPT = REPO / "benchmarks" / "policy_engine_in_slurmctld.py"


def _bench() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("policy_engine_in_slurmctld", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_engine_fields_are_the_reads_of_the_engine():
    fields = _bench().engine_fields()
    for name in ("account", "user_name", "comment", "partition", "tres_per_node", "tres_per_task", "time_limit"):
        assert name in fields
    assert all(name.isidentifier() for name in fields)


def test_wrapper_times_every_loop_and_the_job_is_still_judged():
    from gpuclust.policy.luasim import LuaPolicy

    bench = _bench()
    conf = (REPO / "tests" / "data" / "policy" / "lab-site.conf").read_text()
    lab_policy = sys.modules["policy_sbatch_throughput"].lab_policy  # the script's own import of it
    lua = LuaPolicy(bench.bench_lua(lab_policy(conf, 5)))
    job = {"user_name": "alice", "account": "physics", "partition": "gpu", "tres_per_node": "gres:gpu:h100:2",
           "min_nodes": 1, "max_nodes": 1, "time_limit": 30, "comment": bench.COMMENT + " bench_n=50"}
    assert lua.submit(job).rc == 0
    log = str(lua.eval("gpuclust_sim_infos()"))
    line, reads = bench.LOG_LINE.search(log), bench.READS_LINE.search(log)
    assert line and reads, log
    assert int(line[1]) == 50 and int(line[2]) == len(bench.engine_fields())
    assert {item.split("=")[0] for item in reads[3].split()} == set(bench.engine_fields())
    rejected = dict(job, comment="team=nobody bench_n=5")  # the wrapper hands the verdict through
    assert lua.submit(rejected).rc != 0
