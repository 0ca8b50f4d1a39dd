"""Hooks (`[hooks]`): a real command runs on each event with the event as JSON on stdin; a hung
hook is killed at its timeout while the run goes on; a failing one is a warning; a burst of one
event runs its hooks once per `min_interval_s`."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.config import HookSettings
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.errors import ConfigError
from ouroboros.ground.state_folder import PAUSE_REQUEST, UNPAUSE_REQUEST
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.operator import inbox
from ouroboros.operator.hooks import Hooks
from ouroboros.state.journal import Journal
from ouroboros.state.records import SessionStart
from tests.conftest import Project, wait_for
from tests.inprocess import run_here

RECORDER = """
import json, sys
event = json.loads(sys.stdin.read())
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(event) + "\\n")
"""
"""A hook that appends the event it was given to the file named by its argument."""

EVENTS = ["run_end", "error", "stuck", "waiting", "restart", "loop", "told", "paused"]


def recorder(out: Path) -> list[str]:
    return [sys.executable, "-c", RECORDER, str(out)]


def recorded(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def journal_warnings(project: Project) -> list[str]:
    return [
        r.get("message", "")
        for r in project.records("journal.jsonl")
        if r["kind"] == "notice" and r["event"] == "warning"
    ]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_each_event_of_a_run_runs_its_hook_with_the_event_on_stdin(project: Project) -> None:
    out = project.root / "events.jsonl"
    inbox.post(project.state, "the tests live in tests/")
    requests = 0

    def agent(body: dict[str, Any]) -> Reply:
        nonlocal requests
        requests += 1
        if requests == 2:
            # Taken at the next safe point; the `paused` hook unpauses the run.
            (project.state / PAUSE_REQUEST).touch()
        if requests < 3:
            return Reply(tool_calls=[tool("list_dir", path=".")])
        return Reply(tool_calls=[tool("finish", summary="done")])

    unpause = ["touch", str(project.state / UNPAUSE_REQUEST)]
    # Should the `paused` hook not run, the test fails rather than holding forever.
    net = threading.Timer(30, (project.state / UNPAUSE_REQUEST).touch)
    net.start()
    result = run_here(
        project,
        agent,
        session={"max_turns": 1},
        hooks={
            "min_interval_s": 0,
            "on": [
                {"events": EVENTS, "command": recorder(out)},
                {"events": ["paused"], "command": unpause},
            ],
        },
    )
    net.cancel()
    assert result.returncode == 0, result.stderr
    events = recorded(out)
    by_name = {e["event"]: e for e in events}
    assert sorted(by_name) == ["paused", "restart", "run_end", "told"]
    assert [e["event"] for e in events].count("restart") == 2
    assert by_name["run_end"]["record"]["reason"] == "finish"
    assert "run ended: finish" in by_name["run_end"]["summary"]
    assert "the tests live in tests/" in by_name["told"]["record"]["message"]["content"]
    assert by_name["paused"]["record"]["by"] == "operator"
    assert "messages" not in by_name["restart"]["record"]
    assert by_name["restart"]["state_dir"] == str(project.state)
    assert journal_warnings(project) == []


@pytest.mark.slow
def test_a_looping_agent_runs_the_loop_hooks_then_the_stuck_hook(project: Project) -> None:
    out = project.root / "events.jsonl"
    result = run_here(
        project,
        lambda body: Reply(tool_calls=[tool("shell_exec", command="ls")]),
        loops={"max_loops": 1},
        supervisor={"max_total_turns": 100},
        hooks={"min_interval_s": 0, "on": [{"events": EVENTS, "command": recorder(out)}]},
    )
    assert "run stopped: stuck" in result.stdout
    events = recorded(out)
    loops = [(e["record"]["loop"], e["record"]["level"]) for e in events if e["event"] == "loop"]
    assert loops == [("repeat", 1), ("repeat", 2), ("repeat", 1), ("repeat", 3)]
    # One hook, one notification a record: the most specific event.
    assert [e["event"] for e in events if e["event"] not in ("loop", "restart")] == ["stuck"]
    assert "stopped as stuck" in [e for e in events if e["event"] == "loop"][-1]["summary"]


@pytest.mark.slow
def test_a_hung_hook_is_killed_at_its_timeout_and_never_holds_the_run(project: Project) -> None:
    pids = project.root / "pids"
    hung = ["sh", "-c", f"echo $$ >> {pids}; exec sleep 60"]
    seen_alive: list[bool] = []
    requests = 0

    def agent(body: dict[str, Any]) -> Reply:
        nonlocal requests
        requests += 1
        if requests == 2:
            # The call after the restart: the restart's hook is still running.
            wait_for(lambda: pids.exists() and pids.read_text().strip())
            seen_alive.append(alive(int(pids.read_text().split()[0])))
            return Reply(tool_calls=[tool("finish", summary="done")])
        return Reply(tool_calls=[tool("list_dir", path=".")])

    result = run_here(
        project,
        agent,
        session={"max_turns": 1},
        hooks={"timeout_s": 1, "on": [{"events": ["restart", "run_end"], "command": hung}]},
    )
    assert result.returncode == 0, result.stderr
    assert seen_alive == [True]
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2  # the restart's, and the run end's
    assert not any(alive(pid) for pid in started)
    killed = [w for w in journal_warnings(project) if "killed after its timeout of 1s" in w]
    assert len(killed) == 2, journal_warnings(project)


def test_a_failing_hook_is_a_warning_and_the_run_goes_on(project: Project) -> None:
    failing = [sys.executable, "-c", "import sys; sys.exit('no route to ntfy.sh')"]
    missing = [str(project.root / "no-such-hook")]
    result = run_here(
        project,
        [Reply(tool_calls=[tool("list_dir", path=".")])] * 2
        + [Reply(tool_calls=[tool("finish", summary="done")])],
        session={"max_turns": 1},
        hooks={
            "on": [
                {"events": ["restart"], "command": failing},
                {"events": ["run_end"], "command": missing},
            ]
        },
    )
    assert result.returncode == 0, result.stderr
    assert "run stopped: finish" in result.stdout or "finish" in result.stdout
    warnings = journal_warnings(project)
    assert any("failed (exit status 1): no route to ntfy.sh" in w for w in warnings), warnings
    assert any("no-such-hook" in w and "cannot run" in w for w in warnings), warnings


def test_a_burst_of_one_event_runs_its_hook_once_per_interval(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    settings = HookSettings.model_validate(
        {"min_interval_s": 60, "on": [{"events": ["restart"], "command": recorder(out)}]}
    )
    now = [0.0]
    hooks = Hooks(settings, tmp_path, now=lambda: now[0])
    journal = Journal(None)
    hooks.attach(journal)
    for session in range(2, 6):
        now[0] += 10
        journal.append(SessionStart(session=session, reason="max_turns", messages=[]))
    now[0] += 60
    journal.append(SessionStart(session=6, reason="max_turns", messages=[]))
    hooks.close()
    events = recorded(out)
    assert sorted((e["record"]["session"], e["skipped"]) for e in events) == [(2, 0), (6, 3)]


@pytest.mark.parametrize(
    ("after_min", "expected"), [(0, ["waiting", "run_end"]), (10, ["run_end"])]
)
@pytest.mark.slow
def test_waiting_for_the_server_runs_its_hook_once_an_outage_past_its_minutes(
    project: Project, server: ScriptedServer, after_min: float, expected: list[str]
) -> None:
    out = project.root / "events.jsonl"
    server.add(
        Reply(status=503, error_body={"message": "loading model"}),
        Reply(status=503, error_body={"message": "loading model"}),
        Reply(status=503, error_body={"message": "loading model"}),
        Reply(tool_calls=[tool("finish", summary="done")]),
    )
    project.configure(
        server.url,
        hooks={
            "waiting_after_min": after_min,
            "min_interval_s": 0,
            "on": [{"events": EVENTS, "command": recorder(out)}],
        },
    )
    ran = project.run("run")
    assert ran.returncode == 0, ran.stderr
    events = recorded(out)
    assert [e["event"] for e in events] == expected
    if after_min == 0:
        assert "waiting for the model server" in events[0]["summary"]
        assert "loading model" in events[0]["summary"]


@pytest.mark.slow
def test_a_run_that_fails_runs_the_error_hook(project: Project, server: ScriptedServer) -> None:
    out = project.root / "events.jsonl"
    server.add(Reply(status=401, error_body={"message": "bad key"}))
    project.configure(server.url, hooks={"on": [{"events": ["error"], "command": recorder(out)}]})
    ran = project.run("run")
    assert ran.returncode != 0
    events = recorded(out)
    assert [e["event"] for e in events] == ["error"]
    assert events[0]["record"]["reason"] == "error"
    assert "bad key" in events[0]["summary"]


def test_a_bad_hook_is_refused_in_one_line(project: Project) -> None:
    config = project.root / "config.toml"
    config.write_text('[[hooks.on]]\nevents = ["run_end", "lunch"]\ncommand = ["true"]\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(config)
    assert "hooks.on.0.events.1" in str(refused.value)
    assert "\n" not in str(refused.value)
    config.write_text('[[hooks.on]]\nevents = ["run_end"]\ncommand = []\n')
    with pytest.raises(ConfigError, match=r"hooks\.on\.0\.command"):
        load_settings(config)


def test_the_docs_examples_are_valid_hooks(project: Project) -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    example = page.split("## Hooks")[1].split("```toml\n")[1].split("```")[0]
    config = project.root / "config.toml"
    config.write_text(example)
    hooks = load_settings(config).hooks.on
    assert [hook.command[0] for hook in hooks] == ["sh", "curl"]
    assert "stuck" in hooks[0].events


ENV_RECORDER = """
import json, os, sys
with open(sys.argv[1], "w") as f:
    json.dump(dict(os.environ), f)
