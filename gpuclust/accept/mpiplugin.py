"""Which MPI the storage job launches with: the plugin `srun --mpi=list` offers, and the library that fits it.

Slurm builds differ: Debian's 22.05 and 24.11 carry mpi/pmix, Debian's 26.05 (sid) only pmi2. So the template
asks srun instead of assuming, and pairs the plugin with the MPI library that works with it:

- pmix (or one specific pmix_vN) with Open MPI (libmpi.so.40);
- pmi2 with MPICH. mpi4py's MPICH build links libmpi.so.12, which Debian ships only as libmpich.so.12, so
  where no libmpi.so.12 exists a "shim" directory holding the link libmpi.so.12 -> libmpich.so.12 is made on
  the shared scratch (every node sees it) and prepended to the step's LD_LIBRARY_PATH.

Open MPI with pmi2 fails in MPI_Init, and MPICH with pmix or none runs every rank alone (a world of 1, exit 0):
those pairings are never chosen, and storage.mpi_comm still checks comm.size == SLURM_NTASKS.

`python -m gpuclust.accept.mpiplugin prepare --kind storage [--started EPOCH]` (run by the template in the batch
step) prints NAME=VALUE lines for the step's environment (GPUCLUST_MPI_PLUGIN, GPUCLUST_MPI_LISTED,
MPI4PY_MPIABI, GPUCLUST_MPI_SHIM when a shim was made); the template checks each before use. When nothing fits it
says why on stderr, writes a failed result naming what srun listed, and exits 2.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuclust.errors import InputError, SlurmError
from gpuclust.slurm.runner import run_command

_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_PMIX_VERSIONED = re.compile(r"pmix_v([0-9]{1,3})")
# what each plugin needs: mpi4py's ABI name and the sonames that provide it (first found wins)
OPENMPI_LIBS = ("libmpi.so.40",)
MPICH_ABI_LIB = "libmpi.so.12"  # the name mpi4py's MPICH build links
MPICH_LIBS = ("libmpich.so.12",)  # Debian's name for the same library
SHIM_PREFIX = ".mpi-shim-"


def parse_mpi_list(text: str) -> list[str]:
    """Plugin names in `srun --mpi=list` output, in order, without duplicates.

    22.05 and later print "MPI plugin types are..." then one tab-indented name a line, and perhaps
    "specific pmix plugin versions available: pmix_v4[,pmix_v5]"; older releases prefixed lines with "srun: "
    ("srun: MPI types are...", "srun: pmi2"). Error and warning lines ("srun: error: ...") are skipped."""
    names: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("srun:"):
            line = line[len("srun:"):].strip()
        if not line or line.lower().startswith(("error", "warning", "fatal", "debug")) or line.endswith("..."):
            continue
        if line.lower().startswith("specific ") and ":" in line:
            found = [p.strip() for p in re.split(r"[,\s]+", line.split(":", 1)[1]) if p.strip()]
        else:
            found = [line]
        names += [n for n in found if _NAME.fullmatch(n) and n not in names]
    return names


def pmix_choice(listed: Sequence[str]) -> str | None:
    """"pmix" where listed; else the newest specific pmix_vN; else None."""
    if "pmix" in listed:
        return "pmix"
    versions = [(int(m.group(1)), n) for n in listed if (m := _PMIX_VERSIONED.fullmatch(n))]
    return max(versions)[1] if versions else None


@dataclass(frozen=True)
class Choice:
    """The pairing chosen: the srun --mpi plugin, the MPI ABI and library that fit it, whether a shim is needed."""

    plugin: str  # what srun --mpi= gets
    abi: str  # mpi4py's MPI4PY_MPIABI: openmpi or mpich
    library: str  # the library file found for it
    needs_shim: bool  # MPICH only as libmpich.so.12: libmpi.so.12 must be linked to it


def library_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """Where the dynamic loader looks: LD_LIBRARY_PATH, then the usual system directories."""
    env = os.environ if env is None else env
    multiarch = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"
    dirs = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    dirs += ["/usr/local/lib", f"/usr/lib/{multiarch}", f"/lib/{multiarch}", "/usr/lib64", "/usr/lib"]
    return [Path(d) for d in dict.fromkeys(dirs)]


def find_library(names: Iterable[str], dirs: Iterable[Path]) -> Path | None:
    for directory in dirs:
        for name in names:
            if (directory / name).exists():
                return directory / name
    return None


def choose(listed: Sequence[str], dirs: Sequence[Path]) -> Choice:
    """pmix with Open MPI where both are there, else pmi2 with MPICH; InputError naming what was listed and
    which libraries were missing when neither pairing is possible."""
    problems = []
    pmix = pmix_choice(listed)
    if pmix is not None:
        lib = find_library(OPENMPI_LIBS, dirs)
        if lib is not None:
            return Choice(pmix, "openmpi", str(lib), needs_shim=False)
        problems.append(f"{pmix} is listed but Open MPI ({', '.join(OPENMPI_LIBS)}) is not installed")
    if "pmi2" in listed:
        lib = find_library((MPICH_ABI_LIB,), dirs)
        if lib is not None:
            return Choice("pmi2", "mpich", str(lib), needs_shim=False)
        lib = find_library(MPICH_LIBS, dirs)
        if lib is not None:
            return Choice("pmi2", "mpich", str(lib), needs_shim=True)
        problems.append(f"pmi2 is listed but MPICH ({MPICH_ABI_LIB} or {', '.join(MPICH_LIBS)}) is not installed")
    if pmix is None and "pmi2" not in listed:
        problems.append("it lists neither pmix nor pmi2")
    raise InputError(
        f"no usable MPI for the storage job: `srun --mpi=list` offers {', '.join(listed) or 'nothing'}; "
        f"{'; '.join(problems)} (searched {', '.join(map(str, dirs))}). Install Open MPI for a Slurm with "
        "mpi/pmix, or MPICH (Debian: mpich) for one with mpi/pmi2"
    )


def make_shim(directory: Path, library: str) -> Path:
    """directory/libmpi.so.12 -> library (replaced if it exists); returns directory."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / MPICH_ABI_LIB
    tmp = directory / f".{MPICH_ABI_LIB}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(library)
    os.replace(tmp, link)
    return directory


