"""The run's own files against a hostile agent, server or machine (issue 20, rows 17, 18, 19,
23), each through a real `python -m ouroboros run` against the scripted loopback server:
the state folder and the config are never in the workspace; a journal that no longer begins
with its run start is refused, never taken for a fresh run; a state folder that cannot be
written stops the run in one line and the same command resumes after the fix, nothing lost;
what people read shows no control character or escape sequence it was sent."""

from __future__ import annotations

import json
import shutil
import subprocess
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ouroboros.ground.printable import printable
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.state import snapshot
from tests.conftest import Project, fill

CLOSED = "http://127.0.0.1:9/v1"
"""Nothing listens there: a run that got as far as the server would retry, then fail."""

TITLE_CLEAR = "\x1b]0;T\x07\x1b[2J"
CLIPBOARD = "\x1b]52;c;cm0gLXJmIH4=\x07"
LINK = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"
CSI = "\x1b[31mred\x1b[0m\x1b[1A\r\x9b2J"
BIDI = "evil\u202etxt.exe"


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def raw_controls(text: str) -> list[str]:
    """What a terminal would act on rather than show: C0 (but newline and tab), DEL, C1, and
    the marks that reorder text."""
    return [
        repr(ch)
        for ch in text
        if ch not in "\n\t"
        and (unicodedata.category(ch) == "Cc" or ch in "\u061c\u200e\u200f\u2028\u2029")
        or 0x202A <= ord(ch) <= 0x202E
        or 0x2066 <= ord(ch) <= 0x2069
    ]


def turns(project: Project) -> list[tuple[int, int]]:
    """(session, turn) of every reply the journal holds, in order."""
    return [
        (r["session"], r["usage"]["turn"])
        for r in project.records("journal.jsonl")
        if r["kind"] == "message" and "usage" in r
    ]


def echo_agent(project: Project, at: int = 0, action: Any = None) -> ScriptedServer:
    """An agent that appends a numbered line to runs.log each turn; before answering the
    `at`-th request, `action()` is done to the machine (mid-run trouble)."""
    count = 0

    def respond(body: dict[str, Any]) -> Reply:
        nonlocal count
        count += 1
        if count == at:
            action()
        return Reply(tool_calls=[tool("shell_exec", command=f"echo call-{count} >> runs.log")])

    return ScriptedServer(respond)


# --- row 18: the run's own files are out of the workspace ---------------------------------------


@pytest.mark.parametrize(
    ("where", "paths", "named"),
    [
        ("workspace is the project", {"workspace": "."}, "paths.state_dir"),
        ("state folder in the workspace", {"state_dir": "workspace/.state"}, "paths.state_dir"),
        ("workspace in the state folder", {"workspace": ".ouroboros/work"}, "paths.workspace"),
        ("config in the workspace", {"workspace": ".", "state_dir": "../.ouroboros"}, "config"),
    ],
)
@pytest.mark.slow
def test_run_files_inside_the_workspace_are_refused_in_one_line(
    project: Project, where: str, paths: dict[str, str], named: str
) -> None:
    config = project.root / "config.toml"
    if where == "config in the workspace":
        config = project.workspace / "config.toml"
    project.configure(CLOSED, paths=paths)
    if config != project.root / "config.toml":
        (project.root / "config.toml").rename(config)
    before = sorted(p.name for p in project.root.rglob("*"))
    result = project.run("--config", str(config), "run", timeout=30)
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert named in line
    assert "inside paths." in line  # both paths named, and which key to change
    assert 'paths.workspace = "workspace"' in line
    assert sorted(p.name for p in project.root.rglob("*")) == before  # nothing created


# --- row 23: a journal that no longer begins with its run start --------------------------------


def _clobbered(journal: Path) -> None:
    lines = journal.read_bytes().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if json.loads(line)["kind"] == "run_start")
    # Its run start overwritten by what followed (the notices before it kept).
    journal.write_bytes(b"".join(lines[:start] + lines[start + 1 :]))


