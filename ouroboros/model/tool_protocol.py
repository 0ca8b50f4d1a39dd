"""How the model's tool calls travel (`llm.tool_protocol`): natively, as the server's structured
calls, or as text the harness writes and reads back; and what a session checks of each reply
and call before anything depends on it.

`ProtocolModel` stands between a session and the model. In the native protocol it sends the
tool schemas, and a reply with no structured call whose text holds a well-formed call of an
offered tool (`recover`) becomes that call. In the text protocol it sends no schemas: the tools
are described in the system message, the conversation goes as system, user and assistant
messages (`text_wire`), and the reply's one action block (`read_action`) becomes its call.
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

The two readers are strict on purpose: a near-miss run as a call does harm, a missed one only
costs a "continue". `recover` reads the formats models commonly write (Hermes `<tool_call>`
tags, a bare JSON object with `name` and `arguments`, the same in a fenced ```json block,
Mistral's `[TOOL_CALLS]`): the call must end the reply (a model that calls stops there; JSON
followed by more prose is an example it talks about), the JSON must parse, the name must be
offered, the arguments must be an object, and a format that holds one call must hold exactly
one. `read_action` reads the text protocol, where a ```bash block runs in the shell and a
```json block `{"tool": ..., "arguments": {...}}` calls any tool: exactly one action, or what
is wrong with the reply.

`auto` is native until the server refuses tools (`REFUSES_TOOLS`), the server says the model's
template cannot render them, or the model has written its calls as text `TEXT_STREAK` replies
in a row; then it is text for the rest of the run, said once in a warning the fold keeps
(`protocol_tally.SWITCH`).

Of a reply, the harness records and runs only what holds whatever the server sent; every
finding is a journal record (`Notice`, `Refused`), never a line aside:

- **Call ids are unique in the run.** Results, started calls, masks and cuts are all found by id:
  a server that sends `call_0` for every call would have each later call taken for one already
  run (and answered "interrupted"). A repeated or missing id, or one no id looks like (long,
  control characters), is replaced by a fresh one before the reply is journalled; the message
  record keeps which id the server sent (`renamed_calls`).
- **A reply runs at most `llm.max_tool_calls_per_reply` calls.** The rest are dropped from the
  recorded reply and the agent is told how many in one message: an error result each would
  itself fill the window (5,000 calls, 5,000 results), and a step that big cannot be carried
  into the next session.
- **Arguments longer than `llm.max_tool_argument_bytes`, or nested too deeply for the JSON
  parser, are not run, nor kept.** The recorded call holds a stand-in naming the size; its
  error result says why. Otherwise the arguments would be stored twice (in the call, and
  beside its result) and sent back every turn.
- **A call the reply was cut off in is not run, nor kept.** At the output limit (`finish_reason`
  "length") the last call's arguments may stop mid-way: when they are no JSON, the recorded call
  holds a stand-in naming how many bytes came, and its error result says which tool, where it
  was cut and how to do it in smaller calls (`prompts.cut_in_call`).
- **Usage that cannot be true is not believed** (`llm.count`), and is named once a run; so is a
  refused prompt's count far from its projection, a count that shows a silently cut prompt, and
  a server that processed again what its cache should have kept.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from typing import Any, Literal

from ouroboros.context.tokens import (
    CallFigures,
    Counting,
    Ledger,
    RawTally,
    above_window,
    raw_estimate,
    raw_units,
    refused_count,
    tools_estimate,
)
from ouroboros.context.tokens import warning as usage_warning
from ouroboros.ground import prompts
from ouroboros.ground.config import LLMSettings, ToolProtocol
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.cache_check import reuse_warning, shared_tokens
from ouroboros.model.llm import (
    CUT,
    Completion,
    ContextOverflow,
    FatalError,
    Model,
    TransientError,
    shown,
    unfinished,
)
from ouroboros.policy.room import Rules, step_figures, zone
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.protocol_tally import SWITCH
from ouroboros.state.records import Refused

# --- A reply's text as the model meant it, and its fenced blocks.

END_TOKENS = re.compile(r"<\|im_end\|>|</s>|<end_of_turn>|<\|eot_id\|>|<\|end\|>")
"""Stop tokens a server leaves in the text when the template's stop is another: the reply ends
at the first outside a fenced block (inside one, `</s>` is HTML a command writes)."""
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
OPEN = re.compile(r"^[ \t]*+(`{3,}+)[ \t]*+([\w+-]*+)[^\n`]*+$", re.MULTILINE)
FENCE_LINE = re.compile(r"^[ \t]*+```", re.MULTILINE)


@dataclass(frozen=True)
class Fence:
    language: str
    body: str
    start: int
    end: int


@lru_cache(maxsize=64)
def _closing(ticks: int) -> re.Pattern[str]:
    """The line that closes a block opened with `ticks` backticks; a stop token may end it
    (```<|im_end|>): the block ends before it."""
    return re.compile(rf"^[ \t]*+`{{{ticks},}}+[ \t]*+(?=$|{END_TOKENS.pattern})", re.MULTILINE)


def fences(text: str) -> list[Fence]:
    """The closed fenced blocks of `text`, in order; a block left open (a reply cut off) is none."""
    found: list[Fence] = []
    position = 0
    while (opening := OPEN.search(text, position)) is not None:
        close = _closing(len(opening[1])).search(text, opening.end())
        if close is None:
            break
        body = text[opening.end() + 1 : close.start()].rstrip("\n")
        found.append(Fence(opening[2].lower(), body, opening.start(), close.end()))
        position = close.end()
    return found


def reply_text(content: str) -> str:
    """The reply as the model meant it, as it is journalled: lines end in `\\n`, and it ends at
    its first stop token outside a fenced block (what follows it the model did not mean to say)."""
    text = content.replace("\r\n", "\n")
    closed = iter(fences(text))
    fence = next(closed, None)
    for stop in END_TOKENS.finditer(text):
        while fence is not None and fence.end <= stop.start():
            fence = next(closed, None)
        if fence is None or stop.start() < fence.start:
            return text[: stop.start()]
    return text


def _open_fence(text: str) -> bool:
    found = fences(text)
    return OPEN.search(text, found[-1].end if found else 0) is not None


def finished_part(text: str, cut_off: bool) -> str | None:
    """The part of a reply its calls are read from: none of reasoning left open (a call there is
    only weighed), nothing of a reply cut off in an open block or reasoning (`cut_off`: what it was
    about to write is unknown)."""
    think = text.rfind(THINK_OPEN)
    if think > text.rfind(THINK_CLOSE):
        return None if cut_off else text[:think]
    return None if cut_off and _open_fence(text) else text


# --- Tool calls written as text, read back.

RecoveryFormat = Literal["hermes", "json", "fenced_json", "mistral"]
ActionFormat = Literal["bash", "json_action"]
SHELL_TOOL = "shell_exec"
SHELL_LANGUAGES = ("bash", "sh", "shell")
JSON_LANGUAGES = ("json",)


@dataclass(frozen=True)
class TextCall:
    name: str
    arguments: str
    """Canonical JSON of the arguments object."""


@dataclass(frozen=True)
class Recovered:
    calls: tuple[TextCall, ...]
    format: RecoveryFormat
    remaining: str
    """The reply's text without the calls (the prose around them)."""
    start: int
    """Where the calls begin in the text read; they run to its end."""


@dataclass(frozen=True)
class Action:
    call: TextCall
    format: ActionFormat | RecoveryFormat
    start: int
    end: int
    """Where the action is written in the reply (`reply_text`)."""


@dataclass(frozen=True)
class FormatProblem:
    what: str
    """What is wrong, as the model is told: "no action", "3 actions", "the json block ..."."""


HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"
BARE_STARTS = 16
"""Lines starting with `{`, from the reply's end, tried as the start of a bare call: a call's
own nested objects take a few; trying every line of a reply made of them would take time that
grows with its square."""
_MISTRAL_ARGS = re.compile(r"\[TOOL_CALLS\]\s*+([\w.-]++)\s*+\[ARGS\]")
_MISTRAL = "[TOOL_CALLS]"


CUT_OFF = FormatProblem("no action it finished: it was cut off at the output limit")
"""A reply cut off at the output limit in an open block or reasoning."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("a key repeated: which value was meant is unclear")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is no JSON number")


_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)
"""Strict JSON: a repeated key (json keeps the last, a reader sees the first) or NaN is none."""


def _object(text: str) -> dict[str, object] | None:
    try:
        value = _JSON.decode(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _arguments(value: object) -> str | None:
    """Canonical JSON of an arguments object; a string holding one is accepted too (some
    models write `"arguments": "{...}"`, as the wire format does)."""
    if isinstance(value, str):
        value = _object(value)
    return json.dumps(value) if isinstance(value, dict) else None


def call_of(value: object, tools: Collection[str], name_keys: tuple[str, ...]) -> TextCall | None:
    """A call from a JSON object with a tool name and an arguments object, and nothing else."""
    if not isinstance(value, dict):
        return None
    names = [key for key in name_keys if key in value]
    argument_keys = [key for key in ("arguments", "parameters") if key in value]
    if len(names) != 1 or len(argument_keys) != 1 or len(value) != 2:
        return None
    name, arguments = value[names[0]], _arguments(value[argument_keys[0]])
    if not isinstance(name, str) or name not in tools or arguments is None:
        return None
    return TextCall(name, arguments)


def _calls(values: list[object], tools: Collection[str]) -> tuple[TextCall, ...] | None:
    calls = [call_of(v, tools, ("name",)) for v in values]
    if not calls or any(c is None for c in calls):
        return None
    return tuple(c for c in calls if c is not None)


def _hermes(text: str, tools: Collection[str]) -> Recovered | None:
    """Tags one after another to the reply's end: prose between or after them is no call."""
    first = position = text.find(HERMES_OPEN)
    bodies = []
    while position < len(text):
        end = text.find(HERMES_CLOSE, position)
        if not text.startswith(HERMES_OPEN, position) or end == -1:
            return None
        bodies.append(text[position + len(HERMES_OPEN) : end])
        position = end + len(HERMES_CLOSE)
        while position < len(text) and text[position].isspace():
            position += 1
    calls = _calls([_object(body.strip()) for body in bodies], tools)
    return Recovered(calls, "hermes", text[:first].strip(), first) if calls else None


def _mistral(text: str, tools: Collection[str]) -> Recovered | None:
    if text.count(_MISTRAL) != 1:
        return None
    before, after = text.split(_MISTRAL)
    named = _MISTRAL_ARGS.search(text)
    if named is not None:  # the newer form: [TOOL_CALLS]name[ARGS]{...}
        arguments = _arguments(_object(text[named.end() :].strip()))
        if named[1] not in tools or arguments is None:
            return None
        return Recovered((TextCall(named[1], arguments),), "mistral", before.strip(), len(before))
    try:
        value, end = _JSON.raw_decode(after.strip())
    except (ValueError, RecursionError):
        return None
    if after.strip()[end:].strip():
        return None
    calls = _calls(value if isinstance(value, list) else [value], tools)
    return Recovered(calls, "mistral", before.strip(), len(before)) if calls else None


def _fenced(text: str, tools: Collection[str]) -> Recovered | None:
    blocks = [f for f in fences(text) if f.language in ("json", "")]
    if len(blocks) != 1 or text[blocks[0].end :].strip():
        return None
    call = call_of(_object(blocks[0].body), tools, ("name",))
    start = blocks[0].start
    return Recovered((call,), "fenced_json", text[:start].strip(), start) if call else None


def _bare(text: str, tools: Collection[str]) -> Recovered | None:
    """The reply ends with one JSON object that starts a line (inline JSON is prose)."""
    stripped = text.rstrip()
    starts = [m.start() for m in re.finditer(r"^[ \t]*+\{", stripped, re.MULTILINE)]
    for start in reversed(starts[-BARE_STARTS:]):
        value = _object(stripped[start:])
        if value is not None:
            call = call_of(value, tools, ("name",))
            if call is None or '"name"' in stripped[:start]:
                return None  # a second candidate before it: which one was meant is unclear
            return Recovered((call,), "json", stripped[:start].strip(), start)
    return None


def _recover(text: str, tools: Collection[str]) -> Recovered | None:
    if HERMES_OPEN in text:
        return _hermes(text, tools)
    if _MISTRAL in text:
        return _mistral(text, tools)
    if "```" in text:
        return _fenced(text, tools)
    return _bare(text, tools)


def recover(text: str, tools: Collection[str], cut_off: bool = False) -> Recovered | None:
    """The calls a reply wrote as text, if it holds exactly one well-formed candidate."""
    readable = finished_part(reply_text(text), cut_off)
    return None if readable is None else _recover(readable, tools)


def _called_outside(text: str, fenced: list[Fence], tools: Collection[str]) -> bool:
    """Whether the text outside the fenced blocks holds a call in another format too."""
    bounds = [0, *(i for f in fenced for i in (f.start, f.end)), len(text)]
    outside = "".join(text[a:b] for a, b in zip(bounds[::2], bounds[1::2], strict=True))
    return HERMES_OPEN in outside or _MISTRAL in outside or _bare(outside, tools) is not None


def read_action(text: str, tools: Collection[str], cut_off: bool = False) -> Action | FormatProblem:
    """The one action of a reply in the text protocol, or what is wrong with it."""
    readable = finished_part(reply_text(text), cut_off)
    if readable is None:
        return CUT_OFF
    fenced = fences(readable)
    blocks = [f for f in fenced if f.language in SHELL_LANGUAGES + JSON_LANGUAGES]
    if blocks and _called_outside(readable, fenced, tools):
        return FormatProblem(f"{len(blocks) + 1} actions in different formats (none was run)")
    if len(blocks) > 1:
        return FormatProblem(f"{len(blocks)} action blocks (none was run)")
    if blocks:
        return _block_action(blocks[0], readable, tools)
    recovered = _recover(readable, tools)
    if recovered is None:
        return FormatProblem("no action block")
    if len(recovered.calls) > 1:
        return FormatProblem(f"{len(recovered.calls)} actions (none was run)")
    return Action(recovered.calls[0], recovered.format, recovered.start, len(readable))


@dataclass(frozen=True)
class OpenCall:
    """A call the reply was cut off in: its tool, if named yet, and the bytes written of it."""

    tool: str | None
    size: int


_NAMED = re.compile(r'"(?:tool|name)"\s*+:\s*+"([\w.-]{1,64}+)"')


def open_call(text: str) -> OpenCall | None:
    """The call a reply cut off at the output limit ends inside: an action block left open (a
    ```bash block is a shell call, a ```json one names its tool), or a `<tool_call>` tag; None
    if it ends in reasoning or prose."""
    text = reply_text(text)
    if text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE):
        return None
    closed = fences(text)
    block = OPEN.search(text, closed[-1].end if closed else 0)
    if block is not None:
        body = text[block.end() + 1 :]
        shell = block[2].lower() in SHELL_LANGUAGES
        named = None if shell else _NAMED.search(body, 0, 200)
        tool = SHELL_TOOL if shell else named[1] if named else None
        return OpenCall(tool, len(body.encode()))
    start = text.rfind(HERMES_OPEN)
    if start > text.rfind(HERMES_CLOSE):
        body = text[start + len(HERMES_OPEN) :]
        named = _NAMED.search(body, 0, 200)
        return OpenCall(named[1] if named else None, len(body.encode()))
    return None


