"""A kill right after the answer to a text-only reply, before the policy's decisions after that
step were journalled: the resumed run decides them before it calls the model, as the live run
did (a reply with calls is finished by `act_on`; one without calls is answered whole already)."""

from __future__ import annotations

from ouroboros.model.scripted import Reply
from ouroboros.state.snapshot import snapshot_path
from tests.conftest import Project
from tests.inprocess import run_here

WINDOW = 4096
MUSING = "Reading the numbers over once more before I decide. " * 150
"""A text-only reply long enough to carry the prompt past the hard line by itself."""


def script() -> list[Reply]:
    steps = [Reply(tool_calls=[("shell_exec", {"command": f"seq 1 {n}"})]) for n in (300, 310)]
    finish = Reply(tool_calls=[("finish", {"summary": "done"})])
    return [*steps, Reply(text=MUSING), *[finish] * 4]


def test_a_kill_after_a_text_reply_is_answered_still_gets_the_decisions_after_it(
    project: Project,
) -> None:
    live = run_here(project, script(), window=WINDOW)
    assert live.returncode == 0, live.stdout
    journal = project.state / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    kinds = [r["kind"] for r in project.records("journal.jsonl")]
    answered = next(
        i
        for i, r in enumerate(project.records("journal.jsonl"))
        if r["kind"] == "message" and r["message"].get("origin") == "continue"
    )
    decided = kinds[answered + 1]
    assert decided == "wind_down", f"the scenario decides a wind-down after the answer: {kinds}"

    journal.write_text("".join(lines[: answered + 1]))  # a kill -9 right after the answer
    snapshot_path(journal).unlink(missing_ok=True)
    resumed = run_here(project, script()[3:], window=WINDOW)
    assert resumed.returncode == 0, resumed.stdout
    after = [r["kind"] for r in project.records("journal.jsonl")[answered + 1 :]]
    assert after[after.index("run_start") + 1] == "wind_down", after
