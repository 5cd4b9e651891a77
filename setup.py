"""Build step for the wheel; the metadata is in setup.cfg.

build_py copies the files an installed gpuclust needs beside its code into gpuclust/data/ (the layout of the
checkout: site.example.conf, sbatch_templates/, job_submit/, examples/) and builds the man pages there
(gpuclust/data/man/*.1) from the click commands, so `gpuclust config example`, `gpuclust man` and
`accept submit` find them in a wheel (gpuclust/resources.py). The checkout keeps one copy of each file, at the
top level. An editable install skips this: gpuclust.resources finds the checkout's files itself.

The man pages import gpuclust's CLI, hence its dependencies: `scripts/build-wheel` builds with the project's
.venv (no build isolation, offline); an isolated build (`pip install git+URL`, pipx) gets them from
pyproject.toml's build requirements. SOURCE_DATE_EPOCH dates the pages (reproducible builds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SHIPPED = ("site.example.conf", "sbatch_templates", "job_submit", "examples")


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        data = Path(self.build_lib) / "gpuclust" / "data"
        if data.exists():
            shutil.rmtree(data)  # a stale build/ from an earlier build keeps nothing that was removed since
        for name in SHIPPED:
            source = HERE / name
            if not source.exists():
                raise SystemExit(f"setup.py: {source} is missing; build from a full checkout or sdist")
            _copy(source, data / name)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        # A child process: the CLI's imports stay out of this one, and an import error names what is missing.
        done = subprocess.run(
            [sys.executable, "-c", "import sys; from gpuclust.cli.manpage import write_pages; write_pages(sys.argv[1])",
             str(data / "man")], cwd=HERE, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SystemExit("setup.py: building the man pages failed (they need gpuclust's dependencies in the "
                             f"build environment):\n{done.stderr.strip()}")


setup(cmdclass={"build_py": BuildWithData})
