"""What the next prompt costs and the room left in the window: the figures the context policy
decides on, computed from the run's state (pure).

`Rules` are what is fixed for the run; `StepFigures` what one step computes once (the lines in
force); a call's `CallFigures` say where it stood against them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ouroboros.context.mask import MaskPolicy
from ouroboros.context.tokens import SCHEMA_KIND, Budget, Calibration, RawTally, Zone
from ouroboros.ground import prompts
from ouroboros.ground.config import ContextSettings, LoopSettings
from ouroboros.ground.messages import UserMessage
from ouroboros.state.fold import RECENT, RunState

BYTES_PER_RAW_TOKEN = 4
MIN_OUTPUT_BYTES = 1024
"""Even with little room left the agent sees the start and end of what it ran (this much of
the densest content seen), where the wind-down's room allows (`result_room`)."""


def longest_wind_down(instructions: str) -> UserMessage:
    """A wind-down message as long as one gets: the room kept for it."""
    return UserMessage(content=prompts.wind_down(99_999, 9, instructions))


# --- where the wind-down goes ---------------------------------------------------------------
#
# Where the wind-down goes: far enough below the prompt budget that the replies it asks for still
# fit.
#
# A session ends when its next prompt would not fit the prompt budget. A wind-down asks for
# `wind_down_turns` more replies; each but the last comes back in a prompt of this session with
# the results of its calls, and the step that crossed the line may have gone past it by one
# reply. Replies cannot be shortened; results can (the harness cuts them to the room left, and
# shows them whole again in the next session). So the room kept below the budget is that many
# replies in a row as this run's come (`replies_in_a_row`, at the 90th percentile of their sums),
# each with the least a result is cut to, and the wind-down message itself: the hard line sits
# that far below the budget, and never later than the configured `hard_threshold`.
#
# Results of ordinary steps are cut to the room below the hard line (after what masking can free),
# so the wind-down's room stays free: near the line a step's results are cut to most of what is
# left, so the next step crosses it and the agent is told to wind down.

REPLY_PERCENTILE = 0.9
REPLY_PRIOR_SHARE = 8
"""Before any reply is measured (the run's earlier sessions count: the fold keeps them), one is
taken as an eighth of `max_output_tokens`: 128 tokens by default. Whole `max_output_tokens`
replies put the first call of a 4K window (Ollama's default) past the hard line, and so did a
quarter (the opening with the tool schemas is 1,700 tokens of a 2,868-token budget; each promised
reply keeps room for a cut result too). Agents' replies are mostly a line of thought and a call
(the replay bench's trajectories: a median of about 100 tokens; a 90th percentile of 900 to 2,000
where whole files are written); the first replies measured take the prior's place at once, and a
run's first steps have little to save in a wind-down. A larger `max_output_tokens` says the model
is expected to write more, so the prior grows with it."""


def percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def reply_prior(max_output: int) -> int:
    """Tokens a reply is taken to be before any is measured (`REPLY_PRIOR_SHARE`)."""
    return max(1, max_output // REPLY_PRIOR_SHARE)


def reply_allowance(replies: Sequence[int], max_output: int) -> int:
    """Tokens one reply is expected to take at most: the 90th percentile of the recent ones
    (`reply_prior` before there is any)."""
    if not replies:
        return reply_prior(max_output)
    return min(percentile(replies[-RECENT:], REPLY_PERCENTILE), max_output)


@dataclass(frozen=True)
class WindDownLine:
    hard_line: int
    """Ordinary steps' results are cut to stay below it; once the prompt (after masking) reaches
    it the agent is told to wind down; what is above it is the room the wind-down needs."""
    reply: int
    """The reply allowance the room was sized for."""
    promised_reply: int = 0
    """Tokens each promised reply that comes back in a prompt of the session takes, with the
    least its result is cut to: the room a wind-down keeps for each (`result_room.ceiling`)."""


def replies_in_a_row(replies: Sequence[int], count: int, max_output: int) -> int:
    """Tokens `count` replies in a row take at most, as this run's come: the 90th percentile of
    the sums of every `count` consecutive recent replies. Long replies seldom all come in a row,
    so this is less than `count` times the percentile of one; where they do (the agent thinks at
    length for a while) the sums say so. Before there are `count`, each the allowance of one."""
    recent = list(replies)[-RECENT:]
    if len(recent) < count:
        return count * reply_allowance(recent, max_output)
    sums = [sum(recent[i : i + count]) for i in range(len(recent) - count + 1)]
    return min(percentile(sums, REPLY_PERCENTILE), count * max_output)


def place(
    budget: Budget,
    replies: Sequence[int],
    wind_down_replies: Sequence[tuple[int, int]],
    least_result: int,
    message_tokens: int,
    turns: int,
    max_output: int,
) -> WindDownLine:
    """The line from the run's own replies (the tokens each takes in the prompts after it,
    `RunState.recent_replies`).

    Room is kept for the step that crosses the line and for each promised reply but the last,
    whose results only the next session sees: that many replies in a row as this run's come
    (`replies_in_a_row`), and at least a usual reply (the median) with the promised ones as
    large as the replies earlier wind-downs got (`wind_down_replies`: which one after the
    wind-down message, and its tokens; saving notes makes long replies), or the usual ones
    before there were any. Each with a result cut to the least the harness shows
    (`least_result`), and the wind-down message (`message_tokens`)."""
    if not turns:
        return WindDownLine(budget.hard_line, 0)
    usual = reply_allowance(replies, max_output)
    answering = [tokens for index, tokens in wind_down_replies if index < turns]
    winding = reply_allowance(answering, max_output) if answering else usual
    typical = percentile(replies[-RECENT:], 0.5) if replies else reply_prior(max_output)
    together = max(replies_in_a_row(replies, turns, max_output), typical + (turns - 1) * winding)
    room = together + turns * least_result + message_tokens
    line = max(0, min(budget.hard_line, budget.prompt_budget - room))
    return WindDownLine(line, max(usual, winding), winding + least_result)


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
    loops: LoopSettings = field(default_factory=LoopSettings)
    first_schema_raw: int | None = None
    """The same in the run's first session, which is offered fewer tools (None: as later)."""
    instructions: str = "../SYSTEM_PROMPT.md"
    """The instructions file as the workspace's tools reach it (a path relative to the
    workspace): the wind-down names it for what every later session should know."""
    loop_nudge: bool = True
    """A session's first loop is named to the agent; False (the files protocol): it restarts
    the session at once."""

    @cached_property
    def longest_wind_down(self) -> UserMessage:
        """Made once a run: it is priced at every step."""
        return longest_wind_down(self.instructions)

    def schema_raw_in(self, session: int) -> int:
        if session <= 1 and self.first_schema_raw is not None:
            return self.first_schema_raw
        return self.schema_raw


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
    schemas = rules.schema_raw_in(state.session)
    return {**(state.view.raw_kinds if view is None else view), SCHEMA_KIND: schemas}


def projected(state: RunState, rules: Rules, view: RawTally | None = None) -> int:
    return state.ledger.project(raw_prompt(state, rules, view))


def least_result(calibration: Calibration) -> int:
    """Tokens a result is shown at least, where the wind-down's room allows: `MIN_OUTPUT_BYTES`
    of the densest content this run has seen."""
    raw = MIN_OUTPUT_BYTES // BYTES_PER_RAW_TOKEN
    return round(raw * calibration.densest() + calibration.frame)


def step_figures(state: RunState, rules: Rules, compaction_requested: bool = False) -> StepFigures:
    """The hard line in force, from this run's own reply sizes (`context.room`)."""
    calibration = state.ledger.calibration
    lines = place(
        rules.budget,
        list(state.recent_replies),
        state.wind_down_reply_tokens,
        least_result(calibration),
        calibration.message_tokens(rules.longest_wind_down),
        rules.wind_down_turns,
        rules.max_output_tokens,
    )
    return StepFigures(lines, compaction_requested)


def zone(state: RunState, rules: Rules, used: int, truncated: bool, hard_line: int) -> Zone:
    """Where a call's tokens fall against the lines in force. After a suspected truncation the
    window is taken as full; a wind-down is `hard` even when masking for the promised replies
    took the prompt back below the line."""
    budget = rules.budget
    if truncated:
        return "over" if used > budget.prompt_budget else "hard"
    found = budget.zone(used, hard_line)
    winding = state.wind_down_replies is not None
    return "hard" if winding and found in ("normal", "soft") else found