def _block_action(block: Fence, text: str, tools: Collection[str]) -> Action | FormatProblem:
    if FENCE_LINE.search(text, block.end):
        return FormatProblem(
            "a ``` line after its action block (none was run). An action that holds a ``` "
            "line (a heredoc writing Markdown) needs a longer fence, ````bash ... ````, or "
            "file_write"
        )
    if block.language in SHELL_LANGUAGES:
        if SHELL_TOOL not in tools:
            return FormatProblem(f"a {block.language} block, but there is no shell tool")
        if not block.body.strip():
            return FormatProblem(f"an empty {block.language} block")
        shell = TextCall(SHELL_TOOL, json.dumps({"command": block.body}))
        return Action(shell, "bash", block.start, block.end)
    value = _object(block.body)
    if value is None:
        return FormatProblem("a json block that is not one JSON object (each key once)")
    call = call_of(value, tools, ("tool", "name"))
    if call is None:
        named = value.get("tool", value.get("name"))
        if isinstance(named, str) and named not in tools:
            return FormatProblem(f"a json block naming no tool there is ({named[:40]!r})")
        return FormatProblem('a json block that is not {"tool": ..., "arguments": {...}}')
    return Action(call, "json_action", block.start, block.end)


# --- The text protocol on the wire: what the model is told of its tools, and the
# conversation as system, user and assistant messages only.

