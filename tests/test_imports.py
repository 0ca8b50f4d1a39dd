"""A command imports what it needs: `import ouroboros` loads no feature and no pydantic, and
`status` and `tail` of a run read its files without the records, the fold or pydantic (they
cost most of a command's time: `bench/watch.py` measures it against a bare interpreter's start).
Each in a fresh interpreter, so that nothing this test process imported hides an import."""

from __future__ import annotations

import json
import subprocess
import sys

from ouroboros.model.scripted import Reply, tool
from tests.conftest import PROJECT_ROOT, Project
from tests.inprocess import run_here

HEAVY = ("pydantic", "ouroboros.state.records", "ouroboros.state.fold", "ouroboros.ground.config")
FEATURES = ("checkpoints", "deadends", "mcp", "operator", "progress", "server")


def imported_by(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    code += "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, check=True
    )
    return set(json.loads(ran.stdout.splitlines()[-1]))


def test_import_ouroboros_loads_no_feature_and_no_pydantic() -> None:
    modules = imported_by("import ouroboros")
    assert not [m for m in modules if m.split(".")[0] == "pydantic"]
    assert not [m for m in modules if m.split(".")[1:2] and m.split(".")[1] in FEATURES]


def test_status_and_tail_read_a_run_without_its_records_or_pydantic(project: Project) -> None:
    replies = [Reply(text="Looking.", tool_calls=[tool("list_dir", path=".")])] * 3
    assert run_here(project, replies, supervisor={"max_total_turns": 3}).returncode == 0
    state = str(project.state)
    for command in (["tail", "-n", "50", "--state", state], ["status", "--state", state]):
        code = f"from ouroboros.cli import main\nassert main({command!r}) == 0"
        modules = imported_by(code)
        assert not [m for m in HEAVY if m in modules], command
        assert not [m for m in modules if m.endswith(".records")], command
    # `status` shows every feature's rows: their views are there, light.
    assert {f"ouroboros.{feature}.view" for feature in FEATURES} <= modules


def test_the_features_parts_come_in_one_order_whatever_was_imported_first() -> None:
    """A snapshot saves the parts by their order (its `shape`): a resume whose command imported
    another feature first must still read the one the run wrote."""
    orders = set()
    for first in FEATURES:
        code = (
            f"import ouroboros.{first}.records\n"
            "from ouroboros.state.fold import parts\n"
            "from ouroboros.state.snapshot import shape\n"
            "print(shape(parts()), [p.__name__ for p in parts()])"
        )
        ran = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=PROJECT_ROOT,
            check=True,
        )
        orders.add(ran.stdout.strip())
    assert len(orders) == 1, orders
