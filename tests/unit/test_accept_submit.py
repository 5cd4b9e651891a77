"""`accept submit`: sbatch arguments from the site config, validated; job ids printed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accept import submit as S
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import InputError, UnsafeValueError
from gpuclust.slurm.replay import ReplaySlurmClient

REPO = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, gpus: int = 4) -> str:
    text = f"""
[site]
cluster_name = lab
results_dir = {tmp_path}/results
[partition gpu]
gpu_type = h100
gpus_per_node = {gpus}
[partition cpu]
gpus_per_node = 0
"""
    path = tmp_path / "site.conf"
    path.write_text(text)
    return str(path)


def test_allreduce_one_rank_per_gpu(tmp_path: Path) -> None:
    cfg = parse_config(Path(config(tmp_path)).read_text())
    sub = S.build("allreduce", cfg, "gpu", 4)
    assert sub.args[:5] == ["--parsable", "--partition=gpu", "--nodes=4", "--job-name=accept-allreduce", "--export=ALL"]
    assert "--gres=gpu:h100:4" in sub.args and "--ntasks-per-node=4" in sub.args
    assert sub.args[-1] == str(REPO / "sbatch_templates" / "allreduce.sbatch")
    assert sub.env["GPUCLUST_PYTHON"] == sys.executable
    assert sub.env["ACCEPT_RESULTS_DIR"] == f"{tmp_path}/results" and sub.env["ACCEPT_PARTITION"] == "gpu"
    assert (tmp_path / "results" / "logs").is_dir()


def test_pairwise_storage_one_rank_per_node_and_cpu(tmp_path: Path) -> None:
    cfg = parse_config(Path(config(tmp_path)).read_text())
    assert "--gres=gpu:h100:1" in S.build("pairwise", cfg, "gpu", 4).args
    cpu = S.build("storage", cfg, "cpu", 2).args
    assert not any(a.startswith("--gres") for a in cpu) and "--ntasks-per-node=1" in cpu
    one = S.build("allreduce", cfg, "gpu", 2, gpus_per_node=1).args
    assert "--gres=gpu:h100:1" in one and "--ntasks-per-node=1" in one
    with pytest.raises(InputError):
        S.build("pairwise", cfg, "gpu", 1)


@pytest.mark.parametrize("kw", [{"account": "a;b"}, {"qos": "$(id)"}, {"time_limit": "1h; id"},
                                {"comment": "x`id`"}, {"settings": {"ACCEPT_MAX_SIZE": "1G;id"}},
                                {"python": "python3 -c x"}])
def test_injection_refused(tmp_path: Path, kw: dict) -> None:
    cfg = parse_config(Path(config(tmp_path)).read_text())
    with pytest.raises((UnsafeValueError, ValueError)):
        if "settings" in kw:
            S.parse_settings([f"{k}={v}" for k, v in kw["settings"].items()])
            raise UnsafeValueError("not reached")
        S.build("allreduce", cfg, "gpu", 2, **kw)


def test_settings() -> None:
    assert S.parse_settings(["ACCEPT_MAX_SIZE=64M"]) == {"ACCEPT_MAX_SIZE": "64M"}
    with pytest.raises(UnsafeValueError):
        S.parse_settings(["LD_PRELOAD=/x.so"])


def test_cli_submit_all_prints_ids(tmp_path: Path) -> None:
    path = config(tmp_path)
    cfg = parse_config(Path(path).read_text())
    client = ReplaySlurmClient()
    for kind, job in (("allreduce", "101"), ("pairwise", "102"), ("storage", "103")):
        client.add("sbatch", S.build(kind, cfg, "gpu", 4, settings={"ACCEPT_MAX_SIZE": "16M"}).args, f"{job}\n")
    runner = CliRunner()
    out = runner.invoke(cli, ["--config", path, "accept", "submit", "all", "-p", "gpu", "-N", "4",
                              "--set", "ACCEPT_MAX_SIZE=16M"], obj=AppContext(client=client))
    assert out.exit_code == 0, out.output
    assert out.output.split("\n")[:3] == ["allreduce 101", "pairwise 102", "storage 103"]
    out = runner.invoke(cli, ["--config", path, "accept", "submit", "allreduce", "-p", "gpu", "-N", "4", "--json",
                              "--set", "ACCEPT_MAX_SIZE=16M"], obj=AppContext(client=client))
    assert json.loads(out.output)["jobs"] == [{"kind": "allreduce", "job_id": "101"}]
    bad = runner.invoke(cli, ["--config", path, "accept", "submit", "allreduce", "-p", "gpu", "-N", "4",
                              "--set", "ACCEPT_MAX_SIZE=1G;id"], obj=AppContext(client=client))
    assert bad.exit_code == 2
