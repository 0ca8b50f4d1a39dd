"""MCP servers that misbehave: each hang, crash, flood, line that is not JSON-RPC and failed
tool gives the agent a one-line tool error, the server is started again (at most
`mcp.max_server_starts` times a session), and the run goes on; a tool named like a built-in never
takes the built-in's place; no server process outlives the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP client needs the [mcp] extra (pip install -e '.[mcp]')")

from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project
from tests.inprocess import Ran, run_here

SERVER = str(Path(__file__).with_name("mcp_test_server.py"))


MARK = f"mcp-hostile-{os.getpid()}"
"""In the test servers' environment: this test process's own, so that the servers of tests in
another worker running at the same time are not taken for ones this process left alive."""


def servers(*extra: str, **settings: Any) -> dict[str, Any]:
    mark = {"OUROBOROS_TEST_MARK": MARK}
    test = {"command": sys.executable, "args": [SERVER, *extra], "env": mark, **settings}
    return {"servers": {"test": test}, "max_server_starts": 1, "schema_share": 0.9}


def results(project: Project) -> list[dict[str, Any]]:
    """The tool results the run journalled, in order."""
    lines = (project.state / "journal.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [
        r["message"] for r in records if r["kind"] == "message" and r["message"]["kind"] == "tool"
    ]


def faults(project: Project) -> list[dict[str, Any]]:
    return [r for r in project.events() if r["kind"] == "mcp_fault"]


def hostile_run(project: Project, call: tuple[str, dict[str, Any]], **settings: Any) -> Ran:
    """The hostile call, then the server's `echo` (it was started again), then a built-in."""
    script = [
        Reply(tool_calls=[call]),
        Reply(tool_calls=[tool("mcp__test__echo", text="again")]),
        Reply(tool_calls=[tool("shell_exec", command="echo intact")]),
        Reply(text="done"),
    ]
    return run_here(project, script, mcp=servers(**settings), supervisor={"max_total_turns": 4})


def assert_survived(project: Project, ran: Ran, error: str) -> None:
    assert ran.returncode == 0, ran.stderr
    first, echo, shell = results(project)[:3]
    assert first["error"] is True
    assert error in first["content"]
    assert "\n" not in first["content"]
    assert echo["content"] == "echo: again"
    assert shell["content"].startswith("exit code 0\nintact")
    assert not marked_processes()


def marked_processes() -> list[int]:
    """Processes of the test servers still alive (their environment carries the mark)."""
    alive = []
    variable = b"\0OUROBOROS_TEST_MARK=" + MARK.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if variable in b"\0" + (entry / "environ").read_bytes():
                alive.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in alive if pid != os.getpid()]


@pytest.mark.slow
def test_a_hanging_server_times_out_and_starts_again(project: Project) -> None:
    ran = hostile_run(project, tool("mcp__test__hang"), call_timeout_s=1)
    assert_survived(project, ran, "did not answer in 1 s")
    assert [f["fault"] for f in faults(project)] == ["did not answer in 1 s"]


def test_a_crashing_server_is_an_error_and_starts_again(project: Project) -> None:
    ran = hostile_run(project, tool("mcp__test__crash"))
    assert_survived(project, ran, "exited with code 3")


