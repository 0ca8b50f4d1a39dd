"""What the operator asks of a run, taken at its safe points: the messages `tell` left, and
`pause` / `unpause`.

A safe point is before a model call, after the step before it is whole (its results and what
the harness told the agent): never between a call and its result. Everything taken is
journalled before its request or message file is removed, and taking the same file again
changes nothing, so a kill at any point neither loses nor repeats what was asked.
"""

from __future__ import annotations

import select
import stat
import sys
from pathlib import Path

from ouroboros.ground import prompts
from ouroboros.ground.clock import Clock
from ouroboros.ground.jsonl import storage
from ouroboros.ground.messages import UserMessage
from ouroboros.ground.state_folder import (
    FORMER_UNPAUSE_REQUEST,
    PAUSE_REQUEST,
    UNPAUSE_REQUEST,
)
from ouroboros.operator import inbox
from ouroboros.operator.records import Letters, Paused, Pausing, Told, Unpaused
from ouroboros.run.session import Feature
from ouroboros.state.journal import Journal

POLL_S = 0.5
"""How often a paused run looks for `unpause`."""
BY_OPERATOR = "operator"
BY_AUTO_RESTART_OFF = "auto_restart = false"


TOLD_SHARE = 0.1
"""Of the prompt budget, what the operator's messages may take at one safe point, all together
(the rest wait for the next steps; each is kept whole in the journal)."""
BYTES_PER_TOKEN = 2
"""Conservative: the densest text costs about a token every two bytes."""


class Operator(Feature):
    """The feature's calls from the run: the safe point before each model call, and the pause
    between sessions when `supervisor.auto_restart` is off."""

    def __init__(self, state_dir: Path, journal: Journal, clock: Clock, auto_restart: bool):
        self.state_dir, self.journal, self.clock = state_dir, journal, clock
        self.auto_restart = auto_restart

    async def before_call(self, prompt_budget: int) -> None:
        await safe_point(self.state_dir, self.journal, self.clock, prompt_budget)

    async def between_sessions(self) -> None:
        if self.auto_restart:
            return
        # The run pauses between sessions: `unpause` (or Enter here) goes on, as from a pause.
        pausing = self.journal.state.part(Pausing)
        if pausing.paused is None and not pausing.unpaused_between:
            self.journal.append(Paused(by=BY_AUTO_RESTART_OFF))
        await hold(self.state_dir, self.journal, self.clock, enter=True)


async def safe_point(state_dir: Path, journal: Journal, clock: Clock, prompt_budget: int) -> None:
    """Pause if asked (and hold while paused), then deliver the messages waiting, oldest first,
    within their share of the prompt budget."""
    take_requests(state_dir, journal)
    await hold(state_dir, journal, clock)
    deliver(state_dir, journal, int(prompt_budget * TOLD_SHARE * BYTES_PER_TOKEN))


def take_requests(state_dir: Path, journal: Journal) -> None:
    """The newer of a `pause` and an `unpause` request decides; a request that changes nothing
    (a pause while paused) is only removed. A request is an empty file, never read: one that
    is not a regular file (a link, a FIFO, a folder) is set aside and counts for nothing."""
    names = (PAUSE_REQUEST, UNPAUSE_REQUEST, FORMER_UNPAUSE_REQUEST)
    requests = [state_dir / name for name in names]
    present = []
    for path in requests:
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode):
            if path.name == FORMER_UNPAUSE_REQUEST:
                journal.notify("warning", f"a `{path.name}` request is now `{UNPAUSE_REQUEST}`")
            present.append((info.st_mtime_ns, path.name))
        else:
            aside = inbox.set_aside(path)
            journal.notify("warning", f"{path.name} is not a regular file: renamed {aside.name}")
    if not present:
        return
    newest = max(present)[1]
    paused = journal.state.part(Pausing).paused
    if newest == PAUSE_REQUEST and paused is None:
        journal.append(Paused(by=BY_OPERATOR))
    elif newest != PAUSE_REQUEST and paused is not None:
        journal.append(Unpaused(by=BY_OPERATOR))
    for path in requests:
        with storage(path):
            path.unlink(missing_ok=True)


