"""What the operator asks of a run, taken at its safe points: the messages `tell` left, and
`pause` / `resume`.

A safe point is before a model call, after the step before it is whole (its results and what
the harness told the agent): never between a call and its result. Everything taken is
journalled before its request or message file is removed, and taking the same file again
changes nothing, so a kill at any point neither loses nor repeats what was asked.
"""

from __future__ import annotations

import select
import sys
from pathlib import Path

from ouroboros import prompts
from ouroboros.clock import Clock
from ouroboros.messages import UserMessage
from ouroboros.run import inbox
from ouroboros.run.journal import Journal
from ouroboros.run.jsonl import storage
from ouroboros.run.records import Paused, Resumed, Told
from ouroboros.run.state_folder import PAUSE_REQUEST, RESUME_REQUEST

POLL_S = 0.5
"""How often a paused run looks for `resume`."""
BY_OPERATOR = "operator"
BY_AUTO_RESTART_OFF = "auto_restart = false"


TOLD_SHARE = 0.1
"""Of the prompt budget, what one operator message may take (the rest is kept in the journal)."""
BYTES_PER_TOKEN = 2
"""Conservative: the densest text costs about a token every two bytes."""


async def safe_point(state_dir: Path, journal: Journal, clock: Clock, prompt_budget: int) -> None:
    """Pause if asked (and hold while paused), then deliver the messages waiting, each cut to
    its share of the prompt budget."""
    take_requests(state_dir, journal)
    await hold(state_dir, journal, clock)
    deliver(state_dir, journal, int(prompt_budget * TOLD_SHARE * BYTES_PER_TOKEN))


def take_requests(state_dir: Path, journal: Journal) -> None:
    """The newer of a `pause` and a `resume` request decides; a request that changes nothing
    (a pause while paused) is only removed."""
    requests = [state_dir / PAUSE_REQUEST, state_dir / RESUME_REQUEST]
    present = []
    for path in requests:
        try:
            present.append((path.stat().st_mtime_ns, path.name))
        except FileNotFoundError:
            continue
    if not present:
        return
    newest = max(present)[1]
    if newest == PAUSE_REQUEST and journal.state.paused is None:
        journal.append(Paused(by=BY_OPERATOR))
    elif newest == RESUME_REQUEST and journal.state.paused is not None:
        journal.append(Resumed(by=BY_OPERATOR))
    for path in requests:
        with storage(path):
            path.unlink(missing_ok=True)


async def hold(state_dir: Path, journal: Journal, clock: Clock, enter: bool = False) -> None:
    """While the run is paused: no model call, no tool; `resume` (or, with `enter`, Enter in
    the run's terminal) goes on. Ctrl-C and SIGTERM cancel the sleep and stop the run."""
    # Polled, not read in a thread: a thread blocked in readline would keep the process alive
    # after the run ends, and swallow the next Enter.
    terminal = enter and sys.stdin is not None and sys.stdin.isatty()
    while journal.state.paused is not None:
        if terminal and select.select([sys.stdin], [], [], 0)[0]:
            sys.stdin.readline()
            journal.append(Resumed(by="Enter in the run's terminal"))
            return
        await clock.sleep(POLL_S)
        take_requests(state_dir, journal)


def deliver(state_dir: Path, journal: Journal, room_bytes: int) -> None:
    """Each message not yet delivered joins the session (journalled whole), then its file goes.
    The model is shown at most `room_bytes` of it: a message longer than the window has room
    for would be refused with every prompt after it, in this session and the next."""
    state = journal.state
    for letter in inbox.letters(state_dir):
        if letter.message_id not in state.delivered:
            content = prompts.from_operator(fitted(letter.text, room_bytes), letter.sent_at)
            told = Told(
                session=state.session,
                message_id=letter.message_id,
                sent_at=letter.sent_at,
                text=letter.text,
                message=UserMessage(content=content, origin="operator"),
            )
            journal.append(told)
        inbox.remove(state_dir, letter.message_id)


def fitted(text: str, room_bytes: int) -> str:
    data = text.encode()
    if len(data) <= room_bytes:
        return text
    kept = data[:room_bytes].decode(errors="ignore")
    return kept + prompts.operator_cut(len(data), len(kept.encode()))
