"""What text costs in tokens, and what a model call measured.

Before a server has counted it, text is priced in pre-tokens (`raw_units`: where a tokenizer
must start a new token). A BPE or SentencePiece tokenizer does not cut bytes evenly: a digit is
often a token of its own (Gemma splits every number into digits), a common word with its leading
space is one token, a run of punctuation or of blanks is one or two, a rare character is up to
one per byte. So Gemma 3 gives 0.9 to 3.5 tokens per 4 bytes of ordinary shell output (medians,
man page to hex dump), and one learnt ratio on bytes/4 cannot fit them all; it gives 1.01 to
1.16 tokens a pre-token on the same outputs. `text_kind` names the few contents that still
differ, so a ratio learnt on one is not applied to another.

The estimate counts pre-tokens per content kind, plus the chat template's frame around each
message; its ratio to the real counts is learnt per run and per kind (`Calibration`), so its
error shrinks as calls accumulate. Every call's figures (`Measurement`, `CallFigures`: the
values records carry) teach the calibration; how full the window is, from the server's own
counts, is the ledger's (`ledger.py`).
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ouroboros.ground.messages import AssistantMessage, Message, ToolMessage
from ouroboros.ground.prompts import DEAD_END_NOTE

# --- What a model call measured.

Zone = Literal["normal", "soft", "hard", "over"]
RawTally = dict[str, int]
"""Raw estimate per content kind (see `content_kind`)."""


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


# --- Pre-tokens and content kinds.

LOWER, UPPER, DIGIT, PUNCT, SPACE, NEWLINE, TAB, OTHER = (1 << i for i in range(8))


def _flag(byte: int) -> int:
    char = chr(byte)
    if byte >= 0xC0:
        return OTHER  # first byte of a non-ASCII character
    if byte >= 0x80:
        return 0  # continuation byte: its character is counted at its first byte
    for chars, flag in (
        (string.ascii_lowercase, LOWER),
        (string.ascii_uppercase, UPPER),
        (string.digits, DIGIT),
        (string.punctuation, PUNCT),
        (" ", SPACE),
        ("\n\r", NEWLINE),
        ("\t", TAB),
    ):
        if char in chars:
            return flag
    return OTHER  # control characters: a token each


FLAGS = bytes(_flag(b) for b in range(256))
"""One class bit per byte, so one big-integer operation tests every character at once."""
CHUNK = 1 << 15
"""Bytes per big-integer pass; the masks below are built once for this length."""


def _mask(bits: int) -> int:
    return int.from_bytes(bytes([bits]) * CHUNK, "little")


RUNS, LOWERS, EACH, SPACES = (
    _mask(UPPER | PUNCT | NEWLINE | TAB),
    _mask(LOWER),
    _mask(DIGIT | OTHER),
    _mask(SPACE),
)
LONG_RUNS = (
    bytes([LOWER]) * 16,
    bytes([UPPER]) * 16,
    bytes([PUNCT]) * 16,
    bytes([SPACE]) * 31,
    bytes([NEWLINE]) * 31,
    bytes([TAB]) * 31,
)
"""A vocabulary's longest pieces: ~16 repeated letters or punctuation, ~31 blanks (Gemma 3)."""


def raw_units(text: str) -> int:
    """Pre-tokens: every digit and every non-ASCII or control character; every run of
    punctuation, newlines or tabs; every word piece (a lowercase run, or an uppercase letter
    after a non-uppercase one, so camelCase is two); every run of two or more spaces (a single
    space joins the word after it); plus one more per 16 (31 for blanks) of a long run.
    Each counts one: what a tokenizer merges or splits beyond that is left to the learnt ratio
    (fitted weights gained under a point of error, and would fit one tokenizer only)."""
    data = text.encode(errors="surrogatepass")
    units = 0
    for start in range(0, len(data), CHUNK):
        flags = data[start : start + CHUNK].translate(FLAGS)
        now = int.from_bytes(flags, "little")
        before = now << 8  # each byte now lines up with the flags of the character before it
        starts = (
            (now & ~before & RUNS)
            | (now & ~(before | before >> 1) & LOWERS)  # lowercase after neither case
            | (now & EACH)
            | (now & before & ~(before << 8) & SPACES)  # the second space of a run
        )
        units += starts.bit_count() + sum(flags.count(run) for run in LONG_RUNS)
    return units


SAMPLE = 4096
"""Characters the classifier reads: the head of an output says what it is."""


def text_kind(text: str) -> str:
    """`opaque`, `numbers`, `markup` or `text`: the contents whose tokens per pre-token differ
    most (listings, code, logs and prose split alike once counted in pre-tokens, so one kind
    does for them all, and learns from more samples). Judged on the head of the output."""
    # The harness's lines before the output: a repeated dead end's note, a shell's exit code.
    for harness_line in (DEAD_END_NOTE, "exit code "):
        if text.startswith(harness_line):
            text = text[text.find("\n") + 1 :]
    head = text[:SAMPLE]
    flags = head.encode(errors="surrogatepass").translate(FLAGS)
    n = len(flags) or 1

    def share(flag: int) -> float:
        return flags.count(bytes([flag])) / n

    blankless = n > 200 and share(SPACE) + share(TAB) < 0.02 and share(NEWLINE) < 0.005
    if share(OTHER) > 0.1 or blankless:
        # Binary, a non-Latin script (a rare character is a token per byte, a common one a
        # token per word), or long lines without blanks (base64, hex, minified): the pre-token
        # count is least sure here, so these must not teach the other kinds.
        return "opaque"
    if share(DIGIT) > 0.3:
        return "numbers"  # tables of numbers, hex dumps: a token per digit
    if head.count("<") > 0.01 * n or (head.count('"') > 0.04 * n and ("{" in head or "[" in head)):
        return "markup"  # HTML, XML, JSON: quotes and brackets merge into fewer tokens
    return "text"


# --- The estimate, its calibration, and the window's budget lines.

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
    """Uncalibrated tokens of one message's text: its pre-tokens (`raw_units`). The
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
