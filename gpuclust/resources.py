"""Where gpuclust's shipped files are: the example site config, the sbatch templates, job_submit.lua, the deploy
examples (cron, systemd, NHC) and the man pages.

In a wheel they are package data under gpuclust/data/ (copied there by setup.py's build step, the man pages built
at that time); in a source checkout (and an editable install of it) they are the checkout's own top-level files,
found next to the package. One lookup serves both, so nothing else needs to know how gpuclust was installed.
Standard library only: `gpuclust config example` and `gpuclust man` import this and nothing heavy.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

DATA_DIR = "data"
"""The folder inside the installed package that holds the shipped files (same layout as the checkout)."""

EXAMPLE_CONFIG = "site.example.conf"
TEMPLATES = "sbatch_templates"
JOB_SUBMIT = "job_submit"
EXAMPLES = "examples"
MAN = "man"
"""gpuclust/data/man/*.1 in a wheel only: a checkout builds its pages from the click commands when asked."""


def _package_dir() -> Path:
    return Path(str(resources.files("gpuclust")))


def data_root() -> Path:
    """The folder holding site.example.conf, sbatch_templates/, job_submit/ and examples/: the installed
    package's data/ when it exists, else the source checkout the package was imported from."""
    installed = _package_dir() / DATA_DIR
    if (installed / EXAMPLE_CONFIG).is_file():
        return installed
    return _package_dir().parent


def data_path(*parts: str) -> Path:
    """A shipped file or folder by its path relative to the checkout's root, e.g. data_path("examples", "cron").
    The path may not exist (a checkout has no built man pages); the caller checks."""
    return data_root().joinpath(*parts)


def example_config() -> Path:
    return data_path(EXAMPLE_CONFIG)


def deploy_examples() -> dict[str, Path]:
    """File name -> path of every deploy example (examples/*/*), e.g. "gpuclust-report.service"."""
    root = data_path(EXAMPLES)
    found: dict[str, Path] = {}
    if root.is_dir():
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.name != "README.md" and "__pycache__" not in path.parts:
                found.setdefault(path.name, path)
    return found


def man_dir() -> Path | None:
    """The built man pages (gpuclust.1, gpuclust-GROUP.1) of an installed wheel, or None in a checkout."""
    path = _package_dir() / DATA_DIR / MAN
    return path if (path / "gpuclust.1").is_file() else None
