"""The package's import graph, read from the source with ast: the planes never import the CLI (imports run
downwards only), and no two modules import each other, directly or through others (function-level imports
included: a lazy import hides a circle, it does not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gpuclust"
BELOW_CLI = ("accept", "accounting", "audit", "config", "guard", "policy", "slurm")
# Layers, lowest first: a module imports its own layer or lower ones only. The shared modules at the top of
# the package sit below the Slurm edge; findings folds node sets (slurm.hostlist); the planes may read each
# other (audit reads acceptance results); only the CLI sits above them.
LAYERS = (
    ("gpuclust", "gpuclust.errors", "gpuclust.exitcodes", "gpuclust.output", "gpuclust.contract",
     "gpuclust.atomicfile", "gpuclust.mail", "gpuclust.prometheus"),
    ("gpuclust.slurm",),
    ("gpuclust.config", "gpuclust.findings"),
    ("gpuclust.accept", "gpuclust.accounting", "gpuclust.audit", "gpuclust.guard", "gpuclust.policy"),
    ("gpuclust.cli",),
)


def layer_of(module: str) -> int:
    best = (-1, -1)
    for rank, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                best = max(best, (len(prefix), rank))
    assert best[1] >= 0, f"{module} is in no layer: add it to LAYERS"
    return best[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(modules: dict[str, Path], name: str) -> str | None:
    """The gpuclust module that `name` denotes (a module, or the package that holds it)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """gpuclust modules `name` imports anywhere in its source (`from pkg import sub` is an edge to pkg.sub)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                       for alias in node.names]
        for target in targets:
            if not target.startswith("gpuclust"):
                continue
            resolved = _resolve(modules, target)
            if resolved is not None and resolved != name:
                out.add(resolved)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _package_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges where a package's __init__ is imported by one of its own submodules: that is a circle too when
    the __init__ imports the submodules (gpuclust.audit does)."""
    return {(a, b) for a, targets in graph.items() for b in targets if a.startswith(b + ".")}


def test_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "gpuclust.cli.main" in graph and "gpuclust.accept.report" in graph
    assert "gpuclust.audit.findings" in graph["gpuclust.audit"]  # relative imports resolved


def test_planes_never_import_the_cli() -> None:
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if b.startswith("gpuclust.cli") and a.split(".")[1] in BELOW_CLI)
    assert upward == []


def test_imports_run_downwards_only() -> None:
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))
    assert upward == []


def test_only_the_cli_imports_click() -> None:
    offenders = []
    for name, path in _modules().items():
        if name.startswith("gpuclust.cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "click" or n.startswith("click.") for n in names):
                offenders.append(name)
    assert offenders == []


def test_no_import_cycles() -> None:
    assert _cycles(import_graph()) == []


def test_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# Accounting's stages, in the order data flows through them; `pipeline` (the package's own top) runs them, and
# `jobview` (`gpuclust job`, the one-job view) sits on top beside it; `notify` (`report notify`) on top of the pipeline.
ACCOUNTING_STAGES = ("ingest", "history", "figures", "output", "pipeline", "jobview", "notify")
# Of the fenced fast path (ingest.fast), the two pieces the later stages share: the integer sorts and the
# process's memory settings. Any other reach into the fence from outside ingest is a new dependency on speed-only
# code, and fails here.
FAST_PATH_SHARED = ("gpuclust.accounting.ingest.fast.sorting", "gpuclust.accounting.ingest.fast.memory")


def accounting_stage(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["gpuclust", "accounting"] or len(parts) < 3:
        return None
    assert parts[2] in ACCOUNTING_STAGES, f"{module} is in no accounting stage: add it to one of {ACCOUNTING_STAGES}"
    return ACCOUNTING_STAGES.index(parts[2])


def test_accounting_modules_each_sit_in_a_stage() -> None:
    for name in import_graph():
        accounting_stage(name)


def test_accounting_data_flows_one_way_through_its_stages() -> None:
    graph = import_graph()
    back = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if (sa := accounting_stage(a)) is not None and (sb := accounting_stage(b)) is not None and sb > sa)
    assert back == []


def test_the_fast_path_is_fenced() -> None:
    graph = import_graph()
    fast = "gpuclust.accounting.ingest.fast"
    reaching_in = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                         if b.startswith(fast) and not a.startswith("gpuclust.accounting.ingest")
                         and b not in FAST_PATH_SHARED)
    reaching_out = sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith(fast) for b in targets
                          if b.startswith("gpuclust.accounting.") and not b.startswith("gpuclust.accounting.ingest"))
    assert (reaching_in, reaching_out) == ([], [])


PLANES = ("accept", "accounting", "audit", "guard", "policy")


def test_planes_meet_only_at_a_public_face() -> None:
    """One plane uses another only through that plane's package (its __init__ names what others may use): no
    reach into another plane's modules, so each plane's insides can change without the others."""
    graph = import_graph()

    def plane(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 and parts[1] in PLANES else None

    inside = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if plane(a) and plane(b) and plane(a) != plane(b) and b != f"gpuclust.{plane(b)}")
    assert inside == []


def test_no_two_planes_import_each_other() -> None:
    graph = import_graph()
    pairs = {(a.split(".")[1], b.split(".")[1]) for a, targets in graph.items() for b in targets
             if a.count(".") and b.count(".") and a.split(".")[1] in PLANES and b.split(".")[1] in PLANES}
    assert sorted((x, y) for x, y in pairs if x != y and (y, x) in pairs) == []
