"""Tool calls written as text, read back: pure, no I/O.

Two readers, one per use (`llm.tool_protocol`):

- `recover`: a reply that came with no structured call but whose text holds a call of an
  offered tool in a format models commonly write (Hermes `<tool_call>` tags, a bare JSON object
  with `name` and `arguments`, the same in a fenced ```json block, Mistral's `[TOOL_CALLS]`).
  It is strict on purpose: a near-miss run as a call does harm, a missed one only costs a
  "continue". The call must end the reply (a model that calls stops there; JSON followed by
  more prose is an example it talks about), the JSON must parse, the name must be offered, the
  arguments must be an object, and a format that holds one call must hold exactly one.
- `read_action`: a reply in the text protocol, where the model acts in fenced blocks: a
  ```bash block runs in the shell, a ```json block `{"tool": ..., "arguments": {...}}` calls
  any tool. It finds exactly one action, or says what is wrong with the reply.

Both read the reply as meant, and only what the model finished saying (`reply_text`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from ouroboros.model.reply_text import (
    FENCE_LINE,
    OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    Fence,
    fences,
    finished_part,
    reply_text,
)

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
