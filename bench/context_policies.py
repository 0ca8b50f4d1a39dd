"""Context policies compared on one long replayed session, through the real harness code.

A deterministic synthetic agent session (file reads of 2-12 KB, test runs with 10-45 KB of output,
small file writes, reasoning text between calls; 330 tool calls) is replayed by a scripted model
and scripted tools inside the real `Session.run` loop and the real supervisor's session start,
carry-over and session end (only the disk, the HTTP client and the tools are replaced). The
"server" counts prompt tokens word-level (`ouroboros.model.scripted.count_tokens`, not bytes/4),
reports them as usage, and refuses a request whose prompt plus reply does not fit the window: an
overflow (llama-server refuses it; Ollama would silently cut it). Each policy runs at 8K, 32K and
128K tokens, with restarts:

- no management: everything sent, uncapped; a restart only when a request overflows;
- truncation only: outputs capped as the harness caps them; a restart at the hard line;
- ours: the real `Session` unchanged (mask past the soft line down to soft - hysteresis outside
  the protected results, wind-down at the hard line, end at "over"; on a refusal, mask all but the
  protected results and retry once);
- Rust original: outputs capped; the 3 oldest unmasked results masked per round once the fill is
  over 70% of the window (no protected results, no minimum size); a restart at the hard line.

Per policy and window it prints the sessions (with the lower bound that the unmaskable part alone
forces, and the least sessions any policy needs that keeps the 3 newest results whole), overflows,
prompt tokens of the accepted requests, mean and peak fill (prompt / window over every request
sent, refused ones included), the share of calls whose prompt held the 3 newest tool results
exactly as the tools printed them (not capped, masked or left behind at a restart), the prompt
tokens a server with a prompt cache processes (whole messages shared with the request before are
cached; against the unmanaged agent with an unlimited window, which processes each token once),
and the breaks per session (requests that change what the one before sent). Then the
harness's own context work per turn (view, ledger, masking decision) at 1,000 and 5,000 messages
in one session, and PASS/FAIL against the targets of the issue.

Settings are the defaults of `ouroboros.ground.config` (the environment and config.toml are
ignored).

Run: .venv/bin/python bench/context_policies.py   (about a minute; exit status 1 if a target fails)
"""

from __future__ import annotations

import gc
import io
import json
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import anyio
from floor import StepTokens, sessions_keeping_recent
from rich.console import Console

from ouroboros.context.ledger import Counting
from ouroboros.context.mask import masked
from ouroboros.context.tokens import MESSAGE_OVERHEAD, Budget, CallFigures, tools_estimate
from ouroboros.ground import prompts
from ouroboros.ground.config import (
    ContextSettings,
    LLMSettings,
    PathSettings,
    SessionSettings,
    Settings,
    SupervisorSettings,
)
from ouroboros.ground.figures import WindowFigures
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.model.cache_check import common_prefix
from ouroboros.model.llm import Completion, ContextOverflow, Usage, to_wire
from ouroboros.model.scripted import count_tokens
from ouroboros.policy import policy as managed
from ouroboros.policy import room
from ouroboros.policy.policy import ContextPolicy, Decision, End
from ouroboros.policy.room import Rules, StepFigures, projected
from ouroboros.run.call_notices import call_figures
from ouroboros.run.session import Parts, Session
from ouroboros.run.supervisor import Supervisor
from ouroboros.run.window import mask_policy
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.records import Cut, EndReason, Mask, MaskReason, MessageRecord
from ouroboros.tools import ToolCaps, ToolOutcome, ToolRunner
from ouroboros.tools.results import Fit, shaped_result
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.tool import Output
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in, tool_output_cap

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
PERF_REPEATS = 5
PERF_MAX_RATIO = 1.5
PERF_MAX_US = 1_000.0

