"""The text protocol against the real llama-server (Gemma 3 270M Q4_K_M) with the model's own
template: no tool template, so the server falls back to ChatML, which cannot render tools, and
the model could never call one natively.

The model is a base model: it continues the text it is shown, and a small change in the prompt
changes what it writes. So the run is steered in two parts, both of one run. First with plain
instructions, which it answers by copying its first message (no action block: each reply gets
the format message). Then, resumed, with instructions that hold a short transcript in the
template's own markup whose assistant turns are action blocks (tests/data/
text_protocol_purpose.md): read at the next session's start, they make it write ```bash blocks,
then go on making up turns after an `<|im_end|>` of its own, which ends the reply. A window of
2,048 tokens fills in a few turns. What the test holds to is what any model gets from the
harness, not what this one writes: no tool schema sent, only system, user and assistant
messages, in turn; every action block run and its result brought back; a reply without one
answered with the format message; sessions wound down and restarted inside the window, as in the
native protocol."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_real_server import RecordingProxy, make_project, real_server

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

PROJECT_ROOT = Path(__file__).resolve().parents[1]
PURPOSE = PROJECT_ROOT / "tests" / "data" / "text_protocol_purpose.md"
N_CTX = 2048
MAX_OUTPUT = 64
PLAIN_TURNS = 3
TURNS = 15


def test_the_text_protocol_drives_a_run_of_a_model_without_tool_calls(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    extra = ["--threads", "1"]
    with real_server.RealServer(ctx=N_CTX, extra_args=extra, log_path=log) as server:
        recorder = RecordingProxy(server.port)
        try:
            project = make_project(
                tmp_path / "project",
                recorder.base_url,
                llm={"max_output_tokens": MAX_OUTPUT, "tool_protocol": "text"},
            )
            plain = project.run("run", "--max-turns", str(PLAIN_TURNS), timeout=900)
            (project.root / "SYSTEM_PROMPT.md").write_text(PURPOSE.read_text())
            result = project.run("run", "--max-turns", str(TURNS), timeout=900)
            chats = recorder.chats()
        finally:
            recorder.close()
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(chats) == TURNS
    for chat in chats:
        assert "tools" not in chat.request
        roles = [m["role"] for m in chat.request["messages"]]
        assert roles[0] == "system"
        assert all(a != b for a, b in zip(roles[1:], roles[2:], strict=False)), roles
        assert set(roles) <= {"system", "user", "assistant"}
    # Action blocks were read and run, and their results came back as user messages.
    usage = project.usage()
    assert any(line.get("calls_from_text") == "bash" for line in usage), usage
    runs = [e for e in project.events("tool_call") if e["name"] == "shell_exec"]
    assert runs, "no action block was run"
    assert any(e["exit_code"] == 0 for e in runs)
    assert (project.workspace / "hello.txt").read_text().startswith("hello\n")
    sent = [m["content"] for c in chats for m in c.request["messages"] if m["role"] == "user"]
    assert any("[shell_exec result]" in text for text in sent)
    # Replies without an action block were answered with what is expected.
    assert any(line.get("calls_from_text") is None for line in usage)
    assert any("Your last reply had" in text and "```bash" in text for text in sent)
    # The context was managed inside the window: wind-downs, restarts, no refused prompt.
    assert project.events("wind_down")
    assert project.events("session_restart")
    assert not project.events("context_overflow")
    assert all(line["prompt_tokens"] + MAX_OUTPUT <= N_CTX for line in usage), [
        line["prompt_tokens"] for line in usage
    ]
    journal = (project.state / "journal.jsonl").read_text().splitlines()
    assert sum('"calls_from_text":"bash"' in line for line in journal) == len(runs), json.dumps(
        [e["call_id"] for e in runs]
    )
