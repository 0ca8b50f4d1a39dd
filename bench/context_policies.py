"""Context policies compared on one long replayed session, through the real harness code.

A deterministic synthetic agent session (file reads of 2-12 KB, test runs with 10-45 KB of output,
small file writes, reasoning text between calls; 300+ tool calls) is replayed by a scripted model
against a "server" that counts prompt tokens with a word-level tokenizer (not bytes/4) and reports
them back to the Ledger. Each policy runs at 8K, 32K and 128K token windows, restarting sessions
with the carry-over `select_carryover` picks, as the supervisor does:

- no management: everything sent, uncapped; a restart only when a request overflows the window;
- truncation only: outputs capped as the harness caps them; a restart at the hard line;
- ours: the real `Session.manage_context` (mask at the soft line down to soft - hysteresis, outside
  the protected window; wind-down at the hard line; end at "over"), and `call_model`'s overflow
  response (mask all but the protected window, retry once);
- Rust original: outputs capped; the 3 oldest unmasked results masked per round once the fill is
  over 70% of the window (no protected window, no minimum size); a restart at the hard line.

A request overflows when its prompt plus its reply does not fit the window (llama-server refuses
it or shifts the context; Ollama silently drops the oldest messages). Refused requests count as
overflows and in the fill figures, not in the prompt-token totals. It also times the harness's own
per-turn context work (ledger update, masking decision, building the view) at 1,000 and 5,000
messages in a session.

Settings are the defaults of `ouroboros.config` (the environment and config.toml are ignored).

Run: .venv/bin/python bench/context_policies.py   (about a minute; prints Markdown + PASS/FAIL)
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Literal, cast

from ouroboros import prompts
from ouroboros.config import (
    ContextSettings,
    LLMSettings,
    PathSettings,
    SessionSettings,
    Settings,
    SupervisorSettings,
)
from ouroboros.context.carryover import select_carryover
from ouroboros.context.mask import MaskPolicy, masked
from ouroboros.context.truncate import cap_output
from ouroboros.events import EventLog
from ouroboros.llm import LLMClient
from ouroboros.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    to_wire,
)
from ouroboros.scripted import count_tokens
from ouroboros.session import Harness, Session, SessionEnded
from ouroboros.state import Journal, RunState
from ouroboros.supervisor import BYTES_PER_TOKEN, MARKER_ALLOWANCE, TOOL_OUTPUT_SHARE
from ouroboros.tokens import (
    MESSAGE_OVERHEAD,
    Budget,
    Calibration,
    Ledger,
    raw_estimate,
    tools_estimate,
)
from ouroboros.tools import SPILL_FACTOR, ToolRunner
from ouroboros.tools.workspace import Workspace

SEED = 20240611
MIN_TOOL_CALLS = 330
WINDOWS = (8_192, 32_768, 131_072)
UNLIMITED = 1 << 40
RUST_MASK_AT = 0.70
RUST_MASK_PER_ROUND = 3
RECENT = 3
"""How many of the newest observations the intact-share metric looks at."""
PERF_SIZES = (1_000, 5_000)
PERF_TURNS = 150
PERF_REPEATS = 3
PERF_MAX_RATIO = 1.5
PERF_MAX_US = 1_000.0

WORKSPACE = Path("/home/agent/workspace")
PROMPT_PATH = Path("/home/agent/SYSTEM_PROMPT.md")
# Fixed instructions rather than the project's SYSTEM_PROMPT.md, so edits there do not move the
# figures; about the same size.
INSTRUCTIONS = """\
# Purpose

Maintain the `ledgerkit` library in the workspace: make the test suite pass, then improve the
token estimator until its error on the recorded fixtures is under 5%.

# Method

1. Read NOTES.md first; it holds the plan and what earlier sessions found.
2. Run the tests with `pytest -q` and fix one failure at a time, smallest change first.
3. After each fix, run the affected tests again, then the whole suite.
4. Record every finding and the next step in NOTES.md before moving on.

# Rules

