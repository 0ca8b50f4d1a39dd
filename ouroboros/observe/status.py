"""`status`: is the run alive, where it stands, what is left of its limits.

It only reads: `status.json` (made by the run from its journal's records; where it is missing or
behind the journal, the journal is folded the same way), and the lock only for the instant it
needs to see whether someone else holds it. Light to import: a quick look at a run of 100,000
calls takes a fraction of a second.
"""

from __future__ import annotations

import os
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ouroboros.ground.errors import ConfigError
from ouroboros.ground.printable import printable
from ouroboros.ground.state_folder import JOURNAL, SUMMARY
from ouroboros.ground.timestamps import wall_time
from ouroboros.observe.describe import (
    NOT_RUNNING,
    ZONE_STYLE,
    bar,
    describe,
    figure,
    line_marks,
    loop_text,
    sandbox_text,
    window_source,
)
from ouroboros.observe.liveness import Liveness, liveness
from ouroboros.observe.plan_view import plan_status
from ouroboros.observe.shown import age as _age
from ouroboros.observe.shown import duration, feature_rows
from ouroboros.sinks import events as summary

if TYPE_CHECKING:
    from ouroboros.ground.config import Settings


@dataclass(frozen=True)
class StatusFigures:
    state_dir: Path
    live: Liveness
    run: dict[str, Any]
    """`summary.of_state` of the run's folded state."""
    usage: dict[str, Any] | None
    """The last `token_usage` event."""
    last_event: dict[str, Any] | None
    waiting: dict[str, Any] | None
    """The retries under way, when a call has not got through since they began."""
    warnings: list[dict[str, Any]]
    problems: list[str]
    now: float


def read_status(state_dir: Path, now: float | None = None) -> StatusFigures:
    """Everything `status` shows, read without writing a byte: from `status.json`, or where
    it is missing or behind the journal (a run killed between the two), from a fold of the
    journal that makes the same."""
    moment = time.time() if now is None else now
    data = summary.read(state_dir)
    problems: list[str] = []
    if data is None:
        data, problems = summary.folded(state_dir)
    return StatusFigures(
        state_dir,
        liveness(state_dir),
        data["run"],
        data.get("last_usage"),
        data.get("last_event"),
        data.get("waiting"),
        data.get("warnings", []),
        problems,
        moment,
    )


def _run_line(figures: StatusFigures) -> Text:
    end, waiting = figures.run.get("run_end"), figures.waiting
    if figures.live.alive and waiting:
        since = _age(waiting.get("since"), figures.now)
        again = _next_try(waiting, figures.now)
        return Text(
            f"running ({figures.live.detail}), waiting for the model server since {since} "
            f"(try {waiting.get('attempt')}{again}): {printable(_waiting_for(waiting))}",
            style="bold yellow",
        )
    if figures.live.alive:
        return Text(f"running ({figures.live.detail})", style="bold green")
    when = f" {_age(end.get('ts'), figures.now)}" if end else ""
    if end is not None and end.get("reason") == "finish":
        return Text(f"over: the agent finished{when}", style="bold")
    if end is not None and end.get("reason") == "error":
        return Text(f"not running: stopped by an error{when} (below)", style="bold red")
    if end is not None:
        return Text(
            printable(f"not running: stopped{when} ({end.get('reason')}: {end.get('detail')})"),
            style="bold",
        )
    return Text(f"not running: {figures.live.detail}", style="bold yellow")


def _waiting_for(waiting: dict[str, Any]) -> str:
    """Why: where nothing answers, that (the error's own words say "cannot reach" twice over,
    in the client's words and discovery's); else the error."""
    if waiting.get("unreachable") and waiting.get("server"):
        return f"nothing answers at {waiting['server']} ({NOT_RUNNING})"
    return str(waiting.get("message"))


