"""`python -m ouroboros run` end to end, as a subprocess, against the scripted loopback server;
what a session does with the calls a reply makes, in process."""

from __future__ import annotations

import json
import re

import pytest

from ouroboros.model.scripted import Reply, ScriptedServer, tool
from tests.conftest import Project, wait_for
from tests.inprocess import run_here


@pytest.mark.parametrize("dialect", ["ollama", "llama"])
@pytest.mark.slow
def test_multi_turn_run_with_tools(project: Project, dialect: str) -> None:
    script = [
        Reply(text="Looking around.", tool_calls=[tool("list_dir", path=".")]),
        Reply(
            tool_calls=[
                tool("file_write", path="notes/NOTES.md", content="step one done\n"),
                tool("shell_exec", command="cat notes/NOTES.md; exit 3"),
            ]
        ),
        Reply(text="Progress saved."),
        Reply(tool_calls=[tool("file_read", path="notes/NOTES.md")]),
    ]
    with ScriptedServer(script, dialect=dialect) as server:  # type: ignore[arg-type]
        project.configure(server.url)
        result = project.run("run", "--max-turns", "4")
        requests = server.chat_requests()
        reported = server.reported

    assert result.returncode == 0, result.stderr
    assert (project.workspace / "notes" / "NOTES.md").read_text() == "step one done\n"
    assert len(requests) == 4
    for body in requests:
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert {t["function"]["name"] for t in body["tools"]} >= {
            "file_read",
            "file_write",
            "list_dir",
            "shell_exec",
        }
    # The second request carries the first call and its result; the fourth the whole history.
    second = requests[1]["messages"]
    assert second[0]["role"] == "system"
    assert "Test the harness." in second[0]["content"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "list_dir"
    assert second[-1]["role"] == "tool"
    assert "README" not in second[-1]["content"]
    fourth = requests[3]["messages"]
    shell_result = next(m for m in fourth if m["role"] == "tool" and "exit code" in m["content"])
    assert shell_result["content"].startswith("exit code 3\nstep one done")
    # A reply without tool calls is followed by a continuation message, never a second assistant.
    assert fourth[-1]["role"] == "user"

    usage = project.usage()
    assert [(u["prompt_tokens"], u["completion_tokens"]) for u in usage] == [
        (r["prompt_tokens"], r["completion_tokens"]) for r in reported
    ]
    assert all(u["source"] == "server" for u in usage)
    assert [u["turn"] for u in usage] == [1, 2, 3, 4]
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usage)
    tool_events = project.events("tool_call")
    assert [e["name"] for e in tool_events] == ["list_dir", "file_write", "shell_exec", "file_read"]
    assert tool_events[2]["exit_code"] == 3
    assert "max_total_turns" in result.stdout


def test_a_file_is_replaced_only_once_read_in_the_session(project: Project) -> None:
    """The real small model wrote over files it never read (its last result, "some text"); a
    file it read or wrote in this session, however it named it, it may replace whole."""
    (project.workspace / "settings.py").write_text("PORT = 8000\n")
    script = [
        Reply(tool_calls=[tool("file_write", path="settings.py", content="some text")]),
        Reply(tool_calls=[tool("file_read", path="./settings.py")]),
        Reply(tool_calls=[tool("file_write", path="settings.py", content="PORT = 9000\n")]),
        Reply(tool_calls=[tool("file_write", path="new.txt", content="a")]),
        Reply(tool_calls=[tool("file_write", path="new.txt", content="b")]),
        Reply(tool_calls=[tool("finish")]),
    ]
    ran = run_here(project, script)
    assert ran.returncode == 0, ran.stderr
    results = [m["content"] for b in ran.chat_requests()[1:] for m in b["messages"][-1:]]
    assert results[0] == (
        "error: settings.py exists and you have not read it in this session: read it with "
        "file_read first, then write it whole. Nothing was written"
    )
    assert results[2:4] == ["wrote 12 bytes to settings.py", "wrote 1 bytes to new.txt"]
    assert (project.workspace / "settings.py").read_text() == "PORT = 9000\n"
    assert (project.workspace / "new.txt").read_text() == "b"


@pytest.mark.slow
def test_usage_without_server_figures_is_estimated(project: Project) -> None:
    with ScriptedServer([Reply(text="hi", usage=False)] * 2) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "2")
    assert result.returncode == 0, result.stderr
    assert [u["source"] for u in project.usage()] == ["estimate", "estimate"]
    assert all(u["prompt_tokens"] > 0 for u in project.usage())


