"""Checkpoints and rewinds the workspace cannot break: a folder nested a thousand deep, a file
or link that became a folder, a listing git cannot make, a `.gitignore` of gigabytes, a rewind
killed part way, the harness's outputs brought back by a `.gitignore` line, a git that fails to
tidy up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ouroboros.checkpoints.git_store import GitFailed, Unlisted
from ouroboros.checkpoints.restore import prepare
from ouroboros.model.scripted import Reply, tool
from tests.conftest import Project, wait_for
from tests.inprocess import run_here
from tests.test_checkpoints import tree
from tests.test_checkpoints_hostile import Places, places, repo_of, rewind, take

__all__ = ["places"]

DEPTH = 1100
"""Deeper than Python's recursion limit (1,000)."""


@pytest.fixture
def deep(places: Places) -> Iterator[Path]:
    """The workspace's deepest folder: `a/a/...`, `DEPTH` of them (removed with `rm -rf`:
    pytest's own clean-up recurses, and fails on it)."""
    path = "/".join(["a"] * DEPTH)
    subprocess.run(["mkdir", "-p", path], cwd=places[0], check=True)
    yield places[0] / path
    subprocess.run(["rm", "-rf", "a"], cwd=places[0], check=True)
    subprocess.run(["rm", "-rf", "aside"], cwd=places[1], check=True)


@pytest.mark.slow
def test_a_deep_folder_is_walked_and_a_rewind_refuses_when_git_cannot_list(
    places: Places, deep: Path
) -> None:
    ws, state, _ = places
    (deep / "f.txt").write_text("deep")
    (ws / "b.txt").write_text("B")
    os.mkfifo(ws / ".gitignore")
    repo = repo_of(places)
    taken = take(repo)
    assert taken.walked
    assert taken.listed == [b"/".join([b"a"] * DEPTH) + b"/f.txt", b"b.txt"]
    assert taken.files == 2
    # A rewind would not know what the ignore rules leave alone: it changes nothing.
    (ws / "b.txt").write_text("today")
    with pytest.raises(Unlisted, match="a FIFO where git reads, such as a .gitignore"):
        anyio.run(prepare, repo, taken.commit, "stamp", 10**8)
    assert (ws / "b.txt").read_text() == "today"


@pytest.mark.slow
def test_a_deep_folder_and_a_fifo_at_a_session_start_are_a_warning(project: Project) -> None:
    planted = f"mkfifo .gitignore && mkdir -p $(printf 'a/%.0s' $(seq 1 {DEPTH})) && echo ok"
    steps = [Reply(tool_calls=[tool("shell_exec", command=planted)]), Reply(text="next")]
    try:
        ran = run_here(project, steps, session={"max_turns": 1}, supervisor={"max_restarts": 1})
    finally:
        subprocess.run(["rm", "-rf", "a"], cwd=project.workspace, check=True)
    assert ran.returncode == 0, ran.stderr
    assert "Traceback" not in ran.stderr
    assert [c["session"] for c in project.events("checkpoint")] == [1, 2]
    warned = [w["message"] for w in project.events("warning")]
    assert any(m.startswith("git could not list the workspace at session 2") for m in warned)


def test_a_file_and_a_link_that_became_folders_are_put_back(places: Places) -> None:
    ws, state, _ = places
    (ws / "d").write_text("was a file")
    (ws / "l").symlink_to("d")
    (ws / ".gitignore").write_text("*.log\n")
    then = tree(ws)
    repo = repo_of(places)
    taken = take(repo)
    for name in ("d", "l"):
        (ws / name).unlink()
        (ws / name).mkdir()
        (ws / name / "a.txt").write_text(f"today's {name}")
        (ws / name / "deeper").mkdir()
        (ws / name / "deeper" / "b.txt").write_text("listed")
    (ws / "d" / "kept.log").write_text("ignored, in a folder the rewind must move")
    done = rewind(repo, taken.commit, state / "aside")
    assert tree(ws) == then
    assert tree(state / "aside") == {
        "d/a.txt": ("file", b"today's d"),
        "d/deeper/b.txt": ("file", b"listed"),
        "d/kept.log": ("file", b"ignored, in a folder the rewind must move"),
        "l/a.txt": ("file", b"today's l"),
        "l/deeper/b.txt": ("file", b"listed"),
    }
    assert done.written == 2


@pytest.mark.slow
def test_a_nested_repository_is_left_out_of_a_walk(places: Places) -> None:
    ws, _, _ = places
    (ws / "sub").mkdir()
    subprocess.run(["git", "init", "-q", str(ws / "sub")], check=True)
    (ws / "sub" / "code.py").write_text("the agent's project")
    (ws / "other").mkdir()
    (ws / "other" / ".git").write_text("gitdir: /nowhere\n")
    (ws / "other" / "x.txt").write_text("x")
    (ws / "notes.md").write_text("notes")
    os.mkfifo(ws / ".gitignore")
    taken = take(repo_of(places))
    assert taken.walked
    assert taken.listed == [b"notes.md"]


def test_a_gitignore_of_gigabytes_cannot_take_the_machines_memory(places: Places) -> None:
    ws, _, _ = places
    with (ws / ".gitignore").open("wb") as f:
        f.truncate(2 << 30)  # sparse: git would read it whole into memory
    (ws / "a.txt").write_text("A")
    repo = repo_of(places)
    anyio.run(repo.ready)
    with pytest.raises(Unlisted, match="Out of memory"):
        anyio.run(repo.listing)
    taken = take(repo)
    assert taken.walked
    assert (taken.files, taken.left_out) == (1, [b".gitignore"])


