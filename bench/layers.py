"""The package's layers, measured: import circles and imports that run up a layer.

Each folder of the package is a layer (`LAYERS`, lowest first; the top-level modules are the
commands and the wiring, the highest). Every `ouroboros` import of every module is read from its
source (also those inside functions and under `TYPE_CHECKING`: a dependency is a dependency), and
two figures are printed: the import circles (groups of modules that import one another, found as
strongly connected components) and the imports from a module to one in a higher layer. Issue 30's
targets: 0 circles, at most 3 imports up.

Run: .venv/bin/python bench/layers.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ouroboros"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("ground",),
    ("context",),
    ("state",),
    ("policy",),
    ("model",),
    ("tools",),
    ("run",),
    ("sinks", "observe"),
    ("checkpoints", "deadends", "operator", "mcp", "server", "progress"),
    ("",),
)
"""Folders by layer, lowest first; folders in one layer may import one another, not in circles.
The features sit above sinks and observe: a feature's command (`rewind`) writes the logs, and
its view is built on observe's; sinks and observe show every feature through what it registered
(`observe/shown.py`, `ouroboros/features.py`), and import none. "" is the package's top level:
the commands, the run's start, the wiring, the demo and the features' register."""

MAX_CIRCLES = 0
MAX_UP = 3


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `path` imports (`from ouroboros.x import m` names module `m`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("ouroboros"):
                continue
            for alias in node.names:
                inner = f"{node.module}.{alias.name}"
                found.add(inner if inner in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("ouroboros."))
    return {name for name in found if name in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def layer(module: str) -> int:
    parts = module.split(".")
    folder = parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in _FOLDERS) else ""
    for rank, folders in enumerate(LAYERS):
        if folder in folders:
            return rank
    raise SystemExit(f"bench/layers.py: {module} is in no layer: add its folder to LAYERS")


_FOLDERS = {folder for folders in LAYERS for folder in folders if folder}


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for succ in edges[todo.pop()] - seen:
            seen.add(succ)
            todo.append(succ)
    return seen


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Groups of more than one module each of which reaches every other by imports."""
    reach = {module: reachable(edges, module) for module in edges}
    found: list[list[str]] = []
    for module in sorted(edges):
        group = sorted({module} | {other for other in reach[module] if module in reach[other]})
        if len(group) > 1 and group not in found:
            found.append(group)
    return found


def up_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, deps in edges.items() for b in deps if layer(b) > layer(a))


def main() -> int:
    edges = graph()
    found = circles(edges)
    up = up_imports(edges)
    for component in found:
        print("circle: " + " -> ".join(component))
    for a, b in up:
        print(f"up: {a} -> {b}")
    print(
        f"{len(edges)} modules: {len(found)} import circles (target {MAX_CIRCLES}), "
        f"{len(up)} imports up a layer (target ≤ {MAX_UP})"
    )
    return 0 if len(found) <= MAX_CIRCLES and len(up) <= MAX_UP else 1


if __name__ == "__main__":
    sys.exit(main())
