"""What is on the other end: each server's window found from its own endpoints, and its
overflow error recognised, as ../shared/reference/servers.md records them (vLLM and LM Studio
here; Ollama and llama-server throughout the other tests)."""

from __future__ import annotations

from typing import Any

import pytest

from ouroboros.model.scripted import Dialect, ScriptedServer, count_tokens
from tests.conftest import Project
from tests.test_context_run import fill_workspace, reader

pytestmark = pytest.mark.slow  # every test here runs `python -m ouroboros`


@pytest.mark.parametrize(
    ("dialect", "detail"),
    [
        ("vllm", "vLLM /v1/models max_model_len"),
        ("lmstudio", "LM Studio loaded context_length"),
    ],
)
def test_the_window_is_found_and_an_overflow_is_recognised(
    project: Project, dialect: Dialect, detail: str
) -> None:
    # A server whose count grows 2.5 times after a few calls (another tokenizer, say), while old
    # results are still there to mask (the opening is small since issue 32): the next
    # prompt is far bigger than projected, and it refuses it in its own words (vLLM counts the
    # reply's reserve too; LM Studio's error is a plain string). The harness masks and retries.
    fill_workspace(project, files=12, words=400)

    def counter(body: dict[str, Any]) -> int:
        return int(count_tokens(body) * (2.5 if len(server.requests) > 4 else 1.0))

    server = ScriptedServer(reader(), dialect=dialect, n_ctx=6144, counter=counter)
    with server:
        project.configure(server.url, supervisor={"max_total_turns": 12, "max_restarts": 1})
        result = project.run("run")
    assert result.returncode == 0, result.stderr
    (window,) = project.events("context_window")
    assert (window["server"], window["context_limit"], window["detail"]) == (
        dialect,
        6144,
        detail,
    )
    overflows = project.events("context_overflow")
    assert overflows, "no prompt was refused: the window is not small enough for the test"
    assert "Traceback" not in result.stderr
    masks = [m for m in project.events("context_mask") if m["reason"] == "overflow"]
    assert masks, "the refusal was not taken for an overflow"
