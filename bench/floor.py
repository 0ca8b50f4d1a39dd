"""The fewest sessions that a context policy with the harness's promises needs, counted exactly.

Shared by the benches (context_policies.py, replay.py): they count a session's tokens their own
way and hand the figures over as plain numbers. Two floors:

- **keep-3** (`sessions_keeping_recent`): any policy that keeps the newest results whole as the
  protected results do, with exact counts, nothing carried over, every prompt filled to the
  budget: everything else masked at once, a session ends when the next prompt cannot fit.
- **equal promises** (`sessions_with_promises`): the same, and the harness's other promises kept
  by an oracle that knows the replies to come: every session but the last ends with a wind-down
  whose replies (this run's own, at their real sizes) all fit, and the last of them, whose
  results the session never shows, opens the next session (every result is seen).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ouroboros.context.mask import MaskPolicy


@dataclass(frozen=True)
class StepTokens:
    """One model reply and its tool results, in the server's tokens."""

    prompt: int
    """What the reply adds to every later prompt (with the harness's continuation message, if a
    reply without tool calls gets one)."""
    completion: int
    """What it costs to generate: it must fit under the prompt budget with the prompt before it."""
    results: tuple[tuple[int, int], ...] = ()
    """Per tool result: (whole, as a placeholder)."""
    least: tuple[int, ...] = ()
    """Per tool result: cut to the least the harness shows (its whole size when not given)."""

    def cut_to_least(self) -> tuple[tuple[int, int], ...]:
        least = self.least or tuple(whole for whole, _ in self.results)
        return tuple(
            (min(w, cut), min(p, cut)) for (w, p), cut in zip(self.results, least, strict=True)
        )


@dataclass
class Session:
    """A session of the floor: what its prompt holds, the newest results whole."""

    used: int
    policy: MaskPolicy
    recent: list[tuple[int, int]] = field(default_factory=list)

    def unmasked_extra(self) -> int:
        """What the protected results cost over their placeholders (`protected_ids`' rule)."""
        if not self.policy.protected_count:
            return 0
        spent = extra = 0
        newest = reversed(self.recent[-self.policy.protected_count :])
        for number, (whole, placeholder) in enumerate(newest):
            if number and spent + whole > self.policy.protected_tokens:
                break
            spent += whole
            extra += whole - placeholder
        return extra

    def prompt(self) -> int:
        return self.used + self.unmasked_extra()

    def fits(self, step: StepTokens, prompt_budget: int) -> bool:
        """The step's reply fits below the budget after the prompt so far."""
        return self.prompt() + step.completion <= prompt_budget

    def add(self, step: StepTokens, results: Sequence[tuple[int, int]] | None = None) -> None:
        self.used += step.prompt
        for whole, placeholder in step.results if results is None else results:
            placeholder = min(whole, placeholder)
            self.used += placeholder
            self.recent.append((whole, placeholder))

    def copy(self) -> Session:
        return Session(self.used, self.policy, list(self.recent))


def sessions_keeping_recent(
    steps: Iterable[StepTokens], fixed: int, prompt_budget: int, policy: MaskPolicy
) -> int:
    """Sessions that any policy needs which keeps the newest results whole as the protected
    results do, even with exact counts, nothing carried over and every prompt filled to the
    budget: everything else masked at once, a session ends when the next prompt cannot fit.

    `fixed` is what every session's prompt holds before its first turn (tool schemas, system
    prompt, opening message). Greedy is optimal here: a session that fits from one start also
    fits from any later one.
    """
    sessions, session = 1, Session(fixed, policy)
    for step in steps:
        if not session.fits(step, prompt_budget):
            sessions, session = sessions + 1, Session(fixed, policy)
        session.add(step)
    return sessions


@dataclass(frozen=True)
class WindDownTokens:
    turns: int
    """Replies a wind-down asks for (`session.wind_down_turns`)."""
    message: int
    """The wind-down message."""


def wind_down_fits(
    session: Session, steps: Sequence[StepTokens], wind_down: WindDownTokens, budget: int
) -> bool:
    """The wind-down message and then `steps` (its replies) fit: each reply below the budget,
    the results of each before it cut to the least the harness shows (the last one's are shown
    first in the next session)."""
    session = session.copy()
    session.used += wind_down.message
    for step in steps:
        if not session.fits(step, budget):
            return False
        session.add(step, step.cut_to_least())
    return True


def one_session(
    steps: Sequence[StepTokens],
    start: int,
    carried: bool,
    fixed: int,
    budget: int,
    policy: MaskPolicy,
    wind_down: WindDownTokens,
) -> tuple[int, bool]:
    """Where the session that opens with step `start` (`carried`: not generated again) leaves
    the next one to start, and whether that step is carried (`len(steps)`: it is the last).

    The session winds down as late as its replies still fit: the oracle knows them. With no
    room for any wind-down it ends as the keep-3 floor's do."""
    session, turns = Session(fixed, policy), wind_down.turns
    latest: int | None = None
    index = start
    while index < len(steps):
        opening = carried and index == start
        ending = steps[index : index + turns]
        if not opening and turns and len(ending) == turns:
            if wind_down_fits(session, ending, wind_down, budget):
                latest = index
        if not opening and not session.fits(steps[index], budget):
            break
        session.add(steps[index])
        index += 1
    if index == len(steps):
        return index, False
    # Its last reply's results are shown first in the next session, which opens with that step.
    if latest is not None:
        return latest + turns - 1, True
    return max(index, start + 1), False


def sessions_with_promises(
    steps: Sequence[StepTokens],
    fixed: int,
    prompt_budget: int,
    policy: MaskPolicy,
    wind_down: WindDownTokens,
) -> int:
    """The equal-promises floor: the sessions a policy needs that keeps the newest results whole
    (as `sessions_keeping_recent`), ends every session but the last with a complete wind-down
    (the message, then `wind_down.turns` of the run's replies at their real sizes, the results
    of each but the last cut to the least the harness shows, the newest results still whole), and
    opens the next session with the wind-down's last step (its reply and whole results, not
    generated again). Exact counts, everything else masked at once, the wind-down placed by an
    oracle as late as it fits. Greedy: a later wind-down leaves the next session less to hold.
    """
    sessions, start, carried = 0, 0, False
    while start < len(steps):
        sessions += 1
        start, carried = one_session(steps, start, carried, fixed, prompt_budget, policy, wind_down)
    return max(sessions, 1)