def test_outputs_a_gitignore_brings_back_stay_out(places: Places) -> None:
    ws, _, _ = places
    (ws / ".outputs").mkdir()
    (ws / ".outputs" / "r1.txt").write_text("spilled")
    (ws / ".gitignore").write_text("!/.outputs/\n")
    taken = take(repo_of(places))
    assert taken.listed == [b".gitignore"]


def test_a_missing_object_is_one_line(places: Places) -> None:
    (places[0] / "a").write_text("x")
    repo = repo_of(places)
    take(repo)
    with pytest.raises(GitFailed, match="^object 0123456789012345678901234567890123456789 is"):
        anyio.run(repo.blobs, ["0123456789012345678901234567890123456789"])


@pytest.mark.slow
def test_a_failed_tidy_up_keeps_the_checkpoint(places: Places) -> None:
    ws, state, _ = places
    repo = repo_of(places)
    (ws / "f.txt").write_text("1")
    take(repo)
    with (repo.git_dir / "config").open("a") as config:
        # A pack each commit, and a gc once there are two.
        config.write("[fastimport]\n\tunpackLimit = 0\n[gc]\n\tautoPackLimit = 1\n")
    (repo.git_dir / "packed-refs.lock").write_text("")  # what a kill in a gc's pack-refs leaves
    for n in (2, 3):
        (ws / "f.txt").write_text(f"{n}")
        taken = take(repo)
    assert "pack-refs" in taken.unpacked
    shown = subprocess.run(
        ["git", "show", f"{taken.commit}:f.txt"], env=repo.env(), capture_output=True
    )
    assert shown.stdout == b"3"


def two_sessions(project: Project) -> None:
    """`a.txt` written v0 and v1 in session 1, v2 in session 2, left open by a run limit."""
    steps = [
        Reply(tool_calls=[tool("file_write", path="a.txt", content=f"v{n}")]) for n in range(3)
    ]
    ran = run_here(project, steps, session={"max_turns": 2}, supervisor={"max_total_turns": 3})
    assert ran.returncode == 0, ran.stderr


GIT_HELD = """#!/bin/sh
case "$*" in *"cat-file --batch"*) touch {mark}; sleep 600;; esac
exec {git} "$@"
"""
"""A git that stops in the rewind's first read of the checkpoint's files (after today's files
that differ have moved aside), for the test to kill the rewind there."""


@pytest.mark.slow
def test_a_rewind_killed_part_way_is_journalled_and_told(project: Project, tmp_path: Path) -> None:
    two_sessions(project)
    bin_dir, mark = tmp_path / "bin", tmp_path / "held"
    bin_dir.mkdir()
    git = subprocess.getoutput("command -v git")
    (bin_dir / "git").write_text(
        GIT_HELD.format(git=git, mark=mark)
    )  # git's environment is its own
    (bin_dir / "git").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    rewinding = subprocess.Popen(
        [sys.executable, "-m", "ouroboros", "rewind", "--session", "2"],
        cwd=project.root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(mark.exists, timeout=60)
    finally:
        os.killpg(rewinding.pid, signal.SIGKILL)
        rewinding.wait()
    assert mark.exists()
    kinds = [r["kind"] for r in project.records("journal.jsonl")]
    assert kinds[-1] == "rewinding"
    [began] = [r for r in project.records("journal.jsonl") if r["kind"] == "rewinding"]
    # What it moved before the kill is in the folder the record names.
    assert (Path(began["moved_aside"]) / "a.txt").read_text() == "v2"
    assert not (project.workspace / "a.txt").exists()
    assert "rewinding the workspace to the start of session 2" in project.run("tail").stdout
    status = project.run("status").stdout
    assert "a rewind to session 2 did not finish" in " ".join(status.split())

    again = run_here(project, [Reply(text="looking")], supervisor={"max_total_turns": 4})
    first = again.chat_requests()[0]["messages"]
    assert len(first) == 2  # the last step before the rewind is not carried into its workspace
    opening = str(first[1]["content"])
    assert "ended because the operator rewound the workspace" in opening
    assert "the rewind did not finish" in opening
    assert began["moved_aside"] in opening
    finished = project.run("rewind", "--session", "2")
    assert finished.returncode == 0, finished.stderr
    assert (project.workspace / "a.txt").read_text() == "v1"
    assert f"an earlier rewind did not finish: {began['moved_aside']}" in finished.stdout


@pytest.mark.slow
def test_each_cut_of_a_rewinds_journal_tells_the_next_session(project: Project) -> None:
    """A kill after any line of the rewind: none of the last session's step is carried on."""
    two_sessions(project)
    journal = project.state / "journal.jsonl"
    before = journal.read_bytes()
    assert project.run("rewind", "--session", "1").returncode == 0
    added = journal.read_bytes()[len(before) :].splitlines(keepends=True)
    assert [json.loads(line)["kind"] for line in added] == ["rewinding", "rewound"]
    for cut, said in ((1, "the rewind did not finish"), (2, "rewound to the start of session 1")):
        journal.write_bytes(before + b"".join(added[:cut]))
        (project.state / "journal.jsonl.snapshot").unlink()  # of a journal longer than this
        again = run_here(project, [Reply(text="looking")], supervisor={"max_total_turns": 4})
        assert again.chat_requests(), (again.stdout, again.stderr)
        first = again.chat_requests()[0]["messages"]
        assert len(first) == 2
        assert said in str(first[1]["content"])
