"""A Streamable HTTP MCP server built with the SDK, for the tests: `python tests/mcp_http_server.py
PORT` serves `add` and `shout` at http://127.0.0.1:PORT/mcp until it is killed."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("notes")


@server.tool()
def add(a: int, b: int) -> str:
    """Add two whole numbers."""
    return str(a + b)


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
