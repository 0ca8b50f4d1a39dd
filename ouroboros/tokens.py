"""The token ledger: how full the window is, from the server's figures where it gave them.

Projected size of the next prompt = the last server-reported prompt + completion tokens, plus the
calibrated estimate of what changed in the view since (results appended, observations masked).
The estimator counts pre-tokens (`pretokens.raw_units`: where a tokenizer must start a new token)
plus a per-message overhead; its ratio to the real counts is learnt per run and per content kind,
so its error shrinks as calls accumulate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from ouroboros.messages import AssistantMessage, Message, ToolMessage
from ouroboros.pretokens import raw_units, text_kind

Zone = Literal["normal", "soft", "hard", "over"]
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators), unless the
server can say (`servers.ServerInfo.frame_tokens`)."""
FRAME_KIND = "frame"
"""The chat template's tokens around each message: one raw unit a message, priced at the
template's own count (never learnt from the content)."""
CALL_OVERHEAD = 4
"""...and around each tool call of a reply."""
MIN_TOKENS_FOR_TRUNCATION_CHECK = 256
"""Below this the estimate is too coarse to call a short count a truncation."""
UNCALIBRATED_RATIO = 1.2
"""Until the server's first count (or for good, when it gives none to trust): Gemma 3 gives 1.01
to 1.16 tokens a pre-token on ordinary output (medians by source), and an undercount is what
overflows."""
SCHEMA_KIND = "tools"
"""The content kind of the tool schemas sent with every request."""
MIN_STEP_RAW = 128
"""A change between two calls smaller than this is mostly template noise: no lesson from it."""
PURE_SHARE = 0.8
"""A change teaches one kind's ratio when that kind is at least this share of it."""
KIND_MEMORY = 0.9
"""Each lesson's weight in a kind's ratio fades by this factor with every later lesson."""
PLAUSIBLE = (0.2, 5.0)
"""A kind's observed ratio outside these multiples of the whole-prompt ratio is noise."""
RawTally = dict[str, int]
"""Raw estimate per content kind (see `content_kind`)."""


def raw_estimate(message: Message) -> int:
    """Uncalibrated tokens of one message's text: its pre-tokens (`pretokens.raw_units`). The
    chat template's own tokens around it are the `FRAME_KIND`, one unit a message."""
    size = units(message.content)
    if isinstance(message, AssistantMessage):
        size += sum(units(c.name) + units(c.arguments) + CALL_OVERHEAD for c in message.tool_calls)
    return size


@lru_cache(maxsize=1024)
def units(text: str) -> int:
    """`raw_units`, remembered: masking and the protected window price the same results on
    every turn (the cache holds at most 1,024 texts of at most one tool cap each)."""
    return raw_units(text)


@lru_cache(maxsize=1024)
def output_kind(text: str) -> str:
    """The content kind of a tool result holding `text`."""
    return f"output:{text_kind(text)}"


def content_kind(message: Message) -> str:
    """Each kind learns its own ratio. A tool result is priced by what it holds, not by the tool
    that printed it (a shell prints listings, code, logs and JSON alike): even counted in
    pre-tokens, markup, numbers and opaque text (binary, base64, other scripts) tokenize apart
    from ordinary text."""
    if isinstance(message, ToolMessage):
        return "placeholder" if message.masked else output_kind(message.content)
    return message.kind


def tally(messages: Iterable[Message]) -> RawTally:
    """Raw estimate of these messages, per content kind, with one frame unit for each."""
    result: RawTally = {FRAME_KIND: 0}
    for message in messages:
        kind = content_kind(message)
        result[kind] = result.get(kind, 0) + raw_estimate(message)
        result[FRAME_KIND] += 1
    return result


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> RawTally:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()}


def tools_estimate(tools: list[dict[str, Any]]) -> int:
    """Tool schemas count against the window too (LM Studio >=0.3.17 says so in its usage)."""
    return raw_units(json.dumps(tools)) if tools else 0


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

    def zone(self, tokens: int, hard_line: int | None = None) -> Zone:
        """`hard_line`: where the run placed it (`context.winddown`), if not at the threshold."""
        if tokens > self.prompt_budget:
            return "over"
        if tokens >= (self.hard_line if hard_line is None else hard_line):
            return "hard"
        return "soft" if tokens >= self.soft_line else "normal"