def _next_try(waiting: dict[str, Any], now: float) -> str:
    try:
        at = datetime.fromisoformat(str(waiting.get("ts"))).timestamp()
        left = at + float(waiting.get("wait_s") or 0) - now
    except (TypeError, ValueError):
        return ""
    return f", next in {duration(left)}" if left > 0 else ", trying now"


def _left(limit: float | None, used: float, show: Callable[[float], str]) -> str:
    if not limit:
        return f"unlimited ({show(used)} used)"
    return f"{show(max(0, limit - used))} left of {show(limit)}"


def _elapsed(figures: StatusFigures) -> float:
    """The run's wall time (`timestamps.wall_time`): up to now while it runs; up to its newest
    record once it ended or is not running (killed): the same from `status.json` and the
    journal, whenever it is read."""
    run = figures.run
    running = figures.live.alive and run.get("run_end") is None
    stopped = None if running else run.get("last_ts")
    started = run.get("started_at")
    return wall_time(None if started is None else float(started), figures.now, stopped)


def _limits_left(limits: dict[str, Any], figures: StatusFigures) -> list[tuple[str, str]]:
    run = figures.run
    most = limits.get("max_restarts")
    restarts = "unlimited" if most is None else f"{max(0, most - run['restarts'])}"
    tokens = run["prompt_tokens"] + run["completion_tokens"]
    return [
        ("turns", _left(limits.get("max_total_turns"), run["total_turns"], lambda v: f"{v:,.0f}")),
        ("tokens", _left(limits.get("max_total_tokens"), tokens, lambda v: f"{v:,.0f}")),
        ("wall time", _left(limits.get("max_wall_time_s"), _elapsed(figures), duration)),
        ("restarts", f"{restarts} left ({run['restarts']} used)"),
    ]


def _event(line: dict[str, Any] | None, now: float) -> Text:
    if line is None:
        return Text("none yet", style="dim")
    text = Text(f"{_age(line.get('ts'), now)}: ", no_wrap=True, overflow="ellipsis")
    shown = describe(line, tools=True)
    text.append(shown[9:] if shown is not None else Text(str(line.get("kind"))))
    return text  # one line: a server's exit can hold the last lines of its log


def context_text(usage: dict[str, Any] | None) -> Text:
    if usage is None:
        return Text("no model call yet", style="dim")
    zone = str(usage.get("zone", "normal"))
    fraction = float(usage.get("fraction", 0.0))
    text = Text(
        f"{bar(fraction, lines=line_marks(usage))} {fraction:.0%} {zone}",
        style=ZONE_STYLE.get(zone, "white"),
    )
    text.append(
        f"  {figure(usage.get('total_tokens'))} of {figure(usage.get('prompt_budget'))} tokens "
        f"(session {usage.get('session')}, turn {usage.get('turn')}, {usage.get('source')})"
    )
    return text


def window_text(window: dict[str, Any] | None) -> Text:
    """The window in force: the start's, or a smaller one a refusal stated since."""
    if window is None:
        return Text("not known yet", style="dim")
    return Text(
        printable(f"{figure(window.get('context_limit'))} tokens ({window_source(window)})")
    )


def cache_text(prefill: dict[str, Any]) -> Text:
    cached, processed = prefill.get("cached_tokens", 0), prefill.get("processed_tokens", 0)
    if not cached + processed:
        return Text("not reported by the server", style="dim")
    text = f"{cached / (cached + processed):.0%} of prompt tokens cached over "
    text += f"{prefill.get('calls', 0):,} calls"
    if prefill.get("timed_calls"):
        text += f", prefill {prefill['prefill_ms'] / prefill['timed_calls'] / 1000:.1f} s per call"
    return Text(text)