- Never delete tests; if a test is wrong, explain why in NOTES.md and fix it.
- Keep functions short and typed; run `ruff check` before writing a file for good.
- Do not install packages: everything needed is already in the virtual environment.
- When the suite passes and the estimator is within 5%, call finish with a summary.
"""

Policy = Literal["none", "truncate", "ours", "rust"]
POLICIES: tuple[Policy, ...] = ("none", "truncate", "ours", "rust")
LABELS: dict[Policy, str] = {
    "none": "no management",
    "truncate": "truncation only",
    "ours": "ours",
    "rust": "Rust original",
}


# --- the synthetic session ------------------------------------------------------------------

WORDS = (
    "session ledger budget token window mask view message result parse load write read path "
    "value items index count limit state event record stream chunk buffer reply server client "
    "retry error handler schema field cache offset size text line config policy journal carry "
    "turn spill marker anchor ratio sample estimate fixture report usage prompt tool call"
).split()
ADJECTIVES = "empty stale negative missing truncated larger smaller cached partial wrong".split()
VERBS = "clamps rounds checks skips counts masks resets flushes parses compares".split()
MODULES = "ledger budget stream journal carry mask estimate fixtures report usage".split()


@dataclass(frozen=True)
class Observation:
    """One tool call of the script and what the tool printed (before any cap)."""

    call: ToolCall
    text: str
    exit_code: int | None = None


@dataclass(frozen=True)
class Step:
    """One model reply of the script: reasoning text, its tool calls and their outputs."""

    reply: AssistantMessage
    observations: tuple[Observation, ...]


class Writer:
    """Deterministic text that looks like what an agent reads, runs and thinks."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def word(self) -> str:
        return self.rng.choice(WORDS)

    def ident(self) -> str:
        return "_".join(self.word() for _ in range(self.rng.randint(1, 3)))

    def camel(self) -> str:
        return "".join(self.word().capitalize() for _ in range(self.rng.randint(1, 2)))

    def path(self) -> str:
        return f"src/ledgerkit/{self.rng.choice(MODULES)}.py"

    def test_path(self) -> str:
        return f"tests/test_{self.rng.choice(MODULES)}.py"

    def sentence(self) -> str:
        r = self.rng
        templates = (
            f"The failure in test_{self.ident()} comes from {self.ident()} being "
            f"{r.choice(ADJECTIVES)} when {self.ident()} is {r.choice(ADJECTIVES)}.",
            f"I will read {self.path()} to see how {self.ident()} is computed.",
            f"Next, run the tests for {r.choice(MODULES)} again and compare the counts.",
            f"The fix: {self.ident()} now {r.choice(VERBS)} {self.ident()} before {self.ident()}.",
            f"Noting in NOTES.md that {self.ident()} {r.choice(VERBS)} the {self.word()}.",
            f"That matches the traceback: line {r.randint(20, 400)} returns {r.randint(0, 9999)}.",
        )
        return r.choice(templates)

    def reasoning(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(1, 5)))

    def expression(self) -> str:
        r = self.rng
        args = ", ".join(
            r.choice((self.ident(), str(r.randint(0, 4096)), f'"{self.word()}"'))
            for _ in range(r.randint(0, 3))
        )
        return f"{self.ident()}.{self.word()}({args})"

    def statement(self, depth: int) -> list[str]:
        r, pad = self.rng, "    " * depth
        kind = r.randrange(9)
        if kind == 0 and depth < 4:
            head = f"{pad}if {self.ident()} is None or {self.ident()}.{self.word()} > "
            return [f"{head}{r.randint(0, 999)}:", *self.statement(depth + 1)]
        if kind == 1 and depth < 4:
            loop = f"{pad}for {self.word()} in {self.ident()}.{self.word()}s():"
            return [loop, *self.statement(depth + 1)]
        if kind == 2:
            return [f"{pad}return {self.expression()}"]
        if kind == 3:
            return [f"{pad}# {self.sentence()}"]
        if kind == 4:
            return [f'{pad}raise {self.camel()}Error(f"{self.word()} {{{self.ident()}!r}}")']
        if kind == 5:
            return [f"{pad}self.{self.ident()} = {self.ident()}"]
        if kind == 6:
            return [f'{pad}assert {self.ident()} == {r.randint(0, 99)}, "{self.word()}"']
        return [f"{pad}{self.ident()} = {self.expression()}"]

    def code(self, size: int) -> str:
        r = self.rng
        lines = [f"from ledgerkit.{r.choice(MODULES)} import {self.camel()}, {self.ident()}", ""]
        total = sum(len(x) + 1 for x in lines)
        while total < size:
            block = [f"def {self.ident()}({self.ident()}: int, {self.ident()}: str) -> bool:"]
            block.append(f'    """{self.sentence()}"""')
            for _ in range(r.randint(2, 8)):
                block.extend(self.statement(1))
            block.append("")
            lines.extend(block)
            total += sum(len(x) + 1 for x in block)
        return "\n".join(lines)[:size]

    def test_log(self, size: int) -> tuple[str, int]:
        r = self.rng
        lines = [
            "=" * 29 + " test session starts " + "=" * 30,
            "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0",
            "rootdir: /home/agent/workspace",
            "configfile: pyproject.toml",
            f"collected {r.randint(300, 900)} items",
            "",
        ]
        failed = 0
        while sum(len(x) + 1 for x in lines) < size - 300:
            if r.random() < 0.08:
                failed += 1
                lines.extend(self.failure())
            else:
                name = f"{self.test_path()}::test_{self.ident()}"
                lines.append(f"{name} PASSED".ljust(72) + f"[{r.randint(0, 100):3d}%]")
        passed = r.randint(300, 900)
        lines.append(
            f"{'=' * 10} {failed} failed, {passed} passed, {r.randint(0, 9)} warnings in "
            f"{r.uniform(3, 60):.2f}s {'=' * 10}"
        )
        code = 1 if failed else 0
        return f"exit code {code}\n" + "\n".join(lines), code

    def failure(self) -> list[str]:
        r = self.rng
        name = f"test_{self.ident()}"
        got, want = r.randint(0, 9999), r.randint(0, 9999)
        lines = ["_" * 20 + f" {name} " + "_" * 20, "", f"    def {name}() -> None:"]
        lines.extend("    " + s for s in self.statement(1))
        lines.append(f">       assert {self.expression()} == {want}")
        lines.append(f"E       assert {got} == {want}")
        lines.append(f"E        +  where {got} = {self.expression()}")
        lines.append("")
        lines.append(f"{self.test_path()}:{r.randint(10, 500)}: AssertionError")
        for _ in range(r.randint(0, 4)):
            lines.append(
                f"WARNING  ledgerkit.{r.choice(MODULES)}:{r.choice(MODULES)}.py:"
                f"{r.randint(10, 400)} {self.sentence()}"
            )
        return lines

    def small_output(self) -> tuple[str, str]:
        r = self.rng
        if r.random() < 0.5:
            lines = [f"{w}.py  {r.randint(200, 30000):,} bytes" for w in MODULES]
            return "list_dir", "\n".join(r.sample(lines, r.randint(3, len(lines))))
        hits = [
            f"{self.path()}:{r.randint(1, 400)}:    {self.statement(0)[0]}"
            for _ in range(r.randint(2, 16))
        ]
        return "shell_exec", "exit code 0\n" + "\n".join(hits)


