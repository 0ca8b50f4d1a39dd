"""The inbox: messages from `python -m ouroboros tell`, one file each in the state folder,
durable the moment `tell` returns, whether a run is up or not.

`tell` never touches the journal (a running supervisor holds it); the run takes a message at a
safe point (`safe_point.py`) by journalling it first and removing its file after, so a kill
between the two leaves a file the fold knows was taken.

Whatever else lands in the folder is read as hostile: only a regular file is read (never
through a link, never blocking on a FIFO), at most `MAX_FILE_BYTES` of it; anything else
(a FIFO, a link, a folder, an oversized or unreadable file) is renamed `<name>.rejected` in
place, so it is neither read again nor lost. A link in place of the folder itself is not read
through (`listed`), and `tell` refuses to leave a message there (`made`); one swapped in after
the folder was listed is not read, removed or renamed through either (`read_in`, `remove_in`,
`set_aside_in` open the folder first, without following a link, and act on names in it).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ouroboros.ground.errors import RunError
from ouroboros.ground.jsonl import storage
from ouroboros.ground.state_folder import INBOX
from ouroboros.ground.timestamps import now_iso

MAX_MESSAGE_BYTES = 16_384
"""A message is guidance for the next step, not a document: a longer one is refused (give the
agent a file in its workspace to read instead), so it never fills a small window at once."""
MAX_FILE_BYTES = 8 * MAX_MESSAGE_BYTES
"""A message's file: JSON escapes a byte of text into at most six."""
SENT_AT_BYTES = 64
"""Room for the time a message was sent (`now_iso`)."""
SUFFIX = ".json"
REJECTED = ".rejected"
"""What a file that is not a message is renamed with (`<name>.rejected`, next to where it was)."""


@dataclass(frozen=True)
class Letter:
    message_id: str
    """The file's name less its suffix: the time it was sent then a random part, so names sort
    in the order messages were sent."""
    text: str
    sent_at: str


class NotAMessage(Exception):
    """What a file is instead of a message, said in a few words ("a FIFO", "over 131,072
    bytes")."""


def leave(folder: Path, name: str, body: bytes) -> None:
    """`body` as the file `name` of `folder`, durable when this returns, whole or not there
    (written aside, synced, renamed, the folder synced): what `tell` and `task` leave."""
    temporary = folder / f".{name}.tmp"
    with storage(folder):
        made(folder)
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(handle, body)
            os.fsync(handle)
        finally:
            os.close(handle)
        temporary.rename(folder / name)
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
    letter = Letter(f"{time.time_ns():020d}-{os.urandom(4).hex()}", text, now_iso())
    body = json.dumps({"sent_at": letter.sent_at, "text": text}).encode()
    leave(state_dir / INBOX, f"{letter.message_id}{SUFFIX}", body)
    return letter


def made(folder: Path) -> None:
    """`folder` made if missing; `RunError` where it is a link: the run reads no folder through
    one (`listed`), so what was left there would wait for ever."""
    folder.mkdir(parents=True, exist_ok=True)
    if folder.is_symlink():
        raise RunError(f"{folder} is a link, which the run does not read through: remove it")


def waiting(state_dir: Path) -> list[str]:
    """The ids of the messages in the inbox, oldest first, unread (a half-written one, never
    renamed into place, is not one)."""
    return listed(state_dir / INBOX, SUFFIX)


def listed(folder: Path, suffix: str) -> list[str]:
    """The names in `folder` ending in `suffix`, less it, sorted; none where `folder` is a link
    (the files it points to are not the run's to read, remove or set aside) or not a folder."""
    with _folder(folder) as handle:
        if handle is None:
            return []
        try:
            names = os.listdir(handle)  # not `Path`s: thousands may wait
        except OSError:
            return []
    return sorted(name[: -len(suffix)] for name in names if name.endswith(suffix))


@contextlib.contextmanager
def _folder(folder: Path) -> Iterator[int | None]:
    """`folder` opened as a folder, never through a link; None where it is a link (or gone,
    or no folder): nothing in it is the run's then."""
    try:
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield None
        return
    try:
        yield handle
    finally:
        os.close(handle)


