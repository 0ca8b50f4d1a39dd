"""Real agent trajectories replayed through the real `python -m ouroboros run`, at real windows.

Each trajectory (JSONL: step, thought, action, observation, returncode; the files and folders
given, a folder meaning every `*.jsonl` in it, by default ../shared/trajectories; held-out ones
kept outside the repository run the same way) is the model behind a loopback llama-server look-alike
(`ouroboros.model.scripted.ScriptedServer`). Each reply is the first step not yet delivered (its
result has not appeared whole in a request, or for a text-only step the reply itself), so a
restart goes on with the trajectory and a step the harness lost is served again; after the last
one, `finish`.
A reply is the step's thought and a `shell_exec` call of its recorded command; a `BASH_ENV` script
prints the recorded output and exits with the recorded code before the command can run. A reply
that would not fit `llm.max_output_tokens` keeps the head of its thought (a call that alone does
not fit is cut there, as a server stops). The server counts tokens with llama-server's
`/apply-template` and `/tokenize` (Gemma 3 270M; calls and tool schemas rendered as JSON), else
(or with --bytes4) bytes/4 + 4 per message, and refuses a request whose prompt plus reply exceeds
the window (HTTP 400 `exceed_context_size_error`). The harness runs with its defaults: the window
set, `shell_timeout_s` 30, and 3 x steps + 30 turns at most (a guard).

Run:  .venv/bin/python bench/replay.py [PATHS...] [--windows 8192 32768] [--bytes4] [--keep DIR]
About 35 s for the three trajectories at two windows on 2 cores; exit status 1 if a target fails.
--keep DIR keeps each run's project (`python -m ouroboros tail --state DIR/NAME/.ouroboros`);
its path is in the system prompt, so another folder can move the figures a little.
To replay another version of the harness, put its folder first on PYTHONPATH.

First the figures issue 23 judges a run by, per run and in total, each with its target and PASS or
FAIL (bench/issue_table.py): restarts that lose the agent's last step (0); results the model
never saw (0); restarts after a completed wind-down (its message, then every reply it asked for:
at least 95% in every run); sessions divided by the equal-promises floor (at most 1.1; the plain
keep-3 floor's ratio beside it); at 32K and larger windows, the prefill divided by an unmanaged
agent's (at most 1.2) and cache breaks per session (at most 3; smaller windows show theirs
without a verdict; the total counts the 32K runs); overflows (0).

The two floors (bench/floor.py), both from the trajectory as served, counted by the real
tokenizer, with the harness's default protection (`protected_observations` newest results whole
within `protected_max_fraction` of the budget, the rest as placeholders) and every prompt's
fixed part (tool schemas, system prompt, opening message) as in the run's first request:
- keep-3: the fewest sessions any policy keeping the newest results whole needs, with exact
  counts, everything else masked at once, nothing carried over; a session ends when the next
  reply would not fit the prompt budget.
- equal promises: the same, and the wind-down the harness promises, placed by an oracle that
  knows the replies to come: every session but the last ends with the wind-down message (its
  real size) and `session.wind_down_turns` of the trajectory's own replies (their real sizes,
  not a percentile), each fitting the budget, the results of each cut to what the harness
  shows at least (1 KB, head and tail), the newest results still whole; the wind-down's last
  step opens the next session (reply and whole results, carried, not generated again), as its
  results are seen there first. Each session winds down as late as its replies fit (greedy:
  a later wind-down leaves the next session less to hold).

Columns, per trajectory and window:
- sessions (floors): sessions run; the keep-3 and the equal-promises floor;
- overflows: requests refused because prompt + reply exceeded the window;
- lost at restart: restarts whose first request lacked the previous session's last step (its reply
  and every result, none a placeholder); the second table says why, and counts results carried
  but shortened;
- never shown: tool results in the journal never sent whole (in brackets: sent as placeholders);
- wind-downs complete: followed by all `session.wind_down_turns` replies (not counting a session
  the run ended by finish);
- ended w/o wind-down: sessions but the last with no wind-down (none is excused: as the harness
  gets it, no step is bigger than max_output_tokens plus the tool cap);
- price error: |harness's price - real tokens| / real of shell results of 100+ tokens, p50 / p90
  (from `result_tokens` of `tool_call` events, once the harness logs them);
- placeholders naming all: distinct placeholders sent that name every part of the second table: the
  command (30 chars), `exit N`, lines, bytes, the output's first and last non-blank lines
  (20 chars), where to read it again; and the share that quote an empty line (`""`);
- served again: replies for a step already served; shortened: replies cut to fit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from floor import StepTokens, WindDownTokens, sessions_keeping_recent, sessions_with_promises
from issue_table import Result, issue_table
from prefill import prefill

import ouroboros
from ouroboros import prompts
from ouroboros.config import Settings
from ouroboros.context.mask import masked
from ouroboros.context.room import LONGEST_WIND_DOWN, MIN_OUTPUT_BYTES
from ouroboros.context.tokens import Budget
from ouroboros.context.truncate import shown
from ouroboros.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    to_wire,
)
from ouroboros.model.scripted import Reply, ScriptedServer, quick_config
from ouroboros.run.jsonl import JsonlReader, read_objects
from ouroboros.run.records import (
    JOURNAL_RECORD,
    JournalRecord,
    MessageRecord,
    SessionStart,
    WindDown,
)
from ouroboros.tools.builtin import Output
from ouroboros.tools.results import shaped_result
from ouroboros.wiring import mask_policy, tool_output_cap

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TRAJECTORIES = PROJECT_ROOT.parent / "shared" / "trajectories"
WINDOWS = (8_192, 32_768)
DEFAULTS = Settings.model_construct()
"""The harness's defaults, whatever OUROBOROS_* variables this shell has."""
MAX_OUTPUT = DEFAULTS.llm.max_output_tokens
"""The tool runner saves an output over this many times the cap, and says where."""
PLACEHOLDER = re.compile(r"\[\w+ result masked")
PARTS = ("command", "exit", "lines", "bytes", "first", "last", "where")


