"""`[dead_ends]`: how much of a new session's opening the calls that failed before may take
(`ouroboros/deadends/`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DeadEndSettings(BaseModel):
    """Failed calls remembered across restarts: listed in each new session's opening, and named
    in the result of a call that fails the same way again."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    share: float = Field(0.03, ge=0, le=0.2)
    """Of the prompt budget, what the opening's list may take (every request pays it again);
    0: no list (a repeat's result still says it failed before)."""