def _emptied(journal: Path) -> None:
    journal.write_bytes(b"")


def _replaced(journal: Path) -> None:
    journal.write_bytes(b"notes of the agent\nnothing to see here\n")


def _run_start_unended(journal: Path) -> None:
    first = journal.read_bytes().splitlines()[0]
    journal.write_bytes(first)  # a torn line: set aside on start, the run's history with it


def _every_line_bad(journal: Path) -> None:
    lines = journal.read_bytes().splitlines()
    journal.write_bytes(b"".join(b"#" + line[1:] + b"\n" for line in lines))


@pytest.mark.parametrize(
    "damage", [_clobbered, _emptied, _replaced, _run_start_unended, _every_line_bad]
)
@pytest.mark.slow
def test_a_journal_without_its_run_start_is_refused_never_a_fresh_run(
    project: Project, damage: Any
) -> None:
    with echo_agent(project) as server:
        project.configure(server.url)
        assert project.run("run", "--max-turns", "2").returncode == 0
        assert (project.root / ".ouroboros.run").exists()
        journal = project.state / "journal.jsonl"
        damage(journal)
        damaged = journal.read_bytes()
        asked = len(server.requests)
        result = project.run("run", "--max-turns", "4", timeout=30)
        assert result.returncode == 1
        line = one_line(result.stderr)
        assert str(journal) in line
        assert "run --fresh" in line
        assert len(server.requests) == asked  # not even discovery
        assert journal.read_bytes() == damaged
        assert "session 1 starts" not in result.stdout
        fresh = project.run("run", "--fresh", "--max-turns", "1")
        assert fresh.returncode == 0, fresh.stderr
    assert turns(project) == [(1, 1)]


@pytest.mark.slow
def test_a_journal_cut_to_a_shorter_run_is_refused(project: Project) -> None:
    """Cut after a whole line, it still begins with its run start: its snapshot, taken at the
    last session start, says how long it was then."""
    with echo_agent(project) as server:
        project.configure(server.url, session={"max_turns": 2})
        assert project.run("run", "--max-turns", "3").returncode == 0
        journal = project.state / "journal.jsonl"
        lines = journal.read_bytes().splitlines(keepends=True)
        journal.write_bytes(b"".join(lines[:3]))
        result = project.run("run", "--max-turns", "5", timeout=30)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert f"{journal} is shorter" in line
    assert "records were cut from it" in line
    assert len(journal.read_bytes().splitlines()) == 3


# --- row 19: a state folder that cannot be written ----------------------------------------------


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def immutable(tmp_path: Path) -> Iterator[list[Path]]:
    """Files made immutable in a test (`chattr +i`: root, on a file system that has it); made
    mutable again whatever happens, so that they can be removed."""
    probe = tmp_path / "probe"
    probe.write_text("x")
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    tried = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {tried.stderr.strip()}")
    _chattr("-i", probe)
    made: list[Path] = []
    yield made
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False, capture_output=True)


def _unwritable_line(result: subprocess.CompletedProcess[str], path: Path | str) -> str:
    """The one line that names the state file (a path, or a name in the state folder)."""
    assert result.returncode == 1, result.stdout + result.stderr
    line = one_line(result.stderr)
    assert line.startswith("error: cannot write "), line
    where = line.removeprefix("error: cannot write ").split(" (")[0]
    assert where == str(path) or Path(where).name == path, line
    assert " (Operation not permitted): " in line
    assert "chattr -i" in line
    assert "run the same command again" in line
    return line


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("journal.jsonl", "journal.jsonl"),
        ("events.jsonl", "events.jsonl"),
        ("token_usage.jsonl", "token_usage.jsonl"),
        ("status.json", "status.json"),
        ("lock", "lock"),
        (".", "status.json"),  # the folder itself: the first file it would create
    ],
)
@pytest.mark.slow
def test_an_immutable_state_file_at_start_is_one_line_and_the_run_resumes(
    project: Project, immutable: list[Path], name: str, named: str
) -> None:
    with echo_agent(project) as server:
        project.configure(server.url)
        assert project.run("run", "--max-turns", "2").returncode == 0
        path = project.state / name
        _chattr("+i", path)
        immutable.append(path)
        line = _unwritable_line(project.run("run", "--max-turns", "4", timeout=60), named)
        assert "`lsattr -d` each" in line
        _chattr("-i", path)
        resumed = project.run("run", "--max-turns", "4")
        assert resumed.returncode == 0, resumed.stderr
    assert turns(project) == [(1, n) for n in range(1, 5)]
    log = (project.workspace / "runs.log").read_text().splitlines()
    assert len(log) == len(set(log)) == 4


