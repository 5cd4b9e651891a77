"""No shell anywhere: argv lists only."""

import re
import subprocess

from tests.conftest import REPO

FORBIDDEN = re.compile("shell" + r"\s*=\s*True|os\.system\(|subprocess\.getoutput|os\.popen\(")


def test_no_shell_true_in_tracked_python():
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    offenders = []
    for name in files:
        path = REPO / name
        if not path.exists():
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FORBIDDEN.search(line):
                offenders.append(f"{name}:{lineno}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
