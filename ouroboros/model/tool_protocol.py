"""How the model's tool calls travel (`llm.tool_protocol`): natively, as the server's structured
calls, or as text the harness reads.

`ProtocolModel` stands between a session and the model. In the native protocol it sends the
tool schemas, and a reply with no structured call whose text holds a well-formed call of an
offered tool (`text_calls.recover`) becomes that call. In the text protocol it sends no
schemas: the tools are described in the system message, the conversation goes as system, user
and assistant messages (`text_prompt.text_wire`), and the reply's one action block becomes its
call. Either way the reply it returns is an ordinary one with its calls, marked with the format
they were read from (`Completion.calls_from_text`, journalled on the message record), so the
rest of the harness (the journal, the view, masking, carry-over) is the same in both.

The reply is journalled as meant (`reply_text`: what the model made up after a stop
token is never sent back), and arguments over `llm.max_tool_argument_bytes` are kept in neither
the call nor the text (the action as written becomes the stand-in).

`auto` is native until the server refuses tools (`REFUSES_TOOLS`), the server says the model's
template cannot render them, or the model has written its calls as text `TEXT_STREAK` replies
in a row; then it is text for the rest of the run, said once in a warning the fold keeps
(`protocol_tally.SWITCH`).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, replace
from typing import Any

from ouroboros.context.pretokens import raw_units
from ouroboros.context.tokens import tools_estimate
from ouroboros.ground import prompts
from ouroboros.ground.config import LLMSettings, ToolProtocol
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall
from ouroboros.model.llm import Completion, FatalError, Model, TransientError
from ouroboros.model.reply_checks import OMITTED
from ouroboros.model.reply_text import reply_text
from ouroboros.model.text_calls import (
    CUT_OFF,
    FormatProblem,
    TextCall,
    open_call,
    read_action,
    recover,
)
from ouroboros.model.text_prompt import (
    action_text,
    format_message,
    names,
    text_wire,
    tools_description,
)
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.protocol_tally import SWITCH

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
