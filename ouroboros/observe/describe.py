"""One readable line per logged record: the run's terminal and `tail` show the same."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ouroboros.mcp.records import offered_text
from ouroboros.observe.checkpoint_view import DESCRIBED as CHECKPOINTS
from ouroboros.observe.plan_view import change_text
from ouroboros.printable import printable

ZONE_STYLE = {"normal": "green", "soft": "yellow", "hard": "red", "over": "bold red"}
SHOWN_CHARS = 1000
"""The longest a text of a record is shown: a `finish` summary the agent wrote may be 300 KB
(`tail --json` shows it whole)."""


def bar(fraction: float, width: int = 24, lines: tuple[float, ...] = ()) -> str:
    """The fill, with the soft and hard lines (fractions of the same budget) marked where the
    fill has not reached them."""
    filled = max(0, min(width, round(fraction * width)))
    cells = ["█"] * filled + ["░"] * (width - filled)
    for line in lines:
        at = min(width - 1, max(0, round(line * width) - 1))
        if at >= filled:
            cells[at] = "┊"
    return "".join(cells)


def figure(value: Any) -> str:
    """A count with thousands separators; anything else as it is."""
    return f"{value:,}" if isinstance(value, int) else str(value)


def line_marks(usage: dict[str, Any]) -> tuple[float, ...]:
    """The soft line and the hard line in force for a call, as fractions of its prompt budget
    (a usage line keeps both)."""
    budget = usage.get("prompt_budget") or 0
    marks = (usage.get(k) for k in ("soft_line", "hard_line"))
    return tuple(mark / budget for mark in marks if budget and mark is not None)


def usage_text(r: dict[str, Any]) -> Text:
    zone = str(r.get("zone", "normal"))
    fraction = float(r.get("fraction", 0.0))
    text = Text(f"s{r.get('session')} t{r.get('turn', '?'):<4} ")
    if r.get("purpose"):  # a call outside the conversation (a compaction's recap): no turn
        text.append(f"[{r['purpose']}] ", style="cyan")
    filled = bar(fraction, lines=line_marks(r))
    text.append(f"{filled} {fraction:4.0%} {zone:<6}", style=ZONE_STYLE.get(zone, "white"))
    text.append(
        f" prompt {figure(r.get('prompt_tokens'))} + out {figure(r.get('completion_tokens'))} "
        f"of {figure(r.get('prompt_budget', r.get('context_limit')))}"
    )
    text.append(f" ({r.get('source')})", style="dim")
    if (cache := cache_text(r)) is not None:
        text.append(f" {cache}", style="dim")
    return text


def cache_text(r: dict[str, Any]) -> str | None:
    """What the server's prompt cache did for a call: the share of the prompt it held, and the
    tokens processed (in how long), where the server said."""
    cached, processed = r.get("cached_tokens"), r.get("processed_tokens")
    if cached is None or processed is None:
        return None
    share = cached / (cached + processed) if cached + processed else 0.0
    ms = r.get("prefill_ms")
    timed = f" in {ms / 1000:.1f} s" if ms is not None else ""
    return f"cache {share:.0%}, processed {figure(processed)}{timed}"


Describe = Callable[[dict[str, Any]], str]

_DESCRIBE: dict[str, tuple[str, Describe]] = {
    "run_start": (
        "bold",
        lambda r: f"run {'resumed' if r.get('resumed') else 'started'}: model {r.get('model')}",
    ),
    "run_end": ("bold", lambda r: f"run ended: {r.get('reason')} {r.get('detail', '')}"),
    "context_window": (
        "dim",
        lambda r: (
            f"window {figure(r.get('context_limit'))} tokens ({r.get('server')}: {r.get('detail')})"
        ),
    ),
    "session_start": ("bold", lambda r: f"session {r.get('session')} starts ({r.get('reason')})"),
    "session_end": (
        "bold",
        lambda r: (
            f"session {r.get('session')} ends after {r.get('turns')} turns: "
            f"{r.get('reason')} ({r.get('detail') or 'no detail'})"
        ),
    ),
    "session_restart": (
        "bold magenta",
        lambda r: (
            f"restart {r.get('restarts')}: session {r.get('session')} after "
            f"{r.get('previous_turns')} turns ({r.get('reason')}), "
            f"{r.get('carried_messages')} messages carried over"
        ),
    ),
    "context_mask": (
        "magenta",
        lambda r: (
            f"masked {r.get('masked')} old result(s) ({r.get('total_masked')} in all, "
            f"{r.get('reason')}): next prompt ~{figure(r.get('projected_before'))} -> "
            f"~{figure(r.get('projected_after'))} tokens"
        ),
    ),
    "context_cut": (
        "magenta",
        lambda r: (
            f"cut {r.get('results')} result(s) the model has not seen to "
            f"{figure(r.get('shown_bytes'))} bytes after the server refused the prompt"
        ),
    ),
    "compaction": (
        "magenta",
        lambda r: (
            f"compacted {r.get('messages_replaced')} old messages into a recap"
            f"{' (requested)' if r.get('forced') else ''}: next prompt "
            f"~{figure(r.get('projected_before'))} -> ~{figure(r.get('projected_after'))} tokens"
        ),
    ),
    "compaction_failed": ("yellow", lambda r: f"compaction skipped: {r.get('message')}"),
    "truncation": (
        "yellow",
        lambda r: (
            f"{r.get('name')} output cut from {figure(r.get('original_bytes'))} to "
            f"{figure(r.get('kept_bytes'))} bytes"
        ),
    ),
    "wind_down": (
        "bold yellow",
        lambda r: (
            f"wind-down: next prompt ~{figure(r.get('projected'))} tokens, "
            f"~{figure(r.get('room'))} left in the budget "
            f"(hard line {figure(r.get('hard_line'))}); "
            f"{r.get('turns_left')} replies left"
        ),
    ),
    "wind_down_missed": (
        "bold red",
        lambda r: (
            f"no wind-down: one step took the next prompt to ~{figure(r.get('projected'))} tokens, "
            f"past the hard line {figure(r.get('hard_line'))} and the prompt budget "
            f"{figure(r.get('prompt_budget'))}"
        ),
    ),
    "loop": ("bold red", lambda r: f"loop {loop_text(r)}"),
    "silent_truncation": (
        "bold red",
        lambda r: (
            f"silent truncation: the server counted {figure(r.get('reported_prompt_tokens'))} "
            f"prompt tokens, ~{figure(r.get('estimated_prompt_tokens'))} were sent"
        ),
    ),
    "context_overflow": (
        "bold red",
        lambda r: (
            f"context overflow: {figure(r.get('n_prompt_tokens'))} tokens > window "
            f"{figure(r.get('n_ctx'))} (attempt {r.get('attempt')})"
        ),
    ),
    "retry": ("yellow", lambda r: retry_text(r)),
    "blocked_command": (
        "red",
        lambda r: f"blocked ({r.get('rule')}): {r.get('arguments')}",
    ),
    "warning": ("yellow", lambda r: f"warning: {r.get('message')}"),
    "waiting": ("yellow", lambda r: f"waiting: {r.get('message')}"),
    "told": ("bold cyan", lambda r: f"told (sent {str(r.get('sent_at'))[11:19]}): {r.get('text')}"),
    "paused": ("bold yellow", lambda r: f"paused by {r.get('by')}: {r.get('message')}"),
    "resumed": ("bold", lambda r: f"resumed by {r.get('by')}"),
    "plan": ("cyan", change_text),
    **CHECKPOINTS,
    "mcp_offered": ("dim", lambda r: f"mcp: {offered_text(r)}"),
    "mcp_fault": (
        "yellow",
        lambda r: (
            f"mcp server {r.get('server')} ({r.get('tool')}): {r.get('fault')}; "
            f"may start again {r.get('starts_left')} more time(s) this session"
        ),
    ),
    "error": ("bold red", lambda r: f"error: {r.get('message')}"),
    "tool_call": (
        "dim",
        lambda r: (
            f"  {r.get('name')} {figure(r.get('output_bytes'))} bytes in {r.get('duration_s')} s"
            + (f" exit {r['exit_code']}" if r.get("exit_code") is not None else "")
            + (f" error: {r['error']}" if r.get("error") else "")
        ),
    ),
}


WAITING_CHARS = 120 - len("00:00:00 ")
"""A wait's lines fit 120 columns with their time: the cause is cut to what is left."""
NOT_RUNNING = "not running? Ollama: `ollama serve`"