SAMPLE_STRINGS = {
    "path": "NOTES.md",
    "command": "ls -la",
    "content": "# Notes\n",
    "summary": "what was done",
    "query": "error",
}
"""Example values a small model can copy sensibly, by parameter name."""

HEADING = """\
# How you act

You have no function-calling interface: act by writing one action a reply, as a fenced block; \
its result comes back in the next message. A reply with no action, or more than one, runs nothing.
- A shell command: a ```bash block.
- Another tool: a ```json block holding {"tool": NAME, "arguments": {...}}.
- An action holding a ``` line (a heredoc of Markdown) needs a longer fence, ````bash closed by \
````; or use file_write.

The tools:
"""


def names(schemas: list[dict[str, Any]]) -> list[str]:
    """The tools' names, from their schemas."""
    return [str((s.get("function") or {}).get("name")) for s in schemas]


def _sample(name: str, schema: dict[str, Any], depth: int = 0) -> object:
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if "default" in schema:
        return schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        item = schema.get("items")
        return [_sample(name, item, depth + 1)] if isinstance(item, dict) and depth < 3 else []
    if kind == "object":
        return example_arguments(schema, depth + 1) if depth < 3 else {}
    return SAMPLE_STRINGS.get(name, name)


def example_arguments(parameters: dict[str, Any], depth: int = 0) -> dict[str, object]:
    """Arguments for one example call: every required parameter (and of an object in it), with a
    value of its type."""
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or []
    return {
        name: _sample(name, properties.get(name) or {}, depth)
        for name in required
        if name in properties
    }