# Fixed paths (they are in the system prompt, whose tokens count): the supervisor reads the
# instructions from the file, as it does in a run.
BENCH_DIR = Path(tempfile.gettempdir()) / "ouroboros-context-policies"
WORKSPACE = BENCH_DIR / "workspace"
PROMPT_PATH = BENCH_DIR / "SYSTEM_PROMPT.md"
STATE_DIR = BENCH_DIR / ".ouroboros"
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


# --- the server, the model and the tools around the real harness -----------------------------


class TokenServer:
    """Counts prompts the way `ouroboros.model.scripted` does: word-level, 4 tokens per message."""

    def __init__(self, schemas: list[dict[str, Any]]):
        self.tools_tokens = count_tokens({"tools": schemas})
        self._counts: dict[int, int] = {}
        self._alive: dict[int, Message] = {}
        """Holds every counted message, so that no id in `_counts` can be reused."""

    def message_tokens(self, message: Message) -> int:
        # count_tokens is a sum over messages, so counting each message once is exact.
        key = id(message)
        if key not in self._counts:
            self._counts[key] = count_tokens({"messages": [to_wire(message)]})
            self._alive[key] = message
        return self._counts[key]

    def prompt_tokens(self, messages: Sequence[Message]) -> int:
        counts = self._counts
        for message in messages:
            if id(message) not in counts:
                self.message_tokens(message)
        return self.tools_tokens + sum(map(counts.__getitem__, map(id, messages)))

    def completion_tokens(self, reply: AssistantMessage) -> int:
        return self.message_tokens(reply) - MESSAGE_OVERHEAD


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
    """Calls where those were whole in the session and within the protected results' bound
    (real tokens)."""
    violations: int = 0
    """Eligible calls where one of them was masked anyway."""
    eligible_estimated: int = 0
    """The same, judged by the harness's own calibrated estimate at the time of the call."""
    violations_estimated: int = 0
    processed: int = 0
    """Prompt tokens a server with a prompt cache processes (bench/prefill.py)."""
    breaks: int = 0
    """Requests that changed what the one before sent, within a session."""
    sent: list[Message] = field(default_factory=list)


FINISH = AssistantMessage(
    content="Everything in the plan is done.",
    tool_calls=(ToolCall(id="call_finish", name="finish", arguments='{"summary": "done"}'),),
)


class ScriptedModel:
    """The model is the script; the server counts the prompt, refuses what does not fit."""

    def __init__(self, replay: Replay):
        self.r = replay
        self.next = 0

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> Completion:
        r = self.r
        reply = r.script[self.next].reply if self.next < len(r.script) else FINISH
        prompt = r.server.prompt_tokens(messages)
        completion = r.server.completion_tokens(reply)
        r.out.fills.append(prompt / r.limit)
        # The reply must fit too: llama-server refuses, vLLM refuses, Ollama cuts silently.
        if prompt + completion > r.limit:
            r.out.overflows += 1
            raise ContextOverflow(
                f"request ({prompt} tokens) exceeds the available context size ({r.limit} tokens)",
                prompt,
                r.limit,
            )
        r.out.calls += 1
        r.out.prompt_tokens += prompt
        self.count_prefill(messages, prompt)
        if r.track_recent and r.recent:
            r.check_recent(messages)
        self.next += 1
        finish = "tool_calls" if reply.tool_calls else "stop"
        return Completion(reply, finish, Usage(prompt, completion, "server"))

    def count_prefill(self, messages: list[Message], prompt: int) -> None:
        """As a server with a prompt cache: the prompt less the messages it shares at its start
        with the one before (a restart changes the opening message: not a break)."""
        out, before = self.r.out, self.r.out.sent
        same = common_prefix(before, messages)
        out.processed += prompt - (self.r.server.prompt_tokens(messages[:same]) if same else 0)
        out.breaks += bool(before) and same < len(before) and same > 1
        out.sent = list(messages)


