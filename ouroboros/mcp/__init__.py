"""The MCP client: tools from Model Context Protocol servers, offered to the agent beside the
built-in ones (the `[mcp]` extra; `README.md` here says what is pure and what does I/O)."""
