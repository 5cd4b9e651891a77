"""One atomic file writer: a reader sees the old file or the whole new one, never a part."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from gpuclust.errors import InputError, Problem


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int | None = 0o644,
    make_parents: bool = False,
    check: Callable[[Path], None] | None = None,
    input_error: bool = False,
) -> Path:
    """Write `path` through a temp file in its directory: write, fsync, chmod, `check(temp)`, rename, fsync the
    directory. `mode=None` keeps the mode of the file being replaced (0644 for a new one). On any error (an
    OSError, or whatever `check` raises) the temp file is removed and `path` is untouched. `input_error=True`:
    an OSError (or a path the OS refuses, a ValueError) is raised as an InputError naming `path`, for a
    user-given output path."""
    if not input_error:
        return _write(Path(path), data, mode, make_parents, check)
    try:
        return _write(Path(path), data, mode, make_parents, check)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InputError(Problem(str(path), None, f"cannot write: {why}")) from None


def _write(target: Path, data: bytes | str, mode: int | None, make_parents: bool,
           check: Callable[[Path], None] | None) -> Path:
    parent = target.parent if str(target.parent) else Path(".")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if make_parents:
        parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if check is not None:
            check(tmp)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    with contextlib.suppress(OSError):  # make the rename durable
        fsync_path(parent)
    return target


def fsync_path(path: Path | str) -> None:
    """fsync a file or directory by path (a directory: to make a rename or a new entry in it durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
