"""The records of workspace checkpoints (`commit.py`, `rewind.py`), and what the run remembers
of them (`Checkpoints`, the feature's part of the run's state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ouroboros.ground import prompts
from ouroboros.state.fold import Part, RunState
from ouroboros.state.records import EndReason, Record, SessionEnd

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

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("checkpoint", self.model_dump(exclude={"v", "ts", "kind"}))]


class Rewinding(Record):
    """`python -m ouroboros rewind` is about to change the workspace. Journalled before it
    touches a file, so a rewind that stops or is killed is never unaccounted for: what it moved
    is in `moved_aside`, and the next session is told the rewind did not finish. It ends the
    session it finds open (reason `rewound`): the workspace is no longer that session's."""

    kind: Literal["rewinding"] = "rewinding"
    session: int
    commit: str
    moved_aside: str
    """The folder (in the state folder) that takes today's files it replaces or removes."""
    after_session: int
    """The run's newest session then."""
    ended_turns: int | None = None
    """The turns of `after_session`, open until this; None where no session was open."""

    def implied(self) -> list[Record]:
        if self.ended_turns is None:
            return []
        return [SessionEnd(session=self.after_session, reason=EndReason.REWOUND)]

    def ended_detail(self) -> str:
        return f"the workspace was rewound to the start of session {self.session}"

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        said = self.model_dump(include={"session", "commit", "moved_aside"})
        if self.ended_turns is None:
            return [("rewinding", said)]
        end = {"session": self.after_session, "reason": "rewound"}
        end |= {"detail": self.ended_detail(), "turns": self.ended_turns}
        return [("session_end", end), ("rewinding", said)]


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
    stopped: str = ""
    """Why the rewind stopped part way ("" where it finished): the workspace is then partly as
    it was, partly as it is today."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("rewound", self.model_dump(exclude={"v", "ts", "kind", "after_session"}))]


@dataclass
class Checkpoints(Part):
    """The run's checkpoints by session, the newest rewind, and one begun and not ended."""

    folds = (Checkpoint, Rewinding, Rewound)

    taken: dict[int, Checkpoint] = field(default_factory=dict)
    rewound: Rewound | None = None
    rewinding: Rewinding | None = None
    """Begun, with no `Rewound` after it: killed part way."""

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, Checkpoint):
            self.taken[record.session] = record
        elif isinstance(record, Rewinding):
            self.rewinding = record
        elif isinstance(record, Rewound):
            self.rewound, self.rewinding = record, None

    def pending(self, session: int) -> Rewinding | Rewound | None:
        """The rewind the session after `session` (the run's newest) is to be told of."""
        newest = self.rewinding or self.rewound
        return newest if newest is not None and newest.after_session == session else None

    def note(self, session: int) -> str:
        """What the session after `session` opens with about a rewind ("" for none)."""
        newest = self.pending(session)
        if newest is None:
            return ""
        finished = isinstance(newest, Rewound) and not newest.stopped
        return prompts.rewound(newest.session, newest.moved_aside, finished)

    def status(self) -> dict[str, Any]:
        """How many, the newest few, the newest rewind."""
        newest = sorted(self.taken)[-LISTED:]
        return {
            "checkpoints": {
                "count": len(self.taken),
                "newest": [
                    self.taken[n].model_dump(exclude={"v", "kind", "commit"}) for n in newest
                ],
                "rewound": None
                if self.rewound is None
                else self.rewound.model_dump(
                    include={"ts", "session", "moved_aside", "moved", "stopped"}
                ),
                "rewinding": None
                if self.rewinding is None
                else self.rewinding.model_dump(include={"ts", "session", "moved_aside"}),
            }
        }
