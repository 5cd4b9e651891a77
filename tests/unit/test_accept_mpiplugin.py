"""The storage job's MPI choice: `srun --mpi=list` parsed from real recordings (tests/data/accept/mpi_list), the
plugin/library pairing, the libmpi.so.12 shim, the failed result when nothing fits, and the template using it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpuclust.accept import mpiplugin as M
from gpuclust.accept import results as R
from gpuclust.errors import InputError

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "accept" / "mpi_list"
LIST_2205 = DATA / "srun_mpi_list_22.05.8.txt"
LIST_2605 = DATA / "srun_mpi_list_26.05.5.txt"
TEMPLATE = REPO / "sbatch_templates" / "storage.sbatch"


def libdir(tmp_path: Path, *names: str) -> Path:
    """A directory holding (empty) files with these library names."""
    d = tmp_path / "lib"
    d.mkdir(exist_ok=True)
    for name in names:
        (d / name).write_bytes(b"")
    return d


def test_parse_recorded_22_05() -> None:
    assert M.parse_mpi_list(LIST_2205.read_text()) == ["pmix", "none", "cray_shasta", "pmi2", "pmix_v4"]


def test_parse_recorded_26_05_has_no_pmix() -> None:
    assert M.parse_mpi_list(LIST_2605.read_text()) == ["none", "cray_shasta", "pmi2"]


def test_parse_older_prefixed_form_and_noise() -> None:
    # the "srun: " prefixed form of releases before 22.05 (written here, not recorded), with an error line
    text = ("srun: error: something unrelated\nsrun: MPI types are...\nsrun: none\nsrun: pmi2\nsrun: pmi2\n"
            "srun: pmix_v3\n\nspecific pmix plugin versions available: pmix_v3,pmix_v5\n")
    assert M.parse_mpi_list(text) == ["none", "pmi2", "pmix_v3", "pmix_v5"]
    assert M.parse_mpi_list("") == []
    assert M.parse_mpi_list("\tpmi2; rm -rf /\n\tPMIX\n") == []  # only plain plugin names count


def test_pmix_choice() -> None:
    assert M.pmix_choice(["none", "pmix", "pmix_v4"]) == "pmix"
    assert M.pmix_choice(["none", "pmix_v3", "pmix_v10", "pmix_v5"]) == "pmix_v10"
    assert M.pmix_choice(["none", "pmi2"]) is None


def test_22_05_picks_pmix_with_open_mpi(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpi.so.40", "libmpich.so.12")
    got = M.choose(M.parse_mpi_list(LIST_2205.read_text()), [d])
    assert got == M.Choice("pmix", "openmpi", str(d / "libmpi.so.40"), needs_shim=False)


def test_26_05_picks_pmi2_with_mpich(tmp_path: Path) -> None:
    listed = M.parse_mpi_list(LIST_2605.read_text())
    # sid's libmpich12 5.0 ships libmpi.so.12 itself: no shim
    d = libdir(tmp_path, "libmpi.so.40", "libmpi.so.12", "libmpich.so.12")
    assert M.choose(listed, [d]) == M.Choice("pmi2", "mpich", str(d / "libmpi.so.12"), needs_shim=False)
    # bookworm's MPICH: only libmpich.so.12, so the job links libmpi.so.12 to it
    (d / "libmpi.so.12").unlink()
    assert M.choose(listed, [d]) == M.Choice("pmi2", "mpich", str(d / "libmpich.so.12"), needs_shim=True)


def test_pmix_without_open_mpi_falls_back_to_pmi2(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpich.so.12")
    assert M.choose(["pmix", "pmi2"], [d]).plugin == "pmi2"


def test_nothing_usable_names_what_was_listed(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpi.so.40")
    with pytest.raises(InputError) as info:
        M.choose(M.parse_mpi_list(LIST_2605.read_text()), [d])
    text = str(info.value)
    assert "offers none, cray_shasta, pmi2" in text and "MPICH" in text and "not installed" in text
    with pytest.raises(InputError, match="offers none, cray_shasta; it lists neither pmix nor pmi2"):
        M.choose(["none", "cray_shasta"], [d])
    with pytest.raises(InputError, match="offers nothing"):
        M.choose([], [d])


def test_make_shim_links_and_replaces(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpich.so.12", "other.so")
    shim = M.make_shim(tmp_path / "shim", str(d / "other.so"))
    shim = M.make_shim(tmp_path / "shim", str(d / "libmpich.so.12"))
    assert os.readlink(shim / "libmpi.so.12") == str(d / "libmpich.so.12")
    assert sorted(p.name for p in shim.iterdir()) == ["libmpi.so.12"]


def test_shim_dir_is_on_the_shared_scratch(tmp_path: Path) -> None:
    env = {"ACCEPT_RESULTS_DIR": str(tmp_path)}
    assert M.shim_dir("42", env) == tmp_path / ".scratch" / ".mpi-shim-42"
    env["ACCEPT_SHARED_DIR"] = str(tmp_path / "shared")
    assert M.shim_dir("42", env) == tmp_path / "shared" / ".mpi-shim-42"


def test_prepare_prints_the_step_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    d = libdir(tmp_path, "libmpich.so.12")
    env = {"SLURM_JOB_ID": "42", "ACCEPT_RESULTS_DIR": str(tmp_path / "results")}
    assert M.prepare("storage", None, str(LIST_2605), env, dirs=[d]) == 0
    out = capsys.readouterr()
    shim = tmp_path / "results" / ".scratch" / ".mpi-shim-42"
    assert out.out.splitlines() == ["GPUCLUST_MPI_PLUGIN=pmi2", "GPUCLUST_MPI_LISTED=none,cray_shasta,pmi2",
                                    "MPI4PY_MPIABI=mpich", f"GPUCLUST_MPI_SHIM={shim}"]
    assert "using --mpi=pmi2 with mpich" in out.err
    assert os.readlink(shim / "libmpi.so.12") == str(d / "libmpich.so.12")


def test_prepare_without_usable_mpi_writes_a_failed_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results"
    monkeypatch.setenv("SLURM_JOB_ID", "43")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("ACCEPT_RESULTS_DIR", str(results))
    listing = tmp_path / "list.txt"
    listing.write_text("MPI plugin types are...\n\tnone\n\tcray_shasta\n")
    assert M.prepare("storage", 1_700_000_000.0, str(listing), dirs=[libdir(tmp_path, "libmpi.so.40")]) == 2
    out = capsys.readouterr()
    assert out.out.count("GPUCLUST_MPI_PLUGIN") == 0
    assert "srun --mpi=list` offers none, cray_shasta" in out.err
    [res] = R.load_results(results, job="43")
    assert not res.job.passed and res.job.nodes == ("node1", "node2")
    assert "offers none, cray_shasta; it lists neither pmix nor pmi2" in res.job.reasons[0]


def test_job_record_without_and_with_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"SLURM_MPI_TYPE": "pmi2", "GPUCLUST_MPI_PLUGIN": "pmi2", "GPUCLUST_MPI_LISTED": "none,cray_shasta,pmi2",
           "MPI4PY_MPIABI": "mpich"}
    got = M.job_record(None, env)
    assert got == {"plugin": "pmi2", "launcher": "srun --mpi=pmi2", "listed": ["none", "cray_shasta", "pmi2"],
                   "abi": "mpich", "shim": False, "library": None, "vendor": None, "world_size": None}
    fake = types.ModuleType("mpi4py")
    fake.MPI = types.SimpleNamespace(  # type: ignore[attr-defined]
        get_vendor=lambda: ("MPICH", (5, 0, 2)),
        Get_library_version=lambda: "MPICH Version:      5.0.2\nMPICH Release date: unreleased\n")
    monkeypatch.setitem(sys.modules, "mpi4py", fake)
    comm = types.SimpleNamespace(Get_size=lambda: 2)
    got = M.job_record(comm, dict(env, GPUCLUST_MPI_SHIM="/x/.mpi-shim-1", SLURM_MPI_TYPE="bad;type"))
    assert got["plugin"] == "pmi2"  # a value that is no plugin name falls back to the template's choice
    assert (got["vendor"], got["library"], got["world_size"], got["shim"]) == (
        "MPICH 5.0.2", "MPICH Version:      5.0.2", 2, True)


# ---- the template, with stub srun/scontrol on PATH (no Slurm needed) ----

STUB_SRUN = """#!/bin/bash
if [[ $1 == --mpi=list ]]; then cat "$STUB_LIST"; exit 0; fi
{ printf '%s\\n' "ARGS $*"; env | grep -E '^(LD_LIBRARY_PATH|MPI4PY_MPIABI|GPUCLUST_MPI_[A-Z]+)=' | sort; } >> "$STUB_LOG"
for a in "$@"; do [[ $a == --mpi=* ]] && [[ -e ${GPUCLUST_MPI_SHIM:-/nonexistent}/libmpi.so.12 ]] && echo SHIM_SEEN >> "$STUB_LOG"; done
exit 0
"""


def run_template(tmp_path: Path, listing: Path, extra_env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", STUB_SRUN), ("scontrol", "#!/bin/sh\necho node1\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    log = tmp_path / "srun.log"
    log.write_text("")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUCLUST_PYTHON": sys.executable, "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node1", "ACCEPT_RESULTS_DIR": str(tmp_path / "results"), "ACCEPT_HEALTH": "0",
           "STUB_LIST": str(listing), "STUB_LOG": str(log), "PYTHONPATH": str(REPO), **extra_env}
    cp = subprocess.run(["bash", str(TEMPLATE)], env=env, capture_output=True, text=True, timeout=120,
                        cwd=tmp_path, stdin=subprocess.DEVNULL)
    return cp, log.read_text()


def test_template_launches_with_the_listed_plugin(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpich.so.12")
    dirs = M.library_dirs({"LD_LIBRARY_PATH": str(d)})
    native = M.find_library(["libmpi.so.12"], dirs)  # a host with MPICH's own libmpi.so.12 needs no shim
    cp, log = run_template(tmp_path, LIST_2605, {"LD_LIBRARY_PATH": str(d)})
    assert cp.returncode == 0, cp.stderr
    assert "ARGS --mpi=pmi2 --kill-on-bad-exit=1 " in log and "-m gpuclust.accept.storage" in log
    assert "MPI4PY_MPIABI=mpich" in log and "GPUCLUST_MPI_LISTED=none,cray_shasta,pmi2" in log
    shim = tmp_path / "results" / ".scratch" / ".mpi-shim-7"
    if native is None:
        assert f"LD_LIBRARY_PATH={shim}:{d}" in log and "SHIM_SEEN" in log
    assert not shim.exists()  # removed after the step


def test_template_pmix_on_22_05_listing(tmp_path: Path) -> None:
    d = libdir(tmp_path, "libmpi.so.40")
    cp, log = run_template(tmp_path, LIST_2205, {"LD_LIBRARY_PATH": str(d)})
    assert cp.returncode == 0, cp.stderr
    assert "ARGS --mpi=pmix " in log and "MPI4PY_MPIABI=openmpi" in log and "GPUCLUST_MPI_SHIM" not in log


def test_template_fails_clearly_without_a_usable_plugin(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("MPI plugin types are...\n\tnone\n\tcray_shasta\n")
    cp, log = run_template(tmp_path, listing, {})
    assert cp.returncode == 2
    assert "no usable MPI for the storage job: `srun --mpi=list` offers none, cray_shasta" in cp.stderr
    assert "ARGS" not in log  # no step was launched
    [line] = (tmp_path / "results" / "storage-7.jsonl").read_text().splitlines()
    job = json.loads(line)
    assert job["passed"] is False and "offers none, cray_shasta" in job["reasons"][0]
