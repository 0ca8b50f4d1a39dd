"""One readable line per logged record: the run's terminal and `tail` show the same."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ouroboros.ground.printable import printable
from ouroboros.observe import shown as features
from ouroboros.observe.plan_view import change_text

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


DROP_ORDER = ("time", "processed", "source", "half the bar", "cache", "bar", "words")
"""What a call's line gives up, first to last, to fit a narrower terminal: the prefill time,
the tokens processed, the count's source (where it is the server's), half the bar, the cache
share, the bar, the words around the counts. `status` and the logs keep them all."""


def usage_levels(r: dict[str, Any]) -> Iterator[Text]:
    """A call's line (less its tools), from the fullest to the shortest (`DROP_ORDER`), each
    made as it is asked for: most lines fit in their first or second."""
    zone = str(r.get("zone", "normal"))
    fraction = float(r.get("fraction", 0.0))
    source = str(r.get("source"))
    cached, processed = r.get("cached_tokens"), r.get("processed_tokens")
    ms = r.get("prefill_ms")
    prompt, out = figure(r.get("prompt_tokens")), figure(r.get("completion_tokens"))
    budget = figure(r.get("prompt_budget", r.get("context_limit")))

    def level(gone: tuple[str, ...]) -> Text:
        text = Text(f"s{r.get('session')} t{r.get('turn', '?'):<4} ")
        if r.get("purpose"):  # a call outside the conversation (a compaction's recap): no turn
            text.append(f"[{r['purpose']}] ", style="cyan")
        cells = 0 if "bar" in gone else 12 if "half the bar" in gone else 24
        filled = bar(fraction, cells, line_marks(r)) + " " if cells else ""
        text.append(f"{filled}{fraction:4.0%} {zone:<6}", style=ZONE_STYLE.get(zone, "white"))
        words = "words" not in gone
        text.append(
            f" prompt {prompt} + out {out} of {budget}" if words else f" {prompt}+{out}/{budget}"
        )
        if "source" not in gone or source != "server":
            text.append(f" ({source})", style="dim")
        if "cache" not in gone and cached is not None and processed is not None:
            share = cached / (cached + processed) if cached + processed else 0.0
            more = f", processed {figure(processed)}" if "processed" not in gone else ""
            timed = f" in {ms / 1000:.1f} s" if "time" not in gone and ms is not None else ""
            text.append(f" cache {share:.0%}{more}{timed}", style="dim")
        return text

    return (level(DROP_ORDER[:n]) for n in range(len(DROP_ORDER) + 1))


def outcome(line: dict[str, Any]) -> str:
    """How one tool call ended, in a few words (the name and error printable, on one line)."""
    name = printable(str(line.get("name")))
    if line.get("error"):
        said = " ".join(printable(str(line["error"])).split())
        return f"{name} failed: {said[:117] + '…' if len(said) > 120 else said}"
    code = line.get("exit_code")
    return f"{name} exit {code}" if code is not None else f"{name} ok"


def failed(line: dict[str, Any]) -> bool:
    return bool(line.get("error")) or line.get("exit_code") not in (0, None)


def fit(levels: Sequence[Text], width: int | None) -> Text:
    """The first of `levels` (fullest first) that fits `width` columns, else the last cut to
    fit with an ellipsis; the first where there is no width to fit (a pipe)."""
    if width is None:
        return levels[0]
    for text in levels:
        if text.cell_len <= width:
            return text
    last = levels[-1].copy()
    last.truncate(width, overflow="ellipsis")
    return last


def call_line(
    usage: dict[str, Any], tools: Sequence[dict[str, Any]] = (), width: int | None = None
) -> Text:
    """The line of one model call and the tools its reply called, as the run's terminal and
    `tail` show it, fitted to `width`."""
    usage = {k: printable(v) if isinstance(v, str) else v for k, v in usage.items()}
    outcomes = Text()
    for t in tools:
        outcomes.append(f"  · {outcome(t)}", style="yellow" if failed(t) else "dim")
    # Room kept for the tools whatever they are, so that calls of short and long tool names
    # keep the same figures, line after line.
    room = max(outcomes.cell_len, TOOLS_ROOM)
    for text in usage_levels(usage):
        line = _stamp(usage) + text
        if width is None or line.cell_len + room <= width:
            break  # else the shortest, `fit` cuts it
    return fit([line + outcomes], width)


TOOLS_ROOM = 18
"""The columns a call's line keeps for its tools' outcomes ("  · file_read ok" and a little)."""


def window_source(window: dict[str, Any]) -> str:
    """Where a window's figure came from: its detail, after the server's kind where the detail
    does not name it already (`llama-server /props n_ctx` is not said after `llama-server: `)."""
    server, detail = str(window.get("server")), str(window.get("detail"))

    def squeezed(text: str) -> str:
        return "".join(text.lower().split())

    return detail if squeezed(server) in squeezed(detail) else f"{server}: {detail}"


def line_width(console: Console) -> int | None:
    """The columns a line may take: the terminal's (or `COLUMNS`), none in a pipe."""
    return console.width if console.is_terminal or "COLUMNS" in os.environ else None


