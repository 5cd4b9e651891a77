"""`accept submit --container`: runtime detection, digests, bad images and missing runtimes (before submission),
the launch the templates build for each runtime, and the rank fallback inside Slurm 22.05's OCI containers."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from gpuclust.accept import container as C
from gpuclust.accept import params as P
from gpuclust.accept import submit as S
from gpuclust.config import parse_config
from gpuclust.errors import InputError, UnsafeValueError

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "accept" / "container"
# recorded from the lab (Slurm 22.05.8, Debian bookworm): lists --container, no --container-image (no pyxis)
HELP_2205 = (DATA / "sbatch_help_22.05.8.txt").read_text()
HELP_2411 = (DATA / "sbatch_help_24.11.txt").read_text()  # recorded from the lab's Slurm 24.11.5 root
# synthetic, NOT recorded: the one line pyxis adds to sbatch --help (spank options are listed this way)
PYXIS_LINE = "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n"


def which_of(*found: str):  # type: ignore[no-untyped-def]
    return lambda name: f"/usr/bin/{os.path.basename(name)}" if os.path.basename(name) in found else None


def bundle(tmp_path: Path, name: str = "b") -> Path:
    b = tmp_path / name
    (b / "rootfs" / "usr" / "bin").mkdir(parents=True)
    (b / "rootfs" / "usr" / "bin" / "python3").write_text("#!fake\n")
    (b / "rootfs" / "lib").symlink_to("usr/lib")
    (b / "config.json").write_text(json.dumps({"ociVersion": "1.0.0", "root": {"path": "rootfs"}}))
    return b


def oci_conf(tmp_path: Path, text: str | None = None) -> Path:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir(exist_ok=True)
    lab = (REPO / "tests" / "slurm_lab" / "slurm-lab").read_text()
    assert "RunTimeRun=" in lab  # the lab writes the same shape
    (conf_dir / "oci.conf").write_text(text if text is not None else
                                       'RunTimeQuery="crun --root=/x state %n"\n'
                                       "RunTimeRun=\"unshare --mount sh -c 'exec crun --root=/x run --bundle %b %n'\"\n")
    return conf_dir


# ---- detection ------------------------------------------------------------------------------------------


def test_oci_detected_from_recorded_help_and_oci_conf(tmp_path: Path) -> None:
    conf_dir = oci_conf(tmp_path)
    probe = C.probe_oci(HELP_2205, conf_dir, which_of("crun"))
    assert probe.available and "crun" in probe.detail
    assert not C.probe_pyxis(HELP_2205, which_of()).available  # 22.05 without the plugin
    spec = C.resolve(str(bundle(tmp_path)), "auto", HELP_2205, conf_dir, which_of("crun"))
    assert spec.runtime == "oci" and C.DIGEST_RE.match(spec.digest)
    assert spec.env() == {"ACCEPT_CONTAINER": str(tmp_path / "b"), "ACCEPT_CONTAINER_RUNTIME": "oci",
                          "ACCEPT_CONTAINER_DIGEST": spec.digest}


def test_2411_help_has_container_and_container_id_but_no_pyxis(tmp_path: Path) -> None:
    assert C.probe_oci(HELP_2411, oci_conf(tmp_path), which_of("crun")).available
    assert not C.probe_pyxis(HELP_2411, which_of("enroot")).available  # --container-id is not --container-image


def test_oci_runtime_binary_found_inside_a_wrapper() -> None:
    conf = C.parse_oci_conf('# c\nruntimerun = "unshare -m sh -c \'exec /usr/bin/runc run %n\'"  \nX=1 # c\n')
    assert C.oci_runtime_binary(conf) == "/usr/bin/runc" and conf["x"] == "1"
    assert C.oci_runtime_binary({"runtimecreate": "my-wrapper create %b"}) == "my-wrapper"
    assert C.oci_runtime_binary({}) is None


@pytest.mark.parametrize("conf_text, which, words", [
    (None, which_of(), ["'crun'", "not on PATH"]),  # runtime missing on this host
    ("", which_of("crun"), ["neither RunTimeRun nor RunTimeCreate"]),
])
def test_missing_oci_runtime_fails_naming_it(tmp_path: Path, conf_text: str | None, which, words) -> None:  # type: ignore[no-untyped-def]
    conf_dir = oci_conf(tmp_path, conf_text)
    with pytest.raises(InputError) as err:
        C.resolve(str(bundle(tmp_path)), "oci", HELP_2205, conf_dir, which)
    assert "runtime oci" in str(err.value)
    for word in words:
        assert word in str(err.value)


def test_no_oci_conf_and_no_container_option(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no oci.conf next to slurm.conf"):
        C.resolve(str(bundle(tmp_path)), "auto", HELP_2205, tmp_path, which_of("crun"))
    old_help = "\n".join(line for line in HELP_2205.splitlines() if "--container" not in line)
    assert "no --container option" in C.probe_oci(old_help, oci_conf(tmp_path), which_of("crun")).detail


def test_pyxis_and_apptainer(tmp_path: Path) -> None:
    sif = tmp_path / "prod.sif"
    sif.write_bytes(b"SIF-bytes")
    digest = "sha256:" + hashlib.sha256(b"SIF-bytes").hexdigest()
    spec = C.resolve(str(sif), "auto", HELP_2205 + PYXIS_LINE, tmp_path, which_of())
    assert (spec.runtime, spec.digest) == ("pyxis", digest)
    spec = C.resolve(str(sif), "auto", HELP_2205, tmp_path, which_of("singularity"))
    assert (spec.runtime, spec.digest) == ("singularity", digest)  # apptainer's older name
    spec = C.resolve(str(sif), "apptainer", HELP_2205 + PYXIS_LINE, tmp_path, which_of("apptainer"))
    assert spec.runtime == "apptainer"
    with pytest.raises(InputError, match="looked for runtime apptainer .*apptainer is not on PATH.*singularity is not on PATH"):
        C.resolve(str(sif), "apptainer", HELP_2205, tmp_path, which_of())
    with pytest.raises(InputError, match="looked for any runtime"):
        C.resolve(str(sif), "auto", HELP_2205, tmp_path, which_of())
    pinned = "nvcr.io#nvidia/pytorch@sha256:" + "a" * 64
    assert C.resolve(pinned, "pyxis", HELP_2205 + PYXIS_LINE, tmp_path, which_of()).digest == "sha256:" + "a" * 64


def test_bad_images_fail_before_submission(tmp_path: Path) -> None:
    conf_dir = oci_conf(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        C.resolve(str(tmp_path / "nope"), "auto", HELP_2205, conf_dir, which_of("crun"))
    with pytest.raises(InputError, match="not pinned"):
        C.resolve("docker://pytorch/pytorch:latest", "pyxis", HELP_2205 + PYXIS_LINE, conf_dir, which_of())
    with pytest.raises(UnsafeValueError):
        C.resolve("/x;id", "auto", HELP_2205, conf_dir, which_of("crun"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="does not exist"):
        C.resolve(str(empty), "oci", HELP_2205, conf_dir, which_of("crun"))
    b = bundle(tmp_path, "noroot")
    (b / "config.json").write_text(json.dumps({"root": {"path": "missing"}}))
    with pytest.raises(InputError, match="root.path 'missing' is not a directory"):
        C.resolve(str(b), "oci", HELP_2205, conf_dir, which_of("crun"))
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"x")
    with pytest.raises(InputError, match="cannot run under oci"):
        C.resolve(str(sif), "oci", HELP_2205, conf_dir, which_of("crun"))
    with pytest.raises(UnsafeValueError):
        C.choose_runtime(str(sif), "docker", {})


def test_tree_digest_is_content_addressed(tmp_path: Path) -> None:
    a = C.tree_digest(bundle(tmp_path, "a"))
    assert a == C.tree_digest(bundle(tmp_path, "a2"))  # same tree elsewhere: same digest
    b = bundle(tmp_path, "b")
    (b / "rootfs" / "usr" / "bin" / "python3").write_text("#!other\n")
    assert C.tree_digest(b) != a
    c = bundle(tmp_path, "c")
    (c / "rootfs" / "etc").mkdir()  # a new (mount point) directory changes it too
    assert C.tree_digest(c) != a
    d = bundle(tmp_path, "d")
    (d / "rootfs" / "link").symlink_to("/elsewhere")
    assert C.tree_digest(d) != a


# ---- submission ---------------------------------------------------------------------------------------


def test_build_passes_container_params(tmp_path: Path) -> None:
    cfg = parse_config(f"[site]\ncluster_name = lab\nresults_dir = {tmp_path}/results\n")
    spec = C.ContainerSpec(str(tmp_path / "b"), "oci", "sha256:" + "0" * 64, "crun")
    sub = S.build("allreduce", cfg, "gpu", 2, container=spec)
    assert sub.env["ACCEPT_CONTAINER_RUNTIME"] == "oci" and sub.env["ACCEPT_CONTAINER_DIGEST"] == spec.digest
    with pytest.raises(UnsafeValueError):
        S.build("allreduce", cfg, "gpu", 2, container=C.ContainerSpec("/b", "oci", "md5:1"))
    with pytest.raises(InputError, match="use --container"):
        S.parse_settings(["ACCEPT_CONTAINER=/b"])
    assert S.parse_settings(["ACCEPT_CONTAINER_PYTHON=/usr/bin/python3"]) == {"ACCEPT_CONTAINER_PYTHON": "/usr/bin/python3"}


@pytest.mark.parametrize("name, good, bad", [
    ("ACCEPT_CONTAINER", ["/srv/images/prod.sif", "docker://nvcr.io/nvidia/pytorch:24.01-py3",
                          "nvcr.io#nvidia/pytorch@sha256:" + "f" * 64], ["/a b", "./rel", "/x;id", "$(id)", "-x"]),
    ("ACCEPT_CONTAINER_RUNTIME", ["oci", "pyxis", "apptainer", "singularity"], ["auto", "docker", "oci;id"]),
    ("ACCEPT_CONTAINER_DIGEST", ["sha256:" + "0" * 64], ["sha256:abc", "md5:" + "0" * 32, "SHA256:" + "0" * 64]),
])
def test_container_params_validated(name: str, good: list[str], bad: list[str]) -> None:
    for value in good:
        P.check_value(name, value)
    for value in bad:
        with pytest.raises(UnsafeValueError):
            P.check_value(name, value)


# ---- the template's launch, per runtime (bash, no Slurm: srun is a stub that prints its argv) ---------------


def _launch(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    for name in ("srun", "scontrol"):
        (stub / name).write_text('#!/bin/bash\nif [[ $(basename "$0") == scontrol ]]; then echo node1; exit 0; fi\n'
                                 'printf "%s\\n" "$@" > "$ARGV_OUT"\n')
        (stub / name).chmod(0o755)
    out = tmp_path / "argv"
    full = {"PATH": f"{stub}:/usr/bin:/bin", "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node1",
            "GPUCLUST_PYTHON": str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else "python3",
            "ACCEPT_RESULTS_DIR": str(tmp_path / "res"), "ARGV_OUT": str(out), **env}
    cp = subprocess.run(["bash", str(REPO / "sbatch_templates" / "allreduce.sbatch")], env=full, capture_output=True,
                        text=True, timeout=60)
    return cp.returncode, out.read_text() if out.exists() else cp.stderr


@pytest.mark.parametrize("runtime, expect", [
    (None, ["--kill-on-bad-exit=1", "PY", "-m", "gpuclust.accept.allreduce"]),
    ("oci", ["--kill-on-bad-exit=1", "--container=/img", "python3", "-m", "gpuclust.accept.allreduce"]),
    ("pyxis", ["--kill-on-bad-exit=1", "--container-image=/img", "--container-mounts=RES:RES", "python3", "-m",
               "gpuclust.accept.allreduce"]),
    ("apptainer", ["--kill-on-bad-exit=1", "apptainer", "exec", "--bind", "RES", "/img", "python3", "-m",
                   "gpuclust.accept.allreduce"]),
])
def test_template_launch_per_runtime(tmp_path: Path, runtime: str | None, expect: list[str]) -> None:
    env = {"ACCEPT_CONTAINER": "/img", "ACCEPT_CONTAINER_RUNTIME": runtime} if runtime else {}
    rc, argv = _launch(tmp_path, env)
    py = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else "python3"
    want = [w.replace("RES", str(tmp_path / "res")) if w != "PY" else py for w in expect]
    assert rc == 0, argv
    assert argv.splitlines() == want


def test_template_refuses_container_without_runtime(tmp_path: Path) -> None:
    rc, err = _launch(tmp_path, {"ACCEPT_CONTAINER": "/img"})
    assert rc == 2 and "ACCEPT_CONTAINER_RUNTIME is not one of" in err
    rc, err = _launch(tmp_path, {"ACCEPT_CONTAINER": "/img", "ACCEPT_CONTAINER_RUNTIME": "docker"})
    assert rc == 2 and "refusing ACCEPT_CONTAINER_RUNTIME" in err


# ---- inside the job ------------------------------------------------------------------------------------


def test_rank_from_step_nodes_in_a_2205_oci_container() -> None:
    # what the lab's 22.05 container environment holds (measured): step variables, no SLURM_PROCID/LOCALID
    env = {"SLURM_CONTAINER": "/b", "SLURM_STEP_NODELIST": "node[1-4]", "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
           "SLURM_STEP_NUM_TASKS": "4", "SLURM_JOB_ID": "7"}
    out = C.task_env_fallback({**env, "SLURMD_NODENAME": "node3"})
    assert (out["SLURM_PROCID"], out["SLURM_LOCALID"], out["SLURMD_NODENAME"]) == ("2", "0", "node3")
    assert C.task_env_fallback({"SLURM_PROCID": "1", **env})["SLURM_PROCID"] == "1"  # untouched when present
    with pytest.raises(InputError, match="one task per node"):
        C.task_env_fallback({**env, "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURMD_NODENAME": "node1"})
    with pytest.raises(InputError, match="not in the step's nodes"):
        C.task_env_fallback({**env, "SLURMD_NODENAME": "elsewhere"})
    assert C.task_env_fallback({"SLURM_JOB_ID": "7"}) == {"SLURM_JOB_ID": "7"}  # bare metal: as is


def test_job_extra_records_the_container() -> None:
    env = {"ACCEPT_CONTAINER": "/b", "ACCEPT_CONTAINER_RUNTIME": "oci", "ACCEPT_CONTAINER_DIGEST": "sha256:" + "1" * 64}
    assert C.job_extra({"warnings": ["w"]}, env) == {"warnings": ["w"], "container": {
        "image": "/b", "runtime": "oci", "digest": "sha256:" + "1" * 64}}
    assert C.job_extra({}, {"ACCEPT_CONTAINER": "/b"})["container"]["digest"] is None
    assert C.job_extra(None, {}) == {}
    # a container gpuclust was not told about (plain `srun --container=B`): recorded without a digest
    assert C.job_extra(None, {"SLURM_CONTAINER": "/b"}) == {"container": {"image": "/b", "runtime": "oci",
                                                                          "digest": None}}
    seen = C.seen_here()
    assert set(seen) == {"os", "python", "libc", "root"} and seen["python"].count(".") == 2
