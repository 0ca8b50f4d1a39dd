"""The window a run works in, and a change of it while the run goes on.

The window's lines come from the settings (`Budget.for_window`); the rules and counting the
context policy reads are made for the window in force, which the fold holds (`RunState.window`):
the start's, or a smaller one a refusal stated (`WindowChange`), from then on and after a resume.
"""

from __future__ import annotations

from dataclasses import replace

from ouroboros.config import ContextSettings, Settings
from ouroboros.context.ledger import Counting
from ouroboros.context.mask import MaskPolicy
from ouroboros.context.room import Rules
from ouroboros.context.tokens import Budget
from ouroboros.model.llm import ContextOverflow
from ouroboros.run.call_figures import WindowFigures
from ouroboros.run.journal import Journal
from ouroboros.run.records import WindowChange
from ouroboros.run.state import RunState


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
    journalled (the fold works in it from now on); the window, for `fit`."""
    state = journal.state
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