def _parameters(parameters: dict[str, Any]) -> str:
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    lines = []
    for name, schema in properties.items():
        kind = schema.get("type") or "/".join(
            str(option.get("type")) for option in schema.get("anyOf", []) if option.get("type")
        )
        need = "" if name in required else ", optional"
        text = schema.get("description", "")
        lines.append(f"- {name} ({kind or 'any'}{need}){': ' + text if text else ''}")
    return "\n".join(lines)


def action_text(name: str, arguments: dict[str, object]) -> str:
    """A call as the text protocol writes it: a bash block for a shell command, else json."""
    command = arguments.get("command")
    if name == SHELL_TOOL and set(arguments) == {"command"} and isinstance(command, str):
        return f"```bash\n{command}\n```"
    return f"```json\n{json.dumps({'tool': name, 'arguments': arguments})}\n```"


def tools_section(schemas: list[dict[str, Any]]) -> str:
    """Every offered tool, its parameters and one example, from its schema."""
    parts = [HEADING]
    for schema in schemas:
        function = schema.get("function") or {}
        name, parameters = str(function.get("name")), function.get("parameters") or {}
        example = action_text(name, example_arguments(parameters))
        parts.append(
            f"## {name}\n{' '.join(str(function.get('description', '')).split())}\n"
            f"{_parameters(parameters)}\n"
            f"Example:\n{example}\n"
        )
    return "\n".join(parts)