def retry_text(r: dict[str, Any]) -> str:
    """The wait for the server: what it waits for, until when, and how to stop it, with why;
    later, how long it has waited (a line of a log older than these fields: as it was)."""
    server, attempt = r.get("server"), r.get("attempt")
    if server is None:
        return f"retry {attempt} in {r.get('wait_s')} s: {r.get('message')}"
    limit = float(r.get("retry_for_s") or 0)
    if attempt != 1:
        waited = f"{int(r.get('waited_s') or 0) // 60} min"
        ends = f" (gives up at {limit / 60:g} min)" if limit else ""
        return f"still waiting for {server}, try {attempt}, {waited}{ends}"
    horizon = f"for {limit / 60:g} min" if limit >= 60 else f"for {limit:g} s"
    head = f"waiting for {server} ("
    tail = f"): trying {horizon if limit else 'for ever'}, Ctrl-C stops"
    cause = NOT_RUNNING if r.get("unreachable") else " ".join(str(r.get("message")).split())
    room = max(10, WAITING_CHARS - len(head) - len(tail))
    return head + (cause if len(cause) <= room else cause[: room - 1] + "…") + tail


LOOP_ACTIONS = {1: "nudge", 2: "restart", 3: "stuck"}
"""What each level of a loop (`LoopDetected`) does."""


