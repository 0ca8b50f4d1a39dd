"""A real task end to end on the real instruct model: `python -m ouroboros run` with `[server]`
starting llama-server on Qwen2.5-Coder-0.5B-Instruct, as `bench/real_tasks.py` runs each task of
its ladder, the task's check given as an operator's task and run again after the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_module
from tests.test_real_server import RecordingProxy, make_project, real_server, skip_unless_ci

PROJECT_ROOT = Path(__file__).resolve().parents[1]

if real_server.cached_instruct_model() is None:
    skip_unless_ci(
        "the instruct model (Qwen2.5-Coder-0.5B-Instruct) is not fetched; run "
        "`python scripts/real_server.py install`"
    )

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

real_tasks = load_module(PROJECT_ROOT / "bench" / "real_tasks.py")


def test_the_instruct_model_works_a_task_end_to_end(tmp_path: Path) -> None:
    """A task of the ladder (fix a bug in `calc.py`) as a newcomer's config runs it: the run
    starts llama-server on the instruct model in the files protocol, shows the file, reads the
    model's change from its reply and writes it, and ends by its bounds or once the check
    passes, the check run again after it. Whether this small model passes is the bench's figure
    (`docs/benchmarks.md`), not this test's: it varies with any word of the prompt."""
    (task,) = real_tasks.tasks(real_tasks.TASKS, ["05"])
    outcome = real_tasks.run_ouroboros(task, 4096, 1, tmp_path)
    kept = tmp_path / f"{task.name}-4096-s1"
    events = (kept / ".ouroboros" / "events.jsonl").read_text()
    assert outcome.calls >= 1, (outcome, events)
    assert sum(outcome.formats.values()) >= 1, (outcome, events)  # calls were made and run
    ended = ("finish", "max_total_turns", "max_wall_time", "stalled", "stuck")
    assert outcome.stop in ended, (outcome, events)
    assert outcome.loop_carried == 0, outcome
    assert '"kind": "tool_call"' in events or '"kind":"tool_call"' in events
    journal = (kept / ".ouroboros" / "journal.jsonl").read_text()
    assert '"shown":["calc.py"]' in journal.replace(" ", ""), journal[:2000]


def test_a_reply_cut_off_before_any_call_is_its_own_first_words_in_the_next_request(
    tmp_path: Path,
) -> None:
    """The instruct model asked for an essay, stopped at `max_tokens` (48): from the next request
    on the reply is its own first words, never a note of the harness's (the model copied that
    into every reply after), the explanation in the user message after it; the journal keeps
    it whole."""
    model = real_server.model_file("instruct")
    with real_server.RealServer(ctx=4096, model=model, extra_args=["--jinja"]) as server:
        proxy = RecordingProxy(server.port)
        try:
            project = make_project(
                tmp_path / "project",
                proxy.base_url,
                llm={"max_output_tokens": 48, "model": real_server.INSTRUCT_NAME},
            )
            essay = "# Purpose\nFirst write a long essay on the history of tea, in prose.\n"
            (project.root / "SYSTEM_PROMPT.md").write_text(essay)
            # A bound, not a measure: three replies of 48 tokens take under a minute on 2 idle
            # cores, several on busy ones.
            result = project.run("run", "--max-turns", "3", timeout=900)
            chats = proxy.chats()
        finally:
            proxy.close()
    assert result.returncode == 0, result.stderr[-3000:]
    usage = project.usage()
    journal = project.records("journal.jsonl")
    replies = [r["message"] for r in journal if r["kind"] == "message" and r.get("usage")]
    cut_off = [
        n
        for n, (line, reply) in enumerate(zip(usage, replies, strict=True))
        if line["finish_reason"] == "length" and not reply["tool_calls"] and reply["content"]
        if n + 1 < len(chats)
    ]
    pairs = zip(usage, replies, strict=True)
    assert cut_off, [(u["finish_reason"], r["content"][:80]) for u, r in pairs]
    first = cut_off[0]
    sent = chats[first + 1].request["messages"]
    shown = [m for m in sent if m["role"] == "assistant"][-1]["content"]
    whole = replies[first]["content"]
    assert whole.startswith(shown.rstrip()), (shown, whole)
    assert "[reply cut off" not in shown
    assert "cut off at the output limit" in sent[-1]["content"]
