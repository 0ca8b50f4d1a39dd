"""The context policies as pure functions, over many generated histories."""

from __future__ import annotations

import itertools
import re
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ouroboros.context.ledger import Counting, Ledger
from ouroboros.context.mask import (
    MaskPolicy,
    apply_masks,
    choose_masks,
    placeholder,
    protected_ids,
    unseen_ids,
)
from ouroboros.context.tokens import Budget, Calibration, Measurement, raw_estimate, tally
from ouroboros.context.truncate import (
    HEAD_SHARE,
    MARKER_ALLOWANCE,
    RECUT_MIN,
    SNAP,
    cap_output,
)
from ouroboros.context.view import ContextView
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    tool_call_pairs_valid,
)
from ouroboros.state.fold import RunState
from ouroboros.state.records import JOURNAL_RECORD

POLICY = MaskPolicy(protected_count=3, protected_tokens=2000, min_tokens=100)


def measure(
    ledger: Ledger,
    raw_prompt: dict[str, int],
    raw_reply: int,
    reported: tuple[int, int, Literal["server", "timings"]] | None,
    limit: int = 131_072,
) -> Measurement:
    """One call's figures, applied as the fold applies a reply's record."""
    m = ledger.figures(raw_prompt, raw_reply, reported, Counting(limit))
    ledger.apply(m)
    return m


def tokens(message: Message) -> int:
    return raw_estimate(message)


