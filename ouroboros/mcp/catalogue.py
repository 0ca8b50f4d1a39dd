"""The servers' tools as the agent is offered them, and how: each tool's schema in every request
(`direct`) while together they take at most `mcp.schema_share` of the prompt budget, else two
small tools that stay the same all run (`search`: `mcp_find_tools` answers with the compact
schemas of the best matches, `mcp_call` calls one), so the prompt's prefix, which the server's
cache keeps, never changes with what the agent looks for. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ouroboros.context.tokens import tools_estimate
from ouroboros.mcp.schemas import normalised
from ouroboros.tools.tool import ToolArgs

Mode = Literal["direct", "search"]
FIND_TOOL = "mcp_find_tools"
CALL_TOOL = "mcp_call"
DESCRIPTION_CHARS = 1000
"""Of a tool's description, offered in every request (direct)."""
COMPACT_DESCRIPTION_CHARS = 300
"""Of a tool's description, in what `mcp_find_tools` answers."""
PARAMETER_CHARS = 100
"""Of each parameter's description, in what `mcp_find_tools` answers."""
NAMES_LISTED = 40
"""Names listed when nothing matches a search."""


@dataclass(frozen=True)
class McpTool:
    name: str
    """As the model calls it: `mcp__<server>__<tool>` (`names.tool_names`)."""
    server: str
    tool: str
    """As the server names it."""
    description: str
    parameters: dict[str, Any]
    """Normalised (`schemas.normalised`)."""

    def schema(self) -> dict[str, Any]:
        described = f"[MCP server {self.server}] {self.description}"
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": _cut(described, DESCRIPTION_CHARS),
                "parameters": self.parameters,
            },
        }

    def compact(self) -> str:
        """One line: the name, the description cut short, the parameters."""
        shown = {
            "name": self.name,
            "description": _cut(self.description, COMPACT_DESCRIPTION_CHARS),
            "parameters": _briefly(self.parameters),
        }
        return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))


def _briefly(node: object) -> object:
    """The schema with every description cut to `PARAMETER_CHARS`."""
    if isinstance(node, dict):
        return {
            key: _cut(value, PARAMETER_CHARS)
            if key == "description" and isinstance(value, str)
            else _briefly(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_briefly(item) for item in node]
    return node


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FindToolsArgs(ToolArgs):
    """Find tools of the MCP servers by what they do; answers with their names and parameters,
    to call with mcp_call."""

    query: str = Field(description="Words saying what the tool should do")
    limit: int = Field(5, ge=1, le=10, description="How many tools at most")


class McpCallArgs(ToolArgs):
    """Call a tool of an MCP server found with mcp_find_tools."""

    model_config = ConfigDict(strict=False)
    name: str = Field(description="The tool's name as mcp_find_tools gave it")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments, as its parameters say"
    )

    @field_validator("arguments", mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        """Small models often send the arguments object as a JSON string."""
        if isinstance(value, str):
            try:
                return json.loads(value or "{}")
            except json.JSONDecodeError:
                raise ValueError("give the arguments as a JSON object") from None
        return value


def search_schemas(servers: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The two small tools' schemas, the servers named in the first's description."""
    named = f" ({', '.join(servers)})" if servers else ""
    described = {
        FIND_TOOL: f"Find tools of the MCP servers{named} by what they do; answers with their "
        f"names and parameters, to call with {CALL_TOOL}.",
        CALL_TOOL: McpCallArgs.__doc__ or CALL_TOOL,
    }
    models: dict[str, type[BaseModel]] = {FIND_TOOL: FindToolsArgs, CALL_TOOL: McpCallArgs}
    schemas = {}
    for name, model in models.items():
        parameters = normalised(model.model_json_schema())
        parameters.pop("description", None)  # the function's own, said once
        function = {"name": name, "description": described[name], "parameters": parameters}
        schemas[name] = {"type": "function", "function": function}
    return schemas


def schema_tokens(tools: Sequence[McpTool]) -> int:
    """Raw tokens the tools' schemas add to every request."""
    return tools_estimate([t.schema() for t in tools])


def mode_for(tokens: int, prompt_budget: int, share: float) -> Mode:
    return "direct" if tokens <= share * prompt_budget else "search"


def _words(text: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if len(w) > 1}


def found(tools: Sequence[McpTool], query: str, limit: int) -> list[McpTool]:
    """The tools that best match the query's words: in the name counts thrice, in the
    description or a parameter's name once; a word that starts one counts half."""
    wanted = _words(query)
    scored = []
    for order, tool in enumerate(tools):
        named = _words(f"{tool.server} {tool.tool}")
        said = _words(tool.description) | _words(" ".join(tool.parameters.get("properties", {})))
        score = 0.0
        for word in wanted:
            score += 3 if word in named else 1 if word in said else 0
            if any(w.startswith(word) or word.startswith(w) for w in named | said):
                score += 0.5
        if score > 0:
            scored.append((-score, order, tool))
    return [tool for _, _, tool in sorted(scored, key=lambda s: (s[0], s[1]))[:limit]]


def find_answer(tools: Sequence[McpTool], query: str, limit: int) -> str:
    matches = found(tools, query, limit)
    if matches:
        lines = [t.compact() for t in matches]
        return "\n".join([f"call one with {CALL_TOOL}(name, arguments):", *lines])
    names = ", ".join(t.name for t in tools[:NAMES_LISTED])
    more = f" and {len(tools) - NAMES_LISTED} more" if len(tools) > NAMES_LISTED else ""
    return f"no tool matches {query!r}; the tools are: {names}{more}"
