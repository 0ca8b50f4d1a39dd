"""Features plug in: their records register their kinds, the run's state is the core's fields and
the features' parts, and the layers hold (`bench/layers.py`)."""

from __future__ import annotations

import subprocess
import sys
from typing import Literal

import pytest

from ouroboros.checkpoints.records import Checkpoint, Checkpoints, Rewinding
from ouroboros.state.fold import RunState
from ouroboros.state.records import JOURNAL_RECORD, EndReason, Record, SessionStart
from tests.conftest import PROJECT_ROOT, load_module

ON_DISK = {
    "run_start", "starting", "session_start", "message", "tool_started", "mask", "cut",
    "refused", "compaction", "wind_down", "usage", "notice", "compaction_failed", "loop", "told",
    "paused", "unpaused", "checkpoint", "rewinding", "rewound", "mcp_offered", "mcp_fault",
    "window", "session_end", "run_end", "server_started", "server_exited", "dead_end",
    "tasks_added", "check", "stalling",
}  # fmt: skip
"""Every kind journals hold: old journals fold only while each is read as before."""


def test_a_reader_of_the_journal_alone_knows_every_kind_the_features_included() -> None:
    # A fresh interpreter that imports the journal and nothing of a feature, and reads one.
    code = (
        "import sys, tempfile\n"
        "from pathlib import Path\n"
        "from ouroboros.state.journal import fold\n"
        "from ouroboros.state.records import KINDS\n"
        "print('ouroboros.progress.records' in sys.modules)\n"
        "fold(Path(tempfile.mkdtemp()) / 'journal.jsonl')\n"
        "print(' '.join(sorted(KINDS)))\n"
        "print('mcp' in sys.modules)"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT_ROOT, check=True
    )
    before, kinds, sdk = ran.stdout.splitlines()
    assert before == "False", "a feature's records are imported when a journal is read"
    assert set(kinds.split()) == ON_DISK
    assert sdk == "False", "the MCP SDK (an optional extra) is never imported eagerly"


def test_a_feature_record_is_read_by_its_kind_and_a_kind_is_taken_once() -> None:
    line = Checkpoint(session=1, commit="c0ffee", files=2, bytes=10).model_dump_json()
    assert isinstance(JOURNAL_RECORD.validate_json(line), Checkpoint)
    with pytest.raises(TypeError, match="taken by Checkpoint"):

        class Again(Record):
            kind: Literal["checkpoint"] = "checkpoint"


def test_a_features_part_folds_its_records_and_what_they_imply() -> None:
    state = RunState()
    state.apply(SessionStart(session=1, reason="fresh", messages=[]))
    state.apply(Checkpoint(session=1, commit="c0ffee", files=2, bytes=10))
    rewinding = Rewinding(session=1, commit="c0ffee", moved_aside="x", after_session=1)
    state.apply(rewinding.model_copy(update={"ended_turns": 0}))
    assert state.part(Checkpoints).taken[1].commit == "c0ffee"
    assert state.part(Checkpoints).rewinding is not None
    assert not state.session_open
    assert state.ended_reason == EndReason.REWOUND


def test_no_import_circle_and_at_most_three_imports_up_a_layer() -> None:
    layers = load_module(PROJECT_ROOT / "bench" / "layers.py")
    edges = layers.graph()
    assert layers.circles(edges) == []
    assert len(layers.up_imports(edges)) <= layers.MAX_UP
