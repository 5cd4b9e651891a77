"""Where the accounting store lives, known without loading the data libraries (store.py re-exports it): a caller
can tell there is no store before it pays for pandas and pyarrow."""

from __future__ import annotations

from pathlib import Path


def store_dir(state_dir: str) -> Path:
    return Path(state_dir) / "accounting"