# --- token counts -----------------------------------------------------------------------------


def flat(wire: dict[str, Any]) -> dict[str, str]:
    """A message as a template renders it, its tool calls written out as JSON."""
    calls = "".join(
        f'\n<tool_call>{{"name": "{c["function"]["name"]}", "arguments": '
        f"{c['function']['arguments']}}}</tool_call>"
        for c in wire.get("tool_calls") or []
    )
    return {"role": wire["role"], "content": (wire.get("content") or "") + calls}


class ByteTokens:
    """bytes/4 and 4 per message: the stand-in for a real tokenizer."""

    frame = 0
    """Tokens of a prompt without messages (BOS, the generation prompt)."""

    def __init__(self, source: str = "bytes/4"):
        self.source = source

    def text(self, text: str) -> int:
        return len(text.encode()) // 4

    def message(self, wire: dict[str, Any]) -> int:
        return self.text(flat(wire)["content"]) + 4

    def endpoint(self, path: str, body: dict[str, Any]) -> Any:
        """llama-server's own template and tokenizer endpoints: none without a real tokenizer."""
        return None

    def prompt(self, body: dict[str, Any]) -> int:
        tools = self.text(json.dumps(body["tools"])) if body.get("tools") else 0
        return self.frame + tools + sum(self.message(m) for m in body.get("messages", []))


class RealTokens(ByteTokens):
    """llama-server's counts, per message and cached: what a message adds to a prompt when it is
    not the last one (a last assistant message renders as a prefill). That a prompt is the sum of
    its messages is checked at the start."""

    ANCHOR = {"role": "user", "content": "x"}

    def __init__(self, root: str):
        super().__init__("llama-server /apply-template + /tokenize")
        self.root, self._texts, self._messages = root, dict[str, int](), dict[str, int]()
        self.alone = self._templated([self.ANCHOR])
        self.frame = 2 * self.alone - self._templated([self.ANCHOR, self.ANCHOR])
        call = Served("w", '{"command": "ls"}', 0, 0).wire()
        tool = {"role": "tool", "content": "exit code 0\nfile"}
        sample = [{"role": "system", "content": "s"}, self.ANCHOR, flat(call), tool]
        if self._templated(sample) != self.prompt({"messages": sample}):
            print("warning: a prompt does not count the sum of its messages' tokens")

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self.root + path, json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.load(answer)

    def endpoint(self, path: str, body: dict[str, Any]) -> Any:
        """What the real llama-server answers on `/apply-template` and `/tokenize`."""
        return self._post(path, body) if path in ("/apply-template", "/tokenize") else None

    def _tokens(self, text: str, special: bool) -> int:
        return len(self._post("/tokenize", {"content": text, "add_special": special})["tokens"])

    def _templated(self, messages: list[dict[str, str]]) -> int:
        prompt = self._post("/apply-template", {"messages": messages})["prompt"]
        return self._tokens(prompt, special=True)

    def text(self, text: str) -> int:
        if text not in self._texts:
            self._texts[text] = self._tokens(text, special=False)
        return self._texts[text]

    def message(self, wire: dict[str, Any]) -> int:
        key = json.dumps(plain := flat(wire))
        if key not in self._messages:
            self._messages[key] = self._templated([plain, self.ANCHOR]) - self.alone
        return self._messages[key]


