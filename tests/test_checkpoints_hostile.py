"""Checkpoints of a workspace the agent may have made hostile: links out of it, FIFOs, a `.git`
of its own, `.gitattributes`, odd file names, files past the size limit, a missing or broken git.
Nothing outside the workspace is read into the repository or written by a rewind; nothing hangs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from ouroboros.checkpoints.commit import Committed, commit_workspace
from ouroboros.checkpoints.git_store import Repo
from ouroboros.checkpoints.restore import Restored, prepare, put_back
from ouroboros.ground.state_folder import CHECKPOINTS, LOCK
from ouroboros.model.scripted import Reply
from tests.conftest import Project
from tests.inprocess import run_here
from tests.test_checkpoints import tree

Places = tuple[Path, Path, Path]
"""A workspace, a state folder, and a folder outside both."""
HANG_GUARD_S = 120
"""A commit of the workspace not finished by then hangs: the test fails rather than waits."""


@pytest.fixture
def places(tmp_path: Path) -> Places:
    """A workspace, a state folder, and a folder outside both."""
    found = tmp_path / "workspace", tmp_path / "state", tmp_path / "outside"
    for folder in found:
        folder.mkdir()
    return found


def repo_of(places: Places) -> Repo:
    return Repo(places[1] / CHECKPOINTS, places[0])


def take(repo: Repo, max_bytes: int = 10**8) -> Committed:
    async def guarded() -> Committed:
        with anyio.fail_after(HANG_GUARD_S):
            return await commit_workspace(
                repo, "refs/checkpoints/session-1", "session 1", max_bytes
            )

    return anyio.run(guarded)


def rewind(repo: Repo, commit: str, aside: Path) -> Restored:
    """The workspace put back as `commit` holds it, today's files moved beneath `aside`."""
    aside.mkdir()

    async def both() -> Restored:
        plan = await prepare(repo, commit, aside.name, 10**8)
        done = Restored(plan.today.commit)
        await put_back(repo, plan, aside, done)
        return done

    return anyio.run(both)


def stored(repo: Repo) -> bytes:
    """Every object of the repository, contents and all."""
    return subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        env=repo.env(),
        capture_output=True,
        check=True,
    ).stdout


def test_a_link_out_of_the_workspace_is_stored_as_the_link(places: Places) -> None:
    ws, _, outside = places
    (outside / "secret.txt").write_text("SECRET-CONTENT")
    (ws / "leak").symlink_to(outside / "secret.txt")
    (ws / "way-out").symlink_to(outside)
    (ws / "notes.md").write_text("mine")
    repo = repo_of(places)
    taken = take(repo)
    assert b"SECRET-CONTENT" not in stored(repo)
    assert taken.files == 3
    listed = subprocess.run(
        ["git", "ls-tree", "-r", taken.commit], env=repo.env(), capture_output=True, text=True
    ).stdout
    modes = {line.split("\t")[1]: line.split()[0] for line in listed.splitlines()}
    assert modes == {"leak": "120000", "notes.md": "100644", "way-out": "120000"}


def test_a_rewind_writes_nothing_through_links_planted_before_it(places: Places) -> None:
    ws, state, outside = places
    (ws / "notes").mkdir()
    (ws / "notes" / "a.md").write_text("old notes")
    (ws / "b.txt").write_text("B")
    repo = repo_of(places)
    then = tree(ws)
    taken = take(repo)
    # The agent plants links where the checkpoint's folder and file are, and hides one from git.
    (ws / "notes" / "a.md").unlink()
    (ws / "notes").rmdir()
    (ws / "notes").symlink_to(outside)
    (ws / "b.txt").unlink()
    (ws / "b.txt").symlink_to(outside / "b.txt")
    (outside / "b.txt").write_text("outside's own")
    (ws / ".gitignore").write_text("notes\n")
    before = tree(outside)
    done = rewind(repo, taken.commit, state / "aside")
    assert tree(outside) == before
    assert tree(ws) == then
    assert sorted(tree(state / "aside")) == [".gitignore", "b.txt", "notes"]
    assert os.path.islink(state / "aside" / "notes")
    assert done.written == 2


@pytest.mark.slow
def test_a_fifo_does_not_hold_up_a_checkpoint(places: Places) -> None:
    ws, _, _ = places
    os.mkfifo(ws / "pipe")
    (ws / "sub").mkdir()
    os.mkfifo(ws / "sub" / ".gitignore")  # git would wait on it for ever
    (ws / "sub" / "kept.txt").write_text("kept")
    (ws / "a.txt").write_text("A")
    taken = take(repo_of(places))
    assert taken.walked
    assert sorted(taken.listed) == [b"a.txt", b"sub/kept.txt"]
    assert taken.files == 2


def test_what_git_would_convert_is_kept_byte_for_byte(places: Places) -> None:
    ws, state, _ = places
    (ws / ".gitattributes").write_text("* text eol=crlf ident\n*.txt filter=evil\n")
    content = b"one\ntwo\r\n$Id$\n\x00binary"
    names = [b"a.txt", b"new\nline", b'tab\tand "quotes" \\', b"caf\xe9", b"dir/\xff\x01"]
    os.mkdir(ws / "dir")
    for name in names:
        (Path(os.fsdecode(ws)) / os.fsdecode(name)).write_bytes(content + name)
    repo = repo_of(places)
    then = tree(ws)
    taken = take(repo)
    for name in names:
        (Path(os.fsdecode(ws)) / os.fsdecode(name)).write_bytes(b"changed")
    rewind(repo, taken.commit, state / "aside")
    assert tree(ws) == then


