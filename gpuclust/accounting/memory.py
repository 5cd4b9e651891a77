"""Memory settings of a process that runs the accounting pipeline.

A million-row report allocates and frees arrays of a few to a few hundred MB. glibc hands each freed one
back to the kernel (munmap, or a trim of the heap), and the next array is faulted in page by page again:
on small VMs those page faults cost more than the arithmetic on the array. So the pipeline's process
keeps freed memory for reuse: glibc serves large blocks from its heap and does not trim it, and pyarrow
allocates from the same heap (its default mimalloc pool keeps its own pages apart, where numpy cannot
reuse them). The memory is returned when the process ends, which for the report command is at once.

Two more settings of the same process:
* pyarrow.csv reads the input into mimalloc's pool (`read_pool`), not into that heap: its column builders grow
  by reallocation, which mimalloc does in place and the kept heap does by a copy (1M-row dump: the read's
  peak RSS 150 MB lower).
* The objects alive when the pipeline starts (the imported modules: some 70k) are set aside from the cyclic
  garbage collector (`gc.freeze`). The readers make many short-lived lists, and each full collection
  would walk all of those objects again (1M-row dump: 76 collections, 45 ms of the read).
"""

from __future__ import annotations

import ctypes
import gc
import sys

import pyarrow as pa

# mallopt(3) parameters (glibc malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

SETTINGS = {
    _M_MMAP_THRESHOLD: 256 << 20,  # blocks up to this size come from the heap (and are reused there)
    _M_TRIM_THRESHOLD: 1 << 30,  # free memory at the heap's top is kept up to this much
    _M_TOP_PAD: 64 << 20,  # the heap grows in steps of this much
}

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the settings above to this process (once; later calls do nothing). False where the C library
    is not glibc, or pyarrow's pool cannot be changed: then only the collector's freeze is applied."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    gc.freeze()
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 (glibc only: other C libraries lack mallopt's parameters)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not all(mallopt(param, value) == 1 for param, value in SETTINGS.items()):
        return False
    pa.set_memory_pool(pa.system_memory_pool())
    _applied = True
    return True


def read_pool() -> pa.MemoryPool | None:
    """The pool pyarrow.csv reads the input into: mimalloc's where pyarrow has it and the default pool is the
    kept heap; else None (the default pool)."""
    if not _applied:
        return None
    try:
        return pa.mimalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without mimalloc
        return None


def release_freed() -> None:
    """Hand the freed memory back to the kernel now (glibc malloc_trim; elsewhere nothing): between the buckets
    of a partitioned build, whose arrays differ in size from bucket to bucket, so that the holes the kept heap
    leaves do not add up over a hundred buckets."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
