"""Kill -9 right after any record of a run's journal, resume: the run decides as it would have
uninterrupted (issue 21). A scripted agent (`resume_runs`) runs once uninterrupted per context
strategy, then again from each tried prefix of its journal; the tests read those runs."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground import prompts
from ouroboros.state.snapshot import snapshot_path
from tests.resume_runs import decisions, journal_path, killed_after, make_project, run_project

pytestmark = pytest.mark.slow  # each test folds and resumes a scripted run after every record

EVERY = {"mask": 5, "compact": 15}
"""Of the message and tool-start records (most of a journal), one boundary in so many is tried
(the compaction run's rarer records are its point); after every record of another kind, all."""
STREAK = 8
"""Records before the first repeat nudge, where a resume falls inside the streak of the same
call (tried in the masking run)."""
WITHOUT_SNAPSHOT = ("session_start", "wind_down")
"""Where the resume without a snapshot is tried too, in a later session: the snapshot then holds
a run's worth of figures (replies, calibration) that folding the whole journal must give too."""
SCRATCH = Path("/dev/shm")
"""Every record is fsync'ed: on tmpfs that costs nothing, over the hundred runs resumed here."""


@dataclass
class Trial:
    """One strategy's uninterrupted journal and the journals resumed after its tried records."""

    strategy: str
    full: list[bytes]
    live_snapshot: dict[str, Any]
    """The snapshot the uninterrupted run left."""
    resumed: dict[int, list[bytes]] = field(default_factory=dict)
    """By records kept: the journal the resumed run left (the snapshot kept)."""
    without_snapshot: dict[int, list[bytes]] = field(default_factory=dict)
    made_snapshot: dict[str, Any] = field(default_factory=dict)
    """The snapshot `killed_after` made for the whole journal: the live run's again."""

    def record(self, k: int) -> dict[str, Any]:
        """The last record kept when `k` are."""
        parsed: dict[str, Any] = json.loads(self.full[k - 1])
        return parsed

    def tried(self, *kinds: str) -> list[int]:
        chosen = [k for k in self.resumed if k and (not kinds or self.record(k)["kind"] in kinds)]
        assert chosen, f"no boundary after {kinds} tried"
        return chosen


def boundaries(full: list[bytes], every: int, streak: bool) -> list[int]:
    """The records kept (k) that resumes are tried after: none; after every record of a rare
    kind; inside the first streak of the same call (`streak`); one in `every` of the others;
    the end."""
    records = [json.loads(line) for line in full]
    chosen = {0, len(full) - 2, len(full) - 1, len(full)}
    if streak:
        nudge = next(i for i, r in enumerate(records) if r["kind"] == "loop")
        chosen.update(range(nudge - STREAK, nudge + 2))  # up to the nudge record itself
    common = 0
    for k, record in enumerate(records, start=1):
        if record["kind"] not in ("message", "tool_started"):
            chosen.add(k)
        else:
            common += 1
            if common % every == 0:
                chosen.add(k)
    return sorted(chosen)


class Trials:
    """The runs, made once per strategy in one project folder (the same absolute paths, so the
    same system prompt and the same token counts, in every run)."""

    def __init__(self, root: Path):
        self.root = root
        self.made: dict[str, Trial] = {}

    def __getitem__(self, strategy: str) -> Trial:
        if strategy not in self.made:
            self.made[strategy] = self.make(strategy)
        return self.made[strategy]

    def make(self, strategy: str) -> Trial:
        make_project(self.root, strategy)
        run_project(self.root)
        path = journal_path(self.root)
        live = json.loads(snapshot_path(path).read_text())
        trial = Trial(strategy, path.read_bytes().splitlines(keepends=True), live)
        for k in boundaries(trial.full, EVERY[strategy], streak=strategy == "mask"):
            trial.resumed[k] = self.resume(trial, k, keep_snapshot=True)
            last = trial.record(k) if k else {}
            if strategy == "mask" and last.get("kind") in WITHOUT_SNAPSHOT:
                if last["session"] >= 2:
                    trial.without_snapshot[k] = self.resume(trial, k, keep_snapshot=False)
        return trial

    def resume(self, trial: Trial, k: int, keep_snapshot: bool) -> list[bytes]:
        killed_after(self.root, trial.strategy, trial.full, k, keep_snapshot)
        path = journal_path(self.root)
        if k == len(trial.full):
            trial.made_snapshot = json.loads(snapshot_path(path).read_text())
        run_project(self.root)
        lines = path.read_bytes().splitlines(keepends=True)
        assert lines[:k] == trial.full[:k], "a resume rewrote the journal it resumed"
        return lines


@pytest.fixture(scope="module")
def trials() -> Iterator[Trials]:
    # The project's path is in the agent's prompt, so in every token count: a temporary name's
    # digits (each a token to the estimate) would move the run's figures from one run to the
    # next, and with them what it decides. Letters only, of one length: the same run each time.
    scratch = SCRATCH if SCRATCH.is_dir() else Path(tempfile.gettempdir())
    folder = scratch / ("resume-" + "".join(chr(ord("a") + int(d)) for d in f"{os.getpid():08d}"))
    shutil.rmtree(folder, ignore_errors=True)
    try:
        yield Trials(folder / "project")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def divergences(trial: Trial, boundaries: list[int]) -> list[str]:
    """For each boundary whose resumed run decided otherwise: where, and the first decision
    that differs."""
    found = []
    for k in boundaries:
        expected, got = decisions(trial.full[k:]), decisions(trial.resumed[k][k:])
        if expected == got:
            continue
        i = next(
            (i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
            min(len(expected), len(got)),
        )
        found.append(
            f"k={k} (after {trial.record(k)['kind']}): decision {i} expected "
            f"{_short(expected, i)}, got {_short(got, i)}"
        )
    return found


def _short(decided: list[dict[str, Any]], i: int) -> str:
    if i >= len(decided):
        return "nothing"
    return json.dumps({key: v for key, v in decided[i].items() if key != "messages"})[:240]


@pytest.mark.parametrize("strategy", ["mask", "compact"])
def test_the_scripted_run_makes_every_decision_and_again_alike(
    trials: Trials, strategy: str
) -> None:
    """The ground the other tests stand on: the run is the same run every time (resumed with
    nothing kept, it is the uninterrupted run again), its journal holds every kind of decision
    and message the property is about, and the snapshot a resume is given is the one the run
    wrote."""
    trial = trials[strategy]
    assert decisions(trial.resumed[0]) == decisions(trial.full)
    records = [json.loads(line) for line in trial.full]
    kinds = [r["kind"] for r in records]
    origins = {r["message"].get("origin") for r in records if r["kind"] == "message"}
    assert kinds.count("session_start") >= 3
    assert {"mask", "wind_down", "tool_started", "refused", "loop"} <= set(kinds)
    assert "continue" in origins  # a text-only reply (a repeated call: the loop's nudge)
    assert (records[-1]["kind"], records[-1]["reason"]) == ("run_end", "finish")
    if strategy == "mask":
        # The refused prompt's: the others are at a line.
        assert "overflow" in {r["reason"] for r in records if r["kind"] == "mask"}
    else:
        # A side call that made no compaction is a failed one.
        assert 0 < kinds.count("compaction") < kinds.count("usage")
    assert set(kinds) == {trial.record(k)["kind"] for k in trial.tried()}
    assert trial.made_snapshot == trial.live_snapshot


@pytest.mark.parametrize("strategy", ["mask", "compact"])
def test_resumed_right_after_a_session_start_the_run_decides_alike(
    trials: Trials, strategy: str
) -> None:
    trial = trials[strategy]
    assert divergences(trial, trial.tried("session_start")) == []


@pytest.mark.parametrize("strategy", ["mask", "compact"])
def test_a_call_cut_short_after_it_started_is_never_run_again(
    trials: Trials, strategy: str
) -> None:
    """Whether it took effect is unknown: it gets an 'interrupted' result, and the run goes on
    to its end."""
    trial = trials[strategy]
    for k in trial.tried("tool_started"):
        call_id = trial.record(k)["call_id"]
        after = [json.loads(line) for line in trial.resumed[k][k:]]
        assert not [r for r in after if r["kind"] == "tool_started" and r["call_id"] == call_id]
        results = [
            r["message"]
            for r in after
            if r["kind"] == "message" and r["message"].get("tool_call_id") == call_id
        ]
        assert len(results) == 1, f"k={k}"
        assert results[0]["content"] == prompts.CRASH_INTERRUPTED
        assert results[0]["error"] is True
        assert (after[-1]["kind"], after[-1]["reason"]) == ("run_end", "finish")


def test_a_run_resumed_from_its_snapshot_decides_as_from_its_whole_journal(
    trials: Trials,
) -> None:
    trial = trials["mask"]
    assert trial.without_snapshot
    for k, whole in trial.without_snapshot.items():
        assert decisions(whole[k:]) == decisions(trial.resumed[k][k:]), f"k={k}"


@pytest.mark.parametrize(
    "strategy",
    [
        "mask",  # the refusal is answered by masks, and the prompt asked again
        "compact",  # no room can answer it: the session ends, with the server's words
    ],
)
def test_killed_after_a_refused_prompt_the_run_decides_alike(trials: Trials, strategy: str) -> None:
    trial = trials[strategy]
    assert divergences(trial, trial.tried("refused")) == []


@pytest.mark.parametrize("strategy", ["mask", "compact"])
def test_resumed_after_any_record_the_run_decides_alike(trials: Trials, strategy: str) -> None:
    """The property: every tried boundary resumes to the same decisions and messages as the
    uninterrupted run, the finish's result and its session end among them; but after a started
    call (an 'interrupted' result) and after a refused prompt (both above)."""
    trial = trials[strategy]
    last = len(trial.full)
    assert {last - 2, last - 1} <= set(trial.tried())
    boundaries = [
        k for k in trial.tried() if trial.record(k)["kind"] not in ("tool_started", "refused")
    ]
    assert divergences(trial, boundaries) == []