class ScriptBuilder:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.text = Writer(self.rng)
        self.calls = 0

    def call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        self.calls += 1
        return ToolCall(id=f"call_{self.calls:05d}", name=name, arguments=json.dumps(arguments))

    def observations(self) -> list[Observation]:
        r, text = self.rng, self.text
        kind = r.random()
        if kind < 0.03:
            return []  # a reply without a tool call: the harness answers with CONTINUE
        if kind < 0.36:
            reads = 2 if r.random() < 0.15 else 1
            return [
                Observation(self.call("file_read", {"path": text.path()}), text.code(size))
                for size in (r.randint(2_000, 12_000) for _ in range(reads))
            ]
        if kind < 0.58:
            command = f"pytest -q {text.test_path()} -k {text.word()}"
            log, code = text.test_log(r.randint(10_000, 45_000))
            return [Observation(self.call("shell_exec", {"command": command}), log, code)]
        if kind < 0.86:
            path, content = text.path(), text.code(r.randint(150, 1_200))
            call = self.call("file_write", {"path": path, "content": content})
            return [Observation(call, f"wrote {len(content.encode()):,} bytes to {path}")]
        name, output = text.small_output()
        if name == "list_dir":
            return [Observation(self.call("list_dir", {"path": "src/ledgerkit"}), output)]
        grep = f"grep -rn {text.word()} src"
        return [Observation(self.call("shell_exec", {"command": grep}), output, 0)]

    def build(self) -> list[Step]:
        steps: list[Step] = []
        while self.calls < MIN_TOOL_CALLS:
            observations = self.observations()
            reply = AssistantMessage(
                content=self.text.reasoning(), tool_calls=tuple(o.call for o in observations)
            )
            steps.append(Step(reply, tuple(observations)))
        return steps


