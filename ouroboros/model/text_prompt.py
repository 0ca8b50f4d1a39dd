"""The text protocol on the wire: what the model is told of its tools, and the conversation as
system, user and assistant messages only. Pure, no I/O.

The journal and the view keep the run as in the native protocol (an `AssistantMessage` with
the call read from its text, a `ToolMessage` with the result), so masking, carry-over, the
wind-down and the cache rules treat a step the same whichever protocol is in force; only what is
sent differs, and it is derived here, message by message (a message's form never depends on a
later one, so the prefix the server has cached stays the same from one request to the next).
"""

from __future__ import annotations

import json
from typing import Any

from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.text_calls import SHELL_TOOL, Action, read_action

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
