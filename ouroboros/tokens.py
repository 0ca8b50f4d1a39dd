"""The token ledger: how full the window is, from the server's figures where it gave them.

Projected size of the next prompt = the last server-reported prompt + completion tokens, plus the
calibrated estimate of what changed in the view since (results appended, observations masked).
The estimator is bytes/4 plus a per-message overhead; its ratio to the real counts is learnt
per run, so its error shrinks as calls accumulate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ouroboros.messages import AssistantMessage, Message, ToolMessage

Zone = Literal["normal", "soft", "hard", "over"]
MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators)."""
MIN_TOKENS_FOR_TRUNCATION_CHECK = 256
"""Below this the estimate is too coarse to call a short count a truncation."""
UNCALIBRATED_RATIO = 1.25
"""Until the server's first count (or for good, when it gives none to trust): real tokenizers
give 2.6 to 4.5 bytes a token (Gemma 3: 3.3 on code, 2.6 on short listings), so bytes/4 alone
would undercount, and an undercount is what overflows."""
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
    """Uncalibrated tokens of one message: UTF-8 bytes / 4 plus template overhead."""
    size = len(message.content.encode())
    if isinstance(message, AssistantMessage):
        size += sum(len(c.name) + len(c.arguments.encode()) + 16 for c in message.tool_calls)
    elif isinstance(message, ToolMessage):
        size += len(message.tool_call_id)
    return size // 4 + MESSAGE_OVERHEAD


def content_kind(message: Message) -> str:
    """Tokenizers split code, test logs and prose differently (Gemma 3: 2.6 to 4.1 bytes a
    token), so each tool's output and each role learns a ratio of its own."""
    if isinstance(message, ToolMessage):
        return "placeholder" if message.masked else f"tool:{message.name}"
    return message.kind


def tally(messages: Iterable[Message]) -> RawTally:
    """Raw estimate of these messages, per content kind."""
    result: RawTally = {}
    for message in messages:
        kind = content_kind(message)
        result[kind] = result.get(kind, 0) + raw_estimate(message)
    return result


def difference(after: Mapping[str, int], before: Mapping[str, int]) -> RawTally:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after.keys() | before.keys()}


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

    def __init__(self) -> None:
        self.whole = Ratio(UNCALIBRATED_RATIO)
        self.kinds: dict[str, KindRatio] = {}
        self._ratios: dict[str, float] = {}
        """The kinds' current values, read on every projection."""

    @property
    def ratio(self) -> float:
        return self.whole.value

    @property
    def samples(self) -> int:
        return self.whole.samples

    def update(self, real: int, raw: int) -> None:
        if raw > 0 and real > 0:
            self.whole.update(real / raw)

    def update_step(self, real_change: int, raw_change: Mapping[str, int]) -> None:
        """Learn from the change between two prompts, when one kind makes most of it (a step
        that appended a file or a test log): the others are priced at what is known of them."""
        changed = {k: d for k, d in raw_change.items() if d}
        size = sum(abs(d) for d in changed.values())
        if size < MIN_STEP_RAW:
            return
        kind, main = max(changed.items(), key=lambda item: abs(item[1]))
        if abs(main) < PURE_SHARE * size:
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
        return self.tokens(raw_estimate(message), content_kind(message))

    def densest(self) -> float:
        """The highest ratio learnt: what a result of unknown content may cost per raw unit."""
        return max([self.whole.value, *self._ratios.values()])

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
    source: Literal["server", "timings", "estimate"]
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
        self.truncation_suspected = m.silent_truncation
        if m.source == "estimate" or m.silent_truncation:
            # A truncated count describes what the server kept, not what we sent.
            self._anchor_real = None
            return
        if self._anchor_real is not None and m.raw_kinds:
            change = difference(m.raw_kinds, self._anchor_raw)
            self.calibration.update_step(m.prompt_tokens - self._anchor_real, change)
        self.calibration.update(m.prompt_tokens, m.raw_prompt)
        if not m.raw_kinds:
            self._anchor_real = None
            return
        self._anchor_real = m.prompt_tokens + m.completion_tokens
        # The reply comes back in the next prompt with its template overhead, which the
        # completion count did not include.
        reply = m.raw_reply - MESSAGE_OVERHEAD
        self._anchor_raw = {**m.raw_kinds}
        self._anchor_raw["assistant"] = self._anchor_raw.get("assistant", 0) + reply

    def calibrate_overflow(self, n_prompt_tokens: int, raw_prompt: Mapping[str, int]) -> None:
        """A llama-server overflow error carries the exact count of the refused prompt."""
        self.calibration.update(n_prompt_tokens, sum(raw_prompt.values()))
        self._anchor_real = None

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
