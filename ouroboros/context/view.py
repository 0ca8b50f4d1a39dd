"""The view sent to the model, kept incrementally: a turn costs what changed, not the history."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ouroboros.context.mask import MaskPolicy, choose_masks, masked, unseen_ids
from ouroboros.context.tokens import (
    FRAME_KIND,
    Calibration,
    RawTally,
    content_kind,
    raw_estimate,
    tally,
)
from ouroboros.context.truncate import saved_name, shown
from ouroboros.ground.messages import Message, ToolMessage


class ContextView:
    """Session history plus the masked view of it.

    `shown` is `apply_masks(history, masked_ids)`, index for index. What is sent (`messages()`)
    is that, unless a compaction replaced `history[1:start]` by a recap.
    """

    def __init__(
        self,
        messages: Iterable[Message] = (),
        masked_ids: Iterable[str] = (),
        cuts: Mapping[str, int] | None = None,
    ):
        self.history: list[Message] = []
        self.shown: list[Message] = []
        self.raw: list[int] = []
        self.raw_kinds: RawTally = {}
        """Raw tokens of what `messages()` returns, per content kind."""
        self.start = 0
        self.recap: Message | None = None
        self.masked_ids: set[str] = set()
        self.cuts: dict[str, int] = {}
        """Results shown cut after the server refused a prompt: bytes shown, by call id."""
        self._tool_index: dict[str, int] = {}
        self._cursor = 0
        for message in messages:
            self.append(message)
        self.opening = len(self.history)
        """Messages the session opened with (the system prompt, the marker, the carry-over)."""
        self.cut(cuts or {})
        self.mask(masked_ids)

    def append(self, message: Message) -> None:
        if isinstance(message, ToolMessage):
            self._tool_index[message.tool_call_id] = len(self.history)
            self.shown.append(shown(message))
        else:
            self.shown.append(message)
        self.history.append(message)
        cost = raw_estimate(self.shown[-1])
        self.raw.append(cost)
        self._add(content_kind(self.shown[-1]), cost)
        self._add(FRAME_KIND, 1)
        self._advance_cursor()

    @property
    def raw_total(self) -> int:
        return sum(self.raw_kinds.values())

    def _add(self, kind: str, cost: int) -> None:
        self.raw_kinds[kind] = self.raw_kinds.get(kind, 0) + cost

    def mask(self, call_ids: Iterable[str]) -> None:
        """Show these results as placeholders."""
        for call_id in call_ids:
            index = self._tool_index.get(call_id)
            if index is None or call_id in self.masked_ids:
                continue
            original = self.history[index]
            assert isinstance(original, ToolMessage)
            self._replace(index, masked(original))
            self.masked_ids.add(call_id)
        self._advance_cursor()

    def masked_tally(self, call_ids: Iterable[str]) -> RawTally:
        """Raw tokens `messages()` would hold with these results masked too."""
        result = dict(self.raw_kinds)
        for call_id in set(call_ids) - self.masked_ids:
            index = self._tool_index.get(call_id)
            if index is None or index < self.start:
                continue
            original = self.history[index]
            assert isinstance(original, ToolMessage)
            replacement = masked(original)
            shown_kind, kind = content_kind(self.shown[index]), content_kind(replacement)
            result[shown_kind] = result.get(shown_kind, 0) - self.raw[index]
            result[kind] = result.get(kind, 0) + raw_estimate(replacement)
        return result

    def tally_from_first(self, call_ids: Iterable[str]) -> RawTally:
        """Raw tokens of what `messages()` would hold from the first of these results on, with
        them masked: what a server's prompt cache loses when they are."""
        ids = set(call_ids)
        indexes = [self._tool_index[i] for i in ids if i in self._tool_index]
        first = max(min(indexes, default=len(self.shown)), self.start)
        return tally(
            masked(m) if isinstance(m, ToolMessage) and m.tool_call_id in ids else m
            for m in self.shown[first:]
        )

    def cut(self, cuts: Mapping[str, int]) -> None:
        """Show these results cut to so many bytes (after the server refused a prompt)."""
        self.cuts.update(cuts)
        for call_id, size in cuts.items():
            index = self._tool_index.get(call_id)
            if index is None or call_id in self.masked_ids:
                continue
            original = self.history[index]
            assert isinstance(original, ToolMessage)
            # Its whole text was saved (by the session) where the cut marker says.
            saved = original.saved_to or saved_name(original.name, original.content)
            self._replace(
                index, shown(original.model_copy(update={"room_bytes": size, "saved_to": saved}))
            )

    def _replace(self, index: int, replacement: Message) -> None:
        """Show `replacement` for history[index], keeping the raw tallies of what is sent."""
        cost = raw_estimate(replacement)
        if index >= self.start:
            self._add(content_kind(self.shown[index]), -self.raw[index])
            self._add(content_kind(replacement), cost)
        self.raw[index] = cost
        self.shown[index] = replacement

    def unseen(self) -> list[ToolMessage]:
        """The results the model has not been sent yet, as they are in the history."""
        ids = unseen_ids(self.history)
        return [m for m in self.history if isinstance(m, ToolMessage) and m.tool_call_id in ids]

    def messages(self) -> list[Message]:
        """What the model is sent."""
        if self.recap is None:
            return list(self.shown)
        return [self.shown[0], self.recap, *self.shown[self.start :]]

    def compacted(self, start: int, recap: Message) -> RawTally:
        """Raw tokens `messages()` would hold after `compact(start, recap)`."""
        return tally([self.shown[0], recap, *self.shown[start:]])

    def compact(self, start: int, recap: Message) -> None:
        """Replace `history[1:start]` in what is sent by `recap` (the history keeps all)."""
        self.start = start
        self.recap = recap
        self.raw_kinds = self.compacted(start, recap)
        self._cursor = max(self._cursor, start)

    def choose_masks(self, policy: MaskPolicy, calibration: Calibration, excess: int) -> list[str]:
        """Oldest unmasked results worth masking to reclaim `excess` calibrated tokens, priced
        as they are shown."""
        return choose_masks(
            self.shown,
            self.masked_ids,
            policy,
            calibration.message_tokens,
            excess,
            self._cursor,
        )

    def all_but_protected(self, policy: MaskPolicy, calibration: Calibration) -> list[str]:
        """Everything but the protected results: the response to a context-overflow error."""
        return self.choose_masks(policy, calibration, excess=self.raw_total * 10 + 1)

    def result_shown(self, call_id: str) -> Message:
        """A result as it is sent now: whole, cut or a placeholder."""
        return self.shown[self._tool_index[call_id]]

    def result(self, call_id: str) -> ToolMessage:
        """A result as the history holds it."""
        message = self.history[self._tool_index[call_id]]
        assert isinstance(message, ToolMessage)
        return message

    def reclaimable(self, policy: MaskPolicy, calibration: Calibration, incoming: int = 0) -> int:
        """Calibrated tokens that masking everything but the protected results would free,
        once `incoming` new results have taken their places in it."""
        policy = replace(policy, protected_count=max(policy.protected_count - incoming, 0))
        tokens = calibration.message_tokens
        freed = 0
        for call_id in self.all_but_protected(policy, calibration):
            index = self._tool_index[call_id]
            original = self.history[index]
            assert isinstance(original, ToolMessage)
            freed += tokens(self.shown[index]) - tokens(masked(original))
        return freed

    def _advance_cursor(self) -> None:
        # Skip messages that can never become candidates again: not results, or masked. (A
        # result too small to mask may not stay so under a later calibration: not skipped, or
        # a resumed run, whose cursor starts at 0, could choose differently.)
        while self._cursor < len(self.history):
            message = self.history[self._cursor]
            if isinstance(message, ToolMessage) and message.tool_call_id not in self.masked_ids:
                break
            self._cursor += 1