@dataclass
class Ratio:
    """A running real/raw ratio: the plain mean of the first samples, then an average that
    follows the content's drift."""

    value: float = 1.0
    samples: int = 0

    def update(self, observed: float) -> None:
        self.samples += 1
        weight = max(1 / self.samples, 0.2)
        self.value += weight * (observed - self.value)


@dataclass
class KindRatio:
    """Real/raw ratio of one content kind, each lesson weighted by its size: the big outputs,
    which masking and the protected window decide on, set it (a test log and a grep are both
    shell_exec, and differ)."""

    real: float = 0.0
    raw: float = 0.0

    def update(self, observed: float, raw: int) -> None:
        self.real = self.real * KIND_MEMORY + observed * raw
        self.raw = self.raw * KIND_MEMORY + raw

    @property
    def value(self) -> float:
        return self.real / self.raw


class Calibration:
    """Real prompt tokens per raw estimate, for this model: one ratio for whole prompts, and one
    per content kind learnt from what changed between two calls."""

    def __init__(self, frame: float = MESSAGE_OVERHEAD) -> None:
        self.whole = Ratio(UNCALIBRATED_RATIO)
        self.kinds: dict[str, KindRatio] = {}
        self.frame = frame
        """Tokens the chat template puts around each message."""
        self._ratios: dict[str, float] = {FRAME_KIND: frame}
        """The kinds' current values, read on every projection."""

    @property
    def ratio(self) -> float:
        return self.whole.value

    @property
    def samples(self) -> int:
        return self.whole.samples

    def update(self, real: int, raw: int, frames: int = 0) -> None:
        """Learn the whole-prompt ratio from a prompt of `raw` units, `frames` of them the
        frames of its messages (priced at the template's count, not learnt)."""
        content, real_content = raw - frames, real - self.frame * frames
        if content > 0 and real_content > 0:
            self.whole.update(real_content / content)

    def update_step(self, real_change: int, raw_change: Mapping[str, int]) -> None:
        """Learn from the change between two prompts, when one kind makes most of it (a step
        that appended a file or a test log): the others are priced at what is known of them."""
        changed = {k: d for k, d in raw_change.items() if d}
        size = sum(abs(d) for d in changed.values())
        if size < MIN_STEP_RAW:
            return
        kind, main = max(changed.items(), key=lambda item: abs(item[1]))
        if kind == FRAME_KIND or abs(main) < PURE_SHARE * size:
            return
        rest = self.price({k: d for k, d in changed.items() if k != kind})
        observed = (real_change - rest) / main
        low, high = PLAUSIBLE
        if low * self.ratio <= observed <= high * self.ratio:
            learnt = self.kinds.setdefault(kind, KindRatio())
            learnt.update(observed, abs(main))
            self._ratios[kind] = learnt.value

    def ratio_of(self, kind: str) -> float:
        return self._ratios.get(kind, self.whole.value)

    def tokens(self, raw: int, kind: str | None = None) -> int:
        ratio = self.ratio if kind is None else self.ratio_of(kind)
        return max(0, round(raw * ratio))

    def message_tokens(self, message: Message) -> int:
        return self.tokens(raw_estimate(message), content_kind(message)) + round(self.frame)

    def densest(self) -> float:
        """The highest ratio learnt: what a result of unknown content may cost per raw unit."""
        return max([self.whole.value, *(self.kinds[k].value for k in self.kinds)])

    def tally_tokens(self, raw: Mapping[str, int]) -> int:
        return max(0, round(self.price(raw)))

    def price(self, raw: Mapping[str, int]) -> float:
        """Calibrated tokens of a tally, which may be a (negative) change."""
        ratios, whole = self._ratios, self.whole.value
        return sum(ratios.get(k, whole) * r for k, r in raw.items())


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
