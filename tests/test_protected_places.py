"""A saved plan's result is never masked anyway: it takes none of the places of the newest
results `context.protected_observations` keeps whole."""

from __future__ import annotations

import pytest

from ouroboros.context.mask import MaskPolicy, protected_ids
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage


def step(n: int, name: str = "file_read", error: bool = False) -> list[Message]:
    call = ToolCall(id=f"c{n}", name=name, arguments="{}")
    result = ToolMessage(tool_call_id=f"c{n}", name=name, content="x" * 400, error=error)
    return [AssistantMessage(tool_calls=(call,)), result]


@pytest.mark.parametrize("seen", [True, False])
def test_the_three_newest_results_are_protected_after_a_plan_save(seen: bool) -> None:
    history = [*step(1), *step(2), *step(3), *step(4), *step(5, "plan")]
    if seen:
        history.append(AssistantMessage(content="next"))
    protected = protected_ids(history, MaskPolicy(3, 10**6, 10), lambda m: 100)
    assert protected == {"c2", "c3", "c4"}


def test_a_refused_plan_takes_a_place_like_any_result() -> None:
    history = [*step(1), *step(2), *step(3), *step(4, "plan", error=True)]
    protected = protected_ids(history, MaskPolicy(3, 10**6, 10), lambda m: 100)
    assert protected == {"c2", "c3", "c4"}