async def hold(state_dir: Path, journal: Journal, clock: Clock, enter: bool = False) -> None:
    """While the run is paused: no model call, no tool; `unpause` (or, with `enter`, Enter in
    the run's terminal) goes on. Ctrl-C and SIGTERM cancel the sleep and stop the run."""
    # Polled, not read in a thread: a thread blocked in readline would keep the process alive
    # after the run ends, and swallow the next Enter.
    terminal = enter and sys.stdin is not None and sys.stdin.isatty()
    while journal.state.part(Pausing).paused is not None:
        if terminal and select.select([sys.stdin], [], [], 0)[0]:
            sys.stdin.readline()
            journal.append(Unpaused(by="Enter in the run's terminal"))
            return
        await clock.sleep(POLL_S)
        take_requests(state_dir, journal)


def deliver(state_dir: Path, journal: Journal, room_bytes: int) -> None:
    """The messages waiting join the session, oldest first, while what the agent is shown of
    them fits `room_bytes` in all (a first one longer is shown cut): each journalled whole,
    then its inbox file removed. Waiting are those in the inbox, and those taken before whose
    session ended before a request the server accepted carried them (`Letters.again`)."""
    state = journal.state
    letters = state.part(Letters)
    known = letters.delivered.keys() | letters.undelivered.keys()
    offers: list[tuple[str, inbox.Letter | None]] = [
        (told.message_id, inbox.Letter(told.message_id, told.text, told.sent_at))
        for told in letters.again(state.session)
    ]
    for message_id in inbox.waiting(state_dir):
        if message_id in known:
            inbox.remove(state_dir, message_id)  # taken by a run killed before it removed it
        else:
            offers.append((message_id, None))  # read when its turn comes
    left = room_bytes
    for message_id, offered in sorted(offers, key=lambda offer: offer[0]):
        letter = offered or _letter(state_dir, journal, message_id)
        if letter is None:
            continue
        content = shown(letter, left, cut=left == room_bytes)
        if content is None:
            return
        told = Told(
            session=state.session,
            message_id=letter.message_id,
            sent_at=letter.sent_at,
            text=letter.text,
            message=UserMessage(content=content, origin="operator"),
        )
        journal.append(told)
        inbox.remove(state_dir, letter.message_id)
        left -= len(content.encode())


def _letter(state_dir: Path, journal: Journal, message_id: str) -> inbox.Letter | None:
    """The inbox's message `message_id`; None if it is gone, or its file is not one (then it is
    set aside, with a warning)."""
    try:
        return inbox.read(state_dir, message_id)
    except FileNotFoundError:
        return None  # removed since it was listed
    except inbox.NotAMessage as e:
        aside = inbox.reject(state_dir, message_id)
        done = f"renamed {aside.name}" if aside else "left where it is"
        journal.notify("warning", f"inbox: {message_id}{inbox.SUFFIX} is {e}: {done}")
        return None


def shown(letter: inbox.Letter, room_bytes: int, cut: bool) -> str | None:
    """How the agent is shown `letter` in `room_bytes`: whole; else cut to fit if `cut`, or not
    yet (None). A message longer than the window has room for would be refused with every
    prompt after it, in this session and the next."""
    whole = prompts.from_operator(letter.text, letter.sent_at)
    if len(whole.encode()) <= room_bytes:
        return whole
    if not cut:
        return None
    size = len(letter.text.encode())
    frame = len(whole.encode()) - size + len(prompts.operator_cut(size, size).encode())
    return prompts.from_operator(fitted(letter.text, room_bytes - frame), letter.sent_at)


def fitted(text: str, room_bytes: int) -> str:
    data = text.encode()
    if len(data) <= room_bytes:
        return text
    kept = data[: max(0, room_bytes)].decode(errors="ignore")
    return kept + prompts.operator_cut(len(data), len(kept.encode()))
