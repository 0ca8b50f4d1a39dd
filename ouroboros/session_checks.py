"""What a session checks of each call and tells readers about: a reply as it may be recorded, a
refused prompt, a count that cannot be true or that shows a cut prompt, a cache the server did
not use. Each finding is a journal record (`Notice`, `Refused`), never a line written aside.
"""

from __future__ import annotations

from ouroboros import reply_limits
from ouroboros.cache_check import reuse_warning, shared_tokens
from ouroboros.call_figures import CallFigures, RawTally
from ouroboros.config import LLMSettings
from ouroboros.journal import Journal
from ouroboros.ledger import Counting, Ledger
from ouroboros.llm import Completion, ContextOverflow
from ouroboros.messages import Message
from ouroboros.records import Refused
from ouroboros.reply_limits import Admitted
from ouroboros.usage_check import above_window, refused_count, shown
from ouroboros.usage_check import warning as usage_warning


def admitted_reply(
    journal: Journal, completion: Completion, llm: LLMSettings, counting: Counting
) -> Admitted:
    """The reply as it is recorded and run (`reply_limits`); a server whose ids had to be
    replaced, or whose usage is no count, is named once a run."""
    state = journal.state
    admitted = reply_limits.admit(
        completion.message,
        state.call_ids,
        llm.max_tool_calls_per_reply,
        llm.max_tool_argument_bytes,
    )
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
    return admitted


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
