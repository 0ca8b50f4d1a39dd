"""The server's window read again: at each session's start and after a call that suggests a
reload, a change (smaller or larger) is in force for the next request, warned once, journalled
and shown; `context.limit` stays a ceiling, and a server that does not answer changes nothing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from ouroboros.config import ContextSettings, LLMSettings, Settings
from ouroboros.model.llm import TransientError
from ouroboros.model.scripted import Reply, ScriptedServer
from ouroboros.model.servers import ServerInfo
from ouroboros.run.journal import Journal
from ouroboros.run.records import RunStart
from ouroboros.run.state_folder import JOURNAL
from ouroboros.run.window import ServerWindow, figures, reread, take_stated
from ouroboros.wiring import window_for
from tests.conftest import Project
from tests.test_context_run import fill_workspace, reader
from tests.test_stated_window import refusal

SMALL, LARGE = 3000, 12000
TURNS = 4
"""Model calls per session: the server's window changes after the first session's last."""


def server_changes(project: Project) -> list[dict[str, object]]:
    return [e for e in project.events("context_window") if e.get("source") == "server"]


def run_across_a_change(project: Project, start: int, then: int) -> tuple[int, list[int]]:
    """A run of three sessions against llama-server whose window goes from `start` to `then`
    once the first session's last request is answered: the refusals, and each request's tokens
    in the sessions after."""
    fill_workspace(project, files=6, words=900)
    with ScriptedServer(reader(6), dialect="llama", n_ctx=start) as scripted:
        scripted.resize(then, after=TURNS)
        limits = {"max_total_turns": 3 * TURNS}
        project.configure(scripted.url, session={"max_turns": TURNS}, supervisor=limits)
        result = project.run("run")
        assert result.returncode == 0, result.stderr
        sizes = [scripted.count(body) for body in scripted.chat_requests()]
    refused = len(project.events("context_overflow"))
    return refused, sizes[TURNS:]


def assert_changed(project: Project, before: int, after: int) -> None:
    (change,) = server_changes(project)
    assert (change["before"], change["context_limit"]) == (before, after)
    warned = [w for w in project.events("warning") if "the server's window is now" in w["message"]]
    assert len(warned) == 1
    later = [u for u in project.usage() if u["ts"] > change["ts"]]
    assert later
    assert {u["context_limit"] for u in later} == {after}
    status = " ".join(project.run("status").stdout.replace("│", " ").split())
    assert f"window {after:,} tokens (llama-server: llama-server /props n_ctx, read again" in status
    assert f"window {after:,} tokens (llama-server: llama-server" in project.run("tail").stdout
    # The report's chart draws the window line where each call had it: a step.
    assert project.run("report").returncode == 0
    page = (project.root / ".ouroboros" / "report.html").read_text()
    assert f"<title>window {before:,}</title>" in page
    assert f"<title>window {after:,}</title>" in page


@pytest.mark.slow
def test_a_window_that_shrinks_between_sessions_is_read_before_the_next(project: Project) -> None:
    refused, later = run_across_a_change(project, LARGE, SMALL)
    assert refused == 0
    assert max(later) < SMALL
    assert_changed(project, LARGE, SMALL)


@pytest.mark.slow
def test_a_window_that_grows_between_sessions_is_used(project: Project) -> None:
    refused, later = run_across_a_change(project, SMALL, LARGE)
    assert refused == 0
    assert max(later) > SMALL  # the room the old window did not have
    assert_changed(project, SMALL, LARGE)
    budgets = [e["prompt_budget"] for e in project.events("context_window")]
    assert budgets[-1] > budgets[0]


def info(window: int | None) -> ServerInfo:
    return ServerInfo("llama-server", window, "llama-server /props n_ctx")


def test_what_a_reread_takes(tmp_path: Path) -> None:
    """The configured limit is a ceiling; an unchanged figure keeps a smaller window a refusal
    stated; a server down or silent changes nothing."""
    limit = 8000
    llm = LLMSettings(base_url="", model="m", max_output_tokens=256)
    settings = Settings(llm=llm, context=ContextSettings(limit=limit))
    journal = Journal(tmp_path / JOURNAL)
    start = figures(settings, limit, "llama-server", "llama-server /props n_ctx", 4)
    journal.append(RunStart(model="m", base_url="", window=start))
    answers: list[ServerInfo | None] = []

    async def read() -> ServerInfo:
        answer = answers.pop(0)
        if answer is None:
            raise TransientError("cannot reach the model server")
        return answer

    server = ServerWindow(read, LARGE)

    def again(*said: ServerInfo | None) -> bool:
        answers.extend(said)
        return anyio.run(reread, server, journal, settings)

    def now() -> int:
        assert journal.state.window is not None
        return journal.state.window.context_limit

    assert not again(None)  # down
    assert not again(info(None))  # silent
    assert take_stated(journal, settings, refusal(SMALL)) is not None
    assert not again(info(LARGE))  # what it said before: the refusal's window stays
    assert now() == SMALL
    assert again(info(2 * LARGE))  # it changed: the ceiling holds
    assert now() == limit
    assert again(info(SMALL - 1000))
    assert now() == SMALL - 1000
    # A resume reads the server anew: its own smaller figure is not kept as a refusal's is.
    assert window_for(settings, info(LARGE), journal).context_limit == limit
    journal.close()


def run_one_session(project: Project, scripted: ScriptedServer) -> None:
    fill_workspace(project, files=6, words=200)
    project.configure(scripted.url, supervisor={"max_total_turns": 6})
    result = project.run("run")
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_a_call_answered_after_a_failure_reads_the_window_again(project: Project) -> None:
    """A server that failed a call and then answered may have been restarted with another
    window: the session works in it from its next request."""
    answer = reader(6)

    def respond(body: dict[str, object]) -> Reply:
        if len(scripted.requests) == 2:
            scripted.n_ctx = LARGE  # restarting
            return Reply(status=503, error_body={"message": "Loading model"})
        return answer(body)  # type: ignore[no-any-return]

    with ScriptedServer(respond, dialect="llama", n_ctx=2 * SMALL) as scripted:
        run_one_session(project, scripted)
    (change,) = server_changes(project)
    assert (change["before"], change["context_limit"], change["session"]) == (2 * SMALL, LARGE, 1)
    assert len(project.events("session_start")) == 1  # read mid-session
    assert {u["context_limit"] for u in project.usage() if u["ts"] > change["ts"]} == {LARGE}


@pytest.mark.slow
def test_a_refusal_that_names_no_window_reads_it(project: Project) -> None:
    """At most one refusal: the server is asked the window the refusal did not name, and the
    session makes room for it and goes on; every request after fits it."""
    answer = reader(6)

    def respond(body: dict[str, object]) -> Reply:
        if scripted.n_ctx == LARGE and scripted.count(body) >= SMALL:
            scripted.n_ctx = SMALL  # reloaded, with a smaller window
            error = {"message": "context length exceeded", "code": "context_length_exceeded"}
            return Reply(status=400, error_body=error)
        return answer(body)  # type: ignore[no-any-return]

    with ScriptedServer(respond, dialect="llama", n_ctx=LARGE) as scripted:
        fill_workspace(project, files=6, words=600)
        project.configure(scripted.url, supervisor={"max_total_turns": 8})
        result = project.run("run")
        assert result.returncode == 0, result.stderr
        sizes = [scripted.count(body) for body in scripted.chat_requests()]
    refused = next(i for i, size in enumerate(sizes) if size >= SMALL)
    assert max(sizes[refused + 1 :]) < SMALL
    assert len(project.events("context_overflow")) == 1
    (change,) = server_changes(project)
    assert (change["before"], change["context_limit"]) == (LARGE, SMALL)
    # The refused session made room in the window read and went on.
    assert "context_overflow" not in [e["reason"] for e in project.events("session_end")]
