"""A refused plan call's result is an error like any other: short however many items were bad,
and masked like any result (only a plan the tool saved stays whole)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from ouroboros.context.mask import MaskPolicy, choose_masks
from ouroboros.context.plan import stays_whole
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage
from ouroboros.tools import PROBLEMS_SAID, ToolCaps, ToolRunner
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in

BAD_ITEMS = 2000


def refused(tmp_path: Path) -> ToolMessage:
    """The result of a plan call with 2,000 items, each with two bad fields."""
    items = [{"text": 5, "status": "maybe"} for _ in range(BAD_ITEMS)]
    call = ToolCall(id="p", name="plan", arguments=json.dumps({"items": items}))
    workspace = Workspace(tmp_path, tmp_path / "SYSTEM_PROMPT.md")
    runner = ToolRunner(workspace, built_in(ShellExec(10), None, False), ToolCaps(30_000))
    return anyio.run(runner.run, call).message


def test_a_refused_plan_names_its_first_problems_and_counts_the_rest(tmp_path: Path) -> None:
    message = refused(tmp_path)
    assert message.error
    said = message.content
    assert said.startswith("error: bad arguments for plan: items.0.text:"), said
    assert said.count("; ") == PROBLEMS_SAID  # five problems, then the count of the rest
    assert said.endswith(f"; and {2 * BAD_ITEMS - PROBLEMS_SAID:,} more"), said
    assert len(said.encode()) < 600, len(said.encode())


def size(message: Message) -> int:
    return len(message.content)


def test_a_refused_plan_is_masked_like_any_result(tmp_path: Path) -> None:
    message = refused(tmp_path)
    assert not stays_whole(message)
    assert stays_whole(message.model_copy(update={"error": False}))
    call = AssistantMessage(tool_calls=(ToolCall(id="p", name="plan", arguments="{}"),))
    newer: list[Message] = []
    for n in range(3):
        newer += [
            AssistantMessage(tool_calls=(ToolCall(id=f"r{n}", name="file_read", arguments="{}"),)),
            ToolMessage(tool_call_id=f"r{n}", name="file_read", content="x" * 400),
        ]
    history = [call, message, *newer, AssistantMessage(content="next")]
    chosen = choose_masks(history, set(), MaskPolicy(3, 10**6, 10), size, 1)
    assert chosen == ["p"]
