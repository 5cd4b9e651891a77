"""What both text readers share: the input as a buffer, the stand-in bytes for a multi-character delimiter,
the fields wanted from a header, and the repair of a plain `|` dump's free-text fields."""

from __future__ import annotations

import contextlib
import mmap
import re
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from gpuclust.accounting.ingest.normalize import DEFAULT_OPTIONS, ReaderOptions

# Bytes that may stand in for a multi-character delimiter, tried in order; one absent from the data is used.
_STAND_INS = [bytes([b]) for b in (0x1F, 0x1E, 0x1D, 0x1C, *range(0x01, 0x09), 0x0B, *range(0x0E, 0x1C))]


SCAN_BLOCK = DEFAULT_OPTIONS.scan_block


_BOM = b"\xef\xbb\xbf"


class _Source:
    """The input, without a copy: a pa.Buffer for pyarrow, `find` (memchr speed on bytes and mmap)."""

    def __init__(self, data: bytes | bytearray | memoryview | mmap.mmap | pa.Buffer,
                 scan_block: int = SCAN_BLOCK) -> None:
        self.obj = data
        self.scan_block = scan_block
        self.buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        self.size = self.buffer.size
        self._find = data.find if isinstance(data, bytes | bytearray | mmap.mmap) else None

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        end = self.size if end is None else min(end, self.size)
        if self._find is not None:
            if not sub:
                return int(self._find(sub, start, end))
            # Block by block: bytes.find and mmap.find hold the GIL for the whole search, and the reader's
            # threads that need it would wait; between blocks they run.
            for a in range(start, end, self.scan_block):
                at = int(self._find(sub, a, min(end, a + self.scan_block + len(sub) - 1)))
                if at >= 0:
                    return at
            return -1
        if len(sub) == 1:
            arr = np.frombuffer(self.buffer, dtype=np.uint8)
            for a in range(start, end, self.scan_block):
                hits = np.flatnonzero(arr[a : min(a + self.scan_block, end)] == sub[0])
                if len(hits):
                    return a + int(hits[0])
            return -1
        at = self.read(start, end).find(sub)
        return at + start if at >= 0 else -1

    def read(self, start: int, end: int) -> bytes:
        start = max(0, min(start, self.size))
        end = max(start, min(end, self.size))
        return self.buffer.slice(start, end - start).to_pybytes()

    def evict(self) -> None:
        """A memory-mapped file's pages out of this process's resident set (they stay in the page cache and
        come back on the next read): once its bytes are parsed, the input no longer counts in peak memory."""
        if isinstance(self.obj, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
            with contextlib.suppress(OSError, ValueError):
                self.obj.madvise(mmap.MADV_DONTNEED)

    def tobytes(self) -> bytes:
        return self.obj if isinstance(self.obj, bytes) else self.buffer.to_pybytes()


class _DecodeFailure:
    row_decode_failed = False


@contextlib.contextmanager
def _quiet_row_decode() -> Iterator[None]:
    """pyarrow decodes a line it cannot split (strictly, as UTF-8) before it calls the handler; a line that is
    not UTF-8 fails there, the read fails (and the caller falls back), and Python prints the error as
    'unraisable'. Keep that one quiet; anything else goes to the usual hook."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        reader = getattr(unraisable.object, "_direct_reader", None)
        if isinstance(unraisable.exc_value, UnicodeDecodeError) and reader is not None:
            reader.row_decode_failed = True
            return
        previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _wanted(header: list[str], opts: ReaderOptions) -> list[str]:
    return [name for name in opts.registry.raw if name in header]


def _tail_continuation(header: list[str], opts: ReaderOptions) -> bool:
    """Whether lines after a whole record can continue its last value: the last column is free text and
    the first is JobID (which tells where a record starts)."""
    return len(header) > 1 and header[0] == "JobID" and header[-1] in opts.registry.free_text


_JOB_ID_BYTES = re.compile(rb"[0-9]+(?:_[0-9]+|_\[[^\]]*\]|\+[0-9]+)?(?:\.[^.]+)?")  # (any length)


def _starts_record(line: bytes, sep: bytes) -> bool:
    """Whether a line starts with a JobID and a separator (so it can start a record)."""
    at = line.find(sep)
    return at > 0 and _JOB_ID_BYTES.fullmatch(line, 0, at) is not None


def _split_ways(extra: int, slots: int) -> list[tuple[int, ...]]:
    if slots == 1:
        return [(extra,)]
    return [(first, *rest) for first in range(extra + 1) for rest in _split_ways(extra - first, slots - 1)]


def _repair(values: list[str], header: list[str], free: list[int], sep: str, opts: ReaderOptions) -> list[str] | None:
    """Give the extra fields to the free-text columns in the one way that leaves every other field valid.

    None when no way, or more than one way, works (the record is then reported, not guessed).
    """
    extra = len(values) - len(header)
    order = sorted(free)
    valid: list[list[str]] = []
    for shares in _split_ways(extra, len(order)):
        out: list[str] = []
        pos = 0
        for col in range(len(header)):
            take = 1 + (shares[order.index(col)] if col in order else 0)
            out.append(sep.join(values[pos : pos + take]))
            pos += take
        if opts.registry.plausible(dict(zip(header, out, strict=True))):
            valid.append(out)
    return valid[0] if len(valid) == 1 else None
