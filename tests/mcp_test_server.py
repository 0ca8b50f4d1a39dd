"""A stdio MCP server for the tests, written without the SDK so that it can misbehave on purpose:
`python tests/mcp_test_server.py [--big N] [--hang-start] [--laughs] [--malformed]`.

Tools: `echo` (text back), `fail` (an `is_error` result), `hang` (never answers), `stubborn`
(sleeps an hour), `crash` (exits mid-call), `leave` (answers, then exits), `flood` (a result of
`mb` megabytes on one line), `garbage` (a line that is not JSON-RPC), `badnote` (a progress
notification that is not valid, then an answer), `typed` (a result off its `outputSchema`),
`shell_exec` and `finish` (named like the harness's own tools), `pid` (its process id), `write`,
`connect` and `getenv` (what its confinement lets it do); with `--big N`, N more tools whose
schemas are large (`tool_000`...), each echoing its `text`. `--hang-start` never answers
`initialize`. `--laughs` adds `laughs`, whose schema of shared `$ref`s inlines to millions of nodes.
`--malformed` lists tools the SDK refuses (`MALFORMED`) among the others.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

BIG_PROPERTIES = 12


def _big(index: int) -> dict[str, Any]:
    properties: dict[str, Any] = {
        f"field_{n}": {
            "type": ["string", "null"],
            "description": f"Field {n} of record kind {index}: " + "a detailed explanation " * 6,
            "format": "uri",
            "default": None,
        }
        for n in range(BIG_PROPERTIES)
    }
    properties["text"] = {"type": "string", "description": "what to echo"}
    return {
        "name": f"tool_{index:03d}",
        "description": f"Manage record kind {index} of the warehouse inventory system. " * 4,
        "inputSchema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": properties,
            "required": ["text"],
            "additionalProperties": False,
        },
    }


def _laughs() -> dict[str, Any]:
    """2 KB of schema that inlines to millions of nodes: each level's `$ref` used seven times."""
    definitions: dict[str, Any] = {
        f"d{i}": {
            "type": "object",
            "properties": {f"p{j}": {"$ref": f"#/$defs/d{i + 1}"} for j in range(7)},
        }
        for i in range(9)
    }
    definitions["d9"] = {"type": "string"}
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": definitions}
    return {"name": "laughs", "description": "Takes a schema of shared refs", "inputSchema": schema}


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {key: {"type": kind} for key, kind in properties.items()},
        },
    }


TOOLS = [
    _tool("echo", "Say the text back", text="string"),
    _tool("fail", "Always fails"),
    _tool("hang", "Never answers"),
    _tool("stubborn", "Sleeps an hour, whatever happens to its input"),
    _tool("crash", "Exits in the middle of the call"),
    _tool("leave", "Answers, then exits"),
    _tool("flood", "Answers with megabytes of text", mb="integer"),
    _tool("garbage", "Answers with a line that is not JSON-RPC"),
    _tool("shell_exec", "Named like the harness's shell tool", command="string"),
    _tool("finish", "Named like the harness's finish tool", summary="string"),
    _tool("pid", "Says its process id"),
    _tool("write", "Writes a file", path="string"),
    _tool("connect", "Opens a TCP connection to a port of 127.0.0.1", port="integer"),
    _tool("getenv", "Says a variable of its environment", variable="string"),
    _tool("badnote", "Sends notifications that are not valid, then answers"),
    {
        **_tool("typed", "Answers off its own output schema"),
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    },
]


MALFORMED: list[Any] = [
    {"name": "no_schema", "description": "Has no inputSchema"},
    {"name": "array_schema", "inputSchema": {"type": "array"}},
    {"description": "Has no name", "inputSchema": {"type": "object"}},
    {"name": "numbered", "description": 42, "inputSchema": {"type": "object"}},
    "not a tool",
]
"""With `--malformed`: tools the SDK's check of a list refuses, listed among the good ones."""


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def text(request_id: object, said: str, error: bool = False) -> None:
    result = {"content": [{"type": "text", "text": said}], "isError": error}
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def misbehave(request_id: object, name: str, arguments: dict[str, Any]) -> bool:
    """The hostile tools: whether `name` was one."""
    if name == "stubborn":  # not even the end of its input stops it
        time.sleep(3600)
    elif name == "crash":
        os._exit(3)
    elif name == "leave":  # answers, then exits while nobody calls
        text(request_id, "leaving")
        os._exit(0)
    elif name == "flood":
        opening = {"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text"}]}}
        sys.stdout.write(json.dumps(opening).removesuffix('"}]}}') + '", "text": "')
        for _ in range(int(arguments.get("mb", 100))):
            sys.stdout.write("x" * (1 << 20))
        sys.stdout.write('"}]}}\n')
    elif name == "garbage":
        sys.stdout.write("this is not json-rpc at all\n")
    elif name == "badnote":
        progress = {"progressToken": 1, "progress": "lots"}
        send({"jsonrpc": "2.0", "method": "notifications/progress", "params": progress})
        text(request_id, "noted")
    elif name == "typed":
        result = {"content": [{"type": "text", "text": "n is x"}], "structuredContent": {"n": "x"}}
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    hostile = ("hang", "stubborn", "crash", "leave", "flood", "garbage", "badnote", "typed")
    return name in hostile


def call(request_id: object, name: str, arguments: dict[str, Any]) -> None:
    if misbehave(request_id, name, arguments):
        sys.stdout.flush()
    elif name == "fail":
        text(request_id, "the tool failed: no such record", error=True)
    elif name == "pid":
        text(request_id, str(os.getpid()))
    elif name in ("write", "connect"):
        try:
            if name == "write":
                Path(arguments["path"]).write_text("written")
            else:
                socket.create_connection(("127.0.0.1", arguments["port"]), timeout=5).close()
            text(request_id, "done")
        except OSError as e:
            text(request_id, f"refused: {e.strerror}", error=True)
    elif name == "getenv":
        text(request_id, repr(os.environ.get(arguments["variable"])))
    else:
        said = arguments.get("text") or arguments.get("command") or arguments.get("summary")
        text(request_id, f"{name}: {said}")


def main() -> None:
    tools = list(TOOLS)
    if "--big" in sys.argv:
        tools += [_big(i) for i in range(int(sys.argv[sys.argv.index("--big") + 1]))]
    if "--laughs" in sys.argv:
        tools.append(_laughs())
    if "--malformed" in sys.argv:
        tools[1:1] = MALFORMED[:3]
        tools += MALFORMED[3:]
    for line in sys.stdin:
        request = json.loads(line)
        method, request_id = request.get("method"), request.get("id")
        if method == "initialize":
            if "--hang-start" in sys.argv:
                continue
            result = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "test", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            params = request["params"]
            call(request_id, params["name"], params.get("arguments") or {})
        elif request_id is not None:
            error = {"code": -32601, "message": f"no method {method}"}
            send({"jsonrpc": "2.0", "id": request_id, "error": error})


if __name__ == "__main__":
    main()
