"""A model in the process, driven by a function: how tests and benches run whole sessions in
milliseconds, through the same supervisor, session and journal as a real run.

It counts prompt tokens as `ScriptedServer` does (word-level, not bytes/4: the harness's
estimator has something to calibrate against), reports them as usage, and refuses a prompt that
does not fit its window the way llama-server does (`ContextOverflow` with the exact count).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ouroboros.ground.messages import AssistantMessage, Message, ToolCall
from ouroboros.model.llm import Completion, ContextOverflow, Usage, to_wire
from ouroboros.model.scripted import count_tokens
from ouroboros.model.servers import ServerInfo

Replier = Callable[[list[Message]], AssistantMessage | Completion]
"""Given the messages of a request, the model's reply (or a whole `Completion`, to say what
the server reports), or it raises an `LLMError` as a server would fail."""


def say(text: str = "", *calls: tuple[str, str]) -> AssistantMessage:
    """A reply: its text and tool calls as (name, JSON arguments), with fresh ids."""
    return AssistantMessage(
        content=text,
        tool_calls=tuple(
            ToolCall(id=f"call_{next(_IDS)}", name=name, arguments=arguments)
            for name, arguments in calls
        ),
    )


_IDS = itertools.count(1)


@dataclass
class FakeModel:
    """`Model` for in-process runs; `info` is what discovery would have found."""

    replier: Replier
    window: int = 8192
    renders_tools: bool = True
    requests: list[list[Message]] = field(default_factory=list)
    """Every request's messages, in order (refused ones too)."""

    @property
    def info(self) -> ServerInfo:
        return ServerInfo(
            "llama-server", self.window, "fake model", renders_tools=self.renders_tools
        )

    def prompt_tokens(self, messages: list[Message], tools: list[dict[str, Any]]) -> int:
        body = {"messages": [to_wire(m) for m in messages], "tools": tools}
        return count_tokens(body, self.renders_tools)

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        self.requests.append(list(messages))
        prompt = self.prompt_tokens(messages, tools)
        if prompt >= self.window:
            raise ContextOverflow(
                f"request ({prompt} tokens) exceeds the available context size "
                f"({self.window} tokens)",
                prompt,
                self.window,
            )
        reply = self.replier(messages)
        if isinstance(reply, Completion):
            return reply
        completion = self.prompt_tokens([reply], [])
        finish = "tool_calls" if reply.tool_calls else "stop"
        return Completion(reply, finish, Usage(prompt, completion, "server"))
