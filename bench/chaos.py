"""Chaos bench: kill -9 the real run at random moments, take its model server away, feed it 5xx
bursts and cut streams, and check that nothing the harness promises after a crash is broken.

Everything runs against `ScriptedServer` on loopback, with `python -m ouroboros run` as a
subprocess in a throwaway project folder (config.toml as the tests write it).

Phases
- kills: two runs (restarts every 5 turns on an Ollama-like server; a small 3K window on a
  llama-server-like one, so masking, wind-down, overflow and context-full restarts happen), each
  killed with SIGKILL over and over, then left to finish at --max-turns. Each kill is aimed: at a
  random moment, during start-up, mid model call, just after a reply arrives, mid tool call, or
  at a session restart; where it really landed is read back from the journal and the server.
  The scripted agent's shell_exec calls append a unique line to workspace/runs.log (some sleep
  after, so kills land mid-tool), some replies are slow, some hold two calls or none.
- outage: the server is stopped and started again on the same port, several times, once with a
  kill -9 while the run is retrying and a restart while the server is still down.
- faults: bursts of HTTP 503/502/500/429, streams cut after the content, error events inside an
  HTTP 200 stream; every injected fault must show up as one retry event.

Invariants (any failure exits 1): every completed turn is in the journal (replies = target, each
with its usage in one record), no tool call executed or started twice, every call has one result,
every line of journal.jsonl, events.jsonl and token_usage.jsonl parses, the run reaches its
configured end (exit 0, max_total_turns), no traceback, session numbers never go back.

Run: .venv/bin/python bench/chaos.py [--seed N] [--kills N] [--max-turns N] [--quick] [--keep]
(about 3-4 minutes on 2 cores; --quick about one)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from ouroboros.ground.messages import MESSAGE_ADAPTER, Message, tool_call_pairs_valid
from ouroboros.ground.prompts import CRASH_INTERRUPTED
from ouroboros.model.scripted import Dialect, Reply, ScriptedServer, quick_config, tool
from ouroboros.state.fold import replay
from ouroboros.state.records import JOURNAL_RECORD

REPO = Path(__file__).resolve().parents[1]
INTERRUPTED = "error: this call was interrupted"
assert CRASH_INTERRUPTED.startswith(INTERRUPTED)
JSONL_FILES = ("journal.jsonl", "events.jsonl", "token_usage.jsonl")
POLL_S = 0.002
KillMode = Literal["random", "startup", "model", "reply", "tool", "restart"]
KILL_MODES: tuple[KillMode, ...] = ("random", "startup", "model", "reply", "tool", "restart")


# --- the server side -------------------------------------------------------------------------

_disconnects = 0
"""Streams the server could not finish because the client died (or the socket went away)."""


def _handle_error(self: ThreadingHTTPServer, request: object, client_address: object) -> None:
    """A killed client breaks the server's stream: count it instead of printing a traceback."""
    global _disconnects
    error = sys.exc_info()[1]
    if isinstance(error, (BrokenPipeError, ConnectionResetError)):
        _disconnects += 1
        return
    traceback.print_exc()


ThreadingHTTPServer.handle_error = _handle_error  # type: ignore[method-assign,assignment]


class Agent:
    """The scripted model: mostly shell_exec calls that each append a unique line to runs.log."""

    def __init__(self, rng: random.Random, big_outputs: bool = False, slow: bool = True):
        self.rng = rng
        self.big_outputs = big_outputs
        self.slow = slow
        self.numbers = itertools.count(1)
        self.arrivals: list[float] = []
        """Wall time of every chat request, to tell where a kill landed."""

    def shell(self) -> tuple[str, dict[str, Any] | str]:
        n = next(self.numbers)
        command = f"echo call-{n} >> runs.log"
        if self.slow:
            command += self.rng.choice(["", "", "; sleep 0.05", "; sleep 0.15", "; sleep 0.3"])
        if self.big_outputs:
            command += f"; seq 1 {self.rng.randint(60, 400)}"
        return tool("shell_exec", command=command)

    def __call__(self, body: dict[str, Any]) -> Reply:
        # Called under the server's lock: the shared RNG needs no lock of its own.
        self.arrivals.append(time.time())
        delays = [0.0, 0.0, 0.02, 0.1, 0.25] if self.slow else [0.0, 0.01]
        delay = self.rng.choice(delays)
        roll = self.rng.random()
        if roll < 0.08:
            return Reply(
                text="Thinking about the next step before touching anything.", delay_s=delay
            )
        calls: list[tuple[str, dict[str, Any] | str]] = [self.shell()]
        if roll > 0.88:
            calls.append(self.shell())
        elif roll > 0.80:
            calls.append(tool("list_dir", path="."))
        return Reply(text=f"step {len(self.arrivals)}", tool_calls=calls, delay_s=delay)