def _is_link(path: Path, dir_fd: int | None) -> bool:
    try:
        name = path if dir_fd is None else path.name
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def read_in(folder: Path, name: str, cap: int) -> bytes:
    """`read_regular` of `name` in `folder`, the folder opened first through no link."""
    with _folder(folder) as handle:
        if handle is None:
            raise NotAMessage("in a folder that is a link, or gone")
        return read_regular(folder / name, cap, dir_fd=handle)


def read_regular(path: Path, cap: int, follow: bool = False, dir_fd: int | None = None) -> bytes:
    """The regular file at `path` (its name in the open folder `dir_fd`, if given), of at most
    `cap` bytes (at most `cap` + 1 are read): opened without blocking (a FIFO, a device),
    through no link unless `follow`. `NotAMessage` says what it is instead;
    `FileNotFoundError` if nothing is there."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        name = path if dir_fd is None else path.name
        handle = os.open(name, flags | (0 if follow else os.O_NOFOLLOW), dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError as e:
        if not follow and _is_link(path, dir_fd):
            raise NotAMessage("a link") from None
        raise NotAMessage(f"unreadable ({e.strerror or e})") from None
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise NotAMessage(_kind(mode))
        data = bytearray()
        while len(data) <= cap and (chunk := os.read(handle, cap + 1 - len(data))):
            data += chunk
    except OSError as e:
        raise NotAMessage(f"unreadable ({e.strerror or e})") from None
    finally:
        os.close(handle)
    if len(data) > cap:
        raise NotAMessage(f"over {cap:,} bytes")
    return bytes(data)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read(state_dir: Path, message_id: str) -> Letter:
    """The message `message_id`; `NotAMessage` if its file is anything else, `FileNotFoundError`
    if it is gone."""
    data = read_in(state_dir / INBOX, f"{message_id}{SUFFIX}", MAX_FILE_BYTES)
    try:
        found = json.loads(data)
        letter = Letter(message_id, str(found["text"]), str(found["sent_at"]))
        # What `post` writes, no more: the agent is shown both, so both must be UTF-8 and
        # `sent_at` a time, not a page.
        size = len(letter.text.encode()) + len(letter.sent_at.encode())
    # UnicodeEncodeError is a ValueError; a RecursionError is JSON nested past the parser.
    except (ValueError, KeyError, TypeError, RecursionError):
        raise NotAMessage("not a message `tell` wrote") from None
    if size > MAX_MESSAGE_BYTES + SENT_AT_BYTES or len(letter.sent_at) > SENT_AT_BYTES:
        raise NotAMessage("not a message `tell` wrote")
    return letter


def set_aside(path: Path, dir_fd: int | None = None) -> Path:
    """Rename `path` (whatever it is; a link itself, not what it points to; its name in the
    open folder `dir_fd`, if given) to `<name>.rejected` next to it, or `<name>.rejected.2`,
    ... : nothing is lost."""
    for count in range(1, 1000):
        aside = path.with_name(path.name + REJECTED + (f".{count}" if count > 1 else ""))
        try:
            os.stat(aside if dir_fd is None else aside.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            with storage(aside):
                src, dst = (path, aside) if dir_fd is None else (path.name, aside.name)
                os.rename(src, dst, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return aside
    raise RunError(f"{path}: too many files rejected next to it: remove the *{REJECTED}* files")


def set_aside_in(folder: Path, name: str) -> Path | None:
    """`set_aside` of `name` in `folder`, the folder opened first through no link (None where
    it is one: nothing in it is the run's to move)."""
    with _folder(folder) as handle:
        return None if handle is None else set_aside(folder / name, dir_fd=handle)


def remove_in(folder: Path, name: str) -> None:
    """`name` removed from `folder`, the folder opened first through no link."""
    with _folder(folder) as handle, storage(folder):
        if handle is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=handle)


def reject(state_dir: Path, message_id: str) -> Path | None:
    return set_aside_in(state_dir / INBOX, f"{message_id}{SUFFIX}")


def remove(state_dir: Path, message_id: str) -> None:
    remove_in(state_dir / INBOX, f"{message_id}{SUFFIX}")
