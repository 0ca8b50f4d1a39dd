"""Real runs with real MCP servers: `mcp-server-time` from PyPI over stdio, offline, as the CLI
runs it; a Streamable HTTP server built with the SDK on loopback; and at an 8K window a server
whose schemas exceed `mcp.schema_share`, found and called through `mcp_find_tools`/`mcp_call`
while the first request stays under the prompt budget."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP client needs the [mcp] extra (pip install -e '.[mcp]')")
pytest.importorskip("mcp_server_time", reason="mcp-server-time comes with the dev extra")

from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project, free_port, wait_for
from tests.inprocess import run_here
from tests.test_mcp_hostile import MARK, SERVER, marked_processes, results

HERE = Path(__file__).parent


def tool_results(project: Project) -> list[str]:
    return [m["content"] for m in results(project)]


@pytest.mark.slow
def test_the_time_server_from_pypi_over_stdio(project: Project) -> None:
    time_server = {
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "env": {"OUROBOROS_TEST_MARK": MARK},
    }
    script = [
        Reply(tool_calls=[tool("mcp__time__get_current_time", timezone="Europe/Paris")]),
        Reply(tool_calls=[tool("mcp__time__get_current_time", timezone="Mars/Olympus")]),
        Reply(text="done"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp={"servers": {"time": time_server}})
        result = project.run("run", "--max-turns", "3")
        tools = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
    assert result.returncode == 0, result.stderr
    assert {"mcp__time__get_current_time", "mcp__time__convert_time"} <= set(tools)
    paris, mars = results(project)
    assert json.loads(paris["content"])["timezone"] == "Europe/Paris"
    assert mars["error"] is True
    assert "Mars/Olympus" in mars["content"]
    (offered,) = project.events("mcp_offered")
    assert offered["mode"] == "direct"
    assert offered["servers"] == {"time": 2}
    assert "mcp: 2 tools from 1 server(s)" in result.stdout
    status = project.run("status")
    assert "offered directly" in status.stdout
    assert not marked_processes()  # the server stopped with the run


@pytest.mark.slow
def test_the_readmes_time_server_starts_with_the_venv_not_activated(project: Project) -> None:
    """`command = "mcp-server-time"` as docs/mcp.md has it, in a run started with the venv's
    python whose PATH does not hold the venv's `bin/`: found beside the interpreter."""
    path = "/usr/local/bin:/usr/bin:/bin"
    assert shutil.which("mcp-server-time", path=path) is None
    time_server = {
        "command": "mcp-server-time",
        "args": ["--local-timezone", "UTC"],
        "enabled_tools": ["get_current_time", "convert_time"],
        "env": {"OUROBOROS_TEST_MARK": MARK},
    }
    script = [
        Reply(tool_calls=[tool("mcp__time__get_current_time", timezone="Europe/Paris")]),
        Reply(text="done"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp={"servers": {"time": time_server}})
        result = project.run("run", "--max-turns", "2", env={"PATH": path})
        tools = [t["function"]["name"] for t in server.chat_requests()[0]["tools"]]
    assert result.returncode == 0, result.stderr
    assert "did not start" not in result.stdout
    assert {"mcp__time__get_current_time", "mcp__time__convert_time"} <= set(tools)
    (paris,) = results(project)
    assert json.loads(paris["content"])["timezone"] == "Europe/Paris"
    assert not marked_processes()


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_http_server.py"), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, timeout=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


def test_a_streamable_http_server_on_loopback(project: Project, http_server: str) -> None:
    script = [
        Reply(tool_calls=[tool("mcp__notes__add", a=2, b=40)]),
        Reply(tool_calls=[tool("mcp__notes__add", a="two")]),
        Reply(tool_calls=[tool("mcp__notes__shout", text="over http")]),
        Reply(text="done"),
    ]
    mcp = {"servers": {"notes": {"url": http_server}}}
    ran = run_here(project, script, mcp=mcp, supervisor={"max_total_turns": 4})
    assert ran.returncode == 0, ran.stderr
    added, refused, shouted = results(project)
    assert added["content"] == "42"
    assert refused["error"] is True  # the server's own words, which say what was wrong
    assert "valid integer" in refused["content"]
    assert shouted["content"] == "OVER HTTP"


def _big_server(count: int) -> dict[str, Any]:
    return {"servers": {"big": {"command": sys.executable, "args": [SERVER, "--big", str(count)]}}}


def test_schemas_over_the_share_are_found_then_called(project: Project) -> None:
    script = [
        Reply(tool_calls=[tool("mcp_find_tools", query="tool_007 inventory")]),
        Reply(
            tool_calls=[
                ("mcp_call", {"name": "mcp__big__tool_007", "arguments": {"text": "found"}}),
                ("mcp_call", {"name": "mcp__big__tool_008", "arguments": '{"text": "as text"}'}),
                ("mcp_call", {"name": "mcp__big__nothing", "arguments": {}}),
            ]
        ),
        Reply(text="done"),
    ]
    ran = run_here(
        project, script, window=8192, mcp=_big_server(60), supervisor={"max_total_turns": 3}
    )
    assert ran.returncode == 0, ran.stderr
    (offered,) = project.events("mcp_offered")
    assert offered["mode"] == "search"
    assert offered["schema_tokens"] > 8192  # the schemas alone would not fit the window
    assert offered["offered_tokens"] < offered["share_tokens"]
    first = project.usage()[0]
    assert first["prompt_tokens"] < first["prompt_budget"] * 0.5
    names = [t["function"]["name"] for t in ran.chat_requests()[0]["tools"]]
    assert {"mcp_find_tools", "mcp_call"} <= set(names)
    assert not [n for n in names if n.startswith("mcp__")]
    # The offered tools are the same at every request: the prompt's prefix stays cached.
    assert all(r["tools"] == ran.chat_requests()[0]["tools"] for r in ran.chat_requests())
    answer, called, called_text, unknown = tool_results(project)
    assert answer.splitlines()[1].startswith('{"name":"mcp__big__tool_007"')
    assert called == "tool_007: found"
    assert called_text == "tool_008: as text"
    assert "no MCP tool is named 'mcp__big__nothing'" in unknown


def test_schemas_under_the_share_are_offered_directly(project: Project) -> None:
    ran = run_here(
        project, [Reply(text="done")], window=32768, mcp=_big_server(2),
        supervisor={"max_total_turns": 1},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    (offered,) = project.events("mcp_offered")
    assert offered["mode"] == "direct"
    names = [t["function"]["name"] for t in ran.chat_requests()[0]["tools"]]
    assert "mcp__big__tool_001" in names
    assert "mcp_find_tools" not in names
    schema = next(t for t in ran.chat_requests()[0]["tools"] if "tool_001" in json.dumps(t))
    parameters = json.dumps(schema["function"]["parameters"])
    assert "$schema" not in parameters
    assert "additionalProperties" not in parameters
    assert '"format"' not in parameters


def test_enabled_and_disabled_tools_choose_what_is_offered(project: Project) -> None:
    chosen = {"enabled_tools": ["echo", "pid"], "disabled_tools": ["pid"]}
    off = {"command": sys.executable, "args": [SERVER], "enabled": False}
    mcp = {"servers": {"test": {"command": sys.executable, "args": [SERVER], **chosen}, "off": off}}
    ran = run_here(project, [Reply(text="done")], mcp=mcp, supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    names = [t["function"]["name"] for t in ran.chat_requests()[0]["tools"]]
    assert [n for n in names if n.startswith("mcp")] == ["mcp__test__echo"]
    (offered,) = project.events("mcp_offered")
    assert offered["servers"] == {"test": 1}


@pytest.mark.slow
def test_a_resumed_run_offers_the_same_tools_again(project: Project) -> None:
    mcp = {"servers": {"test": {"command": sys.executable, "args": [SERVER]}}, "schema_share": 0.9}
    first = run_here(
        project,
        [Reply(tool_calls=[tool("mcp__test__crash")])],
        mcp=mcp,
        supervisor={"max_total_turns": 1},
    )
    assert first.returncode == 0, first.stderr
    again = run_here(
        project,
        [Reply(tool_calls=[tool("mcp__test__echo", text="resumed")])],
        mcp=mcp,
        supervisor={"max_total_turns": 2},
    )
    assert again.returncode == 0, again.stderr
    assert tool_results(project)[-1] == "echo: resumed"
    offered = project.events("mcp_offered")
    assert len(offered) == 2
    assert offered[0]["servers"] == offered[1]["servers"]
    assert first.chat_requests()[0]["tools"] == again.chat_requests()[0]["tools"]
    status = project.run("status")
    assert "1 fault(s), the last: test exited with code 3" in status.stdout
