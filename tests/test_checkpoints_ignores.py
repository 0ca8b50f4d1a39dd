"""A rewind decides what comes back and what goes by the ignore rules of the checkpoint it puts
back, never by today's `.gitignore` files: what was ignored then is left alone, what was held
then comes back, whether today's rules hide it or not. Afterwards a checkpoint holds exactly
what the rewound one held."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import anyio
import pytest

from ouroboros.checkpoints.git_store import Repo, Unlisted
from tests.test_checkpoints import tree
from tests.test_checkpoints_hostile import Places, places, repo_of, rewind, take

__all__ = ["places"]


def files(root: Path, names: dict[str, str]) -> None:
    for name, text in names.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def held_again(repo: Repo, commit: str) -> None:
    """A checkpoint taken now holds what `commit` held, file for file."""
    assert anyio.run(repo.tree, take(repo).commit) == anyio.run(repo.tree, commit)


def test_what_was_ignored_then_is_left_alone_whatever_today_ignores(places: Places) -> None:
    ws, state, _ = places
    then = {".gitignore": "build/\n*.log\n*.tmp\n", "a.txt": "A", "build/out.o": "o1"}
    files(ws, {**then, "debug.log": "log1", "x.tmp": "t1"})
    repo = repo_of(places)
    taken = take(repo)
    # Today's rules ignore only `*.tmp`: the build and the log would be listed.
    today = {".gitignore": "*.tmp\n", "a.txt": "A2", "build/out.o": "o2", "build/new.o": "n"}
    files(ws, {**today, "debug.log": "log2", "x.tmp": "t2"})
    done = rewind(repo, taken.commit, state / "aside")
    assert sorted(tree(state / "aside")) == [".gitignore", "a.txt"]
    assert {n: (ws / n).read_text() for n in ("a.txt", ".gitignore")} == {
        "a.txt": "A",
        ".gitignore": then[".gitignore"],
    }
    left = ("build/out.o", "build/new.o", "debug.log", "x.tmp")
    assert [(ws / n).read_text() for n in left] == ["o2", "n", "log2", "t2"]
    assert done.written == 2
    held_again(repo, taken.commit)


def test_what_was_held_then_comes_back_though_today_ignores_it(places: Places) -> None:
    ws, state, _ = places
    then = {"data.csv": "v1", "notes/n.md": "note", "keep.txt": "k"}
    files(ws, then)
    repo = repo_of(places)
    taken = take(repo)
    # Today's rules hide all three: one changed, one deleted, one as it was; a rule file of
    # `*` hides its folder and itself.
    files(ws, {".gitignore": "data.csv\nkeep.txt\n", "data.csv": "v2", "notes/.gitignore": "*\n"})
    (ws / "notes" / "n.md").unlink()
    rewind(repo, taken.commit, state / "aside")
    assert tree(ws) == {n: ("file", t.encode()) for n, t in then.items()}
    assert sorted(tree(state / "aside")) == [".gitignore", "data.csv", "notes/.gitignore"]
    held_again(repo, taken.commit)


def test_a_gitignore_deleted_since_comes_back_and_what_it_hid_stays(places: Places) -> None:
    ws, state, _ = places
    files(ws, {".gitignore": "cache/\n", "a.txt": "A", "cache/x": "x1"})
    repo = repo_of(places)
    taken = take(repo)
    (ws / ".gitignore").unlink()
    files(ws, {"cache/x": "x2", "cache/y": "y"})
    done = rewind(repo, taken.commit, state / "aside")
    assert (ws / ".gitignore").read_text() == "cache/\n"
    assert [(ws / "cache" / n).read_text() for n in "xy"] == ["x2", "y"]
    assert (done.written, done.moved) == (1, [])
    held_again(repo, taken.commit)


def test_a_gitignore_that_ignores_itself_is_held_and_put_back(places: Places) -> None:
    ws, state, _ = places
    files(ws, {".venv/.gitignore": "*\n", ".venv/lib/a.py": "a1", "a.txt": "A"})
    repo = repo_of(places)
    taken = take(repo)
    assert sorted(anyio.run(repo.tree, taken.commit)) == [b".venv/.gitignore", b"a.txt"]
    (ws / ".venv" / ".gitignore").unlink()
    files(ws, {".venv/lib/a.py": "a2"})
    done = rewind(repo, taken.commit, state / "aside")
    assert (ws / ".venv" / ".gitignore").read_text() == "*\n"
    assert (ws / ".venv" / "lib" / "a.py").read_text() == "a2"
    assert (done.written, done.moved) == (1, [])
    held_again(repo, taken.commit)


def test_rules_made_since_hide_nothing_made_since(places: Places) -> None:
    ws, state, _ = places
    files(ws, {"a.txt": "A"})
    repo = repo_of(places)
    then = tree(ws)
    taken = take(repo)
    made = {".gitignore": "new/\n", "new/f": "f", ".venv/.gitignore": "*\n", ".venv/b.py": "b"}
    files(ws, made)
    rewind(repo, taken.commit, state / "aside")
    assert tree(ws) == then
    assert sorted(tree(state / "aside")) == sorted(made)
    held_again(repo, taken.commit)


def test_a_rule_made_since_unhiding_a_folder_goes_before_the_rules_in_it(places: Places) -> None:
    ws, state, _ = places
    hidden = {"x/vendor/.gitignore": "*.o\n", "x/vendor/keep.txt": "mine"}
    files(ws, {".gitignore": "vendor/\n", **hidden})
    repo = repo_of(places)
    taken = take(repo)
    # Today's `x/.gitignore` brings `x/vendor/` back into the listing, its rules with it; once
    # it is gone, the checkpoint's rules hide that folder again: it stays as it is.
    files(ws, {"x/.gitignore": "!vendor/\n"})
    rewind(repo, taken.commit, state / "aside")
    assert sorted(tree(state / "aside")) == ["x/.gitignore"]
    assert {n: (ws / n).read_text() for n in hidden} == hidden
    held_again(repo, taken.commit)


def test_a_fifo_in_place_of_a_gitignore_today_hides_is_moved_aside(places: Places) -> None:
    ws, state, _ = places
    files(ws, {"sub/.gitignore": "*.o\n", "sub/a.txt": "A"})
    repo = repo_of(places)
    taken = take(repo)
    files(ws, {".gitignore": "sub/\n"})
    (ws / "sub" / ".gitignore").unlink()
    os.mkfifo(ws / "sub" / ".gitignore")  # git would wait on it for ever, once it read it
    rewind(repo, taken.commit, state / "aside")
    assert (ws / "sub" / ".gitignore").read_text() == "*.o\n"
    assert os.path.exists(state / "aside" / "sub" / ".gitignore")
    assert not (ws / ".gitignore").exists()
    held_again(repo, taken.commit)


@pytest.mark.slow
def test_a_fifo_today_hides_from_git_stops_the_rewind_in_its_time(places: Places) -> None:
    ws, state, _ = places
    files(ws, {"a.txt": "A"})
    repo = repo_of(places)
    taken = take(repo)
    files(ws, {".gitignore": "sub/\n", "a.txt": "A2"})
    (ws / "sub").mkdir()
    os.mkfifo(ws / "sub" / ".gitignore")  # read once today's rules are gone
    with pytest.raises(Unlisted, match="a FIFO where git reads"):  # in 10 s, not for ever
        rewind(repo, taken.commit, state / "aside")
    # Moved, not lost: the rewind says so, and a second one finds the FIFO where git reads.
    assert (state / "aside" / ".gitignore").read_text() == "sub/\n"
    assert os.path.exists(ws / "sub" / ".gitignore")


def test_a_checkpoint_of_an_earlier_harness_leaves_todays_self_ignoring_rules(
    places: Places,
) -> None:
    ws, state, _ = places
    files(ws, {"a.txt": "A"})
    repo = repo_of(places)
    taken = take(repo)
    # Its commit without the line saying it holds every `.gitignore`: such a file may have
    # been there then, unheld, and what it hid with it.
    tree_id = subprocess.run(
        ["git", "rev-parse", f"{taken.commit}^{{tree}}"],
        env=repo.env(),
        capture_output=True,
        check=True,
    ).stdout.strip()
    earlier = (
        subprocess.run(
            ["git", "commit-tree", tree_id, "-m", "session 1"],
            env=repo.env(),
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .strip()
    )
    venv = {".venv/.gitignore": "*\n", ".venv/lib/a.py": "a"}
    files(ws, {**venv, "a.txt": "A2"})
    rewind(repo, earlier, state / "aside")
    assert sorted(tree(state / "aside")) == ["a.txt"]
    assert {n: (ws / n).read_text() for n in venv} == venv
