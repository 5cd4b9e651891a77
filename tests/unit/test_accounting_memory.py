"""The report process keeps freed memory for reuse (gpuclust.accounting.ingest.fast.memory)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

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
    base = {k: v for k, v in os.environ.items() if not k.startswith("MIMALLOC_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**base, **(env or {})}, timeout=120)
    return done.stdout.strip()


def test_mimalloc_settings_are_set_only_before_pyarrow_loads():
    probe = ("import os, sys{first}\nfrom gpuclust.accounting.ingest.fast import memory\n"
             "print(memory.before_pyarrow_loads(), os.environ.get('MIMALLOC_PURGE_DELAY'))")
    assert _fresh_python(probe.format(first="")) == "True 10"
    assert _fresh_python(probe.format(first=""), {"MIMALLOC_PURGE_DELAY": "50"}) == "True 50"  # the admin's own
    assert _fresh_python(probe.format(first="; import pyarrow")) == "False None"  # too late: nothing set


def test_report_commands_set_mimalloc_up_before_pyarrow_loads():
    """The `report` group sets the options before a subcommand (or its options' checks) imports pyarrow."""
    code = ("import os\nfrom gpuclust.accounting.ingest.fast import memory\n"
            "seen, real = [], memory.before_pyarrow_loads\n"
            "memory.before_pyarrow_loads = lambda: seen.append(real()) or seen[-1]\n"
            "from gpuclust.cli.main import cli\n"
            "try:\n    cli.main(['report', 'build', '--help'], prog_name='gpuclust')\nexcept SystemExit:\n    pass\n"
            "print(seen, os.environ.get('MIMALLOC_PURGE_DELAY'))")
    assert _fresh_python(code).splitlines()[-1] == "[True] 10"
