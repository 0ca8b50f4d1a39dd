"""The tool registry: schemas for the model, and a runner that never lets bad input escape."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import anyio
from pydantic import BaseModel, ValidationError

from ouroboros.context.plan import PLAN_TOOL, PlanArgs, PlanCap, problem, saved
from ouroboros.ground.messages import ToolCall, ToolMessage
from ouroboros.tools import builtin
from ouroboros.tools.abandonable import abandonable
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.builtin import Output, ToolFailed
from ouroboros.tools.processes import Processes
from ouroboros.tools.results import Fit, save_whole, shaped_and_saved
from ouroboros.tools.scratch import remove_scratch
from ouroboros.tools.search import SearchContextArgs, search_context
from ouroboros.tools.shell import check_length, shell_exec
from ouroboros.tools.workspace import PathRefused, Workspace

PROBLEMS_SAID = 5
"""Of a call's bad arguments, the problems its error names: a list of thousands of bad items
would be a result as large as the list, which only the first few help to fix."""


UNSENT = {"title", "default", "minimum", "maximum", "maxLength", "maxItems"}
"""What a built-in tool's parameters are sent without: defaults and bounds are the harness's to
apply and check (a value out of bounds gets an error that says what to do). Every character of a
schema is in every request."""


def offered(schema: dict[str, Any]) -> dict[str, Any]:
    """The parameters' JSON schema (pydantic's, from the arguments' model) as offered: without
    the model's docstring, which is the function's description already, nor `UNSENT`."""
    parameters = _bare(schema)
    parameters.pop("description", None)
    return parameters


def _bare(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` and the schemas in it without `UNSENT`, an optional value's null left out (a
    parameter left out says the same)."""
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **options[0]}
    kept = {key: value for key, value in schema.items() if key not in UNSENT}
    if "properties" in kept:
        kept["properties"] = {name: _bare(value) for name, value in kept["properties"].items()}
    if isinstance(kept.get("items"), dict):
        kept["items"] = _bare(kept["items"])
    return kept


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

    async def run(self, call: ToolCall, room: Fit | None = None) -> ToolOutcome:
        """One call's result; every failure is a result too."""
        ...

    async def save_whole(self, results: list[ToolMessage]) -> None:
        """Make what placeholders and cut markers say true: the whole text is in a file."""

    def end_session(self) -> None: ...

    def close(self) -> None: ...


class ToolCaps(NamedTuple):
    """What a result and the plan may take, sized from the window in force."""

    max_output_bytes: int
    token_cap: Fit | None
    plan_cap: PlanCap


@dataclass(frozen=True)
class _Tool:
    args: type[BaseModel]
    run: Callable[[Any], Awaitable[Output]]
    schema: dict[str, Any] | None = None
    """As offered, where it is not made from `args` (an MCP server's tool)."""
    from_session: int = 1
    """Offered from this session on: before it, the tool has nothing to work on."""


