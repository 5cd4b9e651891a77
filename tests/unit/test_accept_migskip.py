"""all_reduce on MIG slices is skipped with a note (issue 44 part 5): at submission (the partition's GPU type in the
site config), in the job (the GPUs Slurm allocated), and in `accept report` and the audit's freshness."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import migskip
from gpuclust.accept import results as R
from gpuclust.accept import submit as S
from gpuclust.accept.report import evaluate
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.exitcodes import Nagios
from gpuclust.slurm.replay import ReplaySlurmClient

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
# `scontrol show job -d` detail line of a one-slice job on the lab's MIG node (the shape parse_job_node_gres reads)
MIG_JOB = "   Nodes=node5 CPU_IDs=0 Mem=0 GRES=gpu:1g.10gb:1(IDX:0)\n"


def config(tmp_path: Path) -> str:
    path = tmp_path / "site.conf"
    path.write_text(f"""
[site]
cluster_name = lab
results_dir = {tmp_path}/results
[partition mig]
gpu_type = 1g.10gb
gpus_per_node = 4
[partition gpu]
gpu_type = h100
gpus_per_node = 4
""")
    return str(path)


@pytest.mark.parametrize(("kind", "types", "skipped"), [
    ("allreduce", ["1g.10gb"], True),
    ("allreduce", ["1g.10gb", "3g.40gb"], True),
    ("allreduce", ["nvidia_h100_80gb_hbm3_3g.40gb"], True),
    ("allreduce", ["h100"], False),
    ("allreduce", ["1g.10gb", "h100"], False),  # a whole GPU among them: the test runs
    ("allreduce", [None], False),  # untyped: whole GPUs
    ("allreduce", [], False),  # no GPU (CPU run, gloo)
    ("pairwise", ["1g.10gb"], False),
    ("storage", ["1g.10gb"], False),
])
def test_skip_note(kind: str, types: list[str | None], skipped: bool) -> None:
    note = migskip.skip_note(kind, types)
    assert (note is not None) == skipped
    if note:
        assert note.startswith("all_reduce skipped: the GPUs are MIG slices (")
        assert note.endswith("NCCL has no P2P between MIG instances")


def test_job_gpu_types() -> None:
    assert migskip.job_gpu_types({"node5": "gpu:1g.10gb:1(IDX:0)", "node6": ""}) == ["1g.10gb"]
    assert migskip.job_gpu_types({"node1": "gpu:h100:2(IDX:0-1)"}) == ["h100"]
    # as the lab's Slurm 22.05 declared a one-slice job on node5: the unallocated type listed with count 0
    assert migskip.job_gpu_types({"node5": "gpu:1g.10gb:1(IDX:0),gpu:3g.40gb:0(IDX:)"}) == ["1g.10gb"]


def test_submit_all_on_a_mig_partition_leaves_allreduce_out(tmp_path: Path) -> None:
    path = config(tmp_path)
    cfg = parse_config(Path(path).read_text())
    client = ReplaySlurmClient()
    client.add("sbatch", S.build("pairwise", cfg, "mig", 2).args, "202\n")
    client.add("sbatch", S.build("storage", cfg, "mig", 2).args, "203\n")
    runner = CliRunner()
    out = runner.invoke(cli, ["--config", path, "accept", "submit", "all", "-p", "mig", "-N", "2", "--json"],
                        obj=AppContext(client=client))
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["jobs"] == [{"kind": "pairwise", "job_id": "202"}, {"kind": "storage", "job_id": "203"}]
    assert doc["skipped"] == [{"kind": "allreduce", "reason": "all_reduce skipped: the GPUs are MIG slices "
                                                            "(1g.10gb); NCCL has no P2P between MIG instances"}]
    assert "gpuclust: allreduce not submitted: all_reduce skipped" in out.stderr
    alone = runner.invoke(cli, ["--config", path, "accept", "submit", "allreduce", "-p", "mig", "-N", "2"],
                          obj=AppContext(client=client))
    assert alone.exit_code == 0 and alone.stdout == "" and "not submitted" in alone.stderr


def test_submit_on_whole_gpus_has_no_skipped_key(tmp_path: Path) -> None:
    path = config(tmp_path)
    cfg = parse_config(Path(path).read_text())
    client = ReplaySlurmClient()
    client.add("sbatch", S.build("allreduce", cfg, "gpu", 2).args, "101\n")
    out = CliRunner().invoke(cli, ["--config", path, "accept", "submit", "allreduce", "-p", "gpu", "-N", "2",
                                   "--json"], obj=AppContext(client=client))
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == {"partition": "gpu", "nodes": 2, "jobs": [{"kind": "allreduce", "job_id": "101"}]}


def _in_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job_text: str) -> Path:
    """The environment of a batch step on the lab's node5, with scontrol answering `job_text`."""
    results = tmp_path / "results"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    (tmp_path / "job.txt").write_text(job_text)
    (tmp_path / "node.txt").write_text("NodeName=node5 Gres=gpu:1g.10gb:4,gpu:3g.40gb:1\n")
    scontrol.write_text(f'#!/bin/sh\ncase "$*" in *job*) cat "{tmp_path}/job.txt";; *) cat "{tmp_path}/node.txt";; '
                        'esac\n')
    scontrol.chmod(0o755)
    slurm_conf = tmp_path / "slurm.conf"
    slurm_conf.write_text("")
    for name, value in {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node5", "SLURM_CONF": str(slurm_conf),
                        "ACCEPT_RESULTS_DIR": str(results), "ACCEPT_PARTITION": "mig",
                        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}.items():
        monkeypatch.setenv(name, value)
    return results


