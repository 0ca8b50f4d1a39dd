"""The window a run works in and the limits it was started with: the values its records carry
(a call's own figures are `context.tokens.CallFigures`); which window figures a server states
can be believed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ouroboros.ground.config import Settings


WINDOW_TOKENS = range(256, 10_000_001)
"""The windows a server may state, in tokens: below, not even a short turn fits; above, no
model runs (the largest contexts offered are 10M)."""
WINDOW_RANGE = f"a whole number of {WINDOW_TOKENS[0]:,} to {WINDOW_TOKENS[-1]:,} tokens"


def window_tokens(value: object) -> int | None:
    """The window a server states (llama-server's `/props`, vLLM's `max_model_len`, Ollama's
    and LM Studio's context length, a refusal's figure), if `value` is one: an integer, not a
    bool, in `WINDOW_TOKENS`. Anything else is no window reported: believed, a string or a
    float crashed the budget, 0, 1 or `true` ended every session after a turn, and 10^12 never
    masked."""
    if isinstance(value, bool) or not isinstance(value, int) or value not in WINDOW_TOKENS:
        return None
    return value


class WindowFigures(BaseModel):
    """The window a run works in, as the server and the settings made it."""

    model_config = ConfigDict(frozen=True)
    server: str
    detail: str
    context_limit: int
    prompt_budget: int
    soft_line: int
    hard_line: int
    """The configured hard line; the line in force is placed below it from the run's replies."""
    frame_tokens: float


class RunLimits(BaseModel):
    """The settings `status` and `report` need, as this run was started with them."""

    model_config = ConfigDict(frozen=True)
    max_total_turns: int | None = None
    max_total_tokens: int | None = None
    max_wall_time_s: float | None = None
    max_restarts: int | None = None
    max_turns: int | None = None
    wind_down_turns: int

    @classmethod
    def of(cls, settings: Settings) -> RunLimits:
        s = settings
        return cls(
            max_total_turns=s.supervisor.max_total_turns,
            max_total_tokens=s.supervisor.max_total_tokens,
            max_wall_time_s=s.supervisor.max_wall_time_s,
            max_restarts=s.supervisor.max_restarts,
            max_turns=s.session.max_turns,
            wind_down_turns=s.session.wind_down_turns,
        )
