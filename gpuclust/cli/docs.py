"""`gpuclust man` and `gpuclust config example`: the manual and the shipped example files, from any install.

A wheel carries them as package data, a checkout has them at its top level (gpuclust.resources finds either),
so an admin who installed gpuclust with pip or pipx needs no checkout to read the manual, start a site config or
deploy the nightly cron job or systemd units. Light on purpose: click and the standard library only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click

from gpuclust import resources
from gpuclust.cli import roff as roffgen
from gpuclust.cli.params import HintPath

SITE_CONFIG_NAMES = ("site.example.conf", "site.conf")


def shipped_files() -> dict[str, Path]:
    """Name -> path of every file `config example` prints: the site config, the deploy examples and their READMEs
    (named by folder: cron/README.md), the sbatch templates, job_submit.lua and its README."""
    out = {"site.example.conf": resources.example_config()}
    out.update(resources.deploy_examples())
    for folder, pattern in ((resources.TEMPLATES, "*.sbatch"), (resources.JOB_SUBMIT, "*.lua")):
        directory = resources.data_path(folder)
        if directory.is_dir():
            out.update({p.name: p for p in sorted(directory.glob(pattern))})
    readmes = [resources.data_path(resources.JOB_SUBMIT, "README.md")]
    examples = resources.data_path(resources.EXAMPLES)
    if examples.is_dir():
        readmes += sorted(examples.glob("*/README.md"))
    out.update({f"{p.parent.name}/{p.name}": p for p in readmes if p.is_file()})
    return out


def man_pages(root: click.Group) -> dict[str, Path | None]:
    """The man pages by file name, with the built file of a wheel, or None where they are built on demand."""
    built = resources.man_dir()
    if built is not None:
        return {p.name: p for p in sorted(built.glob(f"*.{roffgen.SECTION}"))}
    return dict.fromkeys(roffgen.render_pages(root))


@click.command("example")
@click.argument("name", required=False, default="site.example.conf")
@click.option("--list", "list_names", is_flag=True, help="List the shipped files (name and path), one a line.")
@click.option("--path", "show_path", is_flag=True, help="Print the file's path instead of its contents.")
def config_example(name: str, list_names: bool, show_path: bool) -> None:
    """Print a shipped example: NAME defaults to the example site config (site.example.conf).

    Other NAMEs are the deploy examples (gpuclust-report, gpuclust-report.cron, gpuclust-report.service,
    gpuclust-report.timer, gpuclust-onfailure@.service, ...) and their READMEs (cron/README.md), the sbatch
    templates, job_submit.lua and job_submit/README.md, and the man pages (gpuclust.1, gpuclust-report.1, ...);
    --list names them all.

    \b
    gpuclust config example > /etc/gpuclust/site.conf
    gpuclust config example gpuclust-report.timer > /etc/systemd/system/gpuclust-report.timer
    """
    files = shipped_files()
    pages = man_pages(_root())
    if list_names:
        for key, path in files.items():
            click.echo(f"{key}\t{path}")
        for key, built in pages.items():  # (a checkout builds them: `gpuclust man --write DIR` installs them)
            click.echo(f"{key}\t{built if built is not None else '(built by gpuclust man --write DIR)'}")
        return
    if name in pages and name not in files:
        if show_path and pages[name] is None:
            raise click.ClickException(f"{name} is built on demand in a source checkout: `gpuclust man --write DIR` "
                                       "writes it (and the other pages) into DIR")
        click.echo(str(pages[name]) if show_path else roff_pages(_root())[name], nl=False if not show_path else True)
        return
    found = files.get("site.example.conf" if name in SITE_CONFIG_NAMES else name)
    if found is None or not found.is_file():
        raise click.BadParameter(f"no shipped file named {name!r}; expected one of: {', '.join(files)} "
                                 "; use one of those (`gpuclust config example --list` lists them)", param_hint="NAME")
    if show_path:
        click.echo(str(found))
    else:
        click.echo(found.read_text(encoding="utf-8"), nl=False)


def _root() -> click.Group:
    # the running command tree, from click's context: importing gpuclust.cli.main here would be an import cycle
    root = click.get_current_context().find_root().command
    assert isinstance(root, click.Group)
    return root


def roff_pages(root: click.Group) -> dict[str, str]:
    """File name -> roff: the pages a wheel built (gpuclust/data/man), else built now from the commands."""
    built = resources.man_dir()
    if built is not None:
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(built.glob(f"*.{roffgen.SECTION}"))}
    return roffgen.render_pages(root)


def plain_text(root: click.Group, page: str) -> str:
    """The manual without man(1): the same help texts --help prints, every command of the page in turn."""
    parts: list[str] = []
    start = () if page == "gpuclust" else (page,)
    top: click.Command = root.commands[page] if start else root
    for path, command in roffgen.walk(top, start):
        if isinstance(command, click.Group) and path:
            continue  # a group's page is its commands
        title = " ".join(("gpuclust", *path))
        parts.append(f"{title}\n{'=' * len(title)}")
        parts.append(command.get_help(roffgen._context(root, path)))
    return "\n\n".join(parts) + "\n"


@click.command("man")
@click.argument("command", required=False, default="gpuclust")
@click.option("--write", "write_dir", type=HintPath(file_okay=False),
              help="Write every page (gpuclust.1, gpuclust-GROUP.1) into this directory instead, e.g. "
              "/usr/local/share/man/man1 (then: mandb -q; man gpuclust-report).")
@click.option("--roff", is_flag=True, help="Print the page's roff source instead of formatting it.")
def man(command: str, write_dir: str | None, roff: bool) -> None:
    """Show the manual: gpuclust(1), or COMMAND's page (accept, audit, config, man, policy, report).

    Formatted by man(1) when it exists (a pager on a terminal, plain text otherwise); without man(1), the
    commands' help texts as plain text. The pages are built from the same help texts as --help.
    """
    root = _root()
    if write_dir is not None:
        directory = Path(write_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for filename, text in roff_pages(root).items():
            (directory / filename).write_text(text, encoding="utf-8")
            click.echo(str(directory / filename))
        return
    page = command.removeprefix("gpuclust-").removesuffix(".1") if command != "gpuclust" else command
    names = sorted(root.commands)
    if page != "gpuclust" and page not in names:
        raise click.BadParameter(f"no manual page for {command!r}; expected gpuclust or one of: {', '.join(names)}; "
                                 "use one of those, e.g. `gpuclust man report`",
                                 param_hint="COMMAND")
    filename = f"{'gpuclust' if page == 'gpuclust' else 'gpuclust-' + page}.{roffgen.SECTION}"
    text = roff_pages(root)[filename]
    if roff:
        click.echo(text, nl=False)
        return
    man_cmd = shutil.which("man")
    if man_cmd is None:
        click.echo(plain_text(root, page), nl=False)
        return
    sys.stdout.flush()
    # man -l - reads the page from stdin; on a terminal it pages, into a pipe it prints plain text.
    done = subprocess.run([man_cmd, "-l", "-"], input=text.encode("utf-8"), check=False)
    if done.returncode != 0:
        raise click.ClickException(f"man -l - exited {done.returncode} on {filename}; "
                                   "`gpuclust man --roff` prints the page's source")