@pytest.mark.slow
def test_a_first_run_stopped_by_a_full_disk_runs_after_the_fix(
    project: Project, small_disk: Path
) -> None:
    """The run's start mark is made once its run start is on disk: a first run stopped by a
    full disk, whichever write it stops at (the logs, status.json, the journal's first record),
    is a first run again once there is room, never "a run began here and its journal is
    gone". Tried with the disk full at each of several points."""
    stopped_at = set()
    with echo_agent(project) as server:
        project.configure(server.url)
        for leave in range(4096, 32768, 4096):
            filler = fill(small_disk, leave)
            full = project.run("run", "--max-turns", "1", timeout=60)
            filler.unlink()
            if full.returncode == 0:
                break
            stopped_at.add(one_line(full.stderr).split(" (")[0].rsplit("/", 1)[-1])
            again = project.run("run", "--max-turns", "1", timeout=60)
            assert again.returncode == 0, again.stderr
            for path in small_disk.iterdir():
                if path.is_dir():  # the checkpoints' repository
                    shutil.rmtree(path)
                else:
                    path.unlink()
            (project.root / ".ouroboros.run").unlink(missing_ok=True)
    assert "journal.jsonl" in stopped_at, stopped_at


@pytest.mark.slow
def test_a_first_write_torn_by_a_crash_is_set_aside_and_the_run_starts(project: Project) -> None:
    project.state.mkdir()
    (project.state / "journal.jsonl").write_bytes(b'{"kind": "run_start", "v": 2, "mod')
    with echo_agent(project) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "1")
    assert result.returncode == 0, result.stderr
    assert turns(project) == [(1, 1)]
    assert list(project.state.glob("journal.jsonl.torn-*"))


@pytest.mark.parametrize(
    ("name", "at"),
    [
        ("journal.jsonl", 3),
        ("events.jsonl", 3),
        ("token_usage.jsonl", 3),
        ("status.json", 3),
        ("journal.jsonl.snapshot", 2),  # written again at the restart after turn 2
    ],
)
@pytest.mark.slow
def test_a_state_file_made_immutable_mid_run_is_one_line_and_nothing_is_lost(
    project: Project, immutable: list[Path], name: str, at: int
) -> None:
    path = project.state / name

    def lock_it() -> None:
        _chattr("+i", path)
        immutable.append(path)

    with echo_agent(project, at, lock_it) as server:
        project.configure(server.url, session={"max_turns": 2})
        stopped = project.run("run", "--max-turns", "6", timeout=60)
        _unwritable_line(stopped, path)
        done = turns(project)
        assert 0 < len(done) < 6
        _chattr("-i", path)
        resumed = project.run("run", "--max-turns", "6")
        assert resumed.returncode == 0, resumed.stderr
    after = turns(project)
    assert after[: len(done)] == done  # every turn completed before the trouble is kept
    assert len(after) == 6
    log = (project.workspace / "runs.log").read_text().splitlines()
    assert len(log) == len(set(log))  # no call run twice


