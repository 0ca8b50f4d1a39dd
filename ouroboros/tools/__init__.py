"""The tools' runner: the schemas a session is offered, and each call run so that bad input
never escapes: what is common to every tool (`tool.Tool`) is done here, once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from pydantic import BaseModel, ValidationError

from ouroboros.context.plan import PlanCap
from ouroboros.context.truncate import saved_name
from ouroboros.ground.messages import ToolCall, ToolMessage
from ouroboros.tools.results import Fit, shaped_result, spill
from ouroboros.tools.tool import Output, Tool, ToolContext, ToolFailed
from ouroboros.tools.workspace import PathRefused, Workspace

PROBLEMS_SAID = 5
"""Of a call's bad arguments, the problems its error names: a list of thousands of bad items
would be a result as large as the list, which only the first few help to fix."""


@dataclass(frozen=True)
class ToolOutcome:
    message: ToolMessage
    duration_s: float
    original_bytes: int
    error: str | None = None
    blocked: str | None = None
    finish_summary: str | None = None


class Tools(Protocol):
    """What a session asks of its tools (`ToolRunner`; benches replay recorded outputs)."""

    def schemas(self, session: int | None = None) -> list[dict[str, Any]]:
        """The tools offered in `session` (None: every tool the run may offer)."""
        ...

    async def run(
        self, call: ToolCall, room: Fit | None = None, seen: frozenset[str] = frozenset()
    ) -> ToolOutcome:
        """One call's result; every failure is a result too. `seen`: `ToolContext.seen`."""
        ...

    async def save_whole(self, results: list[ToolMessage]) -> None:
        """Make what placeholders and cut markers say true: the whole text is in a file."""

    def end_session(self) -> None: ...

    def close(self) -> None: ...


class ToolCaps(NamedTuple):
    """What a result and the plan may take, sized from the window in force."""

    max_output_bytes: int
    token_cap: Fit | None = None
    """Bytes of an output (within `max_output_bytes`) the cap in tokens keeps."""
    plan_cap: PlanCap = PlanCap()


class ToolRunner:
    def __init__(self, workspace: Workspace, tools: Iterable[Tool], caps: ToolCaps):
        self.workspace, self.caps = workspace, caps
        self.tools = {tool.name: tool for tool in tools}
        """In the order they are offered, which never changes: a session's requests all start
        the same."""

    def fit(self, caps: ToolCaps) -> None:
        """The caps for the window in force: a refusal may state a smaller one mid-run."""
        self.caps = caps

    def end_session(self) -> None:
        for tool in self.tools.values():
            tool.end_session()

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()

    def schemas(self, session: int | None = None) -> list[dict[str, Any]]:
        """The tools offered in `session` (None: every tool the run may offer)."""
        return [
            tool.schema()
            for tool in self.tools.values()
            if session is None or session >= tool.from_session
        ]

    def _parse(self, call: ToolCall) -> tuple[Tool, BaseModel]:
        tool = self.tools.get(call.name)
        if tool is None:
            raise ToolFailed(f"unknown tool {call.name!r}; the tools are: {', '.join(self.tools)}")
        try:
            raw = json.loads(call.arguments or "{}")
        except RecursionError:
            raise ToolFailed("the arguments nest deeper than JSON can be read") from None
        except json.JSONDecodeError as e:
            raise ToolFailed(
                f"the arguments are not valid JSON ({e.msg} at character {e.pos}): "
                f"{call.arguments[:200]!r}. Send a JSON object."
            ) from None
        if not isinstance(raw, dict):
            raise ToolFailed(f"the arguments must be a JSON object, not {type(raw).__name__}")
        try:
            json.dumps(raw, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            # A lone surrogate escape ("\\ud83d"): valid JSON, but no file or path can hold it.
            raise ToolFailed(
                "the arguments contain an invalid unicode escape (a lone surrogate)"
            ) from None
        try:
            return tool, tool.args.model_validate(raw)
        except ValidationError as e:
            problems = [
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}"
                for err in e.errors()
            ]
            said = "; ".join(problems[:PROBLEMS_SAID])
            if len(problems) > PROBLEMS_SAID:
                said += f"; and {len(problems) - PROBLEMS_SAID:,} more"
            raise ToolFailed(f"bad arguments for {call.name}: {said}") from None

    async def run(
        self, call: ToolCall, room: Fit | None = None, seen: frozenset[str] = frozenset()
    ) -> ToolOutcome:
        """Run one call; every failure becomes a result the model can read.

        `room` says how many bytes of an output (at the normal cap) fit the room left in the
        window: the model is shown no more, the journal keeps the output at the normal cap."""
        started = time.monotonic()
        error = blocked = None
        try:
            tool, args = self._parse(call)
            output = await tool.run(args, ToolContext(self.workspace, self.caps.plan_cap, seen))
        except OSError as e:
            output, error = Output(f"error: {e.strerror or e}"), str(e)
        # ValueError: e.g. a path the file system cannot encode.
        except (ToolFailed, PathRefused, ValueError) as e:
            output, error = Output(f"error: {e}"), str(e)
            blocked = e.blocked if isinstance(e, ToolFailed) else None
        cap, token_cap = self.caps.max_output_bytes, self.caps.token_cap
        message = shaped_result(call, output, cap, room, token_cap)
        if message.saved_to is not None:
            await spill(self.workspace, message.saved_to, output.text)
        if error is not None:
            message = message.model_copy(update={"error": True})
        return ToolOutcome(
            message,
            time.monotonic() - started,
            message.output_bytes or 0,
            error,
            blocked,
            output.finished,
        )

    async def save_whole(self, results: list[ToolMessage]) -> None:
        """Save results about to be masked or cut whose whole text is in no file yet, where
        their placeholders and cut markers say."""
        for m in results:
            # A result cut at the cap had its whole output saved when it ran.
            whole = m.output_bytes is None or m.output_bytes == len(m.content.encode())
            if not m.masked and whole:
                await spill(self.workspace, saved_name(m.name, m.content), m.content)
