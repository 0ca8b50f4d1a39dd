"""How the model's tool calls travel (`llm.tool_protocol`): natively, as the server's structured
calls, or as text the harness writes and reads back; and what a session checks of each reply
and call before anything depends on it.

`ProtocolModel` stands between a session and the model. In the native protocol it sends the
tool schemas, and a reply with no structured call whose text holds calls (`reply_reader`) makes
those calls, taken out of its text. In the text protocol it sends no schemas: the tools are
described in the system message, the conversation goes as system, user and assistant messages
(`text_wire`), and the calls the reply's text holds are its calls, the text kept as written.
Either way the reply it returns is an ordinary one with its calls, marked with the format they
were read from (`Completion.calls_from_text`, journalled on the message record), so the rest of
the harness (the journal, the view, masking, carry-over) is the same in both; only what is sent
differs, derived message by message (a message's form never depends on a later one, so the
prefix the server has cached stays the same from one request to the next).

The reply is journalled as meant (`reply_text`): a server may leave a stop token in the text (a
base model behind a ChatML fallback writes `<|im_end|>` and goes on with a made-up next turn),
and the reply ends there. Calls are read only from what the model finished saying
(`finished_part`). Arguments over `llm.max_tool_argument_bytes` are kept in neither the call nor
the text (the action as written becomes the stand-in). Every regex here is possessive: a reply
of megabytes is read in time linear in its length.

Calls written as text are read by `reply_reader.read_reply`, in every form small models write
them (several a reply, near tool names, a ```bash block): its docstring says what, and why it is
no longer strict (a strict reader answered a small model's every reply "use the tools", and the
model copied the answer). Calls read from the text are marked with the format they came in
(`calls_from_text`); the text as written is journalled beside the reply (`written`).

`auto` is native until the server refuses tools (`REFUSES_TOOLS`) or says the model's template
cannot render them; then it is text for the rest of the run, said once in a warning the fold
keeps (`fold.SWITCH`). A model that writes its calls as text under a template that renders
tools stays native: the reader reads them there as well, and a switch would change the start
of every prompt, the form the model sees its calls in, and put the text protocol's examples
before a model that copies them.

Of a reply, the harness records and runs only what holds whatever the server sent (what the
session records of a call beside its reply, its figures and notices, is `run/call_notices.py`'s):

- **Call ids are unique in the run.** Results, started calls, masks and cuts are all found by id:
  a server that sends `call_0` for every call would have each later call taken for one already
  run (and answered "interrupted"). A repeated or missing id, or one no id looks like (long,
  control characters), is replaced by a fresh one before the reply is journalled; the message
  record keeps which id the server sent (`renamed_calls`).
- **A reply runs at most `llm.max_tool_calls_per_reply` calls.** The rest are dropped from the
  recorded reply and the agent is told how many in one message: an error result each would
  itself fill the window (5,000 calls, 5,000 results), and a step that big cannot be carried
  into the next session. **Calls read from a reply's text run one a reply**, the first: a small
  model writes a chain of calls it has not seen the results of (the real one read a file, then
  overwrote it with made-up text in the same reply, before the read's result came back).
- **Arguments longer than `llm.max_tool_argument_bytes`, or nested too deeply for the JSON
  parser, are not run, nor kept.** The recorded call holds a stand-in naming the size; its
  error result says why. Otherwise the arguments would be stored twice (in the call, and
  beside its result) and sent back every turn.
- **A call the reply was cut off in is not run, nor kept.** At the output limit (`finish_reason`
  "length") the last call's arguments may stop mid-way: when they are no JSON, the recorded call
  holds a stand-in naming how many bytes came, and its error result says which tool, where it
  was cut and how to do it in smaller calls (`prompts.cut_in_call`).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

from ouroboros.context.tokens import raw_units, tools_estimate
from ouroboros.ground import prompts
from ouroboros.ground.config import LLMSettings, ToolProtocol
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    ToolCall,
)
from ouroboros.model.block_actions import Span
from ouroboros.model.llm import (
    CUT,
    Completion,
    FatalError,
    Model,
    TransientError,
    unfinished,
)
from ouroboros.model.reply_reader import parameters_of, read_reply
from ouroboros.model.text_calls import (
    TextCall,
    action_text,
    names,
    reply_text,
    text_wire,
    tools_description,
)
from ouroboros.state.fold import SWITCH, RunState
from ouroboros.state.journal import Journal

# --- What a session checks of each reply.

MAX_ID_CHARS = 64
"""Longer ids are renamed: an id is sent back with every later request."""
OMITTED = "ouroboros_omitted_bytes"
"""The one key of the arguments that stand in for ones too long to keep."""


@dataclass(frozen=True)
class Admitted:
    message: AssistantMessage
    """The reply as it is journalled and run."""
    renamed: dict[str, str] = field(default_factory=dict)
    """Fresh id -> the id the server sent."""
    dropped: int = 0
    """Calls past `llm.max_tool_calls_per_reply`, not recorded."""
    calls_from_text: str | None = None
    """The format the calls were read from the reply's text in (`Completion.calls_from_text`)."""
    unknown_tools: tuple[str, ...] = ()
    """Tools the reply called that there are not (`Completion.unknown_tools`)."""
    written: str | None = None
    """The reply's text as written, where calls were taken out of it (`Completion.written`)."""

    def record_fields(self) -> dict[str, object]:
        """What the message record says of what the harness made of the reply."""
        return {
            "renamed_calls": self.renamed or None,
            "dropped_calls": self.dropped or None,
            "calls_from_text": self.calls_from_text,
            "unknown_tools": list(self.unknown_tools) or None,
            "written": self.written,
        }


