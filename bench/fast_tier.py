"""Which of the package's modules the fast tier (`pytest -m "not slow"`) leaves untouched.

Runs the fast tier in this process, one test after another, with a trace hook that notes the
module of every function that starts (threads included; the hook returns at once, so lines are
not traced). A module counts as touched when one of its functions ran, or, for a module that
defines none (settings, names, records), when it was imported. Slower than the tier itself
(the hook costs every call); the tier's own wall time is measured without it:
`pytest -m "not slow" -n 2`.

Run: .venv/bin/python bench/fast_tier.py [extra pytest arguments]
"""

from __future__ import annotations

import ast
import inspect
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ouroboros"
ran: set[str] = set()


def note(frame: FrameType, event: str, arg: Any) -> None:
    """A function (not a module's or class's body) started: note its module."""
    if frame.f_code.co_flags & inspect.CO_NEWLOCALS:
        ran.add(frame.f_globals.get("__name__", ""))


def modules() -> dict[str, bool]:
    """Every module of the package, and whether it defines a function."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
        found[name] = any(isinstance(node, kinds) for node in ast.walk(tree))
    return found


def main() -> int:
    threading.settrace(note)
    sys.settrace(note)
    try:
        code = pytest.main(
            ["-m", "not slow", "-n", "0", "-q", "-p", "no:cacheprovider", *sys.argv[1:]]
        )
    finally:
        sys.settrace(None)
        threading.settrace(None)
    imported = set(sys.modules)
    untouched = [
        name
        for name, has_functions in modules().items()
        if name not in (ran if has_functions else imported)
    ]
    print(
        f"pytest exit code {int(code)}; modules of the package the fast tier leaves untouched: "
        f"{len(untouched)} of {len(modules())}"
    )
    for name in untouched:
        print(f"  {name}{'' if name in imported else ' (not even imported)'}")
    return 1 if untouched else 0


if __name__ == "__main__":
    raise SystemExit(main())
