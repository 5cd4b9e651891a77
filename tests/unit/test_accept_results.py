"""The acceptance result schema: write/read round trip, and bad lines reported with file:line."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuclust.accept import results as R
from gpuclust.errors import InputError

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)


def make_result(job_id: str = "42", kind: str = "allreduce", passed: bool = True, finished: datetime = T0,
                failed_nodes: tuple[str, ...] = ()) -> R.JobResult:
    job = R.JobRecord(job_id=job_id, kind=kind, cluster="lab", partition="gpu", nodes=("node1", "node2"),
                      started=finished - timedelta(seconds=30), finished=finished, passed=passed,
                      failed_nodes=failed_nodes, world_size=2, backend="gloo", params={"iters": 5},
                      declared_gres={"node1": "gpu:h100:4(IDX:0-3)"}, node_gres={"node1": "gpu:h100:4"})
    ranks = tuple(
        R.RankRecord(job_id=job_id, kind=kind, rank=i, local_rank=0, world_size=2, hostname=f"node{i+1}",
                     node=f"node{i+1}", versions=R.Versions(torch="2.13.0+cpu"), cuda_visible_devices="0,1,2,3",
                     gpus_bound=4, backend="gloo", device="cpu")
        for i in range(2)
    )
    sweep = (R.SweepRecord(job_id=job_id, kind=kind, size=1024, count=256, dtype="float32", iters=5, warmup=1,
                           time_us=100.0, time_us_max=110.0, algbw_gbps=0.01024, busbw_gbps=0.01024, wrong=0,
                           world_size=2),)
    storage = (R.StorageRecord(job_id=job_id, kind=kind, metric="checkpoint_read", node="node2", bytes=10**6,
                               seconds=0.5, mbps=2.0, write_node="node1", read_node="node2"),)
    return R.JobResult("", job, ranks, sweep, (), storage)


def test_round_trip(tmp_path: Path) -> None:
    original = make_result()
    path = R.write_result(tmp_path, original)
    assert path.name == "allreduce-42.jsonl"
    [loaded] = R.load_results(tmp_path)
    assert loaded.job == original.job
    assert loaded.ranks == original.ranks
    assert loaded.sweep == original.sweep
    assert loaded.storage == original.storage
    assert loaded.node_versions()["node1"].torch == "2.13.0+cpu"
    # no temp file left behind
    assert [p.name for p in tmp_path.iterdir()] == ["allreduce-42.jsonl"]


def test_unknown_keys_are_kept(tmp_path: Path) -> None:
    line = R.record_to_dict(make_result().job)
    line["future_field"] = 7
    (tmp_path / "allreduce-42.jsonl").write_text(json.dumps(line) + "\n")
    [loaded] = R.load_results(tmp_path)
    assert loaded.job.extra == {"future_field": 7}


def test_bad_lines_are_reported_with_file_and_line(data_dir: Path) -> None:
    directory = data_dir / "accept" / "results_bad"
    scan = R.scan_results(directory)
    where = {(Path(p.file).name, p.line) for p in scan.problems}
    assert ("allreduce-7.jsonl", 3) in where  # not JSON
    assert ("allreduce-7.jsonl", 4) in where  # busbw is a string
    assert ("allreduce-7.jsonl", 5) in where  # missing size
    assert ("allreduce-7.jsonl", 6) in where  # wrong schema tag
    assert ("storage-8.jsonl", None) in where  # no job line at all
    # the readable part of allreduce-7 is still there: the job and its good sweep line
    [job7] = scan.jobs
    assert job7.job_id == "7" and [s.size for s in job7.sweep] == [8]
    assert scan.bad_files and scan.bad_files[0].endswith("storage-8.jsonl")
    with pytest.raises(InputError) as info:
        R.load_results(directory)
    assert "allreduce-7.jsonl:3" in str(info.value)
    assert "busbw_gbps" in str(info.value)


def test_filters_since_and_job(tmp_path: Path) -> None:
    R.write_result(tmp_path, make_result("1", finished=T0))
    R.write_result(tmp_path, make_result("2", finished=T0 + timedelta(days=1)))
    R.write_result(tmp_path, make_result("2", kind="storage", finished=T0 + timedelta(days=1)))
    assert [r.job_id for r in R.load_results(tmp_path, since=T0 + timedelta(hours=1))] == ["2", "2"]
    assert [r.kind for r in R.load_results(tmp_path, job="2")] == ["allreduce", "storage"]
    assert [r.job_id for r in R.load_results(tmp_path, job="1")] == ["1"]
    # a naive since is UTC
    assert len(R.load_results(tmp_path, since=datetime(2026, 12, 2, 10, 0))) == 3


def test_missing_dir_is_a_problem(tmp_path: Path) -> None:
    scan = R.scan_results(tmp_path / "nope")
    assert scan.problems and "does not exist" in scan.problems[0].message


def test_node_passed_and_last_pass() -> None:
    ok = make_result("1", finished=T0)
    named = make_result("2", passed=False, finished=T0 + timedelta(hours=1), failed_nodes=("node2",))
    blind = make_result("3", passed=False, finished=T0 + timedelta(hours=2))
    assert named.node_passed("node1") and not named.node_passed("node2")
    assert not blind.node_passed("node1")
    assert not ok.node_passed("node9")
    last = R.last_pass_by_node([ok, named, blind])
    assert last == {"node1": T0 + timedelta(hours=1), "node2": T0}


def test_record_job_mismatch_is_reported(tmp_path: Path) -> None:
    result = make_result("5")
    lines = R.dump_lines(result).splitlines()
    other = json.loads(lines[1])
    other["job_id"] = "6"
    lines[1] = json.dumps(other)
    (tmp_path / "allreduce-5.jsonl").write_text("\n".join(lines) + "\n")
    scan = R.scan_results(tmp_path)
    assert [(p.line, p.field) for p in scan.problems] == [(2, "job_id")]


def test_file_name_validation() -> None:
    with pytest.raises(ValueError):
        R.result_file_name("allreduce", "1;rm")
    with pytest.raises(ValueError):
        R.result_file_name("nccl", "1")
    assert R.result_file_name("pairwise", "12_3") == "pairwise-12_3.jsonl"


@pytest.mark.parametrize("text,expected", [(None, None), ("", 0), ("NoDevFiles", 0), ("0", 1), ("0,1,2,3", 4),
                                           ("GPU-aa,GPU-bb", 2)])
def test_count_visible_devices(text: str | None, expected: int | None) -> None:
    assert R.count_visible_devices(text) == expected


def test_failed_step_leaves_a_failed_record(tmp_path: Path) -> None:
    """The templates' fallback when the program died before writing: a passed=false job record, once."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, SLURM_JOB_ID="31", SLURM_JOB_NODELIST="node[1-2]", ACCEPT_RESULTS_DIR=str(tmp_path),
               ACCEPT_PARTITION="gpu")
    argv = [sys.executable, "-m", "gpuclust.accept.failed", "--kind", "storage", "--rc", "137", "--started", "1.5e9"]
    assert subprocess.run(argv, env=env, capture_output=True).returncode == 0
    [res] = R.load_results(tmp_path)
    assert (res.kind, res.job_id, res.job.passed, res.nodes) == ("storage", "31", False, ("node1", "node2"))
    assert "exited 137" in res.job.reasons[0] and res.job.partition == "gpu"
    before = (tmp_path / "storage-31.jsonl").read_text()
    subprocess.run(argv, env=env, capture_output=True, check=True)
    assert (tmp_path / "storage-31.jsonl").read_text() == before  # an existing result is never overwritten


