"""The report process keeps freed memory for reuse (gpuclust.accounting.memory)."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pyarrow as pa
import pytest

from gpuclust.accounting import memory


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