# --- the server and the harness around a scripted model -------------------------------------


class TokenServer:
    """Counts prompts the way `ouroboros.scripted` does: word-level, 4 tokens per message."""

    def __init__(self, schemas: list[dict[str, Any]]):
        self.tools_tokens = count_tokens({"tools": schemas})
        self._cache: dict[int, tuple[Message, int]] = {}

    def message_tokens(self, message: Message) -> int:
        # count_tokens is a sum over messages, so counting each message once is exact.
        hit = self._cache.get(id(message))
        if hit is not None and hit[0] is message:
            return hit[1]
        count = count_tokens({"messages": [to_wire(message)]})
        self._cache[id(message)] = (message, count)
        return count

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        return self.tools_tokens + sum(self.message_tokens(m) for m in messages)

    def completion_tokens(self, reply: AssistantMessage) -> int:
        return self.message_tokens(reply) - MESSAGE_OVERHEAD


class MemoryJournal:
    """Stands in for the journal: same run state, no disk (messages arrive via ReplaySession)."""

    def __init__(self) -> None:
        self.state = RunState()

    def record(self, kind: str, **fields: Any) -> None:
        if kind == "mask":
            self.state.masked.update(fields["call_ids"])

    def start_session(self, number: int, opening: list[Message]) -> None:
        state = self.state
        state.restarts += number > 1
        state.session, state.session_open, state.session_turns = number, True, 0
        state.messages, state.masked, state.started_calls = list(opening), set(), set()


class NullLog:
    def emit(self, kind: str, **fields: Any) -> None:
        pass

    def token_usage(self, **fields: Any) -> None:
        pass


class ReplaySession(Session):
    """The real Session with its journal write left out of `append`."""

    def append(self, message: Message) -> None:
        self.state.messages.append(message)
        if isinstance(message, AssistantMessage):
            self.state.session_turns += 1
            self.state.total_turns += 1
        self.view.append(message)


def default_settings() -> Settings:
    # model_construct: the defaults only, whatever OUROBOROS_* variables this shell has.
    return Settings.model_construct(
        llm=LLMSettings(),
        context=ContextSettings(),
        session=SessionSettings(),
        supervisor=SupervisorSettings(),
        paths=PathSettings(workspace=WORKSPACE, system_prompt=PROMPT_PATH),
    )


def output_cap(settings: Settings, budget: Budget) -> int:
    """The per-output cap `Supervisor.build_harness` gives the tool runner."""
    return min(
        settings.context.max_tool_output_bytes,
        int(budget.prompt_budget * TOOL_OUTPUT_SHARE * BYTES_PER_TOKEN),
    )


def system_message(limit: int) -> SystemMessage:
    return SystemMessage(
        content=prompts.system_prompt(INSTRUCTIONS, WORKSPACE, PROMPT_PATH, limit, True)
    )


_RESULTS: dict[tuple[str, int | None], ToolMessage] = {}