@contextmanager
def tokenizer(forced_bytes: bool) -> Iterator[ByteTokens]:
    """The real tokenizer when llama-server is installed, else bytes/4, saying why."""
    sys.path.insert(0, str(PROJECT_ROOT / "scripts"))
    from real_server import RealServer, RealServerError, binary_path

    why = "forced by --bytes4" if forced_bytes else None
    if why is None and binary_path() is None:
        why = "llama-server is not installed: python scripts/real_server.py install"
    if why is None:
        try:
            with RealServer(ctx=2048) as server:
                yield RealTokens(server.root_url)
                return
        except RealServerError as e:
            why = f"llama-server did not start: {e}"
    yield ByteTokens(f"bytes/4 + 4 per message, NOT a real tokenizer ({why})")


# --- the trajectory as the model --------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    thought: str
    action: str | None
    observation: str
    returncode: int

    @property
    def output(self) -> str:
        """The result as `shell_exec` words it."""
        return f"exit code {self.returncode}\n{self.observation}"


def load_steps(path: Path) -> list[Step]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [
        Step(r["thought"] or "", r["action"], r["observation"] or "", r["returncode"] or 0)
        for r in rows
    ]


@dataclass(frozen=True)
class Served:
    """A step's reply as the server sends it."""

    text: str
    arguments: str | None
    """The `shell_exec` call's JSON arguments; None: no call."""
    completion: int
    whole_completion: int
    """Before the reply was shortened to fit `max_output_tokens`."""
    call_cut: bool = False
    """The call alone did not fit, so it stops at max_output_tokens, as a server stops."""

    def wire(self, call_id: str = "c") -> dict[str, Any]:
        function = {"name": "shell_exec", "arguments": self.arguments}
        call = {"id": call_id, "type": "function", "function": function}
        calls = [] if self.arguments is None else [call]
        return {"role": "assistant", "content": self.text, "tool_calls": calls}


