"""Man pages from the click tree: gpuclust(1) and one page per command group (gpuclust-report(1), ...).

    gpuclust man --write OUTDIR                  # writes OUTDIR/gpuclust.1, OUTDIR/gpuclust-accept.1, ...
    /opt/gpuclust/bin/python3 -m gpuclust.cli.manpage OUTDIR    # the same, with the interpreter gpuclust is in
    man -l OUTDIR/gpuclust-report.1

`python -m` needs the interpreter that has gpuclust installed: on Debian there is no `python` command, and the
system's `python3` does not see a venv's packages, so the README shows `gpuclust man`. A wheel carries these
pages, built at wheel time (setup.py).

The roff is built by gpuclust/cli/roff.py from the same help texts `--help` prints, so the pages cannot drift
from the commands; this module loads the whole CLI and writes them. SOURCE_DATE_EPOCH dates them (reproducible).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gpuclust.cli.roff import SECTION, group_page, main_page, render_pages, walk

__all__ = ["SECTION", "group_page", "main_page", "pages", "walk", "write_pages"]


def pages(root: click.Command | None = None) -> dict[str, str]:
    """File name -> roff text, for gpuclust(1) and each group."""
    if root is None:
        from gpuclust.cli.main import cli

        root = cli
    return render_pages(root)


def write_pages(out_dir: str | Path) -> list[Path]:
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for filename, text in pages().items():
        path = directory / filename
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python3 -m gpuclust.cli.manpage OUTDIR   (writes gpuclust.1 and gpuclust-GROUP.1)",
              file=sys.stderr)
        return 2
    for path in write_pages(args[0]):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