def tool_message(observation: Observation, cap: int | None) -> ToolMessage:
    """The result as the tool runner would append it: capped (with a spill marker) or not."""
    key = (observation.call.id, cap)
    if key not in _RESULTS:
        text = observation.text
        if cap is not None:
            data = text.encode()
            spill = None
            if len(data) > cap * SPILL_FACTOR:
                digest = hashlib.sha256(data).hexdigest()[:16]
                spill = f".outputs/{digest}-{observation.call.name}.txt"
            text = cap_output(text, cap, spill).text
        _RESULTS[key] = ToolMessage(
            tool_call_id=observation.call.id,
            name=observation.call.name,
            content=text,
            exit_code=observation.exit_code,
            arguments=observation.call.arguments,
        )
    return _RESULTS[key]


@dataclass
class Outcome:
    policy: Policy
    limit: int
    sessions: int = 0
    overflows: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    fills: list[float] = field(default_factory=list)
    intact: int = 0
    """Calls whose prompt held the newest observations exactly as the tools printed them."""
    eligible: int = 0
    """Calls where those observations were whole in the history and fit the protected window."""
    violations: int = 0
    """Eligible calls where one of them was masked anyway."""


class Replay:
    """One policy at one window: the script through sessions, restarts and carry-over."""

    def __init__(self, policy: Policy, limit: int, script: list[Step], server: TokenServer):
        self.policy, self.limit, self.script, self.server = policy, limit, script, server
        self.settings = s = default_settings()
        c = s.context
        budget = Budget.for_window(
            limit, c.soft_threshold, c.hard_threshold, s.llm.max_output_tokens, c.safety_margin
        )
        self.ledger = Ledger(budget, Calibration())
        self.cap = None if policy == "none" else output_cap(s, budget)
        self.journal = MemoryJournal()
        tools = ToolRunner(Workspace(WORKSPACE, PROMPT_PATH), 120, output_cap(s, budget), True)
        policy_mask = MaskPolicy(
            c.protected_observations, int(c.protected_max_fraction * limit), c.mask_min_tokens
        )
        self.harness = Harness(
            s,
            cast(LLMClient, None),  # never called: the script is the model
            tools,
            cast(Journal, self.journal),
            cast(EventLog, NullLog()),
            self.ledger,
            policy_mask,
        )
        self.system = system_message(limit)
        self.out = Outcome(policy, limit)
        self.step = 0
        self.recent: deque[Observation] = deque(maxlen=RECENT)
        self.track_recent = True

    # --- sessions ----------------------------------------------------------------------------

    def run(self) -> Outcome:
        end = len(self.script)
        previous: list[Message] = []
        reason = "fresh"
        while self.step < end:
            session = self.open_session(previous, reason)
            try:
                self.run_session(session, end)
            except SessionEnded as ended:
                reason = ended.reason
                if self.journal.state.session_turns == 0:
                    raise RuntimeError(f"{self.policy} at {self.limit}: stuck ({ended})") from None
            previous = list(self.journal.state.messages)
        return self.out

    def open_session(self, previous: list[Message], reason: str) -> ReplaySession:
        """What `Supervisor.next_session` and `start_session` lay out for a session."""
        self.out.sessions += 1
        number = self.out.sessions
        carried = self.carryover(previous) if number > 1 else []
        turns = sum(isinstance(m, AssistantMessage) for m in previous)
        first = (
            prompts.FIRST_MESSAGE
            if number == 1
            else prompts.restart_marker(number, turns, reason, len(carried))
        )
        opening: list[Message] = [
            self.system,
            UserMessage(content=first, origin="restart"),
            *carried,
        ]
        if isinstance(opening[-1], AssistantMessage) and not opening[-1].tool_calls:
            opening.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
        self.journal.start_session(number, opening)
        return ReplaySession(self.harness)

    def carryover(self, previous: list[Message]) -> list[Message]:
        """`Supervisor.carryover`, line for line."""
        ledger, c = self.ledger, self.settings.context

        def tokens(m: Message) -> int:
            return ledger.calibration.tokens(raw_estimate(m))

        fixed = tokens(self.system) + ledger.calibration.tokens(
            tools_estimate(self.harness.tools.schemas()) + MARKER_ALLOWANCE
        )
        room = ledger.budget.soft_line - fixed
        return select_carryover(previous, c.carryover_turns, room, tokens, c.mask_min_tokens)

    def run_session(self, session: ReplaySession, end: int) -> None:
        while self.step < end:
            step = self.script[self.step]
            self.call_model(session, step)
            session.append(step.reply)
            for observation in step.observations:
                session.append(tool_message(observation, self.cap))
                self.recent.append(observation)
            if not step.observations:
                session.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
            session.nudge_if_repeating(step.reply.tool_calls)
            self.step += 1
            self.manage(session)

    # --- one call ----------------------------------------------------------------------------

    def call_model(self, session: ReplaySession, step: Step) -> None:
        """`Session.call_model` against the counting server; raises SessionEnded on overflow."""
        for attempt in (1, 2):
            sent = list(session.view.view)
            raw_prompt = session.view.raw_total + session.schema_raw
            prompt = self.server.prompt_tokens(sent)
            completion = self.server.completion_tokens(step.reply)
            self.out.fills.append(prompt / self.limit)
            if prompt + completion <= self.limit:
                self.accepted(session, sent, prompt)
                self.ledger.measure(
                    raw_prompt, raw_estimate(step.reply), (prompt, completion, "server")
                )
                return
            self.out.overflows += 1
            if self.policy == "ours":
                # llama-server's refusal carries the exact count; the harness learns from it.
                self.ledger.calibrate_overflow(prompt, raw_prompt)
                if attempt == 1 and session.mask(
                    session.view.mask_all_but_protected(
                        self.harness.mask_policy, self.ledger.calibration
                    ),
                    reason="overflow",
                ):
                    continue
            raise SessionEnded("context_overflow", f"{prompt} + {completion} > {self.limit}")

    def accepted(self, session: ReplaySession, sent: list[Message], prompt: int) -> None:
        self.out.calls += 1
        self.out.prompt_tokens += prompt
        if self.track_recent and self.recent:
            self.check_recent(session, sent)

    def check_recent(self, session: ReplaySession, sent: list[Message]) -> None:
        in_prompt = {m.tool_call_id: m.content for m in sent if isinstance(m, ToolMessage)}
        intact = all(in_prompt.get(o.call.id) == o.text for o in self.recent)
        self.out.intact += intact
        # Eligible: whole in this session's history (not capped, not shrunk by a carry-over) and,
        # together, within the protected window's token bound, in real (server) tokens.
        whole = {
            m.tool_call_id: m
            for m in session.view.history
            if isinstance(m, ToolMessage) and m.tool_call_id in {o.call.id for o in self.recent}
        }
        if not all(o.call.id in whole and whole[o.call.id].content == o.text for o in self.recent):
            return
        cost = sum(self.server.message_tokens(m) for m in whole.values())
        if cost <= self.harness.mask_policy.protected_tokens:
            self.out.eligible += 1
            self.out.violations += not intact

    # --- the policies ------------------------------------------------------------------------

    def manage(self, session: ReplaySession) -> None:
        if self.policy == "ours":
            session.manage_context()
        elif self.policy == "truncate":
            self.end_at_hard(session)
        elif self.policy == "rust":
            if session.projected() > RUST_MASK_AT * self.limit:
                view = session.view
                oldest = (
                    m.tool_call_id
                    for m in view.history
                    if isinstance(m, ToolMessage) and m.tool_call_id not in view.masked_ids
                )
                chosen = list(islice(oldest, RUST_MASK_PER_ROUND))
                session.mask(chosen, reason="rust_original")
            self.end_at_hard(session)

    def end_at_hard(self, session: ReplaySession) -> None:
        projected = session.projected()
        if self.ledger.zone(projected) in ("hard", "over"):
            raise SessionEnded("context_full", f"next prompt ~{projected:,} tokens")