class FaultyAgent(Agent):
    """The agent behind a flaky server: 5xx bursts, cut streams, error events in the stream."""

    def __init__(self, rng: random.Random):
        super().__init__(rng, slow=False)
        self.burst = 0
        self.injected: Counter[str] = Counter()

    def __call__(self, body: dict[str, Any]) -> Reply:
        roll = self.rng.random()
        if self.burst == 0 and roll < 0.12:
            self.burst = self.rng.randint(1, 4)
        if self.burst:
            self.burst -= 1
            self.arrivals.append(time.time())
            status = self.rng.choice([503, 503, 502, 500, 429])
            self.injected[f"HTTP {status}"] += 1
            return Reply(status=status, error_body={"message": "busy", "type": "server_error"})
        reply = super().__call__(body)
        if roll > 0.9:
            self.injected["cut stream"] += 1
            return Reply(text=reply.text, tool_calls=reply.tool_calls, cut=True)
        if roll > 0.85:
            self.injected["error event in stream"] += 1
            error = {"message": "slot unavailable", "type": "server_error", "code": 503}
            return Reply(text=reply.text, stream_error=error)
        return reply


# --- the project and its files ---------------------------------------------------------------


class Tail:
    """New whole records of a JSONL file, as they are written (survives a torn-tail repair)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.partial = b""
        self.records: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # the torn last line was moved aside and cut off
            self.offset -= len(self.partial)
            self.partial = b""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        new = []
        for line in lines:
            try:
                new.append(json.loads(line))
            except ValueError:
                continue  # counted by the checks at the end
        self.records.extend(new)
        return new


@dataclass
class Project:
    root: Path

    @property
    def state(self) -> Path:
        return self.root / ".ouroboros"

    @property
    def runs_log(self) -> Path:
        return self.root / "workspace" / "runs.log"

    @classmethod
    def create(cls, parent: Path, name: str) -> Project:
        root = parent / name
        (root / "workspace").mkdir(parents=True)
        (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nSurvive the chaos bench.\n")
        return cls(root)

    def configure(self, base_url: str, **sections: dict[str, Any]) -> None:
        (self.root / "config.toml").write_text(quick_config(base_url, **sections))

    def spawn(self, target: int, attempt: int) -> subprocess.Popen[bytes]:
        errors = self.root / "stderr"
        errors.mkdir(exist_ok=True)
        with (errors / f"{attempt:03d}.txt").open("wb") as stderr:
            return subprocess.Popen(
                [sys.executable, "-m", "ouroboros", "run", "--max-turns", str(target)],
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=stderr,  # the terminal too: the run's end is said there
                stderr=stderr,
                env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)},
            )

    def stderr_of(self, attempt: int) -> str:
        return (self.root / "stderr" / f"{attempt:03d}.txt").read_text(errors="replace")

    def all_stderr(self) -> Iterator[tuple[str, str]]:
        for path in sorted((self.root / "stderr").glob("*.txt")):
            yield path.name, path.read_text(errors="replace")


# --- the checks ------------------------------------------------------------------------------


@dataclass
class Findings:
    """What one run's files say once it is over."""

    name: str
    target: int
    kills: int = 0
    outages: int = 0
    turns: int = 0
    turns_lost: int = 0
    orphan_usage: int = 0
    duplicate_executions: int = 0
    duplicate_starts: int = 0
    duplicate_results: int = 0
    missing_results: int = 0
    interrupted: int = 0
    completed_at_server: int = 0
    repeated_calls: int = 0
    unparseable: int = 0
    torn_aside: int = 0
    retries: int = 0
    sessions: int = 0
    sessions_monotonic: bool = True
    events: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures.append(message)


