"""The run's terminal: one line per model call (session, call, context against the soft and
hard lines, tokens, then each tool the reply called and how it ended), and the events between
calls as lines of their own, each fitted to the terminal's width. Colour on a terminal, plain
lines in a pipe; `--quiet` keeps only what needs a person (errors, warnings, the end). `tail`
shows a run's logs through the same class, so it prints the lines the run's terminal did.

A call's line waits for its tools: the events that come while they run (an output cut, a blocked
command) follow it rather than split it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from ouroboros.observe.describe import call_line, describe, line_width

QUIET_KINDS = frozenset(
    {"error", "warning", "run_end", "wind_down_missed", "context_overflow", "retry"}
)
"""What `--quiet` keeps; a wait for the server among them: a run that waits says so."""


class Terminal:
    """`tools`: each tool call also a line of its own (`tail --tools`). `fatal_said_elsewhere`:
    the run's fatal error is not printed, as the CLI says it on stderr (said once)."""

    def __init__(
        self,
        console: Console,
        quiet: bool = False,
        tools: bool = False,
        fatal_said_elsewhere: bool = False,
    ):
        self.console = console
        self.quiet = quiet
        self.tools = tools
        self.fatal_said_elsewhere = fatal_said_elsewhere
        self.call: dict[str, Any] | None = None
        self.outcomes: list[dict[str, Any]] = []
        self.calls_left = 0
        self.held: list[dict[str, Any]] = []
        self.ended = False
        """A `run_end` line was printed: the run's end is said."""

    def line(self, line: dict[str, Any]) -> None:
        """A line of either log, as it was written."""
        kind = line.get("kind")
        if kind == "error" and line.get("fatal") and self.fatal_said_elsewhere:
            return
        if self.quiet:
            if kind in QUIET_KINDS:
                self._print(line)
            return
        if kind == "token_usage":
            self.flush()
            self.call, self.outcomes = line, []
            self.calls_left = int(line.get("tool_calls") or 0)
            if not self.calls_left:
                self.flush()
        elif kind == "tool_call" and self.call is not None:
            self.outcomes.append(line)
            if self.tools:
                self.held.append(line)
            self.calls_left -= 1
            if self.calls_left <= 0:
                self.flush()
        elif self.call is not None and kind not in ("session_end", "run_end", "session_start"):
            self.held.append(line)
        else:
            self.flush()
            self._print(line)

    def flush(self) -> None:
        """The waiting call's line, then what came while its tools ran."""
        if self.call is not None:
            self.console.print(call_line(self.call, self.outcomes, line_width(self.console)))
            self.call = None
        held, self.held = self.held, []
        for line in held:
            self._print(line)

    def _print(self, line: dict[str, Any]) -> None:
        text: Text | None = describe(line, self.tools, line_width(self.console))
        if text is not None:
            self.console.print(text)
            self.ended = self.ended or line.get("kind") == "run_end"
