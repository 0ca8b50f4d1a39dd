"""A real task end to end on the real instruct model: `python -m ouroboros run` with `[server]`
starting llama-server on Qwen2.5-Coder-0.5B-Instruct, as `bench/real_tasks.py` runs each task of
its ladder, the task's check given as an operator's task and run again after the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_module
from tests.test_real_server import real_server, skip_unless_ci

PROJECT_ROOT = Path(__file__).resolve().parents[1]

if real_server.cached_instruct_model() is None:
    skip_unless_ci(
        "the instruct model (Qwen2.5-Coder-0.5B-Instruct) is not fetched; run "
        "`python scripts/real_server.py install`"
    )

pytestmark = [pytest.mark.real_server, pytest.mark.slow]

real_tasks = load_module(PROJECT_ROOT / "bench" / "real_tasks.py")


def test_the_instruct_model_works_a_task_end_to_end(tmp_path: Path) -> None:
    """The ladder's first task: the run starts llama-server on the instruct model, the model's
    calls are read and run (whatever form it writes them in), and the run ends by its bounds or
    `finish` with the check run after it. Whether this small model passes is the bench's figure
    (`docs/benchmarks.md`), not this test's: it varies with any word of the prompt."""
    (task,) = real_tasks.tasks(real_tasks.TASKS, ["01"])
    outcome = real_tasks.run_ouroboros(task, 4096, 1, tmp_path)
    kept = tmp_path / f"{task.name}-4096-s1"
    events = (kept / ".ouroboros" / "events.jsonl").read_text()
    assert outcome.calls >= 1, (outcome, events)
    assert sum(outcome.formats.values()) >= 1, (outcome, events)  # calls were made and run
    assert outcome.stop in ("finish", "max_total_turns", "stalled", "stuck"), (outcome, events)
    assert outcome.loop_carried == 0, outcome
    assert '"kind": "tool_call"' in events or '"kind":"tool_call"' in events
