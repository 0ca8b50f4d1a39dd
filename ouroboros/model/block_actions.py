"""Actions written as fenced blocks rather than calls: a ```bash block is a shell command, a
block a path names is that file's whole new text (a file block), and in the files protocol a
block is judged against the files the session showed (whether it is one's whole new text, or a
snippet that would lose it). Pure: `reply_reader.read_reply` reads them where a reply writes no
call. Every regex is possessive, every look bounded: a reply of megabytes reads in linear time."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ouroboros.model.text_calls import (
    SHELL_LANGUAGES,
    SHELL_TOOL,
    WRITE_TOOL,
    Fence,
    TextCall,
    fences_from,
)

MAX_CANDIDATES = 64
"""Places a JSON object may start that are tried (`reply_reader`), and heredocs looked past: each
try may read to the end of the reply, so a reply of megabytes is read in time its length
bounds."""


@dataclass(frozen=True)
class Span:
    """Where a call is written in the reply as read (`reply_text`), its tags included, and its
    fenced block where the block holds the call alone."""

    start: int
    end: int
    call: TextCall


_PATH = r"[\w./~-][\w./\\:~-]{0,250}\.[A-Za-z][A-Za-z0-9]{0,7}"
_NAMED_BEFORE = re.compile(rf"[ \t>#*`]*+({_PATH})[`*:]*+")
"""A line that is a file's path alone, as a small model marks one (`calc.py`, **calc.py**,
`calc.py`:, ### calc.py), the last line before a fenced block."""
_NAMED_IN_FENCE = re.compile(rf"[ \t]*+`{{3,}}+[ \t]*+(?:[\w+-]++[ \t]++)?({_PATH})[ \t]*+")
"""A fence whose info string is the path (```calc.py, ```python calc.py)."""


def _block_path(text: str, block: Fence, after: int) -> str | None:
    """The file a fenced block is the whole new text of, where its fence or the last line
    before it (after the reply's block before, which ends at `after`) names one."""
    named = _NAMED_IN_FENCE.fullmatch(text, block.start, text.index("\n", block.start))
    if named is None:
        before = text[after : block.start].rstrip()
        named = _NAMED_BEFORE.fullmatch(before, before.rfind("\n") + 1)
    path = named.group(1) if named else None
    if path is None or "://" in path:
        return None
    return path.replace("\\", "/").removeprefix("./")  # a Windows path names the same file


_HEREDOC = re.compile(r"<<(-?)[ \t]*+(['\"]?+)([A-Za-z_]\w{0,63}+)\2")
_CLOSING_LINE = re.compile(r"^[ \t]*+`{3,}+[ \t]*+$", re.MULTILINE)


def _open_heredoc(command: str) -> re.Pattern[str] | None:
    """The end line a heredoc of `command` waits for and never meets: a ``` line in a heredoc
    (Markdown written to a file) closes a block of three backticks early, and the command cut
    there would write the file cut."""
    position = 0
    while (heredoc := _HEREDOC.search(command, position)) is not None:
        tabs = "\t*+" if heredoc[1] else ""
        end = re.compile(rf"^{tabs}{re.escape(heredoc[3])}$", re.MULTILINE)
        body_start = command.find("\n", heredoc.end())
        met = end.search(command, body_start) if body_start >= 0 else None
        if met is None:
            return end
        position = met.end()
    return None


def _shell_block(text: str, block: Fence, look: bool) -> tuple[int, str]:
    """Where a ```bash block really ends, and its command: past the ``` lines of a heredoc it
    holds, to the fence after the heredoc's end line, where there is one (else as fenced).
    `look`: False once MAX_CANDIDATES blocks were looked past (each look may read to the end)."""
    end = _open_heredoc(block.body) if look else None
    met = end.search(text, block.end) if end is not None else None
    close = _CLOSING_LINE.search(text, met.end()) if met is not None else None
    if close is None:
        return block.end, block.body
    return close.end(), text[text.index("\n", block.start) + 1 : close.start()].rstrip("\n")


KEPT_SHARE = 0.5
"""Of a file's lines (blank ones aside), what a block must keep to be taken for its whole new
text: less is a snippet (a new function alone), which written whole would lose the rest of the
file."""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _kept(body: str, text: str) -> float | None:
    """The share of `text`'s lines (blank ones aside) `body` keeps; None for a file of none."""
    kept, own = set(_lines(body)), _lines(text)
    return sum(line in kept for line in own) / len(own) if own else None


