"""Before any reply is measured, the hard line is placed for replies of a realistic size, not
whole `max_output_tokens` ones: the first call of a 4K run is not past it. Replies measured in
earlier sessions of the run stay what the line is placed for, across a restart and a resume."""

from __future__ import annotations

from typing import Any

from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import run_here

OLLAMA_DEFAULTS = {"max_output_tokens": 1024}
"""Ollama's default window is 4,096 tokens (`run_here`'s), and replies of 1,024 the default."""


def test_the_first_call_of_a_4k_run_is_not_past_the_hard_line(project: Project) -> None:
    (project.root / "SYSTEM_PROMPT.md").write_text("List the files of the workspace.\n")
    ran = run_here(
        project, [Reply(text="Done.")], supervisor={"max_total_turns": 1}, llm=OLLAMA_DEFAULTS
    )
    assert ran.returncode == 0, ran.stderr
    (first,) = project.usage()
    assert first["zone"] == "normal", first
    assert first["prompt_tokens"] < first["hard_line"] < first["prompt_budget"]


def long_replies(count: int) -> list[Reply]:
    """`count` replies of 700 tokens each, a shell call apiece."""
    call = tool("shell_exec", command="true")
    return [Reply(text="Thinking.", tool_calls=[call], completion_tokens=700)] * count


def room_kept(usage: dict[str, Any]) -> int:
    """Tokens a call's hard line kept below its prompt budget."""
    return int(usage["prompt_budget"]) - int(usage["hard_line"])


def test_replies_measured_before_a_restart_and_a_resume_keep_their_room(project: Project) -> None:
    """Replies of 700 tokens in session 1: session 2's first call, and a resumed run's (a new
    process folding the journal), keep room for two of them, as no fresh run's first call does."""
    (project.root / "SYSTEM_PROMPT.md").write_text("List the files of the workspace.\n")
    # One turn a session: no reply answers a wind-down (those keep room of their own).
    one_turn = {"max_turns": 1}
    ran = run_here(
        project,
        long_replies(2),
        supervisor={"max_total_turns": 2},
        session=one_turn,
        llm=OLLAMA_DEFAULTS,
    )
    assert ran.returncode == 0, ran.stderr
    usage = project.usage()
    assert room_kept(usage[0]) < 2 * 700
    restarted = next(u for u in usage if u["session"] == 2)
    assert room_kept(restarted) >= 2 * 700
    ran = run_here(
        project,
        long_replies(1),
        supervisor={"max_total_turns": 3},
        session=one_turn,
        llm=OLLAMA_DEFAULTS,
    )
    assert ran.returncode == 0, ran.stderr
    resumed = project.usage()[len(usage)]
    assert room_kept(resumed) >= 2 * 700
