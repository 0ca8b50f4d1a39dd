"""The records of operating a run: what a person told it, its pauses, the loops it was caught in."""

from __future__ import annotations

from typing import Literal

from ouroboros.messages import UserMessage
from ouroboros.run.reasons import LoopKind
from ouroboros.run.record_base import Record


class Told(Record):
    """A message from the operator (`python -m ouroboros tell`) delivered into the session:
    written before its inbox file is removed, so a kill between the two delivers it once."""

    kind: Literal["told"] = "told"
    session: int
    message_id: str
    sent_at: str
    text: str
    """What the person wrote; `message` is how the agent was shown it."""
    message: UserMessage


class Paused(Record):
    """The run holds at its safe point: no model call, no tool, until `resume`."""

    kind: Literal["paused"] = "paused"
    by: str
    """`operator` (`python -m ouroboros pause`), or `auto_restart = false` between sessions."""


class Resumed(Record):
    kind: Literal["resumed"] = "resumed"
    by: str = "operator"


class LoopDetected(Record):
    """The agent goes in circles (`context/loops.py`), and what is done: 1 a nudge (`message`
    joins the session with this record), 2 a wind-down and restart, 3 a stop as `stuck`."""

    kind: Literal["loop"] = "loop"
    session: int
    loop: LoopKind
    evidence: list[str]
    level: int
    message: UserMessage | None = None