def _whole(body: str, text: str) -> bool:
    """`body` reads as `text`'s whole new text: it keeps more than `KEPT_SHARE` of its lines,
    or that share and its first line, where it starts (a whole file begins where it began: of
    a file of two lines, `add` fixed keeps `def add(a, b):`, and `square` written for `double`,
    both returning x * 2, keeps only the return)."""
    share = _kept(body, text)
    if share is None:
        return False
    return share > KEPT_SHARE or (share == KEPT_SHARE and _lines(body)[:1] == _lines(text)[:1])


def _kept_file(body: str, files: Mapping[str, str]) -> str | None:
    """The one file shown a block no path names is the whole new text of (`_whole`), the one it
    keeps most of: the real small model, shown a file and asked for a change, wrote the changed
    file whole in a bare block a third of the time it wrote it at all."""
    shares = sorted(
        (share, path)
        for path, text in files.items()
        if _whole(body, text) and (share := _kept(body, text)) is not None
    )
    if not shares:
        return None
    if len(shares) > 1 and shares[-2][0] == shares[-1][0]:
        return None  # which file it is would be a guess
    return shares[-1][1]


def _loses(body: str, path: str, files: Mapping[str, str]) -> bool:
    """A block under the path of a file shown of two lines or more is not its whole new text
    (`_whole`): a snippet (the real model wrote `square` alone under `mathlib.py`, and the file
    lost `double`), so it is not written."""
    text = files.get(path)
    return text is not None and len(_lines(text)) >= 2 and not _whole(body, text)


_UNFENCED = re.compile(
    r"\n++(?![ \t]*+`{3})((?:(?![ \t]*+`{3})[^\n]*+\n)*?[^\n]*+)\n([ \t]*+`{3,}+[ \t]*+)(?:\n|$)"
)
"""After a block that is a path alone, the file's text with no fence of its own, ended by a
fence line that opens no block: the real small model wrote its change so (```README.md```, the
text, ```). A fence line that opens a block ends prose before it, not a file."""


def _unfenced(text: str, after: int) -> re.Match[str] | None:
    found = _UNFENCED.match(text, after)
    if found is None:
        return None
    opened = next(fences_from(text, found.start(2)), None)
    return None if opened is not None and opened.start == found.start(2) else found


def blocks(text: str, files: Mapping[str, str]) -> list[Span]:
    """The actions written as blocks: a ```bash block is a command, a block its path names
    (before it, in its fence, or alone in a block right before it) is that file's whole new
    text: the form a small coding model writes a change in when it writes no call (as aider's
    whole-file edits ask); so is a block no path names that keeps most of one of `files` (the
    files the session showed, as they are now)."""
    found: list[Span] = []
    after, named_alone = 0, None
    blocks, looks = fences_from(text), 0
    while (block := next(blocks, None)) is not None:
        end, named = block.end, None
        if block.language in SHELL_LANGUAGES:
            end, command = _shell_block(text, block, looks < MAX_CANDIDATES)
            looks += 1
            if command.strip():
                call = TextCall(SHELL_TOOL, json.dumps({"command": command}))
                found.append(Span(block.start, end, call))
            if end != block.end:  # the fences after a heredoc read whole, read again from there
                blocks = fences_from(text, end)
        elif (alone := _NAMED_BEFORE.fullmatch(block.body.strip())) is not None:
            named = alone.group(1)
            unfenced = _unfenced(text, block.end)
            path = named.replace("\\", "/").removeprefix("./")
            if unfenced is not None and _loses(unfenced[1], path, files):
                unfenced = None
            if unfenced is not None:  # the text follows its path's block, closed by a fence
                content = json.dumps({"path": path, "content": f"{unfenced[1]}\n"})
                found.append(Span(block.start, unfenced.end(), TextCall(WRITE_TOOL, content)))
                end, named = unfenced.end(), None
                blocks = fences_from(text, end)
        else:
            path = _block_path(text, block, after)
            if path is None and not text[after : block.start].strip():
                path = named_alone
            body = block.body
            if path is None and files:
                path = _kept_file(body, files)
                label, _, rest = body.partition("\n")
                if path is not None and label.strip().strip("`") == path and rest:
                    body = rest  # its path as its first line labels the file, as a model does
            if path is not None and not _loses(body, path, files):
                content = f"{body}\n" if body else ""
                call = TextCall(WRITE_TOOL, json.dumps({"path": path, "content": content}))
                found.append(Span(block.start, block.end, call))
        after, named_alone = end, named
    return found
