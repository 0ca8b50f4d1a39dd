"""The benches' floors (bench/floor.py): the fewest sessions a policy with the harness's
promises needs, counted by hand on small step lists."""

from __future__ import annotations

from typing import Any

import pytest

from ouroboros.context.mask import MaskPolicy
from tests.conftest import PROJECT_ROOT, load_module

WHOLE = MaskPolicy(protected_count=3, protected_tokens=10**6, min_tokens=0)


@pytest.fixture(scope="module")
def floor() -> Any:
    return load_module(PROJECT_ROOT / "bench" / "floor.py")


def text_steps(floor: Any, count: int) -> list[Any]:
    """Replies of 100 tokens, each adding 100 to every later prompt, no results."""
    return [floor.StepTokens(prompt=100, completion=100) for _ in range(count)]


def test_a_session_that_holds_every_step_needs_no_wind_down(floor: Any) -> None:
    steps, wind_down = text_steps(floor, 9), floor.WindDownTokens(turns=2, message=50)
    assert floor.sessions_keeping_recent(steps, 100, 1000, WHOLE) == 1
    assert floor.sessions_with_promises(steps, 100, 1000, WHOLE, wind_down) == 1


def test_every_session_but_the_last_ends_with_its_wind_down_and_opens_the_next(
    floor: Any,
) -> None:
    # Budget 1,000, 100 fixed: a session holds 9 such steps. With the wind-down's message (50)
    # and its two replies, the first session winds down before step 6 (steps 6 and 7 its
    # replies); step 7 opens the second, carried (not generated again), which winds down before
    # step 13; the third opens with step 14 and holds the rest.
    steps, wind_down = text_steps(floor, 18), floor.WindDownTokens(turns=2, message=50)
    assert floor.sessions_keeping_recent(steps, 100, 1000, WHOLE) == 2
    assert floor.one_session(steps, 0, False, 100, 1000, WHOLE, wind_down) == (7, True)
    assert floor.one_session(steps, 7, True, 100, 1000, WHOLE, wind_down) == (14, True)
    assert floor.one_session(steps, 14, True, 100, 1000, WHOLE, wind_down) == (18, False)
    assert floor.sessions_with_promises(steps, 100, 1000, WHOLE, wind_down) == 3


def test_the_wind_downs_replies_have_their_results_cut_to_the_least(
    floor: Any,
) -> None:
    # Each step's result is 400 whole, 300 cut to the least: the first reply's result is shown
    # cut in the wind-down (whole, as the newest), the second reply's not at all: 100 fixed,
    # the message, the first reply, its result cut, the second reply's completion.
    step = floor.StepTokens(prompt=10, completion=10, results=((400, 10),), least=(300,))
    session = floor.Session(100, WHOLE)
    wind_down = floor.WindDownTokens(turns=2, message=50)
    need = 100 + 50 + 10 + 300 + 10
    assert floor.wind_down_fits(session, [step, step], wind_down, need)
    assert not floor.wind_down_fits(session, [step, step], wind_down, need - 1)


def test_the_newest_results_stay_whole_within_the_protected_bound(floor: Any) -> None:
    bounded = MaskPolicy(protected_count=3, protected_tokens=150, min_tokens=0)
    session = floor.Session(0, bounded, [(100, 10), (100, 10)])
    assert session.unmasked_extra() == 90  # the newest always; the next would pass the bound
    # A newest result no bigger than its placeholder still counts against the bound.
    small_newest = floor.Session(0, MaskPolicy(3, 100, 0), [(100, 10), (20, 20)])
    assert small_newest.unmasked_extra() == 0
    none = floor.Session(0, MaskPolicy(0, 150, 0), [(100, 10)])
    assert none.unmasked_extra() == 0
