"""Step 0 of the direct reader: what the delimiter and the header say about every line, fixed before any byte of
the body is read (`Layout`), and the small things every step shares (`Fallback`, `Pool`)."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.registry import Registry
from gpuclust.accounting.ingest.textcommon import _STAND_INS, _Source, _wanted

T = TypeVar("T")


class Fallback(Exception):
    """The direct reader cannot vouch for the reference's result on this input (the reference then runs)."""


def split_at(delim: bytes) -> int | None:
    """Where the direct reader splits a delimiter D: the first byte that occurs once in D (pyarrow splits on
    it; each value then ends with the bytes before it and starts with the bytes after it, which are checked).
    ``\x1f|\x1e`` splits at 0, ``|#|`` at 1 (a `|` in a name then splits nothing). None: no such byte that
    pyarrow can split on."""
    for k, byte in enumerate(delim):
        if delim.count(byte) == 1 and byte not in b"\r\n\0" and byte < 0x80:
            return k
    return None


@dataclass(frozen=True)
class Layout:
    """The delimiter D split at the byte pyarrow splits on (d0; `pre` before it, `rest` after it: every value
    but a line's first starts with `rest`, every value but a line's last ends with `pre`), and the header:
    each column's name as pyarrow reads it (`names`; a column the registry does not take is `_ignoredN`), the
    registry fields present (`wanted`, at `positions`), the columns read (`read`: the wanted ones and the
    first, which tells blank lines)."""

    delim: bytes
    delim_text: str
    d0: bytes
    pre: bytes
    rest: bytes
    header: list[str]
    nfields: int
    names: list[str]
    wanted: list[str]
    positions: list[int]
    read: list[str]
    registry: Registry

    @classmethod
    def of(cls, delim: bytes, header: list[str], opts: ReaderOptions) -> Layout:
        at = split_at(delim)
        assert at is not None
        wanted = _wanted(header, opts)
        names = [name if name in opts.registry.raw and header.index(name) == i else f"_ignored{i}"
                 for i, name in enumerate(header)]
        first = names[0]
        return cls(
            delim=delim, delim_text=delim.decode("utf-8"), d0=delim[at : at + 1], pre=delim[:at],
            rest=delim[at + 1 :], header=header, nfields=len(header), names=names, wanted=wanted,
            positions=[header.index(name) for name in wanted],
            read=wanted + ([first] if first not in wanted else []), registry=opts.registry,
        )

    @property
    def first(self) -> str:
        return self.names[0]

    @property
    def last(self) -> str:
        return self.names[-1]

    @property
    def blank_probe(self) -> str:
        """The column whose empty values find blank-line candidates: JobID where read (no record has it
        empty), else the first. A free-text first column (Comment) is empty on most rows: too many candidates."""
        return "JobID" if "JobID" in self.read else self.first

    @property
    def complete(self) -> bool:
        """Every column is read: a good line can be rebuilt from its values."""
        return len(self.read) == self.nfields


class StandIn:
    """The byte the reference swaps a multi-byte delimiter for (b"" when every candidate occurs), looked for once."""

    def __init__(self, src: _Source, body_start: int) -> None:
        self.src, self.body_start = src, body_start
        self._found: bytes | None = None

    def get(self) -> bytes:
        if self._found is None:
            self._found = next((c for c in _STAND_INS if self.src.find(c, self.body_start) < 0), b"")
        return self._found


class Pool:
    """The reader's threads: the pyarrow and numpy kernels release the GIL. With one worker every task runs at
    once, in order, on the calling thread."""

    def __init__(self, pool: ThreadPoolExecutor | None, workers: int) -> None:
        self.pool = pool if workers > 1 else None

    def start(self, tasks: dict[str, Callable[[], T]]) -> dict[str, concurrent.futures.Future[T]]:
        """Futures of `tasks` (done already with one worker)."""
        if self.pool is None:
            out: dict[str, concurrent.futures.Future[T]] = {}
            for name, task in tasks.items():
                fut: concurrent.futures.Future[T] = concurrent.futures.Future()
                fut.set_result(task())
                out[name] = fut
            return out
        return {name: self.pool.submit(task) for name, task in tasks.items()}

    def run(self, tasks: dict[str, Callable[[], T]]) -> dict[str, T]:
        return {name: fut.result() for name, fut in self.start(tasks).items()}

    def map(self, func: Callable[[Any], T], items: list[Any]) -> list[T]:
        if self.pool is None or len(items) < 2:
            return [func(item) for item in items]
        return list(self.pool.map(func, items))
