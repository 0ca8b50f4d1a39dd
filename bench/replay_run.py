"""One replay for `replay.py`: the real `python -m ouroboros run` against the trajectory as the
model, and what its journal, logs and the server's requests show."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay_model import BASH_ENV, DEFAULTS, MAX_OUTPUT, Trajectory, load_steps
from replay_tokens import ByteTokens

from ouroboros.context.tokens import Budget
from ouroboros.ground.jsonl import JsonlReader, read_objects
from ouroboros.ground.messages import (
    Message,
    ToolMessage,
)
from ouroboros.model.scripted import ScriptedServer, quick_config
from ouroboros.state.records import (
    JOURNAL_RECORD,
    JournalRecord,
    MessageRecord,
    SessionStart,
    WindDown,
)
from ouroboros.wiring import tool_output_cap


@dataclass
class Run:
    """What the journal, the logs and the server's requests show of one replay."""

    label: str
    window: int
    trajectory: Trajectory
    requests: list[dict[str, Any]]
    events: list[dict[str, Any]]
    seconds: float
    sessions: list[list[Message]] = field(default_factory=list)
    replies: list[list[int]] = field(default_factory=list)
    """Per session, the indexes of its model replies (messages with usage)."""
    results: dict[str, ToolMessage] = field(default_factory=dict)
    """Every tool result but finish's, by call id."""

    @property
    def end(self) -> str:
        return next((e["reason"] for e in reversed(self.events) if e["kind"] == "run_end"), "?")


def budget(window: int) -> Budget:
    c = DEFAULTS.context
    return Budget.for_window(
        window, c.soft_threshold, c.hard_threshold, MAX_OUTPUT, c.safety_margin
    )


def cap(window: int) -> int:
    return tool_output_cap(DEFAULTS, budget(window))


@contextmanager
def project(keep: Path | None, name: str) -> Iterator[Path]:
    """The run's project folder, at a fixed path (the system prompt names it, so its length
    counts): in `keep`, or in the temp folder and removed afterwards."""
    root = (keep or Path(tempfile.gettempdir()) / "ouroboros-replay") / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def replay(
    path: Path,
    window: int,
    tokens: ByteTokens,
    keep: Path | None,
    context: dict[str, Any] | None = None,
    cut: bool = True,
) -> Run:
    steps = load_steps(path)
    task = path.with_name(path.name.removesuffix(".jsonl") + ".task.md")
    with project(keep, f"{path.stem}-{window}") as root:
        (recorded := root / "recorded").mkdir()
        (root / "workspace").mkdir()
        (root / "SYSTEM_PROMPT.md").write_text(task.read_text() if task.exists() else "Go on.")
        (root / "bash_env.sh").write_text(BASH_ENV.format(folder=recorded))
        trajectory = Trajectory(steps, tokens, window, recorded, cut)
        server = ScriptedServer(
            trajectory, "llama", window, counter=tokens.prompt, endpoints=tokens.endpoint
        )
        config = quick_config(
            server.start(),
            llm={"max_output_tokens": MAX_OUTPUT},
            context={"limit": window, **(context or {})},
            session={"shell_timeout_s": 30},
            supervisor={"max_total_turns": 3 * len(steps) + 30},
            # Commands inherit only what tools.env lets through: the recorded outputs' script too.
            tools={"env": ["PATH", "HOME", "LANG", "LC_*", "BASH_ENV"]},
        )
        (root / "config.toml").write_text(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUROBOROS_")}
        started = time.monotonic()
        with (root / "run.log").open("w") as log:
            subprocess.run(
                [sys.executable, "-m", "ouroboros", "run"],
                cwd=root,
                env={**env, "BASH_ENV": str(root / "bash_env.sh")},
                stdout=log,
                stderr=log,
                timeout=3600,
            )
        seconds = time.monotonic() - started
        server.stop()
        if not server.chat_requests():
            raise SystemExit(f"the harness made no request:\n{(root / 'run.log').read_text()}")
        label = f"{path.stem.split('__')[-1]} {window / 1024:g}K"
        state = root / ".ouroboros"
        events, _ = read_objects(state / "events.jsonl")
        run = Run(label, window, trajectory, server.chat_requests(), events, seconds)
        read_journal(run, JsonlReader(state / "journal.jsonl").records(JOURNAL_RECORD))
        return run


def read_journal(run: Run, records: Iterable[JournalRecord]) -> None:
    for record in records:
        if isinstance(record, SessionStart):
            run.sessions.append(list(record.messages))
            run.replies.append([])
        elif isinstance(record, WindDown) and record.message is not None:
            run.sessions[-1].append(record.message)
        elif isinstance(record, MessageRecord):
            if record.usage is not None:
                run.replies[-1].append(len(run.sessions[-1]))
            message = record.message
            run.sessions[-1].append(message)
            if isinstance(message, ToolMessage) and message.name != "finish":
                run.results[message.tool_call_id] = message
