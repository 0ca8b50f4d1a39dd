"""What the fold keeps of the tool protocol (`llm.tool_protocol`): whether `auto` switched to
text and why, the replies in a row whose calls were read from their text, and how many calls
were read so, by format. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from ouroboros.ground.messages import AssistantMessage
from ouroboros.state.records import MessageRecord, Notice

SWITCH = "tool_protocol_text"
"""The `Notice.once` name of `auto`'s switch to the text protocol: given once, it holds for the
rest of the run (resumes too)."""


@dataclass
class ProtocolTally:
    switch_reason: str | None = None
    """Why `auto` went over to the text protocol; None while it is native."""
    streak: int = 0
    """Replies in a row with no structured call whose text held one (`calls_from_text`)."""
    from_text: dict[str, int] = field(default_factory=dict)
    """Calls read from a reply's text, by the format they were written in."""

    def message(self, record: MessageRecord) -> None:
        if not isinstance(record.message, AssistantMessage):
            return
        written = record.calls_from_text
        if written is None:
            self.streak = 0
            return
        self.streak += 1
        self.from_text[written] = self.from_text.get(written, 0) + len(record.message.tool_calls)

    def notice(self, record: Notice) -> None:
        if is_switch(record):
            self.switch_reason = record.message

    def line(self) -> str:
        """What `status` says of it: calls read from text by format, and the switch."""
        count = sum(self.from_text.values())
        formats = ", ".join(f"{name} {n:,}" for name, n in sorted(self.from_text.items()))
        read = f"{count:,} read from text ({formats})" if count else "none read from text"
        why = self.switch_reason
        return read if why is None else f"{read}; text protocol since: {why}"


def is_switch(record: Notice) -> bool:
    """Whether `record` is the switch to text. Its requests start otherwise (the tools in the
    system message, no schemas), so what the server cached of the request before is no measure
    of its cache: the fold starts the cache check again."""
    return record.once == SWITCH
