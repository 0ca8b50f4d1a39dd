"""The fewest sessions that any context policy keeping the newest results whole needs.

Shared by the benches (context_policies.py, replay.py): they count a session's tokens their own
way and hand the figures over as plain numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

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

    def unmasked_extra(recent: list[tuple[int, int]]) -> int:
        """What the protected results cost over their placeholders (`protected_ids`' rule)."""
        spent = extra = 0
        for whole, placeholder in reversed(recent[-policy.protected_count :]):
            if extra and spent + whole > policy.protected_tokens:
                break
            spent += whole
            extra += whole - placeholder
        return extra

    sessions, used, recent = 1, fixed, list[tuple[int, int]]()
    for step in steps:
        if used + unmasked_extra(recent) + step.completion > prompt_budget:
            sessions, used, recent = sessions + 1, fixed, []
        used += step.prompt
        for whole, placeholder in step.results:
            placeholder = min(whole, placeholder)
            used += placeholder
            recent.append((whole, placeholder))
    return sessions
