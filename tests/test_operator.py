"""`tell`, `pause` and `unpause` taken by a run in this process: delivered once at a safe point,
a pause that makes no model call, both surviving a kill (the journal cut after any record, as a
kill -9 leaves it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.clock import FakeClock
from ouroboros.ground.state_folder import (
    FORMER_UNPAUSE_REQUEST,
    INBOX,
    PAUSE_REQUEST,
    UNPAUSE_REQUEST,
)
from ouroboros.model.scripted import Reply, tool
from ouroboros.operator import inbox
from tests.conftest import Project
from tests.inprocess import Scripted, run_here

TOLD = "the data is in data.csv, not in data.json"


def step(body: dict[str, Any]) -> int:
    """Which reply this request asks for: a resumed run is asked the same at the same step."""
    return sum(1 for m in body["messages"] if m["role"] == "assistant") + 1


def shell_agent(body: dict[str, Any]) -> Reply:
    return Reply(tool_calls=[tool("shell_exec", command=f"echo step {step(body)}")])


def journal(project: Project) -> list[dict[str, Any]]:
    return project.records("journal.jsonl")


def told_in(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "user" and TOLD in m["content"])


class PausedClock(FakeClock):
    """The run's clock; each sleep notes how many model calls were made by then, and the
    `unpause_after`-th one leaves an `unpause` request, as a person would while the run waits."""

    def __init__(
        self,
        state: Path,
        requests: list[dict[str, Any]],
        unpause_after: int,
        request: str = UNPAUSE_REQUEST,
    ):
        super().__init__()
        self.state, self.requests, self.unpause_after = state, requests, unpause_after
        self.request = request
        self.calls_at_sleeps: list[int] = []

    async def sleep(self, seconds: float) -> None:
        self.calls_at_sleeps.append(len(self.requests))
        if len(self.calls_at_sleeps) == self.unpause_after:
            (self.state / self.request).touch()
        await super().sleep(seconds)


def test_a_message_left_for_a_stopped_run_opens_its_first_step(project: Project) -> None:
    letter = inbox.post(project.state, TOLD)
    model = Scripted(shell_agent)
    result = run_here(project, model, supervisor={"max_total_turns": 3})
    assert result.returncode == 0, result.stderr
    requests = model.chat_requests()
    assert [told_in(r) for r in requests] == [1, 1, 1]
    told = [r for r in journal(project) if r["kind"] == "told"]
    assert [(t["message_id"], t["text"]) for t in told] == [(letter.message_id, TOLD)]
    assert requests[0]["messages"][-1]["content"].endswith(TOLD)
    assert inbox.waiting(project.state) == []
    assert [e["text"] for e in project.events("told")] == [TOLD]


def test_a_message_sent_mid_step_waits_for_the_steps_results(project: Project) -> None:
    def agent(body: dict[str, Any]) -> Reply:
        if step(body) == 2:  # sent while the model answers: the call and its result come first
            inbox.post(project.state, TOLD)
        return shell_agent(body)

    model = Scripted(agent)
    assert run_here(project, model, supervisor={"max_total_turns": 4}).returncode == 0
    requests = model.chat_requests()
    assert [told_in(r) for r in requests] == [0, 0, 1, 1]
    roles = [m["role"] for m in requests[2]["messages"]]
    assert roles[-3:] == ["assistant", "tool", "user"]


def test_a_message_sent_as_a_session_ends_opens_the_next(project: Project) -> None:
    def agent(body: dict[str, Any]) -> Reply:
        if step(body) == 2 and not any(TOLD in m["content"] for m in body["messages"]):
            inbox.post(project.state, TOLD)
        return shell_agent(body)

    model = Scripted(agent)
    limits = {"max_total_turns": 3}
    assert run_here(project, model, session={"max_turns": 2}, supervisor=limits).returncode == 0
    records = journal(project)
    kinds = [r["kind"] for r in records if r["kind"] in ("session_start", "told")]
    assert kinds == ["session_start", "session_start", "told"]
    assert told_in(model.chat_requests()[2]) == 1


def _copy_cut(source: Project, root: Path, keep: int, letter_file: bool) -> Project:
    """The project as a kill -9 after the journal's first `keep` records leaves it; the inbox
    file still there or already removed."""
    shutil.copytree(source.root, root)
    copy = Project(root)
    path = copy.state / "journal.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:keep]))
    # The logs follow the journal, and a snapshot is a shortcut to its fold: none is kept.
    for derived in ("events.jsonl", "token_usage.jsonl", "status.json", "journal.jsonl.snapshot"):
        (copy.state / derived).unlink(missing_ok=True)
    if not letter_file:
        shutil.rmtree(copy.state / INBOX, ignore_errors=True)
    return copy


@pytest.mark.slow
def test_a_kill_at_any_record_between_tell_and_delivery_delivers_it_once(
    project: Project, tmp_path: Path
) -> None:
    """Left before the run, delivered in its first step: cut after each record up to the
    delivery's (the inbox file still there), and after it (file there or already gone)."""
    letter = inbox.post(project.state, TOLD)
    kept = project.state / INBOX / f"{letter.message_id}.json"
    saved = kept.read_bytes()
    result = run_here(project, Scripted(shell_agent), supervisor={"max_total_turns": 2})
    assert result.returncode == 0, result.stderr
    records = journal(project)
    delivered = next(i for i, r in enumerate(records) if r["kind"] == "told")
    (project.state / INBOX).mkdir(exist_ok=True)
    kept.write_bytes(saved)  # as before the removal; each cut decides whether it stays
    started = next(i for i, r in enumerate(records) if r["kind"] == "run_start")
    cases = [(keep, True) for keep in range(started + 1, len(records) + 1)]
    cases += [(keep, False) for keep in range(delivered + 1, len(records) + 1)]
    for keep, letter_file in cases:
        copy = _copy_cut(project, tmp_path / f"cut-{keep}-{letter_file}", keep, letter_file)
        model = Scripted(shell_agent)
        result = run_here(copy, model, supervisor={"max_total_turns": 3})
        assert result.returncode == 0, (keep, letter_file, result.stderr)
        told = [r for r in journal(copy) if r["kind"] == "told"]
        assert len(told) == 1, (keep, letter_file)
        assert all(told_in(r) == 1 for r in model.chat_requests()), (keep, letter_file)
        assert inbox.waiting(copy.state) == [], (keep, letter_file)