@pytest.mark.slow
def test_llama_timings_used_when_usage_missing(project: Project) -> None:
    with ScriptedServer([Reply(text="hi", usage=False)], dialect="llama") as server:
        project.configure(server.url)
        project.run("run", "--max-turns", "1")
        reported = server.reported
    usage = project.usage()
    assert usage[0]["source"] == "timings"
    assert usage[0]["prompt_tokens"] == reported[0]["prompt_tokens"]


@pytest.mark.parametrize("dialect", ["llama", "vllm", "ollama"])
@pytest.mark.slow
def test_prompt_cache_figures_are_logged_as_the_server_reports_them(
    project: Project, dialect: str
) -> None:
    """llama-server (`timings`) and vLLM (`cached_tokens`) say how much of
    each prompt their cache held; Ollama says nothing, and nothing is made up for it. `status`
    and `tail` show the share cached."""
    script = [Reply(tool_calls=[tool("list_dir", path=".")]) for _ in range(3)]
    with ScriptedServer(script, dialect=dialect) as server:  # type: ignore[arg-type]
        project.configure(server.url)
        project.run("run", "--max-turns", "3")
        reported = server.reported
    usage = project.usage()
    status = project.run("status").stdout
    tail = project.run("tail").stdout
    if dialect == "ollama":
        assert all("cached_tokens" not in u and "processed_tokens" not in u for u in usage)
        assert "not reported by the server" in status
        return
    assert [u["cached_tokens"] for u in usage] == [r["cached_tokens"] for r in reported]
    assert usage[0]["cached_tokens"] == 0
    assert usage[2]["cached_tokens"] > 0  # appends only
    for u in usage:
        assert u["processed_tokens"] == u["prompt_tokens"] - u["cached_tokens"]
        assert "prefill_ms" not in u  # the scripted server times nothing, and says none
    cached = sum(u["cached_tokens"] for u in usage)
    share = cached / sum(u["prompt_tokens"] for u in usage)
    assert f"{share:.0%} of prompt tokens cached over 3 calls" in status
    assert f"cache {usage[2]['cached_tokens'] / usage[2]['prompt_tokens']:.0%}" in tail


def test_malformed_tool_arguments_become_a_result(project: Project) -> None:
    script = [
        Reply(tool_calls=[("shell_exec", '{"command": "ls')]),
        Reply(tool_calls=[("shell_exec", '{"cmd": "ls"}')]),
        Reply(tool_calls=[("no_such_tool", "{}")]),
        Reply(tool_calls=[("file_read", '["a"]')]),
    ]
    result = run_here(project, script, supervisor={"max_total_turns": 5})
    last = result.chat_requests()[-1]["messages"]
    assert result.returncode == 0, result.stderr
    results = [m["content"] for m in last if m["role"] == "tool"]
    assert "not valid JSON" in results[0]
    assert "command: Field required" in results[1]
    assert "unknown tool 'no_such_tool'" in results[2]
    assert "must be a JSON object" in results[3]


def test_blocked_command_is_refused_and_logged(project: Project) -> None:
    script = [Reply(tool_calls=[tool("shell_exec", command="sudo rm -rf / --no-preserve-root")])]
    result = run_here(project, script, supervisor={"max_total_turns": 2})
    last = result.chat_requests()[-1]["messages"]
    assert result.returncode == 0, result.stderr
    assert "refused" in last[-2]["content"] or "refused" in last[-1]["content"]
    blocked = project.events("blocked_command")
    assert blocked
    assert blocked[0]["rule"] == "sudo"


@pytest.mark.slow
def test_server_down_gives_one_line_and_nonzero_exit(project: Project) -> None:
    project.configure("http://127.0.0.1:9/v1", llm={"retry_for_s": 0.5})
    result = project.run("run", "--max-turns", "1")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "cannot reach a model server" in last
    assert "ollama serve" in last


