"""`status`, `task list` and the report read one state of the checked items (the `Progress`
the journal folds to) and say each item's standing in the same words: passes, fails, or not
checked yet (no check has judged it: not failing)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ouroboros.ground.config_file import load_settings
from ouroboros.model.scripted import Reply, tool
from ouroboros.observe.report import write_report
from ouroboros.observe.status import read_status, render_status
from ouroboros.progress import tasks
from ouroboros.progress.cli import task_list
from ouroboros.progress.records import Task
from tests.conftest import Project
from tests.inprocess import run_here


def views(project: Project, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, str]:
    """What `status`, `task list` and the report say of the run."""
    settings = load_settings(project.root / "config.toml")
    out = io.StringIO()
    Console(file=out, width=200).print(render_status(read_status(project.state), lambda: settings))
    capsys.readouterr()
    task_list(project.state)
    listed = capsys.readouterr().out
    page = write_report(project.state, settings).read_text()
    return out.getvalue(), listed, page


def row(page: str, key: str) -> str:
    """The report's row of an item in its table of checked items."""
    table = page[page.index('<table id="progress">') :]
    start = table.index(f'<td class="text">{key}</td>')
    return table[start : table.index("</tr>", start)]


def test_three_views_say_the_same_of_tasks_not_checked_yet_then_checked(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    both = [Task(text="a", check="test -f a.txt"), Task(text="b", check="test -f b.txt")]
    tasks.post(project.state, both)
    ran = run_here(project, [Reply(text="thinking")], supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    status, listed, page = views(project, capsys)
    assert "0 of 2 checked items pass, 2 not checked yet" in status, status
    assert "failing" not in status, status
    assert "never" not in status, status
    assert "T1 [not checked yet] a" in listed, listed
    assert "T2 [not checked yet] b" in listed, listed
    assert "0 of 2 checked items pass, 2 not checked yet; 0 pending" in listed, listed
    assert "not checked yet" in row(page, "T1")
    assert "not checked yet" in row(page, "T2")

    # The same run on: a.txt made, the session ends and both are checked, unnamed by the agent.
    script = [Reply(tool_calls=[tool("shell_exec", command="touch a.txt")]), Reply(text="ok")]
    ran = run_here(project, script, session={"max_turns": 1}, supervisor={"max_total_turns": 3})
    assert ran.returncode == 0, ran.stderr
    status, listed, page = views(project, capsys)
    assert "1 of 2 checked items pass, 1 fail, checked" in status, status
    assert "failing: T2" in status, status
    assert "not checked yet" not in status, status
    assert "T1 [passes] a" in listed, listed
    assert "T2 [fails] b" in listed, listed
    assert "1 of 2 checked items pass, 1 fail; 0 pending" in listed, listed
    assert "passes" in row(page, "T1")
    assert "fails (exit 1)" in row(page, "T2")
    assert 'id="burn-up"' in page
