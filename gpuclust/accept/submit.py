"""`gpuclust accept submit`: turn (kind, partition, nodes, site config) into sbatch calls of the templates.

The templates also work with a plain `sbatch`; this adds what the site config knows: the partition's GPUs
(one rank per GPU for all_reduce: `--gres=gpu:TYPE:N --ntasks-per-node=N`), the results directory, the
submitting interpreter (so jobs run the same gpuclust + torch as the caller), and a log path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuclust import resources
from gpuclust.accept import params as P
from gpuclust.accept.container import ContainerSpec
from gpuclust.accept.results import KINDS
from gpuclust.config.site import SiteConfig
from gpuclust.config.values import parse_slurm_name
from gpuclust.errors import InputError, UnsafeValueError
from gpuclust.slurm.client import SlurmClient

TEMPLATE_ENV = "GPUCLUST_TEMPLATE_DIR"
_COMMENT_RE = re.compile(r"^[A-Za-z0-9_.,:=/@+ -]{0,200}$")
_NODELIST_RE = re.compile(r"^[A-Za-z0-9_.,\[\]-]{1,4000}$")
_TIME_RE = re.compile(r"^[0-9:-]{1,16}$")
CONTAINER_PARAMS = ("ACCEPT_CONTAINER", "ACCEPT_CONTAINER_RUNTIME", "ACCEPT_CONTAINER_DIGEST")


def template_dir(explicit: str | None = None) -> Path:
    """--template-dir, then $GPUCLUST_TEMPLATE_DIR, then the shipped templates: gpuclust/data/sbatch_templates in
    an installed wheel, the checkout's sbatch_templates/ in a source checkout (gpuclust.resources)."""
    candidates = [explicit, os.environ.get(TEMPLATE_ENV), str(resources.data_path(resources.TEMPLATES))]
    for candidate in candidates:
        if candidate and (Path(candidate) / "allreduce.sbatch").is_file():
            return Path(candidate)
    raise InputError(f"sbatch templates not found (tried --template-dir, ${TEMPLATE_ENV}, {candidates[-1]})")


@dataclass(frozen=True)
class Submission:
    """One sbatch submission: its kind, the sbatch arguments, and the environment laid over the caller's."""

    kind: str
    args: list[str]  # sbatch arguments, the template path last
    env: dict[str, str] = field(default_factory=dict)  # laid over the caller's environment (--export=ALL)


def parse_settings(items: list[str]) -> dict[str, str]:
    """`--set ACCEPT_MAX_SIZE=64M` items -> validated {name: value}; only known template parameters."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in P.PARAMS:
            known = ", ".join(sorted(P.PARAMS))
            raise UnsafeValueError(f"--set {item!r}: expected NAME=VALUE with NAME one of {known}")
        if name in CONTAINER_PARAMS:
            raise InputError(f"--set {name}: use --container IMAGE [--container-runtime R] instead (it checks the "
                             "image and the runtime and computes the digest before submission)")
        P.check_value(name, value)
        out[name] = value
    return out


def build(
    kind: str, config: SiteConfig, partition: str, nodes: int, *, gpus_per_node: int | None = None,
    account: str | None = None, qos: str | None = None, time_limit: str | None = None, comment: str | None = None,
    settings: Mapping[str, str] | None = None, python: str | None = None, templates: Path | None = None,
    container: ContainerSpec | None = None, nodelist: str | None = None,
) -> Submission:
    if kind not in KINDS:
        raise InputError(f"unknown acceptance kind {kind!r} (one of {', '.join(KINDS)}, or all)")
    parse_slurm_name(partition)
    if nodes < 1 or (kind == "pairwise" and nodes < 2) or (kind == "storage" and nodes < 2):
        raise InputError(f"{kind} needs {'2 or more nodes' if kind != 'allreduce' else 'a positive node count'}, got {nodes}")
    part = config.partitions.get(partition)
    gpus = gpus_per_node if gpus_per_node is not None else (part.gpus_per_node if part else None) or 0
    gpu_type = part.gpu_type if part else None
    templates = templates or template_dir()
    args = ["--parsable", f"--partition={partition}", f"--nodes={nodes}", f"--job-name=accept-{kind}",
            "--export=ALL"]
    results_dir = (settings or {}).get("ACCEPT_RESULTS_DIR") or config.results_dir
    P.check_value("ACCEPT_RESULTS_DIR", results_dir)
    log_dir = Path(results_dir) / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    args.append(f"--output={log_dir}/%x-%j.out")
    if gpus > 0:
        # all_reduce: one rank per GPU; the other kinds: one rank per node on one GPU
        per_node = gpus if kind == "allreduce" else 1
        typed = f"{gpu_type}:" if gpu_type else ""
        args += [f"--gres=gpu:{typed}{per_node}", f"--ntasks-per-node={per_node}"]
    else:
        args.append("--ntasks-per-node=1")
    if account:
        args.append(f"--account={parse_slurm_name(account)}")
    if qos:
        args.append(f"--qos={parse_slurm_name(qos)}")
    if time_limit:
        if not _TIME_RE.match(time_limit):
            raise UnsafeValueError(f"--time {time_limit!r}: use Slurm's [D-]HH:MM:SS or minutes")
        args.append(f"--time={time_limit}")
    if nodelist:  # (the lemon nodes' re-acceptance: these nodes, not any of the partition's)
        if not _NODELIST_RE.match(nodelist):
            raise UnsafeValueError(f"--nodelist {nodelist!r}: use a Slurm hostlist such as node[01-04],gpu7")
        args.append(f"--nodelist={nodelist}")
    if comment is not None:
        if not _COMMENT_RE.match(comment):
            raise UnsafeValueError(f"--comment {comment!r} has characters outside [A-Za-z0-9_.,:=/@+ -]")
        args.append(f"--comment={comment}")
    args.append(str(templates / f"{kind}.sbatch"))
    env = {"ACCEPT_RESULTS_DIR": results_dir, "ACCEPT_PARTITION": partition,
           "GPUCLUST_PYTHON": python or sys.executable}
    env.update(settings or {})
    if container is not None:  # resolved (runtime found, digest computed) by container.resolve
        for name, value in container.env().items():
            P.check_value(name, value)
        env.update(container.env())
    P.check_value("GPUCLUST_PYTHON", env["GPUCLUST_PYTHON"])
    return Submission(kind, args, env)


def submit(client: SlurmClient, submission: Submission) -> str:
    out = client.sbatch(submission.args, env=submission.env)
    job_id = out.strip().splitlines()[-1].split(";")[0].strip() if out.strip() else ""
    if not re.fullmatch(r"\d+", job_id):
        raise InputError(f"sbatch --parsable printed {out!r}, not a job id")
    return job_id

