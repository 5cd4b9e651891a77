"""Acceptance inside a container on the real Slurm lab: Slurm's native OCI support (`srun --container`, the
lab's oci.conf running crun) on a Debian bookworm bundle built by `slurm-lab oci-bundle`; the same all_reduce
containerised and bare, compared per node by `accept report --compare-container`; a run in the container
without a digest left out of the comparison; a missing image and a missing runtime refused before submission."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuclust.accept import container as C
from tests.integration.labutil import REPO, SLURM_LAB, run_cmd, submit, wait_job_done
from tests.integration.test_accept_lab import SMALL, Accept

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def bundle(slurm_lab: Any) -> str:
    root = slurm_lab.info.get("root")
    if root and not (Path(root) / "usr" / "bin" / "crun").exists():
        pytest.skip(f"the Slurm root {root} has no crun (roots built before crun joined ROOT_PACKAGES)")
    cp = subprocess.run([str(SLURM_LAB), "--name", slurm_lab.name, "oci-bundle"], capture_output=True, text=True,
                        timeout=1200, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stderr[-3000:]
    return cp.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def accept(slurm_lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Accept]:
    root = tmp_path_factory.mktemp("container")
    os.chmod(root, 0o755)
    acc = Accept(slurm_lab, root)
    # the lab's figures swing with the machine's load: the comparison is checked for its shape here, the
    # tolerance itself in tests/unit/test_accept_container_compare.py
    text = acc.config.read_text().replace("storage_tolerance = 50%", "storage_tolerance = 50%\ncontainer_tolerance = 100%")
    acc.config.write_text(text)
    yield acc


def submit_accept(accept: Accept, *extra: str) -> str:
    args = ["accept", "submit", "allreduce", "-p", "gpu", "-N", "4", "--gpus-per-node", "1", "-A", "ml",
            "--comment", "team=ml project=acceptance", "--json", *extra]
    for item in (accept.glob, *SMALL):
        args += ["--set", item]
    cp = accept.gpuclust(*args)
    assert cp.returncode == 0, cp.stderr + cp.stdout
    return str(json.loads(cp.stdout)["jobs"][0]["job_id"])


def test_allreduce_in_oci_container_compared_with_bare_metal(accept: Accept, bundle: str) -> None:
    digest = C.tree_digest(Path(bundle))
    inside = submit_accept(accept, "--container", bundle)
    bare = submit_accept(accept)
    # the same template without `gpuclust accept submit --container`: in the container, but no digest
    env = dict(os.environ, GPUCLUST_PYTHON=sys.executable, ACCEPT_RESULTS_DIR=str(accept.results),
               ACCEPT_MAX_SIZE="64K", ACCEPT_ITERS="2", ACCEPT_WARMUP="0", ACCEPT_CONTAINER=bundle,
               ACCEPT_CONTAINER_RUNTIME="oci")
    nodigest = submit(["-N2", "--ntasks-per-node=1", "-A", "ml", "-o", str(accept.results / "logs" / "nodigest-%j.out"),
                       str(REPO / "sbatch_templates" / "allreduce.sbatch")], env=env)
    for job in (inside, bare, nodigest):
        assert wait_job_done(job, timeout=300) == "COMPLETED", accept.log(job)
    res_in, res_bare = accept.result("allreduce", inside), accept.result("allreduce", bare)
    assert res_in.job.passed and res_bare.job.passed
    assert res_in.job.extra["container"] == {"image": bundle, "runtime": "oci", "digest": digest}
    assert "container" not in res_bare.job.extra
    assert C.tree_digest(Path(bundle)) == digest  # running it did not change the image
    # every rank really ran in the bundle's root: its own / and the container's Python, one rank per node
    assert sorted(r.node for r in res_in.ranks) == ["node1", "node2", "node3", "node4"]
    assert sorted(r.rank for r in res_in.ranks) == [0, 1, 2, 3]
    roots_in = {r.extra["seen"]["root"] for r in res_in.ranks}
    roots_bare = {r.extra["seen"]["root"] for r in res_bare.ranks}
    assert roots_in.isdisjoint(roots_bare)
    assert all(r.extra["seen"]["os"] == "Debian GNU/Linux 12 (bookworm)" for r in res_in.ranks)
    assert {r.extra["seen"]["python"] for r in res_in.ranks} != {r.extra["seen"]["python"] for r in res_bare.ranks}
    log = accept.log(inside)
    assert f"via oci ({digest})" in log
    res_nd = accept.result("allreduce", nodigest)
    assert res_nd.job.extra["container"] == {"image": bundle, "runtime": "oci", "digest": None}

    cp = accept.gpuclust("accept", "report", "--compare-container", "--json")
    doc = json.loads(cp.stdout)
    assert cp.returncode == 1 and doc["status"] == "WARNING", doc  # WARNING: the run without a digest left out
    assert any(f"allreduce-{nodigest}" in n and "without an image digest" in n for n in doc["notes"])
    assert [n["node"] for n in doc["nodes"]] == ["node1", "node2", "node3", "node4"]
    for node in doc["nodes"]:
        [gap] = node["gaps"]
        assert gap["metric"] == "allreduce_busbw_gbps" and gap["bare"] > 0 and gap["container"] > 0
        assert node["container"][0]["job_id"] == inside and node["bare"][0]["job_id"] == bare
        assert node["container"][0]["container"]["digest"] == digest
        assert node["versions_differ"]["python"]["bare"] != node["versions_differ"]["python"]["container"]
    table = accept.gpuclust("accept", "report", "--compare-container").stdout
    assert "container vs bare metal: WARNING" in table and "allreduce_busbw_gbps" in table


def test_bad_image_and_missing_runtime_fail_before_submission(accept: Accept, bundle: str) -> None:
    before = run_cmd(["squeue", "-h", "-o", "%i"]).stdout
    logs = sorted((accept.results / "logs").glob("*"))
    for extra, words in ((["--container", "/nonexistent/image.sif"], ["does not exist"]),
                         (["--container", bundle, "--container-runtime", "pyxis"],
                          ["looked for runtime pyxis", "--container-image"]),
                         (["--container", bundle, "--container-runtime", "apptainer"],
                          ["apptainer is not on PATH", "singularity is not on PATH"])):
        cp = accept.gpuclust("accept", "submit", "allreduce", "-p", "gpu", "-N", "2", "-A", "ml", *extra)
        assert cp.returncode == 2, cp.stdout + cp.stderr
        for word in words:
            assert word in cp.stderr
    assert run_cmd(["squeue", "-h", "-o", "%i"]).stdout == before  # nothing was submitted
    assert sorted((accept.results / "logs").glob("*")) == logs