@st.composite
def histories(draw: st.DrawFn, complete: bool = True) -> list[Message]:
    ids = itertools.count()
    messages: list[Message] = [SystemMessage(content="system"), UserMessage(content="go")]
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["user", "text", "tools", "tools", "tools"]))
        if kind == "user":
            messages.append(UserMessage(content="more", origin="continue"))
        elif kind == "text":
            messages.append(AssistantMessage(content="thinking " * draw(st.integers(0, 40))))
            messages.append(UserMessage(content="continue", origin="continue"))
        else:
            calls = [
                ToolCall(
                    id=f"c{next(ids)}",
                    name=draw(st.sampled_from(["file_read", "shell_exec"])),
                    arguments='{"path": "a.py"}',
                )
                for _ in range(draw(st.integers(1, 3)))
            ]
            messages.append(AssistantMessage(content="", tool_calls=tuple(calls)))
            for call in calls:
                size = draw(st.integers(0, 6000))
                messages.append(
                    ToolMessage(
                        tool_call_id=call.id,
                        name=call.name,
                        content="x = 1\n" * (size // 6),
                        exit_code=0,
                        arguments=call.arguments,
                    )
                )
    if not complete and draw(st.booleans()):
        messages.append(
            AssistantMessage(tool_calls=(ToolCall(id="dangling", name="list_dir", arguments="{}"),))
        )
    return messages


@given(histories(), st.integers(0, 200_000))
@settings(max_examples=200, deadline=None)
def test_masking_keeps_pairs_and_order(history: list[Message], excess: int) -> None:
    chosen = choose_masks(history, set(), POLICY, tokens, excess)
    view = apply_masks(history, chosen)
    assert tool_call_pairs_valid(view)
    assert len(view) == len(history)
    protected = protected_ids(history, POLICY, tokens)
    assert not protected & set(chosen)
    order = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
    assert chosen == sorted(chosen, key=order.index), "not oldest first"
    for original, shown in zip(history, view, strict=True):
        if not isinstance(original, ToolMessage):
            assert original is shown, "only tool results may change"
        elif original.tool_call_id in chosen:
            assert tokens(original) > POLICY.min_tokens
            assert shown.content == placeholder(original)
    # Oldest first: every eligible result older than the newest chosen one was chosen too.
    if chosen:
        last = order.index(chosen[-1])
        for message in history:
            if isinstance(message, ToolMessage) and order.index(message.tool_call_id) < last:
                eligible = (
                    message.tool_call_id not in protected
                    and tokens(message) > POLICY.min_tokens
                    and tokens(message)
                    > tokens(
                        ToolMessage(**{**message.model_dump(), "content": placeholder(message)})
                    )
                )
                assert message.tool_call_id in chosen or not eligible


@given(histories())
@settings(max_examples=100, deadline=None)
def test_protected_results_are_the_newest_within_bounds(history: list[Message]) -> None:
    protected = protected_ids(history, POLICY, tokens)
    results = [m for m in history if isinstance(m, ToolMessage)]
    unseen = unseen_ids(history)
    assert unseen <= protected, "a result the model has not seen is never masked"
    assert len(protected) <= max(POLICY.protected_count, len(unseen))
    if results:
        assert results[-1].tool_call_id in protected, "the newest result is always protected"
        newest = [m.tool_call_id for m in results[-len(protected) :]]
        assert set(newest) == protected
        if len(protected) > max(len(unseen), 1):
            assert sum(tokens(m) for m in results if m.tool_call_id in protected) <= (
                POLICY.protected_tokens
            )


def test_results_not_yet_seen_are_never_masked_however_many() -> None:
    calls = [ToolCall(id=f"c{i}", name="shell_exec", arguments="{}") for i in range(5)]
    history: list[Message] = [
        SystemMessage(content="system"),
        UserMessage(content="go"),
        AssistantMessage(tool_calls=tuple(calls)),
        *(ToolMessage(tool_call_id=c.id, name=c.name, content="log line\n" * 900) for c in calls),
    ]
    assert choose_masks(history, set(), POLICY, tokens, excess=10**9) == []
    # Once the model has replied to them, the oldest go first as usual.
    history.append(AssistantMessage(content="seen them"))
    assert choose_masks(history, set(), POLICY, tokens, excess=10**9) == ["c0", "c1", "c2", "c3"]


@given(histories(), st.lists(st.integers(0, 300_000), max_size=4))
@settings(max_examples=100, deadline=None)
def test_incremental_view_equals_the_pure_function(
    history: list[Message], rounds: list[int]
) -> None:
    view = ContextView(history[:2])
    calibration = Calibration()
    for message in history[2:]:
        view.append(message)
    for excess in rounds:
        view.mask(view.choose_masks(POLICY, calibration, excess))
    assert view.shown == apply_masks(history, view.masked_ids)
    assert view.raw_total == sum(raw_estimate(m) for m in view.shown) + len(view.shown)
    assert {k: v for k, v in view.raw_kinds.items() if v} == {
        k: v for k, v in tally(view.shown).items() if v
    }


@given(histories(), st.integers(0, 10_000), st.lists(st.integers(0, 300_000), max_size=4))
@settings(max_examples=100, deadline=None)
def test_mask_accounting_after_a_compaction(
    history: list[Message], split: int, rounds: list[int]
) -> None:
    """What is sent after a compaction is priced right however many masks follow, on either
    side of the recap, and a mask's projected tally is the tally it makes."""
    view = ContextView(history)
    calibration = Calibration()
    view.compact(1 + split % max(len(history) - 1, 1), AssistantMessage(content="recap"))
    every = [m.tool_call_id for m in history if isinstance(m, ToolMessage)]
    for excess in rounds:
        chosen = view.choose_masks(POLICY, calibration, excess) + every[: excess % 3]
        expected = view.masked_tally(chosen)
        view.mask(chosen)
        assert {k: v for k, v in view.raw_kinds.items() if v} == {
            k: v for k, v in expected.items() if v
        }
        assert {k: v for k, v in view.raw_kinds.items() if v} == {
            k: v for k, v in tally(view.messages()).items() if v
        }


@given(histories(), st.lists(st.integers(0, 300_000), min_size=1, max_size=4))
@settings(max_examples=100, deadline=None)
def test_what_a_round_makes_the_server_process_again(
    history: list[Message], rounds: list[int]
) -> None:
    """A round's cost for a prompt cache is what is sent from the first result it masks on,
    as it is sent after the round: the prompt before that is what the cache keeps."""
    view = ContextView(history)
    calibration = Calibration()
    for excess in rounds:
        chosen = view.choose_masks(POLICY, calibration, excess)
        again = view.tally_from_first(chosen)
        before = view.messages()
        view.mask(chosen)
        after = view.messages()
        kept = next(
            (i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b), len(after)
        )
        assert {k: v for k, v in again.items() if v} == {
            k: v for k, v in tally(after[kept:]).items() if v
        }


@given(st.text(min_size=0, max_size=3000), st.integers(256, 2000))
@example("0" * 28 + "\x80" * 110 + "ĳ" * 80 + "ŞŞşş͠Ṱ", 256)  # a cut inside a character
@settings(max_examples=300, deadline=None)
def test_cap_output_bounds_and_utf8(text: str, limit: int) -> None:
    capped = cap_output(text, limit, spill_path=".outputs/abc.txt")
    data = capped.text.encode()
    assert len(data) <= limit
    assert capped.original_bytes == len(text.encode())
    if len(text.encode()) <= limit:
        assert capped.text == text
    else:
        assert ".outputs/abc.txt" in capped.text
        head = capped.text.split("\n[... ")[0]
        assert text.startswith(head)
        tail = capped.text.split(" ...", 2)[-1].split("]\n", 1)[1]
        assert text.endswith(tail)
        numbers = re.search(
            r"\[\.\.\. ([\d,]+) lines \(([\d,]+) bytes\) cut of ([\d,]+) lines", capped.text
        )
        assert numbers, capped.text
        cut_bytes = int(numbers[2].replace(",", ""))
        assert cut_bytes == len(text.encode()) - len(head.encode()) - len(tail.encode())
        assert int(numbers[3].replace(",", "")) == len(text.splitlines())


lines_of_text = st.lists(st.text(alphabet="abcdefghij é\t", max_size=90), max_size=300).map(
    "\n".join
)


@given(lines_of_text, st.integers(900, 3000), st.integers(0, 3000))
@settings(max_examples=300, deadline=None)
def test_cuts_fall_at_line_ends_and_a_recut_keeps_what_a_cut_keeps(
    text: str, limit: int, less: int
) -> None:
    capped = cap_output(text, limit)
    if len(text.encode()) > limit:
        head = capped.text.split("\n[... ")[0] + "\n"
        assert text.startswith(head)
        # A line end near the cut is where it falls: the head holds whole lines.
        budget = int((limit - MARKER_ALLOWANCE) * HEAD_SHARE)
        if "\n" in text.encode()[budget - SNAP : budget].decode(errors="ignore"):
            assert head.endswith("\n")
    smaller = limit - RECUT_MIN - less
    whole = (len(text.splitlines()), len(text.encode()))
    if smaller > MARKER_ALLOWANCE:
        assert cap_output(capped.text, smaller, None, whole).text == cap_output(text, smaller).text


@pytest.mark.parametrize("text", ["é" * 5000, "日本語テキスト" * 800, "🙂" * 3000])
def test_cap_output_never_splits_a_character(text: str) -> None:
    capped = cap_output(text, 1001)
    assert "\ufffd" not in capped.text
    assert len(capped.text.encode()) <= 1001


@given(
    st.lists(
        st.tuples(
            st.integers(0, 50_000), st.integers(0, 50_000), st.integers(0, 2000), st.booleans()
        ),
        max_size=30,
    ),
    st.integers(-100_000, 100_000),
)
@settings(max_examples=200, deadline=None)
def test_token_figures_never_negative(
    calls: list[tuple[int, int, int, bool]], raw_view: int
) -> None:
    ledger = Ledger()
    for i, (raw_prompt, reported, completion, has_usage) in enumerate(calls):
        kinds = {"tool:file_read": raw_prompt // 2, "user": raw_prompt - raw_prompt // 2 - i}
        m = measure(ledger, kinds, 10, (reported, completion, "server") if has_usage else None)
        assert m.prompt_tokens >= 0
        assert ledger.project({"tool:shell_exec": raw_view}) >= 0
        assert ledger.calibration.ratio >= 0
        assert all(r.value >= 0 for r in ledger.calibration.kinds.values())


def test_calibration_error_shrinks() -> None:
    # A model whose tokenizer makes 0.9 tokens per raw estimate unit (prose, large vocabulary).
    ledger = Ledger()
    errors = []
    for raw in (1000, 1500, 2200, 3000, 4100, 5000):
        real = round(raw * 0.9)
        errors.append(abs(ledger.project({"user": raw}) - real))
        measure(ledger, {"user": raw}, 0, (real, 0, "server"))
    assert errors[0] > 250
    assert errors[-1] < 10


def test_each_kind_learns_its_own_ratio_from_steps() -> None:
    # A tokenizer that makes 1.4 tokens per raw unit of code and 0.8 of test logs (real ones
    # differ by kind too: Gemma 3 gives 3.3 bytes a token on code, 4.1 on prose).
    true_ratio = {"system": 1.1, "user": 1.1, "assistant": 1.0, "tool:file_read": 1.4}
    true_ratio["tool:shell_exec"] = 0.8
    ledger = Ledger()
    prompt = {"system": 900, "user": 40}
    sizes = [1200, 3100, 800, 2600, 1900, 3500, 700, 2200, 1500, 2900]
    errors = []
    for step, size in enumerate(sizes):
        kind = "tool:file_read" if step % 2 else "tool:shell_exec"
        prompt = {**prompt, "assistant": prompt.get("assistant", 0) + 30}
        prompt[kind] = prompt.get(kind, 0) + size
        real = round(sum(true_ratio[k] * raw for k, raw in prompt.items()))
        errors.append(abs(ledger.project(prompt) - real) / real)
        measure(ledger, prompt, 30, (real, 26, "server"))
    calibration = ledger.calibration
    assert calibration.ratio_of("tool:file_read") == pytest.approx(1.4, rel=0.03)
    assert calibration.ratio_of("tool:shell_exec") == pytest.approx(0.8, rel=0.03)
    assert max(errors[-4:]) < 0.01, errors
    # One ratio for everything prices a 3,000-unit file a third too low or a log too high.
    assert not 0.95 < calibration.ratio / 1.4 < 1.05


def test_measurements_from_before_kinds_replay_without_an_anchor() -> None:
    state = RunState()
    usage = {
        "turn": 1,
        "prompt_tokens": 1300,
        "completion_tokens": 20,
        "source": "server",
        "raw_prompt": 1000,
        "raw_reply": 20,
        "silent_truncation": False,
    }
    reply = AssistantMessage(content="ok").model_dump()
    old = {"v": 1, "ts": "2026-01-01T00:00:00+00:00", "kind": "message", "session": 1}
    state.apply(JOURNAL_RECORD.validate_python({**old, "message": reply, "usage": usage}))
    ledger = state.ledger
    assert ledger.calibration.ratio == pytest.approx(1.3)
    # No anchor to project from: the whole prompt is priced at the learnt ratio.
    assert ledger.project({"user": 2000}) == 2600


def test_silent_truncation_detected_and_ignored_for_calibration() -> None:
    ledger = Ledger()
    measure(ledger, {"user": 2000}, 10, (2000, 10, "server"))
    m = measure(ledger, {"user": 6000}, 10, (1500, 10, "server"))
    assert m.silent_truncation
    assert ledger.truncation_suspected
    assert ledger.calibration.ratio == pytest.approx(1.0)
    pinned = Ledger()
    assert measure(pinned, {"user": 3900}, 0, (4095, 0, "server"), limit=4096).silent_truncation


def test_budget_lines() -> None:
    budget = Budget.for_window(4096, 0.7, 0.9, 256, 0.05)
    assert budget.prompt_budget == 4096 - 256 - 204
    assert (budget.soft_line, budget.hard_line) == (int(3636 * 0.7), int(3636 * 0.9))
    assert [budget.zone(t) for t in (100, 2600, 3300, 3700)] == ["normal", "soft", "hard", "over"]
