"""A reply's text as the model meant it, and its fenced blocks: pure, no I/O.

A server may leave a stop token in the text (a base model behind a ChatML fallback writes
`<|im_end|>` and goes on with a made-up next turn): the reply ends there, and is journalled so
(`reply_text`). Calls are read only from what the model finished saying (`finished_part`). Every
regex here is possessive: a reply of megabytes is read in time linear in its length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

END_TOKENS = re.compile(r"<\|im_end\|>|</s>|<end_of_turn>|<\|eot_id\|>|<\|end\|>")
"""Stop tokens a server leaves in the text when the template's stop is another: the reply ends
at the first outside a fenced block (inside one, `</s>` is HTML a command writes)."""
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
OPEN = re.compile(r"^[ \t]*+(`{3,}+)[ \t]*+([\w+-]*+)[^\n`]*+$", re.MULTILINE)
FENCE_LINE = re.compile(r"^[ \t]*+```", re.MULTILINE)


@dataclass(frozen=True)
class Fence:
    language: str
    body: str
    start: int
    end: int


@lru_cache(maxsize=64)
def _closing(ticks: int) -> re.Pattern[str]:
    """The line that closes a block opened with `ticks` backticks; a stop token may end it
    (```<|im_end|>): the block ends before it."""
    return re.compile(rf"^[ \t]*+`{{{ticks},}}+[ \t]*+(?=$|{END_TOKENS.pattern})", re.MULTILINE)


def fences(text: str) -> list[Fence]:
    """The closed fenced blocks of `text`, in order; a block left open (a reply cut off) is none."""
    found: list[Fence] = []
    position = 0
    while (opening := OPEN.search(text, position)) is not None:
        close = _closing(len(opening[1])).search(text, opening.end())
        if close is None:
            break
        body = text[opening.end() + 1 : close.start()].rstrip("\n")
        found.append(Fence(opening[2].lower(), body, opening.start(), close.end()))
        position = close.end()
    return found


def reply_text(content: str) -> str:
    """The reply as the model meant it, as it is journalled: lines end in `\\n`, and it ends at
    its first stop token outside a fenced block (what follows it the model did not mean to say)."""
    text = content.replace("\r\n", "\n")
    closed = iter(fences(text))
    fence = next(closed, None)
    for stop in END_TOKENS.finditer(text):
        while fence is not None and fence.end <= stop.start():
            fence = next(closed, None)
        if fence is None or stop.start() < fence.start:
            return text[: stop.start()]
    return text


def _open_fence(text: str) -> bool:
    found = fences(text)
    return OPEN.search(text, found[-1].end if found else 0) is not None


def finished_part(text: str, cut_off: bool) -> str | None:
    """The part of a reply its calls are read from: none of reasoning left open (a call there is
    only weighed), nothing of a reply cut off in an open block or reasoning (`cut_off`: what it was
    about to write is unknown)."""
    think = text.rfind(THINK_OPEN)
    if think > text.rfind(THINK_CLOSE):
        return None if cut_off else text[:think]
    return None if cut_off and _open_fence(text) else text
