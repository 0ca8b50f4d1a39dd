"""The inbox: messages from `python -m ouroboros tell`, one file each in the state folder,
durable the moment `tell` returns, whether a run is up or not.

`tell` never touches the journal (a running supervisor holds it); the run delivers a message at
its next safe point (`operator.py`) by journalling it first and removing its file after, so a
kill between the two leaves a file the fold knows was delivered.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ouroboros.errors import RunError
from ouroboros.run.jsonl import storage
from ouroboros.run.records import now_iso
from ouroboros.run.state_folder import INBOX

MAX_MESSAGE_BYTES = 16_384
"""A message is guidance for the next step, not a document: a longer one is refused (give the
agent a file in its workspace to read instead), so it never fills a small window at once."""
SUFFIX = ".json"


@dataclass(frozen=True)
class Letter:
    message_id: str
    """The file's name less its suffix: the time it was sent then a random part, so names sort
    in the order messages were sent."""
    text: str
    sent_at: str


def _fsync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def post(state_dir: Path, text: str) -> Letter:
    """Leave `text` for the run: written whole under a temporary name, fsync'ed, renamed into
    place, and the folder fsync'ed, so the message is either there whole or not at all."""
    text = text.strip()
    if not text:
        raise RunError("the message is empty: say something to the agent")
    size = len(text.encode())
    if size > MAX_MESSAGE_BYTES:
        raise RunError(
            f"the message is {size:,} bytes, more than {MAX_MESSAGE_BYTES:,}: write it to a "
            "file in the workspace and tell the agent to read it"
        )
    folder = state_dir / INBOX
    letter = Letter(f"{time.time_ns():020d}-{secrets.token_hex(4)}", text, now_iso())
    body = json.dumps({"sent_at": letter.sent_at, "text": text}).encode()
    temporary = folder / f".{letter.message_id}.tmp"
    with storage(folder):
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(handle, body)
            os.fsync(handle)
        finally:
            os.close(handle)
        temporary.rename(folder / f"{letter.message_id}{SUFFIX}")
        _fsync_folder(folder)
    return letter


def letters(state_dir: Path) -> list[Letter]:
    """The messages in the inbox, oldest first (a half-written one, never renamed into place,
    is not one; a file that does not read as a message is left for a person to look at)."""
    folder = state_dir / INBOX
    try:
        paths = sorted(p for p in folder.iterdir() if p.suffix == SUFFIX)
    except FileNotFoundError:
        return []
    found = []
    for path in paths:
        try:
            data = json.loads(path.read_bytes())
            found.append(Letter(path.stem, str(data["text"]), str(data["sent_at"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


def remove(state_dir: Path, message_id: str) -> None:
    folder = state_dir / INBOX
    with storage(folder):
        (folder / f"{message_id}{SUFFIX}").unlink(missing_ok=True)
