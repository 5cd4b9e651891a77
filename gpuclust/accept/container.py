"""Acceptance inside the production container: which runtime, which image, which digest.

`gpuclust accept submit ... --container IMAGE [--container-runtime auto|oci|pyxis|apptainer]` resolves the image
and the runtime on the submit host, BEFORE anything is submitted, and hands the templates three validated
parameters: ACCEPT_CONTAINER (the image reference), ACCEPT_CONTAINER_RUNTIME and ACCEPT_CONTAINER_DIGEST.
The templates then launch each step's program through the runtime:

- oci:        `srun --container=BUNDLE PYTHON -m ...`: Slurm's native OCI support (slurmstepd runs oci.conf's
              RunTimeRun, e.g. crun or runc, on an OCI bundle directory: config.json + rootfs);
- pyxis:      `srun --container-image=IMAGE PYTHON -m ...`: the pyxis SPANK plugin with enroot;
- apptainer:  `srun apptainer exec IMAGE PYTHON -m ...` (singularity the same where only it exists).

Digests (recorded with every result; a containerised result without one is left out of the comparison):
- an OCI bundle directory: sha256 over config.json and the rootfs tree (path, type, mode, size, content or
  link target of every entry, in sorted order), spelled `sha256:<hex>`;
- a file (SIF, squashfs): sha256 of the file;
- a registry reference: only when pinned (`...@sha256:<hex>`); an unpinned tag cannot be checked here.

Detection (`auto`): the image's kind names the runtimes that can run it, then the first of those the site
has wins: pyxis when `sbatch --help` lists `--container-image` (the plugin is loaded), oci when sbatch has
`--container` and an oci.conf next to slurm.conf names a runtime found on PATH, apptainer/singularity when
that binary is on PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import socket
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuclust.errors import InputError, SlurmError, UnsafeValueError
from gpuclust.slurm import hostlist

RUNTIME_CHOICES = ("auto", "oci", "pyxis", "apptainer")
RUNTIMES = ("oci", "pyxis", "apptainer", "singularity")
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_PINNED_RE = re.compile(r"@(sha256:[0-9a-f]{64})$")
_CHUNK = 1 << 20

Which = Callable[[str], "str | None"]


@dataclass(frozen=True)
class ContainerSpec:
    """What a submission runs in: the image reference as given, its digest, the runtime and how it was found."""

    image: str
    runtime: str
    digest: str
    detail: str = ""

    def env(self) -> dict[str, str]:
        return {"ACCEPT_CONTAINER": self.image, "ACCEPT_CONTAINER_RUNTIME": self.runtime,
                "ACCEPT_CONTAINER_DIGEST": self.digest}

    def as_dict(self) -> dict[str, str]:
        return {"image": self.image, "runtime": self.runtime, "digest": self.digest, "detail": self.detail}


@dataclass(frozen=True)
class Probe:
    """Whether one runtime is usable from this submit host, and the evidence (or why not)."""

    runtime: str
    available: bool
    detail: str


# ---- digests ---------------------------------------------------------------------------------------------


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def bundle_rootfs(bundle: Path) -> Path:
    """The rootfs an OCI bundle's config.json names (root.path, relative to the bundle unless absolute)."""
    config = bundle / "config.json"
    try:
        doc = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{config}: not a readable OCI runtime config ({exc})") from None
    root = doc.get("root", {}).get("path", "rootfs") if isinstance(doc, dict) else "rootfs"
    if not isinstance(root, str) or not root:
        raise InputError(f"{config}: root.path is not a path")
    path = Path(root) if root.startswith("/") else bundle / root
    if not path.is_dir():
        raise InputError(f"{config}: root.path {root!r} is not a directory ({path})")
    return path


def tree_digest(bundle: Path) -> str:
    """sha256 over config.json and every entry of the rootfs: the same tree gives the same digest wherever it
    is copied (paths are relative; times and owners are left out: copies do not keep them reliably)."""
    h = hashlib.sha256()
    h.update(b"config.json\0" + _file_sha256(bundle / "config.json").encode() + b"\n")
    rootfs = bundle_rootfs(bundle)
    for dirpath, dirnames, filenames in os.walk(rootfs):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, rootfs)
        for name in sorted([*dirnames, *filenames]):
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                line = f"l {rel} {mode:o} {os.readlink(full)}"
            elif stat.S_ISREG(st.st_mode):
                line = f"f {rel} {mode:o} {st.st_size} {_file_sha256(Path(full))}"
            elif stat.S_ISDIR(st.st_mode):
                line = f"d {rel} {mode:o}"
            else:
                line = f"o {rel} {mode:o} {stat.S_IFMT(st.st_mode):o}"
            h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return f"sha256:{h.hexdigest()}"


def image_kind(image: str) -> str:
    """'bundle' (dir with config.json), 'file' (SIF, squashfs), 'pinned'
    (reference@sha256:...), 'reference' (an unpinned registry reference), 'missing' (a path that is not there)."""
    if image.startswith("/"):
        path = Path(image)
        if path.is_dir():
            if (path / "config.json").is_file():
                return "bundle"
            return "missing"
        return "file" if path.is_file() else "missing"
    return "pinned" if _PINNED_RE.search(image) else "reference"


