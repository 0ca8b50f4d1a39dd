"""What every journal record has (the schema version, when it was written), and the register of
kinds the journal is read by: every record class with a `kind` joins it as it is defined, the
core's (`records.py`) and the features' alike (`ouroboros/features.py` imports theirs)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Union, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 2
"""Written in every line. 1: before typed records (folds the same)."""

KINDS: dict[str, type[Record]] = {}
"""Every record class, by the `kind` it is written with."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Record(BaseModel):
    # A field a later version removed is ignored rather than refused: old journals still fold.
    model_config = ConfigDict(frozen=True, extra="ignore")
    v: int = SCHEMA_VERSION
    ts: str = Field(default_factory=now_iso)
    before_run_start: ClassVar[bool] = False
    """Of a kind the command or the wiring may write before the run's start (`run/lock.py`)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        kind = cls.model_fields["kind"].default if "kind" in cls.model_fields else None
        if isinstance(kind, str):
            if KINDS.setdefault(kind, cls) is not cls:
                raise TypeError(f"record kind {kind!r} is taken by {KINDS[kind].__name__}")

    def implied(self) -> list[Record]:
        """Records this one means too, folded after it (a rewind ends the session it finds)."""
        return []

    def lines(self) -> list[tuple[str, dict[str, Any]]]:
        """The lines of `events.jsonl` a feature's record makes (`sinks/lines.py` makes the
        core's, which need the run's state)."""
        return []


class JournalParser:
    """Reads a journal line as the record its `kind` names, among those registered when it is
    read (one discriminated union, rebuilt when a kind joins)."""

    def __init__(self) -> None:
        self._adapter: TypeAdapter[Any] | None = None
        self._kinds = 0

    def _current(self) -> TypeAdapter[Any]:
        if self._adapter is None or self._kinds != len(KINDS):
            union: Any = Union[tuple(KINDS.values())]  # noqa: UP007
            self._adapter = TypeAdapter(Annotated[union, Field(discriminator="kind")])
            self._kinds = len(KINDS)
        return self._adapter

    def validate_json(self, data: str | bytes, /) -> Record:
        return cast(Record, self._current().validate_json(data))

    def validate_python(self, data: Any, /) -> Record:
        return cast(Record, self._current().validate_python(data))


JOURNAL_RECORD = JournalParser()


def wall_time(started_at: float | None, now: float, stopped_at: str | None = None) -> float:
    """A run's wall time, the one definition its limit and `status` share: from its first start
    to `now` while it runs; once it stopped (ended, or killed), to its newest record
    (`stopped_at`, an ISO timestamp), whoever reads it and whenever."""
    if started_at is None:
        return 0.0
    end = now if stopped_at is None else datetime.fromisoformat(stopped_at).timestamp()
    return max(0.0, end - started_at)
