"""`status`: is the run alive, where it stands, what is left of its budgets.

It only reads: the journal is folded as a resume would fold it (from its snapshot), and the
lock is taken only for the instant it needs to see whether someone else holds it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ouroboros.config import Settings
from ouroboros.events import USAGE_FILE
from ouroboros.journal import fold
from ouroboros.jsonl import last_line
from ouroboros.observe.describe import ZONE_STYLE, bar, figure
from ouroboros.records import EndReason, RunLimits
from ouroboros.state import PrefillTally, RunState


@dataclass(frozen=True)
class Liveness:
    alive: bool
    pid: int | None
    detail: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process, but it exists
    return True


def _lock_held(path: Path) -> bool:
    """Try the supervisor's flock without waiting, and give it back at once."""
    with path.open("rb") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def liveness(state_dir: Path) -> Liveness:
    """Alive means both: the pid in `lock` exists and the flock on `lock` is held."""
    path = state_dir / "lock"
    if not path.exists():
        return Liveness(False, None, "never started here")
    text = path.read_text().strip()
    pid = int(text) if text.isdigit() else None
    held = _lock_held(path)
    if held and pid is not None and _pid_alive(pid):
        return Liveness(True, pid, f"pid {pid}")
    if held:
        return Liveness(False, pid, f"the lock is held but pid {text or '?'} is not alive")
    if pid is None:
        return Liveness(False, None, "the supervisor released its lock")
    return Liveness(False, pid, f"pid {pid} left its lock behind: killed or crashed")


def _age(ts: str | None, now: float) -> str:
    if not ts:
        return "never"
    return f"{duration(now - datetime.fromisoformat(ts).timestamp())} ago"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


@dataclass(frozen=True)
class Snapshot:
    state_dir: Path
    live: Liveness
    state: RunState
    usage: dict[str, Any] | None
    problems: list[str]
    now: float


def snapshot(state_dir: Path, now: float | None = None) -> Snapshot:
    """Everything `status` shows, read without writing a byte."""
    state, reader = fold(state_dir / "journal.jsonl")
    return Snapshot(
        state_dir,
        liveness(state_dir),
        state,
        last_line(state_dir / USAGE_FILE),
        [str(p) for p in reader.problems],
        time.time() if now is None else now,
    )


def _run_line(snap: Snapshot) -> Text:
    end = snap.state.run_end
    if snap.live.alive:
        return Text(f"running ({snap.live.detail})", style="bold green")
    if snap.state.finished:
        return Text("over: the agent finished", style="bold")
    if end is not None and end.reason == EndReason.ERROR:
        return Text("not running: stopped by an error (below)", style="bold red")
    if end is not None:
        return Text(f"not running: stopped ({end.reason}: {end.detail})", style="bold")
    return Text(f"not running: {snap.live.detail}", style="bold yellow")


def _left(limit: float | None, used: float, show: Callable[[float], str]) -> str:
    if not limit:
        return f"unlimited ({show(used)} used)"
    return f"{show(max(0, limit - used))} left of {show(limit)}"


def _budgets(limits: RunLimits, snap: Snapshot) -> list[tuple[str, str]]:
    st = snap.state
    elapsed = snap.now - st.started_at if st.started_at else 0.0
    most = limits.max_restarts
    restarts = "unlimited" if most is None else f"{max(0, most - st.restarts)}"
    return [
        ("turns", _left(limits.max_total_turns, st.total_turns, lambda v: f"{int(v):,}")),
        ("tokens", _left(limits.max_total_tokens, st.total_tokens, lambda v: f"{int(v):,}")),
        ("wall time", _left(limits.max_wall_time_s, elapsed, duration)),
        ("restarts", f"{restarts} left ({st.restarts} used)"),
    ]


def _context(usage: dict[str, Any] | None) -> Text:
    if usage is None:
        return Text("no model call yet", style="dim")
    zone = str(usage.get("zone", "normal"))
    fraction = float(usage.get("fraction", 0.0))
    text = Text(f"{bar(fraction)} {fraction:.0%} {zone}", style=ZONE_STYLE.get(zone, "white"))
    text.append(
        f"  {figure(usage.get('total_tokens'))} of {figure(usage.get('prompt_budget'))} tokens "
        f"(session {usage.get('session')}, turn {usage.get('turn')}, {usage.get('source')})"
    )
    return text


def _cache(prefill: PrefillTally) -> Text:
    rate = prefill.hit_rate
    if rate is None:
        return Text("not reported by the server", style="dim")
    text = f"{rate:.0%} of prompt tokens cached over {prefill.calls:,} calls"
    if (ms := prefill.mean_prefill_ms) is not None:
        text += f", prefill {ms / 1000:.1f} s per call"
    return Text(text)


def render_status(snap: Snapshot, settings: Settings) -> Panel:
    st = snap.state
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", justify="right")
    grid.add_column()
    grid.add_row("run", _run_line(snap))
    session = f"{st.session} ({'open' if st.session_open else f'ended: {st.ended_reason}'})"
    grid.add_row("session", session if st.session else "none yet")
    grid.add_row("turns", f"{st.session_turns:,} this session, {st.total_turns:,} in all")
    grid.add_row("restarts", f"{st.restarts}")
    grid.add_row("context", _context(snap.usage))
    grid.add_row(
        "tokens",
        f"{st.total_prompt_tokens:,} prompt + {st.total_completion_tokens:,} completion "
        f"= {st.total_tokens:,}",
    )
    grid.add_row("prompt cache", _cache(st.prefill))
    grid.add_row("last model call", _age(snap.usage.get("ts") if snap.usage else None, snap.now))
    end = st.run_end
    if end is not None and end.reason == EndReason.ERROR:
        grid.add_row("error", Text(f"{_age(end.ts, snap.now)}: {end.detail}", style="red"))
    for problem in snap.problems:
        grid.add_row("journal", Text(problem, style="yellow"))
    grid.add_row("", "")
    # The limits the run was started with; today's settings only for a run that recorded none.
    recorded = st.limits is not None
    for name, value in _budgets(st.limits or RunLimits.of(settings), snap):
        grid.add_row(f"{name} budget", value + ("" if recorded else " (from config.toml)"))
    return Panel(grid, title=f"ouroboros: {snap.state_dir}", title_align="left", expand=False)


def status(state_dir: Path, settings: Settings, out: Console) -> int:
    if not state_dir.exists():
        out.print(f"no run in {state_dir}")
        return 1
    out.print(render_status(snapshot(state_dir), settings))
    return 0
