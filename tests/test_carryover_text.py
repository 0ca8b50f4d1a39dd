"""A text-only last reply carries the step it reasons about (`carryover.last_steps`): as a pure
function, and in a whole run whose sessions end on the agent thinking aloud."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from ouroboros.context.carryover import select_carryover
from ouroboros.ground.messages import AssistantMessage, Message, UserMessage
from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_carryover import OPENING, msg_id, read_step, tokens
from tests.test_context_run import fill_workspace
from tests.test_continuity import first_request


def thought(text: str) -> list[Message]:
    return [AssistantMessage(content=text), UserMessage(content="continue", origin="continue")]


HISTORY: list[Message] = [
    *OPENING,
    *read_step(1, 50),
    *read_step(2, 400, "the log"),
    *thought("first look " * 20),
    *thought("second look " * 20),
    *thought("so the cause is"),
]
LAST = ["assistant:so the cause", "user:continue"]
READ = ["assistant:c2", "tool:c2"]


def ids(carried: list[Message]) -> list[str]:
    return [msg_id(m) for m in carried]


def test_the_step_a_text_reply_reasons_about_is_carried_with_it() -> None:
    carried = select_carryover(HISTORY, 1, 10_000, 10_000, tokens)
    looks = ["assistant:first look f", "user:continue", "assistant:second look ", "user:continue"]
    assert ids(carried) == [*READ, *looks, *LAST]
    assert carried[1] == HISTORY[5], "its result whole where there is room"


def test_the_text_replies_between_give_way_first_then_the_result_is_cut() -> None:
    read_and_last = [*HISTORY[4:6], *HISTORY[-2:]]
    whole = sum(tokens(m) for m in read_and_last)
    second_look = sum(tokens(m) for m in HISTORY[-4:-2])
    carried = select_carryover(HISTORY, 1, whole + second_look, 0, tokens)
    assert ids(carried) == [*READ, "assistant:second look ", "user:continue", *LAST]
    carried = select_carryover(HISTORY, 1, whole - 200, 0, tokens)
    assert ids(carried) == ["assistant:c2", "tool:c2:cut", *LAST]
    assert sum(tokens(m) for m in carried) <= whole - 200


def test_the_last_reply_alone_when_its_step_does_not_fit_even_masked() -> None:
    last = sum(tokens(m) for m in HISTORY[-2:])
    assert ids(select_carryover(HISTORY, 1, last + 5, 0, tokens)) == LAST
    # Room for earlier steps (placeholders) brings the read back before it, as an earlier step.
    carried = select_carryover(HISTORY, 5, last + 5, last + 200, tokens)
    assert ids(carried)[-2:] == LAST


@pytest.mark.slow
def test_a_session_that_ends_thinking_aloud_opens_the_next_with_what_it_thought_about(
    project: Project,
) -> None:
    # Told to wind down, the agent reads its notes, then thinks aloud about them: that text is
    # the session's last reply. The next session shows the notes it was thinking about, whole,
    # though they are more than the share of the room earlier steps get.
    fill_workspace(project, files=12, words=500)
    notes = "".join(f"note {i}: the parser breaks on nested brackets\n" for i in range(120))
    (project.workspace / "NOTES.md").write_text(notes)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))

    def agent(body: dict[str, Any]) -> Reply:
        last = str(body["messages"][-1]["content"])
        if "Save what matters" in last:
            return Reply(text="Reading my notes.", tool_calls=[tool("file_read", path="NOTES.md")])
        if "note 119: the parser" in last:
            return Reply(text="So the parser is where it breaks; next, its tests.")
        return Reply(text="Reading on.", tool_calls=[tool("file_read", path=next(paths))])

    result = run_here(
        project,
        agent,
        window=8192,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": 1, "max_total_turns": 100},
        loops={"session_repeat_after": 0},
    )
    assert result.returncode == 0, result.stderr
    sent = first_request(result.chat_requests(), 2)["messages"]
    roles = [(m["role"], str(m["content"])[:24]) for m in sent[2:]]
    assert roles[-4:] == [
        ("assistant", "Reading my notes."),
        ("tool", str(sent[-3]["content"])[:24]),
        ("assistant", "So the parser is where i"),
        ("user", roles[-1][1]),
    ]
    assert sent[-3]["content"] == notes.rstrip("\n"), "the notes, whole"