def _usable(call_id: str) -> bool:
    return 0 < len(call_id) <= MAX_ID_CHARS and call_id.isascii() and call_id.isprintable()


def _fresh(index: int, taken: Collection[str], also: Collection[str]) -> str:
    while True:
        candidate = f"call_{index}_{secrets.token_hex(4)}"
        if candidate not in taken and candidate not in also:
            return candidate


def admit(
    reply: AssistantMessage,
    seen: Collection[str],
    max_calls: int,
    max_argument_bytes: int,
    cut_off: bool = False,
) -> Admitted:
    """The reply with unique ids, at most `max_calls` calls, no argument over the size cap, and
    no call it was `cut_off` (at the output limit) in. `seen`: every call id the run has
    recorded."""
    calls: list[ToolCall] = []
    used: set[str] = set()
    renamed: dict[str, str] = {}
    for index, call in enumerate(reply.tool_calls[:max_calls]):
        call_id = call.id
        if not _usable(call_id) or call_id in seen or call_id in used:
            call_id = _fresh(index, seen, used)
            renamed[call_id] = call.id
        used.add(call_id)
        arguments = call.arguments
        size = len(arguments.encode())
        if cut_off and call is reply.tool_calls[-1] and unfinished(arguments):
            # Only the last call can be cut; said first, whatever its length.
            arguments = json.dumps({CUT: size})
        elif size > max_argument_bytes or _too_deep(arguments):
            arguments = json.dumps({OMITTED: size})
        calls.append(ToolCall(id=call_id, name=call.name, arguments=arguments))
    dropped = max(0, len(reply.tool_calls) - max_calls)
    if not renamed and not dropped and tuple(calls) == reply.tool_calls:
        return Admitted(reply)
    message = reply.model_copy(update={"tool_calls": tuple(calls)})
    return Admitted(message, renamed, dropped)


def _too_deep(arguments: str) -> bool:
    """JSON nested past what Python's parser reads (a few thousand `[`): every reader of the
    journal that looks into the arguments (masks, carry-over, search) would fail on it."""
    try:
        json.loads(arguments)
    except RecursionError:
        return True
    except ValueError:
        return False  # not JSON: the tool runner says so, and nothing else reads it
    return False


def omitted_bytes(call: ToolCall, key: str = OMITTED) -> int | None:
    """The size of the arguments this call was sent with, if they were too long to keep (or,
    with `key` `CUT`, if the reply was cut off in them)."""
    if len(call.arguments) > 64 or key not in call.arguments:
        return None
    try:
        values = json.loads(call.arguments)
    except json.JSONDecodeError:
        return None
    size = values.get(key) if isinstance(values, dict) and len(values) == 1 else None
    return size if isinstance(size, int) else None


