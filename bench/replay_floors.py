"""The figures `replay.py` judges a run against: the two session floors and an unmanaged
agent's prefill, from the trajectory as served, counted by its tokenizer."""

from __future__ import annotations

import json
import os
from collections import Counter

from floor import StepTokens, WindDownTokens, sessions_keeping_recent, sessions_with_promises
from prefill import prefill
from replay_model import DEFAULTS, MAX_OUTPUT, PLACEHOLDER, Step
from replay_run import Run, budget, cap

from ouroboros.context import mask
from ouroboros.context.mask import masked
from ouroboros.context.truncate import shown
from ouroboros.ground import prompts
from ouroboros.ground.messages import AssistantMessage, ToolCall, ToolMessage
from ouroboros.model.llm import to_wire
from ouroboros.policy.room import MIN_OUTPUT_BYTES, longest_wind_down
from ouroboros.run.window import mask_policy
from ouroboros.tools.results import shaped_result
from ouroboros.tools.tool import Output


def step_tokens(run: Run, held_whole: bool = False) -> tuple[int, list[StepTokens]]:
    """What every session's prompt holds before its first turn, and each step's tokens.
    `held_whole`: a reply a server cuts off at the limit stays whole in the prompt, as an
    unmanaged agent keeps it; the harness shows it as a placeholder (`mask.cut_off_reply`) and
    the model writes the step again."""
    t, tokens = run.trajectory, run.trajectory.tokens
    again = tokens.message({"role": "user", "content": prompts.CONTINUE})
    told = tokens.message({"role": "user", "content": prompts.cut_off(MAX_OUTPUT)})

    def figures(index: int, step: Step) -> list[StepTokens]:
        """The step; first, where a server stops its reply at the limit, that reply (every
        agent gets it)."""
        stopped = t.at_limit(index)
        if stopped is not None and held_whole and step.action is None:
            return [StepTokens(tokens.message(stopped.wire()) + again, stopped.completion)]
        first = []
        if stopped is not None and held_whole:
            first = [StepTokens(tokens.message(stopped.wire()) + told, stopped.completion)]
        elif stopped is not None:
            text = mask.cut_off_reply(AssistantMessage(content=stopped.text)).content
            shown_tokens = tokens.message({**stopped.wire(), "content": text})
            first = [StepTokens(shown_tokens + told, shown_tokens)]
        served = t.reply(index)
        if step.action is None:
            return [*first, StepTokens(tokens.message(served.wire()) + again, served.completion)]
        result = result_at_cap(step, cap(run.window))
        pair = (tokens.message(to_wire(result)), tokens.message(to_wire(masked(result))))
        cut = shown(result_at_cap(step, cap(run.window), MIN_OUTPUT_BYTES))
        least = tokens.message(to_wire(cut))
        whole = StepTokens(tokens.message(served.wire()), served.completion, (pair,), (least,))
        return [*first, whole]

    first = run.requests[0]
    fixed = tokens.prompt({"tools": first["tools"], "messages": first["messages"][:2]})
    return fixed, [f for i, s in enumerate(t.steps) for f in figures(i, s)]


def floor(run: Run) -> int:
    """`floor.sessions_keeping_recent` with the real counts of the trajectory as served."""
    lines = budget(run.window)
    fixed, steps = step_tokens(run)
    policy = mask_policy(DEFAULTS.context, lines)
    return sessions_keeping_recent(steps, fixed, lines.prompt_budget, policy)


def equal_promises_floor(run: Run) -> int:
    """`floor.sessions_with_promises` with the real counts of the trajectory as served: its own
    replies are the wind-downs' replies."""
    lines = budget(run.window)
    fixed, steps = step_tokens(run)
    policy = mask_policy(DEFAULTS.context, lines)
    paths = DEFAULTS.paths  # the replay's projects are laid out as the defaults say
    longest = longest_wind_down(os.path.relpath(paths.system_prompt, paths.workspace))
    notice = run.trajectory.tokens.message(to_wire(longest))
    wind_down = WindDownTokens(DEFAULTS.session.wind_down_turns, notice)
    return sessions_with_promises(steps, fixed, lines.prompt_budget, policy, wind_down)


def append_only(run: Run) -> int:
    """What an unmanaged agent with an unlimited window makes the server process: each token
    of its one growing prompt once (the results at the normal cap, as the runner keeps them)."""
    fixed, steps = step_tokens(run, held_whole=True)
    return fixed + sum(s.prompt + sum(whole for whole, _ in s.results) for s in steps)


def prefill_figures(run: Run) -> Counter[str]:
    p = prefill(run.requests, run.trajectory.tokens.prompt)
    n = Counter(processed=p.processed, bound=append_only(run), breaks=p.breaks)
    # What the model keeps seeing: whole results (not placeholders) per request, in all.
    n["whole results sent"] = sum(
        m["role"] == "tool" and not PLACEHOLDER.match(m["content"])
        for body in run.requests
        for m in body["messages"]
    )
    n.update({"processed at restarts": p.at_restarts, "processed at breaks": sum(p.after_breaks)})
    return n


def result_at_cap(step: Step, cap: int, room: int | None = None) -> ToolMessage:
    """The step's result as the tool runner keeps it at the run's normal cap (cut to `room`
    bytes when given, as for a step with no room left)."""
    call = ToolCall(id="c", name="shell_exec", arguments=json.dumps({"command": step.action}))
    fit = None if room is None else (lambda text: room)
    return shaped_result(call, Output(step.output, step.returncode), cap, fit)
