"""The agent's plan, as pure values: its items, the `plan` tool's arguments, the checks a new plan
must pass, and how it is shown (in a session's opening, to the agent after a save, in `status`).

The harness owns the plan: it is journalled with the result of the call that saved it
(`MessageRecord.plan`), folded (`state/plan.py`), and rendered whole at the start of every
session, so a restart never loses it. Its size is bounded by a small share of the prompt budget,
so the plan always fits beside the rest of a session's opening.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ouroboros.context.tokens import Calibration, output_kind, units
from ouroboros.ground.messages import Message, ToolMessage

PLAN_TOOL = "plan"
"""The tool's name; its results are never masked or cut."""
MAX_ITEMS = 20
TEXT_CHARS = 120
NOTE_CHARS = 160
CHECK_CHARS = 200
PLAN_SHARE = 0.05
"""Of the prompt budget, what the rendered plan may take at most, in tokens as the run prices
content (`PlanCap`)."""
MIN_PLAN_TOKENS = 170
MAX_PLAN_TOKENS = 1400
"""However large the window: a plan is a list of steps, not a document."""

Status = Literal["todo", "doing", "done"]


def stays_whole(message: Message) -> bool:
    """A result of a plan the tool saved: never masked, never cut (the plan stays whole in the
    view). A refused call's error is a result like any other: it can be masked and cut."""
    return isinstance(message, ToolMessage) and message.name == PLAN_TOOL and not message.error


class PlanItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)

    text: str
    status: Status
    note: str = ""
    check: str = ""
    """A shell command: the item is done only while it exits 0 (`ouroboros/progress/`)."""


class PlanArgs(BaseModel):
    """Save your whole plan, its steps todo, doing (one) or done: every session opens with it.
    A step's `check` (a command) must exit 0 for it to be done."""

    model_config = ConfigDict(extra="ignore", strict=True)

    # An item's schema written out (no `$ref`: small models and some servers' grammars read a
    # flat schema better); the tools' runner leaves out titles and defaults.
    items: list[PlanItem] = Field(json_schema_extra={"items": PlanItem.model_json_schema()})


def plan_tokens(prompt_budget: int) -> int:
    """The most the rendered plan may take: a small share of the prompt budget."""
    share = int(prompt_budget * PLAN_SHARE)
    return max(MIN_PLAN_TOKENS, min(MAX_PLAN_TOKENS, share))


def content_tokens(calibration: Calibration, text: str) -> int:
    """Tokens of `text` as the harness prices content (as the tool cap prices an output: at the
    ratio learnt for its kind), so a plan of digits, about a token a byte, is not let take three
    times its share."""
    return calibration.tokens(units(text), output_kind(text))


@dataclass(frozen=True)
class PlanCap:
    """The most tokens the rendered plan may take, and the price of a text in tokens (the run's
    estimate as it stands when the plan is saved)."""

    tokens: int = MAX_PLAN_TOKENS
    price: Callable[[str], int] = partial(content_tokens, Calibration())


def render(items: Sequence[PlanItem]) -> str:
    """The plan, one numbered line an item."""
    return "\n".join(
        f"{n}. [{item.status}] {item.text}"
        + (f" ({item.note})" if item.note else "")
        + (f" check: `{item.check}`" if item.check else "")
        for n, item in enumerate(items, 1)
    )


def counts(items: Sequence[PlanItem]) -> str:
    """`2 done, 1 doing, 3 todo`: the statuses there are, in that order."""
    said = [f"{sum(i.status == s for i in items)} {s}" for s in ("done", "doing", "todo")]
    return ", ".join(s for s in said if not s.startswith("0 ")) or "empty"


def problem(items: Sequence[PlanItem], cap: PlanCap) -> str | None:
    """What is wrong with a plan the agent sent, as one line saying what to do; None if fine."""
    if len(items) > MAX_ITEMS:
        return (
            f"the plan has {len(items)} items, at most {MAX_ITEMS}: merge steps, or drop done "
            "ones (their results are in your files)"
        )
    for n, item in enumerate(items, 1):
        for name, value, most in (
            ("text", item.text, TEXT_CHARS),
            ("note", item.note, NOTE_CHARS),
            ("check", item.check, CHECK_CHARS),
        ):
            if "\n" in value or "\r" in value:
                return f"item {n}'s {name} has a line break: one line each"
            if len(value) > most:
                return (
                    f"item {n}'s {name} is {len(value)} characters, at most {most}: say it "
                    "shorter and keep details in a workspace file"
                )
        if not item.text.strip():
            return f"item {n} has no text: say what the step is"
    doing = [str(n) for n, item in enumerate(items, 1) if item.status == "doing"]
    if len(doing) > 1:
        return (
            f"items {', '.join(doing)} are all doing: at most one step is doing at a time; mark "
            "the others todo"
        )
    cost = cap.price(render(items))
    if cost > cap.tokens:
        return (
            f"the plan takes about {cost:,} tokens, at most {cap.tokens:,} here: shorten items "
            "and notes, or drop done ones"
        )
    return None


def saved(items: Sequence[PlanItem]) -> str:
    """The result of a plan the harness kept."""
    if not items:
        return "plan cleared: no steps. Save a new one when you know the next steps."
    return (
        f"plan saved: {len(items)} items ({counts(items)}). It opens every new session; update it "
        "whenever a step starts or ends."
    )


def in_opening(items: Sequence[PlanItem]) -> str:
    """The plan as a session's first message shows it ("" when there is none)."""
    if not items:
        return ""
    return (
        "\n\nYour plan, as you last saved it with the plan tool (update it as you go):\n"
        + render(items)
    )
