"""The journal's records, typed: one record per line of `journal.jsonl`; here the core's, the
features' in their folders (each kind registers itself in `KINDS` as its class is defined, and
the journal is read by kind: `JOURNAL_RECORD`, which imports the features' records before it
reads one: `ground/plugins.py`), and the reasons and kinds they name.

A run is a fold over the records (`fold.py`); what people read (`events.jsonl`,
`token_usage.jsonl`, the terminal) is derived from them as they are appended (`events.py`).
Every decision the harness makes (mask, cut, wind-down, compaction, restart) is a record, written
before anything depends on it. Fields are only ever added, with defaults, so a journal written by
an older version folds the same way.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, Union, cast, get_args

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from ouroboros.context.plan import PlanItem
from ouroboros.context.tokens import CallFigures, Measurement
from ouroboros.ground import plugins
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import Message, UserMessage
from ouroboros.ground.timestamps import now_iso

SCHEMA_VERSION = 2
"""Written in every line. 1: before typed records (folds the same)."""

KINDS: dict[str, type[Record]] = {}
"""Every record class, by the `kind` it is written with."""


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
        # The journal leaves out what is None (`Journal.append`): a field that may be None is
        # read back as None where it is absent, whether its class gave it a default or not.
        unread = [
            field
            for field in cls.model_fields.values()
            if field.is_required() and type(None) in get_args(field.annotation)
        ]
        for field in unread:
            field.default = None
        if unread:
            cls.model_rebuild(force=True)

    def implied(self) -> list[Record]:
        """Records this one means too, folded after it (a rewind ends the session it finds)."""
        return []

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        """The events a feature's record makes (`sinks/record_events.py` makes the core's,
        which need the run's state)."""
        return []


class JournalParser:
    """Reads a journal line as the record its `kind` names, the features' kinds imported first
    (one discriminated union, rebuilt when a kind joins)."""

    def __init__(self) -> None:
        self._adapter: TypeAdapter[Any] | None = None
        self._kinds = 0

    def _current(self) -> TypeAdapter[Any]:
        plugins.import_all(plugins.RECORDS)
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
    STALLED = "stalled"
    """Sessions in a row passed no new check (`progress.stall_sessions`, and one more): the run
    stops."""

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


class RunStart(Record):
    """The supervisor started, the first time or to resume."""

    kind: Literal["run_start"] = "run_start"
    model: str
    base_url: str
    resumed: bool = False
    window: WindowFigures | None = None
    limits: RunLimits | None = None


class Starting(Record):
    """The command asked for a run (or its resume) with these limits: journalled before the
    server is asked, which may take for ever, so `status` shows them while the run waits."""

    kind: Literal["starting"] = "starting"
    before_run_start = True
    limits: RunLimits


class SessionStart(Record):
    kind: Literal["session_start"] = "session_start"
    session: int
    reason: str
    """`fresh`, or the `EndReason` of the session before."""
    previous_turns: int = 0
    carried: int = 0
    """Messages carried over from the session before."""
    messages: list[Message]
    """The opening: system prompt, restart marker, carried messages."""
    shown: list[str] = []
    """The workspace files the opening shows whole (the files protocol): read, as if by
    `file_read`, so `file_write` may replace them."""


class ToolRun(BaseModel):
    """How a tool call went, beside its result."""

    model_config = ConfigDict(frozen=True)
    duration_s: float
    output_bytes: int
    error: str | None = None
    """Why it failed, when it did."""
    blocked: str | None = None
    """The block-list rule that refused the command."""


class MessageRecord(Record):
    kind: Literal["message"] = "message"
    session: int
    message: Message
    usage: CallFigures | None = None
    """A model reply carries its call's figures in the same line: a turn is never half-kept."""
    tool: ToolRun | None = None
    renamed_calls: dict[str, str] | None = None
    """Ids the harness gave this reply's calls in place of the server's (repeated or missing):
    the new id -> the id the server sent (`model.tool_protocol.admit`)."""
    dropped_calls: int | None = None
    """Calls of this reply past `llm.max_tool_calls_per_reply`: not recorded, not run."""
    calls_from_text: str | None = None
    """The format this reply's calls were read from its text in (`llm.tool_protocol`): `hermes`,
    `json`, `fenced_json`, `mistral` (recovered: the server sent no call), `bash`, `json_action`
    (the text protocol's action blocks)."""
    written: str | None = None
    """The reply's text as the model wrote it, where the calls read from it were taken out of
    `message` (a call is kept as the call, not twice): the journal keeps every reply whole."""
    unknown_tools: list[str] | None = None
    """Tools this reply called, written as text, that there are not: not run; the agent is
    told the real ones (`model.reply_reader.answer`)."""
    plan: list[PlanItem] | None = None
    """The plan a `plan` call saved, with its result: the plan changes with this very record."""


