"""`demo`: a whole run in a few seconds, with no model server.

A scripted agent (`ouroboros.model.scripted`, the server the tests use) behind real loopback
HTTP with a 4096-token window reads and writes files in a small generated project; the real
supervisor runs it in this process. The agent saves its plan, the window fills, old results are
masked, the agent is told to wind down, the session restarts, twice, and the run stops at
`max_restarts`.
"""

from __future__ import annotations

import itertools
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.markup import escape

from ouroboros.ground.config import Settings
from ouroboros.ground.config_file import load_settings, to_toml
from ouroboros.model.llm import LLMClient
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.model.servers import ServerInfo, discover
from ouroboros.run.lock import fresh_state
from ouroboros.sinks.events import Terminal
from ouroboros.start import run_to_end

N_CTX = 4096
MODULES = ("parser", "lexer", "render", "cache", "config", "cli", "storage", "net")
PURPOSE = """# Purpose

Review the Python modules in `src/` one by one and keep `NOTES.md` up to date with what each
one does. (This is the ouroboros demo: the agent is scripted.)
"""


def _module(name: str) -> str:
    body = [f'"""The {name} module of the demo project."""', ""]
    for n in range(28):
        body.append(f"def {name}_step_{n}(value: int) -> int:")
        body.append(f"    return value * {n + 2} + {n}  # step {n} of the {name} pipeline")
    return "\n".join(body) + "\n"


def _config(server_url: str) -> str:
    sections: dict[str, dict[str, Any]] = {
        "llm": {"base_url": server_url, "model": "scripted-demo", "max_output_tokens": 256},
        "session": {"shell_timeout_s": 10},
        "supervisor": {"max_restarts": 2, "max_total_turns": 150},
    }
    return to_toml(sections)


def make_project(root: Path) -> None:
    """A workspace with something to read, and the agent's instructions."""
    src = root / "workspace" / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name in MODULES:
        (src / f"{name}.py").write_text(_module(name))
    (root / "SYSTEM_PROMPT.md").write_text(PURPOSE)


PLAN = [
    {"text": "Read each module in src/ and note what it does in notes/", "status": "doing"},
    {"text": "Sum the modules up in NOTES.md", "status": "todo"},
]


def _routine() -> Iterator[tuple[str, dict[str, Any]]]:
    """The agent's routine: read two modules, write a note, now and then count lines."""
    modules = itertools.cycle(MODULES)
    for round_ in itertools.count(1):
        first, second = next(modules), next(modules)
        yield tool("file_read", path=f"src/{first}.py")
        yield tool("file_read", path=f"src/{second}.py")
        yield tool(
            "file_write",
            path=f"notes/{first}-{second}.md",
            content=f"# {first} and {second}\n\nEach is a chain of 28 small steps.\n",
        )
        if round_ % 3 == 0:
            yield tool("shell_exec", command="wc -l src/*.py | tail -1")


class DemoAgent:
    """Decides from the last message only, as a model would: saves its plan first, its notes
    when told to wind down, re-reads them after a restart, otherwise follows its routine."""

    def __init__(self) -> None:
        self.routine = _routine()
        self.reviewed = 0
        self.session = ""
        self.pending: tuple[str, dict[str, Any]] | None = None
        self.written: set[str] = set()
        self.read: set[str] = set()
        """Files read or written this session: a note written before is read again first, as
        `file_write` asks of a file the session has not seen."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        text = str(last.get("content") or "") if last.get("role") == "user" else ""
        if "Save what matters" in text:
            notes = f"# Progress\n\n{self.reviewed} module reads so far; go on with the next.\n"
            return Reply(
                text="Saving my progress before the restart.",
                tool_calls=[tool("file_write", path="NOTES.md", content=notes)],
            )
        session = next(
            (str(m["content"]).split(".")[0] for m in messages if m.get("role") == "user"), ""
        )
        if session != self.session:  # "Session 2": a restart (or the first session)
            first, self.session = not self.session, session
            self.read = set()
            if first:
                return Reply(text="My plan first.", tool_calls=[tool("plan", items=PLAN)])
            return Reply(
                text="A fresh session: my notes first.",
                tool_calls=[tool("file_read", path="NOTES.md")],
            )
        name, arguments = self.pending or next(self.routine)
        self.pending = None
        path = str(arguments.get("path", ""))
        if name == "file_write" and path in self.written and path not in self.read:
            self.pending = (name, arguments)
            name, arguments = tool("file_read", path=path)
        elif name == "file_read":
            self.reviewed += 1
        self.read.add(path)
        if name == "file_write":
            self.written.add(path)
        return Reply(text=f"Next: {name}.", tool_calls=[(name, arguments)])


def scripted_server(settings: Settings) -> ServerInfo:
    """The scripted server as the run is told of it: discovered as any server is (it answers as
    llama-server does, and the run treats it so), and named for what it is."""

    async def discovered() -> ServerInfo:
        client = LLMClient(settings.llm)
        try:
            return await discover(client, settings.llm.base_url, settings.llm.model)
        finally:
            await client.aclose()

    found = anyio.run(discovered)
    return replace(found, detail=f"scripted server, as {found.detail}")


def run_demo(root: Path, console: Console) -> int:
    """Build the project in `root`, run it to its end, and say what to look at: its lines fit
    an 80-column terminal (a path as long as a temporary folder's)."""
    make_project(root)
    state = root / ".ouroboros"
    aside = fresh_state(state)
    if aside:
        console.print(f"an earlier demo run was moved aside, to {aside.name}")
    with ScriptedServer(DemoAgent(), dialect="llama", n_ctx=N_CTX, model="scripted-demo") as srv:
        config = root / "config.toml"
        config.write_text(_config(srv.url))
        settings = load_settings(config)
        console.print(
            f"[bold]ouroboros demo[/]: a scripted agent with a {N_CTX:,}-token window,\n"
            f"working in {escape(str(root))}"
        )
        terminal = Terminal(console, fatal_said_elsewhere=True)
        outcome = run_to_end(settings, terminal, scripted_server(settings))
    if not terminal.ended:
        console.print(f"run stopped: {outcome.reason}")
    # The interpreter that ran the demo: a bare `python` outside the venv lacks the package.
    # From the project's folder, the commands find its config.toml, and it its state folder.
    command = f"{shlex.quote(sys.executable)} -m ouroboros"
    console.print(
        "\nLook at the run with:\n"
        f"  cd {escape(shlex.quote(str(root)))}\n"
        f"  {escape(command)} tail\n"
        f"  {escape(command)} status\n"
        f"  {escape(command)} report"
    )
    return outcome.exit_code


def demo_dir(requested: Path | None) -> Path:
    if requested is not None:
        requested.mkdir(parents=True, exist_ok=True)
        return requested.resolve()
    return Path(tempfile.mkdtemp(prefix="ouroboros-demo-"))