def test_a_run_paused_before_it_starts_makes_no_call_until_unpaused(project: Project) -> None:
    project.state.mkdir()
    (project.state / PAUSE_REQUEST).touch()
    model = Scripted(shell_agent)
    clock = PausedClock(project.state, model.requests, unpause_after=5)
    result = run_here(project, model, clock=clock, supervisor={"max_total_turns": 2})
    assert result.returncode == 0, result.stderr
    assert clock.calls_at_sleeps == [0] * 5
    kinds = [r["kind"] for r in journal(project) if r["kind"] in ("paused", "unpaused")]
    assert kinds == ["paused", "unpaused"]
    assert len(model.chat_requests()) == 2
    assert not (project.state / PAUSE_REQUEST).exists()
    assert not (project.state / UNPAUSE_REQUEST).exists()


def test_a_request_of_the_former_name_unpauses_with_a_warning(project: Project) -> None:
    """`resume`, as a script or hook written before issue 30 leaves it, still unpauses."""
    project.state.mkdir()
    (project.state / PAUSE_REQUEST).touch()
    model = Scripted(shell_agent)
    clock = PausedClock(project.state, model.requests, 2, request=FORMER_UNPAUSE_REQUEST)
    result = run_here(project, model, clock=clock, supervisor={"max_total_turns": 1})
    assert result.returncode == 0, result.stderr
    assert kinds_of(project, "paused", "unpaused") == ["paused", "unpaused"]
    warned = [e["message"] for e in project.events("warning")]
    assert "a `resume` request is now `unpause`" in warned
    assert not (project.state / FORMER_UNPAUSE_REQUEST).exists()


