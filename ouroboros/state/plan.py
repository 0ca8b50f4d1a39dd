"""The agent's plan in the run's state: the newest plan a `plan` call saved, folded from the
journal like everything else, so it survives restarts, kill -9 and resumes (a run field of
`RunState`, which the snapshot keeps by its declaration).

A plan changes with the record of the result of the call that saved it (`MessageRecord.plan`):
one journal line, so a crash never leaves a plan saved without its result or the other way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ouroboros.context.plan import PLAN_TOOL, PlanArgs, PlanItem, counts, render
from ouroboros.ground.messages import Message, ToolMessage
from ouroboros.state.records import MessageRecord


@dataclass
class RunPlan:
    """The plan as it stands, and when it last changed."""

    items: list[PlanItem] = field(default_factory=list)
    changes: int = 0
    """Plans saved in the run."""
    session: int = 0
    """The session that saved the newest (0: none yet)."""
    ts: str = ""

    def apply(self, record: MessageRecord) -> None:
        if record.plan is None:
            return
        self.items = list(record.plan)
        self.changes += 1
        self.session = record.session
        self.ts = record.ts

    def summary(self) -> dict[str, Any]:
        """What `status` shows of it, as plain JSON (`status.json`)."""
        said = {"shown": render(self.items), "counts": counts(self.items)}
        return {**said, "session": self.session, "ts": self.ts}


def plan_saved(message: Message) -> list[PlanItem] | None:
    """The plan a tool result saved: its call's items where it is a `plan` call that passed its
    checks (the tool runner refused it otherwise); None for any other message."""
    if not isinstance(message, ToolMessage) or message.name != PLAN_TOOL or message.error:
        return None
    return PlanArgs.model_validate(json.loads(message.arguments)).items


def plan_line(record: MessageRecord, plan: RunPlan) -> dict[str, Any]:
    """The fields of the `plan` event a saved plan makes (docs/logs.md)."""
    items = record.plan or []
    tally = {status: sum(i.status == status for i in items) for status in ("done", "doing", "todo")}
    shown = [i.model_dump(exclude_defaults=True) for i in items]
    return {"session": record.session, "changes": plan.changes, **tally, "items": shown}
