"""What a session records of a model call beside its reply: the call's figures, and the notices
the call, its reply and its figures call for.

The model layer says what a reply is (`model/tool_protocol.py`) and what the server refused
(`ContextOverflow`); the session writes the journal, so what it finds of a call is recorded here,
a journal record each (`Notice`, `Refused`), never a line aside:

- **Usage that cannot be true is not believed** (`llm.count`), and is named once a run; so is a
  refused prompt's count far from its projection, a count that shows a silently cut prompt, and
  a server that processed again what its cache should have kept.
- **A refused prompt's exact count teaches the calibration** (`Refused`), if it can be true.
- **A server whose call ids had to be replaced** (`tool_protocol.admit`) is named once a run.
"""

from __future__ import annotations

from dataclasses import asdict

from ouroboros.context.ledger import Counting, Ledger, above_window, refused_count
from ouroboros.context.ledger import warning as usage_warning
from ouroboros.context.tokens import CallFigures, RawTally, raw_estimate
from ouroboros.ground.messages import Message
from ouroboros.model.cache_check import reuse_warning, shared_tokens
from ouroboros.model.llm import Completion, ContextOverflow, shown
from ouroboros.model.tool_protocol import Admitted
from ouroboros.policy.room import Rules, step_figures, zone
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import Refused


def call_figures(
    state: RunState,
    rules: Rules,
    counting: Counting,
    completion: Completion,
    raw_prompt: RawTally,
    turn: int,
    purpose: str | None = None,
) -> CallFigures:
    """A call's figures for its record (and `token_usage.jsonl`), with the hard line in force."""
    ledger, usage = state.ledger, completion.usage
    reported = (usage.prompt_tokens, usage.completion_tokens, usage.source) if usage else None
    m = ledger.figures(raw_prompt, raw_estimate(completion.message), reported, counting)
    used = m.prompt_tokens + m.completion_tokens
    hard_line = step_figures(state, rules).hard_line
    return CallFigures(
        **m.model_dump(),
        turn=turn,
        estimated_prompt_tokens=ledger.calibration.tally_tokens(raw_prompt),
        context_limit=rules.budget.limit,
        zone=zone(state, rules, used, m.silent_truncation, hard_line),
        finish_reason=completion.finish_reason,
        purpose=purpose,
        hard_line=hard_line,
        **asdict(completion.prefill),
    )


def reply_notices(
    journal: Journal, completion: Completion, admitted: Admitted, counting: Counting
) -> None:
    """Once a run each: a server whose ids had to be replaced, or whose usage is no count."""
    state = journal.state
    if admitted.renamed:
        reused = ", ".join(sorted({shown(old) for old in admitted.renamed.values()})[:3])
        journal.notify(
            "warning",
            f"the server sent tool-call ids that are repeated or no ids ({reused}): the harness "
            "gives such calls ids of its own, and journals which (warned once per run)",
            session=state.session,
            once="call_ids",
        )
    usage = completion.usage
    rejected = completion.rejected or (
        usage and above_window(usage.prompt_tokens, usage.completion_tokens, counting.limit)
    )
    if rejected:
        journal.notify(
            "warning", usage_warning(rejected), session=state.session, once=f"usage_{rejected.kind}"
        )


def overflow(journal: Journal, error: ContextOverflow, projected: int, attempt: int) -> None:
    journal.notify(
        "context_overflow",
        str(error)[:300],
        session=journal.state.session,
        n_prompt_tokens=error.n_prompt_tokens,
        n_ctx=error.n_ctx,
        projected=projected,
        attempt=attempt,
    )


def learn_refused(journal: Journal, error: ContextOverflow, raw_prompt: RawTally) -> None:
    """The exact count of a refused prompt teaches the calibration, if it can be true."""
    state = journal.state
    if not error.n_prompt_tokens:
        return
    rejected = refused_count(error.n_prompt_tokens, state.ledger.project(raw_prompt))
    if rejected:
        journal.notify(
            "warning", usage_warning(rejected), session=state.session, once=f"usage_{rejected.kind}"
        )
        return
    m = Ledger.refused(error.n_prompt_tokens, raw_prompt)
    journal.append(Refused(session=state.session, **m.model_dump()))


def silent_truncation(journal: Journal, figures: CallFigures, context_limit: int) -> None:
    if figures.silent_truncation:
        journal.notify(
            "silent_truncation",
            "the server counted far fewer prompt tokens than were sent: it probably cut the "
            "prompt (Ollama does so silently); treating the context as full",
            session=journal.state.session,
            reported_prompt_tokens=figures.prompt_tokens,
            estimated_prompt_tokens=figures.estimated_prompt_tokens,
            context_limit=context_limit,
        )


def cache_reuse(
    journal: Journal,
    before: tuple[list[Message], int] | None,
    messages: list[Message],
    cached_tokens: int | None,
) -> None:
    """Once a run: say so when the server processed again what it should have kept."""
    state = journal.state
    if before is None or cached_tokens is None or "cache" in state.warned:
        return
    shared = shared_tokens(*before, messages, state.ledger.calibration.message_tokens)
    if (warning := reuse_warning(cached_tokens, shared)) is not None:
        journal.notify("warning", warning, session=state.session, once="cache")