@pytest.mark.slow
def test_a_lock_made_immutable_mid_run_ends_the_run_cleanly_and_is_named_next_time(
    project: Project, immutable: list[Path]
) -> None:
    """The lock is written only as a run starts: the run goes on to its end, and the next one
    says in one line what to do."""
    lock = project.state / "lock"

    def lock_it() -> None:
        _chattr("+i", lock)
        immutable.append(lock)

    with echo_agent(project, 2, lock_it) as server:
        project.configure(server.url)
        ended = project.run("run", "--max-turns", "3")
        assert ended.returncode == 0, ended.stderr
        assert "Traceback" not in ended.stderr
        _unwritable_line(project.run("run", "--max-turns", "5", timeout=60), lock)
        _chattr("-i", lock)
        resumed = project.run("run", "--max-turns", "5")
        assert resumed.returncode == 0, resumed.stderr
    assert turns(project) == [(1, n) for n in range(1, 6)]


@pytest.fixture
def read_only_state(project: Project) -> Iterator[Path]:
    """The state folder of a run that began, then bound read-only over itself (root and
    mount(8) needed; skipped elsewhere)."""
    project.state.mkdir()
    bound = subprocess.run(
        ["mount", "--bind", str(project.state), str(project.state)], capture_output=True, text=True
    )
    if bound.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bound.stderr.strip()}")
    try:
        yield project.state
    finally:
        subprocess.run(["umount", "-l", str(project.state)], check=False)


@pytest.mark.slow
def test_a_read_only_state_folder_is_one_line_and_the_run_resumes(
    project: Project, read_only_state: Path
) -> None:
    with echo_agent(project) as server:
        project.configure(server.url)
        assert project.run("run", "--max-turns", "2").returncode == 0
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(read_only_state)],
            check=True,
            capture_output=True,
        )
        result = project.run("run", "--max-turns", "4", timeout=60)
        assert result.returncode == 1
        line = one_line(result.stderr)
        assert line.startswith(f"error: cannot write {read_only_state}/"), line
        assert "(Read-only file system): its file system is read-only" in line
        subprocess.run(
            ["mount", "-o", "remount,bind,rw", str(read_only_state)],
            check=True,
            capture_output=True,
        )
        resumed = project.run("run", "--max-turns", "4")
        assert resumed.returncode == 0, resumed.stderr
    assert turns(project) == [(1, n) for n in range(1, 5)]


# --- row 17: what people read is safe to print --------------------------------------------------


def test_printable_shows_every_control_and_reordering_mark() -> None:
    assert printable(TITLE_CLEAR) == "␛]0;T␇␛[2J"
    assert printable(CSI) == "␛[31mred␛[0m␛[1A␍\\x9b2J"
    assert printable(BIDI) == "evil<U+202E>txt.exe"
    assert printable("a\nb\tc\x7f\x00") == "a⏎b c␡␀"
    assert printable("a\nb\tc", lines=True) == "a\nb\tc"
    assert printable("naïve, 日本語, ✓") == "naïve, 日本語, ✓"
    hostile = "".join(chr(c) for c in range(0xA0)) + "\u202a\u2066\u2028"
    assert raw_controls(printable(hostile)) == []
    assert raw_controls(printable(hostile, lines=True)) == []


def hostile_agent() -> list[Reply]:
    return [
        Reply(tool_calls=[tool(TITLE_CLEAR + "<b>x</b>", path=".")]),
        Reply(tool_calls=[tool("file_read", path=LINK + BIDI)]),
        Reply(status=503, error_body={"message": "loading " + CSI + CLIPBOARD}),
        Reply(tool_calls=[tool("finish", summary="done " + CLIPBOARD + "\nsecond line" + BIDI)]),
    ]


