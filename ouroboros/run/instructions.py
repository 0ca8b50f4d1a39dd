"""The agent's instructions (`SYSTEM_PROMPT.md`), read for each session's system message.

The agent may edit the file, so the harness treats it as the agent's: it is opened without
following a link planted at its name (`safefs`), must be a regular file, and is read up to a
share of the prompt budget. An agent that appends to its instructions for days would otherwise
make every fresh session too big to start; instead it is shown the start, and told to shorten
the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ouroboros.context.tokens import Budget
from ouroboros.ground import prompts
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError, SetupError
from ouroboros.ground.messages import SystemMessage
from ouroboros.state.journal import Journal
from ouroboros.tools import safefs
from ouroboros.tools.workspace import Location, PathRefused

BYTES_PER_BUDGET_TOKEN = 2
"""Bytes of instructions read per token of the prompt budget: about half the budget."""
MAX_INSTRUCTIONS_BYTES = 4 << 20
"""Whatever the window: a read of the budget's share of an unbounded window cannot be made."""


def read_instructions(path: Path, prompt_budget: int) -> tuple[str, int | None]:
    """The instructions as shown, and the file's size in bytes where only its start is."""
    limit = min(max(4096, prompt_budget * BYTES_PER_BUDGET_TOKEN), MAX_INSTRUCTIONS_BYTES)
    try:
        fd = safefs.open_regular(Location(path.parent, (path.name,), str(path)))
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise SetupError(
            f"{path}: the agent's instructions are missing: write them there, "
            "or set paths.system_prompt"
        ) from None
    except (OSError, PathRefused) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if path.is_dir():
            why = "it is a folder, not a file"
        raise SetupError(f"cannot read paths.system_prompt {path}: {why}") from None
    _refuse_unusable(path, data[:limit])
    if len(data) <= limit:
        return data.decode(errors="replace"), None
    shown = data[:limit]
    shown = shown[: shown.rfind(b"\n") + 1] or shown  # at a line's end where there is one
    return (
        shown.decode(errors="ignore")
        + f"\n[{path.name} is {size:,} bytes; only its first {len(shown):,} are shown, as much "
        "as a session can hold: shorten it]\n",
        size,
    )


def _refuse_unusable(path: Path, data: bytes) -> None:
    """Empty or binary instructions would start an agent with no rules at all."""
    if not data.strip():
        raise SetupError(
            f"paths.system_prompt {path} is empty: write in it what the agent is for "
            "(the project's SYSTEM_PROMPT.md is a template)"
        )
    try:
        data.decode()
    except UnicodeDecodeError as e:
        if e.start < len(data) - 3:  # not a character cut at the read's end
            raise SetupError(
                f"paths.system_prompt {path} is not UTF-8 text (byte {e.start:,}): save it as UTF-8"
            ) from None
    if b"\0" in data:
        raise SetupError(f"paths.system_prompt {path} is binary (a NUL byte): give it text")


def placeholder_purpose(text: str) -> bool:
    """Whether the `# Purpose` section says no more than the template's (its comment, and the
    line that sends the agent exploring): the agent would start with no task of its own."""
    found = PURPOSE.search(text)
    if found is None:
        return False
    said = " ".join(COMMENT.sub("", found.group(1)).split())
    return said in ("", TEMPLATE_PURPOSE)


def task_of(instructions: str) -> str | None:
    """The task a session's opening starts from: the `# Purpose` section as the person wrote it
    (their notes to themselves, HTML comments, left out); None where there is no such section."""
    found = PURPOSE.search(instructions)
    if found is None:
        return None
    said = COMMENT.sub("", found.group(1)).strip()
    return said or None


PURPOSE = re.compile(r"^# Purpose[ \t]*\n(.*?)(?=^# |\Z)", re.DOTALL | re.MULTILINE)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
TEMPLATE_PURPOSE = (
    "Explore the workspace, decide what is most worth doing towards the purpose above, and do it."
)
"""The project's SYSTEM_PROMPT.md says this under its purpose's comment (a test keeps them one)."""
PLACEHOLDER_WARNING = (
    "{path} still has the template's empty # Purpose: the agent has no task but to "
    "explore; say there what it is for"
)


def system_message(
    settings: Settings, budget: Budget, journal: Journal, last: SystemMessage | None
) -> SystemMessage:
    """A session's system message from the instructions as they are now; `last`, the one the
    previous session had, where they cannot be read (the agent may have broken its own file:
    a link, a folder) rather than the run stopping."""
    s = settings
    try:
        instructions, cut_from = read_instructions(s.paths.system_prompt, budget.prompt_budget)
    except RunError as e:
        if last is None:
            raise
        journal.notify("warning", f"{e}; the last instructions are used again")
        return last
    if cut_from is not None:
        journal.notify(
            "warning",
            f"{s.paths.system_prompt} is {cut_from:,} bytes, more than a session can "
            "hold: the agent is shown its start and told to shorten it",
        )
    # What a person wrote for themselves in comments is no instruction, and would be paid for
    # in every request.
    shown = COMMENT.sub("", instructions)
    text = prompts.system_prompt(shown, budget.limit, s.llm.files_protocol)
    return SystemMessage(content=text)
