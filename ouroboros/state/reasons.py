"""The reasons and kinds records name: why a session or a run ended, why results were masked,
what kind of loop the agent was caught in. (`records.py` exports them with its records.)"""

from __future__ import annotations

from enum import StrEnum


class EndReason(StrEnum):
    """Why a session, or a run, ended."""

    FINISH = "finish"
    CONTEXT_FULL = "context_full"
    CONTEXT_OVERFLOW = "context_overflow"
    MAX_TURNS = "max_turns"
    MAX_TOTAL_TURNS = "max_total_turns"
    MAX_TOTAL_TOKENS = "max_total_tokens"
    MAX_WALL_TIME = "max_wall_time"
    MAX_RESTARTS = "max_restarts"
    STOPPED = "stopped"
    ERROR = "error"
    LOOP = "loop"
    """The agent looped on after it was told: restarted (`LoopDetected`)."""
    STUCK = "stuck"
    """It looped on after `loops.max_loops` such restarts: the run stops."""
    REWOUND = "rewound"
    """`python -m ouroboros rewind` ended it while the run was not running."""

    @property
    def restarts(self) -> bool:
        """A session that ended so is followed by another."""
        return self in (
            EndReason.CONTEXT_FULL,
            EndReason.CONTEXT_OVERFLOW,
            EndReason.MAX_TURNS,
            EndReason.LOOP,
        )


class MaskReason(StrEnum):
    SOFT_THRESHOLD = "soft_threshold"
    """Past the soft line."""
    WIND_DOWN_LINE = "wind_down_line"
    """Past the hard line the run placed, when it comes before the soft line."""
    WIND_DOWN_ROOM = "wind_down_room"
    """A wind-down's promised replies need room only results already seen can give."""
    OVERFLOW = "overflow"
    """The server refused the prompt."""


class LoopKind(StrEnum):
    REPEAT = "repeat"
    """The same calls, reply after reply."""
    CYCLE = "cycle"
    """Two or three calls in turn, over and over."""
    FAILING = "failing"
    """The same call failing the same way, among nothing but failures."""
    NO_CALLS = "no_calls"
    """Replies in a row that call no tool."""
    OVERFLOWS = "overflows"
    """Prompts the server refused as too long, again and again in one session."""
    SESSION_REPEAT = "session_repeat"
    """A new session doing what the previous one did, with the same results."""