def tools_description(schemas: list[dict[str, Any]]) -> str:
    """What the system message carries of the tools, exactly: the budget counts it every
    request (a side call offers none)."""
    return f"\n\n{tools_section(schemas)}" if schemas else ""


def format_message(problem: str, schemas: list[dict[str, Any]]) -> str:
    """What a reply without exactly one action is told, with an example to copy (the shell's,
    where there is a shell)."""
    functions = [s.get("function") or {} for s in schemas]
    shown = next((f for f in functions if f.get("name") == SHELL_TOOL), functions[0])
    example = action_text(str(shown.get("name")), example_arguments(shown.get("parameters") or {}))
    return (
        f"Your last reply had {problem}. Write exactly one action per reply: a shell command "
        'in a ```bash block, or another tool as a ```json block {"tool": NAME, "arguments": '
        f"{{...}}}}, as the examples in your instructions show. For example:\n{example}"
    )


def result_text(message: ToolMessage) -> str:
    """A tool result as the user message that brings it back."""
    if message.masked:
        return message.content  # a placeholder says what it stands for
    failed = " (failed)" if message.error else ""
    return f"[{message.name} result{failed}]\n{message.content}"


def _written(message: AssistantMessage) -> str:
    """The reply as the model wrote it; a call it did not write as text (a native call before a
    switch to text) is added in the text form, so the model sees every action it took. Whether
    it wrote it is read from the reply alone, not from the tools offered now (a side call offers
    none)."""
    if not message.tool_calls:
        return message.content
    calls = [(c.name, c.arguments) for c in message.tool_calls]
    action = read_action(message.content, [name for name, _ in calls])
    if isinstance(action, Action) and calls == [(action.call.name, action.call.arguments)]:
        return message.content
    blocks = []
    for call in message.tool_calls:
        try:
            arguments = json.loads(call.arguments)
        except (ValueError, RecursionError):
            arguments = None
        if isinstance(arguments, dict):
            blocks.append(action_text(call.name, arguments))
        else:
            blocks.append(f'```json\n{{"tool": "{call.name}", "arguments": ...}}\n```')
    return "\n\n".join(part for part in (message.content.strip(), *blocks) if part)