def tool_runner(cap: int) -> ToolRunner:
    """The built-in tools as a run without a state folder offers them."""
    return ToolRunner(
        Workspace(WORKSPACE, PROMPT_PATH), built_in(ShellExec(120), None, True), ToolCaps(cap)
    )


class ScriptedTools:
    """The tools print what the script says; the output is capped as `ToolRunner` caps it."""

    def __init__(self, replay: Replay, cap: int | None):
        self.runner = tool_runner(cap or 1 << 30)
        self.r = replay
        self.cap = cap
        self.observations = {o.call.id: o for s in replay.script for o in s.observations}

    def schemas(self, session: int | None = None) -> list[dict[str, Any]]:
        return self.runner.schemas(session)

    async def run(
        self, call: ToolCall, room: Fit | None = None, seen: frozenset[str] = frozenset()
    ) -> ToolOutcome:
        if call.name == "finish":
            message = ToolMessage(tool_call_id=call.id, name=call.name, content="run finished")
            return ToolOutcome(message, 0.0, 12, finish_summary="done")
        observation = self.observations[call.id]
        self.r.recent.append(observation)
        size = len(observation.text.encode())
        if room is None or self.r.policy != "ours":
            return ToolOutcome(tool_message(observation, self.cap), 0.0, size)
        # The real session shows less near the top of the window.
        output = Output(observation.text, observation.exit_code)
        cap = self.runner.caps.max_output_bytes
        return ToolOutcome(shaped_result(call, output, cap, room), 0.0, size)

    async def save_whole(self, results: list[ToolMessage]) -> None:
        pass  # the whole outputs are the script's: nothing to save

    def end_session(self) -> None:
        pass

    def close(self) -> None:
        pass


_RESULTS: dict[tuple[str, int | None], ToolMessage] = {}


def tool_message(observation: Observation, cap: int | None) -> ToolMessage:
    """The result as `ToolRunner.run` makes it with room to spare: capped, or not at all."""
    key = (observation.call.id, cap)
    if key not in _RESULTS:
        output = Output(observation.text, observation.exit_code)
        _RESULTS[key] = shaped_result(observation.call, output, cap or 1 << 40, None)
    return _RESULTS[key]


# --- the policies: the harness's own, or another context management --------------------------


def refused_ends_session(state: RunState, rules: Rules) -> list[Mask | Cut]:
    """No response to an overflow: a refused prompt just ends the session."""
    return []


