"""The server's window read again: at each session's start and after a call that suggests a
reload, a change (smaller or larger) is in force for the next request, warned once, journalled
and shown; `context.limit` stays a ceiling, and a server that does not answer changes nothing."""

from __future__ import annotations

import contextlib
import threading
import time
from functools import partial
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.config import ContextSettings, LLMSettings, Settings
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.model.llm import LLMClient, TransientError
from ouroboros.model.scripted import QuietServer, Reply, ScriptedServer
from ouroboros.model.servers import ServerInfo, discover
from ouroboros.run.window import ServerWindow, figures, reread, take_stated
from ouroboros.state.journal import Journal
from ouroboros.state.records import RunStart
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
    assert f"window {after:,} tokens (llama-server /props n_ctx, read again" in status
    assert f"window {after:,} tokens (llama-server /props n_ctx" in project.run("tail").stdout
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
def test_a_prompt_ollama_cut_silently_reads_the_window_again(project: Project) -> None:
    """Ollama reloaded the model with a smaller `num_ctx` and cuts prompts without a word: the
    first cut seen makes the run ask `/api/ps` again, and the session goes on in that window."""
    fill_workspace(project, files=6, words=900)
    with ScriptedServer(reader(6), dialect="ollama", n_ctx=LARGE) as scripted:
        scripted.resize(SMALL, after=4)
        project.configure(scripted.url, supervisor={"max_total_turns": 6})
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    assert project.events("silent_truncation")
    (change,) = server_changes(project)
    assert (change["before"], change["context_limit"], change["session"]) == (LARGE, SMALL, 1)
    assert {u["context_limit"] for u in project.usage() if u["ts"] > change["ts"]} == {SMALL}


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


class Trickling(BaseHTTPRequestHandler):
    """Answers every GET with a JSON body of a byte a tenth of a second: each read is quick, so
    the client's timeout (per read) never trips."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(1 << 20))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client gave up
            while True:
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)

    def log_message(self, *args: object) -> None:
        pass


def test_a_reread_of_a_server_that_trickles_gives_up_within_the_timeout(tmp_path: Path) -> None:
    """The window asked again of a server that answers a byte at a time: it changes nothing
    and blocks the run at most `llm.timeout_s` (the client's timeout, per read, never trips)."""
    httpd = QuietServer(("127.0.0.1", 0), Trickling)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    llm = LLMSettings(base_url=url, model="m", max_output_tokens=256, timeout_s=0.5)
    settings = Settings(llm=llm, context=ContextSettings(limit=8000))
    journal = Journal(tmp_path / JOURNAL)
    start = figures(settings, 8000, "llama-server", "llama-server /props n_ctx", 4)
    journal.append(RunStart(model="m", base_url=url, window=start))

    async def again() -> bool:
        client = LLMClient(llm)
        try:
            server = ServerWindow(partial(discover, client, url, "m"), 8000)
            with anyio.fail_after(60):  # the test's guard: without the bound it never returns
                return await reread(server, journal, settings)
        finally:
            await client.aclose()

    try:
        assert not anyio.run(again)
        assert journal.state.window == start
    finally:
        httpd.shutdown()
        httpd.server_close()
        journal.close()


def test_a_discovery_request_to_a_server_that_trickles_gives_up_within_the_timeout() -> None:
    """Each discovery request (at the start too, where `reread`'s bound does not reach) is a
    transient error once `llm.timeout_s` has passed in all, never a wait for ever."""
    httpd = QuietServer(("127.0.0.1", 0), Trickling)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    llm = LLMSettings(base_url=url, model="m", max_output_tokens=256, timeout_s=0.5)

    async def ask() -> str:
        client = LLMClient(llm)
        try:
            with anyio.fail_after(60):  # the test's guard: without the bound it never returns
                await client.get_json(f"{url}/models")
        except TransientError as e:
            return str(e)
        finally:
            await client.aclose()
        return "answered"

    try:
        assert anyio.run(ask) == f"no whole answer to {url}/models within 0.5 s"
    finally:
        httpd.shutdown()
        httpd.server_close()