def text_wire(messages: list[Message], schemas: list[dict[str, Any]]) -> list[Message]:
    """The conversation in the text protocol: the tools described in the system message, each
    result a user message, and user messages in a row joined (templates such as Gemma's refuse
    two turns of one role in a row)."""
    section = tools_description(schemas)
    sent: list[Message] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            sent.append(SystemMessage(content=message.content + section))
            continue
        if isinstance(message, AssistantMessage):
            sent.append(AssistantMessage(content=_written(message)))
            continue
        text = result_text(message) if isinstance(message, ToolMessage) else message.content
        last = sent[-1] if sent else None
        if isinstance(last, UserMessage):
            sent[-1] = UserMessage(content=f"{last.content}\n\n{text}")
        else:
            sent.append(UserMessage(content=text))
    return sent


# --- What a session checks of each reply, and of each call's figures.

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

    def record_fields(self) -> dict[str, object]:
        """What the message record says of what the harness made of the reply."""
        return {
            "renamed_calls": self.renamed or None,
            "dropped_calls": self.dropped or None,
            "calls_from_text": self.calls_from_text,
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


def dropped_calls(dropped: int, cap: int) -> str:
    return (
        f"Your last reply had {cap + dropped:,} tool calls; only the first {cap} were run "
        f"(llm.max_tool_calls_per_reply). The other {dropped:,} were dropped and not run: make "
        "fewer calls per reply, and send again those you still need."
    )


def admitted_reply(
    journal: Journal, completion: Completion, llm: LLMSettings, counting: Counting
) -> Admitted:
    """The reply as it is recorded and run (`admit`); a server whose ids had to be
    replaced, or whose usage is no count, is named once a run."""
    state = journal.state
    admitted = admit(
        completion.message,
        state.call_ids,
        llm.max_tool_calls_per_reply,
        llm.max_tool_argument_bytes,
        cut_off=completion.finish_reason == "length",
    )
    if admitted.renamed:
        reused = ", ".join(sorted({shown(old) for old in admitted.renamed.values()})[:3])
        journal.notify(
            "warning",
            f"the server sent tool-call ids that are repeated or no ids ({reused}): the harness "
            "gives such calls ids of its own, and journals which (warned once per run)",
            session=state.session,
            once="call_ids",
        )
    usage = completion.usage
    rejected = completion.rejected or (
        usage and above_window(usage.prompt_tokens, usage.completion_tokens, counting.limit)
    )
    if rejected:
        journal.notify(
            "warning", usage_warning(rejected), session=state.session, once=f"usage_{rejected.kind}"
        )
    return replace(admitted, calls_from_text=completion.calls_from_text)


def overflow(journal: Journal, error: ContextOverflow, projected: int, attempt: int) -> None:
    journal.notify(
        "context_overflow",
        str(error)[:300],
        session=journal.state.session,
        n_prompt_tokens=error.n_prompt_tokens,
        n_ctx=error.n_ctx,
        projected=projected,
        attempt=attempt,
    )


def learn_refused(journal: Journal, error: ContextOverflow, raw_prompt: RawTally) -> None:
    """The exact count of a refused prompt teaches the calibration, if it can be true."""
    state = journal.state
    if not error.n_prompt_tokens:
        return
    rejected = refused_count(error.n_prompt_tokens, state.ledger.project(raw_prompt))
    if rejected:
        journal.notify(
            "warning", usage_warning(rejected), session=state.session, once=f"usage_{rejected.kind}"
        )
        return
    m = Ledger.refused(error.n_prompt_tokens, raw_prompt)
    journal.append(Refused(session=state.session, **m.model_dump()))


def silent_truncation(journal: Journal, figures: CallFigures, context_limit: int) -> None:
    if figures.silent_truncation:
        journal.notify(
            "silent_truncation",
            "the server counted far fewer prompt tokens than were sent: it probably cut the "
            "prompt (Ollama does so silently); treating the context as full",
            session=journal.state.session,
            reported_prompt_tokens=figures.prompt_tokens,
            estimated_prompt_tokens=figures.estimated_prompt_tokens,
            context_limit=context_limit,
        )


def cache_reuse(
    journal: Journal,
    before: tuple[list[Message], int] | None,
    messages: list[Message],
    cached_tokens: int | None,
) -> None:
    """Once a run: say so when the server processed again what it should have kept."""
    state = journal.state
    if before is None or cached_tokens is None or "cache" in state.warned:
        return
    shared = shared_tokens(*before, messages, state.ledger.calibration.message_tokens)
    if (warning := reuse_warning(cached_tokens, shared)) is not None:
        journal.notify("warning", warning, session=state.session, once="cache")


def call_figures(
    state: RunState,
    rules: Rules,
    counting: Counting,
    completion: Completion,
    raw_prompt: RawTally,
    turn: int,
    purpose: str | None = None,
) -> CallFigures:
    """A call's figures for its record (and `token_usage.jsonl`), with the hard line in force."""
    ledger, usage = state.ledger, completion.usage
    reported = (usage.prompt_tokens, usage.completion_tokens, usage.source) if usage else None
    m = ledger.figures(raw_prompt, raw_estimate(completion.message), reported, counting)
    used = m.prompt_tokens + m.completion_tokens
    hard_line = step_figures(state, rules).hard_line
    return CallFigures(
        **m.model_dump(),
        turn=turn,
        estimated_prompt_tokens=ledger.calibration.tally_tokens(raw_prompt),
        context_limit=rules.budget.limit,
        zone=zone(state, rules, used, m.silent_truncation, hard_line),
        finish_reason=completion.finish_reason,
        purpose=purpose,
        hard_line=hard_line,
        **asdict(completion.prefill),
    )


# --- The protocol in force, between a session and the model.

TEXT_STREAK = 3
"""Replies in a row whose calls were read from their text before `auto` goes over to text."""
REFUSES_TOOLS = re.compile(
    r"does not support tools"  # Ollama, HTTP 400, for a model whose template has no tools
    r"|tool choice requires --enable-auto-tool-choice"  # vLLM, HTTP 400, without a tool parser
    r"|tools param requires --jinja",  # llama-server before --jinja was its default, HTTP 500
    re.IGNORECASE,
)
"""A server's refusal of a request with tools, matched before a 5xx is taken for a passing
fault (it would be retried for ever)."""


def text_in_force(protocol: ToolProtocol, state: RunState) -> bool:
    return protocol == "text" or (protocol == "auto" and state.protocol.switch_reason is not None)


def schema_raw(protocol: ToolProtocol, schemas: list[dict[str, Any]], renders: bool) -> int:
    """Raw tokens every request spends on the tools: the schemas (none where the template drops
    them), or their description in the system message; `auto`, the larger."""
    native = tools_estimate(schemas) if renders else 0
    text = raw_units(tools_description(schemas))
    return {"native": native, "text": text}.get(protocol, max(native, text))


def answer_to(
    reply: AssistantMessage,
    at_max_tokens: bool,
    llm: LLMSettings,
    state: RunState,
    schemas: list[dict[str, Any]],
) -> str:
    """What a reply without a call is told: that it was cut off at the output limit inside a
    call it was writing (which tool, how far in), or at all (a server may drop a call it cut);
    else to go on; in the text protocol, what an action looks like and what this reply lacked."""
    cut = open_call(reply.content) if at_max_tokens else None
    if cut is not None:
        return prompts.cut_in_call(cut.tool, cut.size, llm.max_output_tokens)
    if not text_in_force(llm.tool_protocol, state):
        return prompts.cut_off(llm.max_output_tokens) if at_max_tokens else prompts.CONTINUE
    action = read_action(reply.content, names(schemas), at_max_tokens)
    if action == CUT_OFF:
        return prompts.cut_off(llm.max_output_tokens)
    problem = action.what if isinstance(action, FormatProblem) else "no action"
    return format_message(problem, schemas)


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

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        state = self.journal.state
        self._switch_if_due(state)
        if text_in_force(self.protocol, state):
            written = await self.inner.complete(text_wire(messages, tools), [])
            return self._acted(_as_meant(written), names(tools))
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
        recovered = None if message.tool_calls else recover(message.content, names(tools), cut_off)
        if recovered is None:
            return completion
        return self._with_calls(completion, recovered.calls, recovered.format, recovered.remaining)

    def _acted(self, completion: Completion, tools: list[str]) -> Completion:
        """A text-protocol reply with the call its one action makes, if it has one."""
        content = completion.message.content
        action = read_action(content, tools, completion.finish_reason == "length")
        if isinstance(action, FormatProblem) or completion.message.tool_calls:
            return completion
        call, size = action.call, len(action.call.arguments.encode())
        if size > self.max_argument_bytes:  # the action as written is sent back every turn
            stand_in: dict[str, object] = {OMITTED: size}
            call = TextCall(call.name, json.dumps(stand_in))
            written = action_text(call.name, stand_in)
            content = f"{content[: action.start]}{written}{content[action.end :]}"
        return self._with_calls(completion, (call,), action.format, content)

    def _switch_if_due(self, state: RunState) -> None:
        if self.protocol != "auto" or state.protocol.switch_reason is not None:
            return
        if not self.renders_tools:
            self._switch("the server says the model's chat template cannot render tools")
        elif state.protocol.streak >= TEXT_STREAK:
            self._switch(
                f"the model wrote its tool calls as text {state.protocol.streak} replies in a "
                "row instead of calling the tools"
            )

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
        written: str,
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
        return replace(completion, message=message, calls_from_text=written)


def _as_meant(completion: Completion) -> Completion:
    """The reply as journalled: what the model meant to say (`reply_text`)."""
    content = reply_text(completion.message.content)
    if content == completion.message.content:
        return completion
    return replace(completion, message=completion.message.model_copy(update={"content": content}))
