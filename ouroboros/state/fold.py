"""Where a run stands: a fold over its journal records, the same code live and on resume.

Nothing else holds a copy of the run's state: the view the model is sent (`ContextView`), the
ledger (anchor and calibration) and the counters are all here, moved only by `apply`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import singledispatchmethod
from typing import Any, ClassVar, TypeVar, cast

from ouroboros.context.ledger import Ledger
from ouroboros.context.mask import cut_off_reply
from ouroboros.context.tokens import PrefillTally, raw_estimate
from ouroboros.context.view import ContextView
from ouroboros.ground import plugins
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import AssistantMessage, Message, UserMessage
from ouroboros.state.loop_tally import LoopTally, SessionLoops, session_calls
from ouroboros.state.plan import RunPlan
from ouroboros.state.records import (
    Compaction,
    CompactionFailed,
    Cut,
    EndReason,
    LoopDetected,
    Mask,
    MessageRecord,
    Notice,
    Record,
    Refused,
    RunEnd,
    RunStart,
    SessionEnd,
    SessionStart,
    SideCall,
    Starting,
    ToolStarted,
    WindDown,
    WindowChange,
)

RECENT = 200
"""Replies and results looked at: the newest, so the lines follow what the agent does now."""

SESSION = {"session": True}
"""Marks the fields a session start resets: the rest is the run's, and all a snapshot keeps."""


# --- What the fold keeps of the tool protocol (`llm.tool_protocol`): whether `auto` switched to
# text and why, the replies in a row whose calls were read from their text, by format.

SWITCH = "tool_protocol_text"
"""The `Notice.once` name of `auto`'s switch to the text protocol: given once, it holds for the
rest of the run (resumes too)."""


@dataclass
class ProtocolTally:
    switch_reason: str | None = None
    """Why `auto` went over to the text protocol; None while it is native."""
    from_text: dict[str, int] = field(default_factory=dict)
    """Calls read from a reply's text, by the format they were written in."""

    def message(self, record: MessageRecord) -> None:
        if not isinstance(record.message, AssistantMessage):
            return
        written = record.calls_from_text
        if written is None:
            return
        self.from_text[written] = self.from_text.get(written, 0) + len(record.message.tool_calls)

    def notice(self, record: Notice) -> None:
        if is_switch(record):
            self.switch_reason = record.message

    def line(self) -> str:
        """What `status` says of it: calls read from text by format, and the switch; nothing
        for a run whose calls all travelled natively (no row)."""
        count = sum(self.from_text.values())
        formats = ", ".join(f"{name} {n:,}" for name, n in sorted(self.from_text.items()))
        read = f"{count:,} read from text ({formats})" if count else "none read from text"
        why = self.switch_reason
        if why is None:
            return read if count else ""
        return f"{read}; text protocol since: {why}"


def cut_off_before_a_call(record: MessageRecord) -> bool:
    """A reply the server cut off at the output limit with no tool call in it (its text, if
    any, shown as a placeholder: `context.mask.cut_off_reply`)."""
    message, usage = record.message, record.usage
    return (
        isinstance(message, AssistantMessage)
        and not message.tool_calls
        and usage is not None
        and usage.finish_reason == "length"
    )


EMPTY_DRAWN_AGAIN = 2
"""Empty replies in a row that are left out and the same prompt asked again. A small model
sometimes ends its turn at once after a tool result; answered with words, it copies them (an
empty ```json block, in reply to an example), while drawn again it goes on as if nothing
happened. Past this many, the reply is shown and answered: a model that always says nothing is
told so."""


def empty_reply(record: MessageRecord) -> bool:
    """A reply that said nothing and called nothing, and was not cut off."""
    message, usage = record.message, record.usage
    return (
        isinstance(message, AssistantMessage)
        and not message.tool_calls
        and not message.content.strip()
        and usage is not None
        and usage.finish_reason != "length"
    )


def as_shown(message: AssistantMessage) -> AssistantMessage:
    """A reply cut off before any call as the model sees it again: the placeholder, where it
    is shorter than the text it stands for (at a tiny output limit it would not be)."""
    short = cut_off_reply(message)
    return short if len(short.content) < len(message.content) else message


def is_switch(record: Notice) -> bool:
    """Whether `record` is the switch to text. Its requests start otherwise (the tools in the
    system message, no schemas), so what the server cached of the request before is no measure
    of its cache: the fold starts the cache check again."""
    return record.once == SWITCH


