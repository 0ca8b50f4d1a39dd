"""The records of workspace checkpoints (`checkpoints.py`), and what the run remembers of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ouroboros import prompts
from ouroboros.run.record_base import Record

LISTED = 5
"""Checkpoints `status` lists: the newest."""


class Checkpoint(Record):
    """A copy of the workspace, taken as session `session` started: a commit of the state
    folder's checkpoint repository."""

    kind: Literal["checkpoint"] = "checkpoint"
    session: int
    commit: str
    files: int
    bytes: int
    left_out: int = 0
    """Files past `checkpoints.max_bytes`: not in the checkpoint, and left as they are by a
    rewind to it."""

    def line(self) -> tuple[str, dict[str, Any]]:
        return "checkpoint", self.model_dump(exclude={"v", "ts", "kind"})


class Rewound(Record):
    """`python -m ouroboros rewind` put the workspace back as it was when `session` started;
    the files of the day it replaced or removed are in `moved_aside`."""

    kind: Literal["rewound"] = "rewound"
    session: int
    commit: str
    moved_aside: str
    """The folder (in the state folder) holding them, at their paths in the workspace."""
    moved: int
    restored: int
    today: str
    """The commit of the workspace as it was just before (the checkpoint repository)."""
    after_session: int
    """The run's newest session then: the next one opens with a note saying so."""

    def line(self) -> tuple[str, dict[str, Any]]:
        return "rewound", self.model_dump(exclude={"v", "ts", "kind", "after_session"})


@dataclass
class Checkpoints:
    """The run's checkpoints by session, and the newest rewind."""

    taken: dict[int, Checkpoint] = field(default_factory=dict)
    rewound: Rewound | None = None

    def apply(self, record: Checkpoint | Rewound) -> None:
        if isinstance(record, Checkpoint):
            self.taken[record.session] = record
        else:
            self.rewound = record

    def pending(self, session: int) -> Rewound | None:
        """The rewind the session after `session` (the run's newest) is to be told of."""
        rewound = self.rewound
        return rewound if rewound is not None and rewound.after_session == session else None

    def note(self, session: int) -> str:
        """What the session after `session` opens with about a rewind ("" for none)."""
        rewound = self.pending(session)
        return "" if rewound is None else prompts.rewound(rewound.session, rewound.moved_aside)

    def summary(self) -> dict[str, Any]:
        """For `status.json`: how many, the newest few, the newest rewind."""
        newest = sorted(self.taken)[-LISTED:]
        return {
            "count": len(self.taken),
            "newest": [self.taken[n].model_dump(exclude={"v", "kind", "commit"}) for n in newest],
            "rewound": None
            if self.rewound is None
            else self.rewound.model_dump(include={"ts", "session", "moved_aside", "moved"}),
        }
