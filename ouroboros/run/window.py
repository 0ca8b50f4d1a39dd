"""The window a run works in, and a change of it while the run goes on.

The window's lines come from the settings (`Budget.for_window`); the rules and counting the
context policy reads are made for the window in force, which the fold holds (`RunState.window`):
the start's, a smaller one a refusal stated, or the server's own read again (`WindowChange`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import anyio

from ouroboros.context.ledger import Counting
from ouroboros.context.mask import MaskPolicy
from ouroboros.context.tokens import Budget
from ouroboros.ground.config import ContextSettings, Settings
from ouroboros.ground.figures import WINDOW_RANGE, WindowFigures
from ouroboros.model.llm import ContextOverflow, LLMError, shown
from ouroboros.model.servers import ServerInfo, choose_window
from ouroboros.policy.room import Rules
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import WindowChange


def figures(
    settings: Settings, limit: int, server: str, detail: str, frame_tokens: float
) -> WindowFigures:
    """A window of `limit` tokens with its lines, as the settings place them."""
    c = settings.context
    budget = Budget.for_window(
        limit, c.soft_threshold, c.hard_threshold, settings.llm.max_output_tokens, c.safety_margin
    )
    return WindowFigures(
        server=server,
        detail=detail,
        context_limit=limit,
        prompt_budget=budget.prompt_budget,
        soft_line=budget.soft_line,
        hard_line=budget.hard_line,
        frame_tokens=frame_tokens,
    )


def budget_of(window: WindowFigures) -> Budget:
    return Budget(window.context_limit, window.prompt_budget, window.soft_line, window.hard_line)


def mask_policy(c: ContextSettings, budget: Budget) -> MaskPolicy:
    protected_tokens = int(c.protected_max_fraction * budget.prompt_budget)
    return MaskPolicy(c.protected_observations, protected_tokens, c.mask_min_tokens)


def fit(rules: Rules, counting: Counting, window: WindowFigures) -> tuple[Rules, Counting]:
    """The policy's rules and the counting, made for `window`."""
    budget = budget_of(window)
    fitted = replace(rules, budget=budget, masking=mask_policy(rules.context, budget))
    return fitted, replace(counting, limit=window.context_limit)


def refused_window(
    state: RunState, settings: Settings, error: ContextOverflow
) -> WindowChange | None:
    """The change a refusal makes when it states a smaller window than the one in force; None
    when it states none, or one as large or larger."""
    now = state.window
    stated = error.n_ctx
    if now is None or not stated or stated >= now.context_limit:
        return None
    detail = f"stated when the server refused a prompt; was {now.context_limit:,}"
    window = figures(settings, stated, now.server, detail, now.frame_tokens)
    return WindowChange(
        session=state.session,
        before=now.context_limit,
        window=window,
        source="refusal",
        said=str(error)[:300],
    )


def take_stated(
    journal: Journal, settings: Settings, error: ContextOverflow
) -> WindowFigures | None:
    """A refusal that states a smaller window than the one in force: a warning, and the change
    journalled (the fold works in it from now on); the window, for `fit`. One that states a
    figure that is no window states none (warned once a run)."""
    state = journal.state
    if error.no_window is not None:
        journal.notify(
            "warning",
            f"the server refused a prompt and stated {shown(error.no_window)} as its window, "
            f"which is none (a window is {WINDOW_RANGE}): taken as not stated",
            session=state.session,
            once=NO_WINDOW_REFUSED,
        )
    change = refused_window(state, settings, error)
    if change is None:
        return None
    new, before = change.window.context_limit, change.before
    # The warning first: a kill between the two gives it once still (the resume takes the
    # window again, and `once` keeps it from a second warning).
    journal.notify(
        "warning",
        f"the server refused a prompt and said its window is {new:,} tokens, not {before:,}: "
        f"the run works in {new:,} from now on (set context.limit to {new} to start so)",
        session=state.session,
        once=f"window_{new}",
    )
    journal.append(change)
    return change.window


NO_WINDOW_READ = "server_no_window"
"""The `once` of the warning that the server stated no window (at the start, or read again)."""
NO_WINDOW_REFUSED = "refusal_no_window"
"""The `once` of the warning that a refusal stated a figure that is no window."""


@dataclass
class ServerWindow:
    """How to ask the server its window again, and what it said last (None: it did not say)."""

    read: Callable[[], Awaitable[ServerInfo]]
    said: int | None


async def reread(server: ServerWindow | None, journal: Journal, settings: Settings) -> bool:
    """The server asked its window again (a reload or restart may have changed it): when its
    figure changed since it last said one, the window it names (`context.limit` a ceiling, as at
    the start) is in force from the next request on, warned and journalled; True then. A server
    that does not answer, or does not say, changes nothing."""
    now = journal.state.window
    if server is None or now is None:
        return False
    # At most `llm.timeout_s` in all: the client's timeout is per read, and a server that
    # answers one probe and hangs (or trickles) the next would hold the run at every session's
    # start, each probe in turn, for nothing (the call after waits for it as its own).
    info: ServerInfo | None = None
    with anyio.move_on_after(settings.llm.timeout_s), contextlib.suppress(LLMError):
        info = await server.read()
    if info is None:
        return False
    if info.no_window:
        journal.notify(
            "warning",
            f"the server's window, read again, is none ({info.detail}; a window is "
            f"{WINDOW_RANGE}): taken as not reported, the run keeps {now.context_limit:,}",
            session=journal.state.session,
            once=NO_WINDOW_READ,
        )
    said, server.said = server.said, info.context_window or server.said
    if info.context_window is None or info.context_window == said:
        return False  # unchanged: a smaller window a refusal stated since stays in force
    limit, before = choose_window(settings.context.limit, info)[0], now.context_limit
    if limit == before:
        return False
    detail = f"{info.detail}, read again; was {before:,}"
    journal.notify(
        "warning",
        f"the server's window is now {limit:,} tokens, not {before:,} ({info.detail}): the run "
        f"works in {limit:,} from the next request on",
        session=journal.state.session,
    )
    window = figures(settings, limit, info.kind, detail, now.frame_tokens)
    journal.append(
        WindowChange(
            session=journal.state.session,
            before=before,
            window=window,
            source="server",
            said=info.detail,
        )
    )
    return True
