"""The run outlives sessions, crashes and outages: restarts, resume, locks, limits."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground import prompts
from ouroboros.ground.jsonl import read_objects
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.run.lock import state_lock
from tests.conftest import Project, wait_for
from tests.inprocess import Scripted, run_here


def journal(project: Project) -> list[dict[str, Any]]:
    return project.records("journal.jsonl")


def test_restarts_reload_an_edited_system_prompt(project: Project) -> None:
    prompt = project.root / "SYSTEM_PROMPT.md"
    versions = itertools.count(2)

    def agent(body: dict[str, Any]) -> Reply:
        # The agent improves its own instructions every reply, as SYSTEM_PROMPT.md invites.
        return Reply(
            tool_calls=[tool("file_write", path=str(prompt), content=f"# Version {next(versions)}")]
        )

    result = run_here(project, agent, session={"max_turns": 2}, supervisor={"max_restarts": 2})
    requests = result.chat_requests()
    assert result.returncode == 0, result.stderr
    assert "max_restarts" in result.stdout
    starts = [r for r in journal(project) if r["kind"] == "session_start"]
    assert [s["session"] for s in starts] == [1, 2, 3]
    # Each new session's system message holds the text as it was on disk when it started.
    systems = [b["messages"][0]["content"] for b in requests]
    assert "Test the harness." in systems[0]
    assert systems[2].endswith("# Version 3")  # session 2 starts after versions 2 and 3
    assert systems[4].endswith("# Version 5")
    marker = requests[2]["messages"][1]["content"]
    assert marker.startswith("Session 2. The previous session ran 2 turns")
    assert "turn limit" in marker
    restarts = project.events("session_restart")
    assert [(r["session"], r["previous_turns"], r["reason"]) for r in restarts] == [
        (2, 2, "max_turns"),
        (3, 2, "max_turns"),
    ]


def test_the_wind_down_names_the_instructions_file_as_the_tools_reach_it(
    project: Project,
) -> None:
    """An agent that saves a lesson where the wind-down says reaches the file the next session's
    system message is read from (a bare `SYSTEM_PROMPT.md` named one in the workspace)."""
    for i in range(12):
        (project.workspace / f"mod{i}.py").write_text(f"def f{i}(x): return x\n" * 60)
    reads = itertools.cycle(f"mod{i}.py" for i in range(12))

    def agent(body: dict[str, Any]) -> Reply:
        said = str(body["messages"][-1].get("content") or "")
        named = re.search(r"and in (\S+) what every later session should know", said)
        if named is None:
            return Reply(tool_calls=[tool("file_read", path=next(reads))])
        return Reply(tool_calls=[tool("file_write", path=named[1], content="# Lesson kept")])

    result = run_here(
        project,
        agent,
        window=4096,
        supervisor={"max_restarts": 1, "max_total_turns": 100},
        loops={"session_repeat_after": 0},
    )
    assert result.returncode == 0, result.stderr
    assert project.events("wind_down")
    systems = [b["messages"][0]["content"] for b in result.chat_requests()]
    assert systems[-1].endswith("# Lesson kept")
    assert not (project.workspace / "SYSTEM_PROMPT.md").exists()


def test_finish_ends_the_run_for_good(project: Project) -> None:
    script = [Reply(tool_calls=[tool("finish", summary="wrote the report")])]
    model = Scripted(script)
    first = run_here(project, model)
    again = run_here(project, model)
    assert len(model.chat_requests()) == 1
    assert first.returncode == 0
    assert "run stopped: finish" in first.stdout
    assert again.returncode == 0
    assert "already finished" in again.stdout
    assert journal(project)[-1] == {**journal(project)[-1], "kind": "run_end", "reason": "finish"}


def test_finish_is_not_offered_when_disallowed(project: Project) -> None:
    ran = run_here(
        project, [Reply(text="hi")], supervisor={"allow_finish": False, "max_total_turns": 1}
    )
    tools = {t["function"]["name"] for t in ran.chat_requests()[0]["tools"]}
    assert "finish" not in tools


def test_repeated_identical_calls_get_a_nudge(project: Project) -> None:
    same = Reply(tool_calls=[tool("list_dir", path=".")])
    ran = run_here(project, [same, same, same, Reply(text="ok")], supervisor={"max_total_turns": 4})
    last = ran.chat_requests()[-1]["messages"]
    nudges = [m for m in last if "same tool call 3 times" in str(m.get("content"))]
    assert len(nudges) == 1


def test_limits_survive_resume_and_raising_them_continues(project: Project) -> None:
    model = Scripted(lambda body: Reply(text="working"))
    assert run_here(project, model, supervisor={"max_total_turns": 2}).returncode == 0
    assert run_here(project, model, supervisor={"max_total_turns": 2}).returncode == 0  # no more
    assert len(model.chat_requests()) == 2
    assert run_here(project, model, supervisor={"max_total_turns": 3}).returncode == 0
    assert len(model.chat_requests()) == 3
    usage = project.usage()
    assert [(u["session"], u["turn"]) for u in usage] == [(1, 1), (1, 2), (1, 3)]


@pytest.mark.slow
def test_auto_restart_off_waits_for_unpause(project: Project) -> None:
    with ScriptedServer(lambda body: Reply(text="working")) as server:
        project.configure(
            server.url,
            session={"max_turns": 1},
            supervisor={"auto_restart": False, "max_total_turns": 2},
        )
        process = project.start("run")
        wait_for(lambda: project.events("paused"))
        assert project.events("paused"), "the supervisor did not say it waits"
        time.sleep(0.5)
        assert len(server.chat_requests()) == 1, "restarted without confirmation"
        assert project.run("unpause").returncode == 0
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert len(server.chat_requests()) == 2
    paused = project.events("paused")[0]
    assert paused["by"] == "auto_restart = false"
    assert "python -m ouroboros unpause" in paused["message"]
    assert [e["by"] for e in project.events("unpaused")] == ["operator"]


@pytest.mark.slow
def test_second_supervisor_is_refused_and_stale_lock_taken_over(project: Project) -> None:
    with ScriptedServer([Reply(text="slow", delay_s=30)]) as server:
        project.configure(server.url)
        first = project.start("run")
        wait_for(lambda: server.chat_requests())
        second = project.run("run")
        assert second.returncode == 1
        assert f"another supervisor (pid {first.pid}) is running" in second.stderr
        first.send_signal(signal.SIGKILL)
        first.communicate()
    with ScriptedServer([Reply(text="hi")]) as server:
        project.configure(server.url, supervisor={"max_total_turns": 1})
        third = project.run("run")
    assert third.returncode == 0, third.stderr
    assert f"took over a stale lock left by pid {first.pid}" in third.stdout


def test_torn_last_line_is_dropped_and_kept_aside(project: Project) -> None:
    model = Scripted(lambda body: Reply(text="working"))
    run_here(project, model, supervisor={"max_total_turns": 2})
    path = project.state / "journal.jsonl"
    path.write_bytes(path.read_bytes() + b'{"v":1,"kind":"message","sess')
    for log in ("events.jsonl", "token_usage.jsonl"):
        with (project.state / log).open("ab") as f:
            f.write(b'{"v":1,"kind":"tok')
    result = run_here(project, model, supervisor={"max_total_turns": 3})
    assert result.returncode == 0, result.stderr
    assert "dropped a torn last journal line" in result.stdout
    aside = list(project.state.glob("journal.jsonl.torn-*"))
    assert [p.read_bytes() for p in aside] == [b'{"v":1,"kind":"message","sess']
    assert all(json.loads(line) for line in path.read_text().splitlines())
    # The logs people tail start on a fresh line too; their torn tails are kept aside.
    for log in ("events.jsonl", "token_usage.jsonl"):
        assert all(json.loads(line) for line in (project.state / log).read_text().splitlines())
        assert [p.read_bytes() for p in project.state.glob(f"{log}.torn-*")] == [
            b'{"v":1,"kind":"tok'
        ]
    assert len(project.usage()) == 3


def test_a_bad_line_in_the_middle_is_skipped_named_and_kept(project: Project) -> None:
    model = Scripted(lambda body: Reply(text="working"))
    run_here(project, model, supervisor={"max_total_turns": 2})
    path = project.state / "journal.jsonl"
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "message")
    lines[at] = lines[at][:20] + "#garbage#"
    before = "\n".join(lines) + "\n"
    path.write_text(before)
    result = run_here(project, model, supervisor={"max_total_turns": 3})
    assert result.returncode == 0, result.stderr
    assert f"journal.jsonl, line {at + 1}: not a valid record" in result.stdout
    assert "skipped (the file keeps it)" in result.stdout
    assert "Traceback" not in result.stderr
    assert path.read_text().startswith(before)


@pytest.mark.slow
def test_fresh_moves_the_old_run_aside(project: Project) -> None:
    with ScriptedServer(lambda body: Reply(text="working")) as server:
        project.configure(server.url)
        project.run("run", "--max-turns", "1")
        result = project.run("run", "--fresh", "--max-turns", "1")
    assert result.returncode == 0
    old = [p for p in project.root.iterdir() if p.name.startswith(".ouroboros.") and p.is_dir()]
    assert len(old) == 1
    assert (old[0] / "journal.jsonl").exists()
    assert (old[0] / ".ouroboros.run").exists(), "the old run's mark goes aside with it"
    assert len(project.usage()) == 1


@pytest.mark.parametrize("lost", ["journal.jsonl", "the whole state folder"])
@pytest.mark.slow
def test_a_lost_journal_is_never_a_silent_new_start(project: Project, lost: str) -> None:
    with ScriptedServer(lambda body: Reply(text="working")) as server:
        project.configure(server.url)
        assert project.run("run", "--max-turns", "2").returncode == 0
        if lost == "journal.jsonl":
            (project.state / lost).unlink()
        else:
            shutil.rmtree(project.state)
        refused = project.run("run", "--max-turns", "4")
        assert refused.returncode == 1
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert "journal.jsonl is missing, empty or holds no whole line" in lines[0]
        assert "run --fresh" in lines[0]
        assert len(server.chat_requests()) == 2, "nothing ran"
        assert project.run("run", "--fresh", "--max-turns", "1").returncode == 0


@pytest.mark.slow
def test_server_down_for_a_while_then_back(project: Project) -> None:
    server = ScriptedServer(lambda body: Reply(text="working"))
    server.start()
    port = server.port
    project.configure(server.url, llm={"retry_for_s": 30})
    process = project.start("run", "--max-turns", "4")
    try:
        wait_for(lambda: server.chat_requests(), step=0.02)
        server.stop()
        wait_for(lambda: len(project.events("retry")) >= 2)  # it is waiting for the server
        server.start(port)
        _, stderr = process.communicate(timeout=40)
    finally:
        server.stop()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert len(project.usage()) == 4
    assert project.events("retry"), "expected retries while the server was down"


@pytest.mark.slow
def test_kill_nine_at_recorded_points_loses_nothing(project: Project) -> None:
    """kill -9 at points the run itself shows: mid-stream (the server has sent half a reply),
    and after a call's `tool_started` before its result. No completed turn is lost, no tool call
    runs twice, a cut reply is asked again, an interrupted call gets a result saying so."""
    counter = project.workspace / "runs.log"
    requests = itertools.count()
    kills = {3: "stream", 5: "tool", 8: "tool", 10: "stream", 13: "tool", 16: "stream"}
    streaming = {n: threading.Event() for n in kills}

    def agent(body: dict[str, Any]) -> Reply:
        n = next(requests)
        # Each call appends a unique line: a duplicate line means a call was executed twice.
        run = f"echo call-{n} >> runs.log"
        if kills.get(n) == "stream":
            streaming[n].set()
            return Reply(
                text="Half a reply", tool_calls=[tool("shell_exec", command=run)], stall_s=5
            )
        if kills.get(n) == "tool":
            run += f"; touch started-{n}; sleep 30"
        return Reply(tool_calls=[tool("shell_exec", command=run)])

    target = 20
    with ScriptedServer(agent) as server:
        project.configure(server.url, session={"max_turns": 7})
        for n, point in kills.items():
            process = subprocess.Popen(
                [sys.executable, "-m", "ouroboros", "run", "--max-turns", str(target)],
                cwd=project.root,
                stderr=subprocess.DEVNULL,
            )
            if point == "stream":
                assert streaming[n].wait(30)
            else:
                marker = project.workspace / f"started-{n}"
                wait_for(marker.exists, timeout=30)
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        final = project.run("run", "--max-turns", str(target), timeout=120)
        sent = server.chat_requests()
        completed = len(server.reported)
    assert final.returncode == 0, final.stderr
    lines = counter.read_text().splitlines()
    assert len(lines) == len(set(lines)), "a tool call was executed twice"
    records = journal(project)
    replies = [r for r in records if r["kind"] == "message" and "usage" in r]
    assert len(replies) == target
    assert len(replies) == completed, "a reply the server finished is not in the journal"
    results = {
        r["message"]["tool_call_id"]: r["message"]["content"]
        for r in records
        if r["kind"] == "message" and r["message"]["kind"] == "tool"
    }
    for n, point in kills.items():
        if point == "stream":
            assert sent[n + 1]["messages"] == sent[n]["messages"], (
                "the reply cut off was not asked again"
            )
            continue
        assert f"call-{n}" in lines
        call_id = next(
            c["id"]
            for r in replies
            for c in r["message"]["tool_calls"]
            if f"started-{n}" in c["arguments"]
        )
        assert results[call_id] == prompts.CRASH_INTERRUPTED
    for name in ("journal.jsonl", "events.jsonl", "token_usage.jsonl"):
        assert read_objects(project.state / name)[1] == []


def _cut_journal_after(project: Project, keep: Any) -> None:
    """Keep the journal up to and including the last record for which `keep` is true, as a
    crash right after that fsync would leave it."""
    path = project.state / "journal.jsonl"
    lines = path.read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if keep(json.loads(line)))
    path.write_text("\n".join(lines[: last + 1]) + "\n")


def test_crash_after_a_text_reply_never_sends_it_last(project: Project) -> None:
    model = Scripted(lambda body: Reply(text="thinking aloud"))
    run_here(project, model, supervisor={"max_total_turns": 2})
    _cut_journal_after(project, lambda r: r["kind"] == "message" and "usage" in r)
    result = run_here(project, model, supervisor={"max_total_turns": 3})
    last = model.chat_requests()[-1]["messages"]
    assert result.returncode == 0, result.stderr
    assert last[-1]["role"] == "user"
    assert [m["role"] for m in last[-3:]] != ["assistant", "assistant", "user"]


def test_crash_after_finish_still_ends_the_run(project: Project) -> None:
    script = [Reply(tool_calls=[tool("finish", summary="all done")]), Reply(text="more?")]
    model = Scripted(script)
    run_here(project, model)
    _cut_journal_after(project, lambda r: r["kind"] == "message" and r["message"]["kind"] == "tool")
    result = run_here(project, model)
    assert len(model.chat_requests()) == 1
    assert result.returncode == 0
    assert "run stopped: finish" in result.stdout


@pytest.mark.slow
def test_fresh_is_refused_while_a_run_is_live(project: Project) -> None:
    from ouroboros.run.lock import state_lock

    project.state.mkdir(parents=True)
    (project.state / "journal.jsonl").write_text("")
    project.configure("http://127.0.0.1:9/v1")
    with state_lock(project.state):
        result = project.run("run", "--fresh")
    assert result.returncode == 1
    assert "a supervisor is running" in result.stderr
    assert project.state.exists()


def test_a_status_taking_the_lock_for_an_instant_does_not_stop_a_run(project: Project) -> None:
    # `status` takes the lock for an instant to see whether a run holds it; a run starting in
    # that instant waits for it instead of refusing to start.
    project.state.mkdir()
    taken: list[bool] = []

    def start_a_run() -> None:
        with state_lock(project.state):
            taken.append(True)

    with (project.state / "lock").open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        run = threading.Thread(target=start_a_run, daemon=True)
        run.start()
        wait_for(lambda: _waits_for_the_lock(run) or not run.is_alive())
        assert _waits_for_the_lock(run), "the run did not wait for the lock"
        fcntl.flock(handle, fcntl.LOCK_UN)
    run.join()
    assert taken == [True]


def _waits_for_the_lock(thread: threading.Thread) -> bool:
    """The thread is in the lock's wait (it found the lock held and tries again)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == "_take":
            return True
        frame = frame.f_back
    return False


@pytest.mark.slow
def test_what_a_command_started_dies_with_a_killed_harness(project: Project) -> None:
    pids = project.workspace / "pids"
    replies = [
        Reply(tool_calls=[tool("shell_exec", command=f"sleep 300 & echo $! >> {pids}")]),
        Reply(tool_calls=[tool("shell_exec", command=f"setsid sleep 301 & echo $! >> {pids}")]),
        Reply(tool_calls=[tool("shell_exec", command="touch third; sleep 60", timeout_s=60)]),
    ]
    with ScriptedServer(replies) as server:
        project.configure(server.url, session={"shell_timeout_s": 60})
        harness = project.start("run", "--max-turns", "10")
        wait_for((project.workspace / "third").exists)  # the third command is running
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 2
        assert all(map(_alive, started))
        harness.kill()  # SIGKILL: no clean-up of its own
        harness.communicate(timeout=10)
        wait_for(lambda: not any(map(_alive, started)), timeout=10)
    assert not any(map(_alive, started)), "a process outlived the harness"


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
