"""The view sent to the model, kept incrementally: a turn costs what changed, not the history."""

from __future__ import annotations

from collections.abc import Iterable

from ouroboros.context.mask import MaskPolicy, choose_masks, masked
from ouroboros.messages import Message, ToolMessage
from ouroboros.tokens import Calibration, raw_estimate


class ContextView:
    """Session history plus the masked view of it.

    `view` is `apply_masks(history, masked_ids)`, index for index. What is sent (`messages()`)
    is that view, unless a compaction replaced `history[1:start]` by a snapshot message.
    """

    def __init__(self, messages: Iterable[Message] = (), masked_ids: Iterable[str] = ()):
        self.history: list[Message] = []
        self.view: list[Message] = []
        self.raw: list[int] = []
        self.raw_total = 0
        """Raw tokens of what `messages()` returns."""
        self.start = 0
        self.snapshot: Message | None = None
        self.masked_ids: set[str] = set()
        self._tool_index: dict[str, int] = {}
        self._cursor = 0
        for message in messages:
            self.append(message)
        self.mask(masked_ids)

    def append(self, message: Message) -> None:
        if isinstance(message, ToolMessage):
            self._tool_index[message.tool_call_id] = len(self.history)
        self.history.append(message)
        self.view.append(message)
        cost = raw_estimate(message)
        self.raw.append(cost)
        self.raw_total += cost

    def mask(self, call_ids: Iterable[str]) -> int:
        """Mask these results in the view; returns the raw tokens reclaimed."""
        reclaimed = 0
        for call_id in call_ids:
            index = self._tool_index.get(call_id)
            if index is None or call_id in self.masked_ids:
                continue
            original = self.history[index]
            assert isinstance(original, ToolMessage)
            replacement = masked(original)
            cost = raw_estimate(replacement)
            reclaimed += self.raw[index] - cost
            if index >= self.start:
                self.raw_total += cost - self.raw[index]
            self.raw[index] = cost
            self.view[index] = replacement
            self.masked_ids.add(call_id)
        return reclaimed

    def messages(self) -> list[Message]:
        """What the model is sent."""
        if self.snapshot is None:
            return list(self.view)
        return [self.view[0], self.snapshot, *self.view[self.start :]]

    def compacted_total(self, start: int, snapshot: Message) -> int:
        """Raw tokens `messages()` would hold after `compact(start, snapshot)`."""
        return self.raw[0] + raw_estimate(snapshot) + sum(self.raw[start:])

    def compact(self, start: int, snapshot: Message) -> None:
        """Replace `history[1:start]` in what is sent by `snapshot` (the history keeps all)."""
        self.start = start
        self.snapshot = snapshot
        self.raw_total = self.compacted_total(start, snapshot)
        self._cursor = max(self._cursor, start)

    def choose_masks(self, policy: MaskPolicy, calibration: Calibration, excess: int) -> list[str]:
        """Oldest unmasked results worth masking to reclaim `excess` calibrated tokens."""

        def tokens(message: Message) -> int:
            return calibration.tokens(raw_estimate(message))

        self._advance_cursor(policy, calibration)
        return choose_masks(self.history, self.masked_ids, policy, tokens, excess, self._cursor)

    def all_but_protected(self, policy: MaskPolicy, calibration: Calibration) -> list[str]:
        """Everything outside the protected window: the response to a context-overflow error."""
        return self.choose_masks(policy, calibration, excess=self.raw_total * 10 + 1)

    def _advance_cursor(self, policy: MaskPolicy, calibration: Calibration) -> None:
        # Skip messages that can never become candidates again (not results, masked, small).
        while self._cursor < len(self.history):
            message = self.history[self._cursor]
            small = calibration.tokens(self.raw[self._cursor]) <= policy.min_tokens
            if (
                isinstance(message, ToolMessage)
                and message.tool_call_id not in self.masked_ids
                and not small
            ):
                break
            self._cursor += 1