def parse_lines(path: Path, found: Findings) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    if not path.exists():
        return records
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            found.unparseable += 1
            found.fail(f"{path.name} line {number} does not parse: {line[:120]!r}")
            continue
        records.append(record)
    return records


def check_turns(journal: list[dict[str, Any]], found: Findings) -> None:
    # A turn is a reply record carrying its usage (one fsync'ed line, so neither can be lost
    # without the other). Side calls (a compaction's recap) are "usage" records: no turn.
    replies = [r for r in journal if r["kind"] == "message" and "usage" in r]
    found.turns = len(replies)
    found.turns_lost = max(0, found.target - len(replies))
    if len(replies) != found.target:
        found.fail(f"{len(replies)} replies in the journal, expected {found.target}")
    for r in replies:
        if r["message"]["kind"] != "assistant":
            found.orphan_usage += 1
            found.fail(f"usage recorded on a {r['message']['kind']} message")
    state = replay([JOURNAL_RECORD.validate_python(r) for r in journal])
    found.sessions = state.session
    if state.total_turns != found.target:
        found.fail(f"replaying the journal gives {state.total_turns} turns")


def check_sessions(journal: list[dict[str, Any]], found: Findings) -> None:
    """Every session's message list pairs each tool call with exactly its results."""
    messages: list[Message] = []
    session = 0
    for record in [*journal, {"kind": "session_start", "session": -1, "messages": []}]:
        if record["kind"] == "session_start":
            if session and not tool_call_pairs_valid(messages):
                found.fail(f"session {session}: tool calls and results do not pair up")
            session = record["session"]
            messages = [MESSAGE_ADAPTER.validate_python(m) for m in record["messages"]]
        elif record["kind"] == "message":
            messages.append(MESSAGE_ADAPTER.validate_python(record["message"]))


def check_tools(journal: list[dict[str, Any]], runs_log: Path, found: Findings) -> None:
    calls: dict[str, str] = {}
    starts: Counter[str] = Counter()
    results: dict[str, list[str]] = {}
    for r in journal:
        if r["kind"] == "tool_started":
            starts[r["call_id"]] += 1
        elif r["kind"] == "message" and r["message"]["kind"] == "assistant":
            for call in r["message"]["tool_calls"]:
                calls[call["id"]] = call["arguments"]
        elif r["kind"] == "message" and r["message"]["kind"] == "tool":
            results.setdefault(r["message"]["tool_call_id"], []).append(r["message"]["content"])
    lines = runs_log.read_text().splitlines() if runs_log.exists() else []
    executed = Counter(lines)
    found.duplicate_executions = sum(n - 1 for n in executed.values() if n > 1)
    if found.duplicate_executions:
        twice = sorted(line for line, n in executed.items() if n > 1)
        found.fail(f"tool calls executed twice (runs.log): {twice[:10]}")
    found.duplicate_starts = sum(n - 1 for n in starts.values() if n > 1)
    if found.duplicate_starts:
        found.fail(f"{found.duplicate_starts} tool calls started twice in the journal")
    found.duplicate_results = sum(len(v) - 1 for v in results.values() if len(v) > 1)
    if found.duplicate_results:
        found.fail(f"{found.duplicate_results} tool calls have more than one result")
    missing = [c for c in calls if c not in results]
    found.missing_results = len(missing)
    if missing:
        found.fail(f"{len(missing)} tool calls have no result: {missing[:5]}")
    found.interrupted = sum(
        content.startswith(INTERRUPTED) for v in results.values() for content in v
    )
    check_executions(calls, starts, results, executed, found)