# --- derived figures --------------------------------------------------------------------------


def lower_bound(limit: int, script: list[Step], server: TokenServer) -> tuple[int, int, int]:
    """(unmaskable tokens, usable tokens per session, sessions they force at the least)."""
    s = default_settings()
    c = s.context
    budget = Budget.for_window(
        limit, c.soft_threshold, c.hard_threshold, s.llm.max_output_tokens, c.safety_margin
    )
    continue_tokens = server.message_tokens(UserMessage(content=prompts.CONTINUE))
    unmaskable = 0
    for step in script:
        unmaskable += server.message_tokens(step.reply)
        for observation in step.observations:
            full = tool_message(observation, None)
            unmaskable += min(server.message_tokens(full), server.message_tokens(masked(full)))
        if not step.observations:
            unmaskable += continue_tokens
    opening = UserMessage(content=prompts.FIRST_MESSAGE, origin="restart")
    fixed = (
        server.tools_tokens
        + server.message_tokens(system_message(limit))
        + server.message_tokens(opening)
    )
    usable = budget.prompt_budget - fixed
    return unmaskable, usable, math.ceil(unmaskable / usable)


def cycled(script: list[Step]) -> Iterator[Step]:
    """The script again and again, with fresh call ids so every round's results are distinct."""
    for lap in range(1_000):
        for step in script:
            observations = tuple(
                Observation(
                    o.call.model_copy(update={"id": f"{o.call.id}-{lap}"}), o.text, o.exit_code
                )
                for o in step.observations
            )
            reply = step.reply.model_copy(
                update={"tool_calls": tuple(o.call for o in observations)}
            )
            yield Step(reply, observations)


