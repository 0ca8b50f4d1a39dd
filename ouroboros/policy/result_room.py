"""The room a step's tool results may take, so that no result takes the room the wind-down needs.

A result is cut to the room below the line in force, after what masking can free (so the
wind-down's room stays free), and shown at least `MIN_OUTPUT_BYTES` of its start and end; but
never past the **ceiling**: the prompt budget less what the wind-down still needs once this
step's results are in (its message, unless it was sent, and each promised reply that comes back
in a prompt of this session, with its least result). Where even that has no room, the result is
its cut marker alone, which says where its whole text was saved. So one big result can take the
prompt past the line (the wind-down then starts), never past what the wind-down needs: only a
reply can.
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.context.truncate import bytes_within, output_price
from ouroboros.policy.room import (
    MIN_OUTPUT_BYTES,
    Rules,
    StepFigures,
    projected,
)
from ouroboros.state.fold import RunState

ROOM_SHARE = 0.8
"""Of the room left below the line, what this reply's tool results may fill."""


@dataclass(frozen=True)
class ResultRoom:
    """Tokens each of a reply's results may take."""

    share: int
    """The room below the line in force (or the budget, in a wind-down), after masking; a result
    is shown at least `MIN_OUTPUT_BYTES` of it..."""
    most: int
    """...but never more than the room below the ceiling, after masking."""


def ceiling(state: RunState, rules: Rules, step: StepFigures) -> int:
    """The largest the next prompt may be with the wind-down's room kept: the prompt budget less
    the wind-down message (unless it is in the view) and each promised reply still to come back
    in a prompt of this session (all but the last), with its least result."""
    turns, got = rules.wind_down_turns, state.wind_down_replies
    if not turns:
        return rules.budget.prompt_budget
    later = max(turns - 1 - (got or 0), 0)
    message = (
        0 if got is not None else state.ledger.calibration.message_tokens(rules.longest_wind_down)
    )
    return rules.budget.prompt_budget - message - later * step.lines.promised_reply


def result_room(state: RunState, rules: Rules, step: StepFigures, calls: int) -> ResultRoom:
    """The room each of this reply's `calls` results may take, after what masking could free
    (everything but the protected results, these results among them). A result cut for room is
    saved whole and shown whole again in a session that has room."""
    winding = state.wind_down_replies is not None
    line = rules.budget.prompt_budget if winding else step.hard_line
    calibration = state.ledger.calibration
    floor = projected(state, rules) - state.view.reclaimable(rules.masking, calibration, calls)
    count = max(calls, 1)
    share = int((line - floor) / count * ROOM_SHARE)
    return ResultRoom(share, (ceiling(state, rules, step) - floor) // count)


def fitting_bytes(state: RunState, room: ResultRoom, text: str) -> int:
    """Bytes of `text` shown: what fits the room's share at the text's own density, at least
    `MIN_OUTPUT_BYTES`; at most what fits below the ceiling, priced as cut (head and tail), and
    at least the cut marker."""
    price = output_price(state.ledger.calibration, text)
    size, whole = len(text.encode()), price(text)
    share = size if whole <= room.share else int(size * max(room.share, 0) / max(whole, 1))
    return min(max(share, MIN_OUTPUT_BYTES), size, bytes_within(text, room.most, price))
