"""A whole run in the test's process: the supervisor, sessions and journal of a real run, against
`FakeModel` fed the same scripts as `ScriptedServer` (a list of `Reply`, or a function of the
request body), with no HTTP and no subprocess. For what a session does; the client, the CLI,
signals, kill -9 and locks stay with the subprocess and the loopback server."""

from __future__ import annotations

import io
import itertools
import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio
from rich.console import Console

from ouroboros.ground.clock import SYSTEM_CLOCK, Clock
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.errors import RunError
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall
from ouroboros.model.fake_model import FakeModel
from ouroboros.model.llm import Completion, Usage, to_wire
from ouroboros.model.scripted import Reply, Responder, count_tokens, quick_config
from ouroboros.model.servers import ServerInfo
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run
from tests.conftest import Project

_CALL_IDS = itertools.count(1)
UNSUPPORTED = ("status", "error_body", "cut", "stream_error", "stall_s", "retry_after", "wire")
"""What only a server on the wire can do: such replies belong in a subprocess test."""


def as_message(reply: Reply) -> AssistantMessage:
    """The message a scripted reply streams."""
    for name in UNSUPPORTED:
        if getattr(reply, name) != getattr(Reply(), name):
            raise ValueError(f"Reply.{name} needs the loopback server (ScriptedServer)")
    ids = list(reply.call_ids)
    calls = tuple(
        ToolCall(
            id=ids[index] if index < len(ids) else f"call_{next(_CALL_IDS):08d}",
            name=name,
            arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
        )
        for index, (name, arguments) in enumerate(reply.tool_calls)
    )
    return AssistantMessage(content=reply.text, tool_calls=calls)


@dataclass
class ScriptedModel(FakeModel):
    """`FakeModel` that records each request's body as the client would have sent it (its
    `messages` and `tools`) in `bodies`, the refused ones too, as the loopback server does."""

    bodies: list[dict[str, Any]] = field(default_factory=list)

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        body: dict[str, Any] = {"messages": [to_wire(m) for m in messages]}
        if tools:
            body["tools"] = tools
        self.bodies.append(body)
        return await super().complete(messages, tools)


@dataclass
class Scripted:
    """`ScriptedServer`'s script as the replier of a `FakeModel`, over one run or several."""

    script: Iterable[Reply] | Responder
    requests: list[dict[str, Any]] = field(default_factory=list)
    """Every request's body, in order, the refused ones too."""

    def __post_init__(self) -> None:
        self._responder = self.script if callable(self.script) else None
        self._queue: deque[Reply] = deque(() if callable(self.script) else self.script)
        self._renders_tools = True
        self._max_tokens = 1 << 30

    def model(self, window: int, renders_tools: bool, max_tokens: int) -> ScriptedModel:
        """A model of `window` tokens answering from this script, for one run; a reply said to
        be `max_tokens` or more long (`Reply.completion_tokens`) ends "length", as the server's."""
        self._renders_tools = renders_tools
        self._max_tokens = max_tokens
        return ScriptedModel(self, window, renders_tools, bodies=self.requests)

    def __call__(self, messages: list[Message]) -> AssistantMessage | Completion:
        body = self.requests[-1]
        if self._responder is not None:
            reply = self._responder(body)
        else:
            reply = self._queue.popleft() if self._queue else Reply(text="(no more replies)")
        message = as_message(reply)
        if reply.usage and reply.prompt_tokens is None and reply.completion_tokens is None:
            return message  # FakeModel reports the counts it made
        finish = "tool_calls" if message.tool_calls else "stop"
        if not reply.usage:
            return Completion(message, finish, None)
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = count_tokens(body, self._renders_tools)
        completion = reply.completion_tokens
        if completion is None:
            completion = count_tokens({"messages": [to_wire(message)]})
        if completion >= self._max_tokens:
            completion, finish = self._max_tokens, "length"
        return Completion(message, finish, Usage(prompt, completion, "server"))

    def chat_requests(self) -> list[dict[str, Any]]:
        return list(self.requests)


@dataclass
class Ran:
    """What an in-process run left, as the CLI would show it: the exit code, the terminal's
    lines (`stdout`, ending with the reason the run stopped), the one-line error (`stderr`);
    and the requests the model saw."""

    returncode: int
    stdout: str
    stderr: str
    scripted: Scripted

    def chat_requests(self) -> list[dict[str, Any]]:
        return self.scripted.chat_requests()


def run_here(
    project: Project,
    script: Iterable[Reply] | Responder | Scripted,
    window: int = 4096,
    renders_tools: bool = True,
    clock: Clock = SYSTEM_CLOCK,
    info: ServerInfo | None = None,
    **sections: dict[str, Any],
) -> Ran:
    """`python -m ouroboros run` in this process, with `quick_config`'s settings and `sections`
    over them, against a model of `window` tokens (`info`: what discovery found, if not a
    llama-server that says so); a run error is returned (as the CLI prints it), not raised."""
    scripted = script if isinstance(script, Scripted) else Scripted(script)
    config = project.root / "config.toml"
    config.write_text(quick_config("http://127.0.0.1:9/v1", **sections))
    settings = load_settings(config)
    model = scripted.model(window, renders_tools, settings.llm.max_output_tokens)
    out = io.StringIO()
    terminal = Terminal(Console(file=out, width=200), fatal_said_elsewhere=True)
    log = EventLog(settings.paths.state_dir, terminal)
    try:
        outcome = anyio.run(run, settings, log, model, info or model.info, clock)
    except RunError as e:
        return Ran(1, out.getvalue(), f"error: {e}", scripted)
    finally:
        log.close()
    said = "" if terminal.ended else f"run stopped: {outcome.reason}\n"
    stopped = f"{out.getvalue()}{said}"
    return Ran(outcome.exit_code, stopped, "", scripted)
