"""Whether a masking round is made: the room it frees against the break of the server's prompt
cache it costs (pure).

A server with a prompt cache processes again everything from the first result a round masks:
the results masked, and every reply and protected result after them, which no round can make
smaller. So each round costs about what was added since the one before plus the newest part,
and many small rounds cost more than a few large ones. Below the hard line a round waits until
it is worth its break and frees a good share of the headroom a round is meant to make; the
results it would mask join a larger round later. Past the hard line room comes first (the
session would wind down), but only room that keeps the session going.
"""

from __future__ import annotations

from ouroboros.context.mask import worth_a_round
from ouroboros.policy.room import Rules, least_result, step_figures
from ouroboros.state.fold import RunState
from ouroboros.state.records import Mask

HEADROOM_SHARE = 0.5
"""Below the hard line a round frees at least this share of the headroom a round is meant to
make (from the soft line down to `context.mask_low_water`): one that frees less would be
followed by the next within half the distance."""


def headroom(rules: Rules) -> int:
    budget = rules.budget
    return budget.soft_line - int(rules.context.mask_low_water * budget.prompt_budget)


def one_step(state: RunState, rules: Rules) -> int:
    """What the next step takes at least: a reply of the size the line was placed for, and its
    result cut to the least the harness shows."""
    return step_figures(state, rules).lines.reply + least_result(state.ledger.calibration)


def made(state: RunState, rules: Rules, decision: Mask, waits_below: int) -> bool:
    """Whether the round `decision` is made. `waits_below`: the prompt size up to which it waits
    until worth its break (`mask.round_waits_below`: the hard line); 0, at once (a compaction
    failed). Past it, it is made when it takes the prompt back below (else the wind-down starts
    anyway) and it is worth its break or frees room for one more step."""
    before, after = decision.projected_before, decision.projected_after
    if before is None or after is None:
        return False
    if waits_below <= 0:
        return True
    freed = before - after
    worth = worth_a_round(freed, decision.processed_again or 0)
    if before < waits_below:
        return worth and freed >= HEADROOM_SHARE * headroom(rules)
    return after < waits_below and (worth or freed >= one_step(state, rules))