def time_context_work(script: list[Step], server: TokenServer, size: int) -> float:
    """Microseconds of harness context work per turn around `size` messages in one session.

    The window is sized so that the session never ends: its unmaskable part stays near half the
    window, so masking goes on every few turns as in any long session.
    """
    per_step = statistics.fmean(1 + max(len(s.observations), 1) for s in script)
    steps = list(islice(cycled(script), int((size + PERF_TURNS * per_step) / per_step) + 1))
    unmaskable, _, _ = lower_bound(UNLIMITED, steps, server)
    replay = Replay("ours", 2 * unmaskable, steps, server)
    session = replay.open_session([], "fresh")
    while len(session.view.history) < size - PERF_TURNS * per_step / 2:
        one_turn(replay, session, None)
    gc.collect()
    times: list[float] = []
    for _ in range(PERF_TURNS):
        one_turn(replay, session, times)
    return statistics.fmean(times) * 1e6


def one_turn(replay: Replay, session: ReplaySession, times: list[float] | None) -> None:
    """One model call's worth of context work, timed without the server's token counting."""
    step = replay.script[replay.step]
    start = time.perf_counter()
    sent = list(session.view.view)
    raw_prompt = session.view.raw_total + session.schema_raw
    middle = time.perf_counter()
    prompt = replay.server.prompt_tokens(sent)
    completion = replay.server.completion_tokens(step.reply)
    results = [tool_message(o, replay.cap) for o in step.observations]
    resume = time.perf_counter()
    replay.ledger.measure(raw_prompt, raw_estimate(step.reply), (prompt, completion, "server"))
    session.append(step.reply)
    for result in results:
        session.append(result)
    if not results:
        session.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
    session.manage_context()
    end = time.perf_counter()
    replay.step += 1
    if times is not None:
        times.append((middle - start) + (end - resume))


# --- report -----------------------------------------------------------------------------------


def window_label(limit: int) -> str:
    return "unlimited" if limit == UNLIMITED else f"{limit // 1024}K"


def row(outcome: Outcome, bound: int | None) -> str:
    fills = outcome.fills
    unlimited = outcome.limit == UNLIMITED
    mean = "–" if unlimited else f"{statistics.fmean(fills):.2f}"
    peak = "–" if unlimited else f"{max(fills):.2f}"
    sessions = f"{outcome.sessions}" + (f" (≥{bound})" if bound else "")
    share = outcome.intact / max(outcome.calls, 1)
    return (
        f"| {LABELS[outcome.policy]} | {window_label(outcome.limit)} | {sessions} | "
        f"{outcome.overflows} | {outcome.prompt_tokens:,} | {mean} | {peak} | {share:.0%} |"
    )


