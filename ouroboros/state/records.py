"""Everything the journal holds, typed: one record per line of `journal.jsonl`.

A run is a fold over these records (`state.py`); what people read (`events.jsonl`,
`token_usage.jsonl`, the terminal) is derived from them as they are appended (`events.py`).
Every decision the harness makes (mask, cut, wind-down, compaction, restart) is a record, written
before anything depends on it. Fields are only ever added, with defaults, so a journal written by
an older version folds the same way.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter

from ouroboros.checkpoints.records import Checkpoint as Checkpoint
from ouroboros.checkpoints.records import Rewinding as Rewinding
from ouroboros.checkpoints.records import Rewound as Rewound
from ouroboros.context.plan import PlanItem
from ouroboros.context.tokens import CallFigures, Measurement
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import Message, UserMessage
from ouroboros.mcp.records import McpFault as McpFault
from ouroboros.mcp.records import McpOffered as McpOffered
from ouroboros.operator.records import LoopDetected as LoopDetected
from ouroboros.operator.records import Paused as Paused
from ouroboros.operator.records import Resumed as Resumed
from ouroboros.operator.records import Told as Told
from ouroboros.state.reasons import EndReason as EndReason
from ouroboros.state.reasons import LoopKind as LoopKind
from ouroboros.state.reasons import MaskReason as MaskReason
from ouroboros.state.record_base import SCHEMA_VERSION as SCHEMA_VERSION
from ouroboros.state.record_base import Record as Record
from ouroboros.state.record_base import now_iso as now_iso


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
    """Results the model has not seen, shown cut after the server refused a prompt."""

    kind: Literal["cut"] = "cut"
    session: int
    cuts: dict[str, int]
    """Bytes shown, by call id."""


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
    for `resume`, the tools' confinement, a refused or silently cut prompt, a missed wind-down.
    Journalled like everything else, so what people read is a fold of the journal."""

    kind: Literal["notice"] = "notice"
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
    reason: EndReason
    detail: str = Field("", validation_alias=AliasChoices("detail", "summary"))


JournalRecord = Annotated[
    RunStart
    | Starting
    | SessionStart
    | MessageRecord
    | ToolStarted
    | Mask
    | Cut
    | Refused
    | Compaction
    | WindDown
    | SideCall
    | Notice
    | CompactionFailed
    | LoopDetected
    | Told
    | Paused
    | Resumed
    | Checkpoint
    | Rewinding
    | Rewound
    | McpOffered
    | McpFault
    | WindowChange
    | SessionEnd
    | RunEnd,
    Field(discriminator="kind"),
]
JOURNAL_RECORD: TypeAdapter[JournalRecord] = TypeAdapter(JournalRecord)
