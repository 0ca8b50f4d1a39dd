"""The token ledger: how full the window is, from the server's figures where it gave them.

Projected size of the next prompt = the last server-reported prompt + completion tokens, plus the
calibrated estimate of what changed in the view since (results appended, observations masked).
The estimator is bytes/4 plus a per-message overhead; its ratio to the real counts is learnt
per run, so its error shrinks as calls accumulate.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from ouroboros.messages import AssistantMessage, Message, ToolMessage

Zone = Literal["normal", "soft", "hard", "over"]
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators)."""
MIN_TOKENS_FOR_TRUNCATION_CHECK = 256
"""Below this the estimate is too coarse to call a short count a truncation."""


def raw_estimate(message: Message) -> int:
    """Uncalibrated tokens of one message: UTF-8 bytes / 4 plus template overhead."""
    size = len(message.content.encode())
    if isinstance(message, AssistantMessage):
        size += sum(len(c.name) + len(c.arguments.encode()) + 16 for c in message.tool_calls)
    elif isinstance(message, ToolMessage):
        size += len(message.tool_call_id)
    return size // 4 + MESSAGE_OVERHEAD


def tools_estimate(tools: list[dict[str, Any]]) -> int:
    """Tool schemas count against the window too (LM Studio >=0.3.17 says so in its usage)."""
    return len(json.dumps(tools).encode()) // 4 if tools else 0


@dataclass(frozen=True)
class Budget:
    """Token lines of one window.

    The prompt budget is the limit less the reply's reserve (`max_output_tokens`) and a safety
    margin: vLLM refuses prompt + max_tokens > window, Ollama cuts the prompt to the window. The
    soft and hard thresholds are fractions of that usable budget, so the room above the hard line
    is left for the wind-down replies whatever the window and reserve.
    """

    limit: int
    prompt_budget: int
    soft_line: int
    hard_line: int

    @classmethod
    def for_window(
        cls, limit: int, soft: float, hard: float, max_output: int, safety_margin: float
    ) -> Budget:
        prompt_budget = max(1, limit - max_output - int(limit * safety_margin))
        return cls(limit, prompt_budget, int(prompt_budget * soft), int(prompt_budget * hard))

    def zone(self, tokens: int) -> Zone:
        if tokens > self.prompt_budget:
            return "over"
        if tokens >= self.hard_line:
            return "hard"
        return "soft" if tokens >= self.soft_line else "normal"


@dataclass
class Calibration:
    """Running ratio of real prompt tokens to the raw estimate, for this model."""

    ratio: float = 1.0
    samples: int = 0

    def update(self, real: int, raw: int) -> None:
        if raw <= 0 or real <= 0:
            return
        observed = real / raw
        self.samples += 1
        # A plain mean for the first calls, then an average that follows the content's drift.
        weight = max(1 / self.samples, 0.2)
        self.ratio += weight * (observed - self.ratio)

    def tokens(self, raw: int) -> int:
        return max(0, round(raw * self.ratio))


@dataclass(frozen=True)
class Measurement:
    """What one model call told us."""

    prompt_tokens: int
    completion_tokens: int
    source: Literal["server", "timings", "estimate"]
    raw_prompt: int
    """Raw estimate of the prompt that was sent (messages + tool schemas)."""
    raw_reply: int
    silent_truncation: bool


class Ledger:
    """Tracks the anchor (last real figures) and projects the size of the next prompt."""

    def __init__(
        self,
        budget: Budget,
        calibration: Calibration | None = None,
        detect_truncation: bool = True,
    ):
        self.budget = budget
        self.detect_truncation = detect_truncation
        """False for servers that refuse an oversized prompt instead of cutting it."""
        self.calibration = calibration or Calibration()
        self._anchor_real: int | None = None
        self._anchor_raw = 0
        self.truncation_suspected = False

    def measure(
        self,
        raw_prompt: int,
        raw_reply: int,
        reported: tuple[int, int, Literal["server", "timings"]] | None,
    ) -> Measurement:
        """Take in one call's figures; detect Ollama-style silent truncation on the way."""
        expected = self.calibration.tokens(raw_prompt)
        if reported is None:
            measurement = Measurement(
                expected,
                self.calibration.tokens(raw_reply),
                "estimate",
                raw_prompt,
                raw_reply,
                False,
            )
            self._anchor_real = None
            return measurement
        prompt, completion, source = reported
        truncated = (
            self.detect_truncation
            and expected >= MIN_TOKENS_FOR_TRUNCATION_CHECK
            and (prompt < 0.5 * expected or prompt >= self.budget.limit - 1)
        )
        measurement = Measurement(prompt, completion, source, raw_prompt, raw_reply, truncated)
        self.apply(measurement)
        return measurement

    def apply(self, m: Measurement) -> None:
        """Update anchor and calibration (also used to replay a journal after a crash)."""
        self.truncation_suspected = m.silent_truncation
        if m.source == "estimate" or m.silent_truncation:
            # A truncated count describes what the server kept, not what we sent.
            self._anchor_real = None
            return
        self.calibration.update(m.prompt_tokens, m.raw_prompt)
        self._anchor_real = m.prompt_tokens + m.completion_tokens
        self._anchor_raw = m.raw_prompt + m.raw_reply

    def calibrate_overflow(self, n_prompt_tokens: int, raw_prompt: int) -> None:
        """A llama-server overflow error carries the exact count of the refused prompt."""
        self.calibration.update(n_prompt_tokens, raw_prompt)
        self._anchor_real = None

    def project(self, raw_view: int) -> int:
        """Tokens the next prompt will take, given the raw estimate of the view to send."""
        if self._anchor_real is None:
            return self.calibration.tokens(raw_view)
        return max(
            0, self._anchor_real + round(self.calibration.ratio * (raw_view - self._anchor_raw))
        )

    def zone(self, projected: int) -> Zone:
        if self.truncation_suspected:
            return "over" if projected > self.budget.prompt_budget else "hard"
        return self.budget.zone(projected)
