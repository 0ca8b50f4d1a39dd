"""Server settings that defeat the prompt cache, said with the flag to use.

A local server keeps the key/value cache of the previous request and processes only what comes
after the longest prefix the new one shares with it. Two settings of llama-server throw that
away (measured in ../shared/reference/servers.md, "Seen on our own machines"):
- several slots: a request can land in a slot that does not hold the run's prompt, and each
  slot has a share of the window unless the cache is unified; `/props` says how many;
- a sliding-window model (Gemma 2 and 3, gpt-oss, ...) started without `--swa-full`: after a
  change anywhere but near the end, the server falls back to a checkpoint near the start and
  processes the whole prompt again. Nothing at start says so, and a probe would have to be
  longer than the model's window to show it; so each call's own figures are checked: what the
  server kept against what the prompt shares with the one before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ouroboros.ground.messages import Message

T = TypeVar("T")
REUSED_SHARE = 0.5
"""Below this share of the shared prefix kept, the cache is not doing its job."""
MIN_SHARED_TOKENS = 512
"""Smaller prefixes are too small to judge (a checkpoint near the start can hold them)."""


def slots_warning(props: dict[str, Any]) -> str | None:
    slots = props.get("total_slots")
    if not isinstance(slots, int) or slots <= 1:
        return None
    return (
        f"llama-server runs {slots} slots: a request of this run can land in a slot that does "
        "not hold its prompt cache, and each slot may have a share of the window; start it "
        "with --parallel 1 (or as many slots as runs share the server)"
    )


def common_prefix(before: Sequence[T], now: Sequence[T]) -> int:
    """How many leading items the two share: the messages a prompt cache still holds."""
    same = 0
    for old, new in zip(before, now, strict=False):
        if old is not new and old != new:
            break
        same += 1
    return same


def shared_tokens(
    before: Sequence[Message],
    before_prompt_tokens: int,
    now: Sequence[Message],
    price: Callable[[Message], float],
) -> int:
    """Tokens of the previous prompt that the new one repeats at its start: all of it when
    the new one only appends, else its share up to the first message that differs."""
    same = common_prefix(before, now)
    if same == len(before):
        return before_prompt_tokens
    whole = sum(price(m) for m in before)
    return int(before_prompt_tokens * sum(price(m) for m in before[:same]) / max(whole, 1))


def reuse_warning(cached: int, shared: int) -> str | None:
    if shared < MIN_SHARED_TOKENS or cached >= REUSED_SHARE * shared:
        return None
    return (
        f"the server kept {cached:,} of the ~{shared:,} prompt tokens this request shares with "
        "the one before, and processed the rest again: for a sliding-window model (Gemma 2/3, "
        "gpt-oss) start llama-server with --swa-full; make sure no other client shares its "
        "slot (--parallel 1 for one run)"
    )
