"""The records of operating a run: what a person told it, its pauses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import field_validator

from ouroboros.ground.messages import UserMessage
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import MessageRecord, Record, SessionStart


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

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        told = {"session": self.session, "message_id": self.message_id, "sent_at": self.sent_at}
        return [("told", {**told, "text": self.text})]


@dataclass
class Letters(Part):
    """What the fold keeps of the operator's messages."""

    folds = (Told, SessionStart, MessageRecord)

    delivered: dict[str, str] = field(default_factory=dict)
    """Carried by a request the server accepted: id -> when it replied."""
    undelivered: dict[str, Told] = field(default_factory=dict)
    """Taken, and carried by no accepted request yet; its `session` the one whose view holds it."""

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, Told):
            self.undelivered[record.message_id] = record
            state.join(record.message)
        elif isinstance(record, SessionStart):
            # Those its opening carried over sit in the new session's view.
            for told in list(self.undelivered.values()):
                if told.message in record.messages:
                    update = {"session": record.session}
                    self.undelivered[told.message_id] = told.model_copy(update=update)
        elif isinstance(record, MessageRecord) and record.usage is not None:
            # A request the server accepted carried the session's messages (in its view).
            for told in [t for t in self.undelivered.values() if t.session == state.session]:
                self.delivered[told.message_id] = record.ts
                del self.undelivered[told.message_id]

    def status(self) -> dict[str, Any]:
        return {"delivered": self.delivered, "undelivered": sorted(self.undelivered)}

    def again(self, session: int) -> list[Told]:
        """Taken in a session before `session` that ended first, and not carried over: to be
        taken again."""
        return [told for told in self.undelivered.values() if told.session != session]


class Paused(Record):
    """The run holds at its safe point: no model call, no tool, until `unpause`."""

    kind: Literal["paused"] = "paused"
    by: str
    """`operator` (`python -m ouroboros pause`), or `auto_restart = false` between sessions."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("paused", {"by": self.by, "message": "`python -m ouroboros unpause` goes on"})]


class Unpaused(Record):
    # Journals from before issue 30 say `resumed`: read as this, written as `unpaused`.
    kind: Literal["unpaused", "resumed"] = "unpaused"
    by: str = "operator"

    @field_validator("kind")
    @classmethod
    def _renamed(cls, kind: str) -> str:
        return "unpaused"

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("unpaused", {"by": self.by})]


@dataclass
class Pausing(Part):
    """Whether the run is paused."""

    folds = (Paused, Unpaused, SessionStart)

    paused: Paused | None = None
    """Since when and by whom; None while it goes on."""
    unpaused_between: bool = False
    """Unpaused since the session ended: the next starts without another pause (a kill before);
    a session start resets it."""

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, Paused | Unpaused):
            self.paused = record if isinstance(record, Paused) else None
            self.unpaused_between = isinstance(record, Unpaused) and not state.session_open
        elif isinstance(record, SessionStart):
            self.unpaused_between = False

    def status(self) -> dict[str, Any]:
        return {
            "paused": None if self.paused is None else self.paused.model_dump(include={"by", "ts"})
        }
