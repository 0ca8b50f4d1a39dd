"""`[checkpoints]`: whether a copy of the workspace is committed as each session starts
(`checkpoints/commit.py`), and how much of it at most."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CheckpointSettings(BaseModel):
    """A copy of the workspace at each session start, in a git repository in the state folder;
    `python -m ouroboros rewind` restores one."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    enabled: bool = True
    max_bytes: int = Field(100_000_000, ge=0)
    """Bytes of files one checkpoint holds at most: those past it are left out, with a warning."""