@pytest.mark.slow
def test_a_server_that_exited_between_calls_starts_again_first(project: Project) -> None:
    script = [
        Reply(tool_calls=[tool("mcp__test__leave")]),
        Reply(tool_calls=[tool("mcp__test__echo", text="again")], delay_s=1),
        Reply(text="done"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp=servers())
        result = project.run("run", "--max-turns", "3")
    assert result.returncode == 0, result.stderr
    left, echo = results(project)
    assert left["content"] == "leaving"
    assert echo["content"] == "echo: again"
    assert [f["fault"] for f in faults(project)] == ["exited with code 0"]
    assert (
        "mcp server test (echo): exited with code 0; may start again 1 more time(s) this session"
        in result.stdout
    )


PEAK_OF_A_RUN = """
import resource, subprocess, sys
subprocess.run([sys.executable, "-m", "ouroboros", "run", "--fresh", "--max-turns", "3"],
               check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""
"""The peak memory (KiB) of a run in a process of its own, whatever the test worker did before."""


def peak_kib(project: Project, first: tuple[str, dict[str, Any]]) -> int:
    script = [
        Reply(tool_calls=[first]),
        Reply(tool_calls=[tool("mcp__test__echo", text="again")]),
        Reply(text="done"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp=servers())
        done = subprocess.run(
            [sys.executable, "-c", PEAK_OF_A_RUN],
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.slow
def test_a_100_mb_result_is_never_held_whole(project: Project) -> None:
    small = peak_kib(project, tool("mcp__test__echo", text="small"))
    flood = peak_kib(project, tool("mcp__test__flood", mb=100))
    assert "sent a message over 8 MB" in results(project)[0]["content"]
    # The run's peak grew by far less than the result (the 8 MB read at most, and its copies);
    # held whole it would grow by 200 MB and more.
    assert flood - small < 64 << 10
    assert not marked_processes()


def test_a_result_under_the_cap_is_capped_and_saved_whole(project: Project) -> None:
    ran = run_here(
        project,
        [Reply(tool_calls=[tool("mcp__test__flood", mb=2)]), Reply(text="done")],
        mcp=servers(),
        supervisor={"max_total_turns": 2},
    )
    assert ran.returncode == 0, ran.stderr
    (result,) = results(project)
    assert result["output_bytes"] == 2 << 20
    assert len(result["content"]) < 40_000
    saved = project.workspace / result["saved_to"]
    assert saved.stat().st_size == result["output_bytes"]


def test_a_line_that_is_not_json_rpc_is_an_error_at_once(project: Project) -> None:
    ran = hostile_run(project, tool("mcp__test__garbage"), call_timeout_s=30)
    assert_survived(project, ran, "sent a line that is not JSON-RPC")


def test_an_is_error_result_is_a_tool_error_and_no_fault(project: Project) -> None:
    ran = hostile_run(project, tool("mcp__test__fail"))
    assert_survived(project, ran, "the tool failed: no such record")
    assert faults(project) == []


def test_a_result_off_its_output_schema_is_a_tool_error_and_no_fault(project: Project) -> None:
    ran = hostile_run(project, tool("mcp__test__typed"))
    assert_survived(project, ran, "test answered off the tool's schema: Invalid structured")
    assert faults(project) == []


@pytest.mark.slow
def test_a_bad_notification_is_one_notice_and_no_traceback(project: Project) -> None:
    script = [Reply(tool_calls=[tool("mcp__test__badnote")]), Reply(text="done")]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp=servers())
        result = project.run("run", "--max-turns", "2")
    assert result.returncode == 0, result.stderr
    assert results(project)[0]["content"] == "noted"
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    warnings = [w["message"] for w in project.events("warning")]
    said = [w for w in warnings if w.startswith("MCP client: Failed to validate notification")]
    assert len(said) == 1, said
    assert "\n" not in said[0]


def test_starts_after_faults_are_bounded_per_session(project: Project) -> None:
    script = [Reply(tool_calls=[tool("mcp__test__crash")]) for _ in range(3)]
    ran = run_here(
        project,
        [*script, Reply(tool_calls=[tool("shell_exec", command="echo intact")])],
        mcp=servers(),
        supervisor={"max_total_turns": 4},
        loops={"repeat_after": 0, "failing_after": 0},
    )
    assert ran.returncode == 0, ran.stderr
    first, second, third, shell = results(project)
    assert "exited with code 3" in first["content"]
    assert "not started again this session" in second["content"]
    assert "not again before the next session" in third["content"]
    assert shell["content"].startswith("exit code 0")
    assert not marked_processes()


def test_a_new_session_may_start_a_server_again(project: Project) -> None:
    crashes = [Reply(tool_calls=[tool("mcp__test__crash")]) for _ in range(3)]
    ran = run_here(
        project,
        [*crashes, Reply(tool_calls=[tool("mcp__test__echo", text="next session")])],
        mcp=servers(),
        session={"max_turns": 3},
        supervisor={"max_total_turns": 4},
        loops={"repeat_after": 0, "failing_after": 0, "session_repeat_after": 0},
    )
    assert ran.returncode == 0, ran.stderr
    *_, third, echo = results(project)
    assert "not again before the next session" in third["content"]
    assert echo["content"] == "echo: next session"


def test_a_server_that_did_not_start_is_tried_again_next_session(project: Project) -> None:
    late = servers()  # `test` starts once the agent has made `ready`; `big` makes it search mode
    late["servers"]["big"] = servers()["servers"]["test"]
    late["servers"]["test"]["command"] = "sh"
    late["servers"]["test"]["args"] = ["-c", f"test -f ready && exec {sys.executable} {SERVER}"]
    script = [
        Reply(tool_calls=[tool("shell_exec", command="touch ready")]),
        Reply(tool_calls=[tool("mcp_find_tools", query="say the text back")]),
        Reply(tool_calls=[tool("mcp_find_tools", query="say the text back")]),
        Reply(
            tool_calls=[("mcp_call", {"name": "mcp__test__echo", "arguments": {"text": "late"}})]
        ),
    ]
    ran = run_here(
        project,
        script,
        mcp={**late, "schema_share": 0.001},
        session={"max_turns": 2},
        supervisor={"max_total_turns": 4},
        loops={"repeat_after": 0, "failing_after": 0, "session_repeat_after": 0},
    )
    assert ran.returncode == 0, ran.stderr
    _, before, after, called = results(project)
    assert "mcp__test__echo" not in before["content"]
    assert "mcp__test__echo" in after["content"]
    assert called["content"] == "echo: late"
    described = [  # the MCP tools' (search_context joins the built-in ones in session 2)
        [t["function"]["description"] for t in request["tools"] if "mcp" in t["function"]["name"]]
        for request in ran.chat_requests()
    ]
    assert described[0] == described[-1]
    assert "MCP servers (test, big)" in " ".join(described[0])
    assert not marked_processes()


def test_a_schema_of_shared_refs_is_offered_as_any_object(project: Project) -> None:
    script = [Reply(tool_calls=[tool("mcp__test__laughs", x="y")]), Reply(text="done")]
    ran = run_here(project, script, mcp=servers("--laughs"), supervisor={"max_total_turns": 2})
    assert ran.returncode == 0, ran.stderr
    offered = {t["function"]["name"]: t["function"] for t in ran.chat_requests()[0]["tools"]}
    assert offered["mcp__test__laughs"]["parameters"] == {"type": "object", "properties": {}}
    assert offered["mcp__test__echo"]["parameters"]["properties"] == {"text": {"type": "string"}}
    warnings = [w["message"] for w in project.events("warning")]
    assert [w for w in warnings if w.startswith("MCP tool mcp__test__laughs: its input schema")]
    assert results(project)[0]["content"] == "laughs: None"


def test_a_malformed_tool_is_left_out_and_the_others_offered(project: Project) -> None:
    script = [
        Reply(tool_calls=[tool("mcp__test__echo", text="still offered")]),
        Reply(tool_calls=[tool("mcp__test__typed")]),  # its output schema is still checked
        Reply(text="done"),
    ]
    ran = run_here(project, script, mcp=servers("--malformed"), supervisor={"max_total_turns": 3})
    assert ran.returncode == 0, ran.stderr
    names = {t["function"]["name"] for t in ran.chat_requests()[0]["tools"]}
    assert {"mcp__test__echo", "mcp__test__fail", "mcp__test__getenv"} <= names
    assert not names & {"mcp__test__no_schema", "mcp__test__array_schema", "mcp__test__numbered"}
    echo, typed = results(project)
    assert echo["content"] == "echo: still offered"
    assert "answered off the tool's schema" in typed["content"]
    warnings = [w["message"] for w in project.events("warning") if "left out" in w["message"]]
    assert warnings == [
        "MCP server test: tool 'no_schema' left out: inputSchema: Field required",
        "MCP server test: tool 'array_schema' left out: inputSchema.type: Input should be 'object'",
        "MCP server test: tool #4 of its list left out: name: Field required",
        "MCP server test: tool 'numbered' left out: description: Input should be a valid string",
        "MCP server test: tool #21 of its list left out: Input should be a valid dictionary or "
        "instance of Tool",
    ]
    (offered,) = project.events("mcp_offered")
    assert offered["servers"] == {"test": 16}
    assert faults(project) == []
    assert not marked_processes()


def test_tools_named_like_built_ins_stay_apart(project: Project) -> None:
    script = [
        Reply(tool_calls=[tool("mcp__test__shell_exec", command="rm -rf /")]),
        Reply(tool_calls=[tool("shell_exec", command="echo built-in")]),
        Reply(tool_calls=[tool("mcp__test__finish", summary="not the end")]),
        Reply(text="still here"),
    ]
    ran = run_here(project, script, mcp=servers(), supervisor={"max_total_turns": 4})
    assert ran.returncode == 0, ran.stderr
    assert "max_total_turns" in ran.stdout  # the server's `finish` ended nothing
    mcp_shell, shell, mcp_finish = results(project)
    assert mcp_shell["content"] == "shell_exec: rm -rf /"
    assert shell["content"].startswith("exit code 0\nbuilt-in")
    assert mcp_finish["content"] == "finish: not the end"
    names = [t["function"]["name"] for t in ran.chat_requests()[0]["tools"]]
    assert names.count("shell_exec") == 1
    assert names.count("finish") == 1
    assert {"mcp__test__shell_exec", "mcp__test__finish"} <= set(names)


@pytest.mark.slow
def test_a_server_that_never_starts_is_left_out(project: Project) -> None:
    ran = run_here(
        project,
        [Reply(tool_calls=[tool("shell_exec", command="echo intact")]), Reply(text="done")],
        mcp=servers("--hang-start", startup_timeout_s=1),
        supervisor={"max_total_turns": 2},
    )
    assert ran.returncode == 0, ran.stderr
    assert "test did not start: did not start in 1 s" in ran.stdout
    names = [t["function"]["name"] for t in ran.chat_requests()[0]["tools"]]
    assert not [name for name in names if name.startswith("mcp")]
    assert not marked_processes()


def test_a_server_that_cannot_be_run_is_one_line_naming_what_is_missing(
    project: Project,
) -> None:
    mcp = {
        "servers": {"a": {"command": "no-such-mcp-server"}, "b": {**servers()["servers"]["test"]}}
    }
    mcp["servers"]["b"]["cwd"] = "missing/dir"
    ran = run_here(project, [Reply(text="done")], mcp=mcp, supervisor={"max_total_turns": 1})
    assert ran.returncode == 0, ran.stderr
    path = os.pathsep.join(os.get_exec_path())
    warnings = [w["message"] for w in project.events("warning")]
    assert (
        f"MCP server a did not start: no-such-mcp-server is not on PATH ({path}) nor in "
        f"{Path(sys.executable).parent}: install it, or give `command` its path"
    ) in warnings
    missing = project.workspace / "missing" / "dir"
    assert f"b did not start: No such file or directory: {missing}\n" in ran.stdout


@pytest.mark.slow
def test_a_fatal_error_of_the_run_is_one_line_with_servers_running(project: Project) -> None:
    script = [Reply(status=404, error_body={"error": {"message": "model 'scripted' not found"}})]
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp=servers())
        result = project.run("run")
    assert result.returncode == 1
    assert "model or endpoint not found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marked_processes()
