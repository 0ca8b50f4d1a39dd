"""`tail` and `status` on state folders written by real runs (scripted server, real harness)."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from ouroboros.cli import main
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.errors import RunError
from ouroboros.ground.jsonl import JsonlReader
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.model.scripted import Reply, Responder, ScriptedServer, tool
from ouroboros.observe.liveness import liveness
from ouroboros.observe.status import _elapsed, read_status, render_status
from ouroboros.observe.tail import MAX_HOLD_S, Follower, Merger
from ouroboros.run.lock import state_lock
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.sinks.record_events import events_of
from ouroboros.start import run
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal, fold
from ouroboros.state.records import JOURNAL_RECORD, RunStart
from tests.conftest import PROJECT_ROOT, Project, wait_for
from tests.test_context_run import fill_workspace

SUPERVISOR = {"max_restarts": 2, "max_total_turns": 100}


def agent(files: int = 12) -> Responder:
    """Looks around, tries a forbidden command, meets one server hiccup, then reads forever."""
    opening = iter(
        [
            Reply(text="Looking around.", tool_calls=[tool("list_dir", path=".")]),
            Reply(tool_calls=[tool("shell_exec", command="sudo reboot")]),
            Reply(status=503, error_body={"message": "model is loading"}),
        ]
    )
    paths = itertools.cycle(f"mod{i}.py" for i in range(files))

    def respond(body: dict[str, Any]) -> Reply:
        return next(opening, None) or Reply(
            text="Reading on.", tool_calls=[tool("file_read", path=next(paths))]
        )

    return respond


def run_here(project: Project) -> None:
    """The real supervisor in this process (the CLI would add 2 s of imports per run)."""
    settings = load_settings(project.root / "config.toml")
    log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO(), width=200)))
    try:
        anyio.run(run, settings, log)
    except RunError:
        pass
    finally:
        log.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A run that masks, winds down and restarts twice; then a resume that finds no server."""
    root = tmp_path_factory.mktemp("recorded")
    (root / "workspace").mkdir()
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nRead the modules.\n")
    project = Project(root)
    fill_workspace(project, words=300)
    with ScriptedServer(agent(), dialect="llama", n_ctx=4096) as server:
        project.configure(server.url, supervisor=SUPERVISOR)
        run_here(project)
        dead_url = server.url
    project.configure(dead_url, llm={"retry_for_s": 0.3}, supervisor=SUPERVISOR)
    run_here(project)
    assert len(project.events("session_restart")) == 2
    assert project.events("error")
    return project


@pytest.fixture
def torn(recorded: Project, tmp_path: Path) -> Path:
    """A copy whose two logs end in the middle of a line, as a crash or a live write leaves them."""
    state = tmp_path / ".ouroboros"
    shutil.copytree(recorded.state, state)
    (tmp_path / "config.toml").write_text((recorded.root / "config.toml").read_text())
    for name in ("token_usage.jsonl", "events.jsonl"):
        with (state / name).open("a") as f:
            f.write('{"v":1,"ts":"2099-01-01T00:00:00.000+00:00","kind":"tok')
    return state


def stamps(text: str) -> list[str]:
    return re.findall(r"^(\d\d:\d\d:\d\d) ", text, flags=re.M)


@pytest.mark.slow
def test_tail_shows_calls_and_events_in_time_order(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", "--state", str(recorded.state)]) == 0
    out = capsys.readouterr().out
    calls = re.findall(r"^\S+ s(\d) t(\d+) +[█░┊]+ +\d+% (\w+)", out, flags=re.M)
    assert len(calls) == len(recorded.usage())
    assert {zone for _, _, zone in calls} >= {"normal", "soft", "hard"}
    assert stamps(out) == sorted(stamps(out))
    lines = out.splitlines()

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(lines) if re.search(pattern, line))

    assert first("run started") < first(r" s1 t1 ") < first("wind-down: next prompt")
    assert first(r" s1 t1 ") < first(r"masked \d+ old result")
    assert (
        first("wind-down: next prompt")
        < first("session 1 ends after")
        < first(r"restart 1: session 2 after \d+ turns \(context_full\)")
    )
    assert first("restart 1: session 2") < first(r" s2 t1 ") < first("restart 2: session 3")
    assert first(r"blocked \(") < first(r"waiting for http://127\.0\.0\.1:\d+/v1 \(not running\?")
    assert "run stopped: max_restarts" in out
    assert "error: gave up on the model server" in out
    assert "file_read 1," not in out, "tool calls are left out unless --tools"