class Part:
    """A feature's share of the run's state (its folder declares it; `ouroboros/features.py`
    names its module, imported before a state is made): one instance in every `RunState`, shown
    every record after the core has
    folded it. What a session start resets, it resets when shown the `SessionStart`: a snapshot
    keeps the whole part as it stands right after one. A subclass is a dataclass, every field
    with a default."""

    folds: ClassVar[tuple[type[Record], ...]] = ()
    """The kinds of record it is shown: only those, so that a model call's records run no
    feature's code but the few that read them."""
    folds_results: ClassVar[bool] = False
    """Shown the records of tool results too (a `MessageRecord` with its `ToolRun`), not those
    of the model's replies: a model call still runs none of its code."""
    _said: dict[str, Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        PARTS.append(cls)

    def apply(self, record: Record, state: RunState) -> None:
        """Fold one record of its `folds` in."""

    def status(self) -> dict[str, Any]:
        """Its entries of `status.json`'s `run` (`sinks/events.of_state`), as plain JSON."""
        return {}

    def said(self) -> dict[str, Any]:
        """`status()`, made again only once the part folded a record since."""
        if self._said is None:
            self._said = self.status()
        return self._said


PARTS: list[type[Part]] = []
"""Every feature's part, as its class was defined."""
P = TypeVar("P", bound=Part)


def parts() -> tuple[type[Part], ...]:
    """Every feature's part, their modules imported first (`ground/plugins.py`), by module: the
    order they fold in and a snapshot saves them in, whichever was imported first."""
    plugins.import_all(plugins.RECORDS)
    return tuple(sorted(PARTS, key=lambda part: part.__module__))


def new_parts() -> dict[str, Part]:
    return {part.__name__: part() for part in parts()}


@dataclass
class RunState:
    """Every field is declared here once: the fold moves them, `snapshot` saves the run's ones
    (those not marked `SESSION`) by this declaration."""

    started_at: float | None = None
    last_ts: str | None = None
    """When the newest record was written: where the wall clock of a run that stopped stopped
    (`timestamps.wall_time`)."""
    session: int = 0
    session_open: bool = field(default=False, metadata=SESSION)
    session_turns: int = field(default=0, metadata=SESSION)
    total_turns: int = 0
    total_prompt_tokens: int = 0
    total_completion_tokens: int = 0
    restarts: int = 0
    prefill: PrefillTally = field(default_factory=PrefillTally)
    ledger: Ledger = field(default_factory=Ledger)
    view: ContextView = field(default_factory=ContextView, metadata=SESSION)
    """The current (or just ended) session: its messages, and what the model is sent of them."""
    started_calls: set[str] = field(default_factory=set, metadata=SESSION)
    call_ids: set[str] = field(default_factory=set)
    """Every tool-call id the run recorded: a new reply's may repeat none (`admit`)."""
    dropped_calls: int = field(default=0, metadata=SESSION)
    """Calls the session's newest reply had past `llm.max_tool_calls_per_reply`: the agent is
    told after its results."""
    recent_replies: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT))
    """Tokens the newest replies take in the prompts after them (they place the wind-down):
    their completion tokens; a reply cut off before any call, its placeholder's."""
    wind_down_reply_tokens: list[tuple[int, int]] = field(default_factory=list)
    """Every reply the agent gave after a wind-down message in the run: which one it was after
    the message (1, 2, ...) and the tokens it takes in the prompts after it."""
    wind_down_replies: int | None = field(default=None, metadata=SESSION)
    """Replies the agent gave since this session's wind-down message; None before it."""
    cut_off_text: str | None = field(default=None, metadata=SESSION)
    """The newest reply's text as written, where the server cut it off at the output limit
    (the view may show a placeholder); a resumed step is answered from it."""
    unknown_tools: tuple[str, ...] = field(default=(), metadata=SESSION)
    """Tools the newest reply called that there are not: its answer names the real ones."""
    replies_without_calls: int = field(default=0, metadata=SESSION)
    """The session's newest replies in a row that called no tool: each is shown another
    example call."""
    calls_read: bool = field(default=False, metadata=SESSION)
    """The newest reply's calls were read from its text: each is whole (the reader reads only
    what is finished), whether or not the reply was cut off after it."""
    shown_files: frozenset[str] = field(default=frozenset(), metadata=SESSION)
    """The files this session's opening showed whole (the files protocol)."""
    drawn_again: bool = field(default=False, metadata=SESSION)
    """The newest reply was empty and is left out of the view: the same prompt is asked again
    (`EMPTY_DRAWN_AGAIN`)."""
    ended_reason: EndReason | None = field(default=None, metadata=SESSION)
    """Why the last session ended, while no next session has started."""
    ended_detail: str = field(default="", metadata=SESSION)
    refused_unanswered: bool = field(default=False, metadata=SESSION)
    """The server refused the newest request and nothing has been done about it yet: a resume
    makes the room first, as the live run was doing, instead of asking again."""
    refusal: str = field(default="", metadata=SESSION)
    """What the server said when it last refused a prompt as too long."""
    refusal_window: int | None = field(default=None, metadata=SESSION)
    """The window the server stated refusing a prompt since the newest reply: the step before
    was whole (a resume takes the window, and decides nothing again under it)."""
    run_end: RunEnd | None = None
    """How the supervisor last stopped; None while it runs."""
    window: WindowFigures | None = None
    limits: RunLimits | None = None
    """As the latest start of the supervisor recorded them (the window: or a change since)."""
    window_change: WindowChange | None = None
    """The newest change of the window in force since the run began (a refusal stated a smaller
    one): a resume keeps working in it."""
    warned: set[str] = field(default_factory=set)
    """Warnings given once a run, by name (`Notice.once`)."""
    compaction_retry_above: int = field(default=0, metadata=SESSION)
    """After a compaction, or a failed one: the raw size the view must reach before the next."""
    last_request: tuple[list[Message], int] | None = field(default=None, metadata=SESSION)
    """The session's newest request and its prompt tokens; None after a call the server's
    cache saw in between (a compaction's): what the cache check compares the next with."""
    loops: LoopTally = field(default_factory=LoopTally)
    session_loops: SessionLoops = field(default_factory=SessionLoops, metadata=SESSION)
    plan: RunPlan = field(default_factory=RunPlan)
    """The agent's plan: the newest a `plan` call saved (shown at every session's start)."""
    protocol: ProtocolTally = field(default_factory=ProtocolTally)
    tools: dict[str, int | float | str | bool | None] | None = None
    """How tool commands run (the sandbox, network, processes, limits): the run's `tools`
    notice, for `status` (the terminal's line has only the sandbox's kind)."""
    parts: dict[str, Part] = field(default_factory=new_parts)
    """The features' states, by their class's name (`part`)."""

    def __post_init__(self) -> None:
        # A snapshot's list becomes the bounded deque again.
        self.recent_replies = deque(self.recent_replies, maxlen=RECENT)

    @property
    def total_tokens(self) -> int:
        return self.total_prompt_tokens + self.total_completion_tokens

    @property
    def messages(self) -> list[Message]:
        return self.view.history

    @property
    def finished(self) -> bool:
        """The agent finished: nothing follows."""
        return self.run_end is not None and self.run_end.reason == EndReason.FINISH

    def part(self, kind: type[P]) -> P:
        """The feature's state of this class."""
        return cast(P, self.parts[kind.__name__])

    def apply(self, record: Record) -> None:
        """Fold one record in."""
        self.last_ts = record.ts
        self.fold(record)

    def fold(self, record: Record) -> None:
        """The core's part first, then each feature's, then what the record implies."""
        self._fold(record)
        result = isinstance(record, MessageRecord) and record.tool is not None
        for part in self.parts.values():
            if isinstance(record, part.folds) or (result and part.folds_results):
                part.apply(record, self)
                part._said = None
        for implied in record.implied():
            self.fold(implied)

    @singledispatchmethod
    def _fold(self, record: Record) -> None:
        """What one record changes (a kind not listed here changes nothing)."""

    @_fold.register
    def _(self, record: MessageRecord) -> None:
        self.refused_unanswered = False
        if (usage := record.usage) is not None:
            # The view is what was sent (first record after it): kept while the check can use it.
            checked = usage.cached_tokens is not None and "cache" not in self.warned
            self.last_request = (self.view.messages(), usage.prompt_tokens) if checked else None
        message, cut_off = record.message, cut_off_before_a_call(record)
        if isinstance(message, AssistantMessage):
            self.dropped_calls = record.dropped_calls or 0
            self.refusal_window = None
            at_limit = record.usage is not None and record.usage.finish_reason == "length"
            self.cut_off_text = message.content if at_limit else None
            self.unknown_tools = tuple(record.unknown_tools or ())
            self.calls_read = record.calls_from_text is not None
            calls = bool(message.tool_calls)
            again = empty_reply(record) and self.replies_without_calls < EMPTY_DRAWN_AGAIN
            self.drawn_again = again
            self.replies_without_calls = 0 if calls else self.replies_without_calls + 1
            if cut_off:
                message = as_shown(message)
        if not self.drawn_again:
            self.join(message)
        self.plan.apply(record)
        self.protocol.message(record)
        if (usage := record.usage) is not None:
            self.prefill.add(usage)
            completion = shown = usage.completion_tokens
            if cut_off or record.written is not None:
                # What it takes in the prompts after it (a thinking model's reasoning is not
                # sent back either, nor what followed the calls read from a reply's text): the
                # room, and the anchor of the next projection.
                calibration = self.ledger.calibration
                shown = calibration.message_tokens(message)
                as_sent = max(shown - round(calibration.frame), 0)
                usage = usage.model_copy(
                    update={"completion_tokens": as_sent, "raw_reply": raw_estimate(message)}
                )
            self._turn(usage.prompt_tokens, completion, 0 if self.drawn_again else shown)
            self.ledger.apply(usage)

    @_fold.register
    def _(self, record: ToolStarted) -> None:
        self.started_calls.add(record.call_id)

    @_fold.register
    def _(self, record: Mask) -> None:
        self.view.mask(record.call_ids)
        self.refused_unanswered = False

    @_fold.register
    def _(self, record: Cut) -> None:
        self.view.cut(record.cuts)
        self.refused_unanswered = False

    @_fold.register
    def _(self, record: WindDown) -> None:
        if record.message is not None:
            self.join(record.message)

    @_fold.register
    def _(self, record: Refused) -> None:
        self.ledger.apply(record)  # an exact count of a refused prompt teaches; it is no turn
        self.refused_unanswered = True

    @_fold.register
    def _(self, record: Compaction) -> None:
        self.view.compact(record.start, record.recap)
        # Not again before the history grows: a resume right after it decides as the run did.
        self.compaction_retry_above = self.view.raw_total + 1

    @_fold.register
    def _(self, record: CompactionFailed) -> None:
        self.compaction_retry_above = record.retry_above

    @_fold.register
    def _(self, record: Notice) -> None:
        if record.once is not None:
            self.warned.add(record.once)
        if record.event == "tools" and not record.message:  # MCP servers' say it in words
            self.tools = dict(record.details)
        self.protocol.notice(record)
        self.last_request = None if is_switch(record) else self.last_request
        if record.event == "context_overflow":
            # Without a count (`Refused`) a resume asks again: nothing learnt, the same room.
            self.refusal, self.session_loops.refused = record.message, True
            stated = record.details.get("n_ctx")
            self.refusal_window = stated if isinstance(stated, int) else None

    @_fold.register
    def _(self, record: SideCall) -> None:
        # Tokens spent outside the conversation: no turn, no anchor.
        self.last_request = None
        self.total_prompt_tokens += record.usage.prompt_tokens
        self.total_completion_tokens += record.usage.completion_tokens
        self.prefill.add(record.usage)

    @_fold.register
    def _(self, record: LoopDetected) -> None:
        self.loops.caught(record)
        if record.message is not None:
            self.join(record.message)
        self.session_loops.caught(record, len(self.view.history))

    @_fold.register
    def _(self, record: WindowChange) -> None:
        self.window, self.window_change = record.window, record

    @_fold.register
    def _(self, record: SessionEnd) -> None:
        self.session_open = False
        self.ended_reason = record.reason
        self.ended_detail = record.detail
        # Only refusals no room could answer count: one the harness recovered from is no loop.
        if record.reason == EndReason.CONTEXT_OVERFLOW:
            self.loops.overflows += 1
        else:
            self.loops.overflows = 0

    @_fold.register
    def _(self, record: RunEnd) -> None:
        self.run_end = record

    def join(self, message: Message) -> None:
        """A message joins the session's view."""
        self.view.append(message)
        # Counted as records arrive, so no turn has to scan the session for it.
        if isinstance(message, UserMessage) and message.origin == "wind_down":
            self.wind_down_replies = 0
        elif isinstance(message, AssistantMessage) and self.wind_down_replies is not None:
            self.wind_down_replies += 1
        if isinstance(message, AssistantMessage):
            self.call_ids.update(c.id for c in message.tool_calls)

    def _turn(self, prompt_tokens: int, completion_tokens: int, shown: int) -> None:
        """A turn is a model reply with its usage: carried-over replies are none. `shown`: the
        tokens the reply takes in the prompts after it."""
        self.recent_replies.append(shown)
        if self.wind_down_replies is not None:
            self.wind_down_reply_tokens.append((self.wind_down_replies, shown))
        self.total_prompt_tokens += prompt_tokens
        self.total_completion_tokens += completion_tokens
        self.session_turns += 1
        self.total_turns += 1

    @_fold.register
    def _(self, record: SessionStart) -> None:
        if self.session:
            self.restarts += 1
            self.loops.previous_calls = session_calls(self.view, self.view.opening)
        self.session = record.session
        fresh = RunState()
        for f in fields(RunState):
            if f.metadata.get("session"):
                setattr(self, f.name, getattr(fresh, f.name))
        self.session_open = True
        self.view = ContextView(record.messages)
        self.shown_files = frozenset(record.shown)

    @_fold.register
    def _(self, record: Starting) -> None:
        self.limits = record.limits

    @_fold.register
    def _(self, record: RunStart) -> None:
        if self.started_at is None:
            self.started_at = datetime.fromisoformat(record.ts).timestamp()
        self.run_end = None
        if record.window is not None:
            self.window = record.window
            self.ledger.calibration.set_frame(record.window.frame_tokens)
        if record.limits is not None:
            self.limits = record.limits


def replay(records: list[Record]) -> RunState:
    state = RunState()
    for record in records:
        state.apply(record)
    return state