@pytest.mark.slow
def test_the_live_view_tail_status_and_report_show_no_escape_sequence(project: Project) -> None:
    with ScriptedServer(hostile_agent()) as server:
        project.configure(server.url)
        result = project.run("run", "--max-turns", "5")
    assert result.returncode == 0, result.stderr
    assert raw_controls(result.stdout + result.stderr) == []
    assert "␛]0;T␇␛[2J<b>x</b>" in result.stdout  # the tool's name, shown as it came
    assert "evil<U+202E>txt.exe" in result.stdout  # the path, in the error of its call
    assert "loading ␛[31" in result.stdout  # the server's error, in the wait's line (cut)
    assert "done ␛]52;c;cm0gLXJmIH4=␇⏎second line" in result.stdout  # the summary, one line
    for command in (["tail"], ["tail", "--tools"], ["tail", "-n", "3"], ["status"]):
        shown = project.run(*command)
        assert shown.returncode == 0, shown.stderr
        assert raw_controls(shown.stdout + shown.stderr) == [], command
        assert "␛" in shown.stdout, command
    report = project.run("report")
    assert report.returncode == 0, report.stderr
    page = (project.state / "report.html").read_text()
    assert raw_controls(page) == []
    assert "loading ␛[31" in page  # the server's error, in the wait's line (cut as `tail` cuts)
    # --json passes the records through exact: the hostile texts come back unchanged.
    exact = project.run("tail", "--json", "--tools")
    names = [json.loads(line).get("name") for line in exact.stdout.splitlines()]
    assert TITLE_CLEAR + "<b>x</b>" in names
    # So are the files, as JSON escapes (`cat` and `tail -f` of them are safe too).
    assert raw_controls(exact.stdout) == []
    for name in ("journal.jsonl", "events.jsonl", "token_usage.jsonl"):
        assert raw_controls((project.state / name).read_text()) == [], name
    summaries = [e.get("detail") for e in project.events("run_end")]
    assert "done " + CLIPBOARD + "\nsecond line" + BIDI in summaries


@pytest.mark.slow
def test_a_snapshot_still_belongs_to_a_journal_that_escapes_what_it_holds(
    project: Project,
) -> None:
    """The snapshot names the journal's bytes at a session start: those written, escapes and
    all, or every resume would fold the whole journal."""
    script = [
        Reply(tool_calls=[tool("file_read", path=LINK + BIDI + CSI)]),
        Reply(tool_calls=[tool("list_dir", path=".")]),
        Reply(text="more"),
    ]
    with ScriptedServer(script) as server:
        project.configure(server.url, session={"max_turns": 1})
        assert project.run("run", "--max-turns", "3").returncode == 0
    journal = project.state / "journal.jsonl"
    assert "\\u202e" in journal.read_text()  # carried into session 2's opening
    assert snapshot.load(journal) is not None


@pytest.mark.slow
def test_a_fatal_server_error_and_its_status_show_no_escape_sequence(project: Project) -> None:
    said = "bad request " + TITLE_CLEAR + CLIPBOARD + "\r\nline two " + BIDI
    with ScriptedServer([Reply(status=400, error_body={"message": said})]) as server:
        project.configure(server.url)
        result = project.run("run", timeout=60)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert raw_controls(line) == []
    assert "bad request ␛]0;T␇␛[2J␛]52;c;cm0gLXJmIH4=␇␍⏎line two evil<U+202E>txt.exe" in line
    status = project.run("status")
    assert raw_controls(status.stdout) == []
    assert "bad request ␛]0;T␇" in status.stdout
    row = next(line for line in status.stdout.splitlines() if "ago: the server rejected" in line)
    assert "␍⏎line two evil<U+202E>txt.exe" in row  # the error row, on one line


@pytest.mark.slow
def test_a_state_folder_named_with_escapes_is_shown_printable(project: Project) -> None:
    """Whatever a command prints goes out through one guard: here a folder name (a folder
    the agent named, given to --state) in the lines that say there is no run in it."""
    named = project.root / ("runs[bold]" + TITLE_CLEAR + BIDI)  # markup too
    named.mkdir()
    project.configure(CLOSED)
    for command in ("tail", "status", "report"):
        shown = project.run(command, "--state", str(named))
        assert shown.returncode == 1
        line = one_line(shown.stdout + shown.stderr)
        assert raw_controls(line) == [], command
        assert "runs[bold]␛]0;T" in line, command  # (rich itself drops the bell)
        assert "␛[2Jevil<U+202E>txt.exe" in line, command
