"""How full the window is: the server's own counts where they can be believed (`Ledger`: the
last reported prompt + completion tokens as the anchor, plus the calibrated price of what
changed in the view since: results appended, observations masked), the estimate where they
cannot (`Rejected`: figures no prompt in the window can have), and how the server counts a
prompt (`Counting`). Pure: moved only by the measurements the journal holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ouroboros.context.tokens import (
    FRAME_KIND,
    MIN_TOKENS_FOR_TRUNCATION_CHECK,
    PLAUSIBLE,
    Calibration,
    Measurement,
    RawTally,
    difference,
)


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


@dataclass(frozen=True)
class Counting:
    """How the server counts a prompt (`servers.ServerInfo`)."""

    limit: int
    detect_truncation: bool = True
    """False for servers that refuse an oversized prompt instead of cutting it."""
    trust_reported: bool = True
    """False for servers whose prompt count leaves out their cache: a lower bound only."""


@dataclass
class Ledger:
    """The anchor (last real figures) and the calibration: part of the run's state, moved only
    by the measurements the journal holds (`apply`)."""

    calibration: Calibration = field(default_factory=Calibration)
    anchor_real: int | None = None
    anchor_raw: RawTally = field(default_factory=dict)
    truncation_suspected: bool = False

    def figures(
        self,
        raw_prompt: Mapping[str, int],
        raw_reply: int,
        reported: tuple[int, int, Literal["server", "timings"]] | None,
        counting: Counting,
    ) -> Measurement:
        """One call's figures: the server's where they can be trusted (and could be true: not
        beyond the window), else the calibrated estimate; a count far below the estimate is
        flagged as an Ollama-style truncation."""
        expected = self.calibration.tally_tokens(raw_prompt)
        total, kinds = sum(raw_prompt.values()), dict(raw_prompt)
        if (
            reported is None
            or not counting.trust_reported
            or above_window(reported[0], reported[1], counting.limit)
        ):
            reply = self.calibration.tokens(raw_reply, "assistant")
            return Measurement(
                prompt_tokens=expected,
                completion_tokens=reply,
                source="estimate",
                raw_prompt=total,
                raw_reply=raw_reply,
                silent_truncation=False,
                raw_kinds=kinds,
            )
        prompt, completion, source = reported
        truncated = (
            counting.detect_truncation
            and expected >= MIN_TOKENS_FOR_TRUNCATION_CHECK
            and (prompt < 0.5 * expected or prompt >= counting.limit - 1)
        )
        return Measurement(
            prompt_tokens=prompt,
            completion_tokens=completion,
            source=source,
            raw_prompt=total,
            raw_reply=raw_reply,
            silent_truncation=truncated,
            raw_kinds=kinds,
        )

    def apply(self, m: Measurement) -> None:
        """Update anchor and calibration (also used to replay a journal after a crash)."""
        if m.source == "refused":
            # What changed since the anchor was counted exactly; the anchor itself still holds.
            if self.anchor_real is not None:
                change = difference(m.raw_kinds, self.anchor_raw)
                self.calibration.update_step(m.prompt_tokens - self.anchor_real, change)
            frames = m.raw_kinds.get(FRAME_KIND, 0)
            self.calibration.update(m.prompt_tokens, m.raw_prompt, frames)
            return
        self.truncation_suspected = m.silent_truncation
        if m.source == "estimate" or m.silent_truncation:
            # A truncated count describes what the server kept, not what we sent.
            self.anchor_real = None
            return
        if self.anchor_real is not None and m.raw_kinds:
            change = difference(m.raw_kinds, self.anchor_raw)
            self.calibration.update_step(m.prompt_tokens - self.anchor_real, change)
        self.calibration.update(m.prompt_tokens, m.raw_prompt, m.raw_kinds.get(FRAME_KIND, 0))
        if not m.raw_kinds:
            self.anchor_real = None
            return
        self.anchor_real = m.prompt_tokens + m.completion_tokens
        # The reply comes back in the next prompt, with a frame the completion count did not
        # include: the next tally has it, the anchor does not.
        self.anchor_raw = {**m.raw_kinds}
        self.anchor_raw["assistant"] = self.anchor_raw.get("assistant", 0) + m.raw_reply

    @staticmethod
    def refused(n_prompt_tokens: int, raw_prompt: Mapping[str, int]) -> Measurement:
        """A llama-server overflow error carries the exact count of the refused prompt: a
        measurement like a reply's, teaching what the new content really costs."""
        return Measurement(
            prompt_tokens=n_prompt_tokens,
            completion_tokens=0,
            source="refused",
            raw_prompt=sum(raw_prompt.values()),
            raw_reply=0,
            silent_truncation=False,
            raw_kinds=dict(raw_prompt),
        )

    def project(self, raw_view: Mapping[str, int]) -> int:
        """Tokens the next prompt will take, given the raw estimate of the view to send."""
        if self.anchor_real is None:
            return self.calibration.tally_tokens(raw_view)
        change = self.calibration.price(difference(raw_view, self.anchor_raw))
        return max(0, self.anchor_real + round(change))