class ToolStarted(Record):
    """Written before a tool runs: after a crash, a call started without a result is never
    run again."""

    kind: Literal["tool_started"] = "tool_started"
    session: int
    call_id: str
    name: str


class Mask(Record):
    kind: Literal["mask"] = "mask"
    session: int
    call_ids: list[str]
    reason: MaskReason = MaskReason.SOFT_THRESHOLD
    projected_before: int | None = None
    projected_after: int | None = None
    processed_again: int | None = None
    """Tokens from the first result masked to the end of the prompt: what a server's prompt
    cache loses and processes again (estimated; None in journals from before it was kept)."""


class Cut(Record):
    """Results the model has not seen, shown cut: after the server refused a prompt, or where
    they would take a wind-down's next prompt past the budget."""

    kind: Literal["cut"] = "cut"
    session: int
    cuts: dict[str, int]
    """Bytes shown, by call id."""
    reason: Literal["refused", "wind_down"] = "refused"


class Refused(Measurement, Record):
    """A prompt the server refused as too long, with its exact count: no turn."""

    kind: Literal["refused"] = "refused"
    session: int


class Compaction(Record):
    # The recap is written and read as `snapshot`, its name before it was called a recap.
    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    kind: Literal["compaction"] = "compaction"
    session: int
    start: int
    """The first history index kept after the recap."""
    recap: Message = Field(alias="snapshot")
    forced: bool = False
    projected_before: int | None = None
    projected_after: int | None = None


class WindDown(Record):
    """The agent is told to save its state: the notice joins the session with this record."""

    kind: Literal["wind_down"] = "wind_down"
    session: int
    projected: int
    hard_line: int
    room: int
    reply_allowance: int
    turns_left: int
    message: UserMessage | None = None
    """None when no replies are allowed (`wind_down_turns = 0`): the session ends at once."""


class SideCall(Record):
    """A call outside the conversation (a compaction's recap): its tokens count, no turn."""

    kind: Literal["usage"] = "usage"
    session: int
    usage: CallFigures


NoticeKind = Literal[
    "warning",
    "retry",
    "waiting",
    "tools",
    "context_overflow",
    "silent_truncation",
    "wind_down_missed",
]


class Notice(Record):
    """News a reader shows that decides nothing: a warning, a retry, a wait for the server or
    for `unpause`, the tools' confinement, a refused or silently cut prompt, a missed wind-down.
    Journalled like everything else, so what people read is a fold of the journal."""

    kind: Literal["notice"] = "notice"
    before_run_start = True
    event: NoticeKind
    session: int | None = None
    message: str = ""
    once: str | None = None
    """A warning given once a run, by this name: the fold remembers it was given."""
    details: dict[str, int | float | str | bool | None] = Field(default_factory=dict)
    """The event's own figures, shown as fields of its line in `events.jsonl`."""


class CompactionFailed(Record):
    """A compaction that did not make the view smaller: not tried again before the history
    has grown past `retry_above` raw tokens (a forced one is always tried)."""

    kind: Literal["compaction_failed"] = "compaction_failed"
    session: int
    message: str
    projected_before: int | None = None
    projected_after: int | None = None
    retry_above: int = 0


class LoopDetected(Record):
    """The agent goes in circles (`policy/loops.py`), and what is done: 1 a nudge (`message`
    joins the session with this record), 2 a wind-down and restart, 3 a stop as `stuck`."""

    kind: Literal["loop"] = "loop"
    session: int
    loop: LoopKind
    evidence: list[str]
    level: int
    message: UserMessage | None = None


class WindowChange(Record):
    """The window in force changed while the run went on: the next request is budgeted for it,
    and the next session's carry-over; a resume keeps it."""

    kind: Literal["window"] = "window"
    session: int
    before: int
    """The window in force until this record, in tokens."""
    window: WindowFigures
    """The window from here on, with its lines; its `detail` says where the figure came from."""
    source: Literal["refusal", "server"]
    """What said it: a refused prompt's error (only a smaller window is taken from one: a
    refusal never proves a larger), or the server asked again (`window.reread`: larger or
    smaller)."""
    said: str = ""
    """The server's words."""


class SessionEnd(Record):
    kind: Literal["session_end"] = "session_end"
    session: int
    reason: EndReason
    detail: str = ""
    turns: int = 0


class RunEnd(Record):
    """The supervisor stopped. Only `finish` is final; after any other the same command
    resumes."""

    kind: Literal["run_end"] = "run_end"
    before_run_start = True
    reason: EndReason
    detail: str = Field("", validation_alias=AliasChoices("detail", "summary"))


JournalRecord = Record
"""A record as the journal holds it: of a kind the core (above) or a feature registered
(`KINDS`)."""