"""
"""A hook that writes its whole environment to the file named by its argument."""


@pytest.mark.parametrize("listed", [False, True], ids=["default", "key listed"])
def test_a_hook_gets_the_server_key_only_if_hooks_env_names_it(
    project: Project, monkeypatch: pytest.MonkeyPatch, listed: bool
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("OUROBOROS_LLM__API_KEY", "sk-secret")
    monkeypatch.setenv("LC_TIME", "C")
    allowed = ["PATH", "LC_*", *(["OPENAI_API_KEY"] if listed else [])]
    out = project.root / "env.json"
    result = run_here(
        project,
        [Reply(tool_calls=[tool("finish", summary="done")])],
        hooks={
            "env": allowed,
            "on": [
                {"events": ["run_end"], "command": [sys.executable, "-c", ENV_RECORDER, str(out)]}
            ],
        },
    )
    assert result.returncode == 0, result.stderr
    env = json.loads(out.read_text())
    own = {"OUROBOROS_EVENT": "run_end", "OUROBOROS_SUMMARY": "run ended: finish (done)"}
    inherited = {"PATH": os.environ["PATH"], "LC_TIME": "C"}
    key = {"OPENAI_API_KEY": "sk-secret"} if listed else {}
    # Python may add LC_CTYPE itself (PEP 538) in the hook's own process.
    env.pop("LC_CTYPE", None)
    assert env == {**inherited, **key, **own}


def test_a_hook_that_cannot_be_executed_is_a_warning_and_the_next_hooks_run(
    project: Project,
) -> None:
    unexecutable = project.root / "notify.sh"
    unexecutable.write_text("#!/bin/sh\nexit 0\n")  # not made executable
    garbage = project.root / "garbage"
    garbage.write_bytes(b"\x7fELF\x00\x00 not a program")
    garbage.chmod(0o755)
    out = project.root / "events.jsonl"
    bad = [["echo", "nul\x00here"], [str(unexecutable)], [str(garbage)]]
    result = run_here(
        project,
        [Reply(tool_calls=[tool("list_dir", path=".")])] * 2
        + [Reply(tool_calls=[tool("finish", summary="done")])],
        session={"max_turns": 1},
        hooks={
            "min_interval_s": 0,
            "on": [
                *({"events": ["restart", "run_end"], "command": command} for command in bad),
                {"events": ["restart", "run_end"], "command": recorder(out)},
            ],
        },
    )
    assert result.returncode == 0, result.stderr
    # Hooks are not waited for: the second restart's and the run end's may finish either way.
    assert sorted(e["event"] for e in recorded(out)) == ["restart", "restart", "run_end"]
    warnings = journal_warnings(project)
    assert len(warnings) == 3 * 3, warnings  # each bad hook at each of the three events
    assert all("cannot run: " in w and "\n" not in w for w in warnings), warnings
    assert sum("embedded null byte" in w for w in warnings) == 3, warnings