def end_at_hard(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    now = projected(state, rules)
    if rules.budget.zone(now) in ("hard", "over"):
        return [End(EndReason.CONTEXT_FULL, f"next prompt ~{now:,} tokens")]
    return []


def rust_masking(state: RunState, rules: Rules, step: StepFigures) -> list[Decision]:
    """The 3 oldest unmasked results, once the fill is over 70% of the window."""
    if projected(state, rules) <= RUST_MASK_AT * rules.budget.limit:
        return []
    view = state.view
    oldest = (
        m.tool_call_id
        for m in view.history
        if isinstance(m, ToolMessage) and m.tool_call_id not in view.masked_ids
    )
    chosen = list(islice(oldest, RUST_MASK_PER_ROUND))
    decision = managed.mask(state, rules, chosen, MaskReason.SOFT_THRESHOLD)
    return [decision] if decision else []


CONTEXT_POLICIES: dict[Policy, ContextPolicy] = {
    "none": ContextPolicy((), refused_ends_session),
    "truncate": ContextPolicy((end_at_hard,), refused_ends_session),
    "ours": managed.MANAGED,
    "rust": ContextPolicy((rust_masking, end_at_hard), refused_ends_session),
}


def default_settings() -> Settings:
    # model_construct: the defaults only, whatever OUROBOROS_* variables this shell has.
    return Settings.model_construct(
        llm=LLMSettings(),
        context=ContextSettings(),
        session=SessionSettings(),
        supervisor=SupervisorSettings(),
        paths=PathSettings(workspace=WORKSPACE, system_prompt=PROMPT_PATH, state_dir=STATE_DIR),
    )


def budget_for(settings: Settings, limit: int) -> Budget:
    c = settings.context
    return Budget.for_window(
        limit, c.soft_threshold, c.hard_threshold, settings.llm.max_output_tokens, c.safety_margin
    )


def system_message(limit: int) -> SystemMessage:
    return SystemMessage(content=prompts.system_prompt(INSTRUCTIONS, limit))


class Replay:
    """One policy at one window: the script through the real supervisor's sessions, restarts
    and carry-over, with the journal in memory and the model and tools scripted."""

    def __init__(self, policy: Policy, limit: int, script: list[Step], server: TokenServer):
        self.policy, self.limit, self.script, self.server = policy, limit, script, server
        self.settings = s = default_settings()
        budget = budget_for(s, limit)
        # What `build_harness` gives the tool runner and the session.
        self.cap = None if policy == "none" else tool_output_cap(s, budget)
        self.journal = Journal(None)
        self.mask_policy = mask_policy(s.context, budget)
        self.out = Outcome(policy, limit)
        self.recent: deque[Observation] = deque(maxlen=RECENT)
        self.track_recent = True
        self.model = ScriptedModel(self)
        tools = ScriptedTools(self, self.cap)
        c = s.context
        rules = Rules(
            budget,
            self.mask_policy,
            c,
            s.session.wind_down_turns,
            s.llm.max_output_tokens,
            tools_estimate(tools.schemas()),
        )
        self.parts = Parts(
            s, self.model, tools, self.journal, rules, Counting(limit), CONTEXT_POLICIES[policy]
        )
        window = WindowFigures(
            server="scripted",
            detail="bench",
            context_limit=limit,
            prompt_budget=budget.prompt_budget,
            soft_line=budget.soft_line,
            hard_line=budget.hard_line,
            frame_tokens=MESSAGE_OVERHEAD,
        )
        self.log = EventLog(STATE_DIR, Terminal(Console(file=io.StringIO())))
        self.supervisor = Supervisor(self.parts, window)

    async def run(self) -> Outcome:
        await self.supervisor.run()
        self.log.close()
        self.out.sessions = self.journal.state.session
        return self.out

    def check_recent(self, sent: list[Message]) -> None:
        in_prompt = {m.tool_call_id: m.content for m in sent if isinstance(m, ToolMessage)}
        intact = all(in_prompt.get(o.call.id) == o.text for o in self.recent)
        self.out.intact += intact
        # Eligible: whole in this session (not capped, not cut for room, not shrunk by a
        # carry-over) and together within the protected results' bound.
        ids = {o.call.id for o in self.recent}
        whole = [
            m
            for m in self.journal.state.messages
            if isinstance(m, ToolMessage) and m.tool_call_id in ids
        ]
        if len(whole) != len(self.recent) or any(
            m.content != o.text or m.room_bytes is not None  # cut for room: shown cut
            for m, o in zip(whole, self.recent, strict=True)
        ):
            return
        bound = self.mask_policy.protected_tokens
        if sum(self.server.message_tokens(m) for m in whole) <= bound:
            self.out.eligible += 1
            self.out.violations += not intact
        calibration = self.journal.state.ledger.calibration
        if sum(calibration.message_tokens(m) for m in whole) <= bound:
            self.out.eligible_estimated += 1
            self.out.violations_estimated += not intact


# --- derived figures --------------------------------------------------------------------------


def session_fixed_tokens(limit: int, server: TokenServer) -> int:
    """What every session's prompt holds before any turn: tool schemas, system prompt, opening."""
    opening = UserMessage(content=prompts.first_message(None), origin="restart")
    system = server.message_tokens(system_message(limit))
    return server.tools_tokens + system + server.message_tokens(opening)


def lower_bound(limit: int, script: list[Step], server: TokenServer) -> tuple[int, int, int]:
    """(unmaskable tokens, usable tokens per session, sessions they force at the least)."""
    budget = budget_for(default_settings(), limit)
    continue_tokens = server.message_tokens(UserMessage(content=prompts.CONTINUE))
    unmaskable = 0
    for step in script:
        unmaskable += server.message_tokens(step.reply)
        for observation in step.observations:
            full = tool_message(observation, None)
            unmaskable += min(server.message_tokens(full), server.message_tokens(masked(full)))
        if not step.observations:
            unmaskable += continue_tokens
    usable = budget.prompt_budget - session_fixed_tokens(limit, server)
    return unmaskable, usable, math.ceil(unmaskable / usable)


def floor_keeping_recent(limit: int, script: list[Step], server: TokenServer) -> int:
    """`floor.sessions_keeping_recent` for this script: results at the harness's cap, its own
    placeholders, word-level counts."""
    settings = default_settings()
    budget = budget_for(settings, limit)
    cap, policy = tool_output_cap(settings, budget), mask_policy(settings.context, budget)
    continue_tokens = server.message_tokens(UserMessage(content=prompts.CONTINUE))

    def figures(step: Step) -> StepTokens:
        results = [tool_message(o, cap) for o in step.observations]
        return StepTokens(
            prompt=server.message_tokens(step.reply) + (0 if results else continue_tokens),
            completion=server.completion_tokens(step.reply),
            results=tuple(
                (server.message_tokens(r), server.message_tokens(masked(r))) for r in results
            ),
        )

    fixed = session_fixed_tokens(limit, server)
    return sessions_keeping_recent(map(figures, script), fixed, budget.prompt_budget, policy)


def cycled(script: list[Step]) -> Iterator[Step]:
    """The script again and again, with fresh call ids so every lap's results are distinct."""
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


PARTS = ("view copy", "fold", "manage_context")


async def time_context_work(
    script: list[Step], server: TokenServer, size: int
) -> list[dict[str, float]]:
    """Seconds of each part of the harness's context work, turn by turn, around `size` messages
    in one session.

    The window is sized so that the session never ends: its unmaskable part stays near half the
    window, so masking goes on every few turns as in any long session.
    """
    per_step = statistics.fmean(1 + max(len(s.observations), 1) for s in script)
    steps = list(islice(cycled(script), int((size + PERF_TURNS * per_step) / per_step) + 1))
    unmaskable, _, _ = lower_bound(UNLIMITED, steps, server)
    replay = Replay("ours", 2 * unmaskable, steps, server)
    replay.track_recent = False
    await replay.supervisor.next_session()
    session = Session(replay.parts)
    while len(replay.journal.state.view.history) < size - PERF_TURNS * per_step / 2:
        await one_turn(replay, session, None)
    # As timeit does: the collector's full passes cost what the whole heap holds (the bench's
    # own script and counts included), whichever code happens to trigger them.
    gc.collect()
    gc.disable()
    turns: list[dict[str, float]] = []
    try:
        for _ in range(PERF_TURNS):
            turns.append(dict.fromkeys(PARTS, 0.0))
            await one_turn(replay, session, turns[-1])
    finally:
        gc.enable()
    return turns


def per_turn_micros(runs: list[list[dict[str, float]]]) -> dict[str, float]:
    # Every run replays the very same turns, so the fastest run of each turn is the code's own
    # cost, without what else the machine was doing (a mean of them keeps masking's bursts).
    result = {
        part: statistics.fmean(min(run[i][part] for run in runs) for i in range(PERF_TURNS)) * 1e6
        for part in PARTS
    }
    result["total"] = sum(result[part] for part in PARTS)
    return result


async def one_turn(replay: Replay, session: Session, spent: dict[str, float] | None) -> None:
    """One turn's context work, timed apart from the server's counting."""
    step = replay.script[replay.model.next]
    replay.model.next += 1
    results = [tool_message(o, replay.cap) for o in step.observations]
    messages: list[Message] = [step.reply, *results]
    if not results:
        messages.append(UserMessage(content=prompts.CONTINUE, origin="continue"))
    state, rules = replay.journal.state, replay.parts.rules
    clock = time.perf_counter
    t0 = clock()
    sent = state.view.messages()  # what `Session.call_model` hands the model
    raw_prompt = room.raw_prompt(state, rules)
    t1 = clock()
    prompt = replay.server.prompt_tokens(sent)
    completion = replay.server.completion_tokens(step.reply)
    served = Completion(step.reply, "tool_calls", Usage(prompt, completion, "server"))
    t2 = clock()
    turn = state.session_turns + 1
    usage: CallFigures | None = call_figures(
        state, rules, replay.parts.counting, served, raw_prompt, turn
    )
    for message in messages:
        # The fold of each record: the view and, with a reply, the ledger.
        replay.journal.append(MessageRecord(session=state.session, message=message, usage=usage))
        usage = None
    t3 = clock()
    await session.after_step()
    t4 = clock()
    if spent is not None:
        spent["view copy"] += t1 - t0
        spent["fold"] += t3 - t2
        spent["manage_context"] += t4 - t3


# --- report -----------------------------------------------------------------------------------


def window_label(limit: int) -> str:
    return "unlimited" if limit == UNLIMITED else f"{limit // 1024}K"


def row(outcome: Outcome, bound: int | None, append_only: int) -> str:
    fills = outcome.fills
    unlimited = outcome.limit == UNLIMITED
    mean = "–" if unlimited else f"{statistics.fmean(fills):.2f}"
    peak = "–" if unlimited else f"{max(fills):.2f}"
    sessions = f"{outcome.sessions}" + (f" (≥{bound})" if bound else "")
    share = outcome.intact / max(outcome.calls, 1)
    return (
        f"| {LABELS[outcome.policy]} | {window_label(outcome.limit)} | {sessions} | "
        f"{outcome.overflows} | {outcome.prompt_tokens:,} | {mean} | {peak} | {share:.0%} | "
        f"{outcome.processed:,} ({outcome.processed / append_only:.2f}) | "
        f"{outcome.breaks / max(outcome.sessions, 1):.1f} |"
    )


def verdict(ok: bool, text: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return ok


async def main() -> int:
    started = time.perf_counter()
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    WORKSPACE.mkdir(parents=True)
    PROMPT_PATH.write_text(INSTRUCTIONS)
    script = ScriptBuilder(SEED).build()
    schemas = tool_runner(30_000).schemas()
    server = TokenServer(schemas)
    calls = sum(len(s.observations) for s in script)
    output = sum(len(o.text.encode()) for s in script for o in s.observations)
    print(
        f"Script (seed {SEED}): {len(script)} model replies, {calls} tool calls, "
        f"{output / 1e6:.2f} MB of tool output; prompt tokens counted word-level, not bytes/4.\n"
    )

    bounds = {limit: lower_bound(limit, script, server) for limit in WINDOWS}
    floors = {limit: floor_keeping_recent(limit, script, server) for limit in WINDOWS}
    print(
        "| Window | Unmaskable tokens | Usable per session | Lower bound on sessions "
        f"| Least sessions keeping the {RECENT} newest results whole |"
    )
    print("|---|---:|---:|---:|---:|")
    for limit, (unmaskable, usable, bound) in bounds.items():
        label = window_label(limit)
        print(f"| {label} | {unmaskable:,} | {usable:,} | {bound} | {floors[limit]} |")
    print()

    baseline = await Replay("none", UNLIMITED, script, server).run()
    results: dict[tuple[Policy, int], Outcome] = {}
    print(
        "| Policy | Window | Sessions (lower bound) | Overflows | Prompt tokens | Mean fill "
        "| Peak fill | Last 3 results intact | Processed (÷ append-only) | Breaks / session |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(row(baseline, None, baseline.processed))
    for policy in POLICIES:
        for limit in WINDOWS:
            results[policy, limit] = outcome = await Replay(policy, limit, script, server).run()
            print(row(outcome, bounds[limit][2], baseline.processed))
    print()

    per_turn: dict[int, dict[str, float]] = {}
    for size in PERF_SIZES:
        runs = [await time_context_work(script, server, size) for _ in range(PERF_REPEATS)]
        per_turn[size] = per_turn_micros(runs)
    small, large = (per_turn[size] for size in PERF_SIZES)
    ratio = large["total"] / small["total"]
    print("| Messages in the session | Context work per turn | " + " | ".join(PARTS) + " |")
    print("|---:|---:|" + "---:|" * len(PARTS))
    for size, parts in per_turn.items():
        cells = " | ".join(f"{parts[p]:.0f} µs" for p in PARTS)
        print(f"| {size:,} | {parts['total']:.0f} µs | {cells} |")
    print(f"\nRatio {PERF_SIZES[1]:,}/{PERF_SIZES[0]:,}: {ratio:.2f}.\n")

    ok = report_targets(results, baseline, floors, per_turn, ratio)
    for w in WINDOWS:
        print(
            f"note  {window_label(w)}: the issue's lower bound is {bounds[w][2]}; a policy that "
            f"keeps the {RECENT} newest results whole needs at least {floors[w]} sessions with "
            f"nothing carried over (ours: {results['ours', w].sessions}, with carry-over)"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0 if ok else 1


def report_targets(
    results: dict[tuple[Policy, int], Outcome],
    baseline: Outcome,
    floors: dict[int, int],
    per_turn: dict[int, dict[str, float]],
    ratio: float,
) -> bool:
    checks: list[bool] = []
    for policy in ("truncate", "ours", "rust"):
        counts = ", ".join(f"{window_label(w)} {results[policy, w].overflows}" for w in WINDOWS)
        zero = all(results[policy, w].overflows == 0 for w in WINDOWS)
        checks.append(verdict(zero, f"zero overflows, {LABELS[policy]}: {counts}"))
    for w in WINDOWS:
        ours, floor = results["ours", w], floors[w]
        trunc = results["truncate", w]
        checks.append(
            verdict(
                ours.sessions <= 1.10 * floor,
                f"{window_label(w)}: ours {ours.sessions} sessions <= 1.10 x the {floor} any "
                f"policy keeping the {RECENT} newest results whole needs",
            )
        )
        checks.append(
            verdict(
                ours.sessions <= trunc.sessions / 3,
                f"{window_label(w)}: ours {ours.sessions} sessions <= 1/3 of truncation-only's "
                f"{trunc.sessions}",
            )
        )
        kept = ours.eligible - ours.violations
        kept_estimated = ours.eligible_estimated - ours.violations_estimated
        checks.append(
            verdict(
                ours.violations == 0,
                f"{window_label(w)}: ours kept the last 3 results intact wherever they fit the "
                f"protected results' bound: {kept}/{ours.eligible} calls in server tokens "
                f"({kept_estimated}/{ours.eligible_estimated} by the harness's own estimate)",
            )
        )
        checks.append(
            verdict(
                ours.prompt_tokens <= baseline.prompt_tokens / 2,
                f"{window_label(w)}: ours {ours.prompt_tokens:,} prompt tokens <= half of "
                f"unlimited no-management's {baseline.prompt_tokens:,}",
            )
        )
    worst = max(parts["total"] for parts in per_turn.values())
    checks.append(verdict(worst < PERF_MAX_US, f"context work {worst:.0f} µs per turn < 1 ms"))
    checks.append(
        verdict(ratio <= PERF_MAX_RATIO, f"context work ratio {ratio:.2f} <= {PERF_MAX_RATIO}")
    )
    return all(checks)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
