"""Which of the package's modules one model call passes through, measured.

A short run against the loopback `ScriptedServer` (streaming as llama-server does) with the real
client, under a profiler hook: every module of the package that runs code between the start of
`Session.call_model` and its return (the request built from the view, the stream read, the reply
checked and recorded, the record folded and turned into lines by the sinks) is listed, with the
median over the run's calls. The issue's target is at most 15.

Run: .venv/bin/python bench/call_path.py
"""

from __future__ import annotations

import io
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
from rich.console import Console

from ouroboros.ground.config_file import load_settings
from ouroboros.model.scripted import Reply, ScriptedServer, quick_config, tool
from ouroboros.run.session import Session
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run

TARGET = 15
calls: list[set[str]] = []
current: set[str] | None = None


def within_the_call(frame: FrameType | None) -> bool:
    """Code the call runs (other tasks of the run resume in between: not counted)."""
    while frame is not None:
        if frame.f_code is traced.__code__:
            return True
        frame = frame.f_back
    return False


def profile(frame: FrameType, event: str, arg: Any) -> None:
    name = frame.f_globals.get("__name__", "")
    if event == "call" and current is not None and name.startswith("ouroboros"):
        if name not in current and within_the_call(frame):
            current.add(name)


original = Session.call_model


async def traced(self: Session) -> Any:
    global current
    current = set()
    sys.setprofile(profile)
    try:
        return await original(self)
    finally:
        sys.setprofile(None)
        calls.append(current)
        current = None


def measure() -> list[set[str]]:
    """The package's modules each model call of a four-call run passes through (the test of
    docs/architecture.md's figure calls this in its own process, so `Session` is put back)."""
    calls.clear()
    Session.call_model = traced  # type: ignore[method-assign]
    try:
        replies = [
            Reply(tool_calls=[tool("shell_exec", command=f"seq 1 {n}")]) for n in (5, 50, 500)
        ]
        script = iter([*replies, Reply(tool_calls=[tool("finish", summary="done")])])
        with (
            tempfile.TemporaryDirectory() as root,
            ScriptedServer(lambda body: next(script)) as server,
        ):
            (Path(root) / "config.toml").write_text(quick_config(server.url))
            (Path(root) / "SYSTEM_PROMPT.md").write_text("Work.\n")
            settings = load_settings(Path(root) / "config.toml")
            log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO())))
            anyio.run(run, settings, log)
            log.close()
    finally:
        Session.call_model = original  # type: ignore[method-assign]
    return list(calls)


def median_modules(measured: list[set[str]]) -> int:
    """The figure docs/architecture.md gives: modules per model call, the median."""
    return round(statistics.median(len(call) for call in measured))


def main() -> int:
    measured = measure()
    seen = Counter(module for call in measured for module in call)
    for module, count in sorted(seen.items()):
        print(f"{count}/{len(measured)}  {module}")
    median = median_modules(measured)
    print(
        f"modules per model call: median {median}, max {max(map(len, measured))} "
        f"(target ≤ {TARGET})"
    )
    return 0 if median <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
