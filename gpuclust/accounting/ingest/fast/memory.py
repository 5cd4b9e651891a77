"""Memory settings of a process that runs the accounting pipeline.

A million-row report allocates and frees arrays of a few to a few hundred MB. glibc hands each freed one
back to the kernel (munmap, or a trim of the heap), and the next array is faulted in page by page again:
on small VMs those page faults cost more than the arithmetic on the array. So the pipeline's process
keeps freed memory for reuse: glibc serves large blocks from its heap and does not trim it, and pyarrow
allocates from the same heap (its default mimalloc pool keeps its own pages apart, where numpy cannot
reuse them). The memory is returned when the process ends, which for the report command is at once.

Four more settings of the same process:
* mimalloc, which pyarrow.csv reads into, returns the pages it frees after a short delay
  (`before_pyarrow_loads`: its options are read when pyarrow loads, so the command line sets them first). As
  pyarrow ships it, freed columns could stay resident at random and raise the peak; with no delay at all, the
  read's growing columns hand back and fault in the same pages again.
* pyarrow.csv reads the input into mimalloc's pool (`read_pool`), not into that heap: its column builders grow
  by reallocation, which mimalloc does in place and the kept heap does by a copy.
* OpenBLAS, which numpy loads, starts no thread pool (`before_numpy_loads`): no figure makes a BLAS call, and
  starting a thread per core and letting them spin is CPU that a small build's whole process pays for (BENCHMARKS.md,
  "Whole-process `report build`").
* The objects alive when the pipeline starts (the imported modules) are set aside from the cyclic garbage
  collector (`gc.freeze`). The readers make many short-lived lists, and each full collection would walk all
  of those objects again. Until then the collector is off (`pause_collection`): what the libraries' imports
  make lives as long as the process, so a collection there only walks it.
Each was measured on a 1M-line dump (BENCHMARKS.md, "Measurements behind the code's design choices").
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (pyarrow is imported where it is used: `before_pyarrow_loads` must run before it loads)
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

# mimalloc's options (environment variables it reads once, when pyarrow loads it).
MIMALLOC_SETTINGS = {"MIMALLOC_PURGE_DELAY": "10"}  # ms before freed pages go back to the kernel

_applied: bool | None = None


def before_pyarrow_loads() -> bool:
    """Set MIMALLOC_SETTINGS for this process (a value the environment has already is kept) where pyarrow is
    not loaded yet; False where it is, and nothing is set."""
    if "pyarrow" in sys.modules:
        return False
    for name, value in MIMALLOC_SETTINGS.items():
        os.environ.setdefault(name, value)
    return True


# OpenBLAS's thread count (read once, when numpy loads it); the report commands run no BLAS code.
NUMPY_SETTINGS = {"OPENBLAS_NUM_THREADS": "1"}


def before_numpy_loads() -> bool:
    """Set NUMPY_SETTINGS for this process (a value the environment has already is kept) where numpy is not
    loaded yet; False where it is, and nothing is set."""
    if "numpy" in sys.modules:
        return False
    for name, value in NUMPY_SETTINGS.items():
        os.environ.setdefault(name, value)
    return True


_paused = False


def pause_collection() -> None:
    """Turn the cyclic garbage collector off until `resume_collection` (keep_freed_memory calls it, after the
    freeze; a command that ends before, on closing)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collection() -> None:
    """Turn the collector on again where pause_collection turned it off."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


def keep_freed_memory() -> bool:
    """Apply the settings above to this process (once; later calls do nothing). False where the C library
    is not glibc, or pyarrow's pool cannot be changed: then only the collector's freeze is applied."""
    global _applied
    if _applied is not None:
        resume_collection()
        return _applied
    _applied = False
    gc.freeze()
    resume_collection()
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
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    _applied = True
    return True


def read_pool() -> pa.MemoryPool | None:
    """The pool pyarrow.csv reads the input into: mimalloc's where pyarrow has it and the default pool is the
    kept heap; else None (the default pool)."""
    if not _applied:
        return None
    import pyarrow as pa

    try:
        return pa.mimalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without mimalloc
        return None


def release_read_pool() -> None:
    """Hand the memory the read pool (`read_pool`) holds free back to the kernel now: the kept heap cannot reuse
    it, so what pyarrow.csv's columns freed would otherwise count in the process's peak."""
    pool = read_pool()
    if pool is not None:
        pool.release_unused()


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
