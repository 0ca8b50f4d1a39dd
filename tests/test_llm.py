"""The model client against the loopback server, and the overflow classification per server."""

from __future__ import annotations

from functools import partial

import anyio
import pytest

from ouroboros.ground.clock import FakeClock
from ouroboros.ground.config import LLMSettings
from ouroboros.ground.messages import Message, SystemMessage, UserMessage
from ouroboros.model.llm import (
    Completion,
    ContextOverflow,
    FatalError,
    LLMClient,
    TransientError,
    overflow_from,
    stated_window,
)
from ouroboros.model.retry import Retry, retrying
from ouroboros.model.scripted import Reply, ScriptedServer, tool

MESSAGES: list[Message] = [SystemMessage(content="sys"), UserMessage(content="hello")]


def complete(server: ScriptedServer) -> Completion:
    async def go() -> Completion:
        client = LLMClient(LLMSettings(base_url=server.url, model="scripted"))
        try:
            return await client.complete(MESSAGES, [])
        finally:
            await client.aclose()

    return anyio.run(go)


@pytest.mark.parametrize("dialect", ["ollama", "llama"])
def test_tool_calls_accumulate_by_index(dialect: str) -> None:
    calls = [tool("file_read", path="a" * 50), tool("shell_exec", command="echo 'x y z' | wc -c")]
    with ScriptedServer([Reply(text="Two things.", tool_calls=calls)], dialect=dialect) as s:  # type: ignore[arg-type]
        completion = complete(s)
    assert completion.message.content == "Two things."
    got = completion.message.tool_calls
    assert [(c.name, c.arguments) for c in got] == [
        ("file_read", '{"path": "' + "a" * 50 + '"}'),
        ("shell_exec", '{"command": "echo \'x y z\' | wc -c"}'),
    ]
    assert len({c.id for c in got}) == 2
    assert completion.finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.source == "server"


def test_overflow_400_from_llama_server_is_classified() -> None:
    def counter(body: dict[str, object]) -> int:
        return 600  # a long prompt

    with ScriptedServer([Reply()], dialect="llama", n_ctx=512, counter=counter) as s:
        with pytest.raises(ContextOverflow) as caught:
            complete(s)
    assert caught.value.n_ctx == 512
    assert caught.value.n_prompt_tokens == 600


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(status=401, error_body={"message": "bad key"}), FatalError),
        (Reply(status=404, error_body={"message": "model 'x' not found"}), FatalError),
        (Reply(status=400, error_body={"message": "invalid message role"}), FatalError),
        (Reply(status=429, error_body={"message": "slow down"}), TransientError),
        (Reply(status=503, error_body={"message": "server busy"}), TransientError),
        (Reply(text="half", cut=True), TransientError),
        (Reply(stream_error={"message": "boom", "type": "server_error"}), TransientError),
        (
            Reply(stream_error={"message": "Context size has been exceeded.", "code": 500}),
            ContextOverflow,
        ),
        (
            Reply(
                status=500,
                error_body={
                    "code": 500,
                    "message": "Context size has been exceeded.",
                    "type": "server_error",
                },
            ),
            ContextOverflow,
        ),
    ],
)
@pytest.mark.slow
def test_errors_are_classified(reply: Reply, error: type[Exception]) -> None:
    with ScriptedServer([reply]) as s, pytest.raises(error):
        complete(s)