def test_pair_budget() -> None:
    from gpuclust.accept.pairwise import iterations_for_budget

    assert iterations_for_budget(0.66, 2.0, 5) == 3  # a throttled pair: fewer iterations
    assert iterations_for_budget(0.005, 2.0, 5) == 5  # a healthy pair: all of them
    assert iterations_for_budget(10.0, 2.0, 5) == 1  # always at least one
    assert iterations_for_budget(0.5, 0, 5) == 5  # 0 = no budget


def test_schema_tag_written_and_older_lines_read(tmp_path: Path) -> None:
    """Lines are written as gpuclust.accept.result/1; lines under the first name (gpuclust.accept/1) and lines
    without a tag (older history) read the same; another version is a problem naming the line."""
    original = make_result()
    lines = [json.loads(line) for line in R.dump_lines(original).splitlines()]
    assert {line["schema"] for line in lines} == {"gpuclust.accept.result/1"}
    for tag in ("gpuclust.accept/1", None):
        old = [{k: v for k, v in line.items() if k != "schema"} | ({"schema": tag} if tag else {}) for line in lines]
        (tmp_path / "allreduce-42.jsonl").write_text("".join(json.dumps(line) + "\n" for line in old))
        [loaded] = R.load_results(tmp_path)
        assert loaded.job == original.job and loaded.ranks == original.ranks and loaded.sweep == original.sweep
    lines[1]["schema"] = "gpuclust.accept.result/2"
    (tmp_path / "allreduce-42.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    scan = R.scan_results(tmp_path)
    assert [(p.line, p.field) for p in scan.problems] == [(2, "schema")]