def too_long(size: int, cap: int) -> str:
    if size <= cap:
        return (
            f"error: not run: the arguments ({size:,} bytes) nest deeper than JSON can be read, "
            "and were not kept. Send flat arguments."
        )
    return (
        f"error: not run: the arguments were {size:,} bytes, over llm.max_tool_argument_bytes "
        f"({cap:,}), and were not kept. Send less in one call: write a big file in parts "
        "(file_write a first part, then shell_exec to append the others)."
    )


def was_cut(call: ToolCall) -> bool:
    return omitted_bytes(call, CUT) is not None


def not_run(call: ToolCall, llm: LLMSettings) -> str | None:
    """The error result of a call that stands in for one not kept (too long, or cut off)."""
    if (size := omitted_bytes(call)) is not None:
        return too_long(size, llm.max_tool_argument_bytes)
    if (size := omitted_bytes(call, CUT)) is not None:
        return f"error: {prompts.cut_in_call(call.name, size, llm.max_output_tokens)}"
    return None


def dropped_calls(dropped: int, ran: int) -> str:
    if ran == 1:
        return (
            f"Your last reply wrote {dropped + 1:,} tool calls; only the first ran. Write one "
            "call a reply, the next once you have seen its result."
        )
    return (
        f"Your last reply had {ran + dropped:,} tool calls; only the first {ran} were run. The "
        f"other {dropped:,} were dropped and not run: make fewer calls per reply, and send again "
        "those you still need."
    )


def admitted_reply(completion: Completion, seen: Collection[str], llm: LLMSettings) -> Admitted:
    """The reply as it is recorded and run (`admit`), with what was read of its text. `seen`:
    every call id the run has recorded. Of calls read from the text only the first runs (a
    small model writes a call, then results it makes up and more calls from them), but files
    written whole: each is the model's last word on its file, and a change to two files comes
    in one reply."""
    whole_files = completion.calls_from_text == "file_block"
    one = completion.calls_from_text is not None and not whole_files
    admitted = admit(
        completion.message,
        seen,
        1 if one else llm.max_tool_calls_per_reply,
        llm.max_tool_argument_bytes,
        cut_off=completion.finish_reason == "length",
    )
    return replace(
        admitted,
        calls_from_text=completion.calls_from_text,
        unknown_tools=completion.unknown_tools,
        written=completion.written,
    )


# --- The protocol in force, between a session and the model.

REFUSES_TOOLS = re.compile(
    r"does not support tools"  # Ollama, HTTP 400, for a model whose template has no tools
    r"|tool choice requires --enable-auto-tool-choice"  # vLLM, HTTP 400, without a tool parser
    r"|tools param requires --jinja",  # llama-server before --jinja was its default, HTTP 500
    re.IGNORECASE,
)
"""A server's refusal of a request with tools, matched before a 5xx is taken for a passing
fault (it would be retried for ever)."""


def text_in_force(protocol: ToolProtocol, state: RunState) -> bool:
    return protocol in ("text", "files") or (
        protocol == "auto" and state.protocol.switch_reason is not None
    )


def schema_raw(protocol: ToolProtocol, schemas: list[dict[str, Any]], renders: bool) -> int:
    """Raw tokens every request spends on the tools: the schemas (none where the template drops
    them), or their description in the system message; `auto`, the larger."""
    native = tools_estimate(schemas) if renders else 0
    text = raw_units(tools_description(schemas))
    return {"native": native, "text": text, "files": 0}.get(protocol, max(native, text))


