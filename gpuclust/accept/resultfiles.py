"""Which files in a results directory are acceptance results: what scan_results (gpuclust.accept.results) reads,
told apart without loading the reader (a report build's measured restore times look for them first)."""

from __future__ import annotations

import os
from pathlib import Path

FILE_SUFFIX = ".jsonl"  # a result file's name ends so (results.result_file_name)


def result_files(results_dir: str | os.PathLike[str]) -> list[Path]:
    """The result files in results_dir (not temp files), sorted by name; none for an unset results_dir ("" is
    no directory here, not the current one)."""
    if not os.fspath(results_dir):
        return []
    directory = Path(results_dir)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if p.name.endswith(FILE_SUFFIX) and not p.name.startswith("."))
