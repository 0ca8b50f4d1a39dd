"""`python -m ouroboros rewind --session N`: the workspace put back as it was when session N
started, while no run is running (the run's lock is held throughout), and journalled, so the
next session opens with a note saying so."""

from __future__ import annotations

import contextlib

import anyio

from ouroboros.config import Settings
from ouroboros.errors import RunError
from ouroboros.observe.describe import stdout_console
from ouroboros.run.checkpoint_records import Checkpoints
from ouroboros.run.checkpoints import aside_folder, failure, repo_of, restore, rewound_record
from ouroboros.run.git_store import GitFailed
from ouroboros.run.journal import Journal
from ouroboros.run.lock import state_lock
from ouroboros.run.records import EndReason, SessionEnd
from ouroboros.run.state_folder import JOURNAL
from ouroboros.sinks.events import EventLog
from ouroboros.sinks.live import Terminal


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
    checkpoint = state.checkpoints.taken.get(session)
    if checkpoint is None:
        raise RunError(refusal(state.checkpoints, session))
    try:
        aside = aside_folder(settings.paths.state_dir, session)
    except OSError as e:
        raise RunError(f"no folder for today's files: {failure(e)}") from None
    repo, limit = repo_of(settings), settings.checkpoints.max_bytes
    try:
        done = anyio.run(restore, repo, checkpoint.commit, aside, limit)
    except (GitFailed, OSError) as e:
        with contextlib.suppress(OSError):
            aside.rmdir()  # only where nothing was moved into it
        moved = f"; what it moved is in {aside}" if aside.exists() else ", having moved nothing"
        raise RunError(f"the rewind to session {session} stopped ({failure(e)}){moved}") from None
    if state.session_open:
        journal.append(
            SessionEnd(
                session=state.session,
                reason=EndReason.REWOUND,
                detail=f"the workspace was rewound to the start of session {session}",
                turns=state.session_turns,
            )
        )
    moved = f"{len(done.moved)} moved aside to {aside}"
    if not done.moved:
        with contextlib.suppress(OSError):
            aside.rmdir()
        moved = "none of today's files had to move"
    journal.append(rewound_record(session, checkpoint.commit, aside, done, state.session))
    return (
        f"workspace rewound to the start of session {session} (commit {checkpoint.commit[:12]}): "
        f"{done.written} file(s) restored, {moved}; the next session is told"
    )