def shim_dir(job_id: str, env: Mapping[str, str] | None = None) -> Path:
    """<shared scratch>/.mpi-shim-<job>: ACCEPT_SHARED_DIR, else <results dir>/.scratch, as the storage program
    uses (a path every node of the job sees)."""
    from gpuclust.accept.params import read_param, results_dir

    shared = read_param("ACCEPT_SHARED_DIR", env) or os.path.join(results_dir(env), ".scratch")
    return Path(str(shared)) / f"{SHIM_PREFIX}{job_id}"


def srun_mpi_list(timeout: float = 60) -> str:
    """`srun --mpi=list`'s output (stdout and stderr: releases differ in where they print it)."""
    try:
        cp = run_command(["srun", "--mpi=list"], timeout=timeout, check=False)
    except SlurmError as exc:  # not found, or timed out (its process group killed)
        raise InputError(f"`srun --mpi=list` did not run: {exc}") from exc
    if cp.returncode != 0:
        raise InputError(f"`srun --mpi=list` exited {cp.returncode}: {(cp.stderr or cp.stdout).strip()[:500]}")
    return cp.stdout + cp.stderr


def step_environment(choice: Choice, listed: Sequence[str], shim: Path | None) -> list[tuple[str, str]]:
    out = [("GPUCLUST_MPI_PLUGIN", choice.plugin), ("GPUCLUST_MPI_LISTED", ",".join(listed)),
           ("MPI4PY_MPIABI", choice.abi)]
    if shim is not None:
        out.append(("GPUCLUST_MPI_SHIM", str(shim)))
    return out


def job_record(comm: Any, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The result's "mpi" object: the plugin srun used (SLURM_MPI_TYPE, which srun sets in every task, else what
    the template chose), what srun listed, mpi4py's ABI, and the library's own version line and world size when
    MPI ran (comm is COMM_WORLD, or None when no measurement used MPI)."""
    env = os.environ if env is None else env
    plugin = next((v for v in (env.get("SLURM_MPI_TYPE"), env.get("GPUCLUST_MPI_PLUGIN")) if v and _NAME.fullmatch(v)),
                  None)
    listed = [n for n in env.get("GPUCLUST_MPI_LISTED", "").split(",") if _NAME.fullmatch(n)]
    out: dict[str, Any] = {
        "plugin": plugin,
        "launcher": f"srun --mpi={plugin}" if plugin else None,
        "listed": listed,
        "abi": env.get("MPI4PY_MPIABI") or None,
        "shim": bool(env.get("GPUCLUST_MPI_SHIM")),
        "library": None,
        "vendor": None,
        "world_size": None,
    }
    if comm is not None:
        from mpi4py import MPI

        name, version = MPI.get_vendor()
        out["vendor"] = f"{name} {'.'.join(map(str, version))}"
        lines = MPI.Get_library_version().strip().splitlines()
        out["library"] = lines[0].strip()[:200] if lines else None
        out["world_size"] = comm.Get_size()
    return out


def prepare(kind: str, started: float | None, listing: str | None, env: Mapping[str, str] | None = None,
            dirs: Sequence[Path] | None = None) -> int:
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID", "")
    if not job_id.isdigit():
        raise InputError("SLURM_JOB_ID is not set: run me inside the acceptance job")
    listed: list[str] = []
    try:
        listed = parse_mpi_list(Path(listing).read_text() if listing else srun_mpi_list())
        choice = choose(listed, library_dirs(env) if dirs is None else dirs)
    except InputError as exc:
        from gpuclust.accept import failed

        print(f"gpuclust.accept.mpiplugin: {exc}", file=sys.stderr)
        argv = ["--kind", kind, "--rc", "2", "--reason", str(exc)]
        failed.main(argv + (["--started", str(started)] if started is not None else []))
        return 2
    shim = make_shim(shim_dir(job_id, env), choice.library) if choice.needs_shim else None
    print(f"gpuclust.accept.mpiplugin: srun --mpi=list offers {', '.join(listed)}; using --mpi={choice.plugin} "
          f"with {choice.abi} ({choice.library}{f' via {shim}/{MPICH_ABI_LIB}' if shim else ''})", file=sys.stderr)
    for name, value in step_environment(choice, listed, shim):
        print(f"{name}={value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuclust.accept.mpiplugin", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="choose the plugin and library; print NAME=VALUE lines for the step")
    p.add_argument("--kind", default="storage", choices=("storage",))
    p.add_argument("--started", type=float, default=None, help="job start, epoch seconds (for a failed result)")
    p.add_argument("--listing", default=None, help="read `srun --mpi=list` output from this file (tests)")
    args = parser.parse_args(argv)
    return prepare(args.kind, args.started, args.listing)


if __name__ == "__main__":
    from gpuclust.accept import launch

    launch.run_program(main, "gpuclust.accept.mpiplugin")