def render_status(figures: StatusFigures, settings: Callable[[], Settings]) -> Panel:
    run = figures.run
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", justify="right")
    grid.add_column()
    grid.add_row("run", _run_line(figures))
    ended = f"ended: {run['ended_reason']}"
    session = f"{run['session']} ({'open' if run['session_open'] else ended})"
    grid.add_row("session", session if run["session"] else "none yet")
    grid.add_row("turns", f"{run['session_turns']:,} this session, {run['total_turns']:,} in all")
    grid.add_row("restarts", f"{run['restarts']}")
    if (loops := run.get("loops")) and (latest := loops["latest"]):
        said = f"{loops['detections']} caught, the newest {_age(latest['ts'], figures.now)}: "
        grid.add_row("loops", Text(said + printable(loop_text(latest)), style="yellow"))
    grid.add_row("plan", plan_status(run.get("plan")))
    # The features' rows (of those a run uses), after the run's own progress.
    for row, shown in feature_rows(run, figures.now, figures.state_dir):
        grid.add_row(row, shown)
    grid.add_row("context", context_text(figures.usage))
    grid.add_row("window", window_text(run.get("window")))
    if calls := run.get("tool_calls"):  # only where one was read from text, or auto switched
        grid.add_row("tool calls", printable(calls))
    if tools := run.get("tools"):  # the terminal's line has the sandbox's kind only
        grid.add_row("tools", printable(sandbox_text(tools)))
    tokens = run["prompt_tokens"] + run["completion_tokens"]
    grid.add_row(
        "tokens",
        f"{run['prompt_tokens']:,} prompt + {run['completion_tokens']:,} completion = {tokens:,}",
    )
    grid.add_row("prompt cache", cache_text(run.get("prefill") or {}))
    last_call = figures.usage.get("ts") if figures.usage else None
    grid.add_row("last model call", _age(last_call, figures.now))
    grid.add_row("last event", _event(figures.last_event, figures.now))
    end = run.get("run_end")
    if end is not None and end.get("reason") == "error":
        grid.add_row(
            "error",
            Text(
                f"{_age(end.get('ts'), figures.now)}: {printable(str(end['detail']))}", style="red"
            ),
        )
    for warning in figures.warnings:
        said = f"{_age(warning.get('ts'), figures.now)}: {printable(str(warning.get('message')))}"
        grid.add_row("warning", Text(said, style="yellow"))
    for problem in figures.problems:
        grid.add_row("journal", Text(printable(problem), style="yellow"))
    grid.add_row("", "")
    # The limits the run was started with; today's settings only for a run that recorded none.
    limits = run.get("limits")
    if limits is None:
        from ouroboros.ground.figures import RunLimits

        limits = RunLimits.of(settings()).model_dump()
    for name, value in _limits_left(limits, figures):
        note = "" if run.get("limits") is not None else " (from config.toml)"
        grid.add_row(f"{name} limit", value + note)
    title = Text(f"ouroboros: {printable(str(figures.state_dir))}")
    return Panel(grid, title=title, title_align="left", expand=False)


def status(state_dir: Path, settings: Callable[[], Settings], out: Console) -> int:
    if not any((state_dir / name).exists() for name in (JOURNAL, SUMMARY)):
        rows = feature_rows({}, time.time(), state_dir)
        pending = "".join(f"; {text.plain} for when it starts" for _, text in rows)
        out.print(f"no run in {escape(str(state_dir))}{pending}")
        return 1
    out.print(render_status(read_status(state_dir), settings))
    return 0


def state_dir_of(config: Path | None) -> Path:
    """`paths.state_dir` as the settings resolve it (the environment over the file, relative to
    the file's folder), without loading them: `status` answers fast. A config that does not
    read or parse is left to the settings to explain."""
    path = config or Path("config.toml")
    value: Any = os.environ.get("OUROBOROS_PATHS__STATE_DIR")
    if value is None and path.exists():
        try:
            value = tomllib.loads(path.read_text()).get("paths", {}).get("state_dir")
        except (OSError, ValueError, AttributeError):
            value = None
    if value is None and not path.exists() and config is not None:
        raise ConfigError(f"{path}: config file not found")
    state = Path(str(value or ".ouroboros")).expanduser()
    return (path.resolve().parent / state).resolve()
