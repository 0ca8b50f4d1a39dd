"""The agent's instructions (`SYSTEM_PROMPT.md`) are the agent's to edit, so the harness reads
them as it reads any file of the agent's: a link planted at their name is never followed, and
instructions grown past what a session holds are cut, never a run that cannot start. Whole runs
in process against a scripted model."""

from __future__ import annotations

from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import Ran, run_here


def system_texts(run: Ran) -> list[str]:
    return [body["messages"][0]["content"] for body in run.chat_requests()]


def test_a_link_planted_at_the_instructions_is_not_followed(project: Project) -> None:
    secret = project.root / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("SECRET-OUTSIDE-THE-WORKSPACE\n")
    prompt = project.workspace / "SYSTEM_PROMPT.md"
    prompt.write_text("# Purpose\nThe original instructions.\n")
    script = [
        Reply(tool_calls=[tool("shell_exec", command=f"ln -sf {secret} SYSTEM_PROMPT.md")]),
        Reply(tool_calls=[tool("list_dir", path=".")]),
    ]
    result = run_here(
        project,
        script,
        paths={"system_prompt": "workspace/SYSTEM_PROMPT.md"},
        session={"max_turns": 1},
        tools={"sandbox": "off"},  # the harness is the one reading: confinement aside
        supervisor={"max_total_turns": 2},
    )
    first, second = system_texts(result)
    assert result.returncode == 0, result.stderr
    assert prompt.is_symlink(), "the agent's link was not planted"
    assert "The original instructions." in first
    assert "SECRET" not in second
    assert "The original instructions." in second  # the last instructions, used again
    warnings = [e["message"] for e in project.events("warning")]
    assert any("link" in w and "used again" in w for w in warnings), warnings


def test_instructions_grown_past_a_session_are_cut_and_the_run_goes_on(project: Project) -> None:
    prompt = project.root / "SYSTEM_PROMPT.md"
    prompt.write_text("# Purpose\n" + "Remember this line, it matters a great deal.\n" * 5_000)
    script = [Reply(tool_calls=[tool("list_dir", path=".")])]
    result = run_here(project, script, window=8192, supervisor={"max_total_turns": 1})
    [system] = system_texts(result)
    assert result.returncode == 0, result.stderr
    assert "shorten it" in system
    assert len(system.encode()) < prompt.stat().st_size / 5
    assert any("more than a session can hold" in e["message"] for e in project.events("warning"))


def test_instructions_that_became_a_folder_keep_the_run_going(project: Project) -> None:
    prompt = project.workspace / "SYSTEM_PROMPT.md"
    prompt.write_text("# Purpose\nKeep going.\n")
    script = [
        Reply(
            tool_calls=[tool("shell_exec", command="rm SYSTEM_PROMPT.md; mkdir SYSTEM_PROMPT.md")]
        ),
        Reply(tool_calls=[tool("list_dir", path=".")]),
    ]
    result = run_here(
        project,
        script,
        paths={"system_prompt": "workspace/SYSTEM_PROMPT.md"},
        session={"max_turns": 1},
        supervisor={"max_total_turns": 2},
    )
    texts = system_texts(result)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert len(texts) == 2
    assert "Keep going." in texts[1]
