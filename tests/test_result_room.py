"""The room a step's results take (`policy/result_room.py`), in whole runs in process: one big
result never costs a wind-down, and the newest results are not masked while they fit."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from ouroboros.context.mask import MaskPolicy
from ouroboros.context.tokens import Budget
from ouroboros.ground import prompts
from ouroboros.ground.messages import UserMessage
from ouroboros.model.scripted import Reply, count_tokens, tool
from ouroboros.policy import policy, room
from ouroboros.policy.result_room import ceiling
from ouroboros.policy.room import Rules
from ouroboros.state.fold import RunState
from ouroboros.state.records import Mask, WindDown
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_context_run import fill_workspace
from tests.test_policy import rules_at, session_with_results

MASKED = " result masked:"


def saving(body: dict[str, Any]) -> bool:
    last = body["messages"][-1]
    return last["role"] == "user" and "Save what matters" in str(last["content"])


@pytest.mark.slow
def test_one_big_result_never_skips_the_wind_down(project: Project) -> None:
    # Every third step prints far more digits than the window holds, and nothing can be masked
    # (every result protected): however close to the line the reads took the prompt, the output
    # is cut to the room the wind-down leaves it (to its marker alone, if need be), so every
    # session ends after the replies it was promised. Cut to a fixed 1 KB instead, digits (a
    # token a byte) jump over the line and the budget at once.
    fill_workspace(project, files=12, words=500)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    steps = itertools.count()

    def agent(body: dict[str, Any]) -> Reply:
        if saving(body):
            return Reply(text="Saving.", tool_calls=[tool("file_write", path="N.md", content="x")])
        step = next(steps)
        if step % 3 < 2:
            return Reply(text="Reading.", tool_calls=[tool("file_read", path=next(paths))])
        command = f"yes 1,2,3,4,5,6,7,8,9,0 | head -{4000 + step}"
        return Reply(text="Printing.", tool_calls=[tool("shell_exec", command=command)])

    result = run_here(
        project,
        agent,
        window=8192,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": 3, "max_total_turns": 300},
        context={"protected_observations": 1000, "protected_max_fraction": 1.0},
        loops={"session_repeat_after": 0},  # it reads the same files in every session
    )
    assert result.returncode == 0, result.stderr
    ends = [e for e in project.events("session_end") if e["reason"] == "context_full"]
    assert [e["detail"] for e in ends] == ["wind-down replies used"] * 4
    assert not project.events("wind_down_missed")
    assert len(project.events("wind_down")) == 4
    # The digits were shown cut, and each cut marker names the file holding them whole.
    cut = [
        str(m["content"])
        for body in result.chat_requests()
        for m in body["messages"]
        if m["role"] == "tool" and "Full output: .outputs/" in str(m["content"])
    ]
    assert cut
    for text in cut:
        saved = text.split("Full output: ")[1].split(" (read it")[0]
        assert (project.workspace / saved).read_text().startswith("exit code 0\n1,2,3,4,5")


def test_the_newest_results_are_not_masked_while_they_fit(project: Project) -> None:
    # Long replies place the wind-down's line low, so every wind-down starts past it by the step
    # that crossed it: room the line kept for that step. The three newest results fit the
    # protected share of the budget by the server's own count, so none of them is masked, in a
    # wind-down or out of one (`context.protected_observations`).
    fill_workspace(project, files=12, words=400)
    paths = itertools.cycle(f"mod{i}.py" for i in range(12))
    thought = "Weighing what this module does against the notes, one function at a time. " * 20

    def agent(body: dict[str, Any]) -> Reply:
        return Reply(text=thought, tool_calls=[tool("file_read", path=next(paths))])

    result = run_here(
        project,
        agent,
        window=8192,
        llm={"max_output_tokens": 1024},
        supervisor={"max_restarts": 3, "max_total_turns": 200},
        loops={"session_repeat_after": 0},
    )
    assert result.returncode == 0, result.stderr
    window = int(0.25 * Budget.for_window(8192, 0.7, 0.9, 1024, 0.05).prompt_budget)
    winding = 0
    for body in result.chat_requests():
        newest = [m for m in body["messages"] if m["role"] == "tool"][-3:]
        assert count_tokens({"messages": newest}) <= window, "the three do not fit: no test"
        assert not any(MASKED in str(m["content"]) for m in newest), "a protected result masked"
        winding += any("Save what matters" in str(m["content"]) for m in body["messages"])
    assert winding, "no wind-down: the test shows nothing"
    ends = [e for e in project.events("session_end") if e["reason"] == "context_full"]
    assert [e["detail"] for e in ends] == ["wind-down replies used"] * 4


def winding(hard_at: float) -> tuple[RunState, Rules]:
    """A session of six results (the last unseen) that began its wind-down with its next prompt
    at `hard_at` of the budget."""
    state = session_with_results([300] * 6)
    rules = replace(rules_at(state, hard_at), masking=MaskPolicy(3, 10**6, 10))
    now = room.projected(state, rules)
    notice = UserMessage(content=prompts.wind_down(1000, 2, rules.instructions), origin="wind_down")
    record = WindDown(
        session=1,
        projected=now,
        hard_line=0,
        room=0,
        reply_allowance=0,
        turns_left=2,
        message=notice,
    )
    state.apply(record)
    return state, rules


def test_a_wind_down_past_its_line_but_below_the_ceiling_masks_nothing() -> None:
    state, rules = winding(hard_at=0.93)
    figures = room.step_figures(state, rules)
    assert figures.hard_line < room.projected(state, rules) < ceiling(state, rules, figures)
    assert policy.room_for_replies(state, rules, figures) == []


def test_a_wind_down_past_the_ceiling_masks_seen_results_oldest_first() -> None:
    state, rules = winding(hard_at=0.99)
    figures = room.step_figures(state, rules)
    (mask,) = policy.room_for_replies(state, rules, figures)
    assert isinstance(mask, Mask)
    assert mask.call_ids == ["c0"]
    # Far past it (the line moved under the session), the newest seen ones give way too.
    state, rules = winding(hard_at=2.0)
    (mask,) = policy.room_for_replies(state, rules, room.step_figures(state, rules))
    assert isinstance(mask, Mask)
    assert mask.call_ids[:4] == ["c0", "c1", "c2", "c3"]
    assert "c5" not in mask.call_ids, "never a result the model has not seen"