OVERFLOWS: list[tuple[int | None, object, str, int | None]] = [
    (
        400,
        {
            "code": 400,
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5024,
            "n_ctx": 4096,
            "message": "request (5024 tokens) exceeds the available context "
            "size (4096 tokens), try increasing it",
        },
        "",
        4096,
    ),
    (
        400,
        {
            "message": "You passed 9000 input tokens and requested 512 output tokens. However,"
            " the model's context length is only 8192 tokens, resulting in a maximum input "
            "length of 7680 tokens.",
            "type": "BadRequestError",
            "param": "input_tokens",
        },
        "",
        8192,
    ),
    (
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens."
            " However, you requested 5000 tokens",
            "type": "BadRequestError",
        },
        "",
        4096,
    ),
    (
        400,
        "The number of tokens to keep from the initial prompt is greater than the context "
        "length (n_keep: 13055>= n_ctx: 4096).",
        "",
        4096,
    ),
    (
        400,
        "Trying to keep the first 5000 tokens when context the overflows. However, the model"
        " is loaded with context length of only 4096 tokens",
        "",
        4096,
    ),
    (
        400,
        {
            "message": "the prompt is longer than the context length currently available to "
            "the model; shorten the prompt",
            "type": "invalid_request_error",
        },
        "",
        None,  # Ollama names no figure: its window comes from /api/ps
    ),
    (400, {"code": "context_length_exceeded", "message": "too long"}, "", None),
    (
        None,
        {
            "message": "Reached context length of 4096 tokens with model (arch: gemma3) that "
            "does not currently support mid-generation context overflow"
        },
        "",
        4096,
    ),
    (
        500,
        {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"},
        "",
        None,
    ),
    (
        400,
        {
            "message": "input (5000 tokens) is larger than the max context size (2048 tokens). "
            "skipping"
        },
        "",
        2048,
    ),
    (
        400,
        {  # vLLM ~0.15, in the client's message rather than the body
            "message": "too long",
        },
        "Error code: 400 - This model's maximum context length is 3000 tokens. However, your "
        "request has 3500 input tokens. Please reduce the length of the input messages.",
        3000,
    ),
]


@pytest.mark.parametrize(("status", "body", "message", "window"), OVERFLOWS)
def test_overflow_wordings_of_every_server(
    status: int | None, body: object, message: str, window: int | None
) -> None:
    found = overflow_from(status, body, message)
    assert found is not None
    assert found.n_ctx == window


@pytest.mark.parametrize(
    ("status", "body"),
    [
        # A figure that is no window: zero, not a number, too long to be one, in other words.
        (400, {"type": "exceed_context_size_error", "n_ctx": 0, "message": "x"}),
        (400, {"type": "exceed_context_size_error", "n_ctx": True, "message": "x"}),
        (400, {"type": "exceed_context_size_error", "n_ctx": "3000", "message": "x"}),
        (
            400,
            {
                "message": "You passed 9 input tokens. However, the model's context length is "
                "only 0 tokens"
            },
        ),
        (400, {"message": "This model's maximum context length is 4k tokens"}),
        (400, {"message": "This model's maximum context length is -3000 tokens"}),
        (400, {"message": f"This model's maximum context length is {'9' * 5000} tokens"}),
        (400, {"message": "maximum context length is 3000 characters"}),
        (400, "The number of tokens to keep (n_keep: 13055>= n_ctx: 40960000000)."),
        (400, {"message": "You passed 9000 input tokens; n_ctx: 3000"}),
    ],
)
def test_near_misses_state_no_window(status: int, body: object) -> None:
    found = overflow_from(status, body, "")
    assert found is not None, "each is still an overflow"
    assert found.n_ctx is None


@pytest.mark.parametrize(
    ("status", "body"),
    [
        # Not a refusal for length: a window in its words is not taken from it.
        (401, {"message": "This model's maximum context length is 3000 tokens"}),
        (400, {"message": "max_tokens must be at most 3000 tokens"}),
    ],
)
def test_a_window_is_read_only_from_a_refusal(status: int, body: object) -> None:
    assert overflow_from(status, body, "") is None


def test_a_stated_window_is_read_whatever_the_case_and_spacing() -> None:
    assert stated_window("N_KEEP: 10 >=  N_CTX: 2048)") == 2048
    assert stated_window("no figure here") is None