def test_a_pause_holds_after_a_kill_and_the_restarted_run_waits_for_unpause(
    project: Project,
) -> None:
    def agent(body: dict[str, Any]) -> Reply:
        if step(body) == 2:
            (project.state / PAUSE_REQUEST).touch()  # taken after this step's results
        return shell_agent(body)

    first = Scripted(agent)
    clock = PausedClock(project.state, first.requests, unpause_after=3)
    assert run_here(project, first, clock=clock, supervisor={"max_total_turns": 3}).returncode == 0
    assert clock.calls_at_sleeps == [2, 2, 2]
    # Killed while paused: the journal ends at the pause.
    path = project.state / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    paused = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "paused")
    path.write_text("".join(lines[: paused + 1]))
    second = Scripted(shell_agent)
    clock = PausedClock(project.state, second.requests, unpause_after=4)
    assert run_here(project, second, clock=clock, supervisor={"max_total_turns": 3}).returncode == 0
    assert clock.calls_at_sleeps == [0] * 4
    assert len(second.chat_requests()) == 1
    kinds = [r["kind"] for r in journal(project) if r["kind"] in ("paused", "unpaused")]
    assert kinds == ["paused", "unpaused"]


def test_auto_restart_off_pauses_before_a_restart_and_once_after_a_kill(project: Project) -> None:
    model = Scripted(shell_agent)
    clock = PausedClock(project.state, model.requests, unpause_after=3)
    session, limits = {"max_turns": 1}, {"auto_restart": False, "max_total_turns": 2}
    result = run_here(project, model, clock=clock, session=session, supervisor=limits)
    assert result.returncode == 0, result.stderr
    assert clock.calls_at_sleeps == [1, 1, 1]
    wanted = ("paused", "unpaused", "session_start")
    assert kinds_of(project, *wanted) == ["session_start", "paused", "unpaused", "session_start"]
    assert project.events("paused")[0]["by"] == "auto_restart = false"
    # Killed between the unpause and the new session's start: it goes on without a second pause.
    path = project.state / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    unpaused = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "unpaused")
    path.write_text("".join(lines[: unpaused + 1]))
    (project.state / "journal.jsonl.snapshot").unlink(missing_ok=True)
    again = Scripted(shell_agent)
    clock = PausedClock(project.state, again.requests, unpause_after=3)  # were it to pause
    result = run_here(project, again, clock=clock, session=session, supervisor=limits)
    assert result.returncode == 0, result.stderr
    assert kinds_of(project, *wanted) == ["session_start", "paused", "unpaused", "session_start"]
    assert len(again.chat_requests()) == 1
    assert clock.calls_at_sleeps == []


def test_a_journal_from_before_the_rename_folds_its_resumed_as_unpaused(project: Project) -> None:
    """Journals written before issue 30 say `resumed` for an unpause: it still ends the pause."""
    model = Scripted(shell_agent)
    clock = PausedClock(project.state, model.requests, unpause_after=1)
    session, limits = {"max_turns": 1}, {"auto_restart": False, "max_total_turns": 2}
    assert run_here(project, model, clock=clock, session=session, supervisor=limits).returncode == 0
    path = project.state / "journal.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    unpaused = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "unpaused")
    old = lines[unpaused].replace('"kind":"unpaused"', '"kind":"resumed"')
    assert old != lines[unpaused]
    path.write_text("".join([*lines[:unpaused], old]))
    (project.state / "journal.jsonl.snapshot").unlink(missing_ok=True)
    again = Scripted(shell_agent)
    clock = PausedClock(project.state, again.requests, unpause_after=3)  # were it to pause
    result = run_here(project, again, clock=clock, session=session, supervisor=limits)
    assert result.returncode == 0, result.stderr
    assert kinds_of(project, "paused", "resumed", "session_start")[-2:] == [
        "resumed",
        "session_start",
    ]
    assert clock.calls_at_sleeps == []


def kinds_of(project: Project, *wanted: str) -> list[str]:
    return [r["kind"] for r in journal(project) if r["kind"] in wanted]


def test_a_message_longer_than_the_window_has_room_for_is_shown_cut(project: Project) -> None:
    """A 15 KB message in a 4K window: shown cut (whole in the journal), never a prompt the
    server refuses with every request after it."""
    words = " ".join(f"w{i}" for i in range(2700))
    inbox.post(project.state, "MARK " + words)
    steps = [Reply(tool_calls=[tool("shell_exec", command=f"echo {n}")]) for n in range(4)]
    ran = run_here(project, [*steps, Reply(tool_calls=[tool("finish", summary="done")])])
    assert ran.returncode == 0, ran.stderr
    assert not project.events("context_overflow")
    [told] = [r for r in project.records("journal.jsonl") if r["kind"] == "told"]
    assert told["text"] == "MARK " + words
    shown = json.dumps(ran.chat_requests()[0])
    assert "MARK" in shown
    assert "only its first" in shown