_DESCRIBE: dict[str, tuple[str, features.Describe]] = {
    "run_start": (
        "bold",
        lambda r: f"run {'resumed' if r.get('resumed') else 'started'}: model {r.get('model')}",
    ),
    "run_end": ("bold", lambda r: f"run stopped: {r.get('reason')}{_end_detail(r)}"),
    "tools": ("dim", lambda r: tools_text(r)),
    "context_window": (
        "dim",
        lambda r: [
            f"window {figure(r.get('context_limit'))} tokens ({window_source(r)})",
            f"window {figure(r.get('context_limit'))} tokens",
        ],
    ),
    "session_start": ("bold", lambda r: f"session {r.get('session')} starts ({r.get('reason')})"),
    "session_end": (
        "bold",
        lambda r: [
            f"session {r.get('session')} ends after {r.get('turns')} turns: "
            f"{r.get('reason')} ({r.get('detail') or 'no detail'})",
            f"session {r.get('session')} ends after {r.get('turns')} turns: {r.get('reason')}",
        ],
    ),
    "session_restart": (
        "bold magenta",
        lambda r: [
            f"restart {r.get('restarts')}: session {r.get('session')} after "
            f"{r.get('previous_turns')} turns ({r.get('reason')}), "
            f"{r.get('carried_messages')} messages carried over",
            f"restart {r.get('restarts')}: session {r.get('session')} "
            f"({r.get('reason')}), {r.get('carried_messages')} messages carried",
        ],
    ),
    "context_mask": (
        "magenta",
        lambda r: [
            f"masked {r.get('masked')} old result(s) ({r.get('total_masked')} in all, "
            f"{r.get('reason')}): next prompt ~{figure(r.get('projected_before'))} -> "
            f"~{figure(r.get('projected_after'))} tokens",
            f"masked {r.get('masked')} old result(s): next prompt "
            f"~{figure(r.get('projected_before'))} -> ~{figure(r.get('projected_after'))}",
        ],
    ),
    "context_cut": (
        "magenta",
        lambda r: (
            f"cut {r.get('results')} result(s) the model has not seen to "
            f"{figure(r.get('shown_bytes'))} bytes "
            + (
                "for the wind-down's next reply"
                if r.get("reason") == "wind_down"
                else "after the server refused the prompt"
            )
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
        lambda r: [
            f"wind-down: next prompt ~{figure(r.get('projected'))} tokens, "
            f"~{figure(r.get('room'))} left in the budget "
            f"(hard line {figure(r.get('hard_line'))}); "
            f"{r.get('turns_left')} replies left",
            f"wind-down: ~{figure(r.get('room'))} tokens left in the budget; "
            f"{r.get('turns_left')} replies left",
        ],
    ),
    "wind_down_missed": (
        "bold red",
        lambda r: (
            f"no wind-down: one step took the next prompt to ~{figure(r.get('projected'))} tokens, "
            f"past the hard line {figure(r.get('hard_line'))} and the prompt budget "
            f"{figure(r.get('prompt_budget'))}"
        ),
    ),
    "loop": ("bold red", lambda r: [f"loop {said}" for said in loop_levels(r)]),
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
    "plan": ("cyan", change_text),
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
NARROW_CHARS = 80 - len("00:00:00 ")
"""The narrowest terminal's room for a wait's line: a shorter cause, then none, so that what
the run does and how to stop it are never what a narrow terminal cuts off."""
NOT_RUNNING = "not running? Ollama: `ollama serve`"


def retry_text(r: dict[str, Any]) -> str | list[str]:
    """The wait for the server: what it waits for, until when, and how to stop it, with why;
    later, how long it has waited (a line of a log older than these fields: as it was). From
    the fullest to the shortest: the cause goes first, then the server's address."""
    server, attempt = r.get("server"), r.get("attempt")
    if server is None:
        return f"retry {attempt} in {r.get('wait_s')} s: {r.get('message')}"
    limit = float(r.get("retry_for_s") or 0)
    if attempt != 1:
        seconds = int(r.get("waited_s") or 0)
        waited = f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s"
        ends = f" (gives up at {limit / 60:g} min)" if limit else ""
        said = f", try {attempt}, {waited}{ends}"
        return [f"still waiting for {server}{said}", f"still waiting{said}"]
    horizon = f"for {limit / 60:g} min" if limit >= 60 else f"for {limit:g} s"
    head = f"waiting for {server} ("
    tail = f"): trying {horizon if limit else 'for ever'}, Ctrl-C stops"
    cause = NOT_RUNNING if r.get("unreachable") else " ".join(str(r.get("message")).split())
    levels: list[str] = []
    for room in (WAITING_CHARS - len(head) - len(tail), NARROW_CHARS - len(head) - len(tail)):
        if room >= 10 or not levels:
            levels.append(head + (cause if len(cause) <= room else cause[: room - 1] + "…") + tail)
    return [*levels, f"waiting for {server}{tail[1:]}", f"waiting for the server{tail[1:]}"]


LOOP_ACTIONS = {1: "nudge", 2: "restart", 3: "stuck"}
"""What each level of a loop (`LoopDetected`) does."""


def loop_text(r: dict[str, Any]) -> str:
    """A loop's kind, what was done and what repeated, whole (`status`, the report)."""
    return loop_levels(r)[0]


LOOP_QUOTES = (None, *range(76, 31, -4))
"""The longest each quoted text of a loop's line is, from the whole line to narrower ones (the
run keeps each shortened to 80 characters)."""
LOOP_QUOTES_COUNTED = tuple(range(76, 7, -4))
"""The same where the line gives what repeated as its count alone, the kind saying the rest: a
narrower terminal then still shows some of what repeated."""


def loop_levels(r: dict[str, Any]) -> list[str]:
    """A loop's line from the fullest to the shortest: what repeated in words and quoted whole,
    then each quote cut shorter (inside its quotes); then the count alone for words; then no
    quote. The kind and what was done stay."""
    action = LOOP_ACTIONS.get(r.get("level", 0), r.get("level"))
    head = f"{r.get('loop')} -> {action}: "
    evidence = [str(e) for e in r.get("evidence") or []]
    said, count, quoted, joint = _loop_words(str(r.get("loop")), evidence)
    if not quoted:
        return [head + said]
    return [
        *(f"{head}{said}: {joint.join(_quote(q, room) for q in quoted)}" for room in LOOP_QUOTES),
        *(
            f"{head}{count + ': ' if count else ''}{joint.join(_quote(q, room) for q in quoted)}"
            for room in LOOP_QUOTES_COUNTED
        ),
        head + said,
    ]


def _loop_words(kind: str, evidence: list[str]) -> tuple[str, str, list[str], str]:
    """What repeated, in words, and its count; the texts it quotes (the calls, a reply, an
    error's last line: `policy/loops.py` keeps them shortened); what goes between two of them."""
    counted = kind != "session_repeat"  # its evidence is the calls alone
    *texts, count = evidence if counted and evidence else [*evidence, ""]
    calls = "call" if len(texts) == 1 else f"{len(texts)} calls"
    words = {
        "repeat": (f"the same {calls} {count}", ", "),
        "cycle": (f"a round of {len(texts)} calls, {count} over", ", "),
        "failing": (f"the same call failed the same way {count}", " → "),
        "no_calls": (f"{count} without a tool call, the newest", ", "),
        "overflows": (f"the server refused {count} as too long", ", "),
        "session_repeat": ("this session redid the previous session's calls", ", "),
    }
    said, joint = words.get(kind, (count, "; "))
    return said, count, texts, joint


def _quote(text: str, room: int | None) -> str:
    """A text on one line in quotes, cut to `room` characters with an ellipsis inside them."""
    text = " ".join(text.split())
    if text.endswith("..."):  # as `policy/loops.py` shortens it
        text = text[:-3] + "…"
    if room is not None and len(text) > room:
        text = text[: room - 1].rstrip() + "…"
    return f"“{text}”"


def _end_detail(r: dict[str, Any]) -> str:
    # A fatal error's message is its own line (`error`) and the CLI's: not said a third time.
    detail = r.get("detail")
    return f" ({detail})" if detail and r.get("reason") != "error" else ""


def tools_text(r: dict[str, Any]) -> list[str]:
    """How tool commands run: the sandbox in full, then its first clause (the kind); the rest
    is in `tail --json` and `events.jsonl`."""
    if r.get("message"):
        return [f"tools: {r['message']}"]
    network = "on" if r.get("network") else "off"
    short = f"tools: sandbox {str(r.get('sandbox')).split(';')[0]}, network {network}"
    return [f"tools: {sandbox_text(r)}", short]


def sandbox_text(r: dict[str, Any]) -> str:
    """How tool commands run, in full (`status`'s row)."""
    network = "on" if r.get("network") else "off"
    return f"sandbox {r.get('sandbox')}; network {network}; {r.get('processes')}; {r.get('limits')}"


def _generic(r: dict[str, Any]) -> str:
    """A kind this version does not know yet: show its fields as they are."""
    fields = ", ".join(f"{k}={v}" for k, v in r.items() if k not in ("v", "seq", "ts", "kind"))
    return f"{r.get('kind')} {fields}"


def shown(text: str) -> str:
    """A text of a record as a line shows it: printable, and cut at `SHOWN_CHARS` with a mark."""
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters: tail --json)"
    return printable(text)


def _stamp(record: dict[str, Any]) -> Text:
    return Text(str(record.get("ts", ""))[11:19] + " ", style="dim")


def makes_line(record: dict[str, Any], tools: bool = False) -> bool:
    """Whether `describe` gives `record` a line, without making it (`tail` counts lines)."""
    kind = record.get("kind")
    if kind == "tool_call" and not tools and not record.get("error"):
        return False
    return not (kind == "retry" and record.get("told") is False and not tools)


def describe(record: dict[str, Any], tools: bool = False, width: int | None = None) -> Text | None:
    """The readable line of one record (its texts made printable, on one line, cut at
    `SHOWN_CHARS` and fitted to `width`); None for a record not worth a line. A call's line
    alone, without its tools' outcomes (`call_line` adds them). `tools`: also a line for each
    tool call, and for each try of a wait for the server."""
    if not makes_line(record, tools):
        return None  # a tool call ends its call's line; a wait was told, not long ago
    record = {k: shown(v) if isinstance(v, str) else v for k, v in record.items()}
    kind = str(record.get("kind"))
    if kind == "token_usage":
        return call_line(record, width=width)
    style, text = _DESCRIBE.get(kind) or features.described(kind) or ("cyan", _generic)
    said = text(record)
    levels = [said] if isinstance(said, str) else said
    return fit([_stamp(record) + Text(t.rstrip(), style=style) for t in levels], width)


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
