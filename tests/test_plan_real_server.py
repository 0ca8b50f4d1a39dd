"""The plan against a real llama-server (llama.cpp, Gemma 3 270M Q4_K_M, `-c 4096`).

Gemma 3 270M is a base model and never calls `plan`, so the plan is saved by a scripted reply:
the run's first turn is made against the loopback server (`ScriptedServer`), which answers with
a `plan` call; the same run is then resumed against the real server, behind the recording proxy
of tests/test_real_server.py. What this shows: every request the real server gets is the first
of a session (one turn a session), and each carries the saved plan whole in its opening; the
server counted exactly those messages (its streamed prompt tokens equal its own
`/apply-template` + `/tokenize` count of the messages the proxy saw) and answered each.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ouroboros.context.plan import PlanItem, render
from ouroboros.ground.config_file import to_toml
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.test_real_server import N_CTX, RecordingProxy, make_project, real_server, server_count

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

PLAN = [
    {"text": "read the harness's README", "status": "done", "note": "the journal is the truth"},
    {"text": "try the plan tool on a real server", "status": "doing"},
    {"text": "write down what was seen", "status": "todo"},
]
TURNS = 3
"""In the run: the scripted one that saves the plan, then two against the real server."""


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with real_server.RealServer(ctx=N_CTX, log_path=log, extra_args=["--threads", "1"]) as one:
        yield one


def test_the_real_server_gets_the_plan_whole_in_each_sessions_first_request(
    llama: Any, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    one_turn_sessions = {"session": {"max_turns": 1}}
    scripted = ScriptedServer([Reply(tool_calls=[tool("plan", items=PLAN)])], "llama", N_CTX)
    with scripted:
        project = make_project(root, scripted.url, **one_turn_sessions)
        saved = project.run("run", "--max-turns", "1")
    assert saved.returncode == 0, saved.stderr
    assert len(project.events("plan")) == 1
    proxy = RecordingProxy(llama.port)
    try:
        config = tomllib.loads((root / "config.toml").read_text())
        config["llm"]["base_url"] = proxy.base_url  # the same run, now on the real server
        (root / "config.toml").write_text(to_toml(config))
        resumed = project.run("run", "--max-turns", str(TURNS), timeout=600)
        chats = proxy.chats()
    finally:
        proxy.close()
    assert resumed.returncode == 0, resumed.stderr
    shown = render([PlanItem.model_validate(item) for item in PLAN])
    assert len(chats) == TURNS - 1
    usage = project.usage()[1:]  # the lines of the calls to the real server
    for chat, line in zip(chats, usage, strict=True):
        messages = chat.request["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        assert first.startswith("Session "), first  # a session's first request
        assert shown in first
        assert line["source"] == "server"
        streamed = chat.usage
        assert streamed is not None
        assert line["prompt_tokens"] == streamed["prompt_tokens"]
        assert line["prompt_tokens"] == server_count(llama.root_url, messages)
        assert streamed["completion_tokens"] >= 1  # it answered
    starts = [e["session"] for e in project.events("session_start")]
    assert starts == [1, 2, 3]
