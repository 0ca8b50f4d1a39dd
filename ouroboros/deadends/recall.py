"""The run's calls to the feature (`run.session.Feature`): a new session's opening lists the
newest dead ends within `dead_ends.share` of the prompt budget, and the result of a call that
fails the same way as a remembered one is noted so (and the meeting journalled, for `tail`)."""

from __future__ import annotations

from ouroboros.context.tokens import raw_units, text_kind
from ouroboros.deadends.records import DeadEndMet, DeadEnds
from ouroboros.ground import prompts
from ouroboros.ground.messages import ToolMessage
from ouroboros.run.session import Feature
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal


class Recall(Feature):
    def __init__(self, share: float, journal: Journal):
        self.share, self.journal = share, journal

    def opening(self, state: RunState) -> tuple[str, bool]:
        if state.window is None:
            return "", True
        calibration = state.ledger.calibration

        def tokens(text: str) -> int:
            return calibration.tokens(raw_units(text), text_kind(text))

        budget = int(state.window.prompt_budget * self.share)
        return state.part(DeadEnds).listing(tokens, budget), True

    def result(self, message: ToolMessage) -> ToolMessage:
        state = self.journal.state
        known = state.part(DeadEnds).same(message)
        if known is None:
            return message
        met = DeadEndMet(
            session=state.session,
            call_id=message.tool_call_id,
            call=known.call,
            failure=known.failure,
            times=known.times,
            last_session=known.session,
        )
        self.journal.append(met)
        return noted(message, prompts.dead_end_note(known.times, known.session, state.session))


def noted(result: ToolMessage, note: str) -> ToolMessage:
    """The result with `note` before it, counted in its size, so that what is whole stays whole
    (`ToolRunner.save_whole` saves such a result where its placeholder will say)."""
    update: dict[str, object] = {"content": note + result.content}
    if result.output_bytes is not None:
        update["output_bytes"] = result.output_bytes + len(note.encode())
    if result.output_lines is not None:
        update["output_lines"] = result.output_lines + note.count("\n")
    return result.model_copy(update=update)