class Trajectory:
    """The model: serves the first step not yet delivered; refuses what does not fit."""

    def __init__(self, steps: list[Step], tokens: ByteTokens, window: int, folder: Path):
        self.steps, self.tokens, self.window, self.folder = steps, tokens, window, folder
        self.served: dict[int, Served] = {}
        self.serves: Counter[int] = Counter()
        self.call_steps: dict[str, int] = {}
        self.text_steps: dict[str, int] = {}
        self.delivered: set[int] = set()
        self.requests = self.overflows = 0
        for index, step in enumerate(steps):
            (folder / f"{index}.out").write_text(step.observation)
            (folder / f"{index}.code").write_text(str(step.returncode))

    def reply(self, index: int) -> Served:
        """The step's reply, its thought cut to the head that fits max_output_tokens."""
        if index not in self.served:
            step, count = self.steps[index], self.tokens.text
            arguments = None if step.action is None else json.dumps({"command": step.action})
            calls = count(flat(Served("", arguments, 0, 0).wire())["content"]) if arguments else 0
            whole = completion = count(step.thought) + calls
            keep = len(step.thought)
            if arguments and calls >= MAX_OUTPUT:
                cut = arguments[: len(arguments) * MAX_OUTPUT // calls]
                self.served[index] = Served("", cut, MAX_OUTPUT, whole, call_cut=True)
                return self.served[index]
            while completion >= MAX_OUTPUT:
                keep = int(keep * min(0.95, (MAX_OUTPUT - calls) / completion))
                completion = count(step.thought[:keep]) + calls
            self.served[index] = Served(step.thought[:keep], arguments, completion, whole)
        return self.served[index]

    def step_of(self, message: AssistantMessage) -> int | None:
        if message.tool_calls:
            return self.call_steps.get(message.tool_calls[0].id)
        return self.text_steps.get(message.content)

    def note_delivered(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            if m["role"] == "tool" and not PLACEHOLDER.match(m["content"]):
                index = self.call_steps.get(m["tool_call_id"])
            elif m["role"] == "assistant" and not m.get("tool_calls"):
                index = self.text_steps.get(m["content"] or "")
            else:
                continue
            if index is not None:
                self.delivered.add(index)

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.requests += 1
        self.note_delivered(body["messages"])
        index = next((i for i in range(len(self.steps)) if i not in self.delivered), None)
        if index is None:
            summary = {"summary": f"replayed all {len(self.steps)} steps"}
            reply = Reply(tool_calls=[("finish", summary)], completion_tokens=20)
        else:
            served = self.reply(index)
            call = [] if served.arguments is None else [("shell_exec", served.arguments)]
            reply = Reply(served.text, list(call), completion_tokens=served.completion)
            reply.call_ids = (f"call_{index + 1}_{self.serves[index] + 1}",)
        prompt = self.tokens.prompt(body)
        if prompt + (reply.completion_tokens or 0) > self.window:  # refused as llama-server does
            self.overflows += 1
            message = f"request ({prompt} tokens) exceeds the available context size"
            error = {"code": 400, "type": "exceed_context_size_error", "n_ctx": self.window}
            error |= {"message": f"{message} ({self.window} tokens)", "n_prompt_tokens": prompt}
            return Reply(status=400, error_body=error)
        if index is not None:
            self.serves[index] += 1
            (self.folder / "current").write_text(str(index))
            if self.steps[index].action is None:
                self.text_steps[reply.text] = index
            else:
                self.call_steps[reply.call_ids[0]] = index
        return reply


BASH_ENV = """\
# Sourced by every non-interactive bash the harness starts: the recorded output, then exit.
read -r step < "{folder}/current"
cat "{folder}/$step.out"
read -r code < "{folder}/$step.code"
exit "$code"
"""


# --- one replay -------------------------------------------------------------------------------


@dataclass
class Run:
    """What the journal, the logs and the server's requests show of one replay."""

    label: str
    window: int
    trajectory: Trajectory
    requests: list[dict[str, Any]]
    events: list[dict[str, Any]]
    seconds: float
    sessions: list[list[Message]] = field(default_factory=list)
    replies: list[list[int]] = field(default_factory=list)
    """Per session, the indexes of its model replies (messages with usage)."""
    results: dict[str, ToolMessage] = field(default_factory=dict)
    """Every tool result but finish's, by call id."""

    @property
    def end(self) -> str:
        return next((e["reason"] for e in reversed(self.events) if e["kind"] == "run_end"), "?")


def budget(window: int) -> Budget:
    c = DEFAULTS.context
    return Budget.for_window(
        window, c.soft_threshold, c.hard_threshold, MAX_OUTPUT, c.safety_margin
    )


def cap(window: int) -> int:
    return tool_output_cap(DEFAULTS, budget(window))


@contextmanager
def project(keep: Path | None, name: str) -> Iterator[Path]:
    """The run's project folder, at a fixed path (the system prompt names it, so its length
    counts): in `keep`, or in the temp folder and removed afterwards."""
    root = (keep or Path(tempfile.gettempdir()) / "ouroboros-replay") / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def replay(
    path: Path,
    window: int,
    tokens: ByteTokens,
    keep: Path | None,
    context: dict[str, Any] | None = None,
) -> Run:
    steps = load_steps(path)
    task = path.with_name(path.name.removesuffix(".jsonl") + ".task.md")
    with project(keep, f"{path.stem}-{window}") as root:
        (recorded := root / "recorded").mkdir()
        (root / "workspace").mkdir()
        (root / "SYSTEM_PROMPT.md").write_text(task.read_text() if task.exists() else "Go on.")
        (root / "bash_env.sh").write_text(BASH_ENV.format(folder=recorded))
        trajectory = Trajectory(steps, tokens, window, recorded)
        server = ScriptedServer(
            trajectory, "llama", window, counter=tokens.prompt, endpoints=tokens.endpoint
        )
        config = quick_config(
            server.start(),
            llm={"max_output_tokens": MAX_OUTPUT},
            context={"limit": window, **(context or {})},
            session={"shell_timeout_s": 30},
            supervisor={"max_total_turns": 3 * len(steps) + 30},
            # Commands inherit only what tools.env lets through: the recorded outputs' script too.
            tools={"env": ["PATH", "HOME", "LANG", "LC_*", "BASH_ENV"]},
        )
        (root / "config.toml").write_text(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUROBOROS_")}
        started = time.monotonic()
        with (root / "run.log").open("w") as log:
            subprocess.run(
                [sys.executable, "-m", "ouroboros", "run"],
                cwd=root,
                env={**env, "BASH_ENV": str(root / "bash_env.sh")},
                stdout=log,
                stderr=log,
                timeout=3600,
            )
        seconds = time.monotonic() - started
        server.stop()
        if not server.chat_requests():
            raise SystemExit(f"the harness made no request:\n{(root / 'run.log').read_text()}")
        label = f"{path.stem.split('__')[-1]} {window / 1024:g}K"
        state = root / ".ouroboros"
        events, _ = read_objects(state / "events.jsonl")
        run = Run(label, window, trajectory, server.chat_requests(), events, seconds)
        read_journal(run, JsonlReader(state / "journal.jsonl").records(JOURNAL_RECORD))
        return run


def read_journal(run: Run, records: Iterable[JournalRecord]) -> None:
    for record in records:
        if isinstance(record, SessionStart):
            run.sessions.append(list(record.messages))
            run.replies.append([])
        elif isinstance(record, WindDown) and record.message is not None:
            run.sessions[-1].append(record.message)
        elif isinstance(record, MessageRecord):
            if record.usage is not None:
                run.replies[-1].append(len(run.sessions[-1]))
            message = record.message
            run.sessions[-1].append(message)
            if isinstance(message, ToolMessage) and message.name != "finish":
                run.results[message.tool_call_id] = message


# --- the measures -----------------------------------------------------------------------------


def step_tokens(run: Run) -> tuple[int, list[StepTokens]]:
    """What every session's prompt holds before its first turn, and each step's tokens."""
    t, tokens = run.trajectory, run.trajectory.tokens
    again = tokens.message({"role": "user", "content": prompts.CONTINUE})

    def figures(index: int, step: Step) -> StepTokens:
        served = t.reply(index)
        if step.action is None:
            return StepTokens(tokens.message(served.wire()) + again, served.completion)
        result = result_at_cap(step, cap(run.window))
        pair = (tokens.message(to_wire(result)), tokens.message(to_wire(masked(result))))
        cut = shown(result_at_cap(step, cap(run.window), MIN_OUTPUT_BYTES))
        least = tokens.message(to_wire(cut))
        return StepTokens(tokens.message(served.wire()), served.completion, (pair,), (least,))

    first = run.requests[0]
    fixed = tokens.prompt({"tools": first["tools"], "messages": first["messages"][:2]})
    return fixed, [figures(i, s) for i, s in enumerate(t.steps)]


def floor(run: Run) -> int:
    """`floor.sessions_keeping_recent` with the real counts of the trajectory as served."""
    lines = budget(run.window)
    fixed, steps = step_tokens(run)
    policy = mask_policy(DEFAULTS, lines)
    return sessions_keeping_recent(steps, fixed, lines.prompt_budget, policy)


def equal_promises_floor(run: Run) -> int:
    """`floor.sessions_with_promises` with the real counts of the trajectory as served: its own
    replies are the wind-downs' replies."""
    lines = budget(run.window)
    fixed, steps = step_tokens(run)
    policy = mask_policy(DEFAULTS, lines)
    notice = run.trajectory.tokens.message(to_wire(LONGEST_WIND_DOWN))
    wind_down = WindDownTokens(DEFAULTS.session.wind_down_turns, notice)
    return sessions_with_promises(steps, fixed, lines.prompt_budget, policy, wind_down)


def append_only(run: Run) -> int:
    """What an unmanaged agent with an unlimited window makes the server process: each token
    of its one growing prompt once (the results at the normal cap, as the runner keeps them)."""
    fixed, steps = step_tokens(run)
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


def first_request(run: Run, session: int) -> list[dict[str, Any]]:
    marker = f"Session {session}."
    for body in run.requests:
        messages: list[dict[str, Any]] = body["messages"]
        if len(messages) > 1 and str(messages[1].get("content")).startswith(marker):
            return messages
    return []


def last_step_fate(previous: list[Message], sent: list[dict[str, Any]]) -> tuple[str, int]:
    """Whether a session's last step is whole in the next session's first request ('kept') or
    why not, and how many of its results were carried shortened."""
    reply = next(m for m in reversed(previous) if isinstance(m, AssistantMessage))
    ids = [c.id for c in reply.tool_calls]
    results = {m.tool_call_id: m.content for m in previous if isinstance(m, ToolMessage)}
    carried = sent[2:]
    got = {m["tool_call_id"]: m["content"] for m in carried if m["role"] == "tool"}
    whole = {i: got[i] for i in ids if i in got and not PLACEHOLDER.match(got[i])}
    shortened = sum(text != results.get(i) for i, text in whole.items())
    if not carried:
        return "nothing carried", 0
    if all(m["role"] == "user" for m in carried):
        return "only a harness message carried", 0
    if not any(
        m["role"] == "assistant"
        and [c["id"] for c in m.get("tool_calls") or []] == ids
        and (ids or m["content"] == reply.content)
        for m in carried
    ):
        return "reply missing", 0
    if not set(ids) <= got.keys():
        return "result missing", shortened
    return ("kept" if len(whole) == len(ids) else "result only as a placeholder"), shortened


def restarts(run: Run) -> Counter[str]:
    n: Counter[str] = Counter()
    for number in range(2, len(run.sessions) + 1):
        fate, shortened = last_step_fate(run.sessions[number - 2], first_request(run, number))
        n.update({"restarts": 1, "lost": fate != "kept", f"lost: {fate}": fate != "kept"})
        n["carried shortened"] += shortened
    return n


def never_shown(run: Run) -> Counter[str]:
    sent: dict[bool, set[str]] = {True: set(), False: set()}
    for body in run.requests:
        for m in body["messages"]:
            if m["role"] == "tool":
                sent[bool(PLACEHOLDER.match(m["content"]))].add(m["tool_call_id"])
    missing = run.results.keys() - sent[False]
    return Counter({"never shown": len(missing), "as placeholders": len(missing & sent[True])})


def wind_downs(run: Run) -> Counter[str]:
    """Wind-downs, and those followed by every promised reply (not in a session ended by finish)."""
    n: Counter[str] = Counter()
    sessions = run.sessions[:-1] if run.end == "finish" else run.sessions
    for number, messages in enumerate(sessions):
        for index, m in enumerate(messages):
            if getattr(m, "origin", None) == "wind_down":
                replies = sum(r > index for r in run.replies[number])
                n.update({"wind-downs": 1, "complete": replies >= DEFAULTS.session.wind_down_turns})
    return n


def restarts_after_wind_down(run: Run) -> Counter[str]:
    """Restarts whose session ended after a complete wind-down: its message, then every reply
    it asked for."""
    turns, n = DEFAULTS.session.wind_down_turns, Counter[str]()
    for number, messages in enumerate(run.sessions[:-1]):
        notices = [i for i, m in enumerate(messages) if getattr(m, "origin", None) == "wind_down"]
        replies = sum(r > notices[-1] for r in run.replies[number]) if notices else 0
        n["after complete wind-down"] += bool(notices) and replies >= turns
    return n


def ended_without_wind_down(run: Run) -> Counter[str]:
    """Sessions but the last with no wind-down. No step of a trajectory is bigger than
    max_output_tokens plus the tool cap as the harness gets it (a reply is served within
    max_output_tokens, its one call's output is capped), so none is excused."""
    ended = sum(
        not any(getattr(m, "origin", None) == "wind_down" for m in messages)
        for messages in run.sessions[:-1]
    )
    return Counter({"no wind-down": ended})


def price_errors(run: Run) -> list[float] | None:
    """|price - real| / real of shell results of 100+ real tokens, as first sent in the session
    that priced them (one the session ended before sending is left out); None: no prices."""
    priced = [e for e in run.events if e["kind"] == "tool_call" and "result_tokens" in e]
    if not priced:
        return None
    sent: dict[tuple[int, str], dict[str, Any]] = {}
    for body in run.requests:
        session = int(re.findall(r"Session (\d+)", body["messages"][1]["content"])[0])
        for m in body["messages"]:
            if m["role"] == "tool" and not PLACEHOLDER.match(m["content"]):
                sent.setdefault((session, m["tool_call_id"]), m)
    errors = []
    for event in priced:
        result, wire = (
            run.results.get(event["call_id"]),
            sent.get((event["session"], event["call_id"])),
        )
        real = run.trajectory.tokens.message(wire) if wire else 0
        if result and result.name == "shell_exec" and real >= 100:
            errors.append(abs(event["result_tokens"] - real) / real)
    return errors


def said(content: str) -> list[str]:
    """The output's own non-blank lines: not the harness's exit-code line or cut marker."""
    lines = content.splitlines()
    lines = lines[1:] if lines and lines[0].startswith("exit code ") else lines
    return [line for line in lines if line.strip() and not line.startswith("[... ")]


def mentions(text: str, wanted: str, chars: int) -> bool:
    """`text` names the first `chars` characters of `wanted` (maybe spaces squeezed, escaped)."""
    heads = {wanted.strip()[:chars], " ".join(wanted.split())[:chars]}
    heads |= {json.dumps(head, ensure_ascii=False)[1:-1] for head in heads}
    return any(head in t for head in heads for t in (text, " ".join(text.split())))


def parts_named(text: str, result: ToolMessage) -> set[str]:
    try:
        arguments = json.loads(result.arguments or "{}")
        subject = str(arguments.get("command") or arguments.get("path") or "")
    except json.JSONDecodeError:  # a call cut at max_output_tokens
        subject = result.arguments
    lines = said(result.content)
    found = {
        "command": mentions(text, subject, 30),
        "exit": result.exit_code is None or f"exit {result.exit_code}" in text,
        "lines": re.search(r"\d[\d,]* lines", text) is not None,
        "bytes": re.search(r"\d[\d,]* bytes", text) is not None,
        "first": not lines or mentions(text, lines[0], 20),
        "last": not lines or mentions(text, lines[-1], 20),
        "where": any(w in text for w in (".outputs/", "file_read", "search_context")),
    }
    return {part for part, ok in found.items() if ok}


def placeholders(run: Run) -> Counter[str]:
    """Distinct placeholders sent, and how many name each part, all of them, or quote `""`."""
    n: Counter[str] = Counter()
    for call_id, text in {
        (m["tool_call_id"], m["content"])
        for body in run.requests
        for m in body["messages"]
        if m["role"] == "tool" and PLACEHOLDER.match(m["content"])
    }:
        result = run.results.get(call_id)
        parts = parts_named(text, result) if result else set()
        empty_line = re.search(r'\s""[,;\]]', text) is not None
        n.update({"placeholders": 1, "all": parts == set(PARTS), '""': empty_line})
        n.update(parts)
    return n


def not_as_recorded(run: Run) -> int:
    """Shell results whose head is not the recorded output's: BASH_ENV did not do its job."""
    t = run.trajectory
    return sum(
        result.content[:100] != t.steps[t.call_steps[call_id]].output[:100]
        for call_id, result in run.results.items()
        if call_id in t.call_steps and not t.served[t.call_steps[call_id]].call_cut
    )


# --- the report -------------------------------------------------------------------------------


def measure(run: Run) -> Result:
    t = run.trajectory
    n = Counter(
        steps=len(t.steps),
        sessions=len(run.sessions),
        floor=floor(run),
        promises=equal_promises_floor(run),
        overflows=t.overflows,
        again=sum(k - 1 for k in t.serves.values()),
        shortened=sum(s.completion != s.whole_completion for s in t.served.values()),
        cut=sum(s.call_cut for s in t.served.values()),
        requests=t.requests,
        seconds=round(run.seconds),
        runs=1,
        finished=int(run.end == "finish"),
    )
    n["not as recorded"] = not_as_recorded(run)
    counters = (restarts, never_shown, wind_downs, restarts_after_wind_down, placeholders)
    for counted in (*counters, ended_without_wind_down, prefill_figures):
        n.update(counted(run))
    return Result(run.label, n, price_errors(run), run.window)


def total(results: list[Result]) -> Result:
    errors = [e for r in results for e in r.price_errors or []]
    priced = any(r.price_errors is not None for r in results)
    return Result("total", sum((r.n for r in results), Counter()), errors if priced else None)


def share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[max(0, math.ceil(q * len(values)) - 1)]


def prices(r: Result) -> str:
    if r.price_errors is None:
        return "n/a"
    errors = r.price_errors
    return f"{quantile(errors, 0.5):.1%} / {quantile(errors, 0.9):.1%}" if errors else "none"


Column = tuple[str, Callable[[Result], str]]
MAIN: list[Column] = [
    ("Run", lambda r: r.label),
    ("Steps", lambda r: str(r.n["steps"])),
    ("Sessions (floors)", lambda r: f"{r.n['sessions']} ({r.n['floor']}, {r.n['promises']})"),
    ("Overflows", lambda r: str(r.n["overflows"])),
    ("Lost at restart", lambda r: f"{r.n['lost']} of {r.n['restarts']}"),
    ("Never shown", lambda r: f"{r.n['never shown']} ({r.n['as placeholders']})"),
    ("Wind-downs complete", lambda r: f"{r.n['complete']} of {r.n['wind-downs']}"),
    ("Ended w/o wind-down", lambda r: f"{r.n['no wind-down']}"),
    ("Price error p50 / p90", prices),
    ("Processed ÷ append-only", lambda r: f"{r.n['processed'] / max(r.n['bound'], 1):.2f}"),
    ("Breaks / session", lambda r: f"{r.n['breaks'] / max(r.n['sessions'], 1):.1f}"),
    ("Whole results / request", lambda r: f"{r.n['whole results sent'] / r.n['requests']:.1f}"),
    ("Placeholders naming all", lambda r: share(r.n["all"], r.n["placeholders"])),
    ("Served again", lambda r: str(r.n["again"])),
    ("Shortened (calls cut)", lambda r: f"{r.n['shortened']} ({r.n['cut']})"),
    ("Requests", lambda r: str(r.n["requests"])),
    ("Seconds", lambda r: str(r.n["seconds"])),
]


def wind_down_share(r: Result) -> float:
    return r.n["complete"] / r.n["wind-downs"] if r.n["wind-downs"] else 1.0


def no_jump(r: Result) -> bool:
    return r.n["no wind-down"] == 0


def part_share(part: str) -> Column:
    return (f"`{part}`" if part == '""' else part, lambda r: share(r.n[part], r.n["placeholders"]))


def lost_why(r: Result) -> str:
    why = [f"{k[6:]} {v}" for k, v in sorted(r.n.items()) if k.startswith("lost: ") and v]
    return ", ".join(why) or "–"


def restart_and_break_share(r: Result) -> str:
    processed = max(r.n["processed"], 1)
    restarts, breaks = r.n["processed at restarts"], r.n["processed at breaks"]
    return f"{restarts / processed:.0%} / {breaks / processed:.0%}"


DETAILS: list[Column] = [
    ("Run", lambda r: r.label),
    ("Lost at restart: why", lost_why),
    ("Carried shortened", lambda r: str(r.n["carried shortened"])),
    ("Placeholders", lambda r: str(r.n["placeholders"])),
    *map(part_share, (*PARTS, '""')),
    ("Not as recorded", lambda r: str(r.n["not as recorded"])),
    ("Processed (append-only)", lambda r: f"{r.n['processed']:,} ({r.n['bound']:,})"),
    ("Processed: restarts / breaks", restart_and_break_share),
    ("Finished", lambda r: f"{r.n['finished']} of {r.n['runs']}"),
]


def table(columns: list[Column], results: list[Result]) -> None:
    print("| " + " | ".join(title for title, _ in columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    for r in results:
        print("| " + " | ".join(cell(r) for _, cell in columns) + " |")
    print()


def p90_within(r: Result) -> bool:
    return not r.price_errors or quantile(r.price_errors, 0.9) <= 0.10


TARGETS: list[tuple[str, str, Callable[[Result], bool]]] = [
    ("every wind-down complete", "Wind-downs complete", lambda r: wind_down_share(r) == 1),
    ("no session ended without a wind-down", "Ended w/o wind-down", no_jump),
    ("price error p90 <= 10%", "Price error p50 / p90", p90_within),
    ("outputs served as recorded", "Not as recorded", lambda r: not r.n["not as recorded"]),
    ("every replay ended by finish", "Finished", lambda r: r.n["finished"] == r.n["runs"]),
]


def verdicts(results: list[Result]) -> bool:
    cells = dict(MAIN + DETAILS)
    ok = True
    for target, column, passes in TARGETS:
        if column.startswith("Price") and all(r.price_errors is None for r in results):
            print(f"n/a   {target}: n/a (harness does not log prices)")
            continue
        ok &= (passed := all(map(passes, results)))
        failing = ", ".join(f"{r.label} {cells[column](r)}" for r in results if not passes(r))
        print(f"{'PASS' if passed else 'FAIL'}  {target}" + (f": {failing}" if failing else ""))
    return ok


def trajectories(paths: list[Path]) -> list[Path]:
    """The files given, and every `*.jsonl` in the folders given, in order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"no trajectory file or folder at {path}")
    if not found:
        raise SystemExit(f"no *.jsonl trajectory in {', '.join(map(str, paths))}")
    return found


def setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, json.loads(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help=f"trajectories (JSONL), or folders of them (*.jsonl); default {TRAJECTORIES}",
    )
    parser.add_argument("--windows", nargs="+", type=int, default=list(WINDOWS))
    parser.add_argument("--bytes4", action="store_true", help="count bytes/4, not real tokens")
    parser.add_argument("--keep", type=Path, help="keep each run's project folder in this one")
    parser.add_argument(
        "--context",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [context] setting for the harness (mask_low_water=0.3); the floor keeps defaults",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    results: list[Result] = []
    paths = trajectories(args.paths or [TRAJECTORIES])
    with tokenizer(args.bytes4) as tokens:
        print(f"Token counts: {tokens.source}. Harness: {ouroboros.__path__[0]}\n")
        for path in paths:
            for window in args.windows:
                run = replay(path, window, tokens, args.keep, dict(args.context))
                results.append(measure(run))
                print(f"  {results[-1].label}: {results[-1].n['seconds']} s", file=sys.stderr)
    overall = total(results)
    table(MAIN, [*results, overall])
    table(DETAILS, [*results, overall])
    ok = issue_table(results, overall)
    ok &= verdicts(results)
    print(f"\n({time.monotonic() - started:.0f} s; token counts: {tokens.source})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
