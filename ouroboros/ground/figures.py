"""The window a run works in and the limits it was started with: the values its records carry
(a call's own figures are `context.tokens.CallFigures`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from ouroboros.ground.config import Settings


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