def test_exact_counts_read_from_llama_server_message() -> None:
    found = overflow_from(
        400,
        {"message": "x"},
        "request (5024 tokens) exceeds the available context size (4096 tokens), try increasing it",
    )
    assert found is not None
    assert (found.n_prompt_tokens, found.n_ctx) == (5024, 4096)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"message": "invalid tool schema"}),
        (401, {"message": "maximum context length is"}),
        (500, {"message": "CUDA out of memory"}),
    ],
)
def test_other_errors_are_not_overflows(status: int, body: object) -> None:
    assert overflow_from(status, body, "") is None


def test_retry_after_is_honoured() -> None:
    waits: list[float] = []
    clock = FakeClock()
    busy = Reply(status=429, error_body={"message": "slow down"}, retry_after="1.5")
    settings = LLMSettings(base_url="", model="scripted", retry_initial_s=0.01, retry_max_s=30)

    async def go(server: ScriptedServer) -> Completion:
        client = LLMClient(settings.model_copy(update={"base_url": server.url}))
        try:
            return await retrying(
                partial(client.complete, MESSAGES, []),
                settings,
                lambda retry: waits.append(retry.wait_s),
                clock,
            )
        finally:
            await client.aclose()

    with ScriptedServer([busy, Reply(text="ok")]) as s:
        assert anyio.run(go, s).message.content == "ok"
    assert waits == [1.5]
    assert clock.slept == [1.5], "the wait is on the run's clock"


def test_retries_back_off_and_stop_after_retry_for_s_on_the_runs_clock() -> None:
    """An hour of a server that is down, in no time: the backoff doubles up to its cap, and
    the last error surfaces once `retry_for_s` have passed on the clock."""
    clock = FakeClock()
    settings = LLMSettings(
        base_url="", model="scripted", retry_initial_s=1, retry_max_s=60, retry_for_s=3600
    )
    reports: list[Retry] = []

    async def down() -> Completion:
        # A broken clock would make this test wait an hour, or for ever: fail at once instead.
        if reports and not clock.slept:
            raise FatalError("the retry layer waited, but not on the run's clock")
        if len(reports) > 1000:
            raise FatalError("the retry layer does not stop on the run's clock")
        raise TransientError("connection refused")

    async def go() -> Completion:
        return await retrying(down, settings, reports.append, clock)

    with pytest.raises(TransientError, match="connection refused"):
        anyio.run(go)
    assert 3600 <= sum(clock.slept) < 3600 + 60
    assert all(0 <= wait <= 60 for wait in clock.slept)
    assert [r.attempt for r in reports] == list(range(1, len(clock.slept) + 1))
    # Doubling to the cap, with at most `retry_initial_s` of jitter: no jump from 8 s to 4 min.
    assert all(2**n <= wait <= 2**n + 1 for n, wait in enumerate(clock.slept[:5]))
    assert clock.slept[6:] == [60] * len(clock.slept[6:])


def test_a_long_wait_is_told_at_growing_intervals_not_every_try() -> None:
    """An hour and a half without a server: the first failure is told, then one try past each
    of 1, 2, 5, 10, 20, 30 and 60 minutes; every try is still reported (the logs keep it), a
    minute apart at most by default."""
    clock = FakeClock()
    settings = LLMSettings(base_url="http://127.0.0.1:9/v1", model="x", retry_for_s=5400)
    reports: list[Retry] = []

    async def down() -> Completion:
        if len(reports) > 1000:
            raise FatalError("the retry layer does not stop on the run's clock")
        raise TransientError("connection refused")

    with pytest.raises(TransientError):
        anyio.run(retrying, down, settings, reports.append, clock)
    told = [r for r in reports if r.told]
    assert len(reports) > 90
    assert [int(r.waited_s // 60) for r in told] == [0, 1, 2, 5, 10, 20, 30, 60]
    assert all(r.server == settings.base_url and r.for_s == 5400 for r in reports)
    assert max(clock.slept) == 60
