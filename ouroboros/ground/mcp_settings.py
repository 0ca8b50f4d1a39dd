"""`[mcp]` and `[mcp.servers.NAME]`: the servers to start and how their tools are offered. Shaped
after Codex's `[mcp_servers.NAME]` (`command`, `args`, `env`, `cwd`, `url`, `enabled`,
`enabled_tools`, `disabled_tools`); its `*_timeout_sec` keys are `*_timeout_s` here, as every
duration of this config is. Pure: no import of the SDK."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")


class McpServerSettings(BaseModel):
    """One server: a command over stdio, or a Streamable HTTP `url`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    command: str | None = None
    """The program of a stdio server (run confined as shell commands are)."""
    args: list[str] = []
    env: dict[str, str] = {}
    """Variables the server gets besides those `tools.env` lets through."""
    cwd: Path | None = None
    """Where a stdio server runs; the workspace unless given."""
    url: str | None = None
    """The endpoint of a Streamable HTTP server."""
    enabled: bool = True
    enabled_tools: list[str] | None = None
    """Only these of the server's tools are offered (all when unset)."""
    disabled_tools: list[str] = []
    """These are never offered (after `enabled_tools`)."""
    startup_timeout_s: float = Field(10.0, gt=0)
    call_timeout_s: float = Field(60.0, gt=0)
    network: bool | None = None
    """A stdio server's network, as `tools.network` is for commands; unset = `tools.network`."""


class McpSettings(BaseModel):
    """The MCP servers, and how much of the window their tool schemas may take."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    servers: dict[str, McpServerSettings] = {}
    schema_share: float = Field(0.15, gt=0, le=1)
    """Share of the prompt budget the servers' schemas may take in every request; past it the
    model gets `mcp_find_tools` and `mcp_call` instead."""
    max_server_starts: int = Field(2, ge=0)
    """Times one server is started again in one session after it hangs, crashes or misbehaves."""
    max_message_mb: int = Field(8, ge=1)
    """The longest message read from a server (a stdio line, an HTTP answer or event); a longer
    one is an error, never held whole."""

    @model_validator(mode="after")
    def _servers_make_sense(self) -> McpSettings:
        for name, server in self.servers.items():
            key = f"mcp.servers.{name}"
            if not SERVER_NAME.fullmatch(name):
                raise ValueError(f"{key}: a server's name holds only letters, digits, _ and -")
            if (server.command is None) == (server.url is None):
                raise ValueError(
                    f"{key}: give either command (a server over stdio) or url (Streamable HTTP)"
                )
            stdio_only = server.args or server.env or server.cwd or server.network is not None
            if server.url is not None and stdio_only:
                raise ValueError(f"{key}: args, env, cwd and network are for stdio servers only")
            if server.url is not None and not server.url.startswith(("http://", "https://")):
                raise ValueError(f"{key}: url must start with http:// or https://")
        return self