def test_tail_tools_flag_adds_a_line_per_tool_call(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", "--tools", "--state", str(recorded.state)]) == 0
    out = capsys.readouterr().out
    assert out.count("  file_read ") == sum(
        e["name"] == "file_read" for e in recorded.events("tool_call")
    )


def test_tail_json_passes_both_logs_through_unchanged(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", "--json", "--state", str(recorded.state)]) == 0
    out = capsys.readouterr().out.splitlines()
    written = [
        line
        for name in ("token_usage.jsonl", "events.jsonl")
        for line in (recorded.state / name).read_text().splitlines()
    ]
    assert sorted(out) == sorted(written)
    times = [json.loads(line)["ts"] for line in out]
    assert times == sorted(times)


def test_tail_leaves_out_a_torn_last_line(
    recorded: Project, torn: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tail", "--state", str(recorded.state)]) == 0
    whole = capsys.readouterr().out
    assert main(["tail", "--state", str(torn)]) == 0
    captured = capsys.readouterr()
    assert captured.out == whole
    assert "token_usage.jsonl: its last line is not complete yet" in captured.err
    assert main(["tail", "--json", "--state", str(torn)]) == 0
    assert '"ts":"2099-' not in capsys.readouterr().out


def test_tail_last_lines_of_a_session_since_a_time(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-n`, `--session` and `--since` pick from the same lines `tail` shows, in the same order;
    `-n` reads from the end of the files, and gives what the whole stream's last lines are."""
    state = str(recorded.state)
    assert main(["tail", "--state", state]) == 0
    whole = capsys.readouterr().out.splitlines()
    for n in (1, 7, 50):
        assert main(["tail", "-n", str(n), "--state", state]) == 0
        assert capsys.readouterr().out.splitlines() == whole[-n:]
    assert main(["tail", "-n", "5", "--json", "--state", state]) == 0
    last = [json.loads(line)["seq"] for line in capsys.readouterr().out.splitlines()]
    assert last == sorted(last)
    assert len(last) == 5
    assert main(["tail", "--session", "2", "--state", state]) == 0
    second = capsys.readouterr().out.splitlines()
    calls = [line for line in second if re.search(r" s\d t\d+ ", line)]
    assert calls
    assert all(" s2 t" in line for line in calls)
    assert len(calls) == sum(u["session"] == 2 for u in recorded.usage())
    assert main(["tail", "--since", "1d", "--state", state]) == 0
    assert capsys.readouterr().out.splitlines() == whole
    assert main(["tail", "--since", "2099-01-01T00:00", "--state", state]) == 0
    assert capsys.readouterr().out == ""
    assert main(["tail", "--since", "yesterday", "--state", state]) == 1
    assert "give a time (2026-11-23T14:00) or an age" in capsys.readouterr().err


def test_tail_without_a_run_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tail", "--state", str(tmp_path / "nothing")]) == 1
    assert "no run in" in capsys.readouterr().err


class Reader:
    """Collects a subprocess's stdout lines in the background."""

    def __init__(self, process: subprocess.Popen[str]):
        self.lines: queue.Queue[str] = queue.Queue()
        assert process.stdout is not None
        stream = process.stdout

        def pump() -> None:
            for line in stream:
                self.lines.put(line)

        threading.Thread(target=pump, daemon=True).start()

    def until(self, pattern: str, timeout: float = 15) -> list[str]:
        seen, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            seen.append(line)
            if re.search(pattern, line):
                return seen
        raise AssertionError(f"no line matching {pattern!r} in {timeout} s; got {seen}")

    def quiet(self, seconds: float) -> list[str]:
        time.sleep(seconds)
        return [self.lines.get() for _ in range(self.lines.qsize())]


@pytest.fixture
def follow(tmp_path: Path) -> Iterator[tuple[Path, Reader]]:
    state = tmp_path / "later" / ".ouroboros"
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "tail", "--follow", "--state", str(state)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        yield state, Reader(process)
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stderr is not None
        assert "Traceback" not in process.stderr.read()
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()


@pytest.mark.slow
def test_tail_follow_waits_for_the_run_and_prints_what_is_appended(
    recorded: Project, follow: tuple[Path, Reader]
) -> None:
    state, reader = follow
    events = (recorded.state / "events.jsonl").read_text().splitlines(keepends=True)
    usage = (recorded.state / "token_usage.jsonl").read_text().splitlines(keepends=True)
    time.sleep(0.5)  # started before the run exists
    state.mkdir(parents=True)

    def before(line: str) -> list[str]:
        """The events written before `line` (a call's line waits for its tools' lines)."""
        seq = json.loads(line)["seq"]
        return [e for e in events if json.loads(e)["seq"] < seq]

    with (state / "events.jsonl").open("a") as ev, (state / "token_usage.jsonl").open("a") as us:
        ev.writelines(before(usage[2]))
        ev.flush()
        us.writelines(usage[:2])
        us.flush()
        reader.until(r" s1 t2 ")
        # Half a line: a write in progress. Nothing shows until the rest arrives.
        us.write(usage[2][:40])
        us.flush()
        assert not any(" s1 t3 " in line for line in reader.quiet(0.8))
        us.write(usage[2][40:])
        us.flush()
        ev.writelines(before(usage[3])[len(before(usage[2])) :])
        ev.flush()
        reader.until(r" s1 t3 ")
        ev.writelines(e for e in events if '"kind":"session_restart"' in e)
        ev.flush()
        reader.until(r"restart 2: session 3")


@pytest.mark.slow
def test_tail_follow_of_a_long_run_starts_at_its_end(recorded: Project) -> None:
    """Like tail(1): the last lines first, then what is appended; never the whole history."""
    process = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "tail", "-f", "--state", str(recorded.state)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    reader = Reader(process)
    try:
        shown = reader.until("run stopped: max_restarts") + reader.quiet(0.5)
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()  # type: ignore[union-attr]
        process.stderr.close()  # type: ignore[union-attr]
    assert 1 <= len(shown) <= 10
    assert not any("run started" in line or " s1 t1 " in line for line in shown)


def test_merger_waits_for_a_line_numbered_before_one_it_has(tmp_path: Path) -> None:
    merger = Merger.for_state(tmp_path)

    def line(kind: str, seq: int) -> str:
        return json.dumps({"seq": seq, "ts": "2026-11-23T10:00:00.000+00:00", "kind": kind})

    first, usage, later = line("session_start", 1), line("token_usage", 2), line("context_mask", 3)
    (tmp_path / "events.jsonl").write_text(first + "\n" + later + "\n")
    shown = [x.raw for x in merger.poll()]  # 3 waits: the usage file may not have caught up
    assert shown == [first]
    (tmp_path / "token_usage.jsonl").write_text(usage + "\n")
    shown += [x.raw for x in merger.poll()]
    assert shown == [first, usage, later]


@pytest.mark.slow
def test_merger_gives_up_on_a_lost_line(tmp_path: Path) -> None:
    merger = Merger.for_state(tmp_path)
    lines = [json.dumps({"seq": seq, "kind": "warning"}) for seq in (1, 3)]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    assert [x.raw for x in merger.poll()] == lines[:1]
    time.sleep(MAX_HOLD_S + 0.1)
    assert [x.raw for x in merger.poll()] == lines[1:]


def test_follower_starts_over_on_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    follower = Follower(path)
    assert follower.read() == []
    path.write_text('{"kind":"a"}\n{"kind":"b"}\n')
    assert [line.record["kind"] for line in follower.read()] == ["a", "b"]
    path.rename(tmp_path / "aside.jsonl")  # `run --fresh` moves the old run away
    path.write_text('{"kind":"c"}\nnot json\n')
    assert [line.record["kind"] for line in follower.read()] == ["c"]
    assert [str(p) for p in follower.reader.problems] == [
        "events.jsonl, line 2: not a JSON object; skipped (the file keeps it)"
    ]


def test_status_of_a_run_that_stopped_on_an_error(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--state", str(recorded.state)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    usage = recorded.usage()
    turns = len(usage)
    prompt = sum(u["prompt_tokens"] for u in usage)
    completion = sum(u["completion_tokens"] for u in usage)
    last = usage[-1]
    assert "not running: stopped by an error" in out
    assert "gave up on the model server" in out
    assert "session 3 (ended: context_full)" in out
    assert f"{last['turn']} this session, {turns} in all" in out
    assert "restarts 2 " in out
    assert f"{last['fraction']:.0%} {last['zone']}" in out
    assert f"{last['total_tokens']:,} of {last['prompt_budget']:,} tokens" in out
    assert f"{prompt:,} prompt + {completion:,} completion" in out
    # Budgets from the config next to the state folder (max_total_turns 100, max_restarts 2).
    assert f"turns limit {100 - turns} left of 100" in out
    assert "restarts limit 0 left (2 used)" in out
    assert "tokens limit unlimited" in out
    assert re.search(r"last model call \d+ s ago", out)


def test_status_reads_the_runs_summary_and_folds_the_journal_without_one(
    recorded: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status.json`, kept by the run, says what a fold of the journal says; a run without one
    (older, or lost) is folded as before."""
    copy = tmp_path / ".ouroboros"
    shutil.copytree(recorded.state, copy)
    assert (copy / "status.json").exists()
    assert main(["status", "--state", str(copy)]) == 0
    kept = capsys.readouterr().out
    (copy / "status.json").unlink()
    assert main(["status", "--state", str(copy)]) == 0
    folded = capsys.readouterr().out

    def timeless(text: str) -> str:
        return re.sub(r"\d+ (s|min \d+ s) ago", "… ago", text.replace(str(copy), ""))

    assert timeless(kept) == timeless(folded)
    assert "last event" in kept


def test_status_of_an_ended_run_stops_its_clock(recorded: Project) -> None:
    now = time.time()
    early, late = read_status(recorded.state, now), read_status(recorded.state, now + 86_400)
    assert _elapsed(early) == _elapsed(late) > 0


@pytest.mark.slow
def test_status_says_the_run_waits_for_its_server(project: Project) -> None:
    """A run whose server is down: `status` says since when it waits, the next try, and why."""
    project.configure("http://127.0.0.1:9/v1", llm={"retry_initial_s": 0.2, "retry_max_s": 2.0})
    run = project.start("run")
    try:
        wait_for(lambda: len(project.events("retry")) >= 3)
        out = " ".join(project.run("status").stdout.split())
    finally:
        run.terminate()
        run.communicate(timeout=20)
    assert "running (pid" in out
    assert "waiting for the model server since" in out
    waits = r"\(try \d+, (next in \d+ s|trying now)\): nothing answers at http://127.0.0.1:9/v1"
    assert re.search(waits, out)
    assert "cannot reach" not in out  # it was said twice in one sentence


def test_status_of_a_live_run(
    recorded: Project, torn: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with state_lock(torn):
        assert liveness(torn).alive
        assert main(["status", "--state", str(torn)]) == 0
        out = capsys.readouterr().out
    assert f"running (pid {os.getpid()})" in out
    assert not liveness(torn).alive
    assert "released its lock" in liveness(torn).detail


def test_status_of_a_killed_run(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / "lock").write_text(str(gone.pid))  # what kill -9 leaves: a pid, no flock
    live = liveness(tmp_path)
    assert not live.alive
    assert "killed or crashed" in live.detail


def test_status_without_a_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--state", str(tmp_path / "nothing")]) == 1
    assert "no run in" in capsys.readouterr().out


def status_both_ways(state: Path) -> tuple[str, str]:
    """`status` of two copies of a run's state folder, as at one moment: as it reads it (from
    `status.json` where that is whole) and from the journal alone (without `status.json`). One
    moment for both: a killed run's ages and wall time count on to now, and a second passing
    between the two would tell them apart (and move where a line wraps)."""
    now, config = time.time(), state.parent / "config.toml"
    said = []
    for name in ("kept", "fold"):
        copy = state.parent / name / ".ouroboros"
        shutil.rmtree(copy.parent, ignore_errors=True)
        shutil.copytree(state, copy)
        if name == "fold":
            (copy / "status.json").unlink()
        out = io.StringIO()
        panel = render_status(read_status(copy, now), lambda: load_settings(config))
        Console(file=out, width=80).print(panel)
        said.append(out.getvalue().replace(f"/{name}/", "/copy/"))
    return said[0], said[1]


@pytest.mark.slow
def test_status_from_its_summary_is_the_fold_of_the_journal_after_a_kill_and_after_the_end(
    project: Project,
) -> None:
    """What `status` says comes from the journal: the same from `status.json` and from a fold of
    the journal alone, after a kill -9 mid-run (also when the kill came between a record and
    `status.json`), and after a run that took over the dead run's lock ended."""
    opening = iter([Reply(status=503, error_body={"message": "model is loading"})])

    def respond(body: dict[str, Any]) -> Reply:
        command = tool("shell_exec", command="echo step; sleep 0.05")
        return next(opening, None) or Reply(text="On.", tool_calls=[command])

    with ScriptedServer(respond, dialect="llama", n_ctx=4096) as server:
        # A window larger than the server's: a warning given when the run starts.
        project.configure(server.url, context={"limit": 8192})
        process = project.start("run")
        wait_for(lambda: len(project.usage()) >= 4)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        kept, folded = status_both_ways(project.state)
        assert kept == folded
        assert "not running" in kept
        assert "warning" in kept
        # A kill between a record and `status.json`: the record is in the journal only.
        journal = Journal(project.state / JOURNAL)
        journal.notify("warning", "journalled just before the kill")
        journal.close()
        kept, folded = status_both_ways(project.state)
        assert kept == folded
        assert "journalled just before the kill" in kept
        project.configure(server.url, context={"limit": 8192}, supervisor={"max_total_turns": 8})
        assert project.run("run").returncode == 0
    kept, folded = status_both_ways(project.state)
    assert kept == folded
    assert "took over a stale lock left by pid" in kept
    assert "max_total_turns" in kept


@pytest.mark.slow
def test_a_run_refused_by_the_lock_leaves_the_live_runs_files_as_they_are(torn: Path) -> None:
    """The lock comes before any file of the run is opened: a second supervisor does not set
    aside the line the live run is writing, nor touch its summary."""
    before = {path.name: path.read_bytes() for path in torn.iterdir() if path.is_file()}
    settings = load_settings(torn.parent / "config.toml")
    assert settings.paths.state_dir == torn
    log = EventLog(torn, Terminal(Console(file=io.StringIO())))
    with state_lock(torn), pytest.raises(RunError, match="another supervisor"):
        anyio.run(run, settings, log)
    log.close()
    after = {path.name: path.read_bytes() for path in torn.iterdir() if path.is_file()}
    assert after.keys() - {"lock"} == before.keys() - {"lock"}
    assert all(after[name] == data for name, data in before.items() if name != "lock")


def test_every_call_draws_the_hard_line_in_force(
    recorded: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """After a wind-down the session holds to the line it placed, below the configured one:
    the usage lines, and the bars `tail` draws from them, show that line."""
    configured = recorded.events("context_window")[0]["hard_line"]
    usage = recorded.usage()
    assert all(u["hard_line"] <= configured for u in usage)
    wind_downs = recorded.events("wind_down")
    assert wind_downs
    for wind_down in wind_downs:
        after = next(
            u for u in usage if u["session"] == wind_down["session"] and u["seq"] > wind_down["seq"]
        )
        assert after["hard_line"] == wind_down["hard_line"] < configured
    assert main(["tail", "--state", str(recorded.state)]) == 0
    bars = re.findall(r"^\S+ s\d t\d+ +([█░┊]+) ", capsys.readouterr().out, flags=re.M)
    for line, drawn in zip(usage, bars, strict=True):
        marks = [i for i, cell in enumerate(drawn) if cell == "┊"]
        hard_at = round(line["hard_line"] / line["prompt_budget"] * len(drawn)) - 1
        filled = drawn.count("█")
        assert (hard_at in marks) == (hard_at >= filled)


def test_both_logs_are_the_journals_records_as_lines(recorded: Project) -> None:
    """Nothing but the journal writes what people read: its records, folded again, make both
    logs line for line (less the order numbers the writer gave them)."""
    state = RunState()
    made = []
    for record in JsonlReader(recorded.state / JOURNAL).records(JOURNAL_RECORD):
        state.apply(record)
        made += events_of(record, state)
    written = sorted(recorded.records("events.jsonl") + recorded.usage(), key=lambda r: r["seq"])
    assert [{k: v for k, v in line.items() if k != "seq"} for line in written] == json.loads(
        json.dumps(made, default=str)
    )


@pytest.fixture
def stopped_after_resuming(recorded: Project, tmp_path: Path) -> Path:
    """The recorded run resumed, its summary kept by the run, then no end: a supervisor holds
    its lock (running), or its pid is gone (killed)."""
    state = tmp_path / ".ouroboros"
    shutil.copytree(recorded.state, state)
    log = EventLog(state, Terminal(Console(file=io.StringIO())))
    journal = Journal(state / JOURNAL)
    journal.sinks.extend(log.sinks())
    journal.append(RunStart(model="scripted", base_url="http://127.0.0.1:9/v1", resumed=True))
    journal.notify("warning", "the last record before the kill")
    journal.close()
    log.close()
    return state


def wall_times(
    state: Path, later: float, running: bool = False, ahead: float = 0
) -> tuple[float, float, float]:
    """The wall time `status` says of a run: from its `status.json` `ahead` seconds from now,
    from its journal alone `later` seconds after that (each copy's lock held while it is read:
    `running`); and the newest record's time less the run's start."""
    now, copies = time.time() + ahead, []
    for name in ("kept", "fold"):
        copy = state.parent / name / ".ouroboros"
        shutil.copytree(state, copy)
        if name == "fold":
            (copy / "status.json").unlink()
        copies.append(copy)
    with state_lock(copies[0]) if running else contextlib.nullcontext():
        kept = read_status(copies[0], now)
    with state_lock(copies[1]) if running else contextlib.nullcontext():
        folded = read_status(copies[1], now + later)
    assert kept.live.alive == folded.live.alive == running
    assert "last_ts" in json.loads((copies[0] / "status.json").read_text())["run"]
    state_then, _ = fold(state / JOURNAL)
    assert state_then.started_at is not None
    assert state_then.last_ts is not None
    last = datetime.fromisoformat(state_then.last_ts).timestamp() - state_then.started_at
    return _elapsed(kept), _elapsed(folded), last


def test_status_of_an_ended_run_says_one_wall_time_from_its_summary_and_its_journal(
    recorded: Project, tmp_path: Path
) -> None:
    state = tmp_path / ".ouroboros"
    shutil.copytree(recorded.state, state)
    kept, folded, last = wall_times(state, later=4)
    assert kept == folded == pytest.approx(last)


def test_status_of_a_killed_run_says_one_wall_time_from_its_summary_and_its_journal(
    stopped_after_resuming: Path,
) -> None:
    """Killed, its clock stopped at its newest record: read from `status.json`, and 4 s later
    from the journal alone, it says the same (it said 5 s, then 9 s)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (stopped_after_resuming / "lock").write_text(str(dead.pid))
    assert "killed" in liveness(stopped_after_resuming).detail
    kept, folded, last = wall_times(stopped_after_resuming, later=4)
    assert kept == folded == pytest.approx(last)


def test_status_of_a_running_run_says_one_wall_time_from_its_summary_and_its_journal(
    stopped_after_resuming: Path,
) -> None:
    """Running, its clock runs on: read at one moment (a minute from now), the same from
    either, to that moment."""
    kept, folded, last = wall_times(stopped_after_resuming, later=0, running=True, ahead=60)
    assert kept == folded > last + 59
