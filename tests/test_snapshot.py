"""The snapshot is a cache of the fold: a resume that starts from it has the very state a fold
of the whole journal gives, field by field, as `RunState` declares them."""

from __future__ import annotations

from dataclasses import fields

import pytest

from ouroboros.model.scripted import Reply, tool
from ouroboros.state.fold import RunState
from ouroboros.state.journal import fold
from ouroboros.state.records import JOURNAL_RECORD
from ouroboros.state.snapshot import load
from tests.conftest import Project
from tests.inprocess import run_here


@pytest.mark.slow
def test_a_fold_from_the_snapshot_equals_the_fold_of_the_whole_journal(project: Project) -> None:
    # Long outputs in a small window: masks, wind-downs and restarts, so every run field moves.
    script = [
        Reply(text="look", tool_calls=[tool("shell_exec", command=f"seq 1 {200 + 40 * n}")])
        for n in range(24)
    ]
    # A server that repeats call ids: a warning given once a run, which the snapshot must keep.
    repeated = [Reply(tool_calls=[tool("list_dir", path=".")], call_ids=("same",))] * 2
    finish = Reply(tool_calls=[tool("finish", summary="done")])
    plan = Reply(tool_calls=[tool("plan", items=[{"text": "look", "status": "doing"}])])
    ran = run_here(project, [*repeated, plan, *script, finish])
    assert ran.returncode == 0, ran.stderr
    journal = project.state / "journal.jsonl"
    assert load(journal) is not None, "the fold starts from the snapshot"
    from_snapshot, _ = fold(journal)
    whole = RunState()
    for line in journal.read_text().splitlines():
        whole.apply(JOURNAL_RECORD.validate_json(line))
    assert whole.warned, "a warning was given once"
    assert whole.plan.items, "a plan was saved (before the last session start)"
    assert whole.session >= 2, "the run restarted: the snapshot is not the first session's"
    for f in fields(RunState):
        if f.name == "view":
            assert from_snapshot.view.messages() == whole.view.messages()
            assert from_snapshot.view.masked_ids == whole.view.masked_ids
        else:
            assert getattr(from_snapshot, f.name) == getattr(whole, f.name), f.name
