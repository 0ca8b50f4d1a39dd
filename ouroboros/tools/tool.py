"""What every tool is, built in or an MCP server's: a name, its schema, and an async `run` given
the call's validated arguments and what it needs from the run (`ToolContext`). The runner
(`ToolRunner`) does what is common to them all: parsing, caps, errors as results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from ouroboros.context.plan import PlanCap
from ouroboros.tools.workspace import Workspace

UNSENT = {"title", "default", "minimum", "maximum", "maxLength", "maxItems"}
"""What a built-in tool's parameters are sent without: defaults and bounds are the harness's to
apply and check (a value out of bounds gets an error that says what to do). Every character of a
schema is in every request."""


class ToolFailed(Exception):
    """The tool could not do what was asked; the message goes back to the model."""

    def __init__(self, message: str, blocked: str | None = None):
        super().__init__(message)
        self.blocked = blocked
        """The blocklist's rule a refused command broke."""


@dataclass(frozen=True)
class Output:
    text: str
    exit_code: int | None = None
    finished: str | None = None
    """The summary of a run the call ends (`finish`)."""


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


@dataclass(frozen=True)
class ToolContext:
    """What a tool is given from the run at each call."""

    workspace: Workspace
    plan_cap: PlanCap
    """Sized from the window in force."""
    seen: frozenset[str] = frozenset()
    """The paths the agent read or wrote with the file tools in this session's messages
    (`builtin.files_seen`): only those files `file_write` replaces."""


class Tool(Protocol):
    """One tool the agent is offered. A built-in one names its arguments' model, whose docstring
    is its description; an MCP server's gives the schema its server listed."""

    name: str
    args: type[BaseModel]
    """The model the call's arguments are checked against before `run`."""
    from_session: int = 1
    """Offered from this session on: before it, the tool has nothing to work on."""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": " ".join((self.args.__doc__ or self.name).split()),
                "parameters": offered(self.args.model_json_schema()),
            },
        }

    async def run(self, args: Any, context: ToolContext) -> Output:
        """The result; `ToolFailed` (or a refused path, a system error) is an error result."""
        ...

    def end_session(self) -> None:
        """What the session's calls left running is stopped."""
        return

    def close(self) -> None:
        """What the tool holds is given back, at the run's end."""
        return


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