def image_digest(image: str) -> str:
    kind = image_kind(image)
    if kind == "bundle":
        return tree_digest(Path(image))
    if kind == "file":
        return f"sha256:{_file_sha256(Path(image))}"
    if kind == "pinned":
        match = _PINNED_RE.search(image)
        assert match is not None
        return match.group(1)
    if kind == "missing":
        raise InputError(f"container image {image!r} does not exist (expected an OCI bundle directory with "
                         "config.json and a rootfs, or an image file: SIF, squashfs)")
    raise InputError(f"container image {image!r} is not pinned: give a local image or bundle, or a reference "
                     "ending in @sha256:<digest>, so the digest is known before submission")


# which runtimes can run which kind of image
_RUNS = {
    "bundle": ("oci",),
    "file": ("pyxis", "apptainer", "singularity"),  # squashfs for enroot, SIF for apptainer
    "pinned": ("pyxis", "apptainer", "singularity"),
    "reference": ("pyxis", "apptainer", "singularity"),
}


# ---- runtime detection -----------------------------------------------------------------------------------


def parse_oci_conf(text: str) -> dict[str, str]:
    """oci.conf -> {lower-case key: value} (keys are case-insensitive; '#' starts a comment outside quotes)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        else:
            value = value.split("#", 1)[0].strip()
        out[key.strip().lower()] = value
    return out


def oci_runtime_binary(conf: Mapping[str, str]) -> str | None:
    """The OCI runtime an oci.conf runs: the crun/runc word of RunTimeRun (or RunTimeCreate), else its first
    word (a site wrapper)."""
    command = conf.get("runtimerun") or conf.get("runtimecreate")
    if not command:
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for word in words:
        for token in re.split(r"[\s;'\"]+", word):
            if os.path.basename(token) in ("crun", "runc"):
                return token
    return words[0] if words else None


def slurm_conf_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    conf = env.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    return Path(conf).parent


def probe_oci(sbatch_help: str, conf_dir: Path, which: Which = shutil.which) -> Probe:
    if not re.search(r"^\s*--container[\s=]", sbatch_help, re.M):
        return Probe("oci", False, "sbatch --help lists no --container option (Slurm's OCI support needs 21.08+)")
    oci_conf = conf_dir / "oci.conf"
    try:
        conf = parse_oci_conf(oci_conf.read_text(encoding="utf-8"))
    except OSError:
        return Probe("oci", False, f"no oci.conf next to slurm.conf ({oci_conf})")
    binary = oci_runtime_binary(conf)
    if binary is None:
        return Probe("oci", False, f"{oci_conf} sets neither RunTimeRun nor RunTimeCreate")
    found = which(binary)
    if not found:
        return Probe("oci", False, f"{oci_conf} runs {binary!r}, which is not on PATH here")
    return Probe("oci", True, f"{oci_conf} runs {found}")


def probe_pyxis(sbatch_help: str, which: Which = shutil.which) -> Probe:
    if not re.search(r"^\s*--container-image[\s=]", sbatch_help, re.M):
        return Probe("pyxis", False, "sbatch --help lists no --container-image (the pyxis SPANK plugin is not loaded)")
    enroot = which("enroot")
    return Probe("pyxis", True, "sbatch --help lists --container-image (pyxis)"
                 + (f"; enroot at {enroot}" if enroot else "; enroot not on this host (it runs on the nodes)"))


def probe_binary(runtime: str, which: Which = shutil.which) -> Probe:
    found = which(runtime)
    if not found:
        return Probe(runtime, False, f"{runtime} is not on PATH")
    return Probe(runtime, True, f"{runtime} at {found}")


def probes(sbatch_help: str, conf_dir: Path, which: Which = shutil.which) -> dict[str, Probe]:
    return {"pyxis": probe_pyxis(sbatch_help, which), "oci": probe_oci(sbatch_help, conf_dir, which),
            "apptainer": probe_binary("apptainer", which), "singularity": probe_binary("singularity", which)}


def choose_runtime(image: str, requested: str, found: Mapping[str, Probe]) -> tuple[str, str]:
    """(runtime, evidence) for image; InputError naming what was looked for when none fits."""
    if requested not in RUNTIME_CHOICES:
        raise UnsafeValueError(f"--container-runtime {requested!r}: one of {', '.join(RUNTIME_CHOICES)}")
    kind = image_kind(image)
    if kind == "missing":
        image_digest(image)  # raises the "does not exist" error
    if requested == "auto":
        candidates: list[str] = [r for r in ("pyxis", "oci", "apptainer", "singularity") if r in _RUNS[kind]]
    elif requested == "apptainer":
        candidates = ["apptainer", "singularity"]
    else:
        candidates = [requested]
    for name in candidates:
        probe = found[name]
        if probe.available:
            if name not in _RUNS[kind]:
                raise InputError(f"container image {image!r} ({kind}) cannot run under {name}: "
                                 f"{name} runs {_kinds_of(name)}")
            return name, probe.detail
    looked = "; ".join(f"{found[n].runtime}: {found[n].detail}" for n in candidates)
    wanted = "any runtime" if requested == "auto" else f"runtime {requested}"
    raise InputError(f"no container runtime for {image!r}: looked for {wanted} ({looked})")


def _kinds_of(runtime: str) -> str:
    return ", ".join(k for k, rs in _RUNS.items() if runtime in rs)


def resolve(image: str, requested: str, sbatch_help: str, conf_dir: Path, which: Which = shutil.which) -> ContainerSpec:
    """Validate the reference, pick the runtime, compute the digest: everything a submission needs, or an
    InputError before anything is submitted."""
    from gpuclust.accept.params import check_value

    check_value("ACCEPT_CONTAINER", image)
    runtime, detail = choose_runtime(image, requested, probes(sbatch_help, conf_dir, which))
    digest = image_digest(image)
    return ContainerSpec(image=image, runtime=runtime, digest=digest, detail=detail)


def resolve_with_client(image: str, requested: str, client: Any) -> ContainerSpec:
    """resolve() with `sbatch --help` from the Slurm client (through gpuclust.slurm's one runner)."""
    try:
        help_text = client.sbatch(["--help"])
    except SlurmError as exc:
        raise InputError(f"cannot ask sbatch which container options it has: {exc}") from None
    return resolve(image, requested, help_text, slurm_conf_dir())


# ---- inside the job ----------------------------------------------------------------------------------------


def task_env_fallback(env: Mapping[str, str]) -> Mapping[str, str]:
    """Slurm 22.05's OCI containers get srun's environment, not each task's (measured on the lab): a plain srun's
    tasks see no SLURM_PROCID, SLURM_LOCALID or SLURMD_NODENAME, and inside a batch job every task sees the
    batch step's (SLURM_PROCID=0 on every node), so the templates drop those before srun. With one task per
    node the rank follows from the step's node list and this node's name; with more, it cannot be known and
    this says so."""
    if env.get("SLURM_PROCID") or not env.get("SLURM_CONTAINER"):
        return env
    nodes = hostlist.expand(env.get("SLURM_STEP_NODELIST", ""))
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE", "")
    if not nodes or not re.fullmatch(r"1(\(x[0-9]+\))?(,1(\(x[0-9]+\))?)*", per_node):
        raise InputError("inside an OCI container without SLURM_PROCID (Slurm 22.05 passes only the step's "
                         f"environment) and SLURM_STEP_TASKS_PER_NODE={per_node!r}: run one task per node "
                         "(--gpus-per-node 1) or use Slurm 23.02+")
    node = env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if node not in nodes:
        raise InputError(f"inside an OCI container without SLURM_PROCID: host name {node!r} is not in the step's "
                         f"nodes {','.join(nodes)} (the container needs the node's UTS namespace)")
    out = dict(env)
    out.update(SLURM_PROCID=str(nodes.index(node)), SLURM_LOCALID="0", SLURMD_NODENAME=node,
               GPUCLUST_RANK_FROM="step node list (no per-task variables in the container)")
    return out


def _os_release(path: str = "/etc/os-release") -> str | None:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    value = fields.get("PRETTY_NAME") or fields.get("NAME")
    return value.strip().strip('"') if value else None


def seen_here() -> dict[str, Any]:
    """What a rank sees of its userland: OS, Python, C library, and the identity of its root directory (a
    container's rootfs differs from the node's /)."""
    st = os.stat("/")
    libc, libc_version = platform.libc_ver()
    return {"os": _os_release(), "python": platform.python_version(),
            "libc": f"{libc} {libc_version}".strip() or None, "root": f"{st.st_dev}:{st.st_ino}"}


_RUNTIME_MARKERS = (("SLURM_CONTAINER", "oci"), ("APPTAINER_CONTAINER", "apptainer"),
                    ("SINGULARITY_CONTAINER", "singularity"))


def job_container(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The container a result was produced in, from the validated template parameters (None: bare metal)."""
    from gpuclust.accept.params import read_param

    env = os.environ if env is None else env
    image = read_param("ACCEPT_CONTAINER", env)
    if not image:
        # in a container nobody told gpuclust about (plain `srun --container`, apptainer exec): recorded, without
        # a digest, so the comparison leaves it out instead of taking it for bare metal
        for var, runtime in _RUNTIME_MARKERS:
            if env.get(var):
                return {"image": env[var], "runtime": runtime, "digest": None}
        return None
    return {"image": image, "runtime": read_param("ACCEPT_CONTAINER_RUNTIME", env) or None,
            "digest": read_param("ACCEPT_CONTAINER_DIGEST", env) or None}


def job_extra(extra: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A JobRecord's extra with "container" added when the job ran in one."""
    out = dict(extra or {})
    info = job_container(env)
    if info is not None:
        out["container"] = info
    return out
