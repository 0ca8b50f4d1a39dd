"""Where the wind-down line sits (`context.room.place`): room for the replies a wind-down needs,
as this run's replies come, not two of its longest."""

from __future__ import annotations

from collections.abc import Sequence

from ouroboros.context.tokens import Budget
from ouroboros.policy.room import place, replies_in_a_row

BUDGET = Budget.for_window(8192, 0.7, 0.9, 1024, 0.05)
LEAST, MESSAGE, TURNS, MAX_OUTPUT = 100, 80, 2, 1024


def room_kept(replies: list[int], wind_down_replies: Sequence[tuple[int, int]] = ()) -> int:
    line = place(BUDGET, replies, wind_down_replies, LEAST, MESSAGE, TURNS, MAX_OUTPUT)
    return BUDGET.prompt_budget - line.hard_line


def test_long_replies_between_short_ones_keep_room_for_one_long_and_one_short() -> None:
    # The crossing reply and the saving one together, as they come in a row: 1,050 tokens,
    # not two replies at the 90th percentile of one (2,000).
    replies = [1000, 50] * 20
    assert replies_in_a_row(replies, TURNS, MAX_OUTPUT) == 1050
    assert room_kept(replies) == 1050 + TURNS * LEAST + MESSAGE


def test_long_replies_in_a_row_keep_room_for_two_long_ones() -> None:
    replies = [1000] * 10 + [50] * 30
    assert room_kept(replies) == 2000 + TURNS * LEAST + MESSAGE


def test_the_replies_earlier_wind_downs_got_are_room_kept_for_the_promised_ones() -> None:
    # Saving notes makes long replies: a usual reply (the median) and a promised one as long as
    # those earlier wind-downs got, though every ordinary reply is short.
    replies = [50] * 40
    assert room_kept(replies, [(1, 900), (2, 60)]) == 50 + 900 + TURNS * LEAST + MESSAGE


def test_before_any_reply_an_eighth_of_the_output_reserve_is_kept_for_each() -> None:
    # Replies of up to 8,192 tokens, none measured yet: each taken as 1,024.
    line = place(BUDGET, [], [], LEAST, MESSAGE, TURNS, 8 * MAX_OUTPUT)
    assert BUDGET.prompt_budget - line.hard_line == TURNS * MAX_OUTPUT + TURNS * LEAST + MESSAGE
    # With the default 1,024: 128 each, and the line no later than the hard threshold.
    assert room_kept([]) == BUDGET.prompt_budget - BUDGET.hard_line
    assert room_kept([300]) == TURNS * 300 + TURNS * LEAST + MESSAGE


def test_the_line_is_never_later_than_the_hard_threshold() -> None:
    line = place(BUDGET, [10] * 40, [], LEAST, MESSAGE, TURNS, MAX_OUTPUT)
    assert line.hard_line == BUDGET.hard_line
