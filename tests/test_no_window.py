"""A window figure a server states that is none (a string, a float, a list, 0, a negative, 1,
`true`, 10^12): taken as not reported, with one warning, at the start, when the window is read
again and in a refusal; never a traceback, never a session ended after each turn, never a
window no prompt can reach. Real runs in this process against the loopback server."""

from __future__ import annotations

import io
from typing import Any

import anyio
import pytest
from rich.console import Console

from ouroboros.ground.config_file import load_settings
from ouroboros.ground.figures import window_tokens
from ouroboros.model.scripted import Dialect, Reply, ScriptedServer
from ouroboros.model.servers import CONSERVATIVE_CONTEXT
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run
from tests.conftest import Project
from tests.test_context_run import fill_workspace, reader

NOT_WINDOWS: list[object] = ["4096", 4096.0, [4096], {"n": 4096}, 0, -4096, 1, 255, True, 10**12]
TURNS = 3
"""Model calls per session."""


def run_in_process(project: Project, **sections: dict[str, Any]) -> None:
    """The real supervisor and client in this process, against the loopback server; `TURNS`
    calls a session, three sessions."""
    fill_workspace(project, files=3, words=200)
    settings = load_settings(project.root / "config.toml")
    log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO(), width=200)))
    try:
        outcome = anyio.run(run, settings, log)
    finally:
        log.close()
    assert outcome.exit_code == 0, outcome.reason


def configure(project: Project, server: ScriptedServer, **sections: dict[str, Any]) -> None:
    limits = {"max_total_turns": 3 * TURNS}
    project.configure(server.url, session={"max_turns": TURNS}, supervisor=limits, **sections)


def warnings(project: Project, words: str) -> list[str]:
    return [w["message"] for w in project.events("warning") if words in w["message"]]


def assert_worked_in(project: Project, limit: int) -> None:
    """Every call in `limit`, three whole sessions, no window changed."""
    assert {u["context_limit"] for u in project.usage()} == {limit}
    assert len(project.usage()) == 3 * TURNS
    assert len(project.events("session_start")) == 3
    assert [e["context_limit"] for e in project.events("context_window")] == [limit]


def test_only_a_whole_number_of_256_to_10_million_tokens_is_a_window() -> None:
    assert [window_tokens(figure) for figure in NOT_WINDOWS] == [None] * len(NOT_WINDOWS)
    assert [window_tokens(n) for n in (256, 4096, 10_000_000)] == [256, 4096, 10_000_000]


@pytest.mark.parametrize(
    ("dialect", "figure"),
    [("llama", figure) for figure in NOT_WINDOWS]
    + [("vllm", "32768"), ("vllm", 1), ("lmstudio", 0), ("lmstudio", 2.5e4)]
    + [("ollama", 10**12), ("ollama", 1)],
    ids=repr,
)
def test_a_window_stated_at_the_start_that_is_none_is_not_reported(
    project: Project, dialect: Dialect, figure: object
) -> None:
    with ScriptedServer(reader(3), dialect=dialect, says_window=figure) as server:
        configure(project, server)
        run_in_process(project)
    assert_worked_in(project, CONSERVATIVE_CONTEXT)
    (warned,) = warnings(project, "stated no window")
    assert "taken as not reported; assuming 4096 tokens" in warned
    (window,) = project.events("context_window")
    assert "no window" in window["detail"]  # status does not name the server as its source


def test_a_configured_limit_stands_when_the_server_states_no_window(project: Project) -> None:
    with ScriptedServer(reader(3), dialect="llama", says_window="6000") as server:
        configure(project, server, context={"limit": 6000})
        run_in_process(project)
    assert_worked_in(project, 6000)
    (warned,) = warnings(project, "stated no window")
    assert warned.endswith("using context.limit, 6,000")


@pytest.mark.parametrize("figure", ["8000", 8000.0, 0, 1, True, 10**12], ids=repr)
def test_a_window_read_again_that_is_none_changes_nothing(project: Project, figure: object) -> None:
    """The server states no window once the first session is over: at each later session's
    start it is read again, and the run keeps its window, warned once."""
    answer = reader(3)

    def respond(body: dict[str, Any]) -> Reply:
        if len(server.requests) == TURNS:
            server.says_window = figure
        return answer(body)  # type: ignore[no-any-return]

    with ScriptedServer(respond, dialect="llama", n_ctx=8000) as server:
        configure(project, server)
        run_in_process(project)
    assert_worked_in(project, 8000)
    (warned,) = warnings(project, "read again, is none")
    assert "the run keeps 8,000" in warned


@pytest.mark.parametrize("figure", [1, 255, 10**12, "many"], ids=repr)
def test_a_refusal_that_states_no_window_states_none(project: Project, figure: object) -> None:
    """llama-server refuses one prompt with a figure that is no window: the run does not work in
    it; it asks the server, which says the same window as before, and goes on in that."""
    answer = reader(3)

    def respond(body: dict[str, Any]) -> Reply:
        if len(server.requests) == 2:
            error = {
                "code": 400,
                "message": f"request (7000 tokens) exceeds the available context size ({figure} "
                "tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 7000,
                "n_ctx": figure,
            }
            return Reply(status=400, error_body=error)
        return answer(body)  # type: ignore[no-any-return]

    with ScriptedServer(respond, dialect="llama", n_ctx=8000) as server:
        configure(project, server)
        run_in_process(project)
    assert len(project.events("context_overflow")) == 1
    assert [e["context_limit"] for e in project.events("context_window")] == [8000]
    assert {u["context_limit"] for u in project.usage()} == {8000}
    # The refused session ends (nothing to free in so short a prompt); the next ones run whole.
    ends = [e["reason"] for e in project.events("session_end")]
    assert ends == ["context_overflow", "max_turns", "max_turns"]
    (warned,) = warnings(project, "as its window, which is none")
    assert "taken as not stated" in warned
