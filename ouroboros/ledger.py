"""The token ledger: how full the window is, from the server's figures where it gave them.

Projected size of the next prompt = the last server-reported prompt + completion tokens (the
anchor), plus the calibrated price of what changed in the view since (results appended,
observations masked). Every call's figures teach the calibration (`tokens.Calibration`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ouroboros.tokens import (
    FRAME_KIND,
    MIN_TOKENS_FOR_TRUNCATION_CHECK,
    Budget,
    Calibration,
    RawTally,
    Zone,
    difference,
)


@dataclass(frozen=True)
class Measurement:
    """What one model call told us."""

    prompt_tokens: int
    completion_tokens: int
    source: Literal["server", "timings", "estimate", "refused"]
    """`refused`: a prompt the server refused as too long, with its exact count (no reply)."""
    raw_prompt: int
    """Raw estimate of the prompt that was sent (messages + tool schemas)."""
    raw_reply: int
    silent_truncation: bool
    raw_kinds: RawTally = field(default_factory=dict)
    """`raw_prompt` per content kind (empty in journals written before kinds were kept)."""


class Ledger:
    """Tracks the anchor (last real figures) and projects the size of the next prompt."""

    def __init__(
        self,
        budget: Budget,
        calibration: Calibration | None = None,
        detect_truncation: bool = True,
        trust_reported: bool = True,
    ):
        self.budget = budget
        self.detect_truncation = detect_truncation
        """False for servers that refuse an oversized prompt instead of cutting it."""
        self.trust_reported = trust_reported
        """False for servers whose prompt count leaves out their cache: a lower bound only."""
        self.calibration = calibration or Calibration()
        self._anchor_real: int | None = None
        self._anchor_raw: RawTally = {}
        self.truncation_suspected = False

    def figures(
        self,
        raw_prompt: Mapping[str, int],
        raw_reply: int,
        reported: tuple[int, int, Literal["server", "timings"]] | None,
    ) -> Measurement:
        """One call's figures: the server's where they can be trusted, else the calibrated
        estimate; a count far below the estimate is flagged as an Ollama-style truncation."""
        expected = self.calibration.tally_tokens(raw_prompt)
        total, kinds = sum(raw_prompt.values()), dict(raw_prompt)
        if reported is None or not self.trust_reported:
            reply = self.calibration.tokens(raw_reply, "assistant")
            return Measurement(expected, reply, "estimate", total, raw_reply, False, kinds)
        prompt, completion, source = reported
        truncated = (
            self.detect_truncation
            and expected >= MIN_TOKENS_FOR_TRUNCATION_CHECK
            and (prompt < 0.5 * expected or prompt >= self.budget.limit - 1)
        )
        return Measurement(prompt, completion, source, total, raw_reply, truncated, kinds)

    def measure(
        self,
        raw_prompt: Mapping[str, int],
        raw_reply: int,
        reported: tuple[int, int, Literal["server", "timings"]] | None,
    ) -> Measurement:
        """A conversation turn's figures: they move the anchor and teach the calibration."""
        measurement = self.figures(raw_prompt, raw_reply, reported)
        self.apply(measurement)
        return measurement

    def apply(self, m: Measurement) -> None:
        """Update anchor and calibration (also used to replay a journal after a crash)."""
        if m.source == "refused":
            # What changed since the anchor was counted exactly; the anchor itself still holds.
            if self._anchor_real is not None:
                change = difference(m.raw_kinds, self._anchor_raw)
                self.calibration.update_step(m.prompt_tokens - self._anchor_real, change)
            frames = m.raw_kinds.get(FRAME_KIND, 0)
            self.calibration.update(m.prompt_tokens, m.raw_prompt, frames)
            return
        self.truncation_suspected = m.silent_truncation
        if m.source == "estimate" or m.silent_truncation:
            # A truncated count describes what the server kept, not what we sent.
            self._anchor_real = None
            return
        if self._anchor_real is not None and m.raw_kinds:
            change = difference(m.raw_kinds, self._anchor_raw)
            self.calibration.update_step(m.prompt_tokens - self._anchor_real, change)
        self.calibration.update(m.prompt_tokens, m.raw_prompt, m.raw_kinds.get(FRAME_KIND, 0))
        if not m.raw_kinds:
            self._anchor_real = None
            return
        self._anchor_real = m.prompt_tokens + m.completion_tokens
        # The reply comes back in the next prompt, with a frame the completion count did not
        # include: the next tally has it, the anchor does not.
        self._anchor_raw = {**m.raw_kinds}
        self._anchor_raw["assistant"] = self._anchor_raw.get("assistant", 0) + m.raw_reply

    def refused(self, n_prompt_tokens: int, raw_prompt: Mapping[str, int]) -> Measurement:
        """A llama-server overflow error carries the exact count of the refused prompt: a
        measurement like a reply's, teaching what the new content really costs."""
        total = sum(raw_prompt.values())
        return Measurement(n_prompt_tokens, 0, "refused", total, 0, False, dict(raw_prompt))

    def project(self, raw_view: Mapping[str, int]) -> int:
        """Tokens the next prompt will take, given the raw estimate of the view to send."""
        if self._anchor_real is None:
            return self.calibration.tally_tokens(raw_view)
        change = self.calibration.price(difference(raw_view, self._anchor_raw))
        return max(0, self._anchor_real + round(change))

    def zone(self, projected: int) -> Zone:
        if self.truncation_suspected:
            return "over" if projected > self.budget.prompt_budget else "hard"
        return self.budget.zone(projected)
