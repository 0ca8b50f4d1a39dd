"""Tool calls as text: a reply's text as the model meant it (`reply_text`, its fenced blocks,
the part its calls are read from), the call a reply cut off at the output limit ends inside
(`open_call`), and the text protocol on the wire (`tools_section`, `text_wire`). Pure; every
regex is possessive: a reply of megabytes is read in time linear in its length. What a reply
calls, in whatever form a small model writes it, is `reply_reader.py`'s to say."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)

# --- A reply's text as the model meant it, and its fenced blocks.

END_TOKENS = re.compile(r"<\|im_end\|>|</s>|<end_of_turn>|<\|eot_id\|>|<\|end\|>")
"""Stop tokens a server leaves in the text when the template's stop is another: the reply ends
at the first outside a fenced block (inside one, `</s>` is HTML a command writes)."""
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
OPEN = re.compile(r"^[ \t]*+(`{3,}+)[ \t]*+([\w+-]*+)[^\n`]*+$", re.MULTILINE)


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
    return list(fences_from(text))


def fences_from(text: str, start: int = 0) -> Iterator[Fence]:
    """The closed fenced blocks of `text` from `start`, read as they are asked for."""
    position = start
    while (opening := OPEN.search(text, position)) is not None:
        close = _closing(len(opening[1])).search(text, opening.end())
        if close is None:
            return
        body = text[opening.end() + 1 : close.start()].rstrip("\n")
        yield Fence(opening[2].lower(), body, opening.start(), close.end())
        position = close.end()


def reply_text(content: str) -> str:
    """The reply as the model meant it, as it is journalled: lines end in `\\n`, and it ends at
    its first stop token outside a fenced block (what follows it the model did not mean to say)."""
    # Every CR before a line end goes: `\r\r\n` with one taken off would be `\r\n` again, and
    # the journalled reply would not read as it was read (calls found at other places).
    text = re.sub(r"\r++\n", "\n", content)
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


# --- What a reply's text holds of tool calls: the pieces `reply_reader` reads them with, and
# the call a reply was cut off in.

SHELL_TOOL = "shell_exec"
WRITE_TOOL = "file_write"
SHELL_LANGUAGES = ("bash", "sh", "shell")


@dataclass(frozen=True)
class TextCall:
    name: str
    arguments: str
    """Canonical JSON of the arguments object."""


HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("a key repeated: which value was meant is unclear")
    return dict(pairs)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is no JSON number")


STRICT_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)
"""Strict JSON: a repeated key (json keeps the last, a reader sees the first) or NaN is none."""


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


# --- The text protocol on the wire: what the model is told of its tools, and the
# conversation as system, user and assistant messages only.

SAMPLE_STRINGS = {
    "path": "path/to/file",
    "command": "ls -la",
    "content": "text",
    "summary": "what was done",
    "query": "error",
}
"""Example values a small model can copy sensibly, by parameter name."""

HEADING = """\
# How you act

You have no function-calling interface: act by writing one action a reply, as a fenced block; \
its result comes back in the next message. A reply with no action runs nothing.
- A shell command: a ```bash block.
- A file's whole new text: its path on a line, then a fenced block of the text.
- Another tool: a ```json block holding {"tool": NAME, "arguments": {...}}.

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


def result_text(message: ToolMessage) -> str:
    """A tool result as the user message that brings it back."""
    if message.masked:
        return message.content  # a placeholder says what it stands for
    failed = " (failed)" if message.error else ""
    return f"[{message.name} result{failed}]\n{message.content}"


ReadCalls = Callable[[str, list[str]], list[tuple[str, str]]]
"""The calls (name, arguments) a reply's text makes of the tools named: `reply_reader`'s, which
imports this module (`tool_protocol.calls_written`)."""


def _written(message: AssistantMessage, reads: ReadCalls) -> str:
    """The reply as the model wrote it; a call it did not write as text (a native call before a
    switch to text) is added in the text form, so the model sees every action it took. Whether
    it wrote it is read from the reply alone, not from the tools offered now (a side call offers
    none). A reply that wrote more calls than ran (one a reply) stays as written: the one that
    ran is in it."""
    if not message.tool_calls:
        return message.content
    written = reads(message.content, [c.name for c in message.tool_calls])
    blocks = []
    for call in message.tool_calls:
        if (call.name, call.arguments) in written:
            continue
        try:
            arguments = json.loads(call.arguments)
        except (ValueError, RecursionError):
            arguments = None
        if isinstance(arguments, dict):
            blocks.append(action_text(call.name, arguments))
        else:
            blocks.append(f'```json\n{{"tool": "{call.name}", "arguments": ...}}\n```')
    if not blocks:
        return message.content
    return "\n\n".join(part for part in (message.content.strip(), *blocks) if part)


def text_wire(
    messages: list[Message], schemas: list[dict[str, Any]], reads: ReadCalls | None
) -> list[Message]:
    """The conversation in the text protocol: the tools described in the system message, each
    result a user message, and user messages in a row joined (templates such as Gemma's refuse
    two turns of one role in a row). `reads`: None where every call was read from the text
    (replies go as written)."""
    section = tools_description(schemas)
    sent: list[Message] = []
    for message in messages:
        if isinstance(message, SystemMessage):
            sent.append(SystemMessage(content=message.content + section))
            continue
        if isinstance(message, AssistantMessage):
            written = message.content if reads is None else _written(message, reads)
            sent.append(AssistantMessage(content=written))
            continue
        text = result_text(message) if isinstance(message, ToolMessage) else message.content
        last = sent[-1] if sent else None
        if isinstance(last, UserMessage):
            sent[-1] = UserMessage(content=f"{last.content}\n\n{text}")
        else:
            sent.append(UserMessage(content=text))
    return sent