def check_executions(
    calls: dict[str, str],
    starts: Counter[str],
    results: dict[str, list[str]],
    executed: Counter[str],
    found: Findings,
) -> None:
    """A line in runs.log needs a started call; a call that reported success needs its line."""
    by_line: dict[str, str] = {}
    for call_id, arguments in calls.items():
        command = str(json.loads(arguments).get("command", ""))
        if command.startswith("echo call-"):
            by_line[command.split()[1]] = call_id
    for line in executed:
        started = by_line.get(line)
        if started is None or not starts[started]:
            found.fail(f"runs.log has {line!r} but no tool_started record for it")
    for line, call_id in by_line.items():
        outcome = results.get(call_id, [])
        if outcome and outcome[0].startswith("exit code 0") and not executed[line]:
            found.fail(f"{line} reported success but never wrote its line")


def check_logs(project: Project, found: Findings, journal: list[dict[str, Any]]) -> None:
    events = parse_lines(project.state / "events.jsonl", found)
    usage = parse_lines(project.state / "token_usage.jsonl", found)
    found.events = Counter(e["kind"] for e in events)
    found.retries = found.events["retry"]
    sessions = [u["session"] for u in usage]
    found.sessions_monotonic = all(b >= a for a, b in itertools.pairwise(sessions))
    if not found.sessions_monotonic:
        found.fail("session numbers in token_usage.jsonl go back")
    found.torn_aside = len(list(project.state.glob("*.torn-*")))
    found.events["mask"] = sum(r["kind"] == "mask" for r in journal)


def verify(project: Project, found: Findings, final: subprocess.CompletedProcess[str]) -> None:
    # The run's end is on its terminal (stdout); errors alone are on stderr.
    if final.returncode != 0 or "max_total_turns" not in final.stdout + final.stderr:
        found.fail(
            f"the run did not reach its end (exit {final.returncode}): {final.stderr[-600:]}"
        )
    for name, text in project.all_stderr():
        if "Traceback" in text:
            found.fail(f"a traceback in stderr/{name}: {text[-800:]}")
    if "Traceback" in final.stderr:
        found.fail(f"a traceback in the final run: {final.stderr[-800:]}")
    journal = parse_lines(project.state / "journal.jsonl", found)
    check_turns(journal, found)
    check_sessions(journal, found)
    check_tools(journal, project.runs_log, found)
    check_logs(project, found, journal)
    replies = found.turns - found.orphan_usage
    found.turns_lost += found.orphan_usage
    found.repeated_calls = found.completed_at_server - replies
    if found.repeated_calls < 0:
        found.fail(
            f"{replies} replies recorded but only {found.completed_at_server} responses "
            "completed at the server"
        )


