"""Runs for the kill-and-resume property test: a scripted agent in process (`FakeModel`), the
journal cut after any record as a kill -9 leaves it, and the decisions a journal holds.

The agent's n-th reply is a function of n alone, and n is counted from the journal (its model
replies so far): a run resumed after any record is asked the same as the uninterrupted run and
answers the same.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from ouroboros.context.compact import RECAP_SYSTEM
from ouroboros.ground.config_file import load_settings, to_toml
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, ToolMessage
from ouroboros.model.fake_model import FakeModel
from ouroboros.model.llm import Completion
from ouroboros.run.supervisor import RunOutcome
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run
from ouroboros.state import snapshot
from ouroboros.state.fold import replay
from ouroboros.state.records import JOURNAL_RECORD, MessageRecord, Record, SessionStart

WINDOW = 4096
"""Small: the run masks, winds down and restarts several times."""

Step = str | list[tuple[str, dict[str, str]]]
"""A reply: its text alone, or its tool calls."""


def shell(command: str) -> tuple[str, dict[str, str]]:
    return "shell_exec", {"command": command}


def read(path: str) -> tuple[str, dict[str, str]]:
    return "file_read", {"path": path}


def write(path: str, content: str) -> tuple[str, dict[str, str]]:
    # One content per path: the workspace after any record is the files written before it.
    return "file_write", {"path": path, "content": content}


NOTES, DATA = "plan: count things\n", "row\n" * 200
SCRIPT: list[Step] = [
    # Read first: a file is replaced only once read in the session (its first read fails).
    [read("notes.md"), write("notes.md", NOTES)],
    [shell("seq 1 300")],
    [read("notes.md")],
    [read("notes.md")],
    [read("notes.md")],  # the same call three times in a row: nudged
    "Thinking it over before the next command.",
    [read("data.txt"), write("data.txt", DATA)],
    [read("data.txt"), shell("seq 5 400")],
    [shell("seq 1 600")],
    [read("data.txt")],
]
FINISH_AT = 34
"""The reply that finishes the run."""
OVERFLOW_AT = 14
"""The reply whose first request the server refuses as too long (`Server`): the harness learns
the count, masks and asks again. It must be a reply whose prompt holds results a mask frees
(the mask test asserts one was made for the overflow): at 16, since the opening names no path,
the round at the soft line just before had masked them all, and the session ended instead."""
MUSING = "Reasoning about the counts so far. " * 20
"""In some of the run's first replies only: the wind-down line follows the run's reply sizes,
so a resume that forgot them would place it elsewhere."""


def reply(n: int) -> AssistantMessage:
    """The agent's n-th reply of the run (from 0), with ids of its own: a resumed run's are
    the same."""
    if n >= FINISH_AT:
        calls: list[tuple[str, dict[str, str]]] = [("finish", {"summary": "counted"})]
        return AssistantMessage(content="Done.", tool_calls=_calls(n, calls))
    step = SCRIPT[n % len(SCRIPT)]
    if isinstance(step, str):
        return AssistantMessage(content=step)
    musing = MUSING if n < len(SCRIPT) and n % 3 == 0 else ""
    return AssistantMessage(content=f"{musing}Step {n}.", tool_calls=_calls(n, step))


def _calls(n: int, calls: Sequence[tuple[str, dict[str, str]]]) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(id=f"call_{n}_{i}", name=name, arguments=json.dumps(arguments))
        for i, (name, arguments) in enumerate(calls)
    )


def recap_reply(request: str) -> AssistantMessage:
    """The recap of a compaction call, from the transcript it is asked about (a run
    resumed after the call asks it again, and gets the same): empty, a failed compaction,
    for one transcript in two."""
    if request.count("[assistant]") % 2:
        return AssistantMessage(content="")
    return AssistantMessage(content="## Overall goal\ncount; notes.md, data.txt")


class Agent:
    """The replier: what the journal at `path` says was replied so far picks the reply."""

    def __init__(self, journal: Path):
        self.journal = journal

    def __call__(self, messages: list[Message]) -> AssistantMessage:
        if messages[0].content == RECAP_SYSTEM:
            return recap_reply(messages[-1].content)
        return reply(len(replies(read_journal(self.journal))))

    def window(self, prompt: int) -> int:
        """The server's window for a request of `prompt` tokens: narrower than that for reply
        `OVERFLOW_AT`'s first request, and for any as long as the one refused since the last
        reply (asked again after a kill, it is refused again)."""
        lines = read_journal(self.journal)
        answered = replies(lines)
        if len(answered) != OVERFLOW_AT:
            return WINDOW
        since = lines[answered[-1] + 1 :]
        return min((r["prompt_tokens"] for r in since if r["kind"] == "refused"), default=prompt)


class Server(FakeModel):
    """A server whose window narrows for one reply (`Agent.window`): it refuses the prompt,
    with its count, until the harness has freed room."""

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        assert isinstance(self.replier, Agent)
        self.window = self.replier.window(self.prompt_tokens(messages, tools))
        return await super().complete(messages, tools)


def replies(lines: list[dict[str, Any]]) -> list[int]:
    """Where the model's replies are among the journal's records."""
    return [i for i, r in enumerate(lines) if r["kind"] == "message" and "usage" in r]


def read_journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def make_project(root: Path, strategy: str) -> None:
    """A fresh project folder at `root` (whatever was there is removed)."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "workspace").mkdir(parents=True)
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nCount things.\n")
    config: dict[str, dict[str, Any]] = {
        "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "fake", "max_output_tokens": 256},
        # A soft line near low water: rounds that free a share of so little room are made.
        "context": {"limit": WINDOW, "strategy": strategy, "soft_threshold": 0.5},
        "tools": {"sandbox": "off"},
    }
    (root / "config.toml").write_text(to_toml(config))


