"""Every dataclass under gpuclust/ has a docstring. On Python 3.11 @dataclass gives a class without one a docstring
built from inspect.signature(cls), at import: about 0.4 ms per class, paid at the start of every command (the CLI's
start-up time is measured as a whole process)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gpuclust"


def _is_dataclass(decorator: ast.expr) -> bool:
    """`@dataclass`, `@dataclass(...)`, `@dataclasses.dataclass` or `@dataclasses.dataclass(...)`."""
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


def test_every_dataclass_has_a_docstring() -> None:
    missing: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if (isinstance(node, ast.ClassDef) and any(_is_dataclass(d) for d in node.decorator_list)
                    and ast.get_docstring(node) is None):
                missing.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}:{node.name}")
    assert not missing, "dataclasses without a docstring (give each a one-line one):\n" + "\n".join(missing)
