"""What the next prompt costs and the room left in the window: the figures the context policy
decides on, computed from the run's state (pure).

`Rules` are what is fixed for the run; `StepFigures` what one step computes once (the lines in
force); a call's `CallFigures` say where it stood against them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ouroboros import prompts
from ouroboros.call_figures import CallFigures, RawTally, Zone
from ouroboros.config import ContextSettings
from ouroboros.context.mask import MaskPolicy
from ouroboros.context.winddown import WindDownLine, place
from ouroboros.ledger import Counting
from ouroboros.llm import Completion
from ouroboros.messages import UserMessage
from ouroboros.state import RunState
from ouroboros.tokens import SCHEMA_KIND, Budget, output_kind, raw_estimate, units

BYTES_PER_RAW_TOKEN = 4
ROOM_SHARE = 0.8
"""Of the room left in the window, what this reply's tool results may fill."""
MIN_OUTPUT_BYTES = 1024
"""Even with no room left the agent sees the start and end of what it ran."""

Fits = Callable[[str], int]
"""Bytes of a result's text that fit the room its call has."""


@dataclass(frozen=True)
class Rules:
    """What the policy reads that is fixed for the run."""

    budget: Budget
    masking: MaskPolicy
    context: ContextSettings
    wind_down_turns: int
    max_output_tokens: int
    schema_raw: int
    """Raw tokens of the tool schemas every request carries (0 when the server drops them)."""


@dataclass(frozen=True)
class StepFigures:
    """A step's figures, computed once: the lines in force and whether the session winds down."""

    lines: WindDownLine
    compaction_requested: bool = False

    @property
    def hard_line(self) -> int:
        return self.lines.hard_line


def raw_prompt(state: RunState, rules: Rules, view: RawTally | None = None) -> RawTally:
    """Raw tokens of the next request (this view, else the current one), per kind."""
    return {**(state.view.raw_kinds if view is None else view), SCHEMA_KIND: rules.schema_raw}


def projected(state: RunState, rules: Rules, view: RawTally | None = None) -> int:
    return state.ledger.project(raw_prompt(state, rules, view))


def step_figures(state: RunState, rules: Rules, compaction_requested: bool = False) -> StepFigures:
    """The hard line in force, from this run's own reply sizes (`context.winddown`)."""
    calibration = state.ledger.calibration
    least = MIN_OUTPUT_BYTES // BYTES_PER_RAW_TOKEN * calibration.densest() + calibration.frame
    lines = place(
        rules.budget,
        list(state.recent_replies),
        state.wind_down_reply_tokens,
        round(least),
        calibration.message_tokens(UserMessage(content=prompts.wind_down(99_999, 9))),
        rules.wind_down_turns,
        rules.max_output_tokens,
    )
    return StepFigures(lines, compaction_requested)


# --- room for results ------------------------------------------------------------------------


def result_room(state: RunState, rules: Rules, step: StepFigures, calls: int) -> int:
    """Tokens each of this reply's results may take: the room left, after what masking could
    free, below the hard line (so the wind-down's room stays free), or below the cut once the
    wind-down began; shared by the reply's calls. A result cut for room is saved whole and shown
    whole again in a session that has room."""
    winding = state.wind_down_replies is not None
    line = rules.budget.prompt_budget if winding else step.hard_line
    calibration = state.ledger.calibration
    floor = projected(state, rules) - state.view.reclaimable(rules.masking, calibration, calls)
    return int((line - floor) / max(calls, 1) * ROOM_SHARE)


def fitting_bytes(state: RunState, room: int, text: str) -> int:
    """Bytes of `text` whose price fits `room` tokens, at the text's own density."""
    calibration = state.ledger.calibration
    price = calibration.tokens(units(text), output_kind(text)) + round(calibration.frame)
    size = len(text.encode())
    fitting = size if price <= room else int(size * max(room, 0) / max(price, 1))
    return max(MIN_OUTPUT_BYTES, fitting)


def zone(state: RunState, rules: Rules, used: int, truncated: bool) -> Zone:
    """Where a call's tokens fall against the lines in force. After a suspected truncation the
    window is taken as full; a wind-down is `hard` even when masking for the promised replies
    took the prompt back below the line."""
    budget = rules.budget
    if truncated:
        return "over" if used > budget.prompt_budget else "hard"
    found = budget.zone(used, step_figures(state, rules).hard_line)
    winding = state.wind_down_replies is not None
    return "hard" if winding and found in ("normal", "soft") else found


def call_figures(
    state: RunState,
    rules: Rules,
    counting: Counting,
    completion: Completion,
    raw_prompt: RawTally,
    turn: int,
    purpose: str | None = None,
) -> CallFigures:
    """A call's figures for its record (and `token_usage.jsonl`), with the hard line in force."""
    ledger, usage = state.ledger, completion.usage
    reported = (usage.prompt_tokens, usage.completion_tokens, usage.source) if usage else None
    m = ledger.figures(raw_prompt, raw_estimate(completion.message), reported, counting)
    used = m.prompt_tokens + m.completion_tokens
    return CallFigures(
        **m.model_dump(),
        turn=turn,
        estimated_prompt_tokens=ledger.calibration.tally_tokens(raw_prompt),
        context_limit=rules.budget.limit,
        zone=zone(state, rules, used, m.silent_truncation),
        finish_reason=completion.finish_reason,
        purpose=purpose,
        hard_line=step_figures(state, rules).hard_line,
        **asdict(completion.prefill),
    )
