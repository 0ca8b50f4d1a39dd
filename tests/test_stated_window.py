"""The window a server states when it refuses a prompt: taken when it is smaller than the one in
force, for the next request and the next session's carry-over, and kept after a kill -9."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ouroboros.ground.config import LLMSettings, Settings
from ouroboros.ground.jsonl import JsonlReader
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.model.llm import ContextOverflow
from ouroboros.model.scripted import ScriptedServer
from ouroboros.run.window import figures, refused_window, take_stated
from ouroboros.state.journal import Journal, fold
from ouroboros.state.records import JOURNAL_RECORD, Notice, RunStart
from tests.conftest import Project, wait_for
from tests.test_context_run import fill_workspace, reader

CONFIGURED, SERVER = 16000, 3000


def refusal_windows(project: Project) -> list[dict[str, object]]:
    return [e for e in project.events("context_window") if e.get("source") == "refusal"]


def server() -> ScriptedServer:
    """llama-server that says `n_ctx: 3000` in every refusal, and nothing at `/props`."""
    return ScriptedServer(reader(6), dialect="llama", n_ctx=SERVER, hides_window=True)


@pytest.mark.slow
def test_a_run_works_in_the_window_a_refusal_states(project: Project) -> None:
    """The configuration says 16,000: the first refusal sets the window; each session then
    makes its turns and restarts with no more than one refusal."""
    fill_workspace(project, files=6, words=600)
    with server() as scripted:
        limits = {"max_total_turns": 60}
        project.configure(scripted.url, context={"limit": CONFIGURED}, supervisor=limits)
        result = project.run("run")
        requests = scripted.chat_requests()
        assert result.returncode == 0, result.stderr
        refusals = sum(1 for body in requests if scripted.count(body) >= SERVER)
    (change,) = refusal_windows(project)
    assert (change["before"], change["context_limit"]) == (CONFIGURED, SERVER)
    warned = [w for w in project.events("warning") if "its window is 3,000 tokens" in w["message"]]
    assert len(warned) == 1
    # One refusal in all: the window known, no prompt went past it again; and each session made
    # its turns before it restarted (not one turn and a refusal).
    assert refusals == len(project.events("context_overflow")) == 1
    ended = project.events("session_end")
    assert len(ended) >= 3
    assert min(e["turns"] for e in ended) >= 2
    (end,) = project.events("run_end")
    assert end["reason"] == "max_total_turns"
    # After the change every call was budgeted for the server's window.
    after = [u for u in project.usage() if u["ts"] > change["ts"]]
    assert after
    assert {u["context_limit"] for u in after} == {SERVER}
    # `status` says the window in force, and where it came from.
    status = " ".join(project.run("status").stdout.replace("│", " ").split())
    assert "window 3,000 tokens (llama-server: stated when the server refused a prompt" in status


@pytest.mark.slow
def test_a_resume_after_a_kill_keeps_the_stated_window(project: Project) -> None:
    fill_workspace(project, files=6, words=600)
    with server() as scripted:
        project.configure(scripted.url, context={"limit": CONFIGURED})
        process = project.start("run")
        wait_for(lambda: bool(refusal_windows(project)))
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        limits = {"max_total_turns": 20}
        project.configure(scripted.url, context={"limit": CONFIGURED}, supervisor=limits)
        result = project.run("run")
        assert result.returncode == 0, result.stderr
    assert len(refusal_windows(project)) == 1
    # The resume started in it, without a warning of its own, and was refused no more.
    starts = [e for e in project.events("context_window") if "source" not in e]
    assert [e["context_limit"] for e in starts] == [CONFIGURED, SERVER]
    assert len(project.events("context_overflow")) == 1
    assert len([w for w in project.events("warning") if "3,000" in w["message"]]) == 1


def refusal(n_ctx: int | None) -> ContextOverflow:
    return ContextOverflow("request (5000 tokens) exceeds the available context size", 5000, n_ctx)


def test_only_a_smaller_stated_window_is_taken_and_the_fold_keeps_it(tmp_path: Path) -> None:
    """A refusal never proves a larger window, nor one it does not state; the change is a
    record of the journal, so a fold (a resume) works in it."""
    settings = Settings(llm=LLMSettings(base_url="", model="m", max_output_tokens=256))
    journal = Journal(tmp_path / JOURNAL)
    start = figures(settings, CONFIGURED, "llama-server", "llama-server /props n_ctx", 4)
    journal.append(RunStart(model="m", base_url="", window=start))
    for stated in (None, 0, CONFIGURED, 2 * CONFIGURED):
        assert refused_window(journal.state, settings, refusal(stated)) is None
    assert take_stated(journal, settings, refusal(SERVER)) is not None
    assert take_stated(journal, settings, refusal(SERVER)) is None  # the same again: no change
    journal.close()
    state, _ = fold(tmp_path / JOURNAL)
    assert state.window is not None
    assert state.window_change is not None
    assert (state.window_change.before, state.window.context_limit) == (CONFIGURED, SERVER)
    assert state.window == figures(settings, SERVER, "llama-server", state.window.detail, 4)
    assert state.window.prompt_budget < SERVER - 256
    warned = [
        r for r in JsonlReader(tmp_path / JOURNAL).records(JOURNAL_RECORD) if isinstance(r, Notice)
    ]
    assert len(warned) == 1