@dataclass
class ProtocolModel:
    """The `Model` a session calls: `inner` spoken to in the protocol in force."""

    inner: Model
    journal: Journal
    protocol: ToolProtocol
    max_argument_bytes: int
    """`llm.max_tool_argument_bytes`: longer arguments are not kept."""
    renders_tools: bool = True
    """False: the server said the model's template drops tool schemas."""
    file_text: Callable[[str], str | None] | None = None
    """A workspace file's text as it is now (None: not a text file): in the files protocol, a
    block no path names may be the new text of a file the session showed (`read_reply`)."""

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        state = self.journal.state
        self._switch_if_due(state)
        text = text_in_force(self.protocol, state)
        if text:
            # The files protocol describes no tool: a file written whole is its one action.
            # Every call of the files protocol is read from the text: the replies go as written.
            files = self.protocol == "files"
            sent = text_wire(messages, [] if files else tools, None if files else calls_written)
            completion = _as_meant(await self.inner.complete(sent, []))
        else:
            try:
                completion = _as_meant(await self.inner.complete(messages, tools))
            except (FatalError, TransientError) as e:
                if not REFUSES_TOOLS.search(str(e)):
                    raise
                if self.protocol != "auto":
                    raise FatalError(
                        f'{e}; set llm.tool_protocol = "text" (or "auto") for a model without '
                        "native tool calls"
                    ) from None
                self._switch(f"the server refuses tools for this model ({str(e)[:200]})")
                return await self.complete(messages, tools)
        message = completion.message
        cut_off = completion.finish_reason == "length"
        reading = read_reply(
            message.content,
            bool(message.tool_calls),
            names(tools),
            text,
            cut_off,
            parameters_of(tools),
            self._files_shown(state),
        )
        if reading.unknown:
            completion = replace(completion, unknown_tools=reading.unknown)
        if not reading.calls:
            return completion
        # In the text protocol the action stays where it was written: the text is the call, and
        # what is sent back is the reply as the model wrote it.
        content = self._as_kept(message.content, reading.spans) if text else reading.text
        return self._with_calls(completion, reading.calls, reading.format or "json", content)

    def _files_shown(self, state: RunState) -> dict[str, str]:
        """The files this session's opening showed, as they are now."""
        if self.file_text is None:
            return {}
        texts = {path: self.file_text(path) for path in sorted(state.shown_files)}
        return {path: text for path, text in texts.items() if text is not None}

    def _as_kept(self, content: str, spans: tuple[Span, ...]) -> str:
        """A text-protocol reply as kept: whole, but each call too long to keep, which would be
        sent back every turn, is written as the call that stands in for it. `content` is the
        reply as meant (`reply_text`), which the spans index."""
        kept, position = [], 0
        for span in spans:
            size = len(span.call.arguments.encode())
            # The calls of one Mistral list share a span: it goes whole, for the first too long.
            if size > self.max_argument_bytes and span.start >= position:
                stand_in = action_text(span.call.name, {OMITTED: size})
                kept += [content[position : span.start], stand_in]
                position = span.end
        return "".join(kept) + content[position:]

    def _switch_if_due(self, state: RunState) -> None:
        if self.protocol != "auto" or state.protocol.switch_reason is not None:
            return
        if not self.renders_tools:
            self._switch("the server says the model's chat template cannot render tools")

    def _switch(self, why: str) -> None:
        self.journal.notify(
            "warning",
            # What happens first, the server's words last: a line cut to the terminal's width
            # keeps what the person needs.
            f'llm.tool_protocol "auto" goes over to the text protocol for the rest of the run '
            f"(tools described in the system prompt, one action block per reply): {why}",
            session=self.journal.state.session,
            once=SWITCH,
        )

    def _with_calls(
        self,
        completion: Completion,
        calls: tuple[TextCall, ...],
        form: str,
        content: str | None,
    ) -> Completion:
        """The reply with the calls read from its text, each with an id new to the run;
        `content`, its text without them (a recovered call is kept as a call, not twice)."""
        taken = self.journal.state.call_ids
        ids: list[str] = []
        while len(ids) < len(calls):
            candidate = f"call_text_{secrets.token_hex(6)}"
            if candidate not in taken and candidate not in ids:
                ids.append(candidate)
        message = AssistantMessage(
            content=completion.message.content if content is None else content,
            tool_calls=tuple(
                ToolCall(id=i, name=c.name, arguments=c.arguments)
                for i, c in zip(ids, calls, strict=True)
            ),
        )
        as_written = completion.message.content
        kept = None if as_written == message.content else as_written
        return replace(completion, message=message, calls_from_text=form, written=kept)


def calls_written(text: str, tools: list[str]) -> list[tuple[str, str]]:
    """The calls a reply's text makes of `tools`, for `text_wire`."""
    return [(c.name, c.arguments) for c in read_reply(text, False, tools, True, False).calls]


def _as_meant(completion: Completion) -> Completion:
    """The reply as journalled: what the model meant to say (`reply_text`)."""
    content = reply_text(completion.message.content)
    if content == completion.message.content:
        return completion
    return replace(completion, message=completion.message.model_copy(update={"content": content}))
