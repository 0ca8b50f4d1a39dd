"""What every journal record has: the schema version and when it was written (`records.py`
lists the kinds)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 2
"""Written in every line. 1: before typed records (folds the same)."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Record(BaseModel):
    # A field a later version removed is ignored rather than refused: old journals still fold.
    model_config = ConfigDict(frozen=True, extra="ignore")
    v: int = SCHEMA_VERSION
    ts: str = Field(default_factory=now_iso)
