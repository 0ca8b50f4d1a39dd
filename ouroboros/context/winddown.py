"""Where the wind-down goes: far enough below the cut that the replies it asks for still fit.

The cut is the prompt budget: a session ends when its next prompt would not fit. A wind-down
asks for `wind_down_turns` more replies; each but the last comes back in a prompt of this session
with the results of its calls, and the step that crossed the line may have gone past it by one
reply. Replies cannot be shortened; results can (the harness cuts them to the room left, and
shows them whole again in the next session). So the room kept below the cut is that many replies
as long as this run's replies are at their 90th percentile, each with the least a result is cut
to, and the notice itself: the hard line sits that far below the cut, and never later than the
configured `hard_threshold`.

Results of ordinary steps are cut to the room below the hard line (after what masking can free),
so the wind-down's room stays free: near the line a step's results are cut to most of what is
left, so the next step crosses it and the agent is told to wind down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ouroboros.tokens import Budget

REPLY_PERCENTILE = 0.9
RECENT = 200
"""Replies and results looked at: the newest, so the lines follow what the agent does now."""


def percentile(values: Sequence[int], share: float) -> int:
    """Nearest-rank percentile (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def reply_allowance(replies: Sequence[int], max_output: int) -> int:
    """Tokens one reply is expected to take at most: the 90th percentile of the recent ones
    (the whole output reserve before there is any)."""
    if not replies:
        return max_output
    return min(percentile(replies[-RECENT:], REPLY_PERCENTILE), max_output)


@dataclass(frozen=True)
class WindDownLine:
    hard_line: int
    """Ordinary steps' results are cut to stay below it; once the prompt (after masking) reaches
    it the agent is told to wind down; what is above it is the room the wind-down needs."""
    reply: int
    """The reply allowance the room was sized for."""


def place(
    budget: Budget,
    replies: Sequence[int],
    wind_down_replies: Sequence[tuple[int, int]],
    least_result: int,
    notice: int,
    turns: int,
    max_output: int,
) -> WindDownLine:
    """The line from the run's own replies (completion tokens as the server counted them).

    Room is kept for the step that crosses the line (a reply of the usual size, `replies`), and
    for each promised reply but the last, whose results only the next session sees: sized from
    the replies earlier wind-downs got (`wind_down_replies`: which one after the notice, and its
    tokens; saving notes makes long replies), or the usual ones before there were any. Each with
    a result cut to the least the harness shows (`least_result`), and the notice."""
    if not turns:
        return WindDownLine(budget.hard_line, 0)
    usual = reply_allowance(replies, max_output)
    answering = [tokens for index, tokens in wind_down_replies if index < turns]
    winding = reply_allowance(answering, max_output) if answering else usual
    room = usual + least_result + (turns - 1) * (winding + least_result) + notice
    line = max(0, min(budget.hard_line, budget.prompt_budget - room))
    return WindDownLine(line, max(usual, winding))
