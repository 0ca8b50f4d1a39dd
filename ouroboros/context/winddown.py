"""Where the wind-down goes: far enough below the cut that the replies it asks for still fit.

The cut is the prompt budget: a session ends when its next prompt would not fit. A wind-down
asks for `wind_down_turns` more replies, and each of them comes back in the next prompt with the
results of its calls. Replies cannot be shortened; results can (the harness cuts them to the
room left, and shows them whole again in the next session). So the room kept below the cut is,
per promised reply, a reply as long as this run's replies are at their 90th percentile plus the
least a result is cut to, and the notice itself: the hard line sits that far below the cut, and
never later than the configured `hard_threshold`.

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
    wind_down_replies: Sequence[int],
    least_result: int,
    notice: int,
    turns: int,
    max_output: int,
) -> WindDownLine:
    """The line from the run's own replies (tokens as the server counted them), those given to
    earlier wind-downs counted apart too (saving notes makes long replies); `least_result` is
    what a result cut to the minimum costs, `notice` the wind-down message."""
    reply = reply_allowance(replies, max_output)
    if wind_down_replies:
        reply = max(reply, reply_allowance(wind_down_replies, max_output))
    room = turns * (reply + least_result) + notice if turns else 0
    return WindDownLine(max(0, min(budget.hard_line, budget.prompt_budget - room)), reply)
