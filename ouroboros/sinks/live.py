"""The run's terminal: one line per model call (session, call, context against the soft and
hard lines, tokens, then each tool the reply called and how it ended), and the events between
calls as lines of their own. Colour on a terminal, plain lines in a pipe; `--quiet` keeps only
what needs a person (errors, warnings, the end).

A call's line waits for its tools: the events that come while they run (an output cut, a blocked
command) follow it rather than split it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ouroboros.observe.describe import describe
from ouroboros.printable import printable

QUIET_KINDS = frozenset(
    {"error", "warning", "run_end", "wind_down_missed", "context_overflow", "retry"}
)
"""What `--quiet` keeps; a wait for the server among them: a run that waits says so."""


def outcome(line: dict[str, Any]) -> str:
    """How one tool call ended, in a few words (the name and error printable, on one line)."""
    name = printable(str(line.get("name")))
    if line.get("error"):
        said = " ".join(printable(str(line["error"])).split())
        return f"{name} failed: {said[:117] + '…' if len(said) > 120 else said}"
    code = line.get("exit_code")
    return f"{name} exit {code}" if code is not None else f"{name} ok"


class Terminal:
    def __init__(self, console: Console, quiet: bool = False):
        self.console = console
        self.quiet = quiet
        self.call: Text | None = None
        self.calls_left = 0
        self.held: list[dict[str, Any]] = []

    def line(self, line: dict[str, Any]) -> None:
        """A line of either log, as it was written."""
        kind = line.get("kind")
        if self.quiet:
            if kind in QUIET_KINDS:
                self._print(describe(line))
            return
        if kind == "token_usage":
            self.flush()
            self.call = describe(line)
            self.calls_left = int(line.get("tool_calls") or 0)
            if not self.calls_left:
                self.flush()
        elif kind == "tool_call" and self.call is not None:
            failed = bool(line.get("error")) or line.get("exit_code") not in (0, None)
            self.call.append(f"  · {outcome(line)}", style="yellow" if failed else "dim")
            self.calls_left -= 1
            if self.calls_left <= 0:
                self.flush()
        elif self.call is not None and kind not in ("session_end", "run_end", "session_start"):
            self.held.append(line)
        else:
            self.flush()
            self._print(describe(line))

    def flush(self) -> None:
        """The waiting call's line, then what came while its tools ran."""
        if self.call is not None:
            self.console.print(self.call)
            self.call = None
        held, self.held = self.held, []
        for line in held:
            self._print(describe(line))

    def _print(self, text: Text | None) -> None:
        if text is not None:
            self.console.print(text)
