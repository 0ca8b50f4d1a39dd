"""The snapshot is a cache of the fold: a resume that starts from it has the very state a fold
of the whole journal gives, field by field, as `RunState` declares them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields

import pytest

from ouroboros.model.scripted import Reply, tool
from ouroboros.state.fold import PARTS, RunState
from ouroboros.state.journal import fold
from ouroboros.state.records import JOURNAL_RECORD
from ouroboros.state.snapshot import RUN_FIELDS, load, snapshot_path
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


def test_a_snapshot_from_before_a_part_gained_a_field_is_not_loaded(project: Project) -> None:
    """A snapshot an older version wrote lacks a field a part has now: loaded, that field would
    take its default where the journal says otherwise; it is ignored instead (the whole journal
    is folded)."""
    ran = run_here(
        project,
        [Reply(tool_calls=[tool("list_dir", path=".")])] * 3,
        session={"max_turns": 1},
        supervisor={"max_restarts": 1},
    )
    assert ran.returncode == 0, ran.stderr
    journal = project.state / "journal.jsonl"
    assert load(journal) is not None
    path = snapshot_path(journal)
    saved = json.loads(path.read_text())
    part, dropped = "Checkpoints", "rewound"
    del saved["run"][part][dropped]
    parts: tuple[type, ...] = tuple(PARTS)
    names = [*RUN_FIELDS]
    names += [f"{p.__name__}.{f.name}" for p in parts for f in fields(p)]
    names.remove(f"{part}.{dropped}")
    saved["shape"] = hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]
    path.write_text(json.dumps(saved))
    assert load(journal) is None
