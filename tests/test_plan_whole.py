"""The plan stays whole in the view: its results are never masked (by a masking round or in the
carry-over) nor cut (after a refused prompt, or to fit the carry-over), and a compaction's
recap brings the plan along."""

from __future__ import annotations

import itertools
import json
from typing import Any

from ouroboros.context.carryover import select_carryover
from ouroboros.context.compact import RECAP_HEADER, RECAP_SYSTEM
from ouroboros.context.mask import MaskPolicy, choose_masks
from ouroboros.context.truncate import shown
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.scripted import Reply, tool
from ouroboros.policy import policy
from ouroboros.state.records import Cut, MessageRecord
from tests.conftest import Project
from tests.inprocess import Scripted, run_here
from tests.test_context_run import fill_workspace
from tests.test_plan import PLAN, SHOWN, saves
from tests.test_policy import rules_at, session_with_results


def result(content: str, name: str = "plan", call_id: str = "p") -> list[Message]:
    """A call and its result."""
    call = ToolCall(id=call_id, name=name, arguments=json.dumps({"items": PLAN}))
    done = ToolMessage(tool_call_id=call_id, name=name, content=content)
    return [AssistantMessage(tool_calls=(call,)), done]


def test_a_plan_result_is_never_chosen_for_masking_however_large() -> None:
    """The rule itself: a plan result worth masking by size (a long one, as an older version
    could have written) is passed over; the same result under another tool's name is not."""
    long = "plan saved:\n" + SHOWN * 40
    newer = result("a.py  10 bytes", "list_dir", "n")
    policy = MaskPolicy(protected_count=1, protected_tokens=10**6, min_tokens=0)

    def tokens(message: Message) -> int:
        return len(str(getattr(message, "content", "")))

    other = [*result(long, "file_read"), *newer]
    assert choose_masks(other, set(), policy, tokens, excess=1) == ["p"]
    assert choose_masks([*result(long), *newer], set(), policy, tokens, excess=1) == []


def test_plan_results_are_never_masked_in_a_run_that_masks_everything_else(
    project: Project,
) -> None:
    fill_workspace(project)
    reads = (
        Reply(tool_calls=[tool("file_read", path=f"mod{i % 12}.py")]) for i in itertools.count()
    )
    script = [saves(), *itertools.islice(reads, 3), saves(PLAN[:2]), *itertools.islice(reads, 30)]
    context = {"mask_min_tokens": 0, "protected_observations": 1}
    result = run_here(
        project, Scripted(script), context=context, supervisor={"max_total_turns": 30}
    )
    assert result.returncode == 0, result.stderr
    records = project.records("journal.jsonl")
    plan_ids = {
        r["message"]["tool_call_id"] for r in records if "plan" in r and r["kind"] == "message"
    }
    masked = {i for r in records if r["kind"] == "mask" for i in r["call_ids"]}
    assert len(plan_ids) == 2
    assert len(masked) > 5, "the run masked old results"
    assert not plan_ids & masked


