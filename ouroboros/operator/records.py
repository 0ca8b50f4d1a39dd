"""The records of operating a run: what a person told it, its pauses, the loops it was caught in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ouroboros.ground.messages import Message, UserMessage
from ouroboros.state.reasons import LoopKind
from ouroboros.state.record_base import Record


class Told(Record):
    """A message from the operator (`python -m ouroboros tell`) joins the session: written
    before its inbox file is removed, so a kill between the two takes it once. It is delivered
    once a request the server accepted carried it (the reply's record); if the session ends
    before, the next carries it over or takes it again from this record (`operator.deliver`)."""

    kind: Literal["told"] = "told"
    session: int
    message_id: str
    sent_at: str
    text: str
    """What the person wrote; `message` is how the agent was shown it."""
    message: UserMessage


@dataclass
class Letters:
    """What the fold keeps of the operator's messages (a run field)."""

    delivered: dict[str, str] = field(default_factory=dict)
    """Carried by a request the server accepted: id -> when it replied."""
    undelivered: dict[str, Told] = field(default_factory=dict)
    """Taken, and carried by no accepted request yet; its `session` the one whose view holds it."""

    def taken(self, record: Told) -> None:
        self.undelivered[record.message_id] = record

    def opened(self, session: int, opening: list[Message]) -> None:
        """A session started: those its opening carried over sit in its view."""
        for told in list(self.undelivered.values()):
            if told.message in opening:
                self.undelivered[told.message_id] = told.model_copy(update={"session": session})

    def carried(self, session: int, ts: str) -> None:
        """A request the server accepted carried `session`'s messages (they sit in its view)."""
        for told in [t for t in self.undelivered.values() if t.session == session]:
            self.delivered[told.message_id] = ts
            del self.undelivered[told.message_id]

    def again(self, session: int) -> list[Told]:
        """Taken in a session before `session` that ended first, and not carried over: to be
        taken again."""
        return [told for told in self.undelivered.values() if told.session != session]


class Paused(Record):
    """The run holds at its safe point: no model call, no tool, until `resume`."""

    kind: Literal["paused"] = "paused"
    by: str
    """`operator` (`python -m ouroboros pause`), or `auto_restart = false` between sessions."""


class Resumed(Record):
    kind: Literal["resumed"] = "resumed"
    by: str = "operator"


class LoopDetected(Record):
    """The agent goes in circles (`policy/loops.py`), and what is done: 1 a nudge (`message`
    joins the session with this record), 2 a wind-down and restart, 3 a stop as `stuck`."""

    kind: Literal["loop"] = "loop"
    session: int
    loop: LoopKind
    evidence: list[str]
    level: int
    message: UserMessage | None = None