def run_project(root: Path) -> RunOutcome:
    settings = load_settings(root / "config.toml")
    log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO())))
    model = Server(Agent(settings.paths.state_dir / "journal.jsonl"), window=WINDOW)
    try:
        return anyio.run(run, settings, log, model, model.info)
    finally:
        log.close()


def journal_path(root: Path) -> Path:
    return root / ".ouroboros" / "journal.jsonl"


def killed_after(
    root: Path, strategy: str, lines: list[bytes], k: int, keep_snapshot: bool
) -> None:
    """`root` as a kill -9 right after the journal's record `k` (1-based) left it: the first k
    lines, the workspace's files written by then, and (`keep_snapshot`) the snapshot of the
    last session start among them, as the run wrote it."""
    make_project(root, strategy)
    path = journal_path(root)
    path.parent.mkdir()
    path.write_bytes(b"".join(lines[:k]))
    records: list[Record] = [JOURNAL_RECORD.validate_json(line) for line in lines[:k]]
    for record in records:
        if isinstance(record, MessageRecord) and isinstance(record.message, ToolMessage):
            result = record.message
            if result.name == "file_write" and not result.error:
                arguments = json.loads(result.arguments)
                (root / "workspace" / arguments["path"]).write_text(arguments["content"])
    starts = [i for i, record in enumerate(records) if isinstance(record, SessionStart)]
    if keep_snapshot and starts:
        last = starts[-1]
        offset = sum(len(line) for line in lines[: last + 1])
        snapshot.save(path, replay(records[: last + 1]), offset, last + 1, lines[last])


DECISION_FIELDS: dict[str, tuple[str, ...]] = {
    "session_start": ("session", "reason", "previous_turns", "carried", "messages"),
    "message": ("session", "message"),
    "tool_started": ("session", "call_id"),
    "mask": ("session", "call_ids", "reason"),
    "cut": ("session", "cuts"),
    "wind_down": ("session", "projected", "hard_line", "room", "turns_left", "message"),
    "compaction": ("session", "start", "snapshot", "forced"),
    "compaction_failed": ("session", "message"),
    "session_end": ("session", "reason", "detail", "turns"),
    "run_end": ("reason", "detail"),
}
"""What a record decides, by kind; a kind not here (run start, usage of side calls, notices,
refused prompts) decides nothing the run could do differently."""


def decisions(lines: Sequence[bytes]) -> list[dict[str, Any]]:
    kept = []
    for line in lines:
        record = json.loads(line)
        fields = DECISION_FIELDS.get(record["kind"])
        if fields is not None:
            kept.append({"kind": record["kind"]} | {f: record.get(f) for f in fields})
    return kept
