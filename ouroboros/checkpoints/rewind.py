"""`python -m ouroboros rewind --session N`: the workspace put back as it was when session N
started, while no run is running (the run's lock is held throughout), and journalled, so the
next session opens with a note saying so."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import anyio

from ouroboros.checkpoints.commit import FAILURES, failure, repo_of
from ouroboros.checkpoints.records import Checkpoints, Rewinding, Rewound
from ouroboros.checkpoints.restore import Restored, prepare, put_back
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError
from ouroboros.ground.state_folder import JOURNAL, REWOUND
from ouroboros.observe.describe import stdout_console
from ouroboros.run.lock import state_lock
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.state.journal import Journal


def aside_folder(state_dir: Path, session: int) -> Path:
    """A new folder for the files a rewind moves aside."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        name = f"{stamp}-to-session-{session}" + (f"-{n}" if n else "")
        path = state_dir / REWOUND / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{state_dir / REWOUND}: no free name for {stamp}")


def rewound_record(began: Rewinding, done: Restored, stopped: str = "") -> Rewound:
    return Rewound(
        session=began.session,
        commit=began.commit,
        moved_aside=began.moved_aside if done.moved else "",
        moved=len(done.moved),
        restored=done.written,
        today=done.today,
        after_session=began.after_session,
        stopped=stopped,
    )


def spans(numbers: list[int]) -> str:
    """`1-4, 7, 9-10`: sessions named in a line, however many."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)


def refusal(checkpoints: Checkpoints, session: int) -> str:
    if not checkpoints.taken:
        return (
            f"session {session} has no checkpoint: no session of this run has one "
            "(checkpoints.enabled, or a warning in `status` says why)"
        )
    return (
        f"session {session} has no checkpoint; sessions with one: {spans(list(checkpoints.taken))}"
    )


def rewind(settings: Settings, session: int) -> str:
    """Rewind the workspace to session `session`'s checkpoint; what was done, in one line."""
    state_dir = settings.paths.state_dir
    if not (state_dir / JOURNAL).exists():
        raise RunError(f"no run in {state_dir}: nothing to rewind")
    with state_lock(state_dir):
        log = EventLog(state_dir, Terminal(stdout_console(), quiet=True))
        journal = Journal(state_dir / JOURNAL)
        try:
            journal.sinks.extend(log.sinks())
            return _rewind(settings, journal, session)
        finally:
            journal.close()
            log.close()


def _rewind(settings: Settings, journal: Journal, session: int) -> str:
    state = journal.state
    checkpoints = state.part(Checkpoints)
    checkpoint = checkpoints.taken.get(session)
    if checkpoint is None:
        raise RunError(refusal(checkpoints, session))
    try:
        aside = aside_folder(settings.paths.state_dir, session)
    except OSError as e:
        raise RunError(f"no folder for today's files: {failure(e)}") from None
    repo, limit = repo_of(settings), settings.checkpoints.max_bytes
    earlier = checkpoints.rewinding
    try:
        plan = anyio.run(prepare, repo, checkpoint.commit, aside.name, limit)
    except FAILURES as e:
        aside.rmdir()
        raise RunError(
            f"the rewind to session {session} stopped ({failure(e)}), having moved nothing"
        ) from None
    began = Rewinding(
        session=session,
        commit=checkpoint.commit,
        moved_aside=str(aside),
        after_session=state.session,
        ended_turns=state.session_turns if state.session_open else None,
    )
    journal.append(began)
    done = Restored(plan.today.commit)
    try:
        anyio.run(put_back, repo, plan, aside, done)
    except FAILURES as e:
        journal.append(rewound_record(began, done, failure(e)))
        moved = f"; what it moved is in {aside}" if done.moved else ", having moved nothing"
        raise RunError(
            f"the rewind to session {session} stopped part way ({failure(e)}): "
            f"{done.written} file(s) restored{moved}; the next session is told"
        ) from None
    journal.append(rewound_record(began, done))
    moved = f"{len(done.moved)} moved aside to {aside}"
    if not done.moved:
        with contextlib.suppress(OSError):
            aside.rmdir()
        moved = "none of today's files had to move"
    # A rewind killed part way left its files in a folder of its own: said until one finishes.
    unfinished = f" (an earlier rewind did not finish: {earlier.moved_aside})" if earlier else ""
    return (
        f"workspace rewound to the start of session {session} (commit {checkpoint.commit[:12]}): "
        f"{done.written} file(s) restored, {moved}; the next session is told{unfinished}"
    )
