"""Which token figures a server sends can be believed.

A server's usage is JSON: it may hold any value. A figure that is no whole, non-negative number
(a string, a float, NaN, a bool, null where a number belongs) is no count; a prompt or a reply
larger than the whole window cannot have happened. Such figures are ignored, the run warns once
per kind, and the calibrated estimate stands in: believed, they would move the window's lines
(a restart every few turns) and flag a silent truncation that did not happen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ouroboros.tokens import PLAUSIBLE


def count(value: object) -> int | None:
    """A token count, if `value` is one: a whole number, not negative, not a bool."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def duration_ms(value: object) -> float | None:
    """A finite, non-negative number of milliseconds, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def shown(value: object) -> str:
    """A figure as a warning quotes it: short, whatever it is."""
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


@dataclass(frozen=True)
class Rejected:
    """Usage a server sent that the run did not believe."""

    kind: str
    """`not_a_count` or `above_window`: the run warns once per kind."""
    detail: str


def above_window(prompt_tokens: int, completion_tokens: int, limit: int) -> Rejected | None:
    """Figures no prompt in a `limit`-token window can have, or None."""
    if prompt_tokens > limit or completion_tokens > limit:
        return Rejected(
            "above_window",
            f"prompt_tokens {prompt_tokens:,}, completion_tokens {completion_tokens:,} "
            f"in a window of {limit:,}",
        )
    return None


def refused_count(n_prompt_tokens: int, projected: int) -> Rejected | None:
    """A refused prompt's count far from what was projected for it is not of this prompt:
    learnt, it would price every later prompt by it."""
    low, high = PLAUSIBLE
    if low * projected <= n_prompt_tokens <= high * projected:
        return None
    return Rejected(
        "refused_count",
        f"a refused prompt counted {n_prompt_tokens:,} tokens, ~{projected:,} projected",
    )


def warning(rejected: Rejected) -> str:
    return (
        f"the server's token usage cannot be true ({rejected.detail}): ignored, the estimate "
        "is used instead (warned once per run)"
    )
