"""What a model call measured and the figures a run works with: the values records carry.

A call's tokens as the server counted them and as the harness estimated them (`Measurement`),
where it stood against the lines (`CallFigures`), the window the server gave (`WindowFigures`)
and the limits the run was started with (`RunLimits`); the prompt cache over a run (`PrefillTally`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ouroboros.ground.config import Settings

Zone = Literal["normal", "soft", "hard", "over"]
RawTally = dict[str, int]
"""Raw estimate per content kind (see `tokens.content_kind`)."""


class Measurement(BaseModel):
    """What one model call told us about tokens."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    prompt_tokens: int
    completion_tokens: int
    source: Literal["server", "timings", "estimate", "refused"]
    """`refused`: a prompt the server refused as too long, with its exact count (no reply)."""
    raw_prompt: int
    """Raw estimate of the prompt that was sent (messages + tool schemas)."""
    raw_reply: int
    silent_truncation: bool
    raw_kinds: RawTally = Field(default_factory=dict)
    """`raw_prompt` per content kind (empty in journals written before kinds were kept)."""


class CallFigures(Measurement):
    """A model call as `token_usage.jsonl` shows it: its measurement, and where it stood."""

    turn: int
    estimated_prompt_tokens: int | None = None
    context_limit: int | None = None
    zone: Zone | None = None
    finish_reason: str | None = None
    purpose: str | None = None
    """A call outside the conversation (`compaction`): no turn of its own."""
    cached_tokens: int | None = None
    """Prompt tokens the server took from its prompt cache (None: it did not say)."""
    processed_tokens: int | None = None
    """Prompt tokens it processed for this call: the prompt less the cached prefix."""
    prefill_ms: float | None = None
    """Time it spent processing them (llama-server's `timings.prompt_ms`)."""
    hard_line: int | None = None
    """The hard line in force for this call (placed from the run's replies, at most the
    configured one): what a bar of this call draws. None in journals from before it was kept."""


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


@dataclass
class PrefillTally:
    """The server's prompt cache over the run, from the calls whose server said (`Prefill`)."""

    calls: int = 0
    cached_tokens: int = 0
    processed_tokens: int = 0
    timed_calls: int = 0
    prefill_ms: float = 0.0

    def add(self, figures: CallFigures) -> None:
        if figures.cached_tokens is None or figures.processed_tokens is None:
            return
        self.calls += 1
        self.cached_tokens += figures.cached_tokens
        self.processed_tokens += figures.processed_tokens
        if figures.prefill_ms is not None:
            self.timed_calls += 1
            self.prefill_ms += figures.prefill_ms