def test_a_refused_prompt_never_cuts_a_plan_result() -> None:
    """After a refusal the results the model has not seen are cut to fit; a plan result among
    them (however long) is left whole, the other is cut."""
    state = session_with_results([300, 300])
    calls = (
        ToolCall(id="big", name="shell_exec", arguments=json.dumps({"command": "cat log"})),
        ToolCall(id="p", name="plan", arguments=json.dumps({"items": PLAN})),
    )
    words = " ".join(f"w{i}" for i in range(600))
    for message in (
        AssistantMessage(tool_calls=calls),
        ToolMessage(tool_call_id="big", name="shell_exec", content=words, exit_code=0),
        ToolMessage(tool_call_id="p", name="plan", content=words[: len(words) // 2]),
    ):
        state.apply(MessageRecord(session=1, message=message))
    decisions = policy.after_overflow(state, rules_at(state, hard_at=2.0))
    (cut,) = [d for d in decisions if isinstance(d, Cut)]
    assert list(cut.cuts) == ["big"]


def test_after_a_compaction_the_recap_shows_the_plan_whole(project: Project) -> None:
    """A compaction replaces the session's opening with the older part: the recap brings the
    plan along, so the view never lacks it."""
    fill_workspace(project, words=300)
    reads = itertools.cycle(f"mod{i}.py" for i in range(12))
    first = iter([saves()])

    def agent(body: dict[str, Any]) -> Reply:
        if body["messages"][0]["content"] == RECAP_SYSTEM:
            return Reply(text="## Overall goal\nRead every module.")
        return next(first, None) or Reply(tool_calls=[tool("file_read", path=next(reads))])

    limits = {"max_total_turns": 30, "max_restarts": 0}
    result = run_here(project, agent, context={"strategy": "compact"}, supervisor=limits)
    assert result.returncode == 0, result.stderr
    assert project.events("compaction")
    requests = result.chat_requests()
    recaps = [r for r in requests if r["messages"][1]["content"].startswith(RECAP_HEADER)]
    assert recaps, "requests after a compaction"
    assert all(SHOWN in r["messages"][1]["content"] for r in recaps)


def test_the_carry_over_never_masks_or_cuts_a_plan_result() -> None:
    """Earlier steps' results become placeholders to fit, and the last step's are cut to fit:
    a plan result among them stays whole (a long one, so that masking it would pay)."""
    long = "plan saved:\n" + SHOWN * 40
    big = " ".join(f"w{i}" for i in range(2000))
    history: list[Message] = [SystemMessage(content="Work."), UserMessage(content="Begin.")]
    early = "plan saved:\n" + SHOWN * 4
    history += [*result(early, "plan", "p1"), *result(big, "shell_exec", "s1")]
    last_calls = (
        ToolCall(id="p2", name="plan", arguments=json.dumps({"items": PLAN})),
        ToolCall(id="s2", name="shell_exec", arguments=json.dumps({"command": "cat log"})),
    )
    history += [
        AssistantMessage(tool_calls=last_calls),
        ToolMessage(tool_call_id="p2", name="plan", content=long),
        ToolMessage(tool_call_id="s2", name="shell_exec", content=big),
    ]

    def tokens(message: Message) -> int:
        """Priced as shown (cut to its room), as the supervisor prices carry-over."""
        shown_as = shown(message) if isinstance(message, ToolMessage) else message
        return len(str(getattr(shown_as, "content", ""))) // 4 + 4

    # Room for both steps with the earlier one's shell result a placeholder.
    carried = select_carryover(history, 5, 4500, 4500, tokens, min_mask_tokens=0)
    both = {m.tool_call_id: m for m in carried if isinstance(m, ToolMessage)}
    assert set(both) == {"p1", "s1", "p2", "s2"}
    assert both["s1"].masked, "an earlier result gave way"
    # Room for less than the last step: its shell result is cut.
    carried = select_carryover(history, 5, 1500, 1500, tokens, min_mask_tokens=0)
    last = {m.tool_call_id: m for m in carried if isinstance(m, ToolMessage)}
    assert set(last) == {"p2", "s2"}
    assert last["s2"].room_bytes is not None, "the last step's other result was cut"
    for kept, text in ((both["p1"], early), (both["p2"], long), (last["p2"], long)):
        assert not kept.masked
        assert kept.room_bytes is None
        assert kept.content == text


def test_a_last_step_whose_plan_result_alone_overfills_the_room_is_not_carried() -> None:
    """A plan result is never made a placeholder, so a step it alone makes too big for the
    room is left out (the restart marker still names its calls), never carried over the room."""
    history: list[Message] = [SystemMessage(content="Work."), UserMessage(content="Begin.")]
    history += result("plan saved:\n" + SHOWN * 40, "plan", "p")

    def tokens(message: Message) -> int:
        return len(str(getattr(message, "content", ""))) // 4 + 4

    assert select_carryover(history, 5, 500, 500, tokens, min_mask_tokens=0) == []
