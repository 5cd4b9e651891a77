"""The report process keeps freed memory for reuse (gpuclust.accounting.ingest.fast.memory)."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpuclust.accounting.ingest.fast import memory


def _glibc() -> bool:
    try:
        return sys.platform.startswith("linux") and bool(ctypes.CDLL(None).gnu_get_libc_version)
    except (OSError, AttributeError):
        return False


def test_settings_apply_once_and_route_pyarrow_to_the_c_heap():
    first = memory.keep_freed_memory()
    assert memory.keep_freed_memory() is first  # once per process
    if not _glibc():
        pytest.skip("mallopt settings are glibc's")
    assert first is True
    assert pa.default_memory_pool().backend_name == "system"
    # Arrays still work and are freed as usual, whichever pool allocated them.
    arr = pa.array(np.arange(1 << 20))
    assert arr.sum().as_py() == (1 << 20) * ((1 << 20) - 1) // 2


def test_report_build_sets_the_process_up_first(tmp_path, monkeypatch):
    """`report build` applies the settings before it reads anything."""
    from gpuclust.accounting import pipeline
    from tests.unit.test_accounting_cli import _build

    calls: list[str] = []
    monkeypatch.setattr(memory, "keep_freed_memory", lambda: calls.append("memory") or True)
    real_build = pipeline.build
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: (calls.append("build"), real_build(*a, **k))[1])
    result, _ = _build(tmp_path)
    assert result.exit_code == 0, result.output
    assert calls == ["memory", "build"]


def _fresh_python(code: str, env: dict[str, str] | None = None) -> str:
    """`code` run by a fresh interpreter (pyarrow not loaded): its standard output."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_") and k != "OPENBLAS_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**base, **(env or {})}, timeout=120)
    return done.stdout.strip()


def test_mimalloc_settings_are_set_only_before_pyarrow_loads():
    probe = ("import os, sys{first}\nfrom gpuclust.accounting.ingest.fast import memory\n"
             "print(memory.before_pyarrow_loads(), os.environ.get('MIMALLOC_PURGE_DELAY'))")
    assert _fresh_python(probe.format(first="")) == "True 10"
    assert _fresh_python(probe.format(first=""), {"MIMALLOC_PURGE_DELAY": "50"}) == "True 50"  # the admin's own
    assert _fresh_python(probe.format(first="; import pyarrow")) == "False None"  # too late: nothing set


def test_openblas_settings_are_set_only_before_numpy_loads():
    probe = ("import os, sys{first}\nfrom gpuclust.accounting.ingest.fast import memory\n"
             "print(memory.before_numpy_loads(), os.environ.get('OPENBLAS_NUM_THREADS'))")
    assert _fresh_python(probe.format(first="")) == "True 1"
    assert _fresh_python(probe.format(first=""), {"OPENBLAS_NUM_THREADS": "4"}) == "True 4"  # the admin's own
    assert _fresh_python(probe.format(first="; import numpy")) == "False None"  # too late: nothing set


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_numpy_loads_without_a_blas_thread_pool():
    """OpenBLAS starts a thread per core when numpy loads, unless told otherwise: after before_numpy_loads the
    process has only its own thread."""
    probe = ("import os\nfrom gpuclust.accounting.ingest.fast import memory\n{call}import numpy\n"
             "print(len(os.listdir('/proc/self/task')))")
    assert _fresh_python(probe.format(call="memory.before_numpy_loads()\n")) == "1"


def test_report_commands_set_mimalloc_up_before_pyarrow_loads():
    """The `report` group sets the options before a subcommand (or its options' checks) imports pyarrow."""
    code = ("import os\nfrom gpuclust.accounting.ingest.fast import memory\n"
            "seen, real = [], memory.before_pyarrow_loads\n"
            "memory.before_pyarrow_loads = lambda: seen.append(real()) or seen[-1]\n"
            "from gpuclust.cli.main import cli\n"
            "try:\n    cli.main(['report', 'build', '--help'], prog_name='gpuclust')\nexcept SystemExit:\n    pass\n"
            "print(seen, os.environ.get('MIMALLOC_PURGE_DELAY'), os.environ.get('OPENBLAS_NUM_THREADS'))")
    assert _fresh_python(code).splitlines()[-1] == "[True] 10 1"


@pytest.mark.parametrize(("argv", "expected"), [
    (["report", "build", "--help"], "[] True False"),
    (["report", "build", "--input", "/nonexistent"], "[] True False"),  # refused by its option: no pipeline
    (["report", "build", "--input", "DUMP", "--format", "json", "--out", "OUT"], "[False] True True"),
], ids=["help", "refused", "built"])
def test_report_commands_pause_the_collector_while_the_libraries_load(argv: list[str], expected: str,
                                                                       tmp_path: Path) -> None:
    """Off from the `report` group's start to the pipeline's (keep_freed_memory, after the freeze), and on again
    however the command ends."""
    dump = Path(__file__).resolve().parents[1] / "data" / "accounting" / "lab-parsable.txt"
    argv = [str(dump) if a == "DUMP" else str(tmp_path) if a == "OUT" else a for a in argv]
    code = ("import gc, sys\nfrom gpuclust.accounting.ingest.fast import memory\n"
            "seen, real = [], memory.keep_freed_memory\n"
            "memory.keep_freed_memory = lambda: seen.append(gc.isenabled()) or real()\n"
            "from gpuclust.cli.main import cli\n"
            f"try:\n    cli.main({argv!r}, prog_name='gpuclust')\nexcept SystemExit:\n    pass\n"
            "print(seen, gc.isenabled(), 'numpy' in sys.modules)")
    assert _fresh_python(code).splitlines()[-1] == expected


def test_resume_leaves_a_collector_that_was_off_before_off() -> None:
    gc.disable()
    try:
        memory.pause_collection()
        memory.resume_collection()
        assert not gc.isenabled()
    finally:
        gc.enable()
