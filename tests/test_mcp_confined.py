"""A stdio MCP server runs as a shell command does: writes in the workspace only, no network
with `network = false`, only the `tools.env` variables and its own `env`; it dies with the
harness however the harness dies; and a config with servers but no SDK is one line."""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP client needs the [mcp] extra (pip install -e '.[mcp]')")

from ouroboros.mcp.spawn import NotFound, found
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project, wait_for
from tests.inprocess import run_here
from tests.test_mcp_hostile import MARK, marked_processes, results, servers


def contents(project: Project) -> list[str]:
    return [m["content"] for m in results(project)]


def test_a_server_writes_in_the_workspace_only(project: Project) -> None:
    outside, state = project.root / "outside.txt", project.state / "planted"
    script = [
        Reply(tool_calls=[tool("mcp__test__write", path=str(project.workspace / "in.txt"))]),
        Reply(tool_calls=[tool("mcp__test__write", path=str(outside))]),
        Reply(tool_calls=[tool("mcp__test__write", path=str(state))]),
        Reply(text="done"),
    ]
    ran = run_here(project, script, mcp=servers(), supervisor={"max_total_turns": 4})
    assert ran.returncode == 0, ran.stderr
    inside, out, planted = contents(project)
    assert inside == "done"
    assert out.startswith("error: refused:")
    assert planted.startswith("error: refused:")
    assert (project.workspace / "in.txt").read_text() == "written"
    assert not outside.exists()
    assert not state.exists()


@pytest.mark.parametrize("network", [True, False])
def test_a_server_without_network_reaches_nothing(project: Project, network: bool) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        script = [Reply(tool_calls=[tool("mcp__test__connect", port=port)]), Reply(text="done")]
        ran = run_here(
            project, script, mcp=servers(network=network), supervisor={"max_total_turns": 2}
        )
    assert ran.returncode == 0, ran.stderr
    (said,) = contents(project)
    assert said == "done" if network else said.startswith("error: refused:")


def test_a_server_sees_only_the_allowed_variables_and_its_own(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUROBOROS_LLM__API_KEY", "secret-key")
    script = [
        Reply(tool_calls=[tool("mcp__test__getenv", variable="OUROBOROS_LLM__API_KEY")]),
        Reply(tool_calls=[tool("mcp__test__getenv", variable="OUROBOROS_TEST_MARK")]),
        Reply(tool_calls=[tool("mcp__test__getenv", variable="TMPDIR")]),
        Reply(text="done"),
    ]
    ran = run_here(project, script, mcp=servers(), supervisor={"max_total_turns": 4})
    assert ran.returncode == 0, ran.stderr
    key, mark, tmp = contents(project)
    assert key == "None"
    assert mark == repr(MARK)
    assert "ouroboros-tmp-" in tmp


@pytest.mark.slow
def test_servers_die_with_a_killed_harness(project: Project) -> None:
    script = [Reply(tool_calls=[tool("mcp__test__stubborn")])]
    journal = project.state / "journal.jsonl"
    with ScriptedServer(script) as server:
        mcp: dict[str, Any] = servers(call_timeout_s=600)
        project.configure(server.url, mcp=mcp)
        run = project.start("run")
        wait_for(lambda: journal.exists() and "tool_started" in journal.read_text(), timeout=60)
        assert marked_processes()
        run.send_signal(signal.SIGKILL)
        run.communicate()
        wait_for(lambda: not marked_processes(), timeout=20)
    assert not marked_processes()


@pytest.mark.slow
def test_a_stop_signal_mid_call_stops_the_run_and_its_servers(project: Project) -> None:
    script = [Reply(tool_calls=[tool("mcp__test__stubborn")])]
    journal = project.state / "journal.jsonl"
    with ScriptedServer(script) as server:
        project.configure(server.url, mcp=servers(call_timeout_s=600))
        run = project.start("run")
        wait_for(lambda: journal.exists() and "tool_started" in journal.read_text(), timeout=60)
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    assert not marked_processes()
    assert project.events("run_end")[-1]["reason"] == "stopped"


def _installed(version: str | None) -> Callable[[str], str]:
    """`importlib.metadata.version` as it answers with this release of the SDK installed."""
    real = importlib.metadata.version

    def answer(name: str) -> str:
        if name != "mcp":
            return real(name)
        if version is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    return answer


@pytest.mark.parametrize(
    ("version", "said"),
    [(None, "the MCP client is not installed"), ("1.26.0", "installed is mcp 1.26.0")],
)
def test_servers_without_the_sdk_are_one_line(
    project: Project, monkeypatch: pytest.MonkeyPatch, version: str | None, said: str
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", _installed(version))
    ran = run_here(project, [Reply(text="done")], mcp=servers())
    assert ran.returncode == 1
    assert said in ran.stderr
    assert "pip install -e '.[mcp]'" in ran.stderr
    assert "\n" not in ran.stderr.strip()
    assert not marked_processes()


class _NoMcpTypes(importlib.abc.MetaPathFinder):
    """As an SDK whose modules are not those of 2.x: `mcp_types` is not there."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.split(".")[0] == "mcp_types":
            raise ModuleNotFoundError(f"No module named {name!r}")


def test_an_sdk_that_does_not_import_is_one_line(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        sdk = name.split(".")[0] in ("mcp", "mcp_types")
        if sdk or name in ("ouroboros.mcp.hub", "ouroboros.mcp.server", "ouroboros.mcp.spawn"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoMcpTypes(), *sys.meta_path])
    ran = run_here(project, [Reply(text="done")], mcp=servers())
    assert ran.returncode == 1
    assert "the MCP client could not be imported (No module named 'mcp_types')" in ran.stderr
    assert "\n" not in ran.stderr.strip()


def test_a_command_is_looked_up_on_path_then_beside_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    beside = Path(sys.executable).parent
    for folder in (first, second):
        folder.mkdir()
        (folder / "shared").write_text("#!/bin/sh\n")
        (folder / "shared").chmod(0o755)
    (first / "not-executable").write_text("#!/bin/sh\n")
    path = [str(first), str(second)]
    assert found("shared", path) == str(first / "shared")  # PATH in its order
    assert found("python", path) == str(beside / "python")  # then beside the interpreter
    assert found("./shared", path) == "./shared"  # a path is left as it is
    monkeypatch.chdir(first)  # a relative folder on PATH is never taken (it would be the workspace)
    assert found("shared", [".", str(second)]) == str(second / "shared")
    with pytest.raises(NotFound) as refused:
        found("not-executable", path)
    assert str(refused.value) == (
        f"not-executable is not on PATH ({first}:{second}) nor in {beside}: install it, or "
        "give `command` its path"
    )
