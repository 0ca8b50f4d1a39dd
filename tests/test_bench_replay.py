"""bench/replay.py's model stops a reply at max_output_tokens as a server does: the first time a
step's reply is too long, its call is lost (`finish_reason: "length"`); the model then writes the
step again within the limit. `--uncut` serves only that second form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ouroboros.context.mask import masked
from ouroboros.ground.messages import ToolMessage
from ouroboros.ground.prompts import DEAD_END_NOTE
from tests.conftest import PROJECT_ROOT, load_module


@pytest.fixture(scope="module")
def replay() -> Any:
    return load_module(PROJECT_ROOT / "bench" / "replay.py")


def trajectory(path: Path) -> Path:
    """Three steps; the second thinks far longer than max_output_tokens (1,024) allows."""
    steps = [("Look around.", "ls", "a.py\n"), ("Hmm. " * 2000, "cat a.py", "x = 1\n")]
    steps.append(("Done.", "echo ok", "ok\n"))
    rows = [
        {"thought": thought, "action": action, "observation": output, "returncode": 0}
        for thought, action, output in steps
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("cut", [True, False])
@pytest.mark.slow
def test_a_reply_too_long_is_stopped_at_the_limit_and_its_call_lost(
    replay: Any, tmp_path: Path, cut: bool
) -> None:
    path = trajectory(tmp_path / "agent.jsonl")
    tokens = load_module(PROJECT_ROOT / "bench" / "replay_tokens.py").ByteTokens()
    run = replay.replay(path, 8192, tokens, tmp_path / "runs", cut=cut)
    n = replay.measure(run).n
    assert n["finished"] == 1, n
    assert (n["stopped"], n["calls lost"]) == ((1, 1) if cut else (0, 0)), n
    usage = [
        json.loads(line)
        for line in (tmp_path / "runs" / "agent-8192/.ouroboros/token_usage.jsonl")
        .read_text()
        .splitlines()
    ]
    stopped = [u for u in usage if u["finish_reason"] == "length"]
    assert len(stopped) == (1 if cut else 0)
    ran = [m.arguments for m in run.results.values()]
    assert ran == [json.dumps({"command": c}) for c in ("ls", "cat a.py", "echo ok")]
    # The floors and the unmanaged agent hold the stopped reply too: a step more.
    _, steps = load_module(PROJECT_ROOT / "bench" / "replay_floors.py").step_tokens(run)
    assert len(steps) == (4 if cut else 3)


def test_a_dead_end_note_is_the_harness_s_line_not_the_output_s() -> None:
    """The note a repeated failure's result starts with is not what the command printed: the
    placeholder quotes the output's first line, and the bench judges it by that one."""
    measures = load_module(PROJECT_ROOT / "bench" / "replay_measures.py")
    output = "exit code 1\nFAILED tests/test_x.py::test_y\n1 failed in 0.1s"
    noted = f"{DEAD_END_NOTE}this exact call failed this way once before]\n{output}"
    assert measures.said(noted) == measures.said(output)
    assert measures.said(noted)[0] == "FAILED tests/test_x.py::test_y"
    result = ToolMessage(
        tool_call_id="c",
        name="shell_exec",
        content=noted,
        exit_code=1,
        arguments=json.dumps({"command": "pytest tests/test_x.py"}),
        output_bytes=len(output),
        output_lines=3,
    )
    assert "first" in measures.parts_named(masked(result).content, result)