def verdict(ok: bool, text: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return ok


def main() -> int:
    started = time.perf_counter()
    script = ScriptBuilder(SEED).build()
    schemas = ToolRunner(Workspace(WORKSPACE, PROMPT_PATH), 120, 30_000, True).schemas()
    server = TokenServer(schemas)
    calls = sum(len(s.observations) for s in script)
    output = sum(len(o.text.encode()) for s in script for o in s.observations)
    print(
        f"Script (seed {SEED}): {len(script)} model replies, {calls} tool calls, "
        f"{output / 1e6:.2f} MB of tool output; prompt tokens counted word-level, not bytes/4.\n"
    )

    bounds = {limit: lower_bound(limit, script, server) for limit in WINDOWS}
    print("| Window | Unmaskable tokens | Usable per session | Lower bound on sessions |")
    print("|---|---:|---:|---:|")
    for limit, (unmaskable, usable, bound) in bounds.items():
        print(f"| {window_label(limit)} | {unmaskable:,} | {usable:,} | {bound} |")
    print()

    baseline = Replay("none", UNLIMITED, script, server).run()
    results: dict[tuple[Policy, int], Outcome] = {}
    print(
        "| Policy | Window | Sessions (lower bound) | Overflows | Prompt tokens | Mean fill "
        "| Peak fill | Last 3 results intact |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print(row(baseline, None))
    for policy in POLICIES:
        for limit in WINDOWS:
            results[policy, limit] = outcome = Replay(policy, limit, script, server).run()
            print(row(outcome, bounds[limit][2]))
    print()

    perf = {
        size: [time_context_work(script, server, size) for _ in range(PERF_REPEATS)]
        for size in PERF_SIZES
    }
    per_turn = {size: statistics.median(values) for size, values in perf.items()}
    ratio = per_turn[PERF_SIZES[1]] / per_turn[PERF_SIZES[0]]
    print("| Messages in the session | Context work per turn |")
    print("|---:|---:|")
    for size, micros in per_turn.items():
        print(f"| {size:,} | {micros:.0f} µs |")
    print(f"\nRatio {PERF_SIZES[1]:,}/{PERF_SIZES[0]:,}: {ratio:.2f}\n")

    ok = report_targets(results, baseline, bounds, per_turn, ratio)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


def report_targets(
    results: dict[tuple[Policy, int], Outcome],
    baseline: Outcome,
    bounds: dict[int, tuple[int, int, int]],
    per_turn: dict[int, float],
    ratio: float,
) -> bool:
    checks: list[bool] = []
    for policy in ("truncate", "ours", "rust"):
        counts = ", ".join(f"{window_label(w)} {results[policy, w].overflows}" for w in WINDOWS)
        zero = all(results[policy, w].overflows == 0 for w in WINDOWS)
        checks.append(verdict(zero, f"zero overflows, {LABELS[policy]}: {counts}"))
    for w in WINDOWS:
        ours, bound = results["ours", w], bounds[w][2]
        trunc = results["truncate", w]
        checks.append(
            verdict(
                ours.sessions <= 1.10 * bound,
                f"{window_label(w)}: ours {ours.sessions} sessions <= 1.10 x lower bound {bound}",
            )
        )
        checks.append(
            verdict(
                ours.sessions <= trunc.sessions / 3,
                f"{window_label(w)}: ours {ours.sessions} sessions <= 1/3 of truncation-only's "
                f"{trunc.sessions}",
            )
        )
        checks.append(
            verdict(
                ours.violations == 0,
                f"{window_label(w)}: ours kept the last 3 results intact at every call where they "
                f"fit the protected window ({ours.eligible - ours.violations}/{ours.eligible})",
            )
        )
        checks.append(
            verdict(
                ours.prompt_tokens <= baseline.prompt_tokens / 2,
                f"{window_label(w)}: ours {ours.prompt_tokens:,} prompt tokens <= half of "
                f"unlimited no-management's {baseline.prompt_tokens:,}",
            )
        )
    worst = max(per_turn.values())
    checks.append(verdict(worst < PERF_MAX_US, f"context work {worst:.0f} µs per turn < 1 ms"))
    checks.append(
        verdict(ratio <= PERF_MAX_RATIO, f"context work ratio {ratio:.2f} <= {PERF_MAX_RATIO}")
    )
    return all(checks)


if __name__ == "__main__":
    sys.exit(main())
