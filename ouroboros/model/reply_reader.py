"""A reply read: the tool calls it makes, in whatever form the model wrote them, and what the
harness answers it with. Pure: one function (`read_reply`), tested on what real models wrote
(`tests/data/replies/`).

Small models rarely call tools the way their chat template says. They write the call as JSON in
the text (bare, fenced, between `<tool_call>` tags), several in a row, with the tool's name a
little off (`read` for `file_read`), with `"tool"` or `"function"` for `"name"`, or a ```bash
block. A harness that reads only the exact form answers every such reply "use the tools", and
the model, which copies what it sees, answers that with the same reply: the loop this project
once ran in on Qwen2.5-Coder-0.5B, 0 useful actions in 146 replies.

So every call written is read, in order; the first is run (`tool_protocol.admitted_reply`: one
call a reply, as the text protocol asks; the model is told the rest did not run):
- **Forms**: `<tool_call>` tags (`hermes`), a ```json block (`fenced_json`), a bare JSON object
  that starts a line (`json`), Mistral's `[TOOL_CALLS]` (`mistral`), `{"tool": ...}` in a
  ```json block in the text protocol (`json_action`); where no call is written, a ```bash block
  (`bash`) or a block its path names (`file_block`: the file's whole new text, the form this
  coding model writes a change in when it writes no call). An object is
  a call when it names a tool (`name`, `tool`, or an OpenAI `function` object) and holds its
  arguments (`arguments`, `parameters`, `args` or `input`: an object, or a string holding one)
  and nothing else but an `id` or `type`; `{"name": "list_dir"}` alone is a call of a tool
  with no required argument. A tool's name beside its arguments with no key around them
  (`{"name": "finish", "summary": ...}`, as the real model wrote) is a call of that tool; any
  other name so, a near one too, is data (`{"name": "list", "items": ...}`). JSON a call's
  arguments hold is no call of its own.
- **Names**: a tool's exact name; else the one tool the name is the last or first word of
  (`read` -> `file_read`), or the one it is a near spelling of (`file_raed`); else the one tool
  the arguments are for (all it requires, none it does not take: `rename-function` with a
  path, an offset and a limit is a `file_read`). A name that is none of them is an unknown
  tool: not run, and answered with the real list and one example.
- The same call twice in one reply runs once: a small model repeats a line it likes.
- What is read from the text is taken out of it (a call is kept as the call, not twice), and
  so is what follows the last call (made-up results, the same call to the output limit); the
  journal keeps the reply as written. Reasoning left open (`<think>`) or a block the output
  limit cut is never read.

What the model is told goes in a user message (`Reading.told`), never in the assistant's place:
nothing the harness writes may look like something the model said, since it would be copied.
A reply with no call is told that nothing happened, that a file changes only through a tool,
and what the tools are, in other words each time in a row (`streak`): the same words again to a
model that copies words is no help, and no example call is shown (one was copied as it is, again
and again). A call of an unknown tool is shown one example call, of a call that changes nothing
(`EXAMPLES`): copied as it is, it does no harm.
An empty reply is not answered at all at first but drawn again (`state.fold.EMPTY_DRAWN_AGAIN`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ouroboros.ground import prompts
from ouroboros.model.block_actions import MAX_CANDIDATES, Span, blocks
from ouroboros.model.text_calls import (
    HERMES_CLOSE,
    HERMES_OPEN,
    SHELL_TOOL,
    STRICT_JSON,
    TextCall,
    action_text,
    fences,
    finished_part,
    open_call,
    reply_text,
)

NAME_KEYS = ("name", "tool", "tool_name", "function")
ARGUMENT_KEYS = ("arguments", "parameters", "args", "input")
IGNORED_KEYS = ("id", "type")
"""Keys an OpenAI-style call carries beside its name and arguments: no reason to refuse it."""
EXAMPLES: tuple[tuple[str, dict[str, object]], ...] = (("list_dir", {"path": "."}),)
"""The call an example shows after reads of the files the task names: a small model copies an
example as it is, so each must do no harm and some good copied so (file_write's would overwrite
a file with the example's words; a read of a file the task does not name, one not there)."""
NEAR_SPELLING = 0.8
"""How alike (difflib's ratio) a name and a tool's must be to be taken for a misspelling."""
_CANDIDATE = re.compile(
    r"^[ \t]*+\{|<tool_call>[ \t]*+\{"
    r"|\[TOOL_CALLS\][ \t]*+(?:(?P<name>[\w.-]{1,64}+)[ \t]*+\[ARGS\][ \t]*+)?[{\[]",
    re.MULTILINE,
)
"""Where a call written as text may start: a line's first `{`, or after a call tag (JSON within
a sentence is an example the reply talks about)."""
_TAG_CLOSED = re.compile(rf"\s*+{re.escape(HERMES_CLOSE)}")


@dataclass(frozen=True)
class Reading:
    calls: tuple[TextCall, ...]
    """The calls to run, in the order written: those of the server's own, or read from text."""
    format: str | None
    """The form the calls were read from the text in (None: the server sent them, or none)."""
    text: str
    """The reply's text as it stays in the conversation: without the calls read from it (a call
    of an unknown tool stays: it is what the answer speaks of)."""
    unknown: tuple[str, ...] = ()
    """Names of tools the reply called that there are not."""
    spans: tuple[Span, ...] = ()
    """Where the calls are written, in order: a call written twice has two, the calls of one
    Mistral list share theirs."""


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    value: dict[str, object]
    form: str


def _objects(text: str) -> list[_Found]:
    """JSON objects that start a line or follow a call tag, in order, none inside another."""
    found: list[_Found] = []
    position = tries = 0
    fenced = [f for f in fences(text) if f.language in ("json", "")]
    while tries < MAX_CANDIDATES:
        match = _CANDIDATE.search(text, position)
        if match is None:
            break
        tries += 1
        opening = match.end() - 1
        try:
            value, end = STRICT_JSON.raw_decode(text, opening)
        except (ValueError, RecursionError):
            position = match.end()
            continue
        position = end
        start, form = match.start(), _form(text, match)
        if form == "hermes":  # the tags around the call are the call's too
            start = text.rfind(HERMES_OPEN, 0, opening)
            if (closed := _TAG_CLOSED.match(text, end)) is not None:
                end = closed.end()
        if match.group("name"):  # Mistral's newer form: [TOOL_CALLS]name[ARGS]{...}
            value = {"name": match.group("name"), "arguments": value}
        block = next((f for f in fenced if f.start <= opening < f.end), None)
        if block is not None and form == "json":
            form = "fenced_json"
            if block.body.strip() == text[opening:end]:
                start, end = block.start, block.end  # the block is the call: it goes whole
        items = value if isinstance(value, list) and form == "mistral" else [value]
        found.extend(_Found(start, end, v, form) for v in items if isinstance(v, dict))
    return found


def _form(text: str, match: re.Match[str]) -> str:
    if "[TOOL_CALLS]" in match.group(0):
        return "mistral"
    return "hermes" if text[: match.end() - 1].rstrip().endswith(HERMES_OPEN) else "json"


def _arguments(value: object) -> dict[str, object] | None:
    if isinstance(value, str):
        try:
            value = STRICT_JSON.decode(value)
        except (ValueError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class _Parts:
    name: str
    arguments: dict[str, object] | None
    """None: the object gave none."""
    flat: bool = False
    """The arguments stand beside the name (`{"name": "finish", "summary": ...}`): a call
    only where the name is a tool's very name, else it is data that has a `name`."""


def _call_parts(value: dict[str, object]) -> _Parts | None:
    """The name a JSON object calls and its arguments, if it may be a call."""
    function = value.get("function")
    if isinstance(function, dict) and set(value) <= {"function", *IGNORED_KEYS}:
        return _call_parts(function)
    names = [k for k in NAME_KEYS if isinstance(value.get(k), str)]
    given = [k for k in ARGUMENT_KEYS if k in value]
    rest = set(value) - set(names) - set(given) - set(IGNORED_KEYS)
    if len(names) != 1 or len(given) > 1:
        return None
    name = str(value[names[0]])
    if rest:
        flat = {k: v for k, v in value.items() if k in rest}
        return None if given else _Parts(name, flat, flat=True)
    if not given:
        return _Parts(name, None)
    arguments = _arguments(value[given[0]])
    return _Parts(name, arguments) if arguments is not None else None


def tool_named(name: str, tools: Sequence[str]) -> str | None:
    """The tool a name written in a reply means: exact, the one it is a word of, a near spelling."""
    if name in tools:
        return name
    plain = name.strip().lower().replace("-", "_").replace(".", "_")
    for candidate in (plain, "_".join(reversed(plain.split("_")))):  # read_file: file_read
        if candidate in tools:
            return candidate
    worded = [t for t in tools if plain in (t.split("_")[0], t.split("_")[-1])]
    if len(worded) == 1:
        return worded[0]
    near = difflib.get_close_matches(plain, tools, n=2, cutoff=NEAR_SPELLING)
    return near[0] if len(near) == 1 else None


Parameters = Mapping[str, tuple[frozenset[str], frozenset[str]]]
"""Each tool's parameters: those it requires, and all it takes (`parameters_of`)."""


def parameters_of(schemas: Sequence[dict[str, Any]]) -> Parameters:
    found: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
    for schema in schemas:
        function = schema.get("function") or {}
        taken = function.get("parameters") or {}
        properties = taken.get("properties") or {}
        required = frozenset(str(k) for k in taken.get("required") or ())
        found[str(function.get("name"))] = (required, frozenset(str(k) for k in properties))
    return found


def _tool_taking(arguments: dict[str, object] | None, parameters: Parameters) -> str | None:
    """The one tool whose parameters these arguments are (all it requires, none it does not
    take): a small model calls file_read by the task's name (`rename-function` with a path, an
    offset and a limit)."""
    keys = set(arguments or ())
    fits = [name for name, (needs, takes) in parameters.items() if keys and needs <= keys <= takes]
    return fits[0] if len(fits) == 1 else None


def read_reply(
    content: str,
    native: bool,
    tools: Sequence[str],
    text_protocol: bool,
    cut_off: bool,
    parameters: Parameters | None = None,
    files: Mapping[str, str] | None = None,
) -> Reading:
    """The calls a reply makes. `native`: the server sent calls (the text is not read for more);
    `cut_off`: the reply stopped at the output limit (what it was writing is not read);
    `parameters`: the tools' (`parameters_of`), for a call of no tool's name; `files`: the
    files the session showed whole, by path, as they are now (`_kept_file`)."""
    text = reply_text(content)
    readable = None if native else finished_part(text, cut_off)
    if readable is None:
        return Reading((), None, text)
    calls: list[TextCall] = []
    unknown: list[str] = []
    spans: list[Span] = []
    form: str | None = None
    for found in _objects(readable):
        parts = _call_parts(found.value)
        if parts is None:
            continue
        written, arguments = parts.name, parts.arguments
        # Flat, only a tool's very name is a call: `{"name": "list", "items": ...}` is data.
        name = tool_named(written, tools) if not parts.flat or written in tools else None
        if name is None and not parts.flat:
            name = _tool_taking(arguments, parameters or {})
        if name is None:
            # `{"name": "shop"}` alone, or beside other keys, is data, not a call.
            if arguments is not None and not parts.flat:
                unknown.append(written)
            continue
        call = TextCall(name, json.dumps({} if arguments is None else arguments))
        if call not in calls:
            calls.append(call)
        spans.append(Span(found.start, found.end, call))
        form = form or found.form
    if not calls and not unknown:
        for span in blocks(readable, files or {}):
            if span.call.name in tools and span.call not in calls:
                calls.append(span.call)
                spans.append(span)
                form = form or ("bash" if span.call.name == SHELL_TOOL else "file_block")
    if text_protocol and form == "fenced_json":
        form = "json_action"
    # What follows the last call is no part of it: a small model goes on with results it makes
    # up, or the same call again and again to the output limit; kept, it is sent back every turn.
    kept = readable[: spans[-1].end] if spans else readable
    without = _without(kept, spans) if calls else text
    return Reading(tuple(calls), form, without, tuple(unknown), tuple(spans))


def _without(text: str, spans: list[Span]) -> str:
    parts, position = [], 0
    for span in spans:
        if span.start >= position:
            parts.append(text[position : span.start])
            position = span.end
    parts.append(text[position:])
    # The tags around a call read from between them are the call's too.
    joined = "".join(parts).replace("<tool_call>", "").replace("</tool_call>", "")
    return re.sub(r"\n{3,}", "\n\n", joined).strip()


def example_call(name: str, arguments: dict[str, object], text_protocol: bool) -> str:
    """One call written the way the model is to write it."""
    if text_protocol:
        return action_text(name, arguments)
    return json.dumps({"name": name, "arguments": arguments})


_FILE_NAME = r"[\w-][\w./-]*\.[A-Za-z][A-Za-z0-9]{0,7}"
_TASK_FILES = re.compile(
    rf"`({_FILE_NAME})`|(?<![\w/.-])([\w-]{{2,}}(?:/[\w.-]+)*\.[A-Za-z]{{1,8}})\b"
)
"""A file a task names: in backticks, or a bare name with a stem of two or more (not `e.g`)."""


def task_files(task: str | None) -> list[str]:
    """The relative files a task names, in order, once each: what there is to read first."""
    found = (a or b for a, b in _TASK_FILES.findall(task or ""))
    return list(dict.fromkeys(f for f in found if ".." not in f.split("/")))


def answer(
    text: str,
    has_calls: bool,
    unknown: Sequence[str],
    schemas: Sequence[dict[str, Any]],
    text_protocol: bool,
    cut_off: bool,
    max_output_tokens: int,
    streak: int = 0,
    task: str | None = None,
    files: bool = False,
) -> str | None:
    """What the harness tells the model of its reply, as a user message (None: the results of
    its calls say it all). `streak`: replies without a call just before this one; `task`: what
    the session's opening gave as the task; `files`: the files protocol, which names no tool."""
    if files and not has_calls:
        return prompts.cut_off_in_file(max_output_tokens) if cut_off else prompts.no_change(streak)
    tools = [str((s.get("function") or {}).get("name")) for s in schemas]
    listed = ", ".join(tools)
    if unknown:
        names = list(dict.fromkeys(n[:40] for n in unknown))
        # A small model calls what its task asks it to write (`square` for "add `square(x)`"):
        # it is told so, and shown a read of a file the task names, another each time.
        offered: list[tuple[str, dict[str, object]]] = [
            ("file_read", {"path": f}) for f in task_files(task) if "file_read" in tools
        ]
        offered += [(n, a) for n, a in EXAMPLES if n in tools]
        example = example_call(*offered[streak % len(offered)], text_protocol) if offered else ""
        said = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", task or "")]
        return prompts.unknown_tool(names, listed, example, said)
    if has_calls:
        return None
    if cut_off:
        open_one = open_call(text)
        if open_one is not None:
            return prompts.cut_in_call(open_one.tool, open_one.size, max_output_tokens)
        return prompts.cut_off_before_a_call(max_output_tokens)
    return prompts.no_call(tools, streak)
