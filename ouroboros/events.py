"""What people watch: `events.jsonl`, `token_usage.jsonl`, and the same news on the terminal.

Record types and their fields are documented in docs/logs.md; fields are only ever added.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape

from ouroboros.journal import JsonlWriter

EventKind = Literal[
    "run_start",
    "run_end",
    "session_start",
    "session_end",
    "session_restart",
    "context_window",
    "tools",
    "tool_call",
    "truncation",
    "context_mask",
    "compaction",
    "compaction_failed",
    "wind_down",
    "wind_down_missed",
    "silent_truncation",
    "context_overflow",
    "retry",
    "blocked_command",
    "warning",
    "error",
    "waiting",
]

ZONE_STYLE = {"normal": "green", "soft": "yellow", "hard": "red", "over": "bold red"}
_QUIET = {"tool_call", "context_window", "tools"}


def bar(fraction: float, width: int = 24) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "█" * filled + "░" * (width - filled)


class EventLog:
    """Writes both JSONL files and echoes a readable line for each record to stderr."""

    def __init__(self, state_dir: Path, console: Console | None = None):
        self.events = JsonlWriter(state_dir / "events.jsonl")
        self.usage = JsonlWriter(state_dir / "token_usage.jsonl")
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)

    def emit(self, kind: EventKind, **fields: Any) -> None:
        record = self.events.append(kind, **fields)
        self._show(record)

    def retry(self, attempt: int, wait_s: float, error: BaseException) -> None:
        """Tenacity's report before it sleeps: the terminal shows that the run waits, and why."""
        self.emit("retry", message=str(error)[:300], attempt=attempt, wait_s=round(wait_s, 2))

    def token_usage(self, **fields: Any) -> None:
        record = self.usage.append("token_usage", **fields)
        zone = str(record.get("zone", "normal"))
        fraction = float(record.get("fraction", 0.0))
        self.console.print(
            f"[dim]{record['ts'][11:19]}[/] s{record['session']} t{record['turn']:<4} "
            f"[{ZONE_STYLE.get(zone, 'white')}]{bar(fraction)} {fraction:4.0%}[/] "
            f"prompt {record['prompt_tokens']:,} + out {record['completion_tokens']:,} "
            f"/ {record['context_limit']:,} [dim]({record['source']})[/]"
        )

    def _show(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        if kind in _QUIET and not record.get("error"):
            return
        # Logged text comes from the agent and the server: never read it as markup.
        details = escape(
            ", ".join(
                f"{k}={v}" for k, v in record.items() if k not in ("v", "ts", "kind", "message")
            )
        )
        style = "red" if kind in ("error", "context_overflow", "silent_truncation") else "cyan"
        message = f" {escape(str(record['message']))}" if "message" in record else ""
        self.console.print(
            f"[dim]{record['ts'][11:19]}[/] [{style}]{kind}[/]{message} [dim]{details}[/]"
        )

    def close(self) -> None:
        self.events.close()
        self.usage.close()
