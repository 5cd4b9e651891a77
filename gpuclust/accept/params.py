"""Template parameters: names, defaults, strict validation.

The sbatch templates take their parameters from the environment (`sbatch --export=ALL,ACCEPT_MAX_SIZE=64M`),
check each one in bash with the regex below before any use, and the Python programs check them again here
(the unit tests assert that both regexes are the same). Nothing is ever passed through `eval` or a shell.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuclust.config import values as v
from gpuclust.errors import UnsafeValueError

# Numbers have no leading zero: bash arithmetic ($(( )), [[ -lt ]], let) reads 0123 as octal and 09 as an
# error, where Python reads decimal; with these forms both read the same number.
SIZE_RE = r"^(0|[1-9][0-9]{0,11})[KMGkmg]?$"
INT_RE = r"^(0|[1-9][0-9]{0,5})$"
SECONDS_RE = r"^(0|[1-9][0-9]{0,4})(\.[0-9]{1,3})?$"
PATH_RE = r"^/[A-Za-z0-9._/+-]*$"
LOCAL_PATH_RE = r"^/[A-Za-z0-9._/+%-]*$"  # may hold %n (the node name), like Slurm's TmpFS
GLOB_RE = r"^/[][A-Za-z0-9._/+*?-]*$"  # "]" first: a literal in both bash ERE and Python
PYTHON_RE = r"^(/[A-Za-z0-9._/+-]+|[A-Za-z0-9._+-]+)$"
BACKEND_RE = r"^(auto|gloo|nccl)$"
DTYPE_RE = r"^(float32|float64|int32)$"
TESTS_RE = r"^(staging|checkpoint|dcp|aggregate)(,(staging|checkpoint|dcp|aggregate))*$"
PORT_RE = r"^[1-9][0-9]{3,4}$"
NAME_RE = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$"
# container: an absolute path (OCI bundle, SIF, squashfs) or a registry reference (docker://..., pyxis'
# registry#image, ...@sha256:...)
CONTAINER_RE = r"^(/[A-Za-z0-9._/+-]+|[A-Za-z0-9][A-Za-z0-9._/:@#+-]{0,255})$"
RUNTIME_RE = r"^(oci|pyxis|apptainer|singularity)$"
DIGEST_RE = r"^sha256:[0-9a-f]{64}$"
BOOL_RE = r"^(0|1)$"
DCGM_LEVEL_RE = r"^[0-4]$"
NVBANDWIDTH_RE = r"^(auto|0)$"


@dataclass(frozen=True)
class Param:
    """One template parameter: its variable name, validating regex, default, help text and parser."""

    name: str
    regex: str
    default: str | None  # None: no default here (the template or the program derives one)
    help: str
    parse: Callable[[str], Any]


def _parse_port(text: str) -> int:
    port = int(text)
    if not 1024 <= port <= 65535:
        raise ValueError(f"port must be 1024-65535, got {port}")
    return port


def _parse_factor(text: str) -> int:
    factor = int(text)
    if factor < 2:
        raise ValueError(f"must be >= 2, got {factor}")
    return factor


def _parse_tests(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(text.split(",")))


_PARAMS = [
    Param("GPUCLUST_PYTHON", PYTHON_RE, "python3", "Interpreter with gpuclust[bench] (absolute path or a name on PATH).", str),
    Param("ACCEPT_RESULTS_DIR", PATH_RE, None, "Where the result file goes (default: results_dir of the site config).", v.parse_abs_path),
    Param("ACCEPT_PARTITION", NAME_RE, None, "Partition recorded in the result (default: $SLURM_JOB_PARTITION).", str),
    Param("ACCEPT_BACKEND", BACKEND_RE, "auto", "auto (nccl when CUDA is available, else gloo), gloo or nccl.", str),
    Param("ACCEPT_MASTER_PORT", PORT_RE, None, "Rendezvous port (default: 23000 + 10*(job id % 900)).", _parse_port),
    # container (gpuclust.accept.container; `accept submit --container` sets all three)
    Param("ACCEPT_CONTAINER", CONTAINER_RE, None, "Image the steps run in: OCI bundle dir, SIF/squashfs file or pinned reference (empty: bare metal).", str),
    Param("ACCEPT_CONTAINER_RUNTIME", RUNTIME_RE, None, "oci (srun --container), pyxis (--container-image), apptainer or singularity (exec).", str),
    Param("ACCEPT_CONTAINER_DIGEST", DIGEST_RE, None, "sha256 of the image, computed before submission (recorded with the result).", str),
    Param("ACCEPT_CONTAINER_PYTHON", PYTHON_RE, "python3", "Interpreter inside the container (with torch and gpuclust importable).", str),
    Param("ACCEPT_GPU_DEVICE_GLOB", GLOB_RE, "/dev/nvidia[0-9]*", "Device files counted as the node's GPUs.", str),
    # hardware-health snapshots before and after the run (gpuclust.accept.health.job)
    Param("ACCEPT_HEALTH", BOOL_RE, "1", "1: snapshot every node's health counters before and after the run; 0: no.", lambda t: t == "1"),
    Param("ACCEPT_DCGM_LEVEL", DCGM_LEVEL_RE, "0", "1-4: the before phase also runs dcgmi diag -r N -j where dcgmi exists (0: no).", int),
    Param("ACCEPT_NVBANDWIDTH", NVBANDWIDTH_RE, "auto", "auto: record nvbandwidth's copy-engine tests where the binary exists; 0: no.", str),
    # all_reduce sweep
    Param("ACCEPT_MIN_SIZE", SIZE_RE, "8", "Smallest message (bytes; K/M/G binary suffixes).", v.parse_size),
    Param("ACCEPT_MAX_SIZE", SIZE_RE, "1G", "Largest message.", v.parse_size),
    Param("ACCEPT_STEP_FACTOR", INT_RE, "2", "Size multiplier between steps.", _parse_factor),
    Param("ACCEPT_ITERS", INT_RE, "20", "Timed iterations per size.", v.parse_positive_int),
    Param("ACCEPT_WARMUP", INT_RE, "5", "Untimed warm-up iterations per size.", v.parse_nonneg_int),
    Param("ACCEPT_DTYPE", DTYPE_RE, "float32", "Element type: float32, float64 or int32.", str),
    # pairwise
    Param("ACCEPT_PAIR_SIZE", SIZE_RE, "4M", "Message size of each pair's all_reduce.", v.parse_size),
    Param("ACCEPT_PAIR_ITERS", INT_RE, "5", "Most timed iterations per pair.", v.parse_positive_int),
    Param("ACCEPT_PAIR_CONFIRM", INT_RE, "2", "Passes that measure suspect pairs (once-measured) again before a node is named; a pass with no suspects ends them (0: none, then nothing is named).", v.parse_nonneg_int),
    Param("ACCEPT_PAIR_BUDGET", SECONDS_RE, "5", "Seconds of timed iterations per pair (fewer iterations on a slow pair).", v.parse_nonneg_float),
    # storage
    Param("ACCEPT_STORAGE_TESTS", TESTS_RE, "staging,checkpoint,dcp,aggregate", "Which storage measurements to run.", _parse_tests),
    Param("ACCEPT_SHARED_DIR", PATH_RE, None, "Shared scratch for checkpoints and the dataset (default: RESULTS_DIR/.scratch).", v.parse_abs_path),
    Param("ACCEPT_LOCAL_DIR", LOCAL_PATH_RE, None, "Node-local scratch for staging; %n is the node name (default: $TMPDIR, else /tmp).", v.parse_abs_path),
    Param("ACCEPT_STAGE_SRC", PATH_RE, None, "Dataset to stage (file or directory; default: one generated in SHARED_DIR).", v.parse_abs_path),
    Param("ACCEPT_STAGE_SIZE", SIZE_RE, "64M", "Size of the generated dataset.", v.parse_size),
    Param("ACCEPT_CKPT_SIZE", SIZE_RE, "64M", "Size of the model-like state dict saved and restored.", v.parse_size),
    Param("ACCEPT_AGG_SIZE", SIZE_RE, "32M", "Bytes each rank writes and reads for the aggregate figure.", v.parse_size),
]
PARAMS: dict[str, Param] = {p.name: p for p in _PARAMS}


def check_value(name: str, text: str) -> Any:
    """Validate one raw value: the regex (same as bash), then the typed parser. Raises UnsafeValueError."""
    param = PARAMS[name]
    if not re.fullmatch(param.regex.removeprefix("^").removesuffix("$"), text):
        raise UnsafeValueError(f"{name}={text!r} is not allowed (must match {param.regex})")
    try:
        return param.parse(text)
    except ValueError as exc:
        raise UnsafeValueError(f"{name}={text!r}: {exc}") from None


def read_param(name: str, env: Mapping[str, str] | None = None) -> Any:
    """The typed value of a parameter from the environment, or its default (None when it has none)."""
    env = os.environ if env is None else env
    text = env.get(name, "")
    if text == "":
        default = PARAMS[name].default
        return None if default is None else check_value(name, default)
    return check_value(name, text)


def read_params(names: list[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Every named parameter, all validated before any is used; all bad ones reported together."""
    out: dict[str, Any] = {}
    bad: list[str] = []
    for name in names:
        try:
            out[name] = read_param(name, env)
        except UnsafeValueError as exc:
            bad.append(str(exc))
    if bad:
        raise UnsafeValueError("; ".join(bad))
    return out


def results_dir(env: Mapping[str, str] | None = None) -> str:
    """ACCEPT_RESULTS_DIR, else the site config's results_dir."""
    explicit = read_param("ACCEPT_RESULTS_DIR", env)
    if explicit:
        return str(explicit)
    from gpuclust.config import load_config

    return load_config().results_dir


def default_master_port(job_id: str) -> int:
    """23000 + 10*(job id % 900): below the ephemeral range, clear of the lab daemons' 20000-22509, and
    distinct for concurrent jobs; a job adds 0-9 for its concurrent steps."""
    digits = re.match(r"\d+", job_id)
    base = int(digits.group(0)) if digits else 0
    return 23000 + 10 * (base % 900)


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuclust.accept.params results-dir`: the validated results directory, for the templates."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if args != ["results-dir"]:
        print("usage: python -m gpuclust.accept.params results-dir", file=sys.stderr)
        return 2
    from gpuclust.errors import GpuclustError

    try:
        path = results_dir()
        check_value("ACCEPT_RESULTS_DIR", path)
    except GpuclustError as exc:
        print(f"gpuclust.accept.params: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