def finish_run(project: Project, target: int, timeout: float) -> subprocess.CompletedProcess[str]:
    """Let the run go on, unkilled, to its configured end."""
    command = [sys.executable, "-m", "ouroboros", "run", "--max-turns", str(target)]
    try:
        return subprocess.run(
            command,
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else ""
        return subprocess.CompletedProcess(
            command, -1, "", f"timed out after {timeout} s\n{stderr}"
        )


# --- phase 1: kills --------------------------------------------------------------------------


@dataclass(frozen=True)
class KillScenario:
    name: str
    dialect: Dialect
    n_ctx: int | None
    sections: dict[str, dict[str, Any]]
    big_outputs: bool


SCENARIOS = (
    KillScenario("restarts", "ollama", None, {"session": {"max_turns": 5}}, big_outputs=False),
    KillScenario(
        "small-window",
        "llama",
        3072,
        {"session": {"max_turns": 12}, "context": {"carryover_turns": 2}},
        big_outputs=True,
    ),
)


def alive_wait(process: subprocess.Popen[bytes], check: Callable[[], bool], timeout: float) -> bool:
    """Poll `check` until it holds; False if the process ended first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if process.poll() is not None:
            return False
        if check():
            return True
        time.sleep(POLL_S)
    return process.poll() is None


def new_record(tail: Tail, *kinds: str) -> Callable[[], bool]:
    return lambda: any(r["kind"] in kinds for r in tail.poll())


def new_reply(tail: Tail) -> Callable[[], bool]:
    """A model reply was journaled (with its usage, in the same record)."""
    return lambda: any(r["kind"] == "message" and "usage" in r for r in tail.poll())


def aim(
    mode: KillMode, process: subprocess.Popen[bytes], tail: Tail, agent: Agent, rng: random.Random
) -> bool:
    """Wait for the moment `mode` aims at; False if the run ended by itself."""
    asked = len(agent.arrivals)
    if mode == "random":
        return alive_wait(process, lambda: False, rng.uniform(0.3, 4.0))
    if mode == "startup":
        return alive_wait(process, lambda: False, rng.uniform(0.05, 1.8))
    if mode == "model":
        ok = alive_wait(process, lambda: len(agent.arrivals) > asked, 15)
        return ok and alive_wait(process, lambda: False, rng.uniform(0.0, 0.3))
    if mode == "reply":
        return alive_wait(process, new_reply(tail), 15)
    if mode == "tool":
        ok = alive_wait(process, new_record(tail, "tool_started"), 15)
        return ok and alive_wait(process, lambda: False, rng.uniform(0.0, 0.25))
    ok = alive_wait(process, new_record(tail, "session_end", "session_start"), 20)
    return ok and alive_wait(process, lambda: False, rng.uniform(0.0, 0.01))


def landing(tail: Tail, before: int, asked: int, agent: Agent) -> str:
    """Where a kill landed, from the last journal record and the server's last request."""
    tail.poll()
    if len(tail.records) == before and len(agent.arrivals) == asked:
        return "start-up (nothing recorded yet)"
    last: dict[str, Any] = (
        tail.records[-1] if tail.records else {"kind": "none", "ts": "1970-01-01T00:00:00+00:00"}
    )
    last_ts = datetime.fromisoformat(last["ts"]).timestamp()
    if agent.arrivals and agent.arrivals[-1] > last_ts and len(agent.arrivals) > asked:
        return "mid model call"
    kind = last["kind"]
    if kind == "message":
        message = last["message"]
        if message["kind"] == "assistant":
            return "reply recorded, tool not started" if message["tool_calls"] else "after a reply"
        return "after a tool result / message"
    return {
        "usage": "reply received, before it was recorded",
        "tool_started": "mid tool call",
        "session_end": "between sessions (restart)",
        "session_start": "session just started",
        "mask": "right after masking",
    }.get(kind, f"after {kind}")


def kill_phase(
    scenario: KillScenario, kills: int, target: int, rng: random.Random, parent: Path
) -> tuple[Findings, Counter[str]]:
    project = Project.create(parent, scenario.name)
    agent = Agent(random.Random(rng.random()), big_outputs=scenario.big_outputs)
    found = Findings(scenario.name, target)
    landed: Counter[str] = Counter()
    tail = Tail(project.state / "journal.jsonl")
    with ScriptedServer(agent, dialect=scenario.dialect, n_ctx=scenario.n_ctx) as server:
        project.configure(server.url, **scenario.sections)
        for attempt in range(kills):
            mode = rng.choice(KILL_MODES)
            tail.poll()
            before, asked = len(tail.records), len(agent.arrivals)
            process = project.spawn(target, attempt)
            if not aim(mode, process, tail, agent, rng):
                process.wait()
                found.fail(
                    f"the run ended by itself after {found.kills} kills (exit {process.returncode}"
                    f"): raise --max-turns. {project.stderr_of(attempt)[-400:]}"
                )
                break
            process.send_signal(signal.SIGKILL)
            process.wait()
            found.kills += 1
            landed[landing(tail, before, asked, agent)] += 1
        final = finish_run(project, target, timeout=240)
        found.completed_at_server = len(server.reported)
    verify(project, found, final)
    return found, landed


# --- phase 2: outages ------------------------------------------------------------------------


def outage_phase(outages: int, target: int, rng: random.Random, parent: Path) -> Findings:
    """Stop the server for 1-2.5 s right after a reply, start it on the same port; once, kill
    the run while it retries and start it again while the server is still down."""
    project = Project.create(parent, "outage")
    agent = Agent(random.Random(rng.random()), slow=False)
    found = Findings("outage", target)
    journal = Tail(project.state / "journal.jsonl")
    events = Tail(project.state / "events.jsonl")
    server = ScriptedServer(agent)
    server.start()
    port = server.port
    project.configure(server.url, session={"max_turns": 6}, llm={"retry_for_s": 60})
    process = project.spawn(target, 0)
    kill_at = rng.randrange(outages)
    attempt = 0
    try:
        for number in range(outages):
            if not alive_wait(process, new_reply(journal), 30):
                found.fail(f"the run ended before outage {number + 1}")
                break
            server.stop()
            down_for = rng.uniform(1.0, 2.5)
            back_at = time.monotonic() + down_for
            events.poll()
            retried = len(events.records)
            if number == kill_at:
                alive_wait(process, lambda: any(e["kind"] == "retry" for e in events.poll()), 10)
                process.send_signal(signal.SIGKILL)
                process.wait()
                found.kills += 1
                attempt += 1
                process = project.spawn(target, attempt)
                # The new run starts with the server down: its discovery must retry too.
                alive_wait(process, lambda: any(e["kind"] == "retry" for e in events.poll()), 15)
            time.sleep(max(0.0, back_at - time.monotonic()))
            events.poll()
            if len(events.records) == retried:
                found.fail(f"no retry event during outage {number + 1}")
            server.start(port)
            found.outages += 1
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            found.fail("the run did not finish within 120 s after the last outage")
    finally:
        server.stop()
        if process.poll() is None:
            process.kill()
            process.wait()
    found.completed_at_server = len(server.reported)
    final = subprocess.CompletedProcess(
        process.args, process.returncode, "", project.stderr_of(attempt)
    )
    verify(project, found, final)
    return found


# --- phase 3: 5xx bursts and cut streams -----------------------------------------------------


def fault_phase(target: int, rng: random.Random, parent: Path) -> tuple[Findings, Counter[str]]:
    project = Project.create(parent, "faults")
    agent = FaultyAgent(random.Random(rng.random()))
    found = Findings("faults", target)
    with ScriptedServer(agent) as server:
        project.configure(server.url, session={"max_turns": 5}, llm={"retry_for_s": 30})
        final = finish_run(project, target, timeout=120)
        found.completed_at_server = len(server.reported)
    verify(project, found, final)
    injected = sum(agent.injected.values())
    if found.retries != injected:
        found.fail(f"{injected} faults injected but {found.retries} retry events logged")
    return found, agent.injected


# --- the report ------------------------------------------------------------------------------

COLUMNS = (
    ("run", "name", 12),
    ("kills", "kills", 5),
    ("turns", "turns", 5),
    ("lost", "turns_lost", 4),
    ("orphan", "orphan_usage", 6),
    ("dup exec", "duplicate_executions", 8),
    ("dup start", "duplicate_starts", 9),
    ("interrupted", "interrupted", 11),
    ("repeated", "repeated_calls", 8),
    ("unparseable", "unparseable", 11),
    ("torn", "torn_aside", 4),
    ("outages", "outages", 7),
    ("retries", "retries", 7),
    ("sessions", "sessions", 8),
)


def table(rows: list[Findings]) -> str:
    head = "  ".join(f"{title:>{width}}" for title, _, width in COLUMNS)
    lines = [head, "-" * len(head)]
    for row in rows:
        cells = [f"{getattr(row, attr)!s:>{width}}" for _, attr, width in COLUMNS]
        lines.append("  ".join(cells) + ("" if not row.failures else "  FAIL"))
    totals = ["total".rjust(COLUMNS[0][2])]
    for _, attr, width in COLUMNS[1:]:
        totals.append(f"{sum(getattr(r, attr) for r in rows):>{width}}")
    lines.append("-" * len(head))
    lines.append("  ".join(totals))
    return "\n".join(lines)


LEGEND = """\
lost: completed turns missing from the journal
orphan: usage recorded on anything but a reply (cannot happen: one record holds both)
dup exec / dup start: calls whose line is twice in runs.log / with two tool_started records
interrupted: results "error: this call was interrupted..." (a kill landed mid-tool)
repeated: responses the server finished streaming whose reply is not in the journal, so the
  model was asked again (a kill after the stream, before the reply was recorded); not a loss
torn: torn last journal lines moved aside; retries: retry events in events.jsonl"""


def coverage(rows: list[Findings]) -> str:
    kinds = ("session_restart", "mask", "wind_down", "context_overflow", "retry", "warning")
    parts = []
    for row in rows:
        seen = ", ".join(f"{k} {row.events[k]}" for k in kinds if row.events[k])
        parts.append(f"  {row.name:<13} {seen}")
    return "\n".join(parts)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, help="RNG seed (default: random, printed)")
    parser.add_argument("--kills", type=int, help="kill -9s in the kill phase (default 60)")
    parser.add_argument("--max-turns", type=int, help="turns each killed run must reach")
    parser.add_argument("--quick", action="store_true", help="a smaller run (about a minute)")
    parser.add_argument("--keep", action="store_true", help="keep the project folders")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    if args.kills is None:
        args.kills = 14 if args.quick else 60
    if args.max_turns is None:
        args.max_turns = max(20, args.kills * 4 // len(SCENARIOS))
    return args


def run_all(args: argparse.Namespace, parent: Path) -> tuple[list[Findings], list[str]]:
    rng = random.Random(args.seed)
    rows: list[Findings] = []
    notes: list[str] = []
    share = [args.kills // len(SCENARIOS)] * len(SCENARIOS)
    share[0] += args.kills - sum(share)
    landed: Counter[str] = Counter()
    for scenario, kills in zip(SCENARIOS, share, strict=True):
        started = time.monotonic()
        found, where = kill_phase(scenario, kills, args.max_turns, rng, parent)
        landed.update(where)
        rows.append(found)
        print(
            f"  {scenario.name}: {found.kills} kills, {time.monotonic() - started:.0f} s",
            flush=True,
        )
    notes.append("where the kills landed:")
    notes.extend(f"  {n:>3}  {where}" for where, n in landed.most_common())
    started = time.monotonic()
    rows.append(outage_phase(2 if args.quick else 4, 16 if args.quick else 30, rng, parent))
    print(f"  outage: {time.monotonic() - started:.0f} s", flush=True)
    started = time.monotonic()
    found, injected = fault_phase(20 if args.quick else 40, rng, parent)
    rows.append(found)
    print(f"  faults: {time.monotonic() - started:.0f} s", flush=True)
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(injected.items()))
    notes.append(f"faults injected: {faults}; streams broken by kills/outages: {_disconnects}")
    monotonic = all(row.sessions_monotonic for row in rows)
    notes.append(
        f"session numbers in token_usage.jsonl non-decreasing: {'yes' if monotonic else 'NO'}"
    )
    return rows, notes


def main() -> int:
    args = parse_args()
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"chaos bench, seed {args.seed} (rerun: --seed {args.seed}), {date}")
    print(f"kills {args.kills}, max turns {args.max_turns}{', quick' if args.quick else ''}")
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="ouroboros-chaos-"))
    if args.keep:
        print(f"project folders kept in {tmp}")
    try:
        rows, notes = run_all(args, tmp)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(table(rows))
    print(LEGEND)
    print()
    print("\n".join(notes))
    print("events seen:")
    print(coverage(rows))
    failures = [f"{row.name}: {failure}" for row in rows for failure in row.failures]
    kills = sum(row.kills for row in rows)
    print(
        f"\n{kills} kills survived, {sum(r.outages for r in rows)} outages survived, "
        f"{time.monotonic() - started:.0f} s"
    )
    if failures:
        print(f"\nFAIL: {len(failures)} invariant(s) broken")
        for failure in failures:
            print(f"  - {failure}")
        return 1
    print(
        "PASS: no completed turn lost, no tool call executed twice, every line parses, "
        "every run reached its end"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