def loop_text(r: dict[str, Any]) -> str:
    """A loop's kind, what was done and what repeated."""
    action = LOOP_ACTIONS.get(r.get("level", 0), r.get("level"))
    return f"{r.get('loop')} -> {action}: " + "; ".join(str(e) for e in r.get("evidence") or [])


def _generic(r: dict[str, Any]) -> str:
    """A kind this version does not know yet: show its fields as they are."""
    fields = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("v", "seq", "ts", "kind"))
    return f"{r.get('kind')} {fields}"


def shown(text: str) -> str:
    """A text of a record as a line shows it: printable, and cut at `SHOWN_CHARS` with a mark."""
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters: tail --json)"
    return printable(text)


def describe(record: dict[str, Any], tools: bool = False) -> Text | None:
    """The readable line of one record (its texts made printable, on one line, and cut at
    `SHOWN_CHARS`); None for a record not worth a line. `tools`: also a line for each tool
    call, and for each try of a wait for the server."""
    record = {k: shown(v) if isinstance(v, str) else v for k, v in record.items()}
    kind = str(record.get("kind"))
    stamp = Text(str(record.get("ts", ""))[11:19] + " ", style="dim")
    if kind == "token_usage":
        return stamp + usage_text(record)
    if kind == "tool_call" and not tools and not record.get("error"):
        return None
    if kind == "retry" and record.get("told") is False and not tools:
        return None  # the wait was told, not long ago
    style, text = _DESCRIBE.get(kind, ("cyan", _generic))
    return stamp + Text(text(record).rstrip(), style=style)


class SafeConsole(Console):
    """A console that shows no control character or escape sequence it was given, whatever
    printed it: what it writes is made printable as it leaves (its own colours and line
    breaks are not text, and stay)."""

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            yield (
                segment
                if segment.control
                else segment._replace(text=printable(segment.text, lines=True))
            )

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError  # rich would exit 1; `tail | head` ending early is no failure


def stdout_console() -> Console:
    return SafeConsole(file=sys.stdout, highlight=False, soft_wrap=True)


def stderr_console() -> Console:
    return SafeConsole(stderr=True, highlight=False, soft_wrap=True)
