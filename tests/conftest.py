"""Suite-wide rules. Under CI=true a `slurm` test that skips is turned into a failure: the lab must run."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if in_ci() and report.skipped and item.get_closest_marker("slurm") is not None:
        report.outcome = "failed"
        report.longrepr = f"slurm test skipped under CI=true (the lab must run in CI): {report.longrepr}"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture
def example_config_path() -> Path:
    return REPO / "site.example.conf"