@pytest.mark.slow
def test_model_not_pulled_on_ollama(project: Project) -> None:
    with ScriptedServer(model="other-model") as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "1")
    assert result.returncode == 1
    assert "ollama pull scripted" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_fatal_http_error_stops_with_message(project: Project) -> None:
    error = {"message": "invalid api key", "type": "invalid_request_error"}
    with ScriptedServer([Reply(status=401, error_body=error)]) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "3")
    assert result.returncode == 1
    assert "refused the API key" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_transient_errors_are_retried(project: Project) -> None:
    script = [
        Reply(status=503, error_body={"message": "server busy, please try again."}),
        Reply(text="partial", cut=True),
        Reply(stream_error={"message": "slot unavailable", "type": "server_error"}),
        Reply(text="fine"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "1")
    assert result.returncode == 0, result.stderr
    retries = project.events("retry")
    assert len(retries) == 3
    assert "503" in retries[0]["message"]
    assert "without a finish reason" in retries[1]["message"]
    assert len(project.usage()) == 1


@pytest.mark.slow
def test_bad_config_is_one_line(project: Project) -> None:
    project.configure("http://127.0.0.1:9/v1", context={"soft_threshold": 1.5})
    result = project.run("run")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "context.soft_threshold" in result.stderr


@pytest.mark.slow
def test_stop_signal_is_clean(project: Project) -> None:
    import signal

    with ScriptedServer([Reply(text="slow", delay_s=30)]) as server:
        project.configure(server.url)
        process = project.start("run")
        wait_for(lambda: server.chat_requests())
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    ends = project.events("run_end")
    assert ends
    assert ends[-1]["reason"] == "stopped"
    assert ends[-1]["detail"] == "stop requested (SIGTERM)"
    journal = (project.state / "journal.jsonl").read_text()
    assert journal.endswith("\n")
    assert all(json.loads(line) for line in journal.splitlines())


def test_markup_in_logged_text_is_not_interpreted(project: Project) -> None:
    script = [
        Reply(tool_calls=[tool("shell_exec", command="sudo sed 's/[/]//' [bold]x")]),
        Reply(tool_calls=[tool("file_read", path="logs/[/]x.txt")]),
    ]
    result = run_here(project, script, supervisor={"max_total_turns": 2})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "[/]x.txt" in result.stdout


@pytest.mark.slow
def test_untagged_ollama_model_name_finds_the_window(project: Project) -> None:
    with ScriptedServer([Reply(text="hi")], model="scripted:latest", n_ctx=16384) as server:
        project.configure(server.url, supervisor={"max_total_turns": 1})
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    assert project.usage()[0]["context_limit"] == 16384


@pytest.mark.slow
def test_reply_cut_at_the_output_limit_is_explained(project: Project) -> None:
    long_write = tool("file_write", path="big.md", content="word " * 200)
    with ScriptedServer(
        [Reply(tool_calls=[long_write]), Reply(text="ok")], dialect="llama"
    ) as server:
        project.configure(server.url, llm={"max_output_tokens": 32})
        project.run("run", "--max-turns", "2")
        last = server.chat_requests()[-1]["messages"]
    assert project.usage()[0]["finish_reason"] == "length"
    assert "cut off at the output limit (32 tokens)" in last[-1]["content"]


@pytest.mark.slow
def test_the_terminal_shows_a_line_per_call_with_its_tools(project: Project) -> None:
    """On stdout, plain in a pipe: a line per model call ending with each tool it called and how
    it went, the soft and hard lines marked on its bar; events on lines of their own. `--quiet`
    keeps only what needs a person."""
    script = [
        Reply(tool_calls=[tool("list_dir", path="."), tool("shell_exec", command="exit 3")]),
        Reply(text="Thinking."),
        Reply(tool_calls=[tool("file_read", path="missing.txt")]),
    ]
    with ScriptedServer(script, dialect="llama", n_ctx=8192) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "3")
    assert result.returncode == 0, result.stderr
    assert "\x1b[" not in result.stdout  # no colour codes in a pipe
    calls = [line for line in result.stdout.splitlines() if re.search(r" s1 t\d ", line)]
    assert len(calls) == 3
    assert calls[0].endswith("· list_dir ok  · shell_exec exit 3")
    assert "·" not in calls[1]
    assert "· file_read failed: " in calls[2]
    assert calls[0].count("┊") == 2  # the soft and hard lines, ahead of the fill
    # The end said once: the run's own line, not the CLI's after it.
    assert result.stdout.count("run stopped: max_total_turns") == 1
    assert result.stdout.rstrip().endswith("run stopped: max_total_turns (3 turns in the run)")
    with ScriptedServer(script, dialect="llama", n_ctx=8192) as server:
        project.configure(server.url)
        quiet = project.run("run", "--fresh", "--max-turns", "3", "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.strip().splitlines()
    assert not [line for line in lines if re.search(r" s1 t\d ", line)]
    assert lines[-1].endswith(" run stopped: max_total_turns (3 turns in the run)")
    assert quiet.stdout.count("run stopped") == 1