def test_in_the_job_mig_slices_are_recorded_as_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    results = _in_job(tmp_path, monkeypatch, MIG_JOB)
    assert migskip.main(["--kind", "allreduce", "--started", str(NOW.timestamp())]) == 0
    assert "accept-allreduce: all_reduce skipped: the GPUs are MIG slices (1g.10gb)" in capsys.readouterr().out
    [result] = R.scan_results(str(results)).jobs
    assert result.kind == "allreduce" and result.job.passed and result.nodes == ("node5",)
    assert result.skipped == "all_reduce skipped: the GPUs are MIG slices (1g.10gb); NCCL has no P2P between MIG " \
                             "instances"
    assert result.job.declared_gres == {"node5": "gpu:1g.10gb:1(IDX:0)"}
    assert result.job.started == NOW


def test_in_the_job_whole_gpus_run_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = _in_job(tmp_path, monkeypatch, "   Nodes=node5 CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:0-1)\n")
    assert migskip.main(["--kind", "allreduce"]) == 1
    assert not results.exists()


def _skipped_result(results: Path, finished: datetime) -> None:
    job = R.JobRecord(job_id="77", kind="allreduce", cluster="lab", partition="mig", nodes=("node5",),
                      started=finished - timedelta(seconds=5), finished=finished, passed=True,
                      extra={"skipped": migskip.skip_note("allreduce", ["1g.10gb"])})
    R.write_result(str(results), R.JobResult("", job))


def test_report_shows_the_skip_as_a_note(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _skipped_result(results, NOW)
    cfg = parse_config(Path(config(tmp_path)).read_text())
    report = evaluate(R.scan_results(str(results)), cfg)
    assert report.status == Nagios.OK
    [summary] = report.jobs
    assert summary.headline.startswith("all_reduce skipped: the GPUs are MIG slices")
    notes = [f for f in report.findings if f.check == "skipped"]
    assert [(f.status, f.message) for f in notes] == [(Nagios.OK, "allreduce job 77: " + summary.headline)]


def test_skipped_run_is_no_pass_for_freshness(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _skipped_result(results, NOW)
    assert R.last_pass_by_node(R.scan_results(str(results)).jobs) == {}