class ToolRunner:
    def __init__(
        self,
        workspace: Workspace,
        shell_timeout_s: float,
        max_output_bytes: int,
        allow_finish: bool,
        state_dir: Path | None = None,
        processes: Processes | None = None,
        env: Mapping[str, str] | None = None,
        blocklist: Blocklist | None = None,
        scratch: Path | None = None,
        plan_cap: PlanCap | None = None,
        token_cap: Fit | None = None,
    ):
        self.workspace = workspace
        self.scratch = scratch
        """The commands' private temporary folder, removed with the runner."""
        self.max_output_bytes = max_output_bytes
        self.token_cap = token_cap
        """Bytes of an output (within `max_output_bytes`) the cap in tokens keeps."""
        self.plan_cap = plan_cap or PlanCap()
        self.processes = processes or Processes(None, use_cgroup=False)
        self.blocklist = blocklist or Blocklist(workspace=str(workspace.root))
        """Every process a tool starts (confined, where the harness was given a sandbox)."""
        ws, procs, environment = workspace, self.processes, dict(env or os.environ)

        def threaded(fn: Callable[[Workspace, Any], Output]) -> Callable[[Any], Awaitable[Output]]:
            async def run(args: Any) -> Output:
                return await abandonable(fn, ws, args)

            return run

        async def shell(args: builtin.ShellExecArgs) -> Output:
            return await shell_exec(ws, args, shell_timeout_s, procs, environment)

        async def finish(args: builtin.FinishArgs) -> Output:
            return Output(f"run finished: {args.summary}")

        async def plan(args: PlanArgs) -> Output:
            # Checked here, kept by the session: the result's record carries the plan.
            if (wrong := problem(args.items, self.plan_cap)) is not None:
                raise ToolFailed(f"{wrong}. Nothing was changed")
            return Output(saved(args.items))

        self.tools: dict[str, _Tool] = {
            "file_read": _Tool(builtin.FileReadArgs, threaded(builtin.file_read)),
            "file_write": _Tool(builtin.FileWriteArgs, threaded(builtin.file_write)),
            "list_dir": _Tool(builtin.ListDirArgs, threaded(builtin.list_dir)),
            "shell_exec": _Tool(builtin.ShellExecArgs, shell),
            PLAN_TOOL: _Tool(PlanArgs, plan),
        }
        if state_dir is not None:
            searched = state_dir

            def search(workspace: Workspace, args: SearchContextArgs) -> Output:
                return search_context(searched, workspace.root, args)

            # Nothing to search before a session has ended: its schema would be dead weight.
            self.tools["search_context"] = _Tool(SearchContextArgs, threaded(search), None, 2)
        if allow_finish:
            self.tools["finish"] = _Tool(builtin.FinishArgs, finish)

    def fit(self, caps: ToolCaps) -> None:
        """The caps for the window in force: a refusal may state a smaller one mid-run."""
        self.max_output_bytes, self.token_cap, self.plan_cap = caps

    def end_session(self) -> None:
        """Background jobs the session's commands left are killed."""
        self.processes.end_session()

    def close(self) -> None:
        self.processes.close()
        if self.scratch is not None:
            remove_scratch(self.scratch)

    def offer(
        self,
        name: str,
        args: type[BaseModel],
        run: Callable[[Any], Awaitable[Output]],
        schema: dict[str, Any] | None = None,
    ) -> None:
        """One more tool, from outside the harness (`ouroboros/mcp`): never one of its own."""
        if name in self.tools:
            raise ValueError(f"a tool named {name} is offered already")
        self.tools[name] = _Tool(args, run, schema)

    def schemas(self, session: int | None = None) -> list[dict[str, Any]]:
        """The tools offered in `session` (None: every tool the run may offer), in an order that
        never changes: a session's requests all start the same."""
        result = []
        for name, tool in self.tools.items():
            if session is not None and session < tool.from_session:
                continue
            if tool.schema is not None:
                result.append(tool.schema)
                continue
            result.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": " ".join((tool.args.__doc__ or name).split()),
                        "parameters": offered(tool.args.model_json_schema()),
                    },
                }
            )
        return result

    def _parse(self, call: ToolCall) -> tuple[_Tool, BaseModel]:
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

    async def run(self, call: ToolCall, room: Fit | None = None) -> ToolOutcome:
        """Run one call; every failure becomes a result the model can read.

        `room` says how many bytes of an output (at the normal cap) fit the room left in the
        window: the model is shown no more, the journal keeps the output at the normal cap."""
        started = time.monotonic()
        error = blocked = summary = None
        try:
            tool, args = self._parse(call)
            if isinstance(args, builtin.ShellExecArgs):
                check_length(args.command)
                blocked = await anyio.to_thread.run_sync(self.blocklist.reason, args.command)
                if blocked:
                    raise ToolFailed(f"refused: this command is blocked ({blocked})")
            output = await tool.run(args)
            if isinstance(args, builtin.FinishArgs):
                summary = args.summary
        except (ToolFailed, PathRefused) as e:
            output, error = Output(f"error: {e}"), str(e)
        except OSError as e:
            output, error = Output(f"error: {e.strerror or e}"), str(e)
        except ValueError as e:  # e.g. a path the file system cannot encode
            output, error = Output(f"error: {e}"), str(e)
        message = await shaped_and_saved(
            call, output, self.max_output_bytes, room, self.workspace, self.token_cap
        )
        if error is not None:
            message = message.model_copy(update={"error": True})
        return ToolOutcome(
            message,
            time.monotonic() - started,
            message.output_bytes or 0,
            error,
            blocked,
            summary,
        )

    async def save_whole(self, results: list[ToolMessage]) -> None:
        """Save results about to be masked or cut whose whole text is in no file yet, where
        their placeholders and cut markers say."""
        await save_whole(self.workspace, results)
