"""What text costs in tokens before a server has counted it, and the window's budget lines.

The estimate counts pre-tokens (`pretokens.raw_units`: where a tokenizer must start a new token),
per content kind, plus the chat template's frame around each message; its ratio to the real
counts is learnt per run and per kind (`Calibration`), so its error shrinks as calls accumulate.
The ledger (`ledger.py`) anchors it on the server's own counts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ouroboros.context.pretokens import raw_units, text_kind
from ouroboros.ground.figures import RawTally, Zone
from ouroboros.ground.messages import AssistantMessage, Message, ToolMessage

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


def raw_estimate(message: Message) -> int:
    """Uncalibrated tokens of one message's text: its pre-tokens (`pretokens.raw_units`). The
    chat template's own tokens around it are the `FRAME_KIND`, one unit a message."""
    size = units(message.content)
    if isinstance(message, AssistantMessage):
        size += sum(units(c.name) + units(c.arguments) + CALL_OVERHEAD for c in message.tool_calls)
    return size


@lru_cache(maxsize=1024)
def units(text: str) -> int:
    """`raw_units`, remembered: masking and the protected results price the same results on
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
        """`hard_line`: where the run placed it (`context.room`), if not at the threshold."""
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
    which masking and the protected results decide on, set it (a test log and a grep are both
    shell_exec, and differ)."""

    real: float = 0.0
    raw: float = 0.0

    def update(self, observed: float, raw: int) -> None:
        self.real = self.real * KIND_MEMORY + observed * raw
        self.raw = self.raw * KIND_MEMORY + raw

    @property
    def value(self) -> float:
        return self.real / self.raw


@dataclass
class Calibration:
    """Real prompt tokens per raw estimate, for this model: one ratio for whole prompts, and one
    per content kind learnt from what changed between two calls."""

    frame: float = MESSAGE_OVERHEAD
    """Tokens the chat template puts around each message."""
    whole: Ratio = field(default_factory=lambda: Ratio(UNCALIBRATED_RATIO))
    kinds: dict[str, KindRatio] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The kinds' current values, read on every projection.
        self._ratios: dict[str, float] = {FRAME_KIND: self.frame}
        self._ratios.update({kind: learnt.value for kind, learnt in self.kinds.items()})

    def set_frame(self, frame: float) -> None:
        """The template's count, as the server measured it for this run."""
        self.frame = self._ratios[FRAME_KIND] = frame

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