def test_a_git_of_the_agents_own_is_neither_used_nor_stored(places: Places) -> None:
    ws, state, outside = places
    marker = outside / "ran"
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(ws)], check=True, env=env)
    for hook in ("fsmonitor", "hooksPath"):
        subprocess.run(
            ["git", "-C", str(ws), "config", f"core.{hook}", f"touch {marker}"], check=True, env=env
        )
    subprocess.run(["git", "init", "-q", str(ws / "inner")], check=True, env=env)
    (ws / "inner" / "theirs.txt").write_text("theirs")
    (ws / "sub").mkdir()
    (ws / "sub" / ".git").write_text(f"gitdir: {outside}\n")
    (ws / "sub" / "f.txt").write_text("f")
    (ws / "a.txt").write_text("A")
    repo = repo_of(places)
    taken = take(repo)
    assert sorted(taken.listed) == [b"a.txt", b"sub/f.txt"]
    (ws / "a.txt").write_text("changed")
    rewind(repo, taken.commit, state / "aside")
    assert (ws / "a.txt").read_text() == "A"
    assert (ws / ".git" / "config").exists()
    assert (ws / "inner" / "theirs.txt").exists()
    assert not marker.exists()


def test_files_past_the_size_limit_are_left_out_and_left_alone(places: Places) -> None:
    ws, state, _ = places
    for name, size in (("a", 4), ("b", 8), ("c", 2)):
        (ws / name).write_text(name * size)
    repo = repo_of(places)
    taken = take(repo, max_bytes=10)
    assert (taken.left_out, taken.files, taken.size) == ([b"b"], 2, 6)
    (ws / "b").write_text("today's b")
    (ws / "c").write_text("today's c")
    rewind(repo, taken.commit, state / "aside")
    assert [(ws / n).read_text() for n in "abc"] == ["aaaa", "today's b", "cc"]


def test_too_large_a_workspace_is_said_once(project: Project) -> None:
    (project.workspace / "big.bin").write_bytes(b"x" * 5000)
    ran = run_here(
        project,
        [Reply(text="one"), Reply(text="two"), Reply(text="three")],
        session={"max_turns": 1},
        supervisor={"max_restarts": 2},
        checkpoints={"max_bytes": 1000},
    )
    assert ran.returncode == 0, ran.stderr
    warned = [w["message"] for w in project.events("warning") if "checkpoint" in w["message"]]
    assert warned == [
        "the checkpoint of session 1 left out 1 file(s) past checkpoints.max_bytes (1,000 "
        "bytes): raise it, or name them in the workspace's .gitignore"
    ]
    assert [c["left_out"] for c in project.events("checkpoint")] == [1, 1, 1]


@pytest.mark.parametrize("broken", ["no git", "a corrupt repository"])
def test_a_failing_git_is_a_warning_and_the_run_goes_on(
    project: Project, broken: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if broken == "no git":
        # Every program on PATH but git.
        bin = tmp_path / "bin"
        bin.mkdir()
        for folder in os.environ["PATH"].split(os.pathsep):
            for program in Path(folder).glob("*") if Path(folder).is_dir() else ():
                if program.name != "git" and not (bin / program.name).exists():
                    (bin / program.name).symlink_to(program)
        monkeypatch.setenv("PATH", str(bin))
    else:
        (project.state / CHECKPOINTS).mkdir(parents=True)
        (project.state / CHECKPOINTS / "HEAD").write_text("garbage")
    ran = run_here(
        project,
        [Reply(text="one"), Reply(text="two")],
        session={"max_turns": 1},
        supervisor={"max_restarts": 1},
    )
    assert ran.returncode == 0, ran.stderr
    assert "run stopped: max_restarts" in ran.stdout
    warned = [w["message"] for w in project.events("warning") if "checkpoint" in w["message"]]
    assert len(warned) == 1
    assert warned[0].startswith("no checkpoint of the workspace at session 1 (git ")
    assert "\n" not in warned[0]
    assert not project.events("checkpoint")


@pytest.mark.slow
def test_a_rewind_refuses_while_a_run_holds_the_state_folder(project: Project) -> None:
    run_here(project, [Reply(text="one")], session={"max_turns": 1}, supervisor={"max_restarts": 0})
    with (project.state / LOCK).open("a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = project.run("rewind", "--session", "1")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1
    assert "is running on" in refused.stderr
    assert "stop it first" in refused.stderr


@pytest.mark.slow
def test_a_rewind_from_a_broken_repository_is_one_line(project: Project) -> None:
    run_here(project, [Reply(text="one")], session={"max_turns": 1}, supervisor={"max_restarts": 0})
    (project.workspace / "today.txt").write_text("today")
    shutil.rmtree(project.state / CHECKPOINTS / "objects")
    refused = project.run("rewind", "--session", "1")
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: the rewind to session 1 stopped (git ")
    assert refused.stderr.endswith(", having moved nothing\n")
    assert refused.stderr.count("\n") == 1
    assert (project.workspace / "today.txt").read_text() == "today"


def test_a_huge_file_is_left_out_unread(places: Places) -> None:
    ws, _, _ = places
    with (ws / "huge.bin").open("wb") as f:
        f.truncate(8 << 40)  # 8 TB, sparse: read whole, it would take hours
    (ws / "small.txt").write_text("small")
    taken = take(repo_of(places))
    assert (taken.left_out, taken.files) == ([b"huge.bin"], 1)
