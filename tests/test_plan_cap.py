"""The plan's size cap is in tokens, priced as the run prices content (as the tool cap prices
an output): a plan of digits, about a token a byte, is refused at a size a plan of prose of the
same bytes is kept at."""

from __future__ import annotations

from functools import partial

from ouroboros.context.plan import PlanCap, PlanItem, content_tokens, problem, render
from ouroboros.context.tokens import Calibration, output_kind, units

ITEMS = 9


def plan(text: str) -> list[PlanItem]:
    return [PlanItem(text=f"{text} {n}", status="todo") for n in range(ITEMS)]


def test_a_plan_of_digits_is_priced_by_its_tokens_not_its_bytes() -> None:
    prose = plan("read the parser in src/parse.py and fix the off-by-one in its tokens")
    digits = plan("1234 5678 9012 3456 7890 1234 5678 9012 3456 7890 1234 5678 9012 345")
    size = len(render(prose).encode())
    assert len(render(digits).encode()) == size  # the same bytes
    cap = PlanCap(round(1.2 * content_tokens(Calibration(), render(prose))))
    assert problem(prose, cap) is None
    said = problem(digits, cap)
    assert said is not None
    assert said.startswith("the plan takes about "), said
    assert f"at most {cap.tokens:,} here" in said


def test_the_price_is_the_runs_as_it_stands() -> None:
    """A run that has learnt its tokenizer packs digits tighter prices them lower."""
    items = plan("1234 5678 9012 3456 7890 1234 5678 9012")
    text = render(items)
    learnt = Calibration()
    kind = output_kind(text)
    for _ in range(20):
        learnt.update_step(units(text) // 3, {kind: units(text)})
    fresh, taught = content_tokens(Calibration(), text), content_tokens(learnt, text)
    assert taught < fresh
    cap = (taught + fresh) // 2
    assert problem(items, PlanCap(cap, partial(content_tokens, learnt))) is None
    assert problem(items, PlanCap(cap, partial(content_tokens, Calibration()))) is not None
